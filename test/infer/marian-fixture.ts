// A tiny random MarianMTModel directory, written the way Hugging Face's save_pretrained lays it out:
// config.json, model.safetensors (HF names, the sinusoidal tables included), generation_config.json (opus-mt's
// settings: pad banned, forced EOS, renormalised logits) and a word-level tokenizer.json.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeSafetensors } from '../../src/io/safetensors.js';
import type { MarianConfig } from '../../src/models/marian.js';
import { MARIAN_PRESETS, marianConfigToJson } from '../../src/models/marian.js';
import { sinusoidalPositions, transformerMtParameterSpecs } from '../../src/models/transformer-mt.js';
import { Rng } from '../../src/testing/random.js';
import { identityNormalizer, modelOf, piece } from '../io/sentencepiece-writer.js';

/** 26 words a..z, then </s> (26), <unk> (27), <pad> (28). */
export const WORDS = 'abcdefghijklmnopqrstuvwxyz'.split('');
export const EOS = 26, UNK = 27, PAD = 28;

/**
 * Marian's layout at toy size. The LM head is untied: a random tied head favours repeating the input token
 * (its own embedding scores highest), which makes every search return the same dull sequence.
 */
export const TINY_MARIAN: MarianConfig = {
  ...MARIAN_PRESETS['marian-base']!, vocabSize: 29, decoderVocabSize: 29, hidden: 16, encoderLayers: 2, decoderLayers: 2,
  encoderHeads: 2, decoderHeads: 2, encoderFfn: 24, decoderFfn: 24, activation: 'silu', maxPositions: 40, tieWordEmbeddings: false,
  decoderStartTokenId: PAD, padTokenId: PAD, eosTokenId: EOS, dropout: 0, attentionDropout: 0, activationDropout: 0,
};

export interface FixtureOptions {
  readonly config?: MarianConfig;
  readonly seed?: number;
  /** Added to final_logits_bias[eos]: larger values end sequences sooner. */
  readonly eosBias?: number;
  /** The name the shared token table is saved under (HF versions differ). */
  readonly sharedName?: string;
  readonly generation?: Record<string, unknown>;
  /** Matrices and embeddings are N(0, (weightScale/√D)²). */
  readonly weightScale?: number;
}

export function writeTinyMarian(options: FixtureOptions = {}): string {
  const config = options.config ?? TINY_MARIAN;
  const rng = new Rng(options.seed ?? 7);
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-marian-'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(marianConfigToJson(config)));
  const D = config.hidden;
  const tensors = transformerMtParameterSpecs(config).map((spec) => {
    const shape = spec.fileShape ?? spec.shape;
    const n = shape.reduce((a, b) => a * b, 1);
    // Weights large enough that attention and the softmax over tokens are far from uniform.
    let data: Float32Array;
    if (spec.name.endsWith('layer_norm.weight')) data = rng.floats(n, 0.1, 1);
    else if (spec.name === 'final_logits_bias') {
      data = rng.floats(n, 0.3);
      data[config.eosTokenId] = data[config.eosTokenId]! + (options.eosBias ?? 0);
    } else if (spec.name.endsWith('.bias')) data = rng.floats(n, 0.1);
    else data = rng.floats(n, (options.weightScale ?? 1) / Math.sqrt(D));
    const name = spec.name === 'model.shared.weight' && options.sharedName ? options.sharedName : spec.name;
    return { name, dtype: 'F32' as const, shape, bytes: new Uint8Array(data.buffer) };
  });
  const positions = sinusoidalPositions(config.maxPositions, D);
  for (const side of ['encoder', 'decoder']) {
    tensors.push({ name: `model.${side}.embed_positions.weight`, dtype: 'F32', shape: [config.maxPositions, D], bytes: new Uint8Array(positions.slice().buffer) });
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors);
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify(options.generation ?? {
    decoder_start_token_id: config.decoderStartTokenId, pad_token_id: config.padTokenId, eos_token_id: config.eosTokenId,
    forced_eos_token_id: config.eosTokenId, bad_words_ids: [[config.padTokenId]], num_beams: 3, max_length: 12, renormalize_logits: true,
  }));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordTokenizerJson()));
  return dir;
}

/** Words split on whitespace, each letter a token; </s> appended by the post-processor. */
function wordTokenizerJson(): Record<string, unknown> {
  const vocab = [...WORDS, '</s>', '<unk>', '<pad>'];
  const special = (content: string) => ({ id: vocab.indexOf(content), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: ['</s>', '<unk>', '<pad>'].map(special),
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [],
      special_tokens: { '</s>': { id: '</s>', ids: [EOS], tokens: ['</s>'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '<unk>', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  };
}

/** Random sources: lengths in [low, high], the last token EOS, words otherwise. */
export function randomSources(rng: Rng, count: number, low: number, high: number): number[][] {
  return Array.from({ length: count }, () => {
    const length = low + Math.floor(rng.next() * (high - low + 1));
    return [...Array.from({ length: length - 1 }, () => Math.floor(rng.next() * WORDS.length)), EOS];
  });
}

/**
 * Replaces the directory's tokenizer.json by an opus-mt download's files: source.spm and target.spm (a unigram
 * model of the 26 words as "▁a" … "▁z") and the joint vocab.json in the model's ids.
 */
export function useMarianTokenizerFiles(dir: string): void {
  rmSync(join(dir, 'tokenizer.json'), { force: true });
  const spm = modelOf(piece('<unk>', 0, 2), piece('<s>', 0, 3), piece('</s>', 0, 3), ...WORDS.map((w) => piece(`▁${w}`, -1, 1)), identityNormalizer());
  writeFileSync(join(dir, 'source.spm'), spm);
  writeFileSync(join(dir, 'target.spm'), spm);
  writeFileSync(join(dir, 'vocab.json'), JSON.stringify({ ...Object.fromEntries(WORDS.map((w, i) => [`▁${w}`, i])), '</s>': EOS, '<unk>': UNK, '<pad>': PAD }));
}
