// Reranking with a decoder model (reranker.ts' PairScorer for Qwen3-Reranker, …ForSequenceClassification
// decoders such as converted Qwen3 / Qwen2 / Llama rerankers and reward-style scorers): a pair's tokens through
// the decoder encoder (decoder-encoder.ts: the engine's prefill without a KV cache), the final norm's hidden state
// at the last token h, then one logit by a head applied on the device as a Dense layer after the pooling:
//   a causal LM (sentence-transformers' LogitScore)   logit(yes) − logit(no) = h·W[yes] − h·W[no]: the LM head's
//                                                    two rows (a tied head: the embedding's), not the vocabulary
//   …ForSequenceClassification                        h·score.weight (one label); HF pools the last token that is
//                                                    not the pad id, so trailing pad-id tokens are dropped first
//                                                    (causal attention: tokens after it change nothing)
// Pairs are formatted by the chat template where the model has one (chat-pairs.ts: the query / document roles,
// the prompt as a system message), else by the tokenizer's pair encoding (the prompt before the query).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { readConfigFile } from '../models/config-fields.js';
import { withTensor } from '../models/hf-weights.js';
import { join } from 'node:path';
import { formatShape } from '../tensor.js';
import type { EncodedPair, PairTemplate } from './chat-pairs.js';
import { ChatPairEncoder } from './chat-pairs.js';
import { DecoderEncoder } from './decoder-encoder.js';
import type { PaddedBatch } from './embedder.js';
import type { DenseLayer } from './pooling.js';
import type { PairScorer, PendingLogits } from './reranker.js';
import type { CrossEncoderConfig } from './sentence-transformers.js';
import type { PrefixStats } from './shared-prefix.js';

export interface DecoderScorerOptions {
  readonly dtype?: FloatDType;
  /** The most tokens (pairs × padded length) one pass takes (decoder-encoder.ts' DEFAULT_PASS_TOKENS). */
  readonly maxPassTokens?: number;
  /** The longest prefix a pass's pairs share that is computed once (decoder-encoder.ts' maxSharedPrefix). */
  readonly maxSharedPrefix?: number;
  /** Passes packed without padding (decoder-encoder.ts' packedPasses). */
  readonly packedPasses?: boolean;
  /** A chat template in place of the model's own (one that renders the query / document roles). */
  readonly chatTemplate?: PairTemplate;
}

/** The head's rows [count, hidden] (f32, host) and how they make one logit. */
interface HeadRows {
  readonly rows: Float32Array;
  readonly count: 1 | 2;
  readonly describe: string;
  /** …ForSequenceClassification: the pad id HF's pooling skips at the end of a sequence. */
  readonly trailingPadId?: number;
}

export class DecoderPairScorer implements PairScorer {
  readonly kind = 'decoder';
  private readonly head: DenseLayer;
  private readonly pairs?: ChatPairEncoder;

  private constructor(readonly encoder: DecoderEncoder, private readonly tokenizer: Tokenizer, private readonly rows: HeadRows, chatTemplate: PairTemplate | undefined, kwargs: Readonly<Record<string, unknown>>) {
    const template = chatTemplate ?? (tokenizer.chatTemplate !== undefined ? { text: tokenizer.chatTemplate, source: tokenizer.chatTemplateSource ?? tokenizer.source } : undefined);
    if (template) this.pairs = new ChatPairEncoder(tokenizer, template, kwargs);
    else if (!tokenizer.encodePair) throw new ArgumentError(`${encoder.model.source}: its tokenizer has no chat template and cannot encode a text pair; give a chat template (--chat-template)`);
    this.head = { weight: encoder.backend.fromArray(rows.rows, [rows.count, encoder.hidden], encoder.dtype), activation: 'identity' };
  }

  /** A decoder reranker directory (`modelDir`: the Transformer module's), its head read as `crossEncoder` and config.json say. */
  static load(modelDir: string, backend: Backend, tokenizer: Tokenizer, crossEncoder: CrossEncoderConfig | undefined, options: DecoderScorerOptions = {}): DecoderPairScorer {
    const { encoder } = DecoderEncoder.load(modelDir, backend, {
      ...(options.dtype ? { dtype: options.dtype } : {}), ...(options.maxPassTokens !== undefined ? { maxPassTokens: options.maxPassTokens } : {}),
      ...(options.maxSharedPrefix !== undefined ? { maxSharedPrefix: options.maxSharedPrefix } : {}),
      ...(options.packedPasses !== undefined ? { packedPasses: options.packedPasses } : {}),
    });
    try {
      const rows = headRows(modelDir, encoder, tokenizer, crossEncoder);
      return new DecoderPairScorer(encoder, tokenizer, rows, options.chatTemplate, crossEncoder?.chatTemplateKwargs ?? {});
    } catch (error) {
      encoder.free();
      throw error;
    }
  }

  get backend(): Backend { return this.encoder.backend; }
  get dtype(): FloatDType { return this.encoder.dtype; }
  get layerCount(): number { return this.encoder.layerCount; }
  get maxTokens(): number { return this.encoder.maxTokens; }
  get maxPassTokens(): number { return this.encoder.maxPassTokens; }
  get padTokenId(): number { return this.tokenizer.padTokenId ?? this.encoder.padTokenId; }
  get sharesPrefixes(): boolean { return this.encoder.maxSharedPrefix > 0; }
  get packedPasses(): boolean { return this.encoder.packedPasses; }
  get prefixStats(): PrefixStats { return this.encoder.prefixStats; }
  /** What the score is, for messages: 'logit("yes") − logit("no")', 'score.weight (…ForSequenceClassification)'. */
  get headDescription(): string { return this.rows.describe; }
  /** How pairs are formatted: 'chat template' or 'tokenizer pair'. */
  get pairFormat(): string { return this.pairs ? 'chat template' : 'tokenizer pair'; }

  encode(query: string, document: string, maxTokens: number, prompt?: string): EncodedPair {
    let pair: EncodedPair;
    if (this.pairs) pair = this.pairs.encode(query, document, maxTokens, prompt);
    else {
      const { ids, truncated } = this.tokenizer.encodePair!((prompt ?? '') + query, document, maxTokens);
      pair = { ids, truncated };
    }
    const pad = this.rows.trailingPadId;
    if (pad === undefined) return pair;
    let end = pair.ids.length;
    while (end > 1 && pair.ids[end - 1] === pad) end--;
    return end === pair.ids.length ? pair : { ...pair, ids: pair.ids.slice(0, end) };
  }

  logitsLater(batch: PaddedBatch): PendingLogits {
    const pending = this.encoder.embeddingsLater(batch.inputIds, batch.attentionMask, { pooling: 'last', normalize: false, dense: [this.head] });
    const two = this.rows.count === 2;
    return { wait: () => pending.wait().map((v) => (two ? v[0]! - v[1]! : v[0]!)), ready: () => pending.ready() };
  }

  free(): void {
    this.encoder.backend.free(this.head.weight);
    this.encoder.free();
  }
}

/** The first of `names` in the model's files, checked to be [rows, hidden]: all its rows, or those `pick` names. */
function readRows(dir: string, names: readonly string[], hidden: number, pick: readonly number[] | undefined): { rows: Float32Array; count: number; name: string } | undefined {
  return withTensor(dir, names, (file, name) => {
    const shape = file.info(name).shape;
    if (shape.length !== 2 || shape[1] !== hidden) throw new ArgumentError(`${file.path}: tensor '${name}' has shape ${formatShape(shape)}; expected [rows, ${hidden}] (hidden_size)`);
    const count = shape[0]!;
    for (const row of pick ?? []) {
      if (row >= count) throw new ArgumentError(`${file.path}: token id ${row} is past tensor '${name}'s ${count} rows`);
    }
    const rows = pick ? file.readFloats(name, pick.map((r) => [r * hidden, (r + 1) * hidden] as const)) : file.readFloats(name);
    return { rows, count: pick ? pick.length : count, name };
  });
}

/** The head as the directory defines it: a sequence-classification score layer, else the LM head's true / false token rows. */
function headRows(dir: string, encoder: DecoderEncoder, tokenizer: Tokenizer, crossEncoder: CrossEncoderConfig | undefined): HeadRows {
  const arch = encoder.model.arch, hidden = encoder.hidden;
  const configFile = join(dir, 'config.json');
  const config = readConfigFile(configFile);
  const architectures = Array.isArray(config['architectures']) ? config['architectures'].filter((a): a is string => typeof a === 'string') : [];
  const classifier = architectures.find((a) => a.endsWith('ForSequenceClassification'));
  if (classifier !== undefined && crossEncoder?.logitScore === undefined) {
    const score = readRows(dir, ['score.weight'], hidden, undefined);
    if (!score) throw new ArgumentError(`${dir}: config.json names ${classifier}, but no tensor 'score.weight' is in its weight files`);
    if (score.count !== 1) throw new ArgumentError(`${dir}: '${score.name}' scores ${score.count} labels; a reranker scores with one (num_labels 1)`);
    const pad = config['pad_token_id'];
    return { rows: score.rows, count: 1, describe: `score.weight (${classifier})`, ...(Number.isSafeInteger(pad) ? { trailingPadId: pad as number } : {}) };
  }
  // A causal LM: LogitScore's tokens, else sentence-transformers' default "yes" / "no".
  let trueId = crossEncoder?.logitScore?.trueTokenId, falseId = crossEncoder?.logitScore?.falseTokenId;
  if (trueId === undefined) {
    trueId = tokenizer.tokenToId('yes');
    falseId = tokenizer.tokenToId('no');
    if (trueId === undefined || falseId === undefined) throw new ArgumentError(`${dir}: a causal LM reranker scores logit("yes") − logit("no"), but its tokenizer has no ${trueId === undefined ? '"yes"' : '"no"'} token; a sentence-transformers LogitScore module (modules.json) names others`);
  }
  const ids = falseId === undefined ? [trueId] : [trueId, falseId];
  const names = [arch.lmHead, arch.lmHead.startsWith(arch.optionalPrefix) ? arch.lmHead.slice(arch.optionalPrefix.length) : arch.lmHead];
  const head = readRows(dir, names, hidden, ids);
  if (!head) throw new ArgumentError(`${dir}: no LM head tensor ('${arch.lmHead}') in its weight files, so logit("${tokenizer.idToToken(trueId)}") cannot be scored`);
  const token = (id: number) => JSON.stringify(tokenizer.idToToken(id) ?? String(id));
  return { rows: head.rows, count: ids.length as 1 | 2, describe: falseId === undefined ? `logit(${token(trueId)})` : `logit(${token(trueId)}) − logit(${token(falseId)})` };
}
