// The wgmma forward (flash-forward-wgmma.ts) and backward (flash-backward-wgmma.ts) against the CPU
// reference on an sm_90 GPU: every tile of WGMMA_FORWARD_SWEEP / WGMMA_BACKWARD_SWEEP in bf16 (the
// defaults also in f16), d = 64 and 128, at shapes that exercise the
// masks and the pipeline — 300 tokens (a ragged last tile), GQA 2:1, causal with keyLengths, causal
// MQA with Lq < Lk and a sequence with no keys at all (out = 0, lse = −∞), 1030 tokens (nine K/V
// tiles in flight one after another), and attention dropout p = 0.1 with rows both off and on the 8-key
// alignment the shared Philox draws need (the CPU reference drops the same elements). Outputs are poisoned with NaN first. The public ops
// (flashAttentionForward / Backward, which route dense half-precision d 64/128 here) must give the same
// answer, the backward bit for bit on a second run (the contract: deterministic). FUSEFORMER_WGMMA_CASES
// selects cases by name.
// Skips without a GPU, and on a GPU that is not sm_90.

import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { CudaBackend } from '../../src/backend/cuda/index.js';
import type { DropoutArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { WgmmaForwardTile } from '../../src/backend/cuda/kernels/flash-forward-wgmma.js';
import { defaultWgmmaForwardTile, hostRunsWgmma, launchWgmmaForward, WGMMA_FORWARD_SWEEP } from '../../src/backend/cuda/kernels/flash-forward-wgmma.js';
import type { WgmmaBackwardTile } from '../../src/backend/cuda/kernels/flash-backward-wgmma.js';
import { defaultWgmmaBackwardTile, flashAttentionBackwardWgmma, WGMMA_BACKWARD_SWEEP } from '../../src/backend/cuda/kernels/flash-backward-wgmma.js';
import { OpCheck } from '../../src/backend/validate.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { compareArrays, describe, gradientErrorFloor, gradientRelError, TOLERANCE } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import type { HalfDType } from '../../src/backend/cuda/kernels/flash-forward.js';
import type { HostArray } from '../../src/tensor.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

interface Case { name: string; B: number; Hq: number; Hkv: number; Lq: number; Lk: number; causal: boolean; keyLengths?: number[]; dropout?: number }

const CASES: Case[] = [
  { name: 'GQA 2:1, 300 tokens', B: 2, Hq: 4, Hkv: 2, Lq: 300, Lk: 300, causal: false },
  { name: 'causal, keyLengths [300, 187]', B: 2, Hq: 4, Hkv: 2, Lq: 300, Lk: 300, causal: true, keyLengths: [300, 187] },
  { name: 'causal MQA, Lq 77 < Lk 300, keyLengths [0, 250]', B: 2, Hq: 3, Hkv: 1, Lq: 77, Lk: 300, causal: true, keyLengths: [0, 250] },
  { name: '1030 tokens', B: 1, Hq: 2, Hkv: 2, Lq: 1030, Lk: 1030, causal: false },
  { name: 'causal, keyLengths [300, 187], dropout 0.1 (rows of 300: one draw per element)', B: 2, Hq: 4, Hkv: 2, Lq: 300, Lk: 300, causal: true, keyLengths: [300, 187], dropout: 0.1 },
  { name: 'MQA, 512 tokens, dropout 0.1 (rows of 512: shared draws)', B: 1, Hq: 2, Hkv: 1, Lq: 512, Lk: 512, causal: false, dropout: 0.1 },
];

/** FUSEFORMER_WGMMA_CASES=<regex> runs only the cases whose names match (a bounded GPU call). */
const selected = ((pattern) => CASES.filter((c) => !pattern || new RegExp(pattern).test(c.name)))(process.env['FUSEFORMER_WGMMA_CASES']);

/** The case's dropout draw (fresh per seed). */
function dropoutOf(c: Case, seed: number): { dropout?: DropoutArgs } {
  return c.dropout ? { dropout: { p: c.dropout, seed: BigInt(seed) + 11n, offset: 96n } } : {};
}

/** A case's shapes and random inputs (rounded to the dtype, never zeros), and its key lengths. */
function caseInputs(cpu: CpuBackend, c: Case, d: number, dtype: HalfDType, rng: Rng) {
  const qs = [c.B, c.Hq, c.Lq, d], kvs = [c.B, c.Hkv, c.Lk, d], lseShape = [c.B, c.Hq, c.Lq];
  const round = (shape: number[]) => {
    const x = cpu.fromArray(rng.floats(shape.reduce((a, b) => a * b, 1)), shape, dtype);
    const h = cpu.download(x);
    cpu.free(x);
    return h;
  };
  const host = { q: round(qs), k: round(kvs), v: round(kvs), dOut: round(qs) };
  return { qs, kvs, lseShape, host, lengths: c.keyLengths ? Int32Array.from(c.keyLengths) : undefined };
}

interface CaseContext {
  gpu: CudaBackend; cpu: CpuBackend; seed: number; dtype: HalfDType; d: number; c: Case; inputs: ReturnType<typeof caseInputs>;
}

/** Runs body for every dtype × head dimension × selected case on an sm_90 GPU (skips on others), with fresh inputs. */
async function eachCase(t: TestContext, salt: number, body: (ctx: CaseContext) => Promise<void>): Promise<void> {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  if (!hostRunsWgmma(gpu.runtime)) {
    t.skip(`wgmma needs an sm_90 GPU; this one is ${gpu.runtime.arch}`);
    return;
  }
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const dtype of ['bf16', 'f16'] as HalfDType[]) {
    for (const d of [64, 128]) {
      for (const c of selected) {
        const rng = new Rng(seed ^ (d * 16 + CASES.indexOf(c) * 2 + Number(dtype === 'f16')) ^ salt);
        await body({ gpu, cpu, seed, dtype, d, c, inputs: caseInputs(cpu, c, d, dtype, rng) });
      }
    }
  }
}

/** −∞ where both are −∞ (rows with no visible key) becomes a finite sentinel, so the rest compares as usual. */
function withoutMatchingInfinities(got: HostArray, expected: HostArray): [Float32Array, Float32Array] {
  const a = Float32Array.from(got), e = Float32Array.from(expected);
  for (let i = 0; i < e.length; i++) {
    if (e[i] === -Infinity && a[i] === -Infinity) a[i] = e[i] = -1e4;
  }
  return [a, e];
}

test('the wgmma forward matches the CPU reference at every swept tile', { skip, timeout: 30 * 60_000 }, async (t) => {
  await eachCase(t, 0, async ({ gpu, cpu, seed, dtype, d, c, inputs: { qs, kvs, lseShape, host, lengths } }) => {
    const tiles: readonly WgmmaForwardTile[] = dtype === 'bf16' ? WGMMA_FORWARD_SWEEP[d]! : [defaultWgmmaForwardTile(d)];

    const cq = cpu.fromArray(host.q, qs, dtype), ck = cpu.fromArray(host.k, kvs, dtype), cv = cpu.fromArray(host.v, kvs, dtype);
    const cOut = cpu.empty(qs, dtype), cLse = cpu.empty(lseShape, 'f32'), cLengths = lengths ? cpu.fromArray(lengths, [c.B], 'i32') : undefined;
    cpu.flashAttentionForward({ q: cq, k: ck, v: cv, out: cOut, lse: cLse, causal: c.causal, ...(cLengths ? { keyLengths: cLengths } : {}), ...dropoutOf(c, seed) });
    const expected = { out: cpu.download(cOut), lse: cpu.download(cLse) };
    for (const x of [cq, ck, cv, cOut, cLse, ...(cLengths ? [cLengths] : [])]) cpu.free(x);

    const g = {
      q: gpu.fromArray(host.q, qs, dtype), k: gpu.fromArray(host.k, kvs, dtype), v: gpu.fromArray(host.v, kvs, dtype),
      out: gpu.empty(qs, dtype), lse: gpu.empty(lseShape, 'f32'),
    };
    const keyLengths = lengths ? gpu.fromArray(lengths, [c.B], 'i32') : undefined;
    const verify = (): void => {
      gpu.synchronize();
      const failures: string[] = [];
      for (const [name, got] of [['out', gpu.download(g.out)], ['lse', gpu.download(g.lse)]] as const) {
        const [a, e] = withoutMatchingInfinities(got, expected[name]);
        const cmp = compareArrays(a, e);
        if (cmp.unwritten > 0 || !(cmp.relativeError <= TOLERANCE[dtype])) failures.push(`${name}: ${describe(cmp, a, e)}`);
      }
      assert.deepEqual(failures, [], failures.join('\n'));
    };
    try {
      for (const tile of tiles) {
        await t.test(`${dtype} d${d} ${c.name} ${JSON.stringify(tile)}`, () => {
          gpu.fill(g.out, NaN); gpu.fill(g.lse, NaN);
          launchWgmmaForward(gpu.runtime, new OpCheck('flashAttentionForward', 'cuda'), { ...g, keyLengths, ...dropoutOf(c, seed) },
            { B: c.B, Hq: c.Hq, Lq: c.Lq, Lk: c.Lk, d, group: c.Hq / c.Hkv, scale: 1 / Math.sqrt(d), causal: c.causal }, tile);
          verify();
        });
      }
      await t.test(`${dtype} d${d} ${c.name}: the public op`, () => {
        gpu.fill(g.out, NaN); gpu.fill(g.lse, NaN);
        gpu.flashAttentionForward({ ...g, causal: c.causal, ...(keyLengths ? { keyLengths } : {}), ...dropoutOf(c, seed) });
        verify();
      });
    } finally {
      for (const x of [...Object.values(g), ...(keyLengths ? [keyLengths] : [])]) gpu.free(x);
    }
  });
});

test('the wgmma backward matches the CPU reference at every swept tile', { skip, timeout: 30 * 60_000 }, async (t) => {
  await eachCase(t, 0x5a5a, async ({ gpu, cpu, seed, dtype, d, c, inputs: { qs, kvs, lseShape, host, lengths } }) => {
    const tiles: readonly WgmmaBackwardTile[] = dtype === 'bf16' ? WGMMA_BACKWARD_SWEEP[d]! : [defaultWgmmaBackwardTile(d)];

    // CPU reference: forward, then the backward from the forward's (rounded) out and lse.
    const cx = { q: cpu.fromArray(host.q, qs, dtype), k: cpu.fromArray(host.k, kvs, dtype), v: cpu.fromArray(host.v, kvs, dtype), dOut: cpu.fromArray(host.dOut, qs, dtype) };
    const cLengths = lengths ? cpu.fromArray(lengths, [c.B], 'i32') : undefined;
    const masks = { causal: c.causal, ...(cLengths ? { keyLengths: cLengths } : {}), ...dropoutOf(c, seed) };
    const cOut = cpu.empty(qs, dtype), cLse = cpu.empty(lseShape, 'f32');
    cpu.flashAttentionForward({ ...cx, out: cOut, lse: cLse, ...masks });
    const cdq = cpu.empty(qs, dtype), cdk = cpu.empty(kvs, dtype), cdv = cpu.empty(kvs, dtype);
    cpu.flashAttentionBackward({ ...cx, out: cOut, lse: cLse, dq: cdq, dk: cdk, dv: cdv, ...masks });
    const forward = { out: cpu.download(cOut), lse: cpu.download(cLse) };
    const expected = { dq: cpu.download(cdq), dk: cpu.download(cdk), dv: cpu.download(cdv) };
    for (const x of [...Object.values(cx), cOut, cLse, cdq, cdk, cdv, ...(cLengths ? [cLengths] : [])]) cpu.free(x);

    const g = {
      q: gpu.fromArray(host.q, qs, dtype), k: gpu.fromArray(host.k, kvs, dtype), v: gpu.fromArray(host.v, kvs, dtype), dOut: gpu.fromArray(host.dOut, qs, dtype),
      out: gpu.fromArray(forward.out, qs, dtype), lse: gpu.fromArray(forward.lse, lseShape, 'f32'),
      dq: gpu.empty(qs, dtype), dk: gpu.empty(kvs, dtype), dv: gpu.empty(kvs, dtype),
    };
    const keyLengths = lengths ? gpu.fromArray(lengths, [c.B], 'i32') : undefined;
    const floor = gradientErrorFloor([expected.dq, expected.dk, expected.dv]);
    const verify = (): void => {
      gpu.synchronize();
      const failures: string[] = [];
      for (const name of ['dq', 'dk', 'dv'] as const) {
        const got = gpu.download(g[name]);
        const err = gradientRelError(got, expected[name], floor);
        const unwritten = got.filter((x) => Number.isNaN(x)).length;
        if (unwritten > 0 || !(err <= TOLERANCE[dtype])) failures.push(`${name}: rel err ${err.toExponential(2)}, ${unwritten} unwritten`);
      }
      assert.deepEqual(failures, [], failures.join('\n'));
    };
    const poison = (): void => { for (const x of [g.dq, g.dk, g.dv]) gpu.fill(x, NaN); };
    try {
      for (const tile of tiles) {
        await t.test(`${dtype} d${d} ${c.name} ${JSON.stringify(tile)}`, () => {
          poison();
          flashAttentionBackwardWgmma(gpu.runtime, new OpCheck('flashAttentionBackward', 'cuda'), {
            ...g, keyLengths, scale: 1 / Math.sqrt(d), causal: c.causal, B: c.B, Hq: c.Hq, Hkv: c.Hkv, Lq: c.Lq, Lk: c.Lk, d, group: c.Hq / c.Hkv, ...dropoutOf(c, seed),
          }, tile);
          verify();
        });
      }
      await t.test(`${dtype} d${d} ${c.name}: the public op, twice, bit for bit`, () => {
        poison();
        gpu.flashAttentionBackward({ ...g, causal: c.causal, ...(keyLengths ? { keyLengths } : {}), ...dropoutOf(c, seed) });
        verify();
        const first = [gpu.download(g.dq), gpu.download(g.dk), gpu.download(g.dv)];
        poison();
        gpu.flashAttentionBackward({ ...g, causal: c.causal, ...(keyLengths ? { keyLengths } : {}), ...dropoutOf(c, seed) });
        gpu.synchronize();
        assert.deepEqual([gpu.download(g.dq), gpu.download(g.dk), gpu.download(g.dv)], first, 'the backward is deterministic');
      });
    } finally {
      for (const x of [...Object.values(g), ...(keyLengths ? [keyLengths] : [])]) gpu.free(x);
    }
  });
});
