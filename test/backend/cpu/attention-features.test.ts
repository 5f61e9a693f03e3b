// The fused attention op's optional features on the CPU reference: attention dropout (against the
// materialised composition softmax → dropout op → P·v, whose mask the op must reproduce, and a
// backward written out here from an explicit mask), and packed variable-length sequences
// (flashAttentionForward/Backward with cuSeqlens, against the dense op run on each sequence alone, and against
// an explicit reference with dropout). Argument errors name the problem.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DropoutArgs } from '../../../src/backend/backend.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { dropoutMask } from '../../../src/backend/rng.js';
import { ArgumentError } from '../../../src/errors.js';
import type { HostArray } from '../../../src/tensor.js';
import { Rng } from '../../../src/testing/random.js';

const backend = new CpuBackend();

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

interface Dense { B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; causal: boolean; keyLengths?: number[] }

function denseInputs(p: Dense, rng: Rng) {
  return {
    q: rng.floats(p.B * p.Hq * p.Lq * p.d), k: rng.floats(p.B * p.Hkv * p.Lk * p.d), v: rng.floats(p.B * p.Hkv * p.Lk * p.d),
    dOut: rng.floats(p.B * p.Hq * p.Lq * p.d),
  };
}

/** The fused op on the CPU (f32): out, lse and, with `backward`, dq, dk, dv. */
function runDense(p: Dense, x: ReturnType<typeof denseInputs>, dropout?: DropoutArgs) {
  const qs = [p.B, p.Hq, p.Lq, p.d], kvs = [p.B, p.Hkv, p.Lk, p.d];
  const q = backend.fromArray(x.q, qs, 'f32'), k = backend.fromArray(x.k, kvs, 'f32'), v = backend.fromArray(x.v, kvs, 'f32');
  const out = backend.empty(qs, 'f32'), lse = backend.empty([p.B, p.Hq, p.Lq], 'f32');
  const keyLengths = p.keyLengths ? { keyLengths: backend.fromArray(Int32Array.from(p.keyLengths), [p.B], 'i32') } : {};
  const extra = { causal: p.causal, ...keyLengths, ...(dropout ? { dropout } : {}) };
  backend.flashAttentionForward({ q, k, v, out, lse, ...extra });
  const dOut = backend.fromArray(x.dOut, qs, 'f32');
  const dq = backend.empty(qs, 'f32'), dk = backend.empty(kvs, 'f32'), dv = backend.empty(kvs, 'f32');
  backend.flashAttentionBackward({ q, k, v, out, dOut, lse, dq, dk, dv, ...extra });
  return { out: backend.download(out), lse: backend.download(lse), dq: backend.download(dq), dk: backend.download(dk), dv: backend.download(dv) };
}

/**
 * Attention written out in f64 with an explicit keep mask: keep(b, h, i, j) → boolean. P is the
 * softmax over visible keys; out = (P ⊙ z/(1−p))·v; the gradients as derived in backend.ts.
 */
function explicitAttention(p: Dense, x: ReturnType<typeof denseInputs>, keep: (b: number, h: number, i: number, j: number) => boolean, rate: number) {
  const { B, Hq, Hkv, Lq, Lk, d } = p, group = Hq / Hkv, scale = 1 / Math.sqrt(d), r = 1 / (1 - rate);
  const out = new Float64Array(B * Hq * Lq * d), dq = new Float64Array(out.length);
  const dk = new Float64Array(B * Hkv * Lk * d), dv = new Float64Array(dk.length);
  for (let b = 0; b < B; b++) for (let h = 0; h < Hq; h++) for (let i = 0; i < Lq; i++) {
    const n = Math.max(0, Math.min(Lk, p.keyLengths?.[b] ?? Lk, p.causal ? i + Lk - Lq + 1 : Lk));
    if (n === 0) continue;
    const qa = ((b * Hq + h) * Lq + i) * d, g = Math.floor(h / group);
    const ka = (j: number) => ((b * Hkv + g) * Lk + j) * d;
    const s = Array.from({ length: n }, (_, j) => { let t = 0; for (let c = 0; c < d; c++) t += x.q[qa + c]! * x.k[ka(j) + c]!; return scale * t; });
    const max = Math.max(...s);
    const e = s.map((t) => Math.exp(t - max)), sum = e.reduce((a, c) => a + c, 0);
    const P = e.map((t) => t / sum), z = P.map((_, j) => (keep(b, h, i, j) ? r : 0));
    for (let j = 0; j < n; j++) for (let c = 0; c < d; c++) out[qa + c]! += P[j]! * z[j]! * x.v[ka(j) + c]!;
    let D = 0;
    for (let c = 0; c < d; c++) D += x.dOut[qa + c]! * out[qa + c]!;
    for (let j = 0; j < n; j++) {
      let dPd = 0;
      for (let c = 0; c < d; c++) dPd += x.dOut[qa + c]! * x.v[ka(j) + c]!;
      const dS = P[j]! * (z[j]! * dPd - D);
      for (let c = 0; c < d; c++) {
        dq[qa + c]! += scale * dS * x.k[ka(j) + c]!;
        dk[ka(j) + c]! += scale * dS * x.q[qa + c]!;
        dv[ka(j) + c]! += P[j]! * z[j]! * x.dOut[qa + c]!;
      }
    }
  }
  return { out, dq, dk, dv };
}

test('dropout: the fused op equals softmax → dropout op → P·v (the same mask), lse is the undropped one', () => {
  const p: Dense = { B: 2, Hq: 4, Hkv: 2, Lq: 9, Lk: 13, d: 8, causal: true, keyLengths: [13, 6] };
  const x = denseInputs(p, new Rng(11));
  const dropout: DropoutArgs = { p: 0.3, seed: 0x1234_5678_9abcn, offset: 77n };
  const fused = runDense(p, x, dropout), plain = runDense(p, x);
  assert.deepEqual(fused.lse, plain.lse, 'dropout must not change lse');
  assert.ok(maxAbsDiff(fused.out, plain.out) > 1e-2, 'p = 0.3 must change the output');

  // The materialised composition with the standalone dropout op (GQA: each query head reads kv head h / 2).
  const { B, Hq, Hkv, Lq, Lk, d } = p;
  const scores = backend.empty([B, Hq, Lq, Lk], 'f32');
  const kRep = new Float32Array(B * Hq * Lk * d), vRep = new Float32Array(kRep.length);
  for (let b = 0; b < B; b++) for (let h = 0; h < Hq; h++) {
    const src = (b * Hkv + Math.floor(h / 2)) * Lk * d, dst = (b * Hq + h) * Lk * d;
    kRep.set(x.k.subarray(src, src + Lk * d), dst); vRep.set(x.v.subarray(src, src + Lk * d), dst);
  }
  const bh = (t: ReturnType<typeof backend.empty>, rows: number, cols: number) => backend.view(t, 0, [B * Hq, rows, cols]);
  const q = backend.fromArray(x.q, [B, Hq, Lq, d], 'f32'), k = backend.fromArray(kRep, [B, Hq, Lk, d], 'f32'), v = backend.fromArray(vRep, [B, Hq, Lk, d], 'f32');
  backend.batchedGemm({ a: bh(q, Lq, d), b: bh(k, Lk, d), out: bh(scores, Lq, Lk), transB: true });
  backend.softmaxForward({ x: scores, out: scores, causal: true, scale: 1 / Math.sqrt(d), keyLengths: backend.fromArray(Int32Array.from(p.keyLengths!), [B], 'i32') });
  const dropped = backend.empty([B, Hq, Lq, Lk], 'f32'), mask = backend.empty([B, Hq, Lq, Lk], 'u8');
  backend.dropout({ x: scores, out: dropped, mask, ...dropout });
  const out = backend.empty([B, Hq, Lq, d], 'f32');
  backend.batchedGemm({ a: bh(dropped, Lq, Lk), b: bh(v, Lk, d), out: bh(out, Lq, d) });
  assert.ok(maxAbsDiff(fused.out, backend.download(out)) < 1e-5, `out differs from the materialised path by ${maxAbsDiff(fused.out, backend.download(out))}`);
});

test('dropout: the backward matches attention written out with the explicit rng.ts mask, and offsetBase shifts the draw', () => {
  for (const p of [
    { B: 2, Hq: 2, Hkv: 1, Lq: 7, Lk: 11, d: 8, causal: false, keyLengths: [11, 4] },
    { B: 1, Hq: 3, Hkv: 3, Lq: 12, Lk: 12, d: 16, causal: true },
  ] as Dense[]) {
    const x = denseInputs(p, new Rng(5 + p.Lq));
    const dropout: DropoutArgs = { p: 0.25, seed: 99n, offset: 1000n };
    const mask = new Uint8Array(p.B * p.Hq * p.Lq * p.Lk);
    dropoutMask(mask, dropout.p, dropout.seed, dropout.offset);
    const ref = explicitAttention(p, x, (b, h, i, j) => mask[((b * p.Hq + h) * p.Lq + i) * p.Lk + j] === 1, dropout.p);
    const got = runDense(p, x, dropout);
    for (const name of ['out', 'dq', 'dk', 'dv'] as const) {
      assert.ok(maxAbsDiff(got[name], ref[name]) < 1e-5, `${name} differs from the explicit reference by ${maxAbsDiff(got[name], ref[name])}`);
    }
    // offset 1000 = offset 400 plus a device base of 600 (graph replays change only the base).
    const base = backend.fromArray(new Int32Array([600, 0]), [2], 'i32');
    const shifted = runDense(p, x, { ...dropout, offset: 400n, offsetBase: base });
    for (const name of ['out', 'dq', 'dk', 'dv'] as const) assert.deepEqual(shifted[name], got[name], `${name} with offsetBase`);
  }
});

test('dropout arguments are checked', () => {
  const p: Dense = { B: 1, Hq: 1, Hkv: 1, Lq: 2, Lk: 2, d: 4, causal: false };
  const x = denseInputs(p, new Rng(1));
  assert.throws(() => runDense(p, x, { p: 1, seed: 1n, offset: 0n }), (e: unknown) => e instanceof Error && /flashAttentionForward: 'p' must be in \[0, 1\)/.test(e.message));
  assert.throws(() => runDense(p, x, { p: 0.1, seed: -1n, offset: 0n }), /'seed' must be a bigint/);
  // p = 0 is dropout off: bit-identical to no dropout argument.
  assert.deepEqual(runDense(p, x, { p: 0, seed: 1n, offset: 0n }), runDense(p, x));
});

// --- packed sequences -------------------------------------------------------------------------------------

interface Packed { lengthsQ: number[]; lengthsK: number[]; Hq: number; Hkv: number; d: number; causal: boolean }

const cumulative = (lengths: number[]): Int32Array => Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, b) => a + b, 0))]);

function packedInputs(p: Packed, rng: Rng) {
  const tq = p.lengthsQ.reduce((a, b) => a + b, 0), tk = p.lengthsK.reduce((a, b) => a + b, 0);
  return { tq, tk, q: rng.floats(tq * p.Hq * p.d), k: rng.floats(tk * p.Hkv * p.d), v: rng.floats(tk * p.Hkv * p.d), dOut: rng.floats(tq * p.Hq * p.d) };
}

function runPacked(p: Packed, x: ReturnType<typeof packedInputs>, dropout?: DropoutArgs) {
  const qs = [x.tq, p.Hq, p.d], kvs = [x.tk, p.Hkv, p.d];
  const q = backend.fromArray(x.q, qs, 'f32'), k = backend.fromArray(x.k, kvs, 'f32'), v = backend.fromArray(x.v, kvs, 'f32');
  const out = backend.empty(qs, 'f32'), lse = backend.empty([p.Hq, x.tq], 'f32');
  const common = {
    cuSeqlensQ: backend.fromArray(cumulative(p.lengthsQ), [p.lengthsQ.length + 1], 'i32'),
    cuSeqlensK: backend.fromArray(cumulative(p.lengthsK), [p.lengthsK.length + 1], 'i32'),
    maxSeqlenQ: Math.max(...p.lengthsQ), maxSeqlenK: Math.max(...p.lengthsK), causal: p.causal, ...(dropout ? { dropout } : {}),
  };
  backend.flashAttentionForward({ q, k, v, out, lse, ...common });
  const dOut = backend.fromArray(x.dOut, qs, 'f32');
  const dq = backend.empty(qs, 'f32'), dk = backend.empty(kvs, 'f32'), dv = backend.empty(kvs, 'f32');
  backend.flashAttentionBackward({ q, k, v, out, dOut, lse, dq, dk, dv, ...common });
  return { out: backend.download(out), lse: backend.download(lse), dq: backend.download(dq), dk: backend.download(dk), dv: backend.download(dv) };
}

/** Rows [start, start + len) of a packed [total, H, d] array as a dense [1, H, len, d] one, and back. */
function unpack(a: HostArray, start: number, len: number, H: number, d: number): Float32Array {
  const r = new Float32Array(H * len * d);
  for (let t = 0; t < len; t++) for (let h = 0; h < H; h++) for (let c = 0; c < d; c++) r[(h * len + t) * d + c] = a[((start + t) * H + h) * d + c]!;
  return r;
}

test('packed sequences equal the dense op run on each sequence alone (forward and backward, GQA, causal, Lq ≠ Lk, an empty sequence)', () => {
  for (const p of [
    { lengthsQ: [5, 0, 9, 3], lengthsK: [5, 0, 9, 3], Hq: 4, Hkv: 2, d: 8, causal: true },
    { lengthsQ: [4, 7, 1], lengthsK: [6, 3, 8], Hq: 2, Hkv: 1, d: 16, causal: true },
    { lengthsQ: [4, 7], lengthsK: [0, 5], Hq: 2, Hkv: 2, d: 8, causal: false },
  ] as Packed[]) {
    const x = packedInputs(p, new Rng(3 + p.d));
    const got = runPacked(p, x);
    const cuQ = cumulative(p.lengthsQ), cuK = cumulative(p.lengthsK);
    p.lengthsQ.forEach((Lq, b) => {
      const Lk = p.lengthsK[b]!, qStart = cuQ[b]!, kStart = cuK[b]!;
      const dense: Dense = { B: 1, Hq: p.Hq, Hkv: p.Hkv, Lq, Lk, d: p.d, causal: p.causal };
      const seq = runDense(dense, {
        q: unpack(x.q, qStart, Lq, p.Hq, p.d), k: unpack(x.k, kStart, Lk, p.Hkv, p.d), v: unpack(x.v, kStart, Lk, p.Hkv, p.d),
        dOut: unpack(x.dOut, qStart, Lq, p.Hq, p.d),
      });
      const where = `sequence ${b} (Lq ${Lq}, Lk ${Lk})`;
      assert.deepEqual(unpack(got.out, qStart, Lq, p.Hq, p.d), seq.out, `out of ${where}`);
      assert.deepEqual(unpack(got.dq, qStart, Lq, p.Hq, p.d), seq.dq, `dq of ${where}`);
      assert.deepEqual(unpack(got.dk, kStart, Lk, p.Hkv, p.d), seq.dk, `dk of ${where}`);
      assert.deepEqual(unpack(got.dv, kStart, Lk, p.Hkv, p.d), seq.dv, `dv of ${where}`);
      const lse = Float32Array.from({ length: p.Hq * Lq }, (_, r) => got.lse[Math.floor(r / Lq) * x.tq + qStart + (r % Lq)]!);
      assert.deepEqual(lse, seq.lse, `lse of ${where}`);
    });
  }
});

test('packed sequences with dropout: element (b, h, i, j) is rng.ts element (h·totalQ + cuSeqlensQ[b] + i)·S + j, S = maxSeqlenK rounded up to 8', () => {
  const p: Packed = { lengthsQ: [6, 3, 10], lengthsK: [6, 3, 10], Hq: 2, Hkv: 1, d: 8, causal: true };
  const x = packedInputs(p, new Rng(21));
  const dropout: DropoutArgs = { p: 0.2, seed: 4242n, offset: 8n };
  const S = 16, mask = new Uint8Array(p.Hq * x.tq * S);
  dropoutMask(mask, dropout.p, dropout.seed, dropout.offset);
  const got = runPacked(p, x, dropout);
  const cuQ = cumulative(p.lengthsQ);
  p.lengthsQ.forEach((L, b) => {
    const dense: Dense = { B: 1, Hq: p.Hq, Hkv: p.Hkv, Lq: L, Lk: L, d: p.d, causal: true };
    const seqInputs = {
      q: unpack(x.q, cuQ[b]!, L, p.Hq, p.d), k: unpack(x.k, cuQ[b]!, L, p.Hkv, p.d), v: unpack(x.v, cuQ[b]!, L, p.Hkv, p.d),
      dOut: unpack(x.dOut, cuQ[b]!, L, p.Hq, p.d),
    };
    const ref = explicitAttention(dense, seqInputs, (_b, h, i, j) => mask[(h * x.tq + cuQ[b]! + i) * S + j] === 1, dropout.p);
    for (const [name, rows, H] of [['out', cuQ[b]!, p.Hq], ['dq', cuQ[b]!, p.Hq], ['dk', cuQ[b]!, p.Hkv], ['dv', cuQ[b]!, p.Hkv]] as const) {
      const diff = maxAbsDiff(unpack(got[name], rows, L, H, p.d), Float32Array.from(ref[name]));
      assert.ok(diff < 1e-5, `${name} of sequence ${b} differs from the explicit reference by ${diff}`);
    }
  });
});

test('packed sequences: bad offsets and shapes are refused naming the problem', () => {
  const p: Packed = { lengthsQ: [3, 2], lengthsK: [3, 2], Hq: 2, Hkv: 2, d: 4, causal: false };
  const x = packedInputs(p, new Rng(2));
  const q = backend.fromArray(x.q, [5, 2, 4], 'f32'), out = backend.empty([5, 2, 4], 'f32'), lse = backend.empty([2, 5], 'f32');
  const call = (cu: number[], maxSeqlen = 3, lseT = lse) => backend.flashAttentionForward({
    q, k: q, v: q, out, lse: lseT, cuSeqlensQ: backend.fromArray(Int32Array.from(cu), [cu.length], 'i32'),
    cuSeqlensK: backend.fromArray(Int32Array.from(cu), [cu.length], 'i32'), maxSeqlenQ: maxSeqlen, maxSeqlenK: maxSeqlen,
  });
  assert.throws(() => call([0, 3, 4]), (e: unknown) => e instanceof ArgumentError && /'cuSeqlensQ' must run from 0 to 5/.test(e.message));
  assert.throws(() => call([0, 3, 5], 2), (e: unknown) => e instanceof ArgumentError && /sequence 0 has length 3 in 'cuSeqlensQ'; lengths must be in \[0, 2\]/.test(e.message));
  assert.throws(() => call([0, 3, 5], 3, backend.empty([5, 2], 'f32')), /flashAttentionForward: 'lse' has shape \[5, 2\]/);
  assert.throws(() => call([0, 3, 5], 2.5), /'maxSeqlenQ' must be an integer/);
  call([0, 3, 5]);
});
