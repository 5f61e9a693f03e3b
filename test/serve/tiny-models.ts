// The serving tests' tiny GPT-2 and Llama models on the CPU backend: both written as Hugging Face folders
// (hf-folder.ts) into a temporary directory, removed when the test file ends, and loaded in f32.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

export type TinyFamily = 'gpt2' | 'llama';

/** TINY_GPT2 and TINY_LLAMA with weights drawn from `seed`, loaded on one CPU backend. */
export function tinyServingModels(seed: number): Record<TinyFamily, DecoderModel> {
  const root = mkdtempSync(join(tmpdir(), 'fuseformer-serve-models-'));
  after(() => rmSync(root, { recursive: true, force: true }));
  const backend = new CpuBackend();
  const load = (family: TinyFamily) => {
    const dir = join(root, family);
    writeModelFolder(dir, family, family === 'gpt2' ? TINY_GPT2 : TINY_LLAMA, seed);
    return loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
  };
  return { gpt2: load('gpt2'), llama: load('llama') };
}
