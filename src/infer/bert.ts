// BERT-family encoder inference on any Backend — HF BertModel / BertForMaskedLM checkpoints and the RoBERTa,
// XLM-RoBERTa, MPNet and DistilBERT ones (the same encoder with other names, position ids, no token types, and
// MPNet's relative position bias on the scores): last_hidden_state, pooler_output, sentence embeddings (mean or
// [CLS] pooling, optionally L2-normalised, optionally through Dense layers), masked-LM logits, and a
// sequence-classification head's logits (cross-encoders).
//
// A batch is B sequences of L tokens (rectangular; the attention mask marks each row's real tokens, which
// must come first: right padding, as BERT tokenizers pad). Rows are R = B·L, row r = b·L + l.
//   x   = wte[ids] + wpe[p]                              embedTokens                          [R, H]
//         p = l (BERT, DistilBERT); RoBERTa family, MPNet: the padding id for a padding token, else the
//         padding id + the token's count in its row
//   y   = tte[token types]                               embedTokens (a row gather; not MPNet, DistilBERT) [R, H]
//   h   = LN_emb(x + y)                                  residualNorm
//   per layer (post-LN):
//     qkv = h·Wqkvᵀ                                      GEMM (Q, K, V weights stored as one)  [R, 3H]
//     q, k, v = split(qkv + bqkv)                        biasQkvSplit                          [B, heads, L, d]
//     c   = softmax(q·kᵀ/√d + key padding)·v             flashAttentionForward (keyLengths), or the
//                                                        materialised scores: batched GEMM, softmax, GEMM
//                                                        (MPNet: + bias[bucket(j − i)] — a copy of the bias
//                                                        the GEMM accumulates onto, materialised scores only)
//     h   = LN_1(h + merge(c)·Woᵀ + bo)                  permute0213, GEMM, residualNorm
//     u   = act(h·W1ᵀ + b1)                              GEMM with a GELU(tanh)/ReLU epilogue, or GEMM then
//                                                        biasActivationDropout (erf GELU: BERT's "gelu")
//     h   = LN_2(h + u·W2ᵀ + b2)                         GEMM, residualNorm
//   pooler_output = tanh(h[b·L]·Wpᵀ + bp)                embedTokens (row gather), GEMM, tanhActivation (denseLayer)
//   sentence embeddings                                  pooling.ts (mean, first or last token; Dense layers)
//   MLM logits    = LN_t(act(h·Wtᵀ + bt))·wteᵀ + b       GEMM (+ activation), residualNorm, GEMM with a bias epilogue
// Each residual add is fused into the LayerNorm after it (residualNorm: x ← x + y + bias, out = LN(x)), so the
// residual stream alternates between two buffers. Padded positions compute like any other (their queries see
// the real keys only, as in HF), so last_hidden_state matches HF there too; pooling ignores them.
//
// Attention path ('auto'): the fused flash op where its tensor-core kernels apply (16-bit, d a multiple of
// 16 up to 256); otherwise the materialised scores (f32: two cuBLASLt GEMMs and a softmax), unless the
// [B, heads, L, L] scores would take more than MATERIALIZED_SCORE_BYTES, where the fused op's SIMT kernels
// take over. Activations are allocated per call (the caching allocator recycles them on CUDA).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { byteSize } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { BertConfig } from '../models/bert.js';
import { hasTokenTypes, maxSequenceTokens, positionOffset, positionPaddingId } from '../models/bert.js';
import { ConfigFields, readConfigFile } from '../models/config-fields.js';
import { shardFiles } from '../models/hf-weights.js';
import { loadModelConfig } from '../models/registry.js';
import { paddedVocabSize } from '../nn/parameters.js';
import { layoutWorkspace, Workspace } from '../nn/workspace.js';
import type { WorkspaceEntry } from '../nn/workspace.js';
import type { Tensor } from '../tensor.js';
import type { WeightSpec } from './architecture.js';
import type { BertHeads, BertLayerNames } from './bert-weights.js';
import type { DenseLayer, EmbeddingOptions, PendingEmbeddings } from './pooling.js';
import { checkedPooling, denseLayer, gatherRows, poolLater } from './pooling.js';
import { BERT_WEIGHT_NAMES, bertLayerNames, bertWeightSpecs, checkpointHeads, indexCheckpoint, planCheckpoint, readCheckpoint } from './bert-weights.js';

export type BertAttentionPath = 'auto' | 'flash' | 'materialized';

/** Above this many bytes of [B, heads, L, L] scores, 'auto' takes the fused attention op even in f32. */
export const MATERIALIZED_SCORE_BYTES = 1 << 30;

export interface BertLoadOptions {
  /** Weights and activations (default bf16 on CUDA, f32 on the CPU). */
  readonly dtype?: FloatDType;
  readonly attention?: BertAttentionPath;
}

export interface BertEncoding {
  readonly batch: number;
  readonly length: number;
  readonly hidden: number;
  /** [B, L, H], row-major. */
  readonly lastHiddenState: Float32Array;
  /** [B, H]: tanh(dense(h[:, 0])); only when the checkpoint has BertModel's pooler. */
  readonly poolerOutput?: Float32Array;
}

/** BERT embeddings' options (the shared pooling module's). */
export type BertEmbeddingOptions = EmbeddingOptions;

interface NormWeights { readonly gamma: Tensor; readonly beta: Tensor }

interface LayerWeights {
  /** [3H, H]: query, key, value weights back to back. */
  readonly qkv: Tensor;
  readonly qkvBias: Tensor;
  readonly attentionOut: Tensor;
  readonly attentionOutBias: Tensor;
  readonly attentionNorm: NormWeights;
  readonly intermediate: Tensor;
  readonly intermediateBias: Tensor;
  readonly output: Tensor;
  readonly outputBias: Tensor;
  readonly outputNorm: NormWeights;
}

/** A batch after its checks, as the device reads it. */
interface CheckedBatch {
  readonly batch: number;
  readonly length: number;
  readonly ids: Int32Array;
  readonly types: Int32Array;
  /** Real tokens per sequence (the attention mask's ones). */
  readonly lengths: Int32Array;
}

/** One forward pass's result, valid inside the callback that reads it. */
interface EncoderPass {
  readonly batch: CheckedBatch;
  /** [R, H]: last_hidden_state. */
  readonly hidden: Tensor;
  /** A temporary tensor freed with the pass's activations. */
  readonly temp: (shape: readonly number[], dtype: FloatDType | 'i32' | 'u8') => Tensor;
}

export interface LoadedBert {
  readonly encoder: BertEncoder;
  readonly files: readonly string[];
  /** Tensors in the files that no weight uses (e.g. the NSP head), reported rather than refused. */
  readonly unused: readonly string[];
}

export class BertEncoder {
  readonly workspace: Workspace;
  readonly attention: BertAttentionPath;
  private readonly wordEmbeddings: Tensor;
  private readonly positionEmbeddings: Tensor;
  /** Undefined for MPNet, which has no token types. */
  private readonly tokenTypeEmbeddings?: Tensor;
  /** MPNet's relative position bias table [buckets, heads] on the device, and its host copy once read. */
  private readonly relativeAttentionBias?: Tensor;
  private relativeAttentionBiasHost?: Float32Array;
  /** MPNet: one sequence's position bias [heads, L, L] by length L, as built on the host. */
  private readonly positionBiasByLength = new Map<number, Float32Array>();
  private readonly embeddingNorm: NormWeights;
  private readonly layers: readonly LayerWeights[];
  /** BertModel's pooler: tanh(dense(h[CLS])). */
  private readonly pooler?: DenseLayer;
  /** A sequence-classification head over the first token: RoBERTa's dense + tanh, or BERT's pooler, then out. */
  private readonly classifier?: { readonly features: DenseLayer; readonly out: DenseLayer };
  private readonly maskedLm?: { readonly transform: Tensor; readonly transformBias: Tensor; readonly norm: NormWeights; readonly decoder: Tensor; readonly decoderBias: Tensor };
  private readonly entries: ReadonlyMap<string, WorkspaceEntry>;
  private readonly specs: ReadonlyMap<string, WeightSpec>;
  private freed = false;

  constructor(
    readonly backend: Backend,
    readonly config: BertConfig,
    readonly heads: BertHeads,
    readonly dtype: FloatDType,
    options: { attention?: BertAttentionPath } = {},
    /** Where the weights came from, for messages (the workspace starts zero-filled; load() uploads a checkpoint). */
    readonly source = 'BERT encoder',
  ) {
    if (options.attention !== undefined && !['auto', 'flash', 'materialized'].includes(options.attention)) {
      throw new ArgumentError(`BERT: attention must be 'auto', 'flash' or 'materialized', got '${String(options.attention)}'`);
    }
    this.attention = options.attention ?? 'auto';
    const specs = bertWeightSpecs(config, heads);
    const layout = layoutWorkspace(specs, dtype);
    this.workspace = Workspace.allocate(backend, layout);
    this.entries = new Map(layout.entries.map((e) => [e.name, e]));
    this.specs = new Map(specs.map((w) => [w.name, w]));
    const one = (name: string) => this.workspace.get(name);
    const norm = (n: { gamma: string; beta: string }): NormWeights => ({ gamma: one(n.gamma), beta: one(n.beta) });
    const n = BERT_WEIGHT_NAMES;
    this.wordEmbeddings = one(n.wordEmbeddings);
    this.positionEmbeddings = one(n.positionEmbeddings);
    if (hasTokenTypes(config)) this.tokenTypeEmbeddings = one(n.tokenTypeEmbeddings);
    if (config.relativeAttentionBuckets !== undefined) {
      if (this.attention === 'flash') throw new ArgumentError('BERT: attention \'flash\' cannot add MPNet\'s relative position bias; MPNet runs the materialised scores');
      this.relativeAttentionBias = one(n.relativeAttentionBias);
    }
    this.embeddingNorm = norm(n.embeddingNorm);
    this.layers = Array.from({ length: config.layers }, (_, i): LayerWeights => {
      const l: BertLayerNames = bertLayerNames(i);
      return {
        qkv: this.packed(l.qkv), qkvBias: this.packed(l.qkvBias), attentionOut: one(l.attentionOut), attentionOutBias: one(l.attentionOutBias),
        attentionNorm: norm(l.attentionNorm), intermediate: one(l.intermediate), intermediateBias: one(l.intermediateBias),
        output: one(l.output), outputBias: one(l.outputBias), outputNorm: norm(l.outputNorm),
      };
    });
    if (heads.pooler) this.pooler = { weight: one(n.pooler), bias: one(n.poolerBias), activation: 'tanh' };
    if (heads.classifier?.kind === 'bert') {
      if (!this.pooler) throw new ArgumentError(`${source}: a BERT classification head reads the pooler's output, and the checkpoint has no pooler (bert.pooler.dense.*)`);
      this.classifier = { features: this.pooler, out: { weight: one(n.classifier), bias: one(n.classifierBias), activation: 'identity' } };
    } else if (heads.classifier?.kind === 'roberta') {
      this.classifier = {
        features: { weight: one(n.classifierDense), bias: one(n.classifierDenseBias), activation: 'tanh' },
        out: { weight: one(n.classifierOut), bias: one(n.classifierOutBias), activation: 'identity' },
      };
    }
    if (heads.maskedLm) {
      this.maskedLm = {
        transform: one(n.transform), transformBias: one(n.transformBias), norm: norm(n.transformNorm),
        decoder: heads.untiedDecoder ? one(n.decoder) : this.wordEmbeddings, decoderBias: one(n.decoderBias),
      };
    }
  }

  /** Loads an HF BERT directory (config.json + model.safetensors or shards) onto `backend`. */
  static load(dir: string, backend: Backend, options: BertLoadOptions = {}): LoadedBert {
    const model = loadModelConfig(dir);
    if (model.family !== 'bert') {
      throw new ArgumentError(`${dir}: a ${model.family} model; BERT encoding reads BertModel / BertForMaskedLM directories (model_type "bert", "roberta", "xlm-roberta", "mpnet" or "distilbert")`);
    }
    const configPath = existsSync(join(dir, 'config.json')) ? join(dir, 'config.json') : dir;
    const fields = new ConfigFields(readConfigFile(configPath), configPath);
    fields.requireIfPresent('is_decoder', false, 'causal BERT decoders are not supported: the encoder attends both ways');
    const tieWordEmbeddings = fields.boolean('tie_word_embeddings', true);
    const files = shardFiles(dir);
    const index = indexCheckpoint(files);
    const heads = checkpointHeads(index, tieWordEmbeddings);
    const plan = planCheckpoint(bertWeightSpecs(model.config, heads), index, heads, dir);
    const dtype = options.dtype ?? (backend.name === 'cuda' ? 'bf16' : 'f32');
    const encoder = new BertEncoder(backend, model.config, heads, dtype, options.attention ? { attention: options.attention } : {}, dir);
    try {
      readCheckpoint(plan, (name, values) => backend.upload(encoder.fileView(name), values));
    } catch (error) {
      encoder.free();
      throw error;
    }
    return { encoder, files, unused: plan.unused };
  }

  readonly kind = 'BERT';
  get hidden(): number { return this.config.hidden; }
  get layerCount(): number { return this.config.layers; }
  get vocabSize(): number { return this.config.vocabSize; }
  get padTokenId(): number { return this.config.padTokenId; }
  get hasPooler(): boolean { return this.pooler !== undefined; }
  /** The classification head's label count (undefined without one). */
  get labels(): number | undefined { return this.heads.classifier?.labels; }

  /**
   * The sequence-classification head's logits [B·labels] (BertForSequenceClassification: the classifier over
   * pooler_output; RobertaClassificationHead: dense, tanh, out_proj over the first token's hidden state).
   */
  classify(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], tokenTypeIds?: readonly (readonly number[])[]): Float32Array {
    const head = this.classifier;
    if (!head) throw new ArgumentError(`${this.source}: the checkpoint has no sequence-classification head (classifier.weight or classifier.out_proj.weight): it is not a cross-encoder`);
    return this.pass(this.check(inputIds, attentionMask, tokenTypeIds), ({ batch, hidden, temp }) => {
      const features = denseLayer(this.backend, this.firstRows(hidden, batch, temp), head.features, temp);
      return this.backend.download(denseLayer(this.backend, features, head.out, temp)) as Float32Array;
    });
  }
  get hasMaskedLm(): boolean { return this.maskedLm !== undefined; }

  /** The stored tensor `name` without padding rows (its checkpoint shape). */
  fileView(name: string): Tensor {
    const e = this.entries.get(name), spec = this.specs.get(name);
    if (!e || !spec) throw new ArgumentError(`${this.source}: the BERT encoder has no weight '${name}'`);
    return this.backend.view(this.workspace.flat, e.offset, spec.fileShape ?? spec.shape);
  }

  /**
   * last_hidden_state [B, L, H] and (with a pooler) pooler_output [B, H] of a batch: inputIds [B][L] token ids,
   * attentionMask [B][L] of 1 (token) and 0 (padding, after the tokens; default all 1), tokenTypeIds [B][L]
   * (default all 0).
   */
  encode(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], tokenTypeIds?: readonly (readonly number[])[]): BertEncoding {
    return this.pass(this.check(inputIds, attentionMask, tokenTypeIds), ({ batch, hidden, temp }) => {
      const b = this.backend;
      const lastHiddenState = b.download(hidden) as Float32Array;
      let poolerOutput: Float32Array | undefined;
      if (this.pooler) poolerOutput = b.download(denseLayer(this.backend, this.firstRows(hidden, batch, temp), this.pooler, temp)) as Float32Array;
      return { batch: batch.batch, length: batch.length, hidden: this.config.hidden, lastHiddenState, ...(poolerOutput ? { poolerOutput } : {}) };
    });
  }

  /**
   * One vector [H] per sequence: the mean of its real tokens' hidden states (default) or its first ([CLS])
   * token's, optionally scaled to unit L2 norm (sentence embeddings).
   */
  embeddings(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], options: BertEmbeddingOptions = {}, tokenTypeIds?: readonly (readonly number[])[]): Float32Array[] {
    return this.embeddingsLater(inputIds, attentionMask, options, tokenTypeIds).wait();
  }

  /**
   * embeddings() without waiting for the GPU: the batch is checked and queued, and wait() reads and pools
   * it. A caller with several batches queues the next before waiting for this one, so the host's work
   * (checking, launching, pooling) overlaps the GPU's instead of leaving it idle between batches.
   */
  embeddingsLater(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], options: BertEmbeddingOptions = {}, tokenTypeIds?: readonly (readonly number[])[]): PendingEmbeddings {
    checkedPooling(options.pooling, 'BERT embeddings');
    return this.pass(this.check(inputIds, attentionMask, tokenTypeIds), ({ batch, hidden, temp }) => poolLater(this.backend, hidden, batch, options, temp, 'BERT embeddings'));
  }

  /** The most tokens a sequence may have (the position table past the RoBERTa family's offset). */
  get maxTokens(): number { return maxSequenceTokens(this.config); }

  /** Masked-LM logits [B·L·V] (row-major over positions) from the checkpoint's cls.predictions head. */
  maskedLmLogits(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], tokenTypeIds?: readonly (readonly number[])[]): Float32Array {
    const head = this.maskedLm;
    if (!head) throw new ArgumentError(`${this.source}: the checkpoint has no masked-LM head (cls.predictions.*): it was saved from BertModel, not BertForMaskedLM`);
    const V = this.config.vocabSize, Vp = paddedVocabSize(V), H = this.config.hidden;
    return this.pass(this.check(inputIds, attentionMask, tokenTypeIds), ({ batch, hidden, temp }) => {
      const b = this.backend, R = batch.batch * batch.length;
      const transformed = temp([R, H], this.dtype), normed = temp([R, H], this.dtype), logits = temp([R, Vp], this.dtype);
      // RobertaLMHead / MPNetLMHead apply the erf GELU whatever hidden_act says; BERT's and DistilBERT's transforms apply the config's.
      const type = this.config.modelType ?? 'bert';
      const activation = type === 'bert' || type === 'distilbert' ? this.config.activation : 'gelu';
      this.denseActivation(hidden, head.transform, head.transformBias, temp([R, H], this.dtype), transformed, this.activationMask([R, H], temp, activation), activation);
      b.residualNorm({ x: transformed, norm: 'layer', gamma: head.norm.gamma, beta: head.norm.beta, out: normed, eps: this.config.layerNormEps });
      b.gemm({ a: normed, b: head.decoder, out: logits, transB: true, epilogue: 'bias', bias: head.decoderBias });
      const all = b.download(logits) as Float32Array;
      if (Vp === V) return all;
      const out = new Float32Array(R * V);
      for (let r = 0; r < R; r++) out.set(all.subarray(r * Vp, r * Vp + V), r * V);
      return out;
    });
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    this.backend.free(this.workspace.flat);
  }

  // --- internals --------------------------------------------------------------------------------------

  /** The tensors `names` (stored back to back) as one tensor stacked along the first dimension. */
  private packed(names: readonly string[]): Tensor {
    const entries = names.map((n) => this.entries.get(n)!);
    const rows = entries.reduce((n, e) => n + e.shape[0]!, 0);
    return this.backend.view(this.workspace.flat, entries[0]!.offset, [rows, ...entries[0]!.shape.slice(1)]);
  }

  /** Checks a batch and lays it out as the device reads it. */
  private check(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], tokenTypeIds?: readonly (readonly number[])[]): CheckedBatch {
    if (this.freed) throw new ArgumentError('BERT: used after free()');
    const c = this.config;
    if (!Array.isArray(inputIds) || inputIds.length === 0) throw new ArgumentError('BERT: input_ids must be a non-empty list of token sequences');
    const B = inputIds.length, L = inputIds[0]?.length ?? 0;
    if (L < 1) throw new ArgumentError('BERT: input_ids[0] is empty; a sequence needs at least one token');
    const most = maxSequenceTokens(c);
    if (L > most) throw new ArgumentError(`BERT: sequences of ${L} tokens; the model takes at most ${most} (max_position_embeddings ${c.maxPositions}${most < c.maxPositions ? `, positions counted from ${c.maxPositions - most}` : ''})`);
    const grid = (name: string, rows: readonly (readonly number[])[] | undefined, valid: (x: number) => boolean, expected: string, fallback: number): Int32Array => {
      const out = new Int32Array(B * L).fill(fallback);
      if (rows === undefined) return out;
      if (!Array.isArray(rows) || rows.length !== B) throw new ArgumentError(`BERT: ${name} has ${Array.isArray(rows) ? rows.length : 'no'} rows; input_ids has ${B}`);
      for (let s = 0; s < B; s++) {
        const row = rows[s];
        if (!Array.isArray(row) || row.length !== L) throw new ArgumentError(`BERT: ${name}[${s}] has ${Array.isArray(row) ? row.length : 'no'} entries; every row needs ${L} (the batch is rectangular: pad with the attention mask)`);
        for (let l = 0; l < L; l++) {
          const x = row[l]!;
          if (!valid(x)) throw new ArgumentError(`BERT: ${name}[${s}][${l}] is ${String(x)}; expected ${expected}`);
          out[s * L + l] = x;
        }
      }
      return out;
    };
    const isInt = (low: number, high: number) => (x: number) => Number.isInteger(x) && x >= low && x < high;
    const ids = grid('input_ids', inputIds, isInt(0, c.vocabSize), `a token id in [0, ${c.vocabSize})`, 0);
    const mask = grid('attention_mask', attentionMask, (x) => x === 0 || x === 1, '0 or 1', 1);
    const types = grid('token_type_ids', tokenTypeIds, isInt(0, c.typeVocabSize), `a token type in [0, ${c.typeVocabSize}) (type_vocab_size)`, 0);
    const lengths = new Int32Array(B);
    for (let s = 0; s < B; s++) {
      let n = 0;
      while (n < L && mask[s * L + n] === 1) n++;
      for (let l = n; l < L; l++) {
        if (mask[s * L + l] === 1) throw new ArgumentError(`BERT: attention_mask[${s}] has a 1 at position ${l} after a 0 at ${n}; padding must follow the tokens (right padding)`);
      }
      if (n === 0) throw new ArgumentError(`BERT: attention_mask[${s}] is all zeros; every sequence needs at least one token`);
      lengths[s] = n;
    }
    return { batch: B, length: L, ids, types, lengths };
  }

  /** The attention path for a batch (see the header). */
  private useFlash(batch: CheckedBatch): boolean {
    if (this.relativeAttentionBias) return false;
    if (this.attention !== 'auto') return this.attention === 'flash';
    const d = this.config.hidden / this.config.heads;
    if (this.dtype !== 'f32' && d % 16 === 0 && d <= 256) return true;
    return batch.batch * this.config.heads * batch.length * batch.length * byteSize(this.dtype) > MATERIALIZED_SCORE_BYTES;
  }

  /** Runs the embeddings and every layer over `batch`, then `read(pass)` before the activations are freed. */
  private pass<T>(batch: CheckedBatch, read: (pass: EncoderPass) => T): T {
    const b = this.backend, c = this.config, dtype = this.dtype;
    const { batch: B, length: L } = batch, R = B * L, H = c.hidden, heads = c.heads, d = H / heads, F = c.ffn;
    const temporaries: Tensor[] = [];
    const temp = (shape: readonly number[], type: FloatDType | 'i32' | 'u8') => { const t = b.empty(shape, type); temporaries.push(t); return t; };
    try {
      const ids = temp([R], 'i32'), positions = temp([R], 'i32'), types = temp([R], 'i32'), lengths = temp([B], 'i32');
      b.upload(ids, batch.ids);
      b.upload(positions, positionIds(batch, c));
      b.upload(types, batch.types);
      b.upload(lengths, batch.lengths);
      let h = temp([R, H], dtype), spare = temp([R, H], dtype);
      const y = temp([R, H], dtype), merged = temp([R, H], dtype), qkv = temp([R, 3 * H], dtype);
      const [q, k, v, context] = [0, 1, 2, 3].map(() => temp([B, heads, L, d], dtype)) as [Tensor, Tensor, Tensor, Tensor];
      const up = temp([R, F], dtype), activated = temp([R, F], dtype), activationMask = this.activationMask([R, F], temp);
      const flash = this.useFlash(batch);
      const lse = flash ? temp([B, heads, L], 'f32') : undefined, scores = flash ? undefined : temp([B, heads, L, L], dtype);
      const scale = 1 / Math.sqrt(d), eps = c.layerNormEps;
      const bh = (t: Tensor, rows: number, cols: number) => b.view(t, 0, [B * heads, rows, cols]);

      b.embedTokens({ tokens: ids, tokenTable: this.wordEmbeddings, positions, positionTable: this.positionEmbeddings, out: spare });
      if (this.tokenTypeEmbeddings) {
        b.embedTokens({ tokens: types, tokenTable: this.tokenTypeEmbeddings, out: y });
        b.residualNorm({ x: spare, y, norm: 'layer', gamma: this.embeddingNorm.gamma, beta: this.embeddingNorm.beta, out: h, eps });
      } else {
        b.residualNorm({ x: spare, norm: 'layer', gamma: this.embeddingNorm.gamma, beta: this.embeddingNorm.beta, out: h, eps });
      }
      // MPNet: the relative position bias [heads, L, L], one copy a sequence, added to every layer's scores.
      const positionBias = this.relativeAttentionBias ? this.expandedPositionBias(B, L, temp) : undefined;
      for (const layer of this.layers) {
        b.gemm({ a: h, b: layer.qkv, out: qkv, transB: true });
        b.biasQkvSplit({ qkv: b.view(qkv, 0, [B, L, 3 * H]), bias: layer.qkvBias, heads, q, k, v });
        if (lse) {
          b.flashAttentionForward({ q, k, v, out: context, lse, scale, keyLengths: lengths });
        } else if (positionBias) {
          // scores = q·kᵀ/√d + bias (the GEMM accumulates onto a copy of the bias), then the masked softmax.
          b.copy(positionBias, scores!);
          b.batchedGemm({ a: bh(q, L, d), b: bh(k, L, d), out: bh(scores!, L, L), transB: true, alpha: scale, beta: 1 });
          b.softmaxForward({ x: scores!, out: scores!, scale: 1, keyLengths: lengths });
          b.batchedGemm({ a: bh(scores!, L, L), b: bh(v, L, d), out: bh(context, L, d) });
        } else {
          b.batchedGemm({ a: bh(q, L, d), b: bh(k, L, d), out: bh(scores!, L, L), transB: true });
          b.softmaxForward({ x: scores!, out: scores!, scale, keyLengths: lengths });
          b.batchedGemm({ a: bh(scores!, L, L), b: bh(v, L, d), out: bh(context, L, d) });
        }
        b.permute0213({ x: context, out: b.view(merged, 0, [B, L, heads, d]) });
        b.gemm({ a: merged, b: layer.attentionOut, out: y, transB: true });
        b.residualNorm({ x: h, y, bias: layer.attentionOutBias, norm: 'layer', gamma: layer.attentionNorm.gamma, beta: layer.attentionNorm.beta, out: spare, eps });
        [h, spare] = [spare, h];
        this.denseActivation(h, layer.intermediate, layer.intermediateBias, up, activated, activationMask);
        b.gemm({ a: activated, b: layer.output, out: y, transB: true });
        b.residualNorm({ x: h, y, bias: layer.outputBias, norm: 'layer', gamma: layer.outputNorm.gamma, beta: layer.outputNorm.beta, out: spare, eps });
        [h, spare] = [spare, h];
      }
      return read({ batch, hidden: h, temp });
    } finally {
      // Freed while queued work may still read them: the CUDA allocator is stream-ordered; the CPU ran the ops already.
      for (const t of temporaries) b.free(t);
    }
  }

  /**
   * MPNet's position bias for B sequences of L tokens, [B, heads, L, L]: bias[h, i, j] = table[bucket(j − i), h]
   * (the table read back from the device once), built on the host for one sequence and copied B times.
   */
  private expandedPositionBias(B: number, L: number, temp: EncoderPass['temp']): Tensor {
    const b = this.backend, heads = this.config.heads;
    let one = this.positionBiasByLength.get(L);
    if (!one) {
      const buckets = this.config.relativeAttentionBuckets!;
      const table = (this.relativeAttentionBiasHost ??= b.download(this.relativeAttentionBias!) as Float32Array);
      const bucketOf = Int32Array.from({ length: 2 * L - 1 }, (_, r) => relativePositionBucket(r - (L - 1), buckets));
      one = new Float32Array(heads * L * L);
      for (let h = 0; h < heads; h++) {
        for (let i = 0; i < L; i++) {
          const row = (h * L + i) * L;
          for (let j = 0; j < L; j++) one[row + j] = table[bucketOf[j - i + L - 1]! * heads + h]!;
        }
      }
      // Batches repeat a few (bucketed) lengths; a handful of them kept.
      if (this.positionBiasByLength.size >= 16) this.positionBiasByLength.delete(this.positionBiasByLength.keys().next().value!);
      this.positionBiasByLength.set(L, one);
    }
    const single = temp([heads * L * L], this.dtype), all = temp([B, heads, L, L], this.dtype);
    b.upload(single, one);
    for (let s = 0; s < B; s++) b.copy(single, b.view(all, s * heads * L * L, [heads * L * L]));
    return all;
  }

  /**
   * out = act(x·Wᵀ + bias) with the config's activation: GELU(tanh) and ReLU in the GEMM's epilogue, the erf
   * GELU (BERT's "gelu") and SiLU by biasActivationDropout (p = 0) over the GEMM's output `pre`.
   */
  private denseActivation(x: Tensor, weight: Tensor, bias: Tensor, pre: Tensor, out: Tensor, mask: Tensor | undefined, activation = this.config.activation): void {
    const b = this.backend;
    if (!mask) {
      b.gemm({ a: x, b: weight, out, transB: true, epilogue: activation === 'relu' ? 'relu_bias' : 'gelu_bias', bias });
      return;
    }
    b.gemm({ a: x, b: weight, out: pre, transB: true });
    b.biasActivationDropout({ input: pre, bias, out, mask, activation, p: 0, seed: 0n, offset: 0n });
  }

  /** The u8 keep mask biasActivationDropout writes (all ones at p = 0), or undefined where a GEMM epilogue applies the activation. */
  private activationMask(shape: readonly number[], temp: EncoderPass['temp'], activation = this.config.activation): Tensor | undefined {
    return activation === 'gelu_tanh' || activation === 'relu' ? undefined : temp(shape, 'u8');
  }

  /** The first ([CLS]) row of each sequence, [B, H], gathered from hidden [B·L, H]. */
  private firstRows(hidden: Tensor, batch: CheckedBatch, temp: EncoderPass['temp']): Tensor {
    return gatherRows(this.backend, hidden, Int32Array.from({ length: batch.batch }, (_, s) => s * batch.length), temp);
  }
}

/**
 * Position ids [B·L]: l for BERT; for the RoBERTa family HF's create_position_ids_from_input_ids — a padding
 * token at pad_token_id, the i-th other token of its row (from 1) at pad_token_id + i.
 */
export function positionIds(batch: { batch: number; length: number; ids: Int32Array }, config: BertConfig): Int32Array {
  const { batch: B, length: L, ids } = batch, out = new Int32Array(B * L);
  const pad = positionPaddingId(config);
  for (let s = 0; s < B; s++) {
    let count = 0;
    for (let l = 0; l < L; l++) {
      const r = s * L + l;
      out[r] = pad === undefined ? l : ids[r] === pad ? pad : pad + ++count;
    }
  }
  return out;
}

/**
 * MPNet's (T5's bidirectional) relative position bucket of key position − query position, as HF's
 * relative_position_bucket computes it: half the buckets for keys before the query, exact distances below a
 * quarter of the buckets, logarithmic ones up to 128, in float32 arithmetic (its rounding decides the bucket
 * where a distance is a power of two).
 */
export function relativePositionBucket(relative: number, buckets: number, maxDistance = 128): number {
  const half = Math.floor(buckets / 2), maxExact = Math.floor(half / 2);
  let n = -relative;
  const ret = n < 0 ? half : 0;
  n = Math.abs(n);
  if (n < maxExact) return ret + n;
  const f = Math.fround;
  const scaled = f(f(f(Math.log(f(n / maxExact))) / f(Math.log(maxDistance / maxExact))) * (half - maxExact));
  return ret + Math.min(maxExact + Math.trunc(scaled), half - 1);
}

/** Ragged token sequences as a rectangular batch: each padded with padTokenId to the longest, mask 1 then 0. */
export function padSequences(sequences: readonly (readonly number[])[], padTokenId: number): { inputIds: number[][]; attentionMask: number[][] } {
  const L = Math.max(0, ...sequences.map((s) => s.length));
  return {
    inputIds: sequences.map((s) => [...s, ...new Array<number>(L - s.length).fill(padTokenId)]),
    attentionMask: sequences.map((s) => [...new Array<number>(s.length).fill(1), ...new Array<number>(L - s.length).fill(0)]),
  };
}
