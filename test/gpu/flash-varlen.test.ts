// Packed variable-length attention (flashAttentionForward/Backward with cuSeqlensQ/K) on the GPU:
//   1. against the dense GPU op run on each sequence alone (the same kernels with another layout, so
//      the same values up to rounding order: relative error ≤ 1e-6), forward and backward;
//   2. against the CPU reference, with and without dropout: f16/bf16 (tensor cores, d = 64, 80, 96,
//      128) and f32 (SIMT), causal and not, GQA, Lq ≠ Lk per sequence, an empty sequence, a
//      sequence of one token, sequences longer than one tile.
// Outputs are poisoned with NaN first: every packed row belongs to a sequence and must be written.
// Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend, DropoutArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import type { FloatDType } from '../../src/dtype.js';
import { compareArrays, describe, gradientErrorFloor, gradientRelError, TOLERANCE } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import type { HostArray, Tensor } from '../../src/tensor.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

interface Case { dtype: FloatDType; lengthsQ: number[]; lengthsK: number[]; Hq: number; Hkv: number; d: number; causal: boolean; p?: number }

const CASES: Case[] = [
  { dtype: 'bf16', lengthsQ: [100, 0, 257, 64, 1], lengthsK: [100, 0, 257, 64, 1], Hq: 4, Hkv: 2, d: 64, causal: true },
  { dtype: 'f16', lengthsQ: [33, 200], lengthsK: [300, 17], Hq: 2, Hkv: 1, d: 128, causal: false },
  { dtype: 'f16', lengthsQ: [33, 200], lengthsK: [300, 17], Hq: 2, Hkv: 1, d: 128, causal: true },
  { dtype: 'bf16', lengthsQ: [130, 70, 3], lengthsK: [130, 70, 3], Hq: 2, Hkv: 2, d: 80, causal: true },
  { dtype: 'bf16', lengthsQ: [77, 130], lengthsK: [77, 130], Hq: 4, Hkv: 1, d: 96, causal: true, p: 0.2 },
  { dtype: 'bf16', lengthsQ: [500, 129], lengthsK: [500, 129], Hq: 2, Hkv: 2, d: 128, causal: false, p: 0.1 },
  { dtype: 'f32', lengthsQ: [20, 45], lengthsK: [20, 45], Hq: 2, Hkv: 1, d: 64, causal: true },
  { dtype: 'f32', lengthsQ: [20, 45], lengthsK: [31, 9], Hq: 2, Hkv: 2, d: 64, causal: false, p: 0.3 },
];

const cumulative = (lengths: number[]): Int32Array => Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
const total = (lengths: number[]) => lengths.reduce((a, b) => a + b, 0);

interface Host { q: HostArray; k: HostArray; v: HostArray; dOut: HostArray }
type Results = Record<'out' | 'lse' | 'dq' | 'dk' | 'dv', HostArray>;

/** Packed forward then backward on `b` into NaN-poisoned outputs; the backward takes `given` out/lse when passed. */
function runPacked(b: Backend, c: Case, x: Host, dropout: DropoutArgs | undefined, given?: { out: HostArray; lse: HostArray }): Results {
  const tq = total(c.lengthsQ), tk = total(c.lengthsK), qs = [tq, c.Hq, c.d], kvs = [tk, c.Hkv, c.d];
  const made: Tensor[] = [];
  const keep = (t: Tensor) => { made.push(t); return t; };
  const poisoned = (shape: number[], dtype: FloatDType) => { const t = keep(b.empty(shape, dtype)); b.fill(t, NaN); return t; };
  try {
    const q = keep(b.fromArray(x.q, qs, c.dtype)), k = keep(b.fromArray(x.k, kvs, c.dtype)), v = keep(b.fromArray(x.v, kvs, c.dtype));
    const common = {
      cuSeqlensQ: keep(b.fromArray(cumulative(c.lengthsQ), [c.lengthsQ.length + 1], 'i32')),
      cuSeqlensK: keep(b.fromArray(cumulative(c.lengthsK), [c.lengthsK.length + 1], 'i32')),
      maxSeqlenQ: Math.max(...c.lengthsQ), maxSeqlenK: Math.max(...c.lengthsK), causal: c.causal, ...(dropout ? { dropout } : {}),
    };
    const out = poisoned(qs, c.dtype), lse = poisoned([c.Hq, tq], 'f32');
    b.flashAttentionForward({ q, k, v, out, lse, ...common });
    const fwd = { out: b.download(out), lse: b.download(lse) };
    const outIn = given ? keep(b.fromArray(given.out, qs, c.dtype)) : out, lseIn = given ? keep(b.fromArray(given.lse, [c.Hq, tq], 'f32')) : lse;
    const dOut = keep(b.fromArray(x.dOut, qs, c.dtype));
    const dq = poisoned(qs, c.dtype), dk = poisoned(kvs, c.dtype), dv = poisoned(kvs, c.dtype);
    b.flashAttentionBackward({ q, k, v, out: outIn, dOut, lse: lseIn, dq, dk, dv, ...common });
    b.synchronize();
    return { ...fwd, dq: b.download(dq), dk: b.download(dk), dv: b.download(dv) };
  } finally {
    for (const t of made) b.free(t);
  }
}

/** Rows [start, start + len) of a packed [total, H, d] array as a dense [H, len, d] one. */
function unpack(a: HostArray, start: number, len: number, H: number, d: number): Float32Array {
  const r = new Float32Array(H * len * d);
  for (let t = 0; t < len; t++) for (let h = 0; h < H; h++) for (let c = 0; c < d; c++) r[(h * len + t) * d + c] = a[((start + t) * H + h) * d + c]!;
  return r;
}

/** The dense op on one sequence ([1, H, L, d]), forward then backward. */
function runDense(b: Backend, c: Case, Lq: number, Lk: number, x: Host): Results {
  const qs = [1, c.Hq, Lq, c.d], kvs = [1, c.Hkv, Lk, c.d];
  const made: Tensor[] = [];
  const keep = (t: Tensor) => { made.push(t); return t; };
  try {
    const q = keep(b.fromArray(x.q, qs, c.dtype)), k = keep(b.fromArray(x.k, kvs, c.dtype)), v = keep(b.fromArray(x.v, kvs, c.dtype));
    const out = keep(b.empty(qs, c.dtype)), lse = keep(b.empty([1, c.Hq, Lq], 'f32'));
    b.flashAttentionForward({ q, k, v, out, lse, causal: c.causal });
    const dOut = keep(b.fromArray(x.dOut, qs, c.dtype));
    const dq = keep(b.empty(qs, c.dtype)), dk = keep(b.empty(kvs, c.dtype)), dv = keep(b.empty(kvs, c.dtype));
    b.flashAttentionBackward({ q, k, v, out, dOut, lse, dq, dk, dv, causal: c.causal });
    b.synchronize();
    return { out: b.download(out), lse: b.download(lse), dq: b.download(dq), dk: b.download(dk), dv: b.download(dv) };
  } finally {
    for (const t of made) b.free(t);
  }
}

function caseName(c: Case): string {
  return `${c.dtype} d${c.d} Hq ${c.Hq} Hkv ${c.Hkv} lengths q [${c.lengthsQ}] k [${c.lengthsK}]${c.causal ? ' causal' : ''}${c.p ? ` dropout ${c.p}` : ''}`;
}

function inputs(cpu: CpuBackend, c: Case, rng: Rng): Host {
  const round = (a: Float32Array, shape: number[]) => { const t = cpu.fromArray(a, shape, c.dtype); const h = cpu.download(t); cpu.free(t); return h; };
  const tq = total(c.lengthsQ), tk = total(c.lengthsK);
  return {
    q: round(rng.floats(tq * c.Hq * c.d), [tq, c.Hq, c.d]), k: round(rng.floats(tk * c.Hkv * c.d), [tk, c.Hkv, c.d]),
    v: round(rng.floats(tk * c.Hkv * c.d), [tk, c.Hkv, c.d]), dOut: round(rng.floats(tq * c.Hq * c.d), [tq, c.Hq, c.d]),
  };
}

test('packed sequences on the GPU equal the dense GPU op run on each sequence alone', { skip, timeout: 20 * 60_000 }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of CASES.filter((x) => !x.p)) {
    await t.test(caseName(c), () => {
      const x = inputs(cpu, c, new Rng(seed ^ (c.d * 31 + c.lengthsQ[0]!)));
      const packed = runPacked(gpu, c, x, undefined);
      const cuQ = cumulative(c.lengthsQ), cuK = cumulative(c.lengthsK), tq = total(c.lengthsQ);
      const failures: string[] = [];
      c.lengthsQ.forEach((Lq, b) => {
        const Lk = c.lengthsK[b]!;
        if (Lq === 0 && Lk === 0) return;
        const seq = runDense(gpu, c, Lq, Lk, {
          q: unpack(x.q, cuQ[b]!, Lq, c.Hq, c.d), k: unpack(x.k, cuK[b]!, Lk, c.Hkv, c.d), v: unpack(x.v, cuK[b]!, Lk, c.Hkv, c.d),
          dOut: unpack(x.dOut, cuQ[b]!, Lq, c.Hq, c.d),
        });
        const mine: Results = {
          out: unpack(packed.out, cuQ[b]!, Lq, c.Hq, c.d), dq: unpack(packed.dq, cuQ[b]!, Lq, c.Hq, c.d),
          dk: unpack(packed.dk, cuK[b]!, Lk, c.Hkv, c.d), dv: unpack(packed.dv, cuK[b]!, Lk, c.Hkv, c.d),
          lse: Float32Array.from({ length: c.Hq * Lq }, (_, r) => packed.lse[Math.floor(r / Math.max(Lq, 1)) * tq + cuQ[b]! + (r % Math.max(Lq, 1))]!),
        };
        for (const output of ['out', 'lse', 'dq', 'dk', 'dv'] as const) {
          const e = Float32Array.from(seq[output], (v) => (v === -Infinity ? 0 : v)), g = Float32Array.from(mine[output], (v) => (v === -Infinity ? 0 : v));
          const cmp = compareArrays(g, e);
          if (cmp.unwritten > 0 || !(cmp.relativeError <= 1e-6)) failures.push(`sequence ${b} ${output}: ${describe(cmp, g, e)}`);
        }
      });
      assert.deepEqual(failures, [], failures.join('\n'));
    });
  }
});

test('packed sequences on the GPU match the CPU reference (with and without dropout)', { skip, timeout: 30 * 60_000 }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of CASES) {
    await t.test(caseName(c), () => {
      const x = inputs(cpu, c, new Rng(seed ^ (c.d * 131 + c.lengthsK[0]!)));
      const dropout: DropoutArgs | undefined = c.p ? { p: c.p, seed: BigInt(seed) + 99n, offset: 4096n } : undefined;
      const expected = runPacked(cpu, c, x, dropout);
      const round = (a: HostArray) => { const r = cpu.fromArray(a, [a.length], c.dtype); const h = cpu.download(r); cpu.free(r); return h; };
      const given = { out: round(expected.out), lse: expected.lse };
      const ref = runPacked(cpu, c, x, dropout, given);
      const got = runPacked(gpu, c, x, dropout, given);
      const failures: string[] = [];
      for (const output of ['out', 'lse'] as const) {
        const e = Float32Array.from(expected[output], (v) => (v === -Infinity ? 0 : v)), g = Float32Array.from(got[output], (v) => (v === -Infinity ? 0 : v));
        const cmp = compareArrays(g, e);
        if (cmp.unwritten > 0 || !(cmp.relativeError <= TOLERANCE[c.dtype])) failures.push(`${output}: ${describe(cmp, g, e)}`);
      }
      const floor = gradientErrorFloor([ref.dq, ref.dk, ref.dv]);
      for (const output of ['dq', 'dk', 'dv'] as const) {
        const err = gradientRelError(got[output], ref[output], floor);
        const unwritten = got[output].filter((v) => Number.isNaN(v)).length;
        if (unwritten > 0 || !(err <= TOLERANCE[c.dtype])) failures.push(`${output}: rel err ${err.toExponential(2)} (tolerance ${TOLERANCE[c.dtype]}), ${unwritten} unwritten`);
      }
      assert.deepEqual(failures, [], failures.join('\n'));
    });
  }
});
