// A few decode steps of one model, nothing measured: the process a profiler attaches to (bench/ncu.sh runs
// Nsight Compute on it). The model and step are bench/decode-timeline.ts's — random bf16 weights, optionally
// quantized, 32-token prompts, greedy — in the plain build (no timeline stamps), captured and replayed as in
// the decode bench: `--steps` steps after the first one (eager, which compiles and captures).
//
// Usage: node dist/bench/decode-drive.js [--model llama] [--batch 1] [--quant bf16|int4|int8|int4-head|int8-head] [--steps 4]

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { randomDecoderModel } from '../src/infer/model.js';
import { quantizeDecoderModel } from '../src/infer/quantized.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig } from '../src/models/registry.js';

export const DRIVE_MODELS: Record<string, string> = { gpt2: 'gpt2-124M', llama: 'llama-1.2B' };
export const DRIVE_PRECISIONS: Record<string, { bits?: 4 | 8; lmHead?: boolean }> = {
  bf16: {}, int4: { bits: 4 }, int8: { bits: 8 }, 'int4-head': { bits: 4, lmHead: true }, 'int8-head': { bits: 8, lmHead: true },
};
const PROMPT = 32;

/** The run's settings from its command line; a bad value is an error naming the flag. */
export function driveOptions(argv: readonly string[]): { model: string; batch: number; precision: string; steps: number } {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      model: { type: 'string', default: 'llama' }, batch: { type: 'string', default: '1' },
      quant: { type: 'string', default: 'bf16' }, steps: { type: 'string', default: '4' },
    },
  });
  const batch = Number(values.batch), steps = Number(values.steps);
  if (!DRIVE_MODELS[values.model!]) throw new Error(`--model: '${values.model}' is not one of ${Object.keys(DRIVE_MODELS).join(', ')}`);
  if (!DRIVE_PRECISIONS[values.quant!]) throw new Error(`--quant: '${values.quant}' is not one of ${Object.keys(DRIVE_PRECISIONS).join(', ')}`);
  if (!Number.isInteger(batch) || batch < 1) throw new Error(`--batch: a positive integer, got '${values.batch}'`);
  if (!Number.isInteger(steps) || steps < 1) throw new Error(`--steps: a positive integer, got '${values.steps}'`);
  return { model: values.model!, batch, precision: values.quant!, steps };
}

async function main(): Promise<void> {
  const o = driveOptions(process.argv.slice(2));
  const { backend } = await selectBackend('cuda');  // an error naming what is missing without a GPU
  const model = randomDecoderModel(presetConfig(DRIVE_MODELS[o.model]!), backend, { dtype: 'bf16', seed: 1n });
  const q = DRIVE_PRECISIONS[o.precision]!;
  if (q.bits) quantizeDecoderModel(model, { method: 'rtn', bits: q.bits, groupSize: 128, lmHead: q.lmHead ?? false });
  const engine = new DecodeEngine(model, { maxBatch: o.batch, maxLen: PROMPT + o.steps + 16 });
  const vocab = model.arch.vocabSize;
  engine.start(Array.from({ length: o.batch }, (_, b) => ({
    prompt: Array.from({ length: PROMPT }, (_, i) => (b * 7919 + i * 104729) % vocab), maxNewTokens: o.steps + 8, sampling: resolveSampling({ temperature: 0 }),
  })), []);
  engine.decode(1 + o.steps);
  backend.synchronize();
  engine.collect();
  engine.dispose();
  model.free();
  console.log(`decode-drive: ${DRIVE_MODELS[o.model]} ${o.precision} batch ${o.batch}, ${1 + o.steps} steps`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main().catch((error: unknown) => {
    console.error(`decode-drive: ${(error as Error).message}`);
    process.exitCode = 1;
  });
}
