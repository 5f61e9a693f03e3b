// The training loop end to end on the CPU: it learns, writes a loss curve and checkpoints, and a run
// resumed from a checkpoint continues exactly as the uninterrupted run does.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { BERT_PRESETS } from '../../src/models/bert.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { tokenizeDocuments } from '../../src/train/data.js';
import type { TrainConfig } from '../../src/train/trainer.js';
import { trainLanguageModel } from '../../src/train/trainer.js';

const tokenizer = createByteTokenizer();
const text = Array.from({ length: 300 }, (_, i) => `the whale ${i % 7} swims; the sea is ${['grey', 'blue', 'wide'][i % 3]}. `).join('');
const tokens = tokenizeDocuments([text], tokenizer);

function config(outDir: string, steps: number, resume = false): TrainConfig {
  return {
    model: { family: 'gpt2', config: { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 32, layers: 2, heads: 2, ffn: 64, maxPositions: 32 } },
    dtype: 'f32', batchSize: 4, seqLen: 16, steps, seed: 5,
    schedule: { kind: 'cosine', lr: 1e-2, minLr: 1e-3, warmupSteps: 2, totalSteps: 12 },
    optimizer: { weightDecay: 0.01 }, evalEvery: 4, evalBatches: 2, checkpointEvery: 4, keepCheckpoints: 3,
    outDir, resume, validationFraction: 0.1, checkpointActivations: 0,
    sample: { prompt: 'the ', tokens: 8, temperature: 0 },
  };
}

test('trainLanguageModel learns, writes its curve and checkpoints, and resumes exactly', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-trainer-'));
  const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };
  try {
    const files = { 'tokenizer.json': '{"model": {"type": "BPE"}}', 'tokenizer_config.json': '{}' };
    const full = trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...config(join(dir, 'full'), 12), files }, quiet);
    assert.equal(full.steps, 12);
    // The extra files (the tokenizer) land in every checkpoint as given, and stay out of trainer.json.
    assert.equal(readFileSync(join(full.checkpoint, 'tokenizer.json'), 'utf8'), files['tokenizer.json']);
    assert.equal(readFileSync(join(full.checkpoint, 'tokenizer_config.json'), 'utf8'), '{}');
    assert.ok(!readFileSync(join(full.checkpoint, 'trainer.json'), 'utf8').includes('BPE'));
    assert.ok(full.finalLoss < 4.5, `loss after 12 steps: ${full.finalLoss}`);
    assert.ok(existsSync(full.plot.svg));
    assert.ok(existsSync(join(full.checkpoint, 'model.safetensors')) && existsSync(join(full.checkpoint, 'config.json')));
    assert.equal(full.sample.slice(0, 4), 'the ');

    // Stop at 8 (checkpoint at 8), then resume to 12.
    const part = join(dir, 'part');
    trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(part, 8), quiet);
    const resumed = trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(part, 12, true), quiet);
    assert.equal(resumed.steps, 12);
    assert.equal(resumed.finalLoss, full.finalLoss);
    assert.equal(resumed.evalLoss, full.evalLoss);

    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(join(dir, 'empty'), 4, true), quiet), /no checkpoint/);
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...config(dir, 4), seqLen: 64 }, quiet), /exceeds the model's n_positions/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('trainLanguageModel trains BERT as a masked LM with the byte tokenizer and resumes exactly', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-trainer-bert-'));
  const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };
  const bertTokenizer = createByteTokenizer({ specialTokens: ['[PAD]', '[CLS]', '[SEP]', '[MASK]'], padToken: '[PAD]' });
  const bertTokens = tokenizeDocuments([text], bertTokenizer);
  const bertConfig = (outDir: string, steps: number, resume = false): TrainConfig => ({
    ...config(outDir, steps, resume),
    model: { family: 'bert', config: { ...BERT_PRESETS['bert-tiny']!, vocabSize: bertTokenizer.vocabSize, hidden: 32, layers: 2, heads: 2, ffn: 64, maxPositions: 32, hiddenDropout: 0.1, attentionDropout: 0.1 } },
  });
  try {
    const full = trainLanguageModel(new CpuBackend(), bertTokens, bertTokenizer, bertConfig(join(dir, 'full'), 12), quiet);
    assert.ok(full.evalLoss! < Math.log(bertTokenizer.vocabSize), `masked-LM validation loss ${full.evalLoss}`);
    assert.equal(full.sample, '');
    assert.match(readFileSync(join(full.checkpoint, 'config.json'), 'utf8'), /"model_type": "bert"/);
    const part = join(dir, 'part');
    trainLanguageModel(new CpuBackend(), bertTokens, bertTokenizer, bertConfig(part, 8), quiet);
    const resumed = trainLanguageModel(new CpuBackend(), bertTokens, bertTokenizer, bertConfig(part, 12, true), quiet);
    assert.equal(resumed.finalLoss, full.finalLoss);
    // Without [MASK] in the vocabulary there is no masked LM.
    assert.throws(() => trainLanguageModel(new CpuBackend(), bertTokens, tokenizer, bertConfig(join(dir, 'x'), 2), quiet), /needs the token \[MASK\]/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a run directory holds one run: a new run is refused where checkpoints exist (--resume / overwrite), and nothing is lost', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-trainer-out-'));
  const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };
  try {
    const out = join(dir, 'run');
    trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(out, 8), quiet);
    const before = readdirSync(out).filter((n) => n.startsWith('step-')).sort();
    assert.deepEqual(before, ['step-00000004', 'step-00000008']);
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(out, 3), quiet), /holds checkpoints of an earlier run \(step-00000004, step-00000008\): --resume continues it, --overwrite starts over/);
    assert.deepEqual(readdirSync(out).filter((n) => n.startsWith('step-')).sort(), before, 'the refused run deleted nothing');
    // Resuming at or past --steps is refused and leaves the checkpoint as it was.
    const saved = readFileSync(join(out, 'step-00000008', 'trainer.json'), 'utf8');
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(out, 8, true), quiet), /is at step 8, which --steps 8 does not go past/);
    assert.equal(readFileSync(join(out, 'step-00000008', 'trainer.json'), 'utf8'), saved);
    // overwrite: the earlier run's checkpoints go, the new run's alone remain.
    trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...config(out, 3), overwrite: true }, quiet);
    assert.deepEqual(readdirSync(out).filter((n) => n.startsWith('step-')), ['step-00000003']);
    // An --out that is a file is named.
    writeFileSync(join(dir, 'file'), 'x');
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, config(join(dir, 'file'), 2), quiet), /train --out: '.*file' exists and is not a directory/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a validation split too small for one batch is refused before training; a diverged run fails without a checkpoint', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-trainer-checks-'));
  const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };
  try {
    // 10% of these tokens holds fewer than 128 windows of 16 + 1.
    assert.ok(tokens.length * 0.1 < 128 * 16);
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...config(join(dir, 'small'), 2), batchSize: 128 }, quiet),
      /the validation split \(the last 10% of the data, \d+ tokens\) does not fill one evaluation batch of 128 × 16/);
    assert.ok(!existsSync(join(dir, 'small', 'step-00000002')));
    const diverged = join(dir, 'diverged');
    const c = config(diverged, 3);
    assert.throws(() => trainLanguageModel(new CpuBackend(), tokens, tokenizer, { ...c, checkpointEvery: 0, schedule: { ...c.schedule, lr: 1e30, minLr: 1e29, warmupSteps: 0 } }, quiet), /the run diverged/);
    assert.equal(existsSync(join(diverged, 'step-00000003')), false, 'no checkpoint of the diverged weights');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
