// Rank functions of the parallel trainer test (runInProcessRanks imports this module in each worker).

import type { Communicator } from '../../src/dist/communicator.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { tokenizeDocuments } from '../../src/train/data.js';
import type { TrainConfig, TrainParallel } from '../../src/train/trainer.js';
import { trainLanguageModel } from '../../src/train/trainer.js';

export const TRAIN_TEXT = Array.from({ length: 300 }, (_, i) => `the whale ${i % 7} swims; the sea is ${['grey', 'blue', 'wide'][i % 3]}. `).join('');

/** The trainer test's GPT-2 run (dropout off, so every parallel form computes the single-rank step). */
export function trainConfig(outDir: string, steps: number, resume = false): TrainConfig {
  return {
    model: { family: 'gpt2', config: { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 32, layers: 2, heads: 2, ffn: 64, maxPositions: 32, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0 } },
    dtype: 'f32', batchSize: 4, seqLen: 16, steps, seed: 5,
    schedule: { kind: 'cosine', lr: 1e-2, minLr: 1e-3, warmupSteps: 2, totalSteps: 8 },
    optimizer: { weightDecay: 0.01, maxGradNorm: 0.5 }, evalEvery: 4, evalBatches: 2, checkpointEvery: 4, keepCheckpoints: 3,
    outDir, resume, validationFraction: 0.1, checkpointActivations: 0,
    sample: { prompt: 'the ', tokens: 8, temperature: 0 },
  };
}

export interface TrainRankInput {
  readonly outDir: string;
  readonly steps: number;
  readonly mode: TrainParallel['mode'];
  readonly zero: boolean;
}

export interface TrainRankOutput {
  readonly finalLoss: number;
  readonly evalLoss: number | undefined;
  readonly sample: string;
  readonly checkpoint: string;
}

export function trainRank(comm: Communicator, input: TrainRankInput): TrainRankOutput {
  const tokenizer = createByteTokenizer();
  const tokens = tokenizeDocuments([TRAIN_TEXT], tokenizer);
  const quiet = { log: () => {}, progressStream: { write: () => true, isTTY: false } as unknown as NodeJS.WritableStream };
  const r = trainLanguageModel(comm.backend, tokens, tokenizer, { ...trainConfig(input.outDir, input.steps), parallel: { comm, mode: input.mode, zero: input.zero } }, quiet);
  return { finalLoss: r.finalLoss, evalLoss: r.evalLoss, sample: r.sample, checkpoint: r.checkpoint };
}
