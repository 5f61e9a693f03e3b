// The transformer forward pass of a decoder-only model, shared by prefill (B·L prompt rows) and decode
// (one row per sequence); only attention differs between the two and is passed in.
//
//   x = embed(tokens) (+ wpe[positions])                   embedTokens              [R, H]
//   h = norm1_0(x)                                          residualNorm (no y)
//   per layer l:
//     qkv = h·Wqkv                                          GEMM                     [R, (Hq + 2Hkv)·d]
//     a   = attention(qkv)  (bias + RoPE + cache append inside)                      [R, Hq·d]
//     y   = a·Wo;  x += y + bo;  h = norm2_l(x)             GEMM, residualNorm
//     GPT-2: u = act(h·Wfc + bfc)                           GEMM with a GELU/ReLU epilogue
//     Llama: u = act(h·Wgate)·(h·Wup)                       one GEMM [R, 2F], gatedActivation
//     y   = u·Wdown;  x += y + bdown;  h = norm1_{l+1}(x)   GEMM, residualNorm (the final norm after the last layer)
//   logits = h·Wheadᵀ                                       GEMM                     [rows, Vp]
// Every norm after the first is fused with the residual add before it, so a layer is 4 GEMMs and 4–5
// other kernels. One set of activation buffers, sized for the largest row count, serves every layer (as
// LightSeq shares them): each layer overwrites what the previous one no longer needs.
// Under tensor parallelism (model.tensorParallel, dist/tp-decoder.ts) the model's sizes are one rank's
// (heads/w, kvHeads/w, ffn/w) and y is all-reduced after the O-projection and after the down projection
// (each rank's GEMM gives a partial sum over its heads or MLP columns), before the residualNorm that
// adds the replicated bias once; NCCL queues on the compute stream, so a captured decode step holds
// the collectives too.

import type { Backend, GemmEpilogue } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';
import type { DecoderModel, NormWeights } from './model.js';

/** Views of the shared activation buffers for R rows (cached per R: GEMMs recognise the same tensors). */
export interface RowViews {
  readonly rows: number;
  readonly x: Tensor;
  readonly h: Tensor;
  readonly qkv: Tensor;
  /** [R, Hq·d]: the query heads as qkvRopeAppend writes them. */
  readonly q: Tensor;
  /** [R, Hq·d]: attention's output, the O-projection's input. */
  readonly attn: Tensor;
  readonly y: Tensor;
  readonly up: Tensor;
  readonly act: Tensor;
  readonly mask?: Tensor;
}

export class DecoderForward {
  readonly rope?: { readonly invFreq: Tensor; readonly scale: number };
  private readonly buffers: Omit<RowViews, 'rows'>;
  private readonly views = new Map<number, RowViews>();
  /** The MLP's first GEMM epilogue, or null when the activation needs its own kernel. */
  private readonly fcEpilogue: GemmEpilogue | null;

  constructor(readonly model: DecoderModel, readonly maxRows: number, maxLen: number) {
    const { backend: b, arch, dtype } = model;
    const attnWidth = arch.heads * arch.headDim;
    const upWidth = arch.gatedMlp ? 2 * arch.ffn : arch.ffn;
    this.fcEpilogue = arch.gatedMlp ? null : arch.activation === 'gelu_tanh' ? 'gelu_bias' : arch.activation === 'relu' ? 'relu_bias' : null;
    const needsMask = !arch.gatedMlp && this.fcEpilogue === null;
    this.buffers = {
      x: b.empty([maxRows, arch.hidden], dtype),
      h: b.empty([maxRows, arch.hidden], dtype),
      qkv: b.empty([maxRows, (arch.heads + 2 * arch.kvHeads) * arch.headDim], dtype),
      q: b.empty([maxRows, attnWidth], dtype),
      attn: b.empty([maxRows, attnWidth], dtype),
      y: b.empty([maxRows, arch.hidden], dtype),
      up: b.empty([maxRows, upWidth], dtype),
      act: b.empty([maxRows, arch.ffn], dtype),
      ...(needsMask ? { mask: b.empty([maxRows, arch.ffn], 'u8') } : {}),
    };
    const rope = model.ropeFor(maxLen);
    if (rope) this.rope = { invFreq: b.fromArray(rope.invFreq, [rope.invFreq.length], 'f32'), scale: rope.scale };
  }

  /** Views of the buffers for `rows` rows. */
  rows(rows: number): RowViews {
    let v = this.views.get(rows);
    if (!v) {
      const b = this.model.backend;
      const cut = (t: Tensor) => b.view(t, 0, [rows, t.shape[1]!]);
      const f = this.buffers;
      v = {
        rows, x: cut(f.x), h: cut(f.h), qkv: cut(f.qkv), q: cut(f.q), attn: cut(f.attn), y: cut(f.y), up: cut(f.up), act: cut(f.act),
        ...(f.mask ? { mask: cut(f.mask) } : {}),
      };
      this.views.set(rows, v);
    }
    return v;
  }

  /** x = token (+ position) embeddings of the rows; h = the first layer's norm of x. */
  embed(ops: Backend, v: RowViews, tokens: Tensor, positions: Tensor): void {
    const m = this.model;
    ops.embedTokens({
      tokens, tokenTable: m.tokenEmbedding, out: v.x,
      ...(m.positionEmbedding ? { positions, positionTable: m.positionEmbedding } : {}),
    });
    this.norm(ops, v, m.layers[0]!.norm1, false);
  }

  /** Every layer; `attention(layer, v)` turns v.qkv into the attention output [R, Hq·d] (v.attn or another buffer). */
  blocks(ops: Backend, v: RowViews, attention: (layer: number, v: RowViews) => Tensor): void {
    const m = this.model, arch = m.arch, transB = true;  // every matrix is stored [out, in] (architecture.ts)
    m.layers.forEach((layer, l) => {
      ops.gemm({ a: v.h, b: layer.qkv, out: v.qkv, transB });
      const attended = attention(l, v);
      ops.gemm({ a: attended, b: layer.out, out: v.y, transB });
      this.sumOverRanks(v.y);
      this.norm(ops, v, layer.norm2, true, layer.outBias);
      if (arch.gatedMlp) {
        ops.gemm({ a: v.h, b: layer.up, out: v.up, transB, ...(layer.upBias ? { epilogue: 'bias' as const, bias: layer.upBias } : {}) });
        ops.gatedActivation({ x: v.up, out: v.act, activation: arch.activation });
      } else if (this.fcEpilogue) {
        ops.gemm({ a: v.h, b: layer.up, out: v.act, transB, epilogue: this.fcEpilogue, bias: layer.upBias! });
      } else {
        ops.gemm({ a: v.h, b: layer.up, out: v.up, transB });
        ops.biasActivationDropout({ input: v.up, bias: layer.upBias!, out: v.act, mask: v.mask!, activation: arch.activation, p: 0, seed: 0n, offset: 0n });
      }
      ops.gemm({ a: v.act, b: layer.down, out: v.y, transB });
      this.sumOverRanks(v.y);
      const next = l + 1 < m.layers.length ? m.layers[l + 1]!.norm1 : m.finalNorm;
      this.norm(ops, v, next, true, layer.downBias);
    });
  }

  /** logits [n, Vp] = hidden [n, H]·Wheadᵀ. */
  lmHead(ops: Backend, hidden: Tensor, logits: Tensor): void {
    ops.gemm({ a: hidden, b: this.model.lmHead, out: logits, transB: true });
  }

  /**
   * The all-reduce of a row-parallel GEMM's partial products (tensor parallel only). Issued at world
   * size 1 too, so a one-GPU group runs (and captures) the same collectives as a larger one.
   */
  private sumOverRanks(y: Tensor): void {
    this.model.tensorParallel?.comm.allReduce(y, 'sum');
  }

  private norm(ops: Backend, v: RowViews, weights: NormWeights, residual: boolean, bias?: Tensor): void {
    const arch = this.model.arch;
    ops.residualNorm({
      x: v.x, norm: arch.norm, gamma: weights.gamma, out: v.h, eps: arch.normEps,
      ...(weights.beta ? { beta: weights.beta } : {}), ...(residual ? { y: v.y } : {}), ...(residual && bias ? { bias } : {}),
    });
  }

  free(): void {
    const b = this.model.backend;
    for (const t of Object.values(this.buffers)) b.free(t as Tensor);
    if (this.rope) b.free(this.rope.invFreq);
    this.views.clear();
  }
}
