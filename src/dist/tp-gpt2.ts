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
//   everything else (embeddings, layer norms, output biases, LM head) replicated
//
// Checkpoints hold the full tensors (shards gathered, shardTensor's inverse), so they load at any
// world size: fullParameters() gathers, loadFullParameters() shards. Limits (docs/distributed.md):
// the embedding and LM head are replicated, not vocab-parallel; the optimizer's gradient-norm clipping
// sees only this rank's shards (StepRunner refuses a finite maxGradNorm for it: train with Infinity). Attention dropout
// draws each rank's heads from its own counter range (rankDropoutRange): valid, independent masks, but
// not the single-GPU model's masks.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { formatShape } from '../tensor.js';
import type { AttentionShape, FusedAttentionChoice } from '../nn/attention.js';
import { forwardKeeping, isCheckpointed, savedForBackward } from '../nn/checkpoint.js';
import type { Kept } from '../nn/checkpoint.js';
import { embeddingBackwardF32 } from '../nn/embedding-grad.js';
import { linear } from '../nn/linear.js';
import type { Param, ParameterSpec } from '../nn/parameters.js';
import { ParameterStore, paddedVocabSize } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams } from '../nn/transformer-block.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { gpt2ParameterSpecs } from '../models/gpt2-model.js';
import type { CausalLmBatch, LanguageModel } from '../models/language-model.js';
import { lmHeadBackward, lmHeadForward } from '../models/language-model.js';
import type { Communicator } from './communicator.js';
import type { ParallelBlock, ParallelBlockSaved } from './tensor-parallel.js';
import { checkParallelBlock, parallelBlockBackward, parallelBlockForward } from './tensor-parallel.js';

/** How one tensor is split: kept whole, split by columns (last dim) in `sections` equal parts, or by rows. */
export type TensorSplit = { kind: 'replicated' } | { kind: 'columns'; sections: number } | { kind: 'rows' };

/** The split of a GPT-2 parameter, by its HF name. */
export function gpt2TensorSplit(name: string): TensorSplit {
  if (/\.attn\.c_attn\.(weight|bias)$/.test(name)) return { kind: 'columns', sections: 3 };
  if (/\.mlp\.c_fc\.(weight|bias)$/.test(name)) return { kind: 'columns', sections: 1 };
  if (/\.(attn|mlp)\.c_proj\.weight$/.test(name)) return { kind: 'rows' };
  return { kind: 'replicated' };
}

/** The shape of one rank's shard. */
export function shardShape(split: TensorSplit, shape: readonly number[], worldSize: number, name = 'tensor'): number[] {
  if (split.kind === 'replicated') return [...shape];
  const dim = split.kind === 'rows' ? 0 : shape.length - 1;
  const parts = split.kind === 'columns' ? split.sections * worldSize : worldSize;
  if (shape[dim]! % parts !== 0) throw new ArgumentError(`tensor parallel: ${name} ${formatShape(shape)} dimension ${dim} is not divisible into ${parts} equal parts (world size ${worldSize})`);
  return shape.map((d, i) => (i === dim ? d / worldSize : d));
}

/** Rank `rank`'s shard of a row-major tensor. */
export function shardTensor(split: TensorSplit, shape: readonly number[], data: Float32Array, rank: number, worldSize: number, name = 'tensor'): Float32Array {
  const local = shardShape(split, shape, worldSize, name);
  if (split.kind === 'replicated') return data.slice();
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

/** GPT-2's parameter table with every split tensor at its shard shape (padded shapes kept whole). */
export function tpGpt2ParameterSpecs(config: Gpt2Config, worldSize: number): ParameterSpec[] {
  if (config.heads % worldSize !== 0) throw new ArgumentError(`tensor parallel GPT-2: ${config.heads} heads cannot be split over ${worldSize} ranks`);
  if (config.ffn % worldSize !== 0) throw new ArgumentError(`tensor parallel GPT-2: FFN width ${config.ffn} cannot be split over ${worldSize} ranks`);
  return gpt2ParameterSpecs(config).map((s) => ({ ...s, shape: shardShape(gpt2TensorSplit(s.name), s.shape, worldSize, s.name) }));
}

type HostTensors = Map<string, { shape: readonly number[]; data: Float32Array }>;

export class TpGpt2Model implements LanguageModel {
  readonly params: ParameterStore;
  readonly blocks: readonly ParallelBlock[];
  private readonly wte: Param;
  private readonly wpe: Param;
  private readonly lnF: LayerNormParams;
  private readonly lmHead: Param;
  checkpointEvery = 0;
  /** Each rank holds its shards' gradients (StepRunner then refuses a finite maxGradNorm). */
  get gradientsSharded(): boolean { return this.comm.worldSize > 1; }

  constructor(readonly backend: Backend, readonly comm: Communicator, readonly config: Gpt2Config, readonly dtype: FloatDType, options: { fusedAttention?: FusedAttentionChoice } = {}) {
    if (comm.backend !== backend) throw new ArgumentError('TpGpt2Model: the communicator works on a different backend than the model');
    const w = comm.worldSize;
    this.params = new ParameterStore(backend, tpGpt2ParameterSpecs(config, w), dtype);
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
      shards.set(name, { shape: shardShape(split, t.shape, worldSize, name), data: shardTensor(split, t.shape, t.data, rank, worldSize, name) });
    }
    this.params.upload(shards, source);
  }

  /** Every parameter at full size, gathered from all ranks (a collective: every rank must call it). */
  fullParameters(): HostTensors {
    return this.gather(this.params.download());
  }

  /** Every gradient at full size, gathered from all ranks (a collective). */
  fullGradients(): HostTensors {
    const local: HostTensors = new Map();
    for (const { name } of this.params.fileShapes()) {
      const g = this.params.param(name).grad;
      const shape = this.params.spec(name).fileShape;
      const t = shape ? this.backend.view(g, 0, shape) : g;
      local.set(name, { shape: t.shape, data: this.backend.download(t) as Float32Array });
    }
    return this.gather(local);
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

  private gather(local: HostTensors): HostTensors {
    const out: HostTensors = new Map();
    const w = this.comm.worldSize;
    for (const [name, t] of local) {
      const split = gpt2TensorSplit(name);
      const fullShape = split.kind === 'replicated' ? t.shape : t.shape.map((d, i) => (i === (split.kind === 'rows' ? 0 : t.shape.length - 1) ? d * w : d));
      if (split.kind === 'replicated' || w === 1) { out.set(name, { shape: fullShape, data: t.data }); continue; }
      const send = this.backend.fromArray(t.data, [t.data.length], 'f32');
      const recv = this.backend.empty([w * t.data.length], 'f32');
      this.comm.allGather(send, recv);
      const all = this.backend.download(recv) as Float32Array;
      this.backend.free(send);
      this.backend.free(recv);
      const shards = Array.from({ length: w }, (_, r) => all.subarray(r * t.data.length, (r + 1) * t.data.length));
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

  /** Forward only: full logits [batch·seqLen, logitsWidth] on every rank. */
  logitsStep(ctx: StepContext, tokens: Tensor, logits: Tensor): void {
    const [B, L] = tokens.shape as [number, number];
    const C = this.config.hidden, rows = B * L;
    const x0 = ctx.buffer('embed.out', [B, L, C], this.dtype);
    const embedMask = ctx.buffer('embed.mask', [B, L, C], 'u8');
    ctx.ops.embeddingForward({ tokens, tokenTable: this.wte.value, positionTable: this.wpe.value, out: x0, mask: embedMask, ...ctx.dropout(this.config.embeddingDropout, rows * C) });
    const x = this.stackForward(ctx, { batch: B, seqLen: L }, ctx.reshape(x0, [rows, C]), false).y;
    const normed = ctx.buffer('head.normed', [rows, C], this.dtype);
    const mean = ctx.buffer('head.mean', [rows], 'f32'), rstd = ctx.buffer('head.rstd', [rows], 'f32');
    ctx.ops.layerNormForward({ x, gamma: this.lnF.gamma.value, beta: this.lnF.beta.value, out: normed, mean, rstd, eps: this.lnF.eps });
    ctx.ops.gemm({ a: normed, b: this.lmHead.value, out: logits, transB: true });
  }

  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    const { batch: B, seqLen: L } = batch;
    if (L > this.config.maxPositions) throw new ArgumentError(`GPT-2: sequence length ${L} exceeds n_positions ${this.config.maxPositions}`);
    const C = this.config.hidden, rows = B * L, dtype = this.dtype;
    const shape: AttentionShape = { batch: B, seqLen: L };
    const x0 = ctx.buffer('embed.out', [B, L, C], dtype);
    const embedMask = ctx.buffer('embed.mask', [B, L, C], 'u8');
    const embedDropout = ctx.dropout(this.config.embeddingDropout, rows * C);
    ctx.ops.embeddingForward({ tokens: batch.tokens, tokenTable: this.wte.value, positionTable: this.wpe.value, out: x0, mask: embedMask, ...embedDropout });
    const stack = this.stackForward(ctx, shape, ctx.reshape(x0, [rows, C]), backward);
    const head = lmHeadForward(ctx, this.lnF, this.lmHead, stack.y, batch, this.config.vocabSize);
    if (!backward) return;
    let dX = lmHeadBackward(ctx, this.lnF, this.lmHead, head, batch);
    for (let i = this.blocks.length - 1; i >= 0; i--) {
      const block = this.blocks[i]!;
      const saved = savedForBackward(ctx, stack.kept[i]!, (input) => parallelBlockForward(ctx, this.comm, block, shape, input));
      dX = parallelBlockBackward(ctx, this.comm, block, shape, saved, dX);
    }
    embeddingBackwardF32(ctx, {
      tokens: batch.tokens, dOut: ctx.reshape(dX, [B, L, C]), mask: embedMask, p: embedDropout.p,
      tokenGrad: this.wte.grad, accumulateTokenGrad: this.config.tieWordEmbeddings, positionGrad: this.wpe.grad,
    });
  }
}
