// flashAttentionForward/Backward on the CPU: against the materialised composition of ops it fuses
// (batchedGemm for q·kᵀ, softmaxForward with the same masks, batchedGemm with v, and for the backward
// softmaxBackward and the three gradient GEMMs), against central finite differences, and the edge
// cases of the contract (fully masked rows, GQA head mapping, default scale, argument checks).

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import type { Tensor } from '../../../src/tensor.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();

interface Problem {
  B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number;
  scale?: number; causal?: boolean; keyLengths?: number[];
}

function inputs(p: Problem, seed: number) {
  const qn = p.B * p.Hq * p.Lq * p.d, kn = p.B * p.Hkv * p.Lk * p.d;
  return {
    q: randomValues(seed, qn, -1.5, 1.5), k: randomValues(seed + 1, kn, -1.5, 1.5), v: randomValues(seed + 2, kn),
    dOut: randomValues(seed + 3, qn),
  };
}

function options(p: Problem): { scale?: number; causal?: boolean; keyLengths?: Tensor } {
  return {
    ...(p.scale !== undefined ? { scale: p.scale } : {}), causal: p.causal ?? false,
    ...(p.keyLengths ? { keyLengths: backend.fromArray(p.keyLengths, [p.B], 'i32') } : {}),
  };
}

function fused(p: Problem, x: ReturnType<typeof inputs>) {
  const q = backend.fromArray(x.q, [p.B, p.Hq, p.Lq, p.d], 'f32');
  const k = backend.fromArray(x.k, [p.B, p.Hkv, p.Lk, p.d], 'f32');
  const v = backend.fromArray(x.v, [p.B, p.Hkv, p.Lk, p.d], 'f32');
  const out = backend.empty([p.B, p.Hq, p.Lq, p.d], 'f32'), lse = backend.empty([p.B, p.Hq, p.Lq], 'f32');
  backend.fill(out, NaN); backend.fill(lse, NaN);
  backend.flashAttentionForward({ q, k, v, out, lse, ...options(p) });
  const dq = backend.empty([p.B, p.Hq, p.Lq, p.d], 'f32'), dk = backend.empty([p.B, p.Hkv, p.Lk, p.d], 'f32'), dv = backend.empty([p.B, p.Hkv, p.Lk, p.d], 'f32');
  for (const t of [dq, dk, dv]) backend.fill(t, NaN);
  backend.flashAttentionBackward({ q, k, v, out, dOut: backend.fromArray(x.dOut, [p.B, p.Hq, p.Lq, p.d], 'f32'), lse, dq, dk, dv, ...options(p) });
  const get = (t: Tensor) => Array.from(backend.download(t));
  return { out: get(out), lse: get(lse), dq: get(dq), dk: get(dk), dv: get(dv) };
}

/** k or v [B, Hkv, L, d] repeated to [B, Hq, L, d] (query head h reads kv head h / group). */
function expandHeads(values: readonly number[], p: Problem, L: number): number[] {
  const group = p.Hq / p.Hkv, size = L * p.d, result: number[] = [];
  for (let b = 0; b < p.B; b++) for (let h = 0; h < p.Hq; h++) {
    const start = (b * p.Hkv + Math.floor(h / group)) * size;
    result.push(...values.slice(start, start + size));
  }
  return result;
}

/** [B, Hq, L, d] summed over each group of query heads → [B, Hkv, L, d]. */
function reduceHeads(values: readonly number[], p: Problem, L: number): number[] {
  const group = p.Hq / p.Hkv, size = L * p.d, result = new Array<number>(p.B * p.Hkv * size).fill(0);
  for (let b = 0; b < p.B; b++) for (let h = 0; h < p.Hq; h++) {
    const from = (b * p.Hq + h) * size, to = (b * p.Hkv + Math.floor(h / group)) * size;
    for (let e = 0; e < size; e++) result[to + e]! += values[from + e]!;
  }
  return result;
}

/** The unfused computation through the backend's own softmax and GEMM ops, plus lse by hand. */
function materialised(p: Problem, x: ReturnType<typeof inputs>) {
  const n = p.B * p.Hq, scale = p.scale ?? 1 / Math.sqrt(p.d);
  const q = backend.fromArray(x.q, [n, p.Lq, p.d], 'f32');
  const k = backend.fromArray(expandHeads(x.k, p, p.Lk), [n, p.Lk, p.d], 'f32');
  const v = backend.fromArray(expandHeads(x.v, p, p.Lk), [n, p.Lk, p.d], 'f32');
  const dOut = backend.fromArray(x.dOut, [n, p.Lq, p.d], 'f32');
  const scores = backend.empty([n, p.Lq, p.Lk], 'f32');
  backend.batchedGemm({ a: q, b: k, out: scores, transB: true });
  const probs = backend.empty([p.B, p.Hq, p.Lq, p.Lk], 'f32');
  backend.softmaxForward({ x: backend.view(scores, 0, [p.B, p.Hq, p.Lq, p.Lk]), out: probs, ...options({ ...p, scale }) });
  const P = backend.view(probs, 0, [n, p.Lq, p.Lk]);
  const out = backend.empty([n, p.Lq, p.d], 'f32');
  backend.batchedGemm({ a: P, b: v, out });
  // Backward: dP = dOut·vᵀ; scale·dS = softmaxBackward(P, dP, scale); dq = (scale·dS)·k; dk = (scale·dS)ᵀ·q; dv = Pᵀ·dOut.
  const dP = backend.empty([n, p.Lq, p.Lk], 'f32');
  backend.batchedGemm({ a: dOut, b: v, out: dP, transB: true });
  const dS = backend.empty([p.B, p.Hq, p.Lq, p.Lk], 'f32');
  backend.softmaxBackward({ y: probs, dY: backend.view(dP, 0, [p.B, p.Hq, p.Lq, p.Lk]), dX: dS, scale });
  const dS3 = backend.view(dS, 0, [n, p.Lq, p.Lk]);
  const dq = backend.empty([n, p.Lq, p.d], 'f32'), dk = backend.empty([n, p.Lk, p.d], 'f32'), dv = backend.empty([n, p.Lk, p.d], 'f32');
  backend.batchedGemm({ a: dS3, b: k, out: dq });
  backend.batchedGemm({ a: dS3, b: q, out: dk, transA: true });
  backend.batchedGemm({ a: P, b: dOut, out: dv, transA: true });
  // lse over the scores the softmax saw: visible keys only.
  const s = Array.from(backend.download(scores)), lse: number[] = [];
  for (let b = 0; b < p.B; b++) for (let h = 0; h < p.Hq; h++) for (let i = 0; i < p.Lq; i++) {
    const visible = Math.max(0, Math.min(p.Lk, p.keyLengths ? p.keyLengths[b]! : p.Lk, p.causal ? i + p.Lk - p.Lq + 1 : p.Lk));
    const row = ((b * p.Hq + h) * p.Lq + i) * p.Lk;
    let max = -Infinity;
    for (let j = 0; j < visible; j++) max = Math.max(max, scale * s[row + j]!);
    let sum = 0;
    for (let j = 0; j < visible; j++) sum += Math.exp(scale * s[row + j]! - max);
    lse.push(visible === 0 ? -Infinity : max + Math.log(sum));
  }
  const get = (t: Tensor) => Array.from(backend.download(t));
  return { out: get(out), lse, dq: get(dq), dk: reduceHeads(get(dk), p, p.Lk), dv: reduceHeads(get(dv), p, p.Lk) };
}

const PROBLEMS: [string, Problem][] = [
  ['plain', { B: 2, Hq: 2, Hkv: 2, Lq: 5, Lk: 5, d: 4 }],
  ['causal, Lq < Lk (decoding with a cache)', { B: 1, Hq: 3, Hkv: 3, Lq: 3, Lk: 7, d: 5, causal: true, scale: 0.3 }],
  ['padding', { B: 3, Hq: 2, Hkv: 1, Lq: 4, Lk: 6, d: 3, keyLengths: [6, 2, 4] }],
  ['GQA 8:2, causal and padded', { B: 2, Hq: 8, Hkv: 2, Lq: 6, Lk: 6, d: 4, causal: true, keyLengths: [5, 6] }],
  ['Lq > Lk causal: the first rows see nothing', { B: 1, Hq: 2, Hkv: 1, Lq: 6, Lk: 3, d: 4, causal: true }],
  ['a batch with no keys', { B: 2, Hq: 2, Hkv: 2, Lq: 3, Lk: 4, d: 2, keyLengths: [0, 3] }],
];

describe('flashAttention against the materialised softmax and GEMMs', () => {
  for (const [what, p] of PROBLEMS) {
    test(what, () => {
      const x = inputs(p, 11 + p.Lq * 7 + p.Hq);
      const got = fused(p, x), want = materialised(p, x);
      assertClose(got.out, want.out, 1e-5, 'out');
      assert.equal(got.lse.length, want.lse.length);
      got.lse.forEach((l, i) => {
        if (want.lse[i] === -Infinity) assert.equal(l, -Infinity, `lse[${i}]`);
        else assertClose([l], [want.lse[i]!], 1e-5, `lse[${i}]`);
      });
      assertClose(got.dq, want.dq, 1e-5, 'dq');
      assertClose(got.dk, want.dk, 1e-5, 'dk');
      assertClose(got.dv, want.dv, 1e-5, 'dv');
    });
  }

  test('a fully masked row gives out = 0 and lse = −∞, and no gradient flows through it', () => {
    const p: Problem = { B: 1, Hq: 1, Hkv: 1, Lq: 4, Lk: 2, d: 3, causal: true };
    const got = fused(p, inputs(p, 5));
    // Rows 0 and 1 see j <= i + (2 − 4) < 0: nothing.
    assert.deepEqual(got.out.slice(0, 6), [0, 0, 0, 0, 0, 0]);
    assert.deepEqual(got.lse.slice(0, 2), [-Infinity, -Infinity]);
    assert.deepEqual(got.dq.slice(0, 6), [0, 0, 0, 0, 0, 0]);
    assert.ok(got.lse.slice(2).every(Number.isFinite));
  });

  test('the default scale is 1/sqrt(d)', () => {
    const p: Problem = { B: 1, Hq: 2, Hkv: 1, Lq: 3, Lk: 4, d: 9 };
    const x = inputs(p, 77);
    assertClose(fused(p, x).out, fused({ ...p, scale: 1 / 3 }, x).out, 0, 'out');
  });
});

describe('flashAttentionBackward against finite differences', () => {
  for (const [what, p] of [PROBLEMS[1]!, PROBLEMS[3]!, PROBLEMS[4]!]) {
    test(what, () => {
      const small: Problem = { ...p, B: Math.min(p.B, 2), d: Math.min(p.d, 3) };
      const x = inputs(small, 23);
      const weights = randomValues(99, x.dOut.length);
      const grads = fused(small, { ...x, dOut: weights });
      // f32 storage of the perturbed inputs: steps of 1e-2 keep the rounding noise small.
      const loss = (name: 'q' | 'k' | 'v') => (point: number[]) => weightedSum(fused(small, { ...x, [name]: point }).out, weights);
      assertClose(grads.dq, numericGradient(loss('q'), x.q), 2e-3, 'dq');
      assertClose(grads.dk, numericGradient(loss('k'), x.k), 2e-3, 'dk');
      assertClose(grads.dv, numericGradient(loss('v'), x.v), 2e-3, 'dv');
    });
  }
});

describe('flashAttention in reduced precision', () => {
  test('bf16 outputs are the f64 results rounded once', () => {
    const p: Problem = { B: 1, Hq: 2, Hkv: 2, Lq: 3, Lk: 5, d: 4, causal: true };
    const x = inputs(p, 3);
    const mk = (values: number[], shape: number[]) => backend.fromArray(values, shape, 'bf16');
    const q = mk(x.q, [1, 2, 3, 4]), k = mk(x.k, [1, 2, 5, 4]), v = mk(x.v, [1, 2, 5, 4]);
    const out = backend.empty([1, 2, 3, 4], 'bf16'), lse = backend.empty([1, 2, 3], 'f32');
    backend.flashAttentionForward({ q, k, v, out, lse, causal: true });
    // The same computation on the bf16-rounded inputs held as f32.
    const rounded = (t: Tensor) => Array.from(backend.download(t));
    const ref = fused(p, { q: rounded(q), k: rounded(k), v: rounded(v), dOut: x.dOut });
    assertClose(Array.from(backend.download(out)), ref.out, 8e-3, 'out');
    assertClose(Array.from(backend.download(lse)), ref.lse, 1e-6, 'lse');
  });
});

describe('argument checks', () => {
  const q = backend.empty([2, 4, 3, 8], 'f16'), k = backend.empty([2, 2, 5, 8], 'f16'), v = backend.empty([2, 2, 5, 8], 'f16');
  const out = backend.empty([2, 4, 3, 8], 'f16'), lse = backend.empty([2, 4, 3], 'f32');
  const fwd = 'flashAttentionForward', bwd = 'flashAttentionBackward';
  test('shapes, dtypes, heads and options', () => {
    assertRejects(() => backend.flashAttentionForward({ q, k: backend.empty([2, 2, 5, 4], 'f16'), v, out, lse }), fwd, 'k', ShapeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v: backend.empty([2, 2, 6, 8], 'f16'), out, lse }), fwd, 'v', ShapeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out: backend.empty([2, 4, 3, 8], 'bf16'), lse }), fwd, 'out', DTypeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out, lse: backend.empty([2, 4, 3], 'f16') }), fwd, 'lse', DTypeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out, lse: backend.empty([2, 4, 4], 'f32') }), fwd, 'lse', ShapeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out, lse, keyLengths: backend.empty([3], 'i32') }), fwd, 'keyLengths', ShapeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out, lse, keyLengths: backend.empty([2], 'f32') }), fwd, 'keyLengths', DTypeError);
    assertRejects(() => backend.flashAttentionForward({ q, k, v, out, lse, scale: Infinity }), fwd, 'scale', ArgumentError);
    const k3 = backend.empty([2, 3, 5, 8], 'f16');
    assert.throws(() => backend.flashAttentionForward({ q, k: k3, v: k3, out, lse }), (e: unknown) => e instanceof ArgumentError && /^flashAttentionForward: the query heads Hq = 4 must be a positive multiple of the kv heads Hkv = 3/.test(e.message));
    assertRejects(() => backend.flashAttentionBackward({ q, k, v, out, dOut: out, lse, dq: out, dk: k, dv: backend.empty([2, 2, 5, 8], 'f32') }), bwd, 'dv', DTypeError);
    assertRejects(() => backend.flashAttentionBackward({ q, k, v, out, dOut: out, lse, dq: backend.empty([2, 4, 3, 7], 'f16'), dk: k, dv: v }), bwd, 'dq', ShapeError);
    assertRejects(() => backend.flashAttentionBackward({ q, k, v, out, dOut: backend.empty([2, 4, 2, 8], 'f16'), lse, dq: out, dk: k, dv: v }), bwd, 'dOut', ShapeError);
  });
});
