// The transformer forward pass of a decoder-only model, shared by prefill (B·L prompt rows) and decode
// (one row per sequence); only attention differs between the two and is passed in.
//
//   x = embed(tokens) (+ wpe[positions])                   embedTokens              [R, H]
//   per layer l:
//     x += y + bdown (l > 0); h = norm1_l(x); qkv = h·Wqkv  normLinear               [R, (Hq + 2Hkv)·d]
//     a   = attention(qkv)  (bias + RoPE + cache append inside)                      [R, Hq·d]
//     y   = a·Wo                                            GEMM
//     x += y + bo;  h = norm2_l(x), then                    normLinear:
//       GPT-2: u = act(h·Wfc + bfc)                           the GEMM with a GELU/ReLU epilogue
//       Llama: u = act(h·Wgate)·(h·Wup)                       gatedLinear
//     y   = u·Wdown                                         GEMM
//   x += y + bdown;  h = finalNorm(x)                       residualNorm
//   logits = h·Wheadᵀ                                       GEMM                     [rows, Vp]
// Every norm after the first is fused with the residual add before it, and each norm with the product
// that reads it (normLinear: one GEMV kernel at decode sizes where the backend fuses them, else
// residualNorm + the product), so a layer is 4 products and 2–3 other kernels; quantized products too
// (normLinear of an int8Linear or int4Linear: the W8A8 and INT4 GEMVs form the norm in their prologue
// where the CUDA backend finds that faster). One set of activation buffers, sized for the largest row count, serves every layer (as
// LightSeq shares them): each layer overwrites what the previous one no longer needs.
// Under tensor parallelism (model.tensorParallel, dist/tp-decoder.ts) the model's sizes are one rank's
// (heads/w, kvHeads/w, ffn/w) and y is all-reduced after the O-projection and after the down projection
// (each rank's GEMM gives a partial sum over its heads or MLP columns), before the residualNorm that
// adds the replicated bias once; NCCL queues on the compute stream, so a captured decode step holds
// the collectives too.
// Quantized projections (model.quantization, quantized.ts) replace a layer's GEMM with int4Linear (the
// bias/activation in its epilogue) or int8Linear (W8A8: one GEMV kernel for decode's rows on CUDA, else
// quantize-rows → int8Gemm → dequantize, whose intermediates are views of buffers allocated here for
// maxRows rows); a gated MLP's INT8 gate/up product and act(g)·u are one int8Linear. An act-order INT4
// weight (GPTQ desc_act: inputOrder) reads its input gathered into its order (gatherColumns into a
// buffer allocated here), its norm a residualNorm of its own.
// Calibration (quant/decoder-quantize.ts) sets `capture` to see each projection's input.

import type { Activation, AttentionProjection, Backend, GemmEpilogue, HeadNormArgs, ResidualNormArgs } from '../backend/backend.js';
import type { DeviceInt4Weight, DeviceInt8Weight, DeviceQuantizedWeight, QuantizedEpilogue, W8A8Scratch } from '../quant/device.js';
import { int4LinearOp, w8a8LinearOp } from '../quant/device.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { DecoderModel, NormWeights } from './model.js';
import type { ProjectionRole } from './quantized.js';

/** Sees a projection's input [R, K] as blocks() runs (DecoderForward.capture). */
export type ProjectionCapture = (layer: number, role: ProjectionRole, x: Tensor) => void;

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

/** Rows the INT8 LM head computes at once (its i32 accumulator is rows × vocabulary). */
const HEAD_CHUNK_ROWS = 256;

/**
 * A Llama-family INT4 MLP's gate/up product and act(gate)·up as one gated int4Linear (one GEMV kernel at
 * decode's few rows on CUDA) instead of int4Linear + gatedActivation. On by default since session 18
 * (FUSEFORMER_INT4_GATED=0 turns it off): with session 17's GEMV plans it is the faster of the two on the
 * H200, Llama 1.2B INT4 + INT4 head 0.514 → 0.499 ms/token at batch 1 and 1.344 → 1.323 at batch 32, two
 * rounds of one process each in one call (it had been slower with the earlier plans). Takes effect for
 * forwards launched or captured after it is set.
 */
export const int4GatedOptions = { enabled: process.env['FUSEFORMER_INT4_GATED'] !== '0' };

/**
 * A non-gated MLP (GPT-2's) and the norm before it as one normMlp (CUDA: one kernel, kernels/gemv-mlp.ts),
 * its output summed in an f32 accumulator that the next norm reads as y — one kernel a layer fewer than
 * normLinear + the down GEMV. 'auto' (default) follows the backend (Backend.fusesMlp: CUDA at 2–4 rows, 1–4
 * with FUSEFORMER_FUSED_MLP=1); 'on' forces it on any backend at every row count up to the forward's maxRows (the
 * CPU tests compare both forms), 'off' never. For models with a GELU-tanh or ReLU MLP, at least two layers,
 * no quantization or tensor parallelism, the residual added in the norms. Takes effect for forwards
 * constructed (its accumulators) and launched or captured after it is set.
 */
export const fusedMlpOptions: { mode: 'auto' | 'on' | 'off' } = { mode: 'auto' };
/**
 * The O projection as decode attention's epilogue (DecodeAttentionArgs.project) into an f32 accumulator that the
 * MLP's norm reads as y — the O GEMM gone; with the fused MLP or, for any other unquantized model without tensor
 * parallelism (gated MLPs: Llama), alone. 'auto' (default) follows the backend (Backend.projectsAttention: CUDA
 * at 1–4 rows with FUSEFORMER_FUSED_O=1); 'on' forces it wherever it applies (the CPU tests), 'off' never. Only
 * for blocks() calls whose attention callback applies `project` (the decode engine's steps). Takes effect for
 * forwards constructed (the accumulators) and launched or captured after it is set.
 */
export const projectedAttentionOptions: { mode: 'auto' | 'on' | 'off' } = { mode: 'auto' };
/** Rows at most the 'auto' mode's accumulators hold (the fused kernel's limit, GEMV_MAX_ROWS). */
const FUSED_MLP_AUTO_ROWS = 4;
/** The fused forward's f32 accumulators (accumulatorViews: 0, 1 and 4 for the MLPs or the attention alone, all five for both). */
const ACCUMULATORS = 5;

/**
 * The final norm and the LM head as one normLinear where blocks() is given the logits (decode steps: every row
 * goes through the head) and the head is unquantized — on CUDA at 1–4 rows the head GEMV forms the norm in its
 * prologue, one kernel a token fewer (the final residualNorm: 2.4 µs of a GPT-2 batch-1 step, 4.6 of a Llama
 * one, session 29 / 34 timelines). Opt-in (FUSEFORMER_HEAD_NORM=1): no gain where measured (session 40, H100: GPT-2
 * b1 0.208 → 0.207, b4 0.329 → 0.332, Llama b4 1.124 → 1.143 ms/token); takes effect for forwards
 * launched or captured after it is set.
 */
export const headNormOptions = { enabled: process.env['FUSEFORMER_HEAD_NORM'] === '1' };

/** Layer's O weight as AttentionProjection takes it: the float matrix, or the INT4 form (projectionWeights: no act order). */
function projectionWeight(float: Tensor, quantized: DeviceQuantizedWeight | undefined): AttentionProjection['weight'] {
  if (!quantized) return float;
  if (quantized.kind !== 'int4' || quantized.inputOrder) throw new ArgumentError('internal: the O projection takes an INT4 weight without act order');
  return { qweight: quantized.qweight, scales: quantized.scales, zeros: quantized.zeros, groupSize: quantized.groupSize };
}

/**
 * The LM head forming each row's greedy pick as it writes the logits (GemmArgs.argmax), which the decode step's
 * sampleTokens reads instead of the row for greedy rows without a penalty. 'auto' (default) follows the backend
 * (Backend.argmaxInProduct: CUDA at 1–4 rows unless FUSEFORMER_HEAD_ARGMAX=0); 'on' forces it on any backend (the
 * CPU tests), 'off' never. For an unquantized head without tensor parallelism or the head norm (headNormOptions).
 * Takes effect for decode steps prepared after it is set.
 */
export const headArgmaxOptions: { mode: 'auto' | 'on' | 'off' } = { mode: 'auto' };

export class DecoderForward {
  readonly rope?: { readonly invFreq: Tensor; readonly scale: number };
  private readonly buffers: Omit<RowViews, 'rows'>;
  private readonly views = new Map<number, RowViews>();
  /** The MLP's first GEMM epilogue, or null when the activation needs its own kernel. */
  private readonly fcEpilogue: GemmEpilogue | null;
  /** Flat W8A8 intermediates for maxRows rows of the widest INT8 projection (allocated here: a captured step cannot allocate). */
  private readonly w8a8?: W8A8Scratch;
  private readonly w8a8Views = new Map<string, W8A8Scratch>();
  /** [maxRows · widest K] in the model's dtype: the inputs of act-order INT4 products, in their weights' order. */
  private readonly ordered?: Tensor;
  private readonly orderedViews = new Map<string, Tensor>();
  /** The fused MLP's and the projected attention's f32 accumulators [ACCUMULATORS, rows, H], zeroed (accumulatorViews says which op uses which). */
  private readonly accumulators?: { readonly all: Tensor; readonly rows: number; readonly views: Tensor[] };
  /**
   * Calibration (quant/decoder-quantize.ts): called with each projection's input as blocks() runs — the
   * normalised rows for QKV and the MLP's first product, attention's output for O, the activation for
   * down. While it is set, every norm writes its output and the residual is added in the norms.
   */
  capture?: ProjectionCapture;

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
    const int8 = (model.quantization?.layers ?? []).flatMap((q) => Object.values(q)).filter((w) => w.kind === 'int8');
    const int8Head = model.quantization?.lmHead?.kind === 'int8' ? model.quantization.lmHead : undefined;
    if (int8.length > 0 || int8Head) {
      // The head's i32 accumulator is vocabulary-wide: it runs in chunks of HEAD_CHUNK_ROWS rows.
      const K = Math.max(...[...int8, ...(int8Head ? [int8Head] : [])].map((w) => w.inFeatures));
      const accRows = Math.max(maxRows * Math.max(0, ...int8.map((w) => w.outFeatures)), int8Head ? Math.min(maxRows, HEAD_CHUNK_ROWS) * int8Head.outFeatures : 0);
      this.w8a8 = { xq: b.empty([maxRows * K], 'i8'), rowScales: b.empty([maxRows], 'f32'), acc: b.empty([accRows], 'i32') };
    }
    const mlpFuses = fusedMlpOptions.mode !== 'off' && this.fusedMlpModel();
    const attentionProjects = projectedAttentionOptions.mode !== 'off' && this.projectionWeights() !== undefined;
    if (mlpFuses || attentionProjects) {
      const on = (mlpFuses && fusedMlpOptions.mode === 'on') || (attentionProjects && projectedAttentionOptions.mode === 'on');
      const rows = on ? maxRows : Math.min(maxRows, FUSED_MLP_AUTO_ROWS);
      const all = b.fromArray(new Float32Array(ACCUMULATORS * rows * arch.hidden), [ACCUMULATORS, rows, arch.hidden], 'f32');
      this.accumulators = { all, rows, views: Array.from({ length: ACCUMULATORS }, (_, i) => b.view(all, i * rows * arch.hidden, [rows, arch.hidden])) };
    }
    const ordered = [...(model.quantization?.layers ?? []).flatMap((q) => Object.values(q)), model.quantization?.lmHead]
      .filter((w): w is DeviceInt4Weight => w?.kind === 'int4' && w.inputOrder !== undefined);
    if (ordered.length > 0) this.ordered = b.empty([maxRows * Math.max(...ordered.map((w) => w.inFeatures))], dtype);
    const rope = model.ropeFor(maxLen);
    if (rope) this.rope = { invFreq: b.fromArray(rope.invFreq, [rope.invFreq.length], 'f32'), scale: rope.scale };
  }

  /** Views of the buffers for `rows` rows. */
  /** Layer l's part of qkvRopeAppend / appendDecodeAttention: the q/k/v bias (GPT-2, Qwen2) and the per-head norm (Qwen3). */
  qkvExtras(l: number): { bias?: Tensor; headNorm?: HeadNormArgs } {
    const layer = this.model.layers[l]!;
    return {
      ...(layer.qkvBias ? { bias: layer.qkvBias } : {}),
      ...(layer.headNorm ? { headNorm: { q: layer.headNorm.q, k: layer.headNorm.k, eps: this.model.arch.normEps } } : {}),
    };
  }

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


  /** x = token (+ position) embeddings of the rows (blocks() normalises them for the first layer). */
  embed(ops: Backend, v: RowViews, tokens: Tensor, positions: Tensor): void {
    const m = this.model;
    ops.embedTokens({
      tokens, tokenTable: m.tokenEmbedding, out: v.x,
      ...(m.positionEmbedding ? { positions, positionTable: m.positionEmbedding } : {}),
    });
  }

  /**
   * Every layer, from x as embed() left it to h = the final norm of x; `attention(layer, v, project)` turns
   * v.qkv into the attention output [R, Hq·d] (v.attn or another buffer) and, when `project` is given, passes
   * it on to its decodeAttention (only where options.projects says the callback does: projectedAttentionOptions).
   * With options.logits [R, paddedVocab], every row also through the LM head (lmHead; with headNormOptions,
   * the final norm and the head as one normLinear).
   */
  blocks(ops: Backend, v: RowViews, attention: (layer: number, v: RowViews, project?: AttentionProjection) => Tensor, options: { logits?: Tensor; projects?: boolean; argmax?: Tensor } = {}): void {
    const logits = options.logits;
    const m = this.model, transB = true;  // every matrix is stored [out, in] (architecture.ts)
    // The residual is added by the norms: x += y + bias, y the O or down product's output.
    const capture = this.capture;
    // fusedMlpOptions: each MLP one normMlp into an f32 accumulator, which the norm after it reads as y;
    // projectedAttentionOptions: the O product added into one by the attention kernel itself.
    const acc = capture ? undefined : this.accumulatorViews(ops, v.rows, options.projects === true);
    const mlp = acc?.mlp;
    try {
      m.layers.forEach((layer, l) => {
        const q = m.quantization?.layers[l] ?? {};
        // norm1: of the embeddings for the first layer, else after adding the previous layer's down projection.
        const norm1 = this.normArgs(v, layer.norm1, l > 0, l > 0 ? m.layers[l - 1]!.downBias : undefined, mlp?.out(l - 1));
        if (q.qkv?.kind === 'int8') this.int8NormLinear(ops, norm1, q.qkv, v.qkv);
        else if (q.qkv) this.int4NormLinear(ops, norm1, q.qkv, v.qkv);
        else ops.normLinear({ norm: norm1, linear: { kind: 'gemm', b: layer.qkv, out: v.qkv }, skipNormOut: !capture });
        capture?.(l, 'qkv', v.h);
        const project = acc?.attention ? { weight: projectionWeight(layer.out, q.out), out: acc.attention.out(l), zero: acc.attention.zero(l) } : undefined;
        const attended = attention(l, v, project);
        capture?.(l, 'out', attended);
        if (project) { /* the O product is in project.out; its bias is added by the MLP's norm */ }
        else if (q.out) this.quantizedLinear(ops, q.out, attended, v.y);
        else ops.gemm({ a: attended, b: layer.out, out: v.y, transB });
        if (!project) this.sumOverRanks(v.y);
        if (mlp) {
          ops.normMlp({
            norm: this.normArgs(v, layer.norm2, true, layer.outBias, project?.out), skipNormOut: true, up: layer.up, ...(layer.upBias ? { upBias: layer.upBias } : {}),
            activation: m.arch.activation, down: layer.down, out: mlp.out(l), zero: mlp.zero(l),
          });
          return;
        }
        this.mlpIn(ops, v, l, this.normArgs(v, layer.norm2, true, layer.outBias, project?.out));
        capture?.(l, 'up', v.h);
        capture?.(l, 'down', v.act);
        if (q.down) this.quantizedLinear(ops, q.down, v.act, v.y);
        else ops.gemm({ a: v.act, b: layer.down, out: v.y, transB });
        this.sumOverRanks(v.y);
      });
      const finalNorm = this.normArgs(v, m.finalNorm, true, m.layers.at(-1)!.downBias, mlp?.out(m.layers.length - 1));
      if (logits && headNormOptions.enabled && !m.quantization?.lmHead) {
        ops.normLinear({ norm: finalNorm, linear: { kind: 'gemm', b: m.lmHead, out: logits } });
        return;
      }
      ops.residualNorm(finalNorm);
      if (logits) this.lmHead(ops, v.h, logits, options.argmax);
    } catch (e) {
      // A step cut short leaves the accumulators part-summed: cleared, so later steps start from zero.
      if (acc) ops.fill(this.accumulators!.all, 0);
      throw e;
    }
  }

  /** Whether the model takes fusedMlpOptions: a GELU-tanh / ReLU MLP (an fc epilogue), ≥ 2 layers, no quantization or tensor parallelism. */
  private fusedMlpModel(): boolean {
    const m = this.model;
    return !m.arch.gatedMlp && this.fcEpilogue !== null && this.projectionWeights() === 'float' && !(m.quantization?.layers.some((q) => Object.keys(q).length > 0) ?? false);
  }

  /**
   * The O weights projectedAttentionOptions would hand decode attention: 'float' (every layer's unquantized) or
   * 'int4' (every layer's INT4 without act order; the model's other weights may be quantized too); undefined where
   * the model does not take it (fewer than 2 layers, tensor parallelism, INT8 or act-order O weights, a mix).
   */
  private projectionWeights(): 'float' | 'int4' | undefined {
    const m = this.model;
    if (m.layers.length < 2 || m.tensorParallel) return undefined;
    const kinds = new Set(m.layers.map((_, l) => {
      const o = m.quantization?.layers[l]?.out;
      return !o ? 'float' : o.kind === 'int4' && !o.inputOrder ? 'int4' : 'other';
    }));
    const [kind] = kinds;
    return kinds.size === 1 && kind !== 'other' ? kind : undefined;
  }

  /**
   * The accumulators of a forward of `rows` rows, or undefined where neither form runs: `mlp` (fusedMlpOptions)
   * out(l) is layer l's MLP output (l = −1: the last layer's, the previous step's), read as y by the next norm, and
   * zero(l) a whole accumulator layer l's normMlp clears; `attention` (projectedAttentionOptions, with `projects`)
   * the same for the attention kernel's O products, read by the MLP's norm.
   * The step's accumulations t = 0 … N − 1 (the MLPs or the attention alone: layer l's is t = l; both: 2l and
   * 2l + 1) each add into a buffer that the op reading it finishes with before the op after it — so op t may clear
   * the buffer of t − 1 when its reader is not an accumulating op (the MLPs alone: the next QKV norm; the attention
   * alone: the MLP's norm) and of t − 2 otherwise (the MLP's norm reads t − 1 itself). Buffers: one form alone
   * t mod 2, the last layer buffer 4; both, t mod 3 with the step's last two on buffers 3 and 4 (2·layers is not
   * always a multiple of 3), so every two (or three) consecutive accumulations — the step's last and the next
   * step's first included — use different buffers. Every form ends a step on buffer 4 and clears it in its first
   * or second op, and leaves 0–2 cleared, so steps of any form (a graph of each batch size) may follow each other.
   */
  private accumulatorViews(ops: Backend, rows: number, projects: boolean): {
    mlp?: { out(l: number): Tensor; zero(l: number): Tensor }; attention?: { out(l: number): Tensor; zero(l: number): Tensor };
  } | undefined {
    const acc = this.accumulators, m = this.model, arch = m.arch, H = arch.hidden;
    if (!acc || rows > acc.rows) return undefined;
    const fuse = this.fusedMlpModel() && (fusedMlpOptions.mode === 'on' || (fusedMlpOptions.mode === 'auto' && (ops.fusesMlp?.(rows, m.dtype, H, arch.ffn) ?? false)));
    const weights = this.projectionWeights();
    const project = projects && weights !== undefined && (projectedAttentionOptions.mode === 'on'
      || (projectedAttentionOptions.mode === 'auto' && (ops.projectsAttention?.(rows, m.dtype, H, arch.heads, arch.kvHeads, arch.headDim, weights) ?? false)));
    if (!fuse && !project) return undefined;
    const both = fuse && project;
    const L = m.layers.length, N = both ? 2 * L : L, b = m.backend;
    const buffer = both ? (t: number) => (t < N - 2 ? t % 3 : 3 + t - (N - 2)) : (t: number) => (t === N - 1 ? 4 : t % 2);
    const cleared = (t: number) => buffer((t - (both ? 2 : 1) + N) % N);
    const view = (t: number) => b.view(acc.views[buffer((t + N) % N)]!, 0, [rows, H]);
    const accumulations = (step: (l: number) => number) => ({ out: (l: number) => view(step(l)), zero: (l: number) => acc.views[cleared(step(l))]! });
    return {
      ...(fuse ? { mlp: accumulations((l) => (both ? 2 * l + 1 : l)) } : {}),
      ...(project ? { attention: accumulations((l) => (both ? 2 * l : l)) } : {}),
    };
  }

  /**
   * residualNorm(norm), then out = the INT4 product of norm.out, as one normLinear; for an act-order
   * weight (inputOrder) as residualNorm, gatherColumns and int4Linear.
   */
  private int4NormLinear(ops: Backend, norm: ResidualNormArgs, w: DeviceInt4Weight, out: Tensor, epilogue: { bias?: Tensor; activation?: Activation; gated?: boolean } = {}): void {
    if (w.inputOrder) {
      ops.residualNorm(norm);
      this.quantizedLinear(ops, w, norm.out, out, epilogue);
      return;
    }
    ops.normLinear({ norm, linear: { kind: 'int4', qweight: w.qweight, scales: w.scales, zeros: w.zeros, groupSize: w.groupSize, out, ...epilogue } });
  }

  /** A view of the act-order inputs' buffer for rows × K (cached: a captured step replays the same tensors). */
  private orderedInputs(rows: number, K: number): Tensor {
    const key = `${rows}:${K}`;
    let t = this.orderedViews.get(key);
    if (!t) {
      if (!this.ordered) throw new ArgumentError(`${this.model.source}: the model got act-order quantized weights after this engine was made; make a new engine`);
      t = this.model.backend.view(this.ordered, 0, [rows, K]);
      this.orderedViews.set(key, t);
    }
    return t;
  }

  /** x += y + bo; h = norm2(x) (`norm`); v.act = the MLP's first product and activation of h. */
  private mlpIn(ops: Backend, v: RowViews, l: number, norm: ResidualNormArgs): void {
    const m = this.model, arch = m.arch, layer = m.layers[l]!, up = m.quantization?.layers[l]?.up;
    const bias = layer.upBias ? { bias: layer.upBias } : {};
    if (!up && arch.gatedMlp) {
      // Norm, gate and up GEMM and the gated activation in one op (one GEMV kernel for a few rows on CUDA).
      ops.normLinear({ norm, linear: { kind: 'gated', weight: layer.up, up: v.up, out: v.act, activation: arch.activation, ...bias }, skipNormOut: !this.capture });
      return;
    }
    if (!up && this.fcEpilogue) {
      ops.normLinear({ norm, linear: { kind: 'gemm', b: layer.up, out: v.act, epilogue: this.fcEpilogue, bias: layer.upBias! }, skipNormOut: !this.capture });
      return;
    }
    if (up?.kind === 'int8') {
      // Norm and the W8A8 product (gated: with act(g)·u) in one op (one GEMV kernel for a few rows on CUDA with int8NormGemv).
      if (arch.gatedMlp) this.int8NormLinear(ops, norm, up, v.act, { gated: true, activation: arch.activation, ...bias }, v.up);
      else this.int8NormLinear(ops, norm, up, v.act, { activation: arch.activation, ...bias });
      return;
    }
    if (up?.kind === 'int4' && (!arch.gatedMlp || int4GatedOptions.enabled)) {
      // Norm and the INT4 product (gated: with act(g)·u; else with the activation as its epilogue) in one op
      // (one GEMV kernel for a few rows on CUDA with int4NormGemv).
      this.int4NormLinear(ops, norm, up, v.act, { activation: arch.activation, ...bias, ...(arch.gatedMlp ? { gated: true } : {}) });
      return;
    }
    ops.residualNorm(norm);
    if (up && arch.gatedMlp) {
      this.quantizedLinear(ops, up, v.h, v.up, bias);
      ops.gatedActivation({ x: v.up, out: v.act, activation: arch.activation });
    } else if (up) {
      // The quantized ops take any activation as their epilogue.
      this.quantizedLinear(ops, up, v.h, v.act, { bias: layer.upBias!, activation: arch.activation });
    } else {
      ops.gemm({ a: v.h, b: layer.up, out: v.up, transB: true });
      ops.biasActivationDropout({ input: v.up, bias: layer.upBias!, out: v.act, mask: v.mask!, activation: arch.activation, p: 0, seed: 0n, offset: 0n });
    }
  }

  /** out [R, N] = act(x [R, K]·wᵀ + bias) with a quantized weight (int4Linear or int8Linear, the latter with its scratch). */
  private quantizedLinear(ops: Backend, w: DeviceQuantizedWeight, x: Tensor, out: Tensor, epilogue: QuantizedEpilogue = {}): void {
    if (w.kind === 'int4') int4LinearOp(ops, w, x, out, epilogue, w.inputOrder ? this.orderedInputs(x.shape[0]!, w.inFeatures) : undefined);
    else w8a8LinearOp(ops, w, x, out, this.w8a8Scratch(x.shape[0]!, w.inFeatures, w.outFeatures), epilogue);
  }

  /** residualNorm(norm), then out = the W8A8 product of norm.out, as one normLinear (`up`: a gated product's scratch). */
  private int8NormLinear(ops: Backend, norm: ResidualNormArgs, w: DeviceInt8Weight, out: Tensor, epilogue: { bias?: Tensor; activation?: Activation; gated?: boolean } = {}, up?: Tensor): void {
    const scratch = this.w8a8Scratch(norm.out.shape[0]!, w.inFeatures, w.outFeatures);
    ops.normLinear({ norm, linear: { kind: 'int8', qweight: w.qweight, scales: w.scales, out, ...epilogue, scratch: up ? { ...scratch, up } : scratch } });
  }

  /** Views of the W8A8 buffers for rows × K inputs × N outputs (cached: a captured step replays the same tensors). */
  private w8a8Scratch(rows: number, K: number, N: number): W8A8Scratch {
    const key = `${rows}:${K}:${N}`;
    let s = this.w8a8Views.get(key);
    if (!s) {
      const b = this.model.backend, f = this.w8a8;
      if (!f) throw new ArgumentError(`${this.model.source}: the model was quantized to INT8 after this engine was made; make a new engine`);
      s = { xq: b.view(f.xq, 0, [rows, K]), rowScales: b.view(f.rowScales, 0, [rows]), acc: b.view(f.acc, 0, [rows, N]) };
      this.w8a8Views.set(key, s);
    }
    return s;
  }

  /**
   * Whether the LM head of `rows` rows forms the greedy picks (headArgmaxOptions): lmHead's `argmax` and
   * blocks()'s options.argmax are honoured only where this says so.
   */
  headFormsArgmax(ops: Backend, rows: number): boolean {
    const m = this.model, mode = headArgmaxOptions.mode, head = m.quantization?.lmHead;
    if (mode === 'off' || m.tensorParallel || (headNormOptions.enabled && !head)) return false;
    // An INT8 head runs in chunks of HEAD_CHUNK_ROWS rows: one chunk only.
    if (head?.kind === 'int8' && rows > HEAD_CHUNK_ROWS) return false;
    return mode === 'on' || (ops.argmaxInProduct?.(rows, m.dtype, m.arch.paddedVocab, m.arch.hidden, head?.kind ?? 'float') ?? false);
  }

  /**
   * logits [n, Vp] = hidden [n, H]·Wheadᵀ (the quantized head when the model has one); with `argmax` [n, 2] (where
   * headFormsArgmax says), each row's greedy pick over the vocabulary packed into it (RowArgmax).
   */
  lmHead(ops: Backend, hidden: Tensor, logits: Tensor, argmax?: Tensor): void {
    const head = this.model.quantization?.lmHead;
    if (!head) {
      ops.gemm({ a: hidden, b: this.model.lmHead, out: logits, transB: true, ...(argmax ? { argmax: { out: argmax, classes: this.model.vocabSize } } : {}) });
      return;
    }
    const n = hidden.shape[0]!, H = head.inFeatures, Vp = head.outFeatures;
    if (argmax) {
      this.quantizedLinear(ops, head, hidden, logits, { argmax: { out: argmax, classes: this.model.vocabSize } });
      return;
    }
    const chunk = head.kind === 'int8' ? HEAD_CHUNK_ROWS : n;
    for (let r = 0; r < n; r += chunk) {
      const rows = Math.min(chunk, n - r);
      const x = rows === n ? hidden : ops.view(hidden, r * H, [rows, H]), out = rows === n ? logits : ops.view(logits, r * Vp, [rows, Vp]);
      this.quantizedLinear(ops, head, x, out);
    }
  }

  /**
   * The all-reduce of a row-parallel GEMM's partial products (tensor parallel only). Issued at world
   * size 1 too, so a one-GPU group runs (and captures) the same collectives as a larger one.
   */
  private sumOverRanks(y: Tensor): void {
    this.model.tensorParallel?.comm.allReduce(y, 'sum');
  }

  /** x (+= y + bias, with `residual`), h = norm(x): the residualNorm of these weights over the rows. */
  private normArgs(v: RowViews, weights: NormWeights, residual: boolean, bias?: Tensor, y: Tensor = v.y): ResidualNormArgs {
    const arch = this.model.arch;
    return {
      x: v.x, norm: arch.norm, gamma: weights.gamma, out: v.h, eps: arch.normEps,
      ...(weights.beta ? { beta: weights.beta } : {}), ...(residual ? { y } : {}), ...(residual && bias ? { bias } : {}),
    };
  }

  free(): void {
    const b = this.model.backend;
    for (const t of Object.values(this.buffers)) b.free(t as Tensor);
    if (this.rope) b.free(this.rope.invFreq);
    if (this.w8a8) for (const t of Object.values(this.w8a8)) b.free(t as Tensor);
    if (this.ordered) b.free(this.ordered);
    if (this.accumulators) b.free(this.accumulators.all);
    this.orderedViews.clear();
    this.views.clear();
    this.w8a8Views.clear();
  }
}
