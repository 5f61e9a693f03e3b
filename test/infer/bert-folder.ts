// Tiny Hugging Face BERT folders for the encoder tests: config.json and random weights in safetensors laid
// out as BertModel (no "bert." prefix, pooler) or BertForMaskedLM ("bert." prefix, cls.predictions head)
// save them, with the name variants published checkpoints use (TensorFlow's gamma/beta, the MLM bias under
// decoder.bias, an untied decoder), and a WordPiece tokenizer.json for the CLI.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { roundToDType } from '../../src/dtype.js';
import type { BertConfig } from '../../src/models/bert.js';
import { bertConfigToJson } from '../../src/models/bert.js';
import { Rng } from '../../src/testing/random.js';
import type { HostWeights } from './hf-folder.js';
import { writeCheckpointFiles } from './hf-folder.js';

/** Vocabulary 99 (not a multiple of 64: the padded rows are exercised), head size 8, erf GELU. */
export const TINY_BERT: BertConfig = {
  vocabSize: 99, hidden: 32, layers: 2, heads: 4, ffn: 48, activation: 'gelu', maxPositions: 40, typeVocabSize: 2,
  layerNormEps: 1e-12, hiddenDropout: 0.1, attentionDropout: 0.1, padTokenId: 0,
};

export interface BertFolderOptions {
  /** BertModel's pooler (default true). */
  readonly pooler?: boolean;
  /** BertForMaskedLM's cls.predictions head (default true). */
  readonly maskedLm?: boolean;
  /** An untied decoder weight (config tie_word_embeddings: false). */
  readonly untiedDecoder?: boolean;
  /** Names without "bert." (as BertModel saves them). */
  readonly stripPrefix?: boolean;
  /** LayerNorm parameters named gamma/beta (TensorFlow-converted files). */
  readonly tensorflowNames?: boolean;
  /** The MLM bias stored as cls.predictions.decoder.bias instead of cls.predictions.bias. */
  readonly decoderBiasName?: boolean;
  /** Two files listed by model.safetensors.index.json. */
  readonly sharded?: boolean;
  /** Extra config.json fields. */
  readonly config?: Record<string, unknown>;
  /** Changes to the tensors as written (names as in the file), for error tests. */
  readonly edit?: (tensors: HostWeights) => void;
  readonly fileDType?: 'F32' | 'BF16';
  /** Standard deviation of the matrices (default 0.2: large enough that attention is far from uniform). */
  readonly matrixStd?: number;
}

/** Random weights by canonical name (gains near 1, small biases, matrices std 0.2 by default), as f32 values. */
export function randomBertWeights(config: BertConfig, seed: number, options: BertFolderOptions = {}): HostWeights {
  const rng = new Rng(seed);
  const { vocabSize: V, hidden: H, ffn: F } = config;
  const weights: HostWeights = new Map();
  const std = options.matrixStd ?? 0.2;
  const matrix = (name: string, shape: number[]) => weights.set(name, { shape, data: rng.floats(shape[0]! * shape[1]!, std) });
  const bias = (name: string, n: number) => weights.set(name, { shape: [n], data: rng.floats(n, 0.1) });
  const norm = (name: string) => { weights.set(`${name}.weight`, { shape: [H], data: rng.floats(H, 0.1, 1) }); bias(`${name}.bias`, H); };
  matrix('bert.embeddings.word_embeddings.weight', [V, H]);
  matrix('bert.embeddings.position_embeddings.weight', [config.maxPositions, H]);
  matrix('bert.embeddings.token_type_embeddings.weight', [config.typeVocabSize, H]);
  norm('bert.embeddings.LayerNorm');
  for (let i = 0; i < config.layers; i++) {
    const l = `bert.encoder.layer.${i}`;
    for (const p of ['query', 'key', 'value']) { matrix(`${l}.attention.self.${p}.weight`, [H, H]); bias(`${l}.attention.self.${p}.bias`, H); }
    matrix(`${l}.attention.output.dense.weight`, [H, H]); bias(`${l}.attention.output.dense.bias`, H);
    norm(`${l}.attention.output.LayerNorm`);
    matrix(`${l}.intermediate.dense.weight`, [F, H]); bias(`${l}.intermediate.dense.bias`, F);
    matrix(`${l}.output.dense.weight`, [H, F]); bias(`${l}.output.dense.bias`, H);
    norm(`${l}.output.LayerNorm`);
  }
  if (options.pooler ?? true) { matrix('bert.pooler.dense.weight', [H, H]); bias('bert.pooler.dense.bias', H); }
  if (options.maskedLm ?? true) {
    matrix('cls.predictions.transform.dense.weight', [H, H]); bias('cls.predictions.transform.dense.bias', H);
    norm('cls.predictions.transform.LayerNorm');
    bias('cls.predictions.bias', V);
    if (options.untiedDecoder) matrix('cls.predictions.decoder.weight', [V, H]);
  }
  if (options.fileDType === 'BF16') for (const t of weights.values()) t.data = t.data.map((x) => roundToDType(x, 'bf16'));
  return weights;
}

/** The name a tensor has in a file written with `options`. */
function fileName(name: string, options: BertFolderOptions): string {
  let out = options.stripPrefix ? name.replace(/^bert\./, '') : name;
  if (options.tensorflowNames) out = out.replace(/LayerNorm\.weight$/, 'LayerNorm.gamma').replace(/LayerNorm\.bias$/, 'LayerNorm.beta');
  if (options.decoderBiasName && out === 'cls.predictions.bias') out = 'cls.predictions.decoder.bias';
  return out;
}

/** Writes config.json and the weights into `dir` (created); returns the weights by canonical name. */
export function writeBertFolder(dir: string, config: BertConfig, seed: number, options: BertFolderOptions = {}): HostWeights {
  mkdirSync(dir, { recursive: true });
  const weights = randomBertWeights(config, seed, options);
  const architectures = options.maskedLm ?? true ? ['BertForMaskedLM'] : ['BertModel'];
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    ...bertConfigToJson(config), architectures, ...(options.untiedDecoder ? { tie_word_embeddings: false } : {}), ...options.config,
  }));
  const inFile: HostWeights = new Map([...weights].map(([name, t]) => [fileName(name, options), { shape: [...t.shape], data: t.data.slice() }]));
  options.edit?.(inFile);
  const dtype = options.fileDType ?? 'F32';
  const entries = [...inFile].map(([name, t]) => ({
    name, dtype, shape: t.shape,
    bytes: dtype === 'F32' ? new Uint8Array(Float32Array.from(t.data).buffer) : bf16Bytes(t.data),
  }));
  writeCheckpointFiles(dir, entries, options.sharded ?? false);
  return weights;
}

function bf16Bytes(values: Float32Array): Uint8Array {
  const words = new Uint32Array(Float32Array.from(values).buffer), out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = words[i]! >>> 16; // values are already bf16-exact
  return new Uint8Array(out.buffer);
}

/** WordPiece vocabulary of the tokenizer fixture: the ids a tiny BERT's 99-row table covers. */
export const BERT_TEST_VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', 'the', 'cat', 'sat', 'on', 'mat', '##s', '!', ',', '.'];

/** A bert-base-uncased style tokenizer.json (BertNormalizer, [CLS] … [SEP] template) and tokenizer_config.json. */
export function writeBertTokenizer(dir: string): void {
  const special = (content: string) => ({ id: BERT_TEST_VOCAB.indexOf(content), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify({
    version: '1.0', truncation: null, padding: null,
    added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map(special),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: Object.fromEntries(BERT_TEST_VOCAB.map((t, i) => [t, i])) },
  }));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ do_lower_case: true, pad_token: '[PAD]', cls_token: '[CLS]', sep_token: '[SEP]', unk_token: '[UNK]' }));
}
