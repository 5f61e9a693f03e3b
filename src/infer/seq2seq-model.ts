// A Marian translation model (HF MarianMTModel) for inference: the encoder once per batch, then one decoder
// step per generated position, on any Backend. The parameters, their HF names and the layers are the
// training model's (models/transformer-mt.ts); gradients are never allocated for use (the workspace is freed).
//
// Per batch (an encoder step, planned per shape):
//   e   = Encoder(√D·E[src] + P[0:Ls])                       post-LN blocks, keys masked by source lengths
//   kv  = e·Wkvᵀ + bkv                                       ONE GEMM for every decoder layer's cross K and V
//                                                            (LightSeq2), kept in place as [B, Ls, 2·layers·H]
// Per step (a decoder step, planned once and captured as CUDA graphs per (batch, beams, source bucket, length)):
//   x   = √D·E[tokens] + P[t]                                embedTokens, t read from device memory
//   per layer:  x = LN(x + SelfAttn(x) + bo)                 QKV GEMM → beamSelfAttention (bias, cache append,
//                                                            attention through the beam cache-row table) →
//                                                            out GEMM → residualNorm
//               x = LN(x + CrossAttn(x, kv_i) + bo)          q GEMM (+bias) → beamCrossAttention → out GEMM → residualNorm
//               x = LN(x + W2·act(W1·x + b1) + b2)           GEMM → bias+activation → GEMM → residualNorm
//   logits = x·Eᵀ + final_logits_bias                        GEMM with bias epilogue (tied or untied head)
//   beamTopK → candidates of the step (into a history slot), beamAdvance → next tokens, scores, table, positions
// The step never leaves the device: a captured graph replays for every position, and the host reads the
// candidates only every `syncEvery` steps (beam-search.ts does HF's bookkeeping from them).
//
// Memory per session (s = sizeof(dtype), R = batch·beams, L = max length, n = decoder layers):
//   self-attention caches 2·n·R·H·L·s, cross K/V 2·n·B·Ls·H·s, cache-row table 8·R·L, arenas for one
//   encoder and one decoder step (planned: dead buffers share bytes).

import type { Arena, Backend, Graph } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { MarianConfig } from '../models/marian.js';
import { TransformerMtModel } from '../models/transformer-mt.js';
import type { CrossAttentionShape } from '../nn/cross-attention.js';
import { encoderKvForward } from '../nn/cross-attention.js';
import { decoderBlockForward } from '../nn/decoder-block.js';
import { linearForward } from '../nn/linear.js';
import type { LayerNormParams } from '../nn/transformer-block.js';
import { blockStackForward } from '../nn/transformer-block.js';
import type { DropoutStream, StepContext, StepPlan } from '../nn/step-context.js';
import { planStep, runStep } from '../nn/step-context.js';
import type { Tensor } from '../tensor.js';

const EVALUATION: DropoutStream = { seed: 0n, baseOffset: 0n, training: false };

/** What a decode session is built for. */
export interface SessionShape {
  readonly batch: number;
  readonly beams: number;
  /** Source positions held (the longest source of a call, rounded up to a bucket). */
  readonly sourceCapacity: number;
  /** Decoder positions held: HF's max_length (the start token included). */
  readonly maxLength: number;
  /** Beam search (running scores accumulate; EOS candidates finish) or greedy (the best token goes on). */
  readonly mode: 'beam' | 'greedy';
  /** Candidates per item and step (beamTopK's K). */
  readonly candidates: number;
  /** Tokens beamAdvance does not continue (beam search's EOS ids; none for greedy). */
  readonly eosTokens: readonly number[];
  readonly bannedTokens: readonly number[];
  readonly renormalize: boolean;
  /** Steps between host reads of the candidates: one captured graph per slot. */
  readonly slots: number;
  /** Capture graphs (default true). */
  readonly graphs: boolean;
}

export class Seq2SeqModel {
  readonly net: TransformerMtModel;
  private readonly encoderTable: Tensor;
  private readonly decoderTable: Tensor;
  private readonly lmHead: Tensor;
  private readonly logitsBias: Tensor;
  private readonly embedScale: number;
  private readonly sessions = new Map<string, DecodeSession>();
  /** Sessions kept for reuse (each holds caches, arenas and graphs for one shape). */
  maxSessions = 4;

  constructor(readonly backend: Backend, readonly config: MarianConfig, readonly dtype: FloatDType) {
    this.net = new TransformerMtModel(backend, config, dtype);
    backend.free(this.net.params.grads.flat); // inference reads values only
    const value = (name: string) => this.net.params.param(name).value;
    const shared = config.shareEncoderDecoderEmbeddings;
    this.encoderTable = value(shared ? 'model.shared.weight' : 'model.encoder.embed_tokens.weight');
    this.decoderTable = value(shared ? 'model.shared.weight' : 'model.decoder.embed_tokens.weight');
    this.lmHead = config.tieWordEmbeddings ? this.decoderTable : value('lm_head.weight');
    const bias = value('final_logits_bias');
    this.logitsBias = backend.view(bias, 0, [bias.numel]);
    this.embedScale = config.scaleEmbedding ? Math.sqrt(config.hidden) : 1;
  }

  /** The padded vocabulary width of the logits (the LM head's rows). */
  get logitsWidth(): number { return this.lmHead.shape[0]!; }

  /** A session for `shape`, reused while its shape recurs (least recently used ones are disposed). */
  session(shape: SessionShape): DecodeSession {
    const key = JSON.stringify(shape);
    let s = this.sessions.get(key);
    if (s) {
      this.sessions.delete(key);
    } else {
      while (this.sessions.size >= this.maxSessions) {
        const [oldest, victim] = this.sessions.entries().next().value as [string, DecodeSession];
        victim.dispose();
        this.sessions.delete(oldest);
      }
      s = new DecodeSession(this, shape);
    }
    this.sessions.set(key, s);
    return s;
  }

  dispose(): void {
    for (const s of this.sessions.values()) s.dispose();
    this.sessions.clear();
    this.backend.free(this.net.params.values.flat);
    this.backend.free(this.net.positions);
  }

  // ---- the two steps (run through planned step contexts) ----------------------------------------------

  /** The encoder, then every decoder layer's cross K/V in one GEMM into s.crossKv. */
  encodeStep(ctx: StepContext, s: DecodeSessionBuffers): void {
    const { batch: B, sourceCapacity: Ls } = s.shape;
    const D = this.config.hidden, net = this.net;
    const embedded = ctx.buffer('enc.embed', [B, Ls, D], this.dtype);
    const mask = ctx.buffer('enc.embedMask', [B, Ls, D], 'u8');
    ctx.ops.embeddingForward({
      tokens: s.sourceTokens, tokenTable: this.encoderTable, positionTable: net.positions, scale: this.embedScale, out: embedded, mask,
      ...ctx.dropout(0, B * Ls * D),
    });
    const encoded = blockStackForward(ctx, net.encoderBlocks, { batch: B, seqLen: Ls, keyLengths: s.sourceLengths }, ctx.reshape(embedded, [B * Ls, D]), 0, false).y;
    linearForward(ctx, net.encoderKv.kv, encoded, ctx.reshape(s.crossKv, [B * Ls, s.crossKv.shape[2]!]), 'bias');
  }

  /** One decoder step for every row; the candidates go to history slot `slot`. Returns the logits buffer. */
  decodeStep(ctx: StepContext, s: DecodeSessionBuffers, slot: number): Tensor {
    const { batch: B, beams: k, mode } = s.shape;
    const R = B * k, D = this.config.hidden, dtype = this.dtype, heads = this.config.decoderHeads;
    const norm = (p: LayerNormParams, x: Tensor, y: Tensor, bias: Tensor, name: string): Tensor => {
      const out = ctx.buffer(name, [R, D], dtype);
      ctx.ops.residualNorm({ x, y, bias, norm: 'layer', gamma: p.gamma.value, beta: p.beta.value, out, eps: p.eps });
      return out;
    };
    let x = ctx.buffer('dec.embed', [R, D], dtype);
    ctx.ops.embedTokens({ tokens: s.tokens, tokenTable: this.decoderTable, positions: s.positions, positionTable: this.net.positions, scale: this.embedScale, out: x });
    this.net.decoderBlocks.forEach((block, i) => {
      // causal self-attention over the cache
      const qkv = ctx.buffer('dec.qkv', [R, 3 * D], dtype);
      linearForward(ctx, block.selfAttention.qkv, x, qkv);
      const selfMerged = ctx.buffer('dec.self.merged', [R, D], dtype);
      ctx.ops.beamSelfAttention({
        qkv, bias: block.selfAttention.qkv.bias!.value, heads, kCache: s.kCache[i]!, vCache: s.vCache[i]!, cacheRows: s.cacheRows,
        positions: s.positions, out: selfMerged,
      });
      const selfProj = ctx.buffer('dec.self.proj', [R, D], dtype);
      linearForward(ctx, block.selfAttention.out, selfMerged, selfProj);
      x = norm(block.selfNorm, x, selfProj, block.selfAttention.out.bias!.value, 'dec.self.out');
      // cross-attention to the encoder
      const q = ctx.buffer('dec.cross.q', [R, D], dtype);
      linearForward(ctx, block.crossAttention.q, x, q, 'bias');
      const crossMerged = ctx.buffer('dec.cross.merged', [R, D], dtype);
      ctx.ops.beamCrossAttention({ q, kv: s.crossKv, layer: i, heads, beams: k, keyLengths: s.sourceLengths, out: crossMerged });
      const crossProj = ctx.buffer('dec.cross.proj', [R, D], dtype);
      linearForward(ctx, block.crossAttention.out, crossMerged, crossProj);
      x = norm(block.crossNorm, x, crossProj, block.crossAttention.out.bias!.value, 'dec.cross.out');
      // feed-forward
      const { fc1, fc2, activation } = block.ffn;
      const hidden = ctx.buffer('dec.ffn.hidden', [R, fc1.outFeatures], dtype);
      linearForward(ctx, fc1, x, hidden);
      const activated = ctx.buffer('dec.ffn.act', [R, fc1.outFeatures], dtype);
      const mask = ctx.buffer('dec.ffn.mask', [R, fc1.outFeatures], 'u8');
      ctx.ops.biasActivationDropout({ input: hidden, bias: fc1.bias!.value, out: activated, mask, activation, ...ctx.dropout(0, R * fc1.outFeatures) });
      const ffnOut = ctx.buffer('dec.ffn.out', [R, D], dtype);
      linearForward(ctx, fc2, activated, ffnOut);
      x = norm(block.ffnNorm, x, ffnOut, fc2.bias!.value, 'dec.ffn.norm');
    });
    const logits = ctx.buffer('dec.logits', [R, this.logitsWidth], dtype);
    ctx.ops.gemm({ a: x, b: this.lmHead, out: logits, transB: true, epilogue: 'bias', bias: this.logitsBias });
    const slotOf = s.historySlot(slot);
    // Greedy ranks by the step's log-probabilities alone (HF's argmax); beam search adds the running scores.
    ctx.ops.beamTopK({
      logits, beams: k, classes: this.config.decoderVocabSize, ...(mode === 'beam' ? { beamScores: s.beamScores } : {}),
      bannedTokens: s.shape.bannedTokens, renormalize: s.shape.renormalize, ...slotOf,
    });
    ctx.ops.beamAdvance({
      ...slotOf, beams: k, eosTokens: s.shape.eosTokens, nextTokens: s.tokens, beamScores: s.beamScores, cacheRows: s.cacheRows, positions: s.positions,
    });
    return logits;
  }

  /**
   * The reference path: logits [B, Lt, V] of every target position by a full (non-incremental) forward
   * pass through the training layers (causal self-attention over the whole prefix, per-layer cross K/V).
   * sources[b] are token ids; prefixes[b] decoder inputs (start token first), all of one length.
   */
  fullForwardLogits(sources: readonly (readonly number[])[], prefixes: readonly (readonly number[])[]): Float32Array {
    const B = sources.length, Lt = prefixes[0]?.length ?? 0;
    if (B === 0 || prefixes.length !== B || prefixes.some((p) => p.length !== Lt) || Lt === 0) {
      throw new ArgumentError('fullForwardLogits: one non-empty prefix per source, all of one length');
    }
    const Ls = Math.max(...sources.map((s) => s.length));
    const backend = this.backend, D = this.config.hidden, V = this.config.decoderVocabSize, Vp = this.logitsWidth;
    const pad = this.config.padTokenId;
    const srcTokens = backend.fromArray(sources.flatMap((s) => [...s, ...new Array<number>(Ls - s.length).fill(pad)]), [B, Ls], 'i32');
    const lengths = backend.fromArray(sources.map((s) => s.length), [B], 'i32');
    const tgtTokens = backend.fromArray(prefixes.flat(), [B, Lt], 'i32');
    const logits = backend.empty([B * Lt, Vp], this.dtype);
    const shape: CrossAttentionShape = { batch: B, queryLen: Lt, keyLen: Ls, keyLengths: lengths };
    const step = (ctx: StepContext): void => {
      const embed = (tokens: Tensor, table: Tensor, L: number, name: string): Tensor => {
        const out = ctx.buffer(name, [B, L, D], this.dtype);
        const mask = ctx.buffer(`${name}.mask`, [B, L, D], 'u8');
        ctx.ops.embeddingForward({ tokens, tokenTable: table, positionTable: this.net.positions, scale: this.embedScale, out, mask, ...ctx.dropout(0, B * L * D) });
        return ctx.reshape(out, [B * L, D]);
      };
      const encoded = blockStackForward(ctx, this.net.encoderBlocks, { batch: B, seqLen: Ls, keyLengths: lengths }, embed(srcTokens, this.encoderTable, Ls, 'ref.src'), 0, false).y;
      const kv = encoderKvForward(ctx, this.net.encoderKv, shape, encoded);
      let y = embed(tgtTokens, this.decoderTable, Lt, 'ref.tgt');
      this.net.decoderBlocks.forEach((block, i) => { y = decoderBlockForward(ctx, block, shape, y, kv.layers[i]!).y; });
      ctx.ops.gemm({ a: y, b: this.lmHead, out: logits, transB: true, epilogue: 'bias', bias: this.logitsBias });
    };
    const plan = planStep(backend, step, false);
    const arena = backend.createArena(plan.arena.arenaBytes);
    try {
      runStep(backend, plan, arena, EVALUATION, step);
      const all = backend.download(logits) as Float32Array;
      const out = new Float32Array(B * Lt * V);
      for (let r = 0; r < B * Lt; r++) out.set(all.subarray(r * Vp, r * Vp + V), r * V);
      return out;
    } finally {
      arena.free();
      for (const t of [srcTokens, lengths, tgtTokens, logits]) backend.free(t);
    }
  }
}

/** The device state of a session that the steps read and write. */
export interface DecodeSessionBuffers {
  readonly shape: SessionShape;
  /** i32 [R]: each row's input token of the next step. */
  readonly tokens: Tensor;
  /** i32 [R]: each row's position t of the next step. */
  readonly positions: Tensor;
  /** f32 [R]: the running beams' scores. */
  readonly beamScores: Tensor;
  /** i32 [2, R, L]: see BeamAdvanceArgs. */
  readonly cacheRows: Tensor;
  /** Per decoder layer, [R, heads, L, d]. */
  readonly kCache: readonly Tensor[];
  readonly vCache: readonly Tensor[];
  /** [B, Ls, 2·layers·H]: the encoder's K and V for every decoder layer. */
  readonly crossKv: Tensor;
  readonly sourceTokens: Tensor;
  readonly sourceLengths: Tensor;
  historySlot(slot: number): { tokens: Tensor; sourceBeams: Tensor; scores: Tensor };
}

/** The candidates of `count` consecutive steps, on their way to the host (DecodeSession.readHistoryLater). */
export interface PendingHistory {
  readonly count: number;
  wait(): { ids: Int32Array; scores: Float32Array };
}

/** Buffers, plans, arenas and captured graphs for one SessionShape. */
export class DecodeSession implements DecodeSessionBuffers {
  readonly tokens: Tensor;
  readonly positions: Tensor;
  readonly beamScores: Tensor;
  readonly cacheRows: Tensor;
  readonly kCache: Tensor[] = [];
  readonly vCache: Tensor[] = [];
  readonly crossKv: Tensor;
  readonly sourceTokens: Tensor;
  readonly sourceLengths: Tensor;
  /** i32 [slots, 2, B, K] (tokens, source beams) and f32 [slots, B, K]: the candidates of the last steps. */
  readonly historyIds: Tensor;
  readonly historyScores: Tensor;
  private readonly caches: Tensor;
  private readonly encoderPlan: StepPlan;
  private readonly decoderPlan: StepPlan;
  private readonly encoderArena: Arena;
  private readonly decoderArena: Arena;
  private readonly graphs: (Graph | undefined)[];
  private readonly logitsBySlot: (Tensor | undefined)[];
  private warm = false;

  constructor(private readonly model: Seq2SeqModel, readonly shape: SessionShape) {
    const backend = model.backend, config = model.config, dtype = model.dtype;
    const { batch: B, beams: k, sourceCapacity: Ls, maxLength: L, candidates: K, slots } = shape;
    const R = B * k, H = config.hidden, heads = config.decoderHeads, d = H / heads, n = config.decoderLayers;
    this.tokens = backend.empty([R], 'i32');
    this.positions = backend.empty([R], 'i32');
    this.beamScores = backend.empty([R], 'f32');
    this.cacheRows = backend.empty([2, R, L], 'i32');
    backend.fill(this.cacheRows, 0);
    const perCache = R * heads * L * d;
    this.caches = backend.empty([2 * n * perCache], dtype);
    for (let i = 0; i < n; i++) {
      this.kCache.push(backend.view(this.caches, (2 * i) * perCache, [R, heads, L, d]));
      this.vCache.push(backend.view(this.caches, (2 * i + 1) * perCache, [R, heads, L, d]));
    }
    this.crossKv = backend.empty([B, Ls, 2 * n * H], dtype);
    this.sourceTokens = backend.empty([B, Ls], 'i32');
    this.sourceLengths = backend.empty([B], 'i32');
    this.historyIds = backend.empty([slots, 2, B, K], 'i32');
    this.historyScores = backend.empty([slots, B, K], 'f32');
    this.encoderPlan = planStep(backend, (ctx) => model.encodeStep(ctx, this), false);
    this.decoderPlan = planStep(backend, (ctx) => model.decodeStep(ctx, this, 0), false);
    this.encoderArena = backend.createArena(this.encoderPlan.arena.arenaBytes);
    this.decoderArena = backend.createArena(this.decoderPlan.arena.arenaBytes);
    this.graphs = new Array<Graph | undefined>(slots).fill(undefined);
    this.logitsBySlot = new Array<Tensor | undefined>(slots).fill(undefined);
  }

  historySlot(slot: number): { tokens: Tensor; sourceBeams: Tensor; scores: Tensor } {
    const { batch: B, candidates: K } = this.shape;
    const backend = this.model.backend;
    return {
      tokens: backend.view(this.historyIds, (2 * slot) * B * K, [B, K]),
      sourceBeams: backend.view(this.historyIds, (2 * slot + 1) * B * K, [B, K]),
      scores: backend.view(this.historyScores, slot * B * K, [B, K]),
    };
  }

  /** Starts a batch: the sources (padded to the capacity), the encoder, and the decoder's initial state. */
  begin(sources: readonly (readonly number[])[], startToken: number, initialScores: Float32Array): void {
    const { batch: B, beams: k, sourceCapacity: Ls } = this.shape;
    const backend = this.model.backend, pad = this.model.config.padTokenId;
    if (sources.length !== B) throw new Error(`internal: a session for ${B} sources got ${sources.length}`);
    backend.upload(this.sourceTokens, sources.flatMap((s) => [...s, ...new Array<number>(Ls - s.length).fill(pad)]));
    backend.upload(this.sourceLengths, sources.map((s) => s.length));
    backend.upload(this.tokens, new Int32Array(B * k).fill(startToken));
    backend.upload(this.positions, new Int32Array(B * k));
    backend.upload(this.beamScores, initialScores);
    runStep(backend, this.encoderPlan, this.encoderArena, EVALUATION, (ctx) => this.model.encodeStep(ctx, this));
  }

  /** Runs one decoder step writing history slot `slot`: eagerly the first time, then as a captured graph. */
  step(slot: number): void {
    const graph = this.graphs[slot];
    if (graph) { graph.replay(); return; }
    const run = (): Tensor => runStep(this.model.backend, this.decoderPlan, this.decoderArena, EVALUATION, (ctx) => this.model.decodeStep(ctx, this, slot));
    if (!this.shape.graphs || !this.warm) {
      this.logitsBySlot[slot] = run();
      this.warm = true;
      return;
    }
    const captured = this.model.backend.captureGraph(() => { this.logitsBySlot[slot] = run(); });
    this.graphs[slot] = captured;
    captured.replay();
  }

  /** The logits [R, Vp] of the last step that wrote slot `slot` (valid until the next step). */
  logits(slot: number): Tensor {
    const t = this.logitsBySlot[slot];
    if (!t) throw new Error(`internal: no step has written slot ${slot}`);
    return t;
  }

  /**
   * The candidates of slots [first, first + count) — ids [count, 2, B, K] (tokens, source beams) and scores
   * [count, B, K] — without waiting: the copies are queued behind the work issued so far (the steps that wrote
   * those slots), and wait() gives their values then, whatever runs after.
   */
  readHistoryLater(first: number, count: number): PendingHistory {
    const backend = this.model.backend, { batch: B, candidates: K } = this.shape;
    const ids = backend.downloadLater(backend.view(this.historyIds, first * 2 * B * K, [count, 2, B, K]));
    const scores = backend.downloadLater(backend.view(this.historyScores, first * B * K, [count, B, K]));
    return { count, wait: () => ({ ids: ids.wait() as Int32Array, scores: scores.wait() as Float32Array }) };
  }

  dispose(): void {
    const backend = this.model.backend;
    for (const g of this.graphs) g?.dispose();
    this.encoderArena.free();
    this.decoderArena.free();
    for (const t of [this.tokens, this.positions, this.beamScores, this.cacheRows, this.caches, this.crossKv, this.sourceTokens, this.sourceLengths, this.historyIds, this.historyScores]) {
      backend.free(t);
    }
  }
}
