// What a model directory's config.json says about how it can run, read before loading anything (so a
// command can refuse an option that does not fit the model with a clear message). A config.json that does
// not parse reads as "no": the loaders report it with their own message.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isQuantizedDirectory } from '../infer/quantized.js';

/** A directory whose config.json has a quantization_config (`fuseformer quantize`, GPTQ, AWQ). */
export function readsAsQuantized(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    return typeof config === 'object' && config !== null && isQuantizedDirectory(config);
  } catch {
    return false; // the loaders report a malformed config.json with their own message
  }
}

/** A Marian-style encoder-decoder checkpoint (config.json's model_type or architectures). */
export function isEncoderDecoder(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { model_type?: unknown; architectures?: unknown };
    return config.model_type === 'marian' || (Array.isArray(config.architectures) && config.architectures.includes('MarianMTModel'));
  } catch {
    return false; // loadDecoderModel reports a malformed config.json with its own message
  }
}
