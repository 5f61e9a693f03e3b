// `fuseformer train --tp N | --dp N [--zero]`: the flags are checked against the launcher's environment
// before any backend starts (the NCCL run itself needs GPUs: test/gpu/multi-gpu.test.ts).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parallelPlan, runTrain } from '../../src/cli/train.js';

const launched = (world: number, rank = 0) => ({ RANK: String(rank), WORLD_SIZE: String(world), LOCAL_RANK: String(rank), MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29600' });

test('--tp / --dp / --zero become a parallel plan matching WORLD_SIZE', () => {
  assert.equal(parallelPlan(1, 1, false, {}), undefined);
  assert.deepEqual(parallelPlan(2, 1, false, launched(2, 1)), { mode: 'tensor', zero: false, env: { rank: 1, worldSize: 2, localRank: 1, masterAddr: '127.0.0.1', masterPort: 29600 } });
  assert.equal(parallelPlan(1, 4, true, launched(4))!.mode, 'data');
  assert.equal(parallelPlan(1, 4, true, launched(4))!.zero, true);
  assert.throws(() => parallelPlan(2, 2, false, launched(4)), /tensor and data parallelism together .* are not supported/);
  assert.throws(() => parallelPlan(1, 1, true, {}), /--zero shards the optimizer over data-parallel ranks/);
  assert.throws(() => parallelPlan(1, 2, false, {}), /--dp 2 needs 2 processes, but WORLD_SIZE is 1: run it as `fuseformer launch --gpus 2 -- fuseformer train/);
  assert.throws(() => parallelPlan(4, 1, false, launched(2)), /--tp 4 needs 4 processes, but WORLD_SIZE is 2/);
});

test('fuseformer train refuses --dp outside the launcher and --tp on the CPU backend', async () => {
  const saved = { ...process.env };
  try {
    for (const k of ['RANK', 'WORLD_SIZE', 'LOCAL_RANK']) delete process.env[k];
    await assert.rejects(runTrain(['--dp', '2', '--steps', '1']), /WORLD_SIZE is 1/);
    Object.assign(process.env, launched(2));
    await assert.rejects(runTrain(['--tp', '2', '--backend', 'cpu']), /need the CUDA backend, not --backend cpu/);
  } finally {
    for (const k of ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  }
});

test('fuseformer train refuses a zero step count, batch size or sequence length by flag name', async () => {
  for (const [flag, value] of [['--steps', '0'], ['--batch-size', '0'], ['--seq-len', '0'], ['--batch-size', '2.5']] as const) {
    await assert.rejects(runTrain([flag, value, '--backend', 'cpu']), new RegExp(`${flag} must be a positive integer, got '${value}'`));
  }
  await assert.rejects(runTrain(['--warmup', '-1', '--backend', 'cpu']), /--warmup/);
});
