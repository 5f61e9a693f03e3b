// Tiny GPT-2 and Llama configs and prompts shared by the inference-engine GPU tests (CUDA against the
// CPU engine): prompts of 5, 17 and 1 tokens, so prefill sees a ragged batch and decode 1–3 rows.

import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA } from '../infer/hf-folder.js';

export const ENGINE_TEST_MODELS: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig }[] = [
  { name: 'gpt2', family: 'gpt2', config: { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 128 } },
  { name: 'llama', family: 'llama', config: { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 } },
];

export const ENGINE_TEST_PROMPTS = [[72, 101, 108, 108, 111], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [200]];

/** ‖a − b‖ / ‖b‖. */
export function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}
