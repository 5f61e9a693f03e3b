// `fuseformer train --tp/--dp` underneath: the training loop over in-process CPU ranks. Tensor parallel
// (2 ranks), data parallel (2 ranks, bucketed all-reduce) and data parallel with ZeRO-1 give the
// single-rank run's losses (clipping on) and its greedy sample; rank 0 writes a checkpoint of full
// tensors that a single-rank run resumes from.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runInProcessRanks } from '../../src/dist/in-process.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { tokenizeDocuments } from '../../src/train/data.js';
import { trainLanguageModel } from '../../src/train/trainer.js';
import type { TrainRankInput, TrainRankOutput } from './train-fixtures.js';
import { TRAIN_TEXT, trainConfig } from './train-fixtures.js';

const fixtures = new URL('./train-fixtures.js', import.meta.url);
const tokenizer = createByteTokenizer();
const tokens = tokenizeDocuments([TRAIN_TEXT], tokenizer);
const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };

test('the trainer over 2 ranks — tensor parallel, data parallel, ZeRO-1 — matches the single-rank run', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-train-parallel-'));
  try {
    const single = trainLanguageModel(new CpuBackend(), tokens, tokenizer, trainConfig(join(dir, 'single'), 8), quiet);
    for (const [mode, zero] of [['tensor', false], ['data', false], ['data', true]] as const) {
      const outDir = join(dir, `${mode}${zero ? '-zero' : ''}`);
      const [r0, r1] = await runInProcessRanks<TrainRankInput, TrainRankOutput>(2, fixtures, 'trainRank', { outDir, steps: 8, mode, zero });
      const what = `${mode} parallel${zero ? ' with ZeRO-1' : ''}`;
      assert.ok(Math.abs(r0!.finalLoss - single.finalLoss) < 1e-4, `${what}: final loss ${r0!.finalLoss} vs ${single.finalLoss}`);
      assert.ok(Math.abs(r0!.evalLoss! - single.evalLoss!) < 1e-4, `${what}: validation loss ${r0!.evalLoss} vs ${single.evalLoss}`);
      assert.equal(r1!.finalLoss, r0!.finalLoss, `${what}: every rank reports the same loss`);
      assert.equal(r0!.sample, single.sample, `${what}: greedy sample`);
      assert.ok(existsSync(join(r0!.checkpoint, 'model.safetensors')), `${what}: rank 0 wrote the checkpoint`);
    }
    // The tensor-parallel run's checkpoint (full tensors) resumes on one rank.
    const resumed = trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...trainConfig(join(dir, 'tensor'), 10, true), schedule: { ...trainConfig('', 10).schedule, totalSteps: 10 } }, quiet);
    assert.equal(resumed.steps, 10);
    assert.ok(Number.isFinite(resumed.finalLoss));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the trainer refuses parallel settings it cannot run', async () => {
  const backend = new CpuBackend();
  const comm = { rank: 0, worldSize: 3, backend } as unknown as import('../../src/dist/communicator.js').Communicator;
  assert.throws(() => trainLanguageModel(backend, tokens, tokenizer, { ...trainConfig('/nonexistent', 1), parallel: { comm, mode: 'data' } }, quiet), /batch size 4 must be divisible by the 3 data-parallel ranks/);
  assert.throws(() => trainLanguageModel(backend, tokens, tokenizer, { ...trainConfig('/nonexistent', 1), parallel: { comm, mode: 'tensor', zero: true } }, quiet), /ZeRO-1 shards the optimizer over data-parallel ranks/);
});
