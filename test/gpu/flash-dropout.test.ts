// Attention dropout inside the fused op (flash-lib.ts, flash-forward.ts, flash-backward.ts and the SIMT
// kernels of attention.ts) on the GPU:
//   1. which elements are dropped, exactly: with q = 0 every visible probability is 1/n_i, and
//      one-hot inputs make single elements of P ⊙ z visible in an output — V one-hot: out[i][j] ≠ 0 iff
//      (i, j) is kept (the forward's quad-shared draws); dOut one-hot: dv[j][i] ≠ 0 iff kept (the dK/dV
//      kernel's transposed draws); K one-hot, V = 1, dOut > 0: dq[i][j] > 0 iff kept (the dQ kernel's).
//      Each mask must equal rng.ts's dropoutMask and the GPU dropout op's mask for the same (seed,
//      offset), element ((b·Hq + h)·Lq + i)·Lk + j; Lk = 64 (8-aligned rows: the lane-shared draws) and
//      Lk = 61 (per-element draws); bf16 (tensor cores) and f32 (SIMT);
//   2. out, lse and dq, dk, dv against the CPU reference with dropout (GQA, padding, causal, Lq ≠ Lk,
//      several tiles, d = 64, 80, 128, the SIMT path);
//   3. offsetBase: offset x equals offset 0 plus a device base of x, bit for bit.
// Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend, DropoutArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { dropoutMask } from '../../src/backend/rng.js';
import { probeCuda } from '../../src/cuda/probe.js';
import type { FloatDType } from '../../src/dtype.js';
import { compareArrays, describe, gradientErrorFloor, gradientRelError, TOLERANCE } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import type { HostArray, Tensor } from '../../src/tensor.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

interface Shape { B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; causal: boolean; keyLengths?: number[] }
interface Host { q: HostArray; k: HostArray; v: HostArray; dOut: HostArray }

/** Forward then backward on `b` (outputs poisoned with NaN); the backward takes `given` out/lse when passed. */
function run(b: Backend, s: Shape, dtype: FloatDType, x: Host, dropout: DropoutArgs | undefined, given?: { out: HostArray; lse: HostArray }) {
  const qs = [s.B, s.Hq, s.Lq, s.d], kvs = [s.B, s.Hkv, s.Lk, s.d];
  const made: Tensor[] = [];
  const up = (a: HostArray, shape: number[], t: FloatDType | 'f32' = dtype) => { const r = b.fromArray(a, shape, t); made.push(r); return r; };
  const poisoned = (shape: number[], t: FloatDType | 'f32' = dtype) => { const r = b.empty(shape, t); b.fill(r, NaN); made.push(r); return r; };
  try {
    const q = up(x.q, qs), k = up(x.k, kvs), v = up(x.v, kvs), dOut = up(x.dOut, qs);
    const keyLengths = s.keyLengths ? b.fromArray(Int32Array.from(s.keyLengths), [s.B], 'i32') : undefined;
    if (keyLengths) made.push(keyLengths);
    const options = { causal: s.causal, ...(keyLengths ? { keyLengths } : {}), ...(dropout ? { dropout } : {}) };
    const out = poisoned(qs), lse = poisoned([s.B, s.Hq, s.Lq], 'f32');
    b.flashAttentionForward({ q, k, v, out, lse, ...options });
    const fwd = { out: b.download(out), lse: b.download(lse) };
    const outIn = given ? up(given.out, qs) : out, lseIn = given ? up(given.lse, [s.B, s.Hq, s.Lq], 'f32') : lse;
    const dq = poisoned(qs), dk = poisoned(kvs), dv = poisoned(kvs);
    b.flashAttentionBackward({ q, k, v, out: outIn, dOut, lse: lseIn, dq, dk, dv, ...options });
    b.synchronize();
    return { ...fwd, dq: b.download(dq), dk: b.download(dk), dv: b.download(dv) };
  } finally {
    for (const t of made) b.free(t);
  }
}

const visible = (s: Shape, b: number, i: number): number =>
  Math.max(0, Math.min(s.Lk, s.keyLengths?.[b] ?? s.Lk, s.causal ? i + s.Lk - s.Lq + 1 : s.Lk));

/** The GPU dropout op's keep mask over [B, Hq, Lq, Lk] for the same draw. */
function gpuDropoutOpMask(gpu: Backend, s: Shape, dropout: DropoutArgs): HostArray {
  const shape = [s.B, s.Hq, s.Lq, s.Lk];
  const x = gpu.empty(shape, 'f32'), out = gpu.empty(shape, 'f32'), mask = gpu.empty(shape, 'u8');
  gpu.fill(x, 1);
  gpu.dropout({ x, out, mask, ...dropout });
  gpu.synchronize();
  const m = gpu.download(mask);
  for (const t of [x, out, mask]) gpu.free(t);
  return m;
}

test('fused dropout keeps exactly the elements the dropout op keeps (forward, dK/dV and dQ kernels)', { skip, timeout: 10 * 60_000 }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  const rng = new Rng(seed);
  for (const dtype of ['bf16', 'f32'] as const) {
    for (const Lk of [64, 61]) {
      for (const causal of [false, true]) {
        const s: Shape = { B: 2, Hq: 2, Hkv: 2, Lq: 40, Lk, d: 64, causal };
        const name = `${dtype} Lq 40 Lk ${Lk}${causal ? ' causal' : ''}`;
        await t.test(name, () => {
          const dropout: DropoutArgs = { p: 0.3, seed: BigInt(Math.floor(rng.next() * 2 ** 40)), offset: BigInt(Math.floor(rng.next() * 1e6)) };
          const expected = new Uint8Array(s.B * s.Hq * s.Lq * s.Lk);
          dropoutMask(expected, dropout.p, dropout.seed, dropout.offset);
          const opMask = gpuDropoutOpMask(gpu, s, dropout);
          assert.deepEqual(Uint8Array.from(opMask), expected, 'the GPU dropout op and rng.ts disagree');

          const nq = s.B * s.Hq * s.Lq * s.d, nk = s.B * s.Hkv * s.Lk * s.d;
          const zeros = (n: number) => new Float32Array(n);
          // One-hot rows: row r of a [.., L, d] head is e_r.
          const oneHot = (L: number, heads: number) => { const a = new Float32Array(s.B * heads * L * s.d); for (let r = 0; r < s.B * heads * L; r++) a[r * s.d + (r % L)] = 1; return a; };
          const forwardMask = run(gpu, s, dtype, { q: zeros(nq), k: rng.floats(nk), v: oneHot(s.Lk, s.Hkv), dOut: rng.floats(nq) }, dropout);
          const dkdvMask = run(gpu, s, dtype, { q: zeros(nq), k: rng.floats(nk), v: rng.floats(nk), dOut: oneHot(s.Lq, s.Hq) }, dropout);
          const positive = Float32Array.from(rng.floats(nq), (x) => 1 + 0.25 * Math.tanh(x));
          const dqMask = run(gpu, s, dtype, { q: zeros(nq), k: oneHot(s.Lk, s.Hkv), v: Float32Array.from({ length: nk }, () => 1), dOut: positive }, dropout);

          const wrong = { forward: 0, dkdv: 0, dq: 0 }, checked = { forward: 0, dkdv: 0, dq: 0 };
          for (let b = 0; b < s.B; b++) for (let h = 0; h < s.Hq; h++) for (let i = 0; i < s.Lq; i++) {
            const n = visible(s, b, i), row = (b * s.Hq + h) * s.Lq + i;
            let keptInRow = 0;
            for (let j = 0; j < n; j++) keptInRow += expected[row * s.Lk + j]!;
            for (let j = 0; j < n; j++) {
              const kept = expected[row * s.Lk + j] === 1;
              checked.forward++;
              if ((forwardMask.out[row * s.d + j] !== 0) !== kept) wrong.forward++;
              checked.dkdv++;
              if ((dkdvMask.dv[((b * s.Hkv + h) * s.Lk + j) * s.d + i] !== 0) !== kept) wrong.dkdv++;
              if (keptInRow < n) { // a row with every key kept has dS = 0 in exact arithmetic: no sign to read
                checked.dq++;
                if ((dqMask.dq[row * s.d + j]! > 0) !== kept) wrong.dq++;
              }
            }
          }
          assert.deepEqual(wrong, { forward: 0, dkdv: 0, dq: 0 }, `mismatched keep flags out of ${JSON.stringify(checked)}`);
        });
      }
    }
  }
});

interface Case extends Shape { dtype: FloatDType; p: number }

const CASES: Case[] = [
  { dtype: 'bf16', B: 2, Hq: 4, Hkv: 2, Lq: 200, Lk: 200, d: 64, causal: true, p: 0.1 },
  { dtype: 'f16', B: 2, Hq: 4, Hkv: 1, Lq: 77, Lk: 301, d: 128, causal: false, keyLengths: [301, 150], p: 0.2 },
  { dtype: 'bf16', B: 1, Hq: 2, Hkv: 2, Lq: 130, Lk: 130, d: 80, causal: true, p: 0.5 },
  { dtype: 'bf16', B: 1, Hq: 8, Hkv: 2, Lq: 256, Lk: 256, d: 64, causal: false, keyLengths: [200], p: 0.1 },
  { dtype: 'bf16', B: 1, Hq: 2, Hkv: 2, Lq: 1000, Lk: 1000, d: 128, causal: true, p: 0.1 },
  { dtype: 'f16', B: 2, Hq: 2, Hkv: 1, Lq: 300, Lk: 100, d: 64, causal: true, p: 0.15 },
  { dtype: 'f32', B: 1, Hq: 2, Hkv: 1, Lq: 65, Lk: 70, d: 64, causal: true, p: 0.3 },
  { dtype: 'bf16', B: 1, Hq: 2, Hkv: 2, Lq: 50, Lk: 50, d: 72, causal: false, p: 0.2 },
];

test('fused attention with dropout matches the CPU reference (forward and backward)', { skip, timeout: 30 * 60_000 }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of CASES) {
    const name = `${c.dtype} q[${c.B},${c.Hq},${c.Lq},${c.d}] kv[${c.B},${c.Hkv},${c.Lk},${c.d}]${c.causal ? ' causal' : ''}${c.keyLengths ? ` keyLengths [${c.keyLengths}]` : ''} p=${c.p}`;
    await t.test(name, () => {
      const rng = new Rng(seed ^ (c.Lq * 7919 + c.d));
      // Inputs rounded to the dtype once, so both backends see the same values.
      const round = (a: Float32Array, shape: number[]) => { const r = cpu.fromArray(a, shape, c.dtype); const h = cpu.download(r); cpu.free(r); return h; };
      const qs = [c.B, c.Hq, c.Lq, c.d], kvs = [c.B, c.Hkv, c.Lk, c.d];
      const x: Host = {
        q: round(rng.floats(c.B * c.Hq * c.Lq * c.d), qs), k: round(rng.floats(c.B * c.Hkv * c.Lk * c.d), kvs),
        v: round(rng.floats(c.B * c.Hkv * c.Lk * c.d), kvs), dOut: round(rng.floats(c.B * c.Hq * c.Lq * c.d), qs),
      };
      const dropout: DropoutArgs = { p: c.p, seed: BigInt(seed) * 65537n + 3n, offset: 12345n };
      const expected = run(cpu, c, c.dtype, x, dropout);
      // The backward on both sides from the CPU forward's out and lse (rounded as the GPU stores them).
      const given = { out: round(Float32Array.from(expected.out), qs), lse: expected.lse };
      const ref = run(cpu, c, c.dtype, x, dropout, given);
      const got = run(gpu, c, c.dtype, x, dropout, given);
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

test('a device offsetBase adds to offset: the same masks bit for bit', { skip, timeout: 5 * 60_000 }, async () => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const rng = new Rng(freshSeed());
  const s: Shape = { B: 1, Hq: 4, Hkv: 2, Lq: 300, Lk: 300, d: 64, causal: true };
  const x: Host = { q: rng.floats(300 * 4 * 64), k: rng.floats(300 * 2 * 64), v: rng.floats(300 * 2 * 64), dOut: rng.floats(300 * 4 * 64) };
  const base = 5_000_000_123n;
  const offsetBase = gpu.fromArray(new Int32Array([Number(base & 0xffffffffn) | 0, Number(base >> 32n)]), [2], 'i32');
  try {
    const direct = run(gpu, s, 'bf16', x, { p: 0.2, seed: 17n, offset: base + 40n });
    const viaBase = run(gpu, s, 'bf16', x, { p: 0.2, seed: 17n, offset: 40n, offsetBase });
    for (const output of ['out', 'lse', 'dq', 'dk', 'dv'] as const) assert.deepEqual(viaBase[output], direct[output], output);
  } finally {
    gpu.free(offsetBase);
  }
});
