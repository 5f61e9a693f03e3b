// A BERT checkpoint for encoder inference (HF BertModel / BertForMaskedLM saved by save_pretrained): the
// weight table — every tensor by its canonical name (with the "bert." prefix) and the shape we store it in —
// for the heads the checkpoint carries, and the loading of its safetensors file(s) into one workspace.
//
// Storage (views of one weight workspace, nn/workspace.ts):
//   - each layer's query/key/value weights are stored back to back ([3H, H]) and so are their biases
//     ([3H]): one QKV GEMM, whose output columns [q | k | v] biasQkvSplit cuts into heads;
//   - the word embeddings (and an untied MLM decoder, and the MLM bias) are padded to a multiple of 64
//     rows (nn/parameters.ts) so the MLM logits GEMM keeps 16-byte aligned rows; padding rows are zero.
//
// Names in files, normalised before matching:
//   - BertModel files lack the "bert." prefix (embeddings.*, encoder.*, pooler.*); BertForMaskedLM has it;
//     RoBERTa / XLM-RoBERTa files say "roberta." where BERT's say "bert.", and name the MLM head lm_head.*
//     (dense, layer_norm, decoder, bias) where BERT's is cls.predictions.*; MPNet files say "mpnet.", name the
//     attention's projections attn.q / k / v / o and its LayerNorm attention.LayerNorm, and hold
//     encoder.relative_attention_bias (no token-type table); DistilBERT files say "distilbert." and
//     transformer.layer.N (attention.q_lin / k_lin / v_lin / out_lin, sa_layer_norm, ffn.lin1 / lin2,
//     output_layer_norm) and name the MLM head vocab_transform / vocab_layer_norm / vocab_projector;
//   - TensorFlow-converted files name LayerNorm parameters gamma/beta;
//   - the MLM decoder is tied to the word embeddings unless config.json says tie_word_embeddings: false:
//     a tied cls.predictions.decoder.weight is HF's alias and is skipped; cls.predictions.decoder.bias is
//     an alias of cls.predictions.bias (either one fills it, versions of transformers save one or the other).
// Heads are read when present: the pooler (BertModel) when bert.pooler.dense.weight is in the files, the
// MLM head when cls.predictions.transform.dense.weight is; their other tensors are then required. Tensors no
// weight uses (the NSP head cls.seq_relationship.*, ...) are reported as unused; buffers (position_ids,
// token_type_ids) are skipped. A tensor with a shape other than the config implies, a dtype other than
// F32/F16/BF16, a duplicate, or a missing one is an error naming it and the file.

import { ArgumentError } from '../errors.js';
import { openWeightFile } from '../io/weight-file.js';
import type { BertConfig } from '../models/bert.js';
import { hasTokenTypes } from '../models/bert.js';
import { paddedVocabSize } from '../nn/parameters.js';
import { formatShape } from '../tensor.js';
import type { WeightSpec } from './architecture.js';

/** Which heads a checkpoint carries. */
export interface BertHeads {
  /** BertModel's pooler: tanh(dense(h[CLS])). */
  readonly pooler: boolean;
  /** BertForMaskedLM's head: transform (dense + act + LayerNorm) and the decoder over the vocabulary. */
  readonly maskedLm: boolean;
  /** The MLM decoder has its own weight (tie_word_embeddings: false) instead of the word embeddings. */
  readonly untiedDecoder: boolean;
  /**
   * A sequence-classification head (cross-encoders, rerankers): BertForSequenceClassification's classifier
   * over the pooler's output ('bert'), or RobertaClassificationHead's dense + tanh + out_proj over the first
   * token's hidden state ('roberta'); with its number of labels.
   */
  readonly classifier?: { readonly kind: 'bert' | 'roberta'; readonly labels: number };
}

/** Canonical names of one encoder layer's weights. */
export interface BertLayerNames {
  /** query, key, value weights (stored back to back), then their biases. */
  readonly qkv: readonly string[];
  readonly qkvBias: readonly string[];
  readonly attentionOut: string;
  readonly attentionOutBias: string;
  readonly attentionNorm: { readonly gamma: string; readonly beta: string };
  readonly intermediate: string;
  readonly intermediateBias: string;
  readonly output: string;
  readonly outputBias: string;
  readonly outputNorm: { readonly gamma: string; readonly beta: string };
}

export const BERT_WEIGHT_NAMES = {
  wordEmbeddings: 'bert.embeddings.word_embeddings.weight',
  positionEmbeddings: 'bert.embeddings.position_embeddings.weight',
  tokenTypeEmbeddings: 'bert.embeddings.token_type_embeddings.weight',
  embeddingNorm: { gamma: 'bert.embeddings.LayerNorm.weight', beta: 'bert.embeddings.LayerNorm.bias' },
  /** MPNet: the relative position bias table [buckets, heads], shared by every layer. */
  relativeAttentionBias: 'bert.encoder.relative_attention_bias.weight',
  pooler: 'bert.pooler.dense.weight',
  poolerBias: 'bert.pooler.dense.bias',
  transform: 'cls.predictions.transform.dense.weight',
  transformBias: 'cls.predictions.transform.dense.bias',
  transformNorm: { gamma: 'cls.predictions.transform.LayerNorm.weight', beta: 'cls.predictions.transform.LayerNorm.bias' },
  decoder: 'cls.predictions.decoder.weight',
  decoderBias: 'cls.predictions.bias',
  classifier: 'classifier.weight',
  classifierBias: 'classifier.bias',
  classifierDense: 'classifier.dense.weight',
  classifierDenseBias: 'classifier.dense.bias',
  classifierOut: 'classifier.out_proj.weight',
  classifierOutBias: 'classifier.out_proj.bias',
} as const;

export function bertLayerNames(layer: number): BertLayerNames {
  const l = `bert.encoder.layer.${layer}`, self = `${l}.attention.self`;
  return {
    qkv: [`${self}.query.weight`, `${self}.key.weight`, `${self}.value.weight`],
    qkvBias: [`${self}.query.bias`, `${self}.key.bias`, `${self}.value.bias`],
    attentionOut: `${l}.attention.output.dense.weight`, attentionOutBias: `${l}.attention.output.dense.bias`,
    attentionNorm: { gamma: `${l}.attention.output.LayerNorm.weight`, beta: `${l}.attention.output.LayerNorm.bias` },
    intermediate: `${l}.intermediate.dense.weight`, intermediateBias: `${l}.intermediate.dense.bias`,
    output: `${l}.output.dense.weight`, outputBias: `${l}.output.dense.bias`,
    outputNorm: { gamma: `${l}.output.LayerNorm.weight`, beta: `${l}.output.LayerNorm.bias` },
  };
}

/** Every stored tensor of the encoder and the given heads, in storage order (packed groups adjacent). */
export function bertWeightSpecs(config: BertConfig, heads: BertHeads): WeightSpec[] {
  const { vocabSize: V, hidden: H, ffn: F, maxPositions: P, typeVocabSize: T } = config;
  const Vp = paddedVocabSize(V), n = BERT_WEIGHT_NAMES;
  const norm = (names: { gamma: string; beta: string }): WeightSpec[] => [{ name: names.gamma, shape: [H] }, { name: names.beta, shape: [H] }];
  const specs: WeightSpec[] = [
    { name: n.wordEmbeddings, shape: [Vp, H], fileShape: [V, H] },
    { name: n.positionEmbeddings, shape: [P, H] },
    ...(hasTokenTypes(config) ? [{ name: n.tokenTypeEmbeddings, shape: [T, H] }] : []),
    ...norm(n.embeddingNorm),
    ...(config.relativeAttentionBuckets !== undefined ? [{ name: n.relativeAttentionBias, shape: [config.relativeAttentionBuckets, config.heads] }] : []),
  ];
  for (let i = 0; i < config.layers; i++) {
    const l = bertLayerNames(i);
    specs.push(
      ...l.qkv.map((name, j): WeightSpec => ({ name, shape: [H, H], ...(j > 0 ? { packWithPrevious: true } : {}) })),
      ...l.qkvBias.map((name, j): WeightSpec => ({ name, shape: [H], ...(j > 0 ? { packWithPrevious: true } : {}) })),
      { name: l.attentionOut, shape: [H, H] }, { name: l.attentionOutBias, shape: [H] }, ...norm(l.attentionNorm),
      { name: l.intermediate, shape: [F, H] }, { name: l.intermediateBias, shape: [F] },
      { name: l.output, shape: [H, F] }, { name: l.outputBias, shape: [H] }, ...norm(l.outputNorm),
    );
  }
  if (heads.pooler) specs.push({ name: n.pooler, shape: [H, H] }, { name: n.poolerBias, shape: [H] });
  const classifier = heads.classifier;
  if (classifier?.kind === 'bert') specs.push({ name: n.classifier, shape: [classifier.labels, H] }, { name: n.classifierBias, shape: [classifier.labels] });
  if (classifier?.kind === 'roberta') {
    specs.push({ name: n.classifierDense, shape: [H, H] }, { name: n.classifierDenseBias, shape: [H] },
      { name: n.classifierOut, shape: [classifier.labels, H] }, { name: n.classifierOutBias, shape: [classifier.labels] });
  }
  if (heads.maskedLm) {
    specs.push({ name: n.transform, shape: [H, H] }, { name: n.transformBias, shape: [H] }, ...norm(n.transformNorm), { name: n.decoderBias, shape: [Vp], fileShape: [V] });
    if (heads.untiedDecoder) specs.push({ name: n.decoder, shape: [Vp, H], fileShape: [V, H] });
  }
  return specs;
}

/** Checkpoint tensors that are buffers, not weights. */
const NOT_WEIGHTS = [/(^|\.)position_ids$/, /(^|\.)token_type_ids$/];

/** RobertaForMaskedLM's head (lm_head.*) under the names of BertForMaskedLM's (cls.predictions.*). */
const ROBERTA_HEAD_NAMES: Readonly<Record<string, string>> = {
  'lm_head.dense.weight': 'cls.predictions.transform.dense.weight',
  'lm_head.dense.bias': 'cls.predictions.transform.dense.bias',
  'lm_head.layer_norm.weight': 'cls.predictions.transform.LayerNorm.weight',
  'lm_head.layer_norm.bias': 'cls.predictions.transform.LayerNorm.bias',
  'lm_head.decoder.weight': 'cls.predictions.decoder.weight',
  'lm_head.decoder.bias': 'cls.predictions.decoder.bias',
  'lm_head.bias': 'cls.predictions.bias',
};

/** DistilBERT's names (after "distilbert." / "transformer." became "bert." / "encoder.") as BERT's. */
const DISTILBERT_LAYER_NAMES: readonly [RegExp, string][] = [
  [/\.attention\.q_lin\./, '.attention.self.query.'], [/\.attention\.k_lin\./, '.attention.self.key.'],
  [/\.attention\.v_lin\./, '.attention.self.value.'], [/\.attention\.out_lin\./, '.attention.output.dense.'],
  [/\.sa_layer_norm\./, '.attention.output.LayerNorm.'], [/\.ffn\.lin1\./, '.intermediate.dense.'],
  [/\.ffn\.lin2\./, '.output.dense.'], [/\.output_layer_norm\./, '.output.LayerNorm.'],
];
const DISTILBERT_HEAD_NAMES: Readonly<Record<string, string>> = {
  'vocab_transform.weight': 'cls.predictions.transform.dense.weight', 'vocab_transform.bias': 'cls.predictions.transform.dense.bias',
  'vocab_layer_norm.weight': 'cls.predictions.transform.LayerNorm.weight', 'vocab_layer_norm.bias': 'cls.predictions.transform.LayerNorm.bias',
  'vocab_projector.weight': 'cls.predictions.decoder.weight', 'vocab_projector.bias': 'cls.predictions.bias',
};

/**
 * The canonical name a checkpoint tensor name stands for: "bert." prefixed (a RoBERTa / XLM-RoBERTa file's
 * "roberta." too), LayerNorm gamma/beta as weight/bias, RoBERTa's lm_head.* as cls.predictions.*.
 */
export function canonicalBertName(name: string): string {
  if (Object.hasOwn(ROBERTA_HEAD_NAMES, name)) return ROBERTA_HEAD_NAMES[name]!;
  if (Object.hasOwn(DISTILBERT_HEAD_NAMES, name)) return DISTILBERT_HEAD_NAMES[name]!;
  let canonical = /^(embeddings|encoder|pooler|transformer)\./.test(name) ? `bert.${name}` : name.replace(/^(roberta|mpnet|distilbert)\./, 'bert.');
  // DistilBERT: transformer.layer.N with q_lin / k_lin / v_lin / out_lin, sa_layer_norm, ffn.lin1 / lin2, output_layer_norm.
  if (canonical.startsWith('bert.transformer.layer.')) {
    canonical = canonical.replace(/^bert\.transformer\./, 'bert.encoder.');
    for (const [pattern, replacement] of DISTILBERT_LAYER_NAMES) canonical = canonical.replace(pattern, replacement);
  }
  // MPNet's attention: attn.q / k / v / o and a LayerNorm directly under attention.
  canonical = canonical.replace(/\.attention\.attn\.([qkv])\./, (_, p: string) => `.attention.self.${{ q: 'query', k: 'key', v: 'value' }[p]}.`)
    .replace(/\.attention\.attn\.o\./, '.attention.output.dense.').replace(/\.attention\.LayerNorm\./, '.attention.output.LayerNorm.');
  canonical = canonical.replace(/LayerNorm\.gamma$/, 'LayerNorm.weight').replace(/LayerNorm\.beta$/, 'LayerNorm.bias');
  return canonical;
}

/** A tensor of a checkpoint: where it is and what it holds. */
export interface CheckpointTensor {
  readonly file: string;
  /** Its name in the file. */
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
}

/** Every tensor of the files by canonical name (a name that appears twice is an error naming both files). */
export function indexCheckpoint(files: readonly string[]): Map<string, CheckpointTensor> {
  const index = new Map<string, CheckpointTensor>();
  for (const file of files) {
    const reader = openWeightFile(file);
    try {
      for (const info of reader.tensors) {
        const canonical = canonicalBertName(info.name);
        const earlier = index.get(canonical);
        if (earlier) throw new ArgumentError(`${file}: tensor '${info.name}' also appears in ${earlier.file} (as '${earlier.name}')`);
        index.set(canonical, { file, name: info.name, dtype: info.dtype, shape: info.shape });
      }
    } finally {
      reader.close();
    }
  }
  return index;
}

/** The heads a checkpoint carries (from its tensor names) and config.json's tie_word_embeddings. */
export function checkpointHeads(index: ReadonlyMap<string, CheckpointTensor>, tieWordEmbeddings: boolean): BertHeads {
  const maskedLm = index.has(BERT_WEIGHT_NAMES.transform);
  const out = index.get(BERT_WEIGHT_NAMES.classifierOut) ?? index.get(BERT_WEIGHT_NAMES.classifier);
  const kind = index.has(BERT_WEIGHT_NAMES.classifierOut) ? 'roberta' : 'bert';
  const classifier = out && out.shape.length === 2 ? { kind, labels: out.shape[0]! } as const : undefined;
  return { pooler: index.has(BERT_WEIGHT_NAMES.pooler), maskedLm, untiedDecoder: maskedLm && !tieWordEmbeddings, ...(classifier ? { classifier } : {}) };
}

/** Where each weight comes from in the checkpoint, and the tensors no weight uses. */
export interface CheckpointPlan {
  readonly sources: ReadonlyMap<string, CheckpointTensor>;
  readonly unused: readonly string[];
}

/**
 * Matches the weight table to the checkpoint: every weight needs a tensor of its file shape (the MLM bias
 * may come from its decoder.bias alias). Throws naming the first bad tensor, or up to five missing ones.
 */
export function planCheckpoint(specs: readonly WeightSpec[], index: ReadonlyMap<string, CheckpointTensor>, heads: BertHeads, dir: string): CheckpointPlan {
  const sources = new Map<string, CheckpointTensor>();
  const missing: string[] = [];
  const aliases: Readonly<Record<string, string>> = { [BERT_WEIGHT_NAMES.decoderBias]: 'cls.predictions.decoder.bias' };
  for (const spec of specs) {
    const alias = aliases[spec.name];
    const tensor = index.get(spec.name) ?? (alias !== undefined ? index.get(alias) : undefined);
    if (!tensor) { missing.push(`'${spec.name}' ${formatShape(spec.fileShape ?? spec.shape)}`); continue; }
    const expected = spec.fileShape ?? spec.shape;
    if (formatShape(tensor.shape) !== formatShape(expected)) {
      throw new ArgumentError(`${tensor.file}: tensor '${tensor.name}' has shape ${formatShape(tensor.shape)}; the BERT config (${dir}/config.json) implies ${formatShape(expected)}`);
    }
    if (tensor.dtype !== 'F32' && tensor.dtype !== 'F16' && tensor.dtype !== 'BF16') {
      throw new ArgumentError(`${tensor.file}: tensor '${tensor.name}' is ${tensor.dtype}; only F32, F16 and BF16 weights are read`);
    }
    sources.set(spec.name, tensor);
  }
  if (missing.length > 0) {
    const parts = [heads.pooler ? 'pooler' : '', heads.maskedLm ? 'MLM head' : '', heads.classifier ? 'classification head' : ''].filter(Boolean);
    const what = parts.length > 0 ? ` (with its ${parts.join(' and ')})` : '';
    throw new ArgumentError(`${dir}: the checkpoint lacks ${missing.length} weight(s) the BERT encoder${what} needs: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}`);
  }
  const used = new Set([...sources.values()].map((t) => `${t.file}\u0000${t.name}`));
  const unused: string[] = [];
  for (const [canonical, t] of index) {
    if (used.has(`${t.file}\u0000${t.name}`) || NOT_WEIGHTS.some((re) => re.test(t.name))) continue;
    // HF's aliases of tied tensors: the decoder weight of a tied head, the decoder bias beside cls.predictions.bias.
    if (canonical === BERT_WEIGHT_NAMES.decoder && heads.maskedLm && !heads.untiedDecoder) continue;
    if (canonical === 'cls.predictions.decoder.bias' && heads.maskedLm) continue;
    unused.push(t.name);
  }
  return { sources, unused };
}

/** Reads each planned tensor as f32 values and hands it to `store(name, values)`, a file at a time. */
export function readCheckpoint(plan: CheckpointPlan, store: (name: string, values: Float32Array) => void): void {
  const byFile = new Map<string, [string, CheckpointTensor][]>();
  for (const [name, t] of plan.sources) {
    const list = byFile.get(t.file) ?? [];
    list.push([name, t]);
    byFile.set(t.file, list);
  }
  for (const [file, tensors] of byFile) {
    const reader = openWeightFile(file);
    try {
      for (const [name, t] of tensors) store(name, reader.readFloats(t.name));
    } finally {
      reader.close();
    }
  }
}
