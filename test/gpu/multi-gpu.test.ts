// Two GPUs over NCCL through the launcher (skips below two visible GPUs or without libnccl): runs
// bench/multi-gpu.js's correctness sections under `fuseformer launch --gpus 2` and checks that tensor
// parallel (vocab-parallel embedding and loss) logits in f32 and bf16, loss, clipped gradient norm,
// gradients and graph-captured AdamW steps, data parallel losses and parameters (bucketed all-reduces
// on the second stream), and ZeRO-1 inside StepRunner, match one GPU.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { ncclAvailable } from '../../src/cuda/nccl.js';
import { probeCuda } from '../../src/cuda/probe.js';
import './report-as-you-go.js';

const probe = probeCuda();
const gpus = probe.devices?.length ?? 0;
const skip = !probe.available ? `no usable CUDA GPU: ${probe.reason}` : gpus < 2 ? `${gpus} GPU visible, 2 needed` : !ncclAvailable() ? 'libnccl.so.2 not found' : false;

test('2 GPUs: TP and DP GPT-2 through NCCL match one GPU', { skip, timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'ff-multi-gpu-'));
  try {
    const json = join(dir, 'result.json');
    const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
    const bench = fileURLToPath(new URL('../../bench/multi-gpu.js', import.meta.url));
    const run = spawnSync(process.execPath, [main, 'launch', '--gpus', '2', '--master-port', '29531', '--', process.execPath, bench, '--skip', 'collectives,scaling,tp-decode', '--json', json], { encoding: 'utf8', timeout: 280_000 });
    assert.equal(run.status, 0, `launch failed:\n${run.stdout}\n${run.stderr}`);
    const r = JSON.parse(readFileSync(json, 'utf8')) as {
      worldSize: number;
      tensorParallel: {
        logitsMaxAbsDiff: number; logitsBf16MaxAbsDiff: number; lossTp: number; lossSingle: number; gradNormTp: number; gradNormSingle: number;
        gradMaxRelDiff: number; lossesTp: number[]; lossesSingle: number[]; paramMaxAbsDiff: number;
      };
      dataParallel: { lossesDp: number[]; lossesSingle: number[]; paramMaxAbsDiff: number; reducedDuringBackward: number };
      zero: { lossesZero: number[]; lossesSingle: number[]; paramMaxAbsDiff: number; optimizerStateBytes: number; unshardedStateBytes: number };
    };
    assert.equal(r.worldSize, 2);
    assert.ok(r.tensorParallel.logitsMaxAbsDiff < 1e-3, `TP logits differ by ${r.tensorParallel.logitsMaxAbsDiff}`);
    assert.ok(Math.abs(r.tensorParallel.lossTp - r.tensorParallel.lossSingle) < 1e-4, `TP loss ${r.tensorParallel.lossTp} vs ${r.tensorParallel.lossSingle}`);
    assert.ok(r.tensorParallel.gradMaxRelDiff < 1e-3, `TP gradients differ by ${r.tensorParallel.gradMaxRelDiff} (relative to each tensor's largest)`);
    assert.ok(r.tensorParallel.logitsBf16MaxAbsDiff < 5e-2, `TP bf16 logits differ by ${r.tensorParallel.logitsBf16MaxAbsDiff}`);
    assert.ok(r.tensorParallel.gradNormSingle > 1, `clipping is active (norm ${r.tensorParallel.gradNormSingle})`);
    assert.ok(Math.abs(r.tensorParallel.gradNormTp - r.tensorParallel.gradNormSingle) < 1e-4 * r.tensorParallel.gradNormSingle, `TP gradient norm ${r.tensorParallel.gradNormTp} vs ${r.tensorParallel.gradNormSingle}`);
    r.tensorParallel.lossesTp.forEach((l, i) => assert.ok(Math.abs(l - r.tensorParallel.lossesSingle[i]!) < 1e-4, `TP loss after step ${i}: ${l} vs ${r.tensorParallel.lossesSingle[i]}`));
    assert.ok(r.tensorParallel.paramMaxAbsDiff < 1e-4, `TP parameters after clipped AdamW differ by ${r.tensorParallel.paramMaxAbsDiff}`);
    r.zero.lossesZero.forEach((l, i) => assert.ok(Math.abs(l - r.zero.lossesSingle[i]!) < 1e-4, `ZeRO-1 loss ${i}: ${l} vs ${r.zero.lossesSingle[i]}`));
    assert.ok(r.zero.paramMaxAbsDiff < 1e-4, `ZeRO-1 parameters differ by ${r.zero.paramMaxAbsDiff}`);
    assert.ok(r.zero.optimizerStateBytes <= r.zero.unshardedStateBytes / 2 + 8, `ZeRO-1 state ${r.zero.optimizerStateBytes} B vs ${r.zero.unshardedStateBytes} B unsharded`);
    r.dataParallel.lossesDp.forEach((l, i) => assert.ok(Math.abs(l - r.dataParallel.lossesSingle[i]!) < 1e-4, `DP loss ${i}: ${l} vs ${r.dataParallel.lossesSingle[i]}`));
    assert.ok(r.dataParallel.paramMaxAbsDiff < 1e-4, `DP parameters differ by ${r.dataParallel.paramMaxAbsDiff}`);
    assert.ok(r.dataParallel.reducedDuringBackward > 0, 'buckets were reduced inside the backward');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
