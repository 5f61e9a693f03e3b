// Two GPUs over NCCL through the launcher (skips below two visible GPUs or without libnccl): runs
// bench/multi-gpu.js's correctness sections under `fuseformer launch --gpus 2` and checks that tensor
// parallel logits, loss and gradients, and data parallel losses and parameters, match one GPU.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { ncclAvailable } from '../../src/cuda/nccl.js';
import { probeCuda } from '../../src/cuda/probe.js';

const probe = probeCuda();
const gpus = probe.devices?.length ?? 0;
const skip = !probe.available ? `no usable CUDA GPU: ${probe.reason}` : gpus < 2 ? `${gpus} GPU visible, 2 needed` : !ncclAvailable() ? 'libnccl.so.2 not found' : false;

test('2 GPUs: TP and DP GPT-2 through NCCL match one GPU', { skip, timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'ff-multi-gpu-'));
  try {
    const json = join(dir, 'result.json');
    const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
    const bench = fileURLToPath(new URL('../../bench/multi-gpu.js', import.meta.url));
    const run = spawnSync(process.execPath, [main, 'launch', '--gpus', '2', '--master-port', '29531', '--', process.execPath, bench, '--skip', 'collectives,scaling', '--json', json], { encoding: 'utf8', timeout: 280_000 });
    assert.equal(run.status, 0, `launch failed:\n${run.stdout}\n${run.stderr}`);
    const r = JSON.parse(readFileSync(json, 'utf8')) as {
      worldSize: number;
      tensorParallel: { logitsMaxAbsDiff: number; lossTp: number; lossSingle: number; gradMaxRelDiff: number };
      dataParallel: { lossesDp: number[]; lossesSingle: number[]; paramMaxAbsDiff: number; reducedDuringBackward: number };
    };
    assert.equal(r.worldSize, 2);
    assert.ok(r.tensorParallel.logitsMaxAbsDiff < 1e-3, `TP logits differ by ${r.tensorParallel.logitsMaxAbsDiff}`);
    assert.ok(Math.abs(r.tensorParallel.lossTp - r.tensorParallel.lossSingle) < 1e-4, `TP loss ${r.tensorParallel.lossTp} vs ${r.tensorParallel.lossSingle}`);
    assert.ok(r.tensorParallel.gradMaxRelDiff < 1e-3, `TP gradients differ by ${r.tensorParallel.gradMaxRelDiff} (relative to each tensor's largest)`);
    r.dataParallel.lossesDp.forEach((l, i) => assert.ok(Math.abs(l - r.dataParallel.lossesSingle[i]!) < 1e-4, `DP loss ${i}: ${l} vs ${r.dataParallel.lossesSingle[i]}`));
    assert.ok(r.dataParallel.paramMaxAbsDiff < 1e-4, `DP parameters differ by ${r.dataParallel.paramMaxAbsDiff}`);
    assert.ok(r.dataParallel.reducedDuringBackward > 0, 'buckets were reduced inside the backward');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
