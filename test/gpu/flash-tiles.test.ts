// Every tile the attention benchmark sweeps (flash-forward.ts's FLASH_FORWARD_SWEEP, flash-backward.ts's
// FLASH_DKDV_SWEEP and FLASH_DQ_SWEEP) against the CPU reference, so whichever the sweep makes the
// default is already checked: bf16, d = 64 and 128, GQA 2:1, 300 tokens (ragged last tiles); non-causal
// plain, and causal with keyLengths and dropout p = 0.1 (the two m-tile, 8-warp and ≥3-blocks variants
// with every mask and the dropout draws). Outputs are poisoned with NaN first. Skips without a GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DropoutArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { FlashBackwardTile } from '../../src/backend/cuda/kernels/flash-backward.js';
import { defaultFlashBackwardTile, FLASH_DKDV_SWEEP, FLASH_DQ_SWEEP, flashAttentionBackwardTensorCore } from '../../src/backend/cuda/kernels/flash-backward.js';
import { FLASH_FORWARD_SWEEP, launchFlashForward } from '../../src/backend/cuda/kernels/flash-forward.js';
import { OpCheck } from '../../src/backend/validate.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { compareArrays, describe, gradientErrorFloor, gradientRelError, TOLERANCE } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import type { HostArray } from '../../src/tensor.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

const [B, Hq, Hkv, L] = [2, 4, 2, 300];

test('every swept forward and backward tile matches the CPU reference', { skip, timeout: 30 * 60_000 }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const d of [64, 128]) {
    for (const causal of [false, true]) {
      const rng = new Rng(seed ^ (d * 2 + Number(causal)));
      const qs = [B, Hq, L, d], kvs = [B, Hkv, L, d], lseShape = [B, Hq, L];
      const round = (a: Float32Array, shape: number[]) => { const x = cpu.fromArray(a, shape, 'bf16'); const h = cpu.download(x); cpu.free(x); return h; };
      const host = { q: round(rng.floats(B * Hq * L * d), qs), k: round(rng.floats(B * Hkv * L * d), kvs), v: round(rng.floats(B * Hkv * L * d), kvs), dOut: round(rng.floats(B * Hq * L * d), qs) };
      const lengths = Int32Array.from([L, 187]);
      const dropout: DropoutArgs | undefined = causal ? { p: 0.1, seed: BigInt(seed) + 7n, offset: 64n } : undefined;
      const options = { causal, ...(causal ? { keyLengths: cpu.fromArray(lengths, [B], 'i32') } : {}), ...(dropout ? { dropout } : {}) };

      // CPU reference: forward, then the backward from the forward's (bf16-rounded) out and lse.
      const c = { q: cpu.fromArray(host.q, qs, 'bf16'), k: cpu.fromArray(host.k, kvs, 'bf16'), v: cpu.fromArray(host.v, kvs, 'bf16'), dOut: cpu.fromArray(host.dOut, qs, 'bf16') };
      const cOut = cpu.empty(qs, 'bf16'), cLse = cpu.empty(lseShape, 'f32');
      cpu.flashAttentionForward({ ...c, out: cOut, lse: cLse, ...options });
      const cdq = cpu.empty(qs, 'bf16'), cdk = cpu.empty(kvs, 'bf16'), cdv = cpu.empty(kvs, 'bf16');
      cpu.flashAttentionBackward({ ...c, out: cOut, lse: cLse, dq: cdq, dk: cdk, dv: cdv, ...options });
      const expected = { out: cpu.download(cOut), lse: cpu.download(cLse), dq: cpu.download(cdq), dk: cpu.download(cdk), dv: cpu.download(cdv) };

      const g = {
        q: gpu.fromArray(host.q, qs, 'bf16'), k: gpu.fromArray(host.k, kvs, 'bf16'), v: gpu.fromArray(host.v, kvs, 'bf16'), dOut: gpu.fromArray(host.dOut, qs, 'bf16'),
        out: gpu.empty(qs, 'bf16'), lse: gpu.empty(lseShape, 'f32'), dq: gpu.empty(qs, 'bf16'), dk: gpu.empty(kvs, 'bf16'), dv: gpu.empty(kvs, 'bf16'),
        keyLengths: gpu.fromArray(lengths, [B], 'i32'),
      };
      const keyLengths = causal ? g.keyLengths : undefined;
      try {
        for (const tile of FLASH_FORWARD_SWEEP[d]!) {
          await t.test(`forward d${d}${causal ? ' causal padded dropout' : ''} ${JSON.stringify(tile)}`, () => {
            gpu.fill(g.out, NaN); gpu.fill(g.lse, NaN);
            launchFlashForward(gpu.runtime, new OpCheck('flashAttentionForward', 'cuda'), { q: g.q, k: g.k, v: g.v, out: g.out, lse: g.lse, keyLengths, ...(dropout ? { dropout } : {}) },
              { B, Hq, Lq: L, Lk: L, d, group: Hq / Hkv, scale: 1 / Math.sqrt(d), causal }, tile);
            gpu.synchronize();
            const failures: string[] = [];
            for (const [name, got] of [['out', gpu.download(g.out)], ['lse', gpu.download(g.lse)]] as const) {
              const cmp = compareArrays(got, expected[name]);
              if (cmp.unwritten > 0 || !(cmp.relativeError <= TOLERANCE.bf16)) failures.push(`${name}: ${describe(cmp, got, expected[name])}`);
            }
            assert.deepEqual(failures, [], failures.join('\n'));
          });
        }
        // The backward from the CPU forward's out and lse, so only the backward is compared.
        const out = gpu.fromArray(expected.out, qs, 'bf16'), lse = gpu.fromArray(expected.lse, lseShape, 'f32');
        const base = defaultFlashBackwardTile(d);
        const tiles: FlashBackwardTile[] = [base, ...FLASH_DKDV_SWEEP[d]!.map((dkdv) => ({ ...base, dkdv })), ...FLASH_DQ_SWEEP[d]!.map((dq) => ({ ...base, dq }))];
        try {
          for (const tile of tiles) {
            await t.test(`backward d${d}${causal ? ' causal padded dropout' : ''} ${JSON.stringify(tile)}`, () => {
              for (const x of [g.dq, g.dk, g.dv]) gpu.fill(x, NaN);
              const problem = {
                q: g.q, k: g.k, v: g.v, out, dOut: g.dOut, lse, dq: g.dq, dk: g.dk, dv: g.dv, keyLengths, scale: 1 / Math.sqrt(d), causal,
                B, Hq, Hkv, Lq: L, Lk: L, d, group: Hq / Hkv, ...(dropout ? { dropout } : {}),
              };
              flashAttentionBackwardTensorCore(gpu.runtime, new OpCheck('flashAttentionBackward', 'cuda'), problem, tile);
              gpu.synchronize();
              const got: Record<'dq' | 'dk' | 'dv', HostArray> = { dq: gpu.download(g.dq), dk: gpu.download(g.dk), dv: gpu.download(g.dv) };
              const floor = gradientErrorFloor([expected.dq, expected.dk, expected.dv]);
              const failures: string[] = [];
              for (const name of ['dq', 'dk', 'dv'] as const) {
                const err = gradientRelError(got[name], expected[name], floor);
                const unwritten = got[name].filter((x) => Number.isNaN(x)).length;
                if (unwritten > 0 || !(err <= TOLERANCE.bf16)) failures.push(`${name}: rel err ${err.toExponential(2)}, ${unwritten} unwritten`);
              }
              assert.deepEqual(failures, [], failures.join('\n'));
            });
          }
        } finally {
          gpu.free(out); gpu.free(lse);
        }
      } finally {
        for (const x of Object.values(g)) gpu.free(x);
        for (const x of [...Object.values(c), cOut, cLse, cdq, cdk, cdv]) cpu.free(x);
      }
    }
  }
});
