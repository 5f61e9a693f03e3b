// GPT-2 with Megatron tensor parallelism over a Communicator: the blocks of dist/tensor-parallel.ts,
// composed with the single-GPU model's own parameter table (gpt2ParameterSpecs, HF names), LM head
// (lmHeadForward/Backward) and embedding backward. Each rank's ParameterStore holds its shards under
// the HF names:
//
//   attn.c_attn.weight [C, 3C] → [C, 3C/w]   columns of this rank's heads, within each of q, k and v
//   attn.c_attn.bias   [3C]    → [3C/w]      the same columns
//   attn.c_proj.weight [C, C]  → [C/w, C]    rows (its input is this rank's heads)
//   mlp.c_fc.weight    [C, F]  → [C, F/w]    columns; mlp.c_fc.bias [F] → [F/w]
//   mlp.c_proj.weight  [F, C]  → [F/w, C]    rows
//   transformer.wte.weight, lm_head.weight [Vp, C] → [Vp/w, C]   vocab rows (dist/vocab-parallel.ts:
//                                            masked embedding lookup, split LM head and cross-entropy)
//   everything else (position embeddings, layer norms, output biases) replicated
//
// Checkpoints hold the full tensors (shards gathered, shardTensor's inverse), so they load at any
// world size: fullParameters() gathers, loadFullParameters() shards. Gradient-norm clipping: the model
// declares which parts of its gradient workspace are shards (gradientSharding), and StepRunner sums
// their squares over the ranks, counting the replicated parts once. Attention dropout draws each
// rank's heads from its own counter range (rankDropoutRange): valid, independent masks, but not the
// single-GPU model's masks (docs/distributed.md).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { formatShape } from '../tensor.js';
import type { AttentionShape, FusedAttentionChoice } from '../nn/attention.js';
import { forwardKeeping, isCheckpointed, savedForBackward } from '../nn/checkpoint.js';
import type { Kept } from '../nn/checkpoint.js';
import { linear } from '../nn/linear.js';
import type { Param, ParameterSpec } from '../nn/parameters.js';
import { ParameterStore, paddedVocabSize } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams } from '../nn/transformer-block.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { gpt2ParameterSpecs } from '../models/gpt2-model.js';
import type { CausalLmBatch, GradientSharding, LanguageModel } from '../models/language-model.js';
import type { Communicator } from './communicator.js';
import type { ParallelBlock, ParallelBlockSaved } from './tensor-parallel.js';
import { checkParallelBlock, parallelBlockBackward, parallelBlockForward } from './tensor-parallel.js';
import type { VocabShard } from './vocab-parallel.js';
import {
  vocabParallelEmbeddingBackward, vocabParallelEmbeddingForward, vocabParallelHeadBackward, vocabParallelHeadForward, vocabParallelLogits, vocabShard,
} from './vocab-parallel.js';

/** How one tensor is split: kept whole, split by columns (last dim) in `sections` equal parts, or by rows. */
export type TensorSplit = { kind: 'replicated' } | { kind: 'columns'; sections: number } | { kind: 'rows' } | { kind: 'vocab' };

/** The split of a GPT-2 parameter, by its HF name. */
export function gpt2TensorSplit(name: string): TensorSplit {
  if (/\.attn\.c_attn\.(weight|bias)$/.test(name)) return { kind: 'columns', sections: 3 };
  if (/\.mlp\.c_fc\.(weight|bias)$/.test(name)) return { kind: 'columns', sections: 1 };
  if (/\.(attn|mlp)\.c_proj\.weight$/.test(name)) return { kind: 'rows' };
  if (name === 'transformer.wte.weight' || name === 'lm_head.weight') return { kind: 'vocab' };
  return { kind: 'replicated' };
}

/**
 * The shape of one rank's shard. A vocabulary table [V, C] (its checkpoint shape) is split by rows of the
 * padded [Vp, C]: rank `rank` holds vocabShard(V).classes real rows of it.
 */
export function shardShape(split: TensorSplit, shape: readonly number[], worldSize: number, name = 'tensor', rank = 0): number[] {
  if (split.kind === 'replicated') return [...shape];
  if (split.kind === 'vocab') return [vocabShard(shape[0]!, worldSize, rank).classes, ...shape.slice(1)];
  const dim = split.kind === 'rows' ? 0 : shape.length - 1;
  const parts = split.kind === 'columns' ? split.sections * worldSize : worldSize;
  if (shape[dim]! % parts !== 0) throw new ArgumentError(`tensor parallel: ${name} ${formatShape(shape)} dimension ${dim} is not divisible into ${parts} equal parts (world size ${worldSize})`);
  return shape.map((d, i) => (i === dim ? d / worldSize : d));
}

/** Rank `rank`'s shard of a row-major tensor. */
export function shardTensor(split: TensorSplit, shape: readonly number[], data: Float32Array, rank: number, worldSize: number, name = 'tensor'): Float32Array {
  const local = shardShape(split, shape, worldSize, name, rank);
  if (split.kind === 'replicated') return data.slice();
  if (split.kind === 'vocab') {
    const rowSize = data.length / shape[0]!, start = vocabShard(shape[0]!, worldSize, rank).start;
    return data.slice(start * rowSize, (start + local[0]!) * rowSize);
  }
  if (split.kind === 'rows') {
    const rowSize = data.length / shape[0]!, rows = local[0]!;
    return data.slice(rank * rows * rowSize, (rank + 1) * rows * rowSize);
  }
  const N = shape[shape.length - 1]!, R = data.length / N, section = N / split.sections, width = section / worldSize, localN = N / worldSize;
  const out = new Float32Array(R * localN);
  for (let r = 0; r < R; r++) {
    for (let s = 0; s < split.sections; s++) {
      const from = r * N + s * section + rank * width;
      out.set(data.subarray(from, from + width), r * localN + s * width);
    }
  }
  return out;
}

/** The full tensor from every rank's shard (shardTensor's inverse). */
export function gatherTensor(split: TensorSplit, shape: readonly number[], shards: readonly Float32Array[], name = 'tensor'): Float32Array {
  const worldSize = shards.length;
  if (split.kind === 'replicated') return shards[0]!.slice();
  const full = new Float32Array(shape.reduce((a, b) => a * b, 1));
  if (split.kind === 'rows') {
    shards.forEach((s, r) => full.set(s, r * s.length));
    return full;
  }
  if (split.kind === 'vocab') {
    // Each rank's real rows, in rank order (ranks past the vocabulary hold none).
    let at = 0;
    for (const s of shards) { full.set(s, at); at += s.length; }
    if (at !== full.length) throw new ArgumentError(`tensor parallel: ${name} shards hold ${at} elements, ${formatShape(shape)} needs ${full.length}`);
    return full;
  }
  shardShape(split, shape, worldSize, name);
  const N = shape[shape.length - 1]!, R = full.length / N, section = N / split.sections, width = section / worldSize, localN = N / worldSize;
  shards.forEach((shard, rank) => {
    for (let r = 0; r < R; r++) {
      for (let s = 0; s < split.sections; s++) {
        full.set(shard.subarray(r * localN + s * width, r * localN + (s + 1) * width), r * N + s * section + rank * width);
      }
    }
  });
  return full;
}

/**
 * GPT-2's parameter table for rank `rank` of `worldSize`, every split tensor at its shard shape. The
 * vocabulary tables are stored [Vp/w, C] with checkpoint shape [classes, C] (this rank's real rows).
 */
export function tpGpt2ParameterSpecs(config: Gpt2Config, worldSize: number, rank = 0): ParameterSpec[] {
  if (config.heads % worldSize !== 0) throw new ArgumentError(`tensor parallel GPT-2: ${config.heads} heads cannot be split over ${worldSize} ranks`);
  if (config.ffn % worldSize !== 0) throw new ArgumentError(`tensor parallel GPT-2: FFN width ${config.ffn} cannot be split over ${worldSize} ranks`);
  const shard = vocabShard(config.vocabSize, worldSize, rank);
  return gpt2ParameterSpecs(config).map((s) => {
    const split = gpt2TensorSplit(s.name);
    if (split.kind === 'vocab') return { ...s, shape: [shard.rows, s.shape[1]!], fileShape: [shard.classes, s.shape[1]!] };
    return { ...s, shape: shardShape(split, s.shape, worldSize, s.name) };
  });
}

type HostTensors = Map<string, { shape: readonly number[]; data: Float32Array }>;

export class TpGpt2Model implements LanguageModel {
  readonly params: ParameterStore;
  readonly blocks: readonly ParallelBlock[];
  private readonly wte: Param;
  private readonly wpe: Param;
  private readonly lnF: LayerNormParams;
  private readonly lmHead: Param;
  /** This rank's part of the vocabulary (embedding and LM head rows). */
  readonly vocab: VocabShard;
  checkpointEvery = 0;
  /** The shards in the gradient workspace (for the global gradient norm); none at world size 1. */
  readonly gradientSharding?: GradientSharding;

  constructor(readonly backend: Backend, readonly comm: Communicator, readonly config: Gpt2Config, readonly dtype: FloatDType, options: { fusedAttention?: FusedAttentionChoice } = {}) {
    if (comm.backend !== backend) throw new ArgumentError('TpGpt2Model: the communicator works on a different backend than the model');
    const w = comm.worldSize;
    this.vocab = vocabShard(config.vocabSize, w, comm.rank);
    this.params = new ParameterStore(backend, tpGpt2ParameterSpecs(config, w, comm.rank), dtype);
    const p = (name: string) => this.params.param(name);
    const norm = (name: string): LayerNormParams => ({ gamma: p(`${name}.weight`), beta: p(`${name}.bias`), eps: config.layerNormEps });
    this.blocks = Array.from({ length: config.layers }, (_, i): ParallelBlock => {
      const h = `transformer.h.${i}`;
      const block: ParallelBlock = {
        attention: {
          qkv: linear(p(`${h}.attn.c_attn.weight`), p(`${h}.attn.c_attn.bias`), 'in_out'),
          out: linear(p(`${h}.attn.c_proj.weight`), p(`${h}.attn.c_proj.bias`), 'in_out'),
          localHeads: config.heads / w, causal: true, dropout: config.attentionDropout, fused: options.fusedAttention ?? 'auto',
        },
        ln1: norm(`${h}.ln_1`),
        fc1: linear(p(`${h}.mlp.c_fc.weight`), p(`${h}.mlp.c_fc.bias`), 'in_out'),
        fc2: linear(p(`${h}.mlp.c_proj.weight`), p(`${h}.mlp.c_proj.bias`), 'in_out'),
        ln2: norm(`${h}.ln_2`),
        activation: config.activation,
        residualDropout: config.residualDropout,
      };
      checkParallelBlock(block, config.hidden);
      return block;
    });
    this.wte = p('transformer.wte.weight');
    this.wpe = p('transformer.wpe.weight');
    this.lnF = norm('transformer.ln_f');
    this.lmHead = config.tieWordEmbeddings ? this.wte : p('lm_head.weight');
    if (w > 1) {
      const sharded = this.params.layout.entries.filter((e) => gpt2TensorSplit(e.name).kind !== 'replicated').map((e) => [e.offset, e.offset + e.numel] as const);
      this.gradientSharding = { shardedRanges: sharded, allReduceSum: (t) => comm.allReduce(t, 'sum') };
    }
  }

  get vocabSize(): number { return this.config.vocabSize; }
  get logitsWidth(): number { return paddedVocabSize(this.config.vocabSize); }
  get maxSeqLen(): number { return this.config.maxPositions; }

  /** Sets this rank's shards from full tensors (a checkpoint written at any world size). */
  loadFullParameters(full: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>, source: string): void {
    const shards: HostTensors = new Map();
    const { rank, worldSize } = this.comm;
    for (const { name } of this.params.fileShapes()) {
      const t = full.get(name);
      if (!t) throw new ArgumentError(`${source}: parameter '${name}' is missing`);
      const split = gpt2TensorSplit(name);
      shards.set(name, { shape: shardShape(split, t.shape, worldSize, name, rank), data: shardTensor(split, t.shape, t.data, rank, worldSize, name) });
    }
    this.params.upload(shards, source);
  }

  /** Every parameter at full size, gathered from all ranks (a collective: every rank must call it). */
  fullParameters(): HostTensors {
    return this.gather('value');
  }

  /** Every gradient at full size, gathered from all ranks (a collective). */
  fullGradients(): HostTensors {
    return this.gather('grad');
  }

  /** Initialises like the single-GPU model with `seed` (the full tensors made on each rank, then sharded). */
  initialize(seed: bigint): void {
    const full = new ParameterStore(this.backend, gpt2ParameterSpecs(this.config), 'f32');
    try {
      full.initialize(seed);
      this.loadFullParameters(full.download(), `initialize(${seed})`);
    } finally {
      full.free();
    }
  }

  /**
   * Full tensors from every rank's shards. A vocabulary table is gathered at its stored (padded) shard
   * shape [Vp/w, C], equal on every rank, and cut to its V real rows.
   */
  private gather(which: 'value' | 'grad'): HostTensors {
    const out: HostTensors = new Map();
    const w = this.comm.worldSize;
    for (const { name, shape: fileShape } of this.params.fileShapes()) {
      const split = gpt2TensorSplit(name);
      const stored = this.params.param(name)[which];
      const local = split.kind === 'vocab' ? stored : this.backend.view(stored, 0, fileShape);
      const data = this.backend.download(local) as Float32Array;
      if (split.kind === 'replicated') { out.set(name, { shape: fileShape, data }); continue; }
      let all = data;
      if (w > 1) {
        const send = this.backend.fromArray(data, [data.length], 'f32');
        const recv = this.backend.empty([w * data.length], 'f32');
        this.comm.allGather(send, recv);
        all = this.backend.download(recv) as Float32Array;
        this.backend.free(send);
        this.backend.free(recv);
      }
      if (split.kind === 'vocab') {
        const C = fileShape[1]!;
        out.set(name, { shape: [this.config.vocabSize, C], data: all.slice(0, this.config.vocabSize * C) });
        continue;
      }
      const fullShape = fileShape.map((d, i) => (i === (split.kind === 'rows' ? 0 : fileShape.length - 1) ? d * w : d));
      const shards = Array.from({ length: w }, (_, r) => all.subarray(r * data.length, (r + 1) * data.length));
      out.set(name, { shape: fullShape, data: gatherTensor(split, fullShape, shards, name) });
    }
    return out;
  }

  private stackForward(ctx: StepContext, shape: AttentionShape, x: Tensor, backward: boolean): { y: Tensor; kept: Kept<ParallelBlockSaved, Tensor>[] } {
    const kept: Kept<ParallelBlockSaved, Tensor>[] = [];
    let y = x;
    this.blocks.forEach((block, i) => {
      const r = forwardKeeping(ctx, isCheckpointed(i, this.checkpointEvery, backward), y, (input) => parallelBlockForward(ctx, this.comm, block, shape, input));
      kept.push(r.kept);
      y = r.y;
    });
    return { y, kept };
  }

  /** The vocab-parallel embedding of `tokens` [B, L] → x0 [B, L, C] (replicated), with its mask and dropout. */
  private embed(ctx: StepContext, tokens: Tensor): { x0: Tensor; mask: Tensor; dropout: ReturnType<StepContext['dropout']> } {
    const [B, L] = tokens.shape as [number, number];
    const C = this.config.hidden;
    const x0 = ctx.buffer('embed.out', [B, L, C], this.dtype);
    const mask = ctx.buffer('embed.mask', [B, L, C], 'u8');
    const dropout = ctx.dropout(this.config.embeddingDropout, B * L * C);
    vocabParallelEmbeddingForward(ctx, this.comm, { tokens, table: this.wte, positions: this.wpe, shard: this.vocab, out: x0, mask, dropout });
    return { x0, mask, dropout };
  }

  /** Forward only: full logits [batch·seqLen, logitsWidth] on every rank (the vocabulary shards all-gathered). */
  logitsStep(ctx: StepContext, tokens: Tensor, logits: Tensor): void {
    const [B, L] = tokens.shape as [number, number];
    const C = this.config.hidden, rows = B * L;
    const { x0 } = this.embed(ctx, tokens);
    const x = this.stackForward(ctx, { batch: B, seqLen: L }, ctx.reshape(x0, [rows, C]), false).y;
    vocabParallelLogits(ctx, this.comm, this.lnF, this.lmHead, this.vocab, x, logits);
  }

  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    const { batch: B, seqLen: L } = batch;
    if (L > this.config.maxPositions) throw new ArgumentError(`GPT-2: sequence length ${L} exceeds n_positions ${this.config.maxPositions}`);
    const C = this.config.hidden, rows = B * L;
    const shape: AttentionShape = { batch: B, seqLen: L };
    if (batch.lossRows) throw new ArgumentError('tensor parallel GPT-2: sparse-loss batches (lossRows) are not supported');
    const { x0, mask: embedMask, dropout: embedDropout } = this.embed(ctx, batch.tokens);
    const stack = this.stackForward(ctx, shape, ctx.reshape(x0, [rows, C]), backward);
    const head = vocabParallelHeadForward(ctx, this.comm, this.lnF, this.lmHead, this.vocab, stack.y, batch);
    if (!backward) return;
    let dX = vocabParallelHeadBackward(ctx, this.comm, this.lnF, this.lmHead, this.vocab, head, batch);
    for (let i = this.blocks.length - 1; i >= 0; i--) {
      const block = this.blocks[i]!;
      const saved = savedForBackward(ctx, stack.kept[i]!, (input) => parallelBlockForward(ctx, this.comm, block, shape, input));
      dX = parallelBlockBackward(ctx, this.comm, block, shape, saved, dX);
    }
    vocabParallelEmbeddingBackward(ctx, {
      tokens: batch.tokens, dOut: ctx.reshape(dX, [B, L, C]), mask: embedMask, p: embedDropout.p,
      table: this.wte, positions: this.wpe, shard: this.vocab, accumulate: this.config.tieWordEmbeddings,
    });
  }
}
