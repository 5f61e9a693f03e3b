// The Backend interface: every op the layers use. The CPU backend (backend/cpu) defines the
// semantics in plain TypeScript; the CUDA backend (backend/cuda) meets the same contract with
// generated kernels and cuBLASLt. Tests run one table of cases against both.
//
// Conventions for every op:
// - Destination-passing: the caller allocates every output (so activation memory can be planned
//   once and a whole step captured into a CUDA graph). Outputs are fully overwritten unless an
//   argument says "accumulate".
// - Row-major, contiguous tensors. `rows` is the product of all leading dimensions; the last
//   dimension is the hidden size H (or the vocabulary V, or the key length Lk).
// - Float tensors of one op share a dtype (f32, f16 or bf16) unless the argument says otherwise;
//   statistics saved for backward (mean, rstd, log-sum-exp) and optimizer state are always f32.
//   Arithmetic is f32 on the GPU and f64 where it matters on the CPU.
// - Dropout is "inverted": kept elements are scaled by 1/(1-p). The keep mask is drawn from the
//   counter-based Philox RNG (see rng.ts): element i of an op called with (seed, offset) is kept iff
//   philoxUniform(seed, offset, i) >= p, identically on every backend. The op writes the mask
//   (u8, 1 = kept) for its backward. Callers advance `offset` by dropoutOffsetAdvance(numel) per call.
// - Every op validates its arguments (shapes, dtypes, backend, contiguity) through validate.ts and
//   throws a FuseformerError naming the op and the problem.

import type { DType, FloatDType } from '../dtype.js';
import type { BackendName, HostArray, Tensor } from '../tensor.js';
import type { OpCheck } from './validate.js';

/** silu(x) = x·σ(x) ("swish": Marian's FFN, Llama's gate). */
export type Activation = 'relu' | 'gelu' | 'gelu_tanh' | 'silu';

// --- GEMM ------------------------------------------------------------------------------------------

/**
 * What is fused after the matrix product (cuBLASLt epilogues).
 *  - 'none':        out = alpha·op(a)·op(b) + beta·out
 *  - 'bias':        out = alpha·op(a)·op(b) + bias                    (bias [N])
 *  - 'relu_bias':   out = relu(alpha·op(a)·op(b) + bias)
 *  - 'gelu_bias':   out = gelu_tanh(alpha·op(a)·op(b) + bias); if `preActivation` is given the value
 *                   before GELU is stored there too ([M, N], for the backward)
 *  - 'dgelu':       out = (alpha·op(a)·op(b)) ⊙ gelu_tanh'(preActivation)
 *  - 'dgelu_bgrad': as 'dgelu', and biasGrad[n] = Σ_m out[m, n]
 *  - 'bgrad_a':     out = alpha·op(a)·op(b), and biasGrad[m] = Σ_k op(a)[m, k]
 *                   (for a Linear's weight gradient dW = dYᵀ·X, this also yields db = Σ_rows dY)
 */
export type GemmEpilogue = 'none' | 'bias' | 'relu_bias' | 'gelu_bias' | 'dgelu' | 'dgelu_bgrad' | 'bgrad_a';

export interface GemmArgs {
  /** [M, K], or [K, M] when transA. */
  a: Tensor;
  /** [K, N], or [N, K] when transB. */
  b: Tensor;
  /** [M, N]. */
  out: Tensor;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  /** Only with epilogue 'none'. */
  beta?: number;
  epilogue?: GemmEpilogue;
  /** [N], with 'bias' | 'relu_bias' | 'gelu_bias'. */
  bias?: Tensor;
  /** [M, N]: written by 'gelu_bias' (optional), read by 'dgelu' and 'dgelu_bgrad'. */
  preActivation?: Tensor;
  /** [N] for 'dgelu_bgrad', [M] for 'bgrad_a'. */
  biasGrad?: Tensor;
  /** Each row's largest value of out packed into RowArgmax.out (an LM head's greedy pick, read by sampleTokens). */
  argmax?: RowArgmax;
}

/**
 * A row maximum a product leaves beside its output (GemmArgs.argmax): for each row m of out, the largest
 * value among columns [0, classes) as out stores it (rounded to out's dtype; −0 as +0; NaN skipped), max-combined
 * into out[m] as the 64-bit word
 *   (key(v) << 32) | (2³² − 1 − column),   key(v) = bits(v) with the sign bit set if v ≥ 0, all bits flipped if not
 * (packArgmax), stored low word first in two i32: the largest value wins, the lowest column on ties — the pick
 * of a greedy sampleTokens pass over the same row. out i32 [M, 2]: the caller zeroes it first (sampleTokens
 * does, after reading it); a slot still 0 after the product saw no value but NaN.
 */
export interface RowArgmax {
  out: Tensor;
  /** The columns that count (the vocabulary of a padded LM head); 1 ≤ classes ≤ N. */
  classes: number;
}

/** RowArgmax's order-preserving 32-bit key of an f32 value (as an unsigned number); NaN has none. */
export function argmaxKey(v: number): number {
  const bits = new Uint32Array(new Float32Array([v === 0 ? 0 : v]).buffer)[0]!;
  return bits >>> 31 ? ~bits >>> 0 : (bits | 0x80000000) >>> 0;
}

/** The f32 value whose argmaxKey is `key` (the high word of a packed RowArgmax word, as i32 or u32). */
export function argmaxValue(key: number): number {
  const k = key >>> 0, bits = k & 0x80000000 ? k ^ 0x80000000 : ~k >>> 0;
  return new Float32Array(new Uint32Array([bits]).buffer)[0]!;
}

/** RowArgmax's packed word for value v at column j, as [low, high] unsigned 32-bit words. */
export function packArgmax(v: number, column: number): [number, number] {
  return [(0xffffffff - column) >>> 0, argmaxKey(v)];
}

/** The column a packed RowArgmax word holds (low word first, as i32 or u32), or undefined for the empty slot 0. */
export function argmaxColumn(low: number, high: number): number | undefined {
  if (low === 0 && high === 0) return undefined;
  return (0xffffffff - (low >>> 0)) >>> 0;
}

/**
 * Strided-batched GEMM over the leading dimension: out[i] = alpha·op(a[i])·op(b[i]) + beta·out[i].
 * a: [batch, M, K] (or [batch, K, M] when transA), b: [batch, K, N] (or [batch, N, K]), out: [batch, M, N].
 */
export interface BatchedGemmArgs {
  a: Tensor;
  b: Tensor;
  out: Tensor;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  beta?: number;
}

// --- fused elementwise ----------------------------------------------------------------------------

export interface DropoutArgs {
  /** Probability of dropping an element, in [0, 1). 0 disables dropout (the mask is all ones). */
  p: number;
  seed: bigint;
  offset: bigint;
  /**
   * i32 [2] on the device: a u64 (low word first) added to `offset` when the op runs. A captured
   * graph freezes `offset`; the caller changes this value between replays so every step draws new
   * masks (the step runner writes the step's first counter here).
   */
  offsetBase?: Tensor;
}

/** out = dropout(input + bias) + residual; all [rows, H] except bias [H]; mask u8 [rows, H]. */
export interface BiasDropoutResidualArgs extends DropoutArgs {
  input: Tensor;
  bias: Tensor;
  residual: Tensor;
  out: Tensor;
  mask: Tensor;
}

/**
 * out = dropout(x) over every element of x (any shape; out and the u8 mask have its shape). For what
 * no fused op covers: attention probabilities, BERT's embedding output after its LayerNorm. Its
 * backward is biasDropoutResidualBackward without dBias (dInput = dOut ⊙ mask / (1−p)).
 */
export interface DropoutOpArgs extends DropoutArgs {
  x: Tensor;
  out: Tensor;
  mask: Tensor;
}

/**
 * dInput = dOut ⊙ mask / (1-p); dBias[h] = Σ_rows dInput[r, h] (if given). The residual's gradient
 * is dOut itself and needs no op. dInput may alias dOut.
 */
export interface BiasDropoutResidualBackwardArgs {
  dOut: Tensor;
  mask: Tensor;
  p: number;
  dInput: Tensor;
  dBias?: Tensor;
}

/** out = dropout(act(input + bias)); input/out [rows, H], bias [H], mask u8 [rows, H]. */
export interface BiasActivationDropoutArgs extends DropoutArgs {
  input: Tensor;
  bias: Tensor;
  out: Tensor;
  mask: Tensor;
  activation: Activation;
}

/**
 * dInput = dOut ⊙ mask / (1-p) ⊙ act'(input + bias); dBias[h] = Σ_rows dInput[r, h] (if given).
 * `input` is the pre-bias input saved from the forward. dInput may alias dOut.
 */
export interface BiasActivationDropoutBackwardArgs {
  dOut: Tensor;
  input: Tensor;
  bias: Tensor;
  mask: Tensor;
  p: number;
  activation: Activation;
  dInput: Tensor;
  dBias?: Tensor;
}

/**
 * Adds the QKV bias and splits the fused projection into heads:
 * qkv [B, L, 3·heads·d] (the Q, K, V blocks side by side) + bias [3·heads·d]
 * → q, k, v each [B, heads, L, d]. q is multiplied by qScale (default 1), so attention can skip
 * a separate scaling pass.
 */
export interface BiasQkvSplitArgs {
  qkv: Tensor;
  bias: Tensor;
  heads: number;
  q: Tensor;
  k: Tensor;
  v: Tensor;
  qScale?: number;
}

/** The inverse: dq, dk, dv [B, heads, L, d] → dQkv [B, L, 3·heads·d] (dq times qScale); dBias = Σ_{B,L} dQkv. */
export interface BiasQkvSplitBackwardArgs {
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  heads: number;
  dQkv: Tensor;
  dBias?: Tensor;
  qScale?: number;
}

// --- normalisation ---------------------------------------------------------------------------------

/** out = (x - mean) · rstd · gamma + beta per row; mean and rstd (f32 [rows]) are saved for backward. */
export interface LayerNormForwardArgs {
  x: Tensor;
  gamma: Tensor;
  beta: Tensor;
  out: Tensor;
  mean: Tensor;
  rstd: Tensor;
  eps: number;
}

/**
 * dX = rstd · (g - mean_h(g) - x̂ · mean_h(g ⊙ x̂)) with g = dOut ⊙ gamma, x̂ = (x - mean)·rstd
 * (+ dResidual if given, fusing the residual branch's gradient); dGamma = Σ_rows dOut ⊙ x̂,
 * dBeta = Σ_rows dOut. With `accumulate`, dGamma and dBeta are added to instead of overwritten.
 */
export interface LayerNormBackwardArgs {
  dOut: Tensor;
  x: Tensor;
  gamma: Tensor;
  mean: Tensor;
  rstd: Tensor;
  dX: Tensor;
  dGamma: Tensor;
  dBeta: Tensor;
  dResidual?: Tensor;
  accumulate?: boolean;
}

/** out = x · rstd · gamma, rstd = 1/sqrt(mean_h(x²) + eps) (f32 [rows], saved for backward). */
export interface RmsNormForwardArgs {
  x: Tensor;
  gamma: Tensor;
  out: Tensor;
  rstd: Tensor;
  eps: number;
}

/** dX = rstd · (g - x̂ · mean_h(g ⊙ x̂)), g = dOut ⊙ gamma, x̂ = x·rstd; dGamma = Σ_rows dOut ⊙ x̂. */
export interface RmsNormBackwardArgs {
  dOut: Tensor;
  x: Tensor;
  gamma: Tensor;
  rstd: Tensor;
  dX: Tensor;
  dGamma: Tensor;
  dResidual?: Tensor;
  accumulate?: boolean;
}

// --- softmax --------------------------------------------------------------------------------------

/**
 * Attention softmax over the last dimension of x [B, heads, Lq, Lk]:
 * out = softmax(scale · x + mask). Key j of query i in batch b is masked (−∞) when
 * j >= keyLengths[b] (padding; keyLengths i32 [B]) or, if causal, when j > i + (Lk − Lq).
 * A row with every key masked gives zeros. out may alias x.
 */
export interface SoftmaxForwardArgs {
  x: Tensor;
  out: Tensor;
  scale?: number;
  causal?: boolean;
  keyLengths?: Tensor;
}

/** dX = scale · y ⊙ (dY − Σ_j y_j dY_j) over the last dimension; dX may alias dY. */
export interface SoftmaxBackwardArgs {
  y: Tensor;
  dY: Tensor;
  dX: Tensor;
  scale?: number;
}

// --- fused attention (FlashAttention) ------------------------------------------------------------------

/**
 * out = softmax(scale · q·kᵀ + mask) · v without materialising the [Lq, Lk] scores:
 * q [B, Hq, Lq, d]; k, v [B, Hkv, Lk, d]; out [B, Hq, Lq, d]; lse f32 [B, Hq, Lq].
 * Grouped-query attention: Hq is a multiple of Hkv and query head h reads kv head floor(h / (Hq/Hkv))
 * (Hkv = Hq is ordinary multi-head attention, Hkv = 1 multi-query).
 * Masks as in SoftmaxForwardArgs: key j of query i in batch b is masked when j >= keyLengths[b]
 * (keyLengths i32 [B]) or, if causal, when j > i + (Lk − Lq).
 * lse_i = ln Σ_{j visible} exp(scale · q_i·k_j) (natural log), saved for the backward. A query that
 * sees no key gets out = 0 and lse = −∞. scale defaults to 1/sqrt(d). q, k, v and out share a float
 * dtype; out and lse must not overlap the inputs.
 * dropout (optional, p > 0): out = (dropout(P)/(1−p))·v with P the softmax above (lse is unaffected).
 * Element (b, h, i, j) of P has index e = ((b·Hq + h)·Lq + i)·Lk + j and is kept as the dropout op keeps
 * element e for the same (seed, offset) (rng.ts: counter offset + ⌊e/8⌋, 16-bit uniforms, threshold
 * ⌈p·2^16⌉), so the materialised path (softmax, then dropout) drops the same elements. The mask is
 * never stored: the backward, given the same dropout arguments, redraws it. Advance the caller's offset
 * by dropoutOffsetAdvance(B·Hq·Lq·Lk).
 *
 * Packed variable-length sequences (cuSeqlensQ, cuSeqlensK, maxSeqlenQ, maxSeqlenK, all four; no
 * keyLengths): B ragged sequences packed along the token axis without padding, q, out [totalQ, Hq, d],
 * k, v [totalK, Hkv, d], lse f32 [Hq, totalQ]. Sequence b owns query rows [cuSeqlensQ[b], cuSeqlensQ[b+1])
 * and key rows [cuSeqlensK[b], cuSeqlensK[b+1]) (i32 [B+1], non-decreasing from 0 to totalQ or totalK;
 * the same tensor twice for self-attention; the CPU checks the values, the GPU trusts them) and attends
 * only within itself, exactly as the dense op on that sequence alone (its own Lq, Lk in the masks).
 * maxSeqlenQ/K bound every sequence's length (the CUDA grid covers them; a longer sequence is an error
 * on the CPU and partly unwritten on the GPU). Dropout element (b, h, i, j) then has index
 * e = (h·totalQ + cuSeqlensQ[b] + i)·S + j, S = maxSeqlenK rounded up to a multiple of 8: advance the
 * offset by dropoutOffsetAdvance(Hq·totalQ·S).
 *
 * Paged keys and values (paged given; dense q only, no packed sequences, no dropout): k, v are a block pool
 * [numBlocks, Hkv, blockSize, d] and key j of sequence b (kv head g) is row [paged.blockTable[b, ⌊j /
 * blockSize⌋], g, j mod blockSize] (blockTable i32 [B, maxBlocks]); Lk = paged.keys (1 ≤ Lk ≤
 * maxBlocks·blockSize) plays the dense Lk in the masks, so causal puts the Lq queries at the end of the
 * Lk keys (a prompt chunk after its cached context). A used table entry outside [0, numBlocks) is an
 * error on the CPU; the GPU trusts the table.
 * Packed queries over paged keys (paged with seqKeys, cuSeqlensQ and maxSeqlenQ; no cuSeqlensK,
 * maxSeqlenK, keyLengths or paged.keys): q, out [totalQ, Hq, d], lse f32 [Hq, totalQ]; sequence b owns
 * query rows [cuSeqlensQ[b], cuSeqlensQ[b+1]), has paged.seqKeys[b] keys (0 ≤ seqKeys[b] ≤
 * maxBlocks·blockSize) read through block-table row paged.seqRows[b] (default b; the table may have any
 * number of rows), and is masked as the dense op on that sequence alone (causal: its queries are the
 * last of its keys). cuSeqlensQ runs from 0 to at most totalQ; rows past cuSeqlensQ[B] are left as they
 * were (a padded step). The serving engine's prompt chunks of one step, whatever their number, in one call.
 */
export interface FlashAttentionForwardArgs extends PackedSequences {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  out: Tensor;
  lse: Tensor;
  scale?: number;
  causal?: boolean;
  keyLengths?: Tensor;
  dropout?: DropoutArgs;
  paged?: PagedKv;
}

/** Keys and values read through a block table (FlashAttentionForwardArgs.paged). */
export interface PagedKv {
  blockTable: Tensor;
  /** Dense q: Lk, the keys every sequence has. */
  keys?: number;
  /** Packed q: i32 [B], the keys of sequence b. */
  seqKeys?: Tensor;
  /** Packed q: i32 [B], the block-table row sequence b reads (default b). */
  seqRows?: Tensor;
}

/** The packed variable-length layout of the fused attention ops (FlashAttentionForwardArgs). */
export interface PackedSequences {
  cuSeqlensQ?: Tensor;
  cuSeqlensK?: Tensor;
  maxSeqlenQ?: number;
  maxSeqlenK?: number;
}

/**
 * The gradients of flashAttentionForward, with P recomputed from q, k and the saved lse
 * (P_ij = exp(scale · q_i·k_j − lse_i) for visible keys, 0 for masked ones):
 *   D_i = Σ_c dOut_ic · out_ic;  dP = dOut · vᵀ;  dS = P ⊙ (dP − D)
 *   dq = scale · dS · k;  dk = scale · dSᵀ · q;  dv = Pᵀ · dOut
 * dk and dv sum over the Hq/Hkv query heads that share a kv head. dq [B, Hq, Lq, d], dk and dv
 * [B, Hkv, Lk, d] are overwritten (a key no query sees gets zero gradients). Deterministic: the same
 * inputs give the same bits on every run. scale, causal and keyLengths must be the forward's.
 * The CUDA backend keeps D and lse·log2 e (8·B·Hq·Lq bytes) in scratch memory, which cannot grow
 * during a capture: call it once before captureGraph().
 * dropout must be the forward's (same p, seed, offset and offsetBase value): with keep flags z and
 * r = 1/(1−p), dv = (P⊙z·r)ᵀ·dOut and dP = z·r ⊙ (dOut·vᵀ); D and dS as above.
 * Packed sequences as in the forward: dOut, dq like q, dk, dv like k; D and lse·log2 e take 8·Hq·totalQ
 * bytes of scratch.
 */
export interface FlashAttentionBackwardArgs extends PackedSequences {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  out: Tensor;
  dOut: Tensor;
  lse: Tensor;
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  scale?: number;
  causal?: boolean;
  keyLengths?: Tensor;
  dropout?: DropoutArgs;
}

// --- cross-entropy ----------------------------------------------------------------------------------

/**
 * Per-row loss over logits [rows, Vp] with targets i32 [rows], over the first C = classes columns:
 * loss = (1−ε)·(lse − z_t) + ε·(lse − mean_{j<C} z_j), lse = log Σ_{j<C} exp z_j, ε = labelSmoothing.
 * Rows whose target equals ignoreIndex get loss 0. loss and lse are f32 [rows].
 * A target outside [0, C) that is not ignoreIndex is an error on the CPU; on the GPU its loss is NaN.
 *
 * classes (C, 1 ≤ C ≤ Vp, default Vp) is the real vocabulary when the logits are padded (llm.c's
 * padded_vocab_size: the LM head writes Vp = V rounded up to a multiple of 64 columns so that rows
 * stay 16-byte aligned for cuBLASLt). Columns j ≥ C do not exist for the loss: they are never part
 * of lse or of the smoothing mean, and a target in [C, Vp) is out of range.
 */
export interface CrossEntropyForwardArgs {
  logits: Tensor;
  targets: Tensor;
  loss: Tensor;
  lse: Tensor;
  labelSmoothing?: number;
  ignoreIndex?: number;
  /** Real classes C: the first C columns of the logits' last dimension Vp; default Vp. */
  classes?: number;
  /**
   * Also write crossEntropyBackward's gradient (with this gradScale, from the lse computed here) —
   * LightSeq's fused cross-entropy: the logits are read once for loss and gradient where a row fits
   * in shared memory. May alias logits. Same values as the forward followed by the backward.
   */
  dLogits?: Tensor;
  /** With dLogits: crossEntropyBackward's gradScale. */
  gradScale?: number;
}

/**
 * dLogits_j = gradScale · (softmax(z)_j − (1−ε)·[j = t] − ε/C) for j < C (softmax over the C real
 * columns, through the saved lse), zero for ignored rows; dLogits_j = 0 exactly for padded columns
 * j ≥ C (always written, also when dLogits aliases logits). gradScale is typically
 * lossScale / (number of non-ignored rows). dLogits may alias logits.
 */
export interface CrossEntropyBackwardArgs {
  logits: Tensor;
  targets: Tensor;
  lse: Tensor;
  dLogits: Tensor;
  gradScale: number;
  labelSmoothing?: number;
  ignoreIndex?: number;
  /** Real classes C, as in CrossEntropyForwardArgs; default the logits' last dimension. */
  classes?: number;
}

// --- vocab-parallel cross-entropy (Megatron's split vocabulary; src/dist/vocab-parallel.ts) ------------

/**
 * The cross-entropy of logits whose vocabulary is split over tensor-parallel ranks. This rank holds the
 * columns of ids [vocabStart, vocabStart + Vl) of the full logits as logits [rows, Vl]; the first
 * `classes` of them (0 ≤ classes ≤ Vl, default Vl) are real classes, the rest padding (never read).
 * Three ops around two all-reduces give crossEntropyForward's loss and lse on every rank:
 *   vocabShardMax    rowMax[r] = max_{j<classes} z_rj  (−∞ when classes = 0)            → all-reduce max
 *   vocabShardSums   M = rowMax (the global one): sums[0, r] = Σ_{j<classes} exp(z_rj − M_r);
 *                    sums[1, r] = z_r(t−vocabStart) when vocabStart ≤ t < vocabStart + classes, else 0;
 *                    sums[2, r] = Σ_{j<classes} z_rj                                     → all-reduce sum
 *   vocabShardLoss   lse = M + ln sums[0];  loss = (1−ε)·(lse − sums[1]) + ε·(lse − sums[2] / C)
 *                    with C the whole vocabulary (totalClasses); rows whose target is ignoreIndex get
 *                    loss 0 (lse still written); another target outside [0, C) is an error on the CPU,
 *                    a NaN loss on the GPU.
 * rowMax, lse, loss f32 [rows]; sums f32 [3, rows]; targets i32 [rows] hold global ids.
 */
export interface VocabShardMaxArgs {
  logits: Tensor;
  classes?: number;
  rowMax: Tensor;
}

export interface VocabShardSumsArgs {
  logits: Tensor;
  targets: Tensor;
  vocabStart: number;
  classes?: number;
  rowMax: Tensor;
  sums: Tensor;
}

export interface VocabShardLossArgs {
  rowMax: Tensor;
  sums: Tensor;
  targets: Tensor;
  totalClasses: number;
  loss: Tensor;
  lse: Tensor;
  labelSmoothing?: number;
  ignoreIndex?: number;
}

/**
 * This rank's part of crossEntropyBackward over a split vocabulary, from the global lse:
 * dLogits_j = gradScale·(exp(z_j − lse) − (1−ε)·[vocabStart + j = t] − ε/C) for j < classes (C =
 * totalClasses), 0 for padded columns j ≥ classes (always written), zeros for ignored rows; a target
 * outside [0, C) that is not ignored is an error on the CPU, NaN over the classes on the GPU.
 * dLogits may alias logits.
 */
export interface VocabShardCrossEntropyBackwardArgs {
  logits: Tensor;
  targets: Tensor;
  lse: Tensor;
  dLogits: Tensor;
  vocabStart: number;
  classes?: number;
  totalClasses: number;
  gradScale: number;
  labelSmoothing?: number;
  ignoreIndex?: number;
}

// --- embedding -------------------------------------------------------------------------------------

/**
 * out[b, l] = dropout(scale · tokenTable[tokens[b, l]] + positionTable[positionOffset + l]);
 * tokens i32 [B, L], tokenTable [V, H], positionTable [P, H] (optional), out [B, L, H], mask u8 [B, L, H].
 */
export interface EmbeddingForwardArgs extends DropoutArgs {
  tokens: Tensor;
  tokenTable: Tensor;
  positionTable?: Tensor;
  positionOffset?: number;
  scale?: number;
  out: Tensor;
  mask: Tensor;
  /**
   * A vocabulary split over ranks (Megatron's vocab-parallel embedding): tokenTable [V, H] holds the
   * rows of ids [vocabStart, vocabStart + V). A token id outside that range contributes a zero token
   * row (the position row is still added) instead of being an error. Default: no split.
   */
  vocabStart?: number;
}

/**
 * g = dOut ⊙ mask / (1−p); dTokenTable[tokens[b,l]] += scale · g[b,l]; dPositionTable[offset+l] += Σ_b g[b,l].
 * Accumulates into the tables (callers zero them first, or accumulate across steps on purpose).
 */
export interface EmbeddingBackwardArgs {
  tokens: Tensor;
  dOut: Tensor;
  mask: Tensor;
  p: number;
  scale?: number;
  positionOffset?: number;
  dTokenTable: Tensor;
  dPositionTable?: Tensor;
  /** As in EmbeddingForwardArgs: dTokenTable holds ids [vocabStart, vocabStart + V); other ids add nothing to it. */
  vocabStart?: number;
}

// --- layout and reductions -----------------------------------------------------------------------

/**
 * Swaps the two middle dimensions: x [A, B, C, D] → out [A, C, B, D], out[a, c, b, d] = x[a, b, c, d].
 * Merges attention heads ([batch, heads, L, d] → [batch, L, heads, d]) and splits them back. Any
 * dtype of 2 or 4 bytes (f32, f16, bf16, i32), the same for x and out; values are copied bit for bit.
 * out must not overlap x.
 */
export interface Permute0213Args {
  x: Tensor;
  out: Tensor;
}

/**
 * out[0] = Σ_i x_i² over every element of x (f32, f16 or bf16, any shape); out is f32 [1]. With
 * `accumulate`, out[0] += Σ x² instead. Accumulation is f32 on the GPU, in a fixed order (the same
 * bits on every run with the same size and device), f64 on the CPU. NaN and ±Inf in x make out NaN
 * or +Inf (a fp16 overflow check reads it). The CUDA backend keeps its per-block partial sums in
 * scratch memory, which cannot grow during a capture: call it once before captureGraph().
 */
export interface SumSquaresArgs {
  x: Tensor;
  out: Tensor;
  accumulate?: boolean;
}

// --- optimizer -------------------------------------------------------------------------------------

/**
 * AdamW over one flat workspace [n] in one launch:
 *   g = grads · gradScale · clipScale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
 *   θ = θ − lr·( (m / c1) / (sqrt(v / c2) + eps) + weightDecay·θ ),   c1 = 1−β1^step, c2 = 1−β2^step
 * θ is `master` (f32) when given, and params then receive θ rounded to their dtype; otherwise
 * params (f32, f16 or bf16) are updated directly (LightSeq2's no-master mode, computed in f32).
 * grads share the params' dtype; m and v are f32. step counts from 1.
 *
 * Where lr, gradScale, c1 and c2 come from (AdamWHostScalars | AdamWDeviceScalars):
 *  - host numbers: `lr`, `step` and `gradScale` (default 1); c1 and c2 are computed from step.
 *  - device scalars: `scalars`, f32 [4] = [lr, gradScale, c1, c2], read by the op when it runs, so a
 *    captured graph replays with whatever the caller uploaded before each replay (numbers passed at
 *    capture would be frozen into the graph, which is why they are not accepted alongside it).
 *
 * Gradient clipping and the overflow skip (`clip`, optional): with S = clip.sumSquares[0] (f32 [1],
 * the Σ of the squared raw grads, e.g. from sumSquares over every gradient buffer),
 *   norm = sqrt(S) · gradScale            (the norm of the unscaled gradient; f32 on every backend)
 *   norm not finite (an fp16 overflow)  → the whole update is skipped: params, m, v, master untouched
 *   otherwise                          → clipScale = min(1, maxNorm / (norm + 1e-6))
 * maxNorm > 0; Infinity means no clipping, but non-finite norms are still skipped. Without `clip`,
 * clipScale = 1 and nothing is skipped.
 */
export interface AdamWClip {
  /** f32 [1]: Σ of the squared raw (still loss-scaled) gradients. */
  sumSquares: Tensor;
  /** The largest allowed gradient norm (> 0), or Infinity for no clipping. */
  maxNorm: number;
}

export interface AdamWCommonArgs {
  params: Tensor;
  grads: Tensor;
  m: Tensor;
  v: Tensor;
  master?: Tensor;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  clip?: AdamWClip;
}

/** lr, step and gradScale given as numbers (the usual, uncaptured step). */
export interface AdamWHostScalars {
  lr: number;
  step: number;
  gradScale?: number;
  scalars?: undefined;
}

/** lr, gradScale and the bias corrections read from device memory (a graph-captured step). */
export interface AdamWDeviceScalars {
  /** f32 [4]: [lr, gradScale, 1 − β1^step, 1 − β2^step]. */
  scalars: Tensor;
  lr?: undefined;
  step?: undefined;
  gradScale?: undefined;
}

export type AdamWArgs = AdamWCommonArgs & (AdamWHostScalars | AdamWDeviceScalars);

// --- random initialisation --------------------------------------------------------------------------

/**
 * Fills `out` (a float tensor) with random values drawn from the Philox stream with the dropout
 * counter mapping: group g = floor(i / 4) uses counter offset + g, giving words w0..w3.
 *  - uniform: out[4g + j] = low + (high − low)·u_j, u_j = (w_j >>> 8)·2⁻²⁴ ∈ [0, 1).
 *  - normal (Box–Muller on word pairs (w0, w1) → elements 4g, 4g+1 and (w2, w3) → 4g+2, 4g+3):
 *    r = sqrt(−2·ln(((w_a >>> 8) + 1)·2⁻²⁴)), θ = 2π·(w_b >>> 8)·2⁻²⁴,
 *    out[a] = mean + std·r·cos θ, out[b] = mean + std·r·sin θ.
 * The GPU computes in f32 and the CPU in f64, so values agree to rounding, not bit for bit.
 * Callers advance `offset` by dropoutOffsetAdvance(numel).
 */
export type RandomFillArgs = { out: Tensor; seed: bigint; offset: bigint } & (
  | { distribution: 'uniform'; low?: number; high?: number }
  | { distribution: 'normal'; mean?: number; std?: number }
);

// --- inference (prefill and decode steps; src/infer) ----------------------------------------------------
// Positions, lengths and tokens are read from device memory when the op runs, so a decode step captured
// into a graph advances on every replay (the sampling op writes the next step's tokens and positions).

/**
 * A row gather, with an optional position row per output row (a decode step's embedding; also picks rows
 * of any matrix): out[r] = scale·tokenTable[tokens[r]] + positionTable[positions[r]].
 * tokens i32 [R]; tokenTable [V, H]; positions i32 [R] and positionTable [P, H] (both or neither); out [R, H].
 * An id outside its table is an error on the CPU; the GPU writes NaN to that row instead of reading it.
 */
export interface EmbedTokensArgs {
  tokens: Tensor;
  tokenTable: Tensor;
  positions?: Tensor;
  positionTable?: Tensor;
  scale?: number;
  out: Tensor;
}

/** Rotary position embedding, rotate-half pairing (Llama's): pair i of a head is (x_i, x_{i+d/2}), i < d/2. */
export interface RopeArgs {
  /** f32 [d/2]: pair i of the token at position p turns by θ_i = fround(p · invFreq[i]) (an f32 product, as HF). */
  invFreq: Tensor;
  /** Multiplies cos θ and sin θ (YaRN's attention factor); default 1. */
  scale?: number;
}

/**
 * RMS norm of each query and key head over its d elements (Qwen3's q_norm / k_norm), between the bias and
 * RoPE: x ← x / sqrt(mean_d(x²) + eps) ⊙ gamma, gamma = q [d] for query heads, k [d] for key heads; value
 * heads are left as they are. f32 arithmetic; the head rounds once to the dtype (after RoPE).
 */
export interface HeadNormArgs {
  q: Tensor;
  k: Tensor;
  eps: number;
}

/**
 * Attention's inputs from the QKV projection, with the new keys and values appended to the KV cache:
 *   qkv [R, (Hq + 2·Hkv)·d]: per row the Hq query heads, then the Hkv key heads, then the Hkv value heads;
 *   + bias [(Hq + 2·Hkv)·d] when given; then, with `headNorm`, each q and k head RMS-normalised (HeadNormArgs).
 *   With `rope`, q and k heads are rotated pair-wise:
 *     x'_i = x_i·c − x_{i+d/2}·s,  x'_{i+d/2} = x_{i+d/2}·c + x_i·s,  c = scale·cos θ_i, s = scale·sin θ_i.
 *   Rows are R = B·L tokens, row r = b·L + l being token l of sequence b (B = kCache's first dimension).
 *   q [B, Hq, L, d] ← the query heads;  kCache, vCache [B, Hkv, maxLen, d]: [b, h, positions[r]] ← row r's
 *   key and value heads;  kOut, vOut (optional, both or neither) [B, Hk, L, d] ← the same keys and values,
 *   contiguous, for a prefill's attention; Hk = Hkv, or Hk = Hq to repeat each kv head for its Hq/Hkv query
 *   heads (the materialised-scores path, whose batched GEMMs need one kv head per query head).
 * positions i32 [R] in [0, maxLen): an error on the CPU; the GPU skips the cache write of such a row.
 * Float tensors share a dtype (invFreq is f32).
 * Paged (blockTable i32 [B, maxBlocks] given; no kOut/vOut): kCache, vCache are a block pool
 *   [numBlocks, Hkv, blockSize, d], B = blockTable's first dimension, L = R / B, maxLen = maxBlocks·blockSize,
 *   and row r's key and value heads go to [blockTable[b, ⌊p / blockSize⌋], g, p mod blockSize] (p = positions[r]).
 *   A negative position marks an idle row: its query heads are written, nothing goes to the pool (both
 *   backends). A used table entry outside [0, numBlocks) is an error on the CPU; the GPU trusts the table.
 *   tableRows (optional, i32 [B]): sequence b writes through block-table row tableRows[b] instead of row b,
 *   and blockTable may have any number of rows (a step's rows of many requests, each row its own sequence
 *   with L = 1, in one call).
 */
export interface QkvRopeAppendArgs {
  qkv: Tensor;
  bias?: Tensor;
  headNorm?: HeadNormArgs;
  positions: Tensor;
  rope?: RopeArgs;
  q: Tensor;
  kCache: Tensor;
  vCache: Tensor;
  kOut?: Tensor;
  vOut?: Tensor;
  blockTable?: Tensor;
  tableRows?: Tensor;
}

/**
 * One new token per sequence attending over its KV cache (a decode step):
 *   q [B, Hq, d]; kCache, vCache [B, Hkv, maxLen, d]; positions i32 [B]: query b sees keys 0..positions[b];
 *   out[b, h] = Σ_j softmax_j(scale·q[b, h]·k[b, g, j])·v[b, g, j], g = floor(h / (Hq/Hkv)); out [B, Hq, d].
 * scale defaults to 1/sqrt(d). partials (optional) f32 [B, Hq, S, d + 2]: scratch for split-K, where the
 * cache is cut into S chunks of ceil(maxLen / S) keys reduced by separate blocks and then combined (long
 * contexts at small batch); its contents afterwards are unspecified. A position outside [0, maxLen) is an
 * error on the CPU; the GPU clamps the key count to maxLen.
 * Paged (blockTable i32 [B, maxBlocks] given): kCache, vCache are a block pool [numBlocks, Hkv, blockSize, d],
 *   maxLen = maxBlocks·blockSize, and key j of sequence b is [blockTable[b, ⌊j / blockSize⌋], g, j mod blockSize].
 *   A negative position marks an idle row (no keys: out = 0) on both backends. A used table entry outside
 *   [0, numBlocks) is an error on the CPU; the GPU trusts the table.
 * freshKeys (default 0): of each query's keys, at most its last freshKeys (positions > positions[b] −
 *   freshKeys) were written by the op just before this one (a decode step's qkvRopeAppend: 1; m rows of
 *   one sequence appended together: m); the GPU may read the others before that op has finished
 *   (programmatic launch). It does not change the result; a value too small is a race.
 */
export interface DecodeAttentionArgs {
  q: Tensor;
  kCache: Tensor;
  vCache: Tensor;
  positions: Tensor;
  out: Tensor;
  scale?: number;
  partials?: Tensor;
  blockTable?: Tensor;
  freshKeys?: number;
  project?: AttentionProjection;
}

/**
 * The attention output's projection, as decodeAttention's (and appendDecodeAttention's) epilogue: after out is
 * written, out_proj[b, n] += Σ_k out[b, k]·weight[n, k] (out's values as stored, the sum in f32, added to what
 * out_proj held: the blocks of several heads meet there, by atomics on CUDA, so the f32 order of the sum is not
 * fixed), and `zero`, when given, set to 0 (a later accumulator; see NormMlpArgs). weight [H, Hq·d] in out's
 * dtype (the O projection, [out, in]) or its INT4 form (Int4ProjectionWeight); out f32 [B, H]; zero f32
 * (neither out nor weight).
 */
export interface AttentionProjection {
  weight: Tensor | Int4ProjectionWeight;
  out: Tensor;
  zero?: Tensor;
}

/**
 * An INT4 O weight for AttentionProjection, in int4Linear's layout for N = H rows of K = Hq·d (qweight i32
 * [H, K/8], scales f16 and zeros u8 [H, K/G]): w[n, k] = scale[n, k/G]·(q[n, k] − zero[n, k/G]). No act order.
 */
export interface Int4ProjectionWeight {
  qweight: Tensor;
  scales: Tensor;
  zeros: Tensor;
  groupSize: number;
}

/** Whether a projection's weight is the INT4 form. */
export function isInt4Projection(weight: Tensor | Int4ProjectionWeight): weight is Int4ProjectionWeight {
  return 'qweight' in weight;
}

/**
 * A decode step's attention straight from the QKV projection, as one op: qkvRopeAppend of one token per
 * sequence (L = 1: bias, RoPE, the new key and value written to the cache at positions[b]), then
 * decodeAttention over the cache with that key as the only fresh one (freshKeys 1). A backend may do both
 * in one kernel (CUDA: each attention block rotates its own query heads and its kv head's new key, reads
 * the new key and value from registers instead of the cache, and one block per (sequence, kv head) writes
 * them to the cache), but writes everything the two ops write except q.
 *   qkv [B, (Hq + 2·Hkv)·d], bias, rope, positions i32 [B]: as qkvRopeAppend's (one row per sequence);
 *   kCache, vCache [B, Hkv, maxLen, d]; out [B, Hq, d]; scale, partials, project: as decodeAttention's. q [B, Hq, d]:
 *   scratch for the rotated query heads; its contents afterwards are unspecified.
 * Paged (blockTable i32 [B, maxBlocks] given): the caches are a block pool [numBlocks, Hkv, blockSize, d],
 *   sequence b's keys go through table row b (both ops' paged layout); a negative position marks an idle
 *   row (nothing written, out = 0).
 */
export interface AppendDecodeAttentionArgs {
  qkv: Tensor;
  bias?: Tensor;
  headNorm?: HeadNormArgs;
  rope?: RopeArgs;
  positions: Tensor;
  q: Tensor;
  kCache: Tensor;
  vCache: Tensor;
  out: Tensor;
  scale?: number;
  partials?: Tensor;
  blockTable?: Tensor;
  project?: AttentionProjection;
}

/**
 * The two ops an appendDecodeAttention stands for (its definition; the unfused path). `view` makes q's
 * [B, Hq, 1, d] view for qkvRopeAppend; q must be [B, Hq, d] (checked here, in the op's name).
 */
export function appendDecodeAttentionParts(
  check: OpCheck, args: AppendDecodeAttentionArgs, view: (t: Tensor, offset: number, shape: readonly number[]) => Tensor,
): { readonly append: QkvRopeAppendArgs; readonly attention: DecodeAttentionArgs } {
  const q = check.tensor('q', args.q);
  check.shape('q', q, ['B', 'Hq', 'd']);
  const [B, Hq, d] = q.shape as [number, number, number];
  const { qkv, bias, headNorm, rope, positions, kCache, vCache, out, scale, partials, blockTable, project } = args;
  const table = blockTable ? { blockTable } : {};
  return {
    append: { qkv, positions, q: view(q, 0, [B, Hq, 1, d]), kCache, vCache, ...table, ...(bias ? { bias } : {}), ...(headNorm ? { headNorm } : {}), ...(rope ? { rope } : {}) },
    attention: {
      q, kCache, vCache, positions, out, freshKeys: 1, ...table, ...(scale !== undefined ? { scale } : {}), ...(partials ? { partials } : {}), ...(project ? { project } : {}),
    },
  };
}

/**
 * The residual add and the next norm in one pass: x ← x + y (+ bias), stored in x's dtype; then, from x as
 * stored, out = (x − mean)·rstd·gamma + beta ('layer') or x·rstd·gamma ('rms', no beta), rstd =
 * 1/sqrt(var + eps) or 1/sqrt(mean(x²) + eps). Without y, x is only read (out = norm(x)).
 * x, y, out [rows, H]; bias, gamma, beta [H]; all one float dtype, except that y may be f32 beside 16-bit x (the
 * accumulator normMlp leaves; x + y + bias is formed in f32). Nothing is saved for a backward.
 */
export interface ResidualNormArgs {
  x: Tensor;
  y?: Tensor;
  bias?: Tensor;
  norm: 'layer' | 'rms';
  gamma: Tensor;
  beta?: Tensor;
  out: Tensor;
  eps: number;
}

/**
 * A residual norm and the product that reads its output, as one op: residualNorm(norm) — x += y + bias
 * when y is given, norm.out = norm(x) — then, of norm.out, a GEMM against [N, K] weights
 * (out = ep(norm.out·bᵀ + bias)), gatedLinear (norm.out is its x), int8Linear (W8A8 weights; norm.out
 * is its x) or int4Linear (W4A16 weights; norm.out is its x). A backend may fuse the two (the decode
 * GEMV with the norm in its prologue) but writes everything the two ops write — except norm.out when
 * skipNormOut says the caller never reads it (then it is scratch the backend may leave as it was).
 */
export interface NormLinearArgs {
  norm: ResidualNormArgs;
  skipNormOut?: boolean;
  linear:
    | { kind: 'gemm'; b: Tensor; out: Tensor; epilogue?: GemmEpilogue; bias?: Tensor }
    | { kind: 'gated'; weight: Tensor; bias?: Tensor; up: Tensor; out: Tensor; activation: Activation }
    | ({ kind: 'int8' } & Omit<Int8LinearArgs, 'x'>)
    | ({ kind: 'int4' } & Omit<Int4LinearArgs, 'x'>);
}

/** The product of a normLinear as the op it stands for, reading norm.out (the unfused path, the cost model). */
export function normLinearProduct(args: NormLinearArgs): { readonly gated: GatedLinearArgs } | { readonly gemm: GemmArgs } | { readonly int8: Int8LinearArgs } | { readonly int4: Int4LinearArgs } {
  const l = args.linear, x = args.norm.out, bias = l.bias ? { bias: l.bias } : {};
  if (l.kind === 'int8') {
    const { kind: _kind, ...rest } = l;
    return { int8: { x, ...rest } };
  }
  if (l.kind === 'int4') {
    const { kind: _kind, ...rest } = l;
    return { int4: { x, ...rest } };
  }
  if (l.kind === 'gated') return { gated: { x, weight: l.weight, up: l.up, out: l.out, activation: l.activation, ...bias } };
  return { gemm: { a: x, b: l.b, out: l.out, transB: true, ...(l.epilogue ? { epilogue: l.epilogue } : {}), ...bias } };
}

/**
 * normMlp: a non-gated MLP of few rows after its residual norm, as one op (the decode GEMV fuses all three;
 * cuda/kernels/gemv-mlp.ts): residualNorm(norm) — x += y + bias, norm.out = norm(x); then
 * a = activation(norm.out·upᵀ + upBias), rounded to the dtype (what the unfused fc stores); out += a·downᵀ,
 * summed in f32 and added to out (the caller zeroes it: the products of several blocks meet there, by atomics
 * on CUDA, so the f32 order of the sum is not fixed); and, when given, `zero` set to 0 — the accumulator of a
 * later normMlp, which no op between this one and that one may read (the forward alternates accumulators).
 *   norm: residualNorm's (x, y, out [rows, H]);  up [F, H], upBias [F] (optional), down [H, F] in x's dtype;
 *   out f32 [rows, H];  zero f32 (any shape; neither out nor y).  skipNormOut as normLinear's.
 */
export interface NormMlpArgs {
  norm: ResidualNormArgs;
  skipNormOut?: boolean;
  up: Tensor;
  upBias?: Tensor;
  activation: Activation;
  down: Tensor;
  out: Tensor;
  zero?: Tensor;
}

/** A gated MLP's middle: out[r, c] = act(x[r, c])·x[r, F + c] (SwiGLU with 'silu'); x [rows, 2F], out [rows, F]. */
export interface GatedActivationArgs {
  x: Tensor;
  out: Tensor;
  activation: Activation;
}

/**
 * A gated MLP's first half in one op: up = x·weightᵀ (+ bias), then out[r, c] = act(up[r, c])·up[r, F + c]
 * (gatedActivation). x [rows, K]; weight [2F, K], the gate's rows then the up projection's (one stacked
 * matrix, as inference stores it); bias [2F] (optional); up [rows, 2F] is scratch: afterwards its
 * contents are unspecified (a fused kernel need not write it); out [rows, F]. One float dtype.
 */
export interface GatedLinearArgs {
  x: Tensor;
  weight: Tensor;
  bias?: Tensor;
  up: Tensor;
  out: Tensor;
  activation: Activation;
}

/**
 * out = tanh(x + bias) elementwise (BERT's pooler: tanh of a dense layer over the [CLS] row). x, out
 * [rows, H] of one float dtype; bias [H] (optional). out may alias x. f32 arithmetic, rounded once.
 */
export interface TanhActivationArgs {
  x: Tensor;
  bias?: Tensor;
  out: Tensor;
}

/** Counter word c3 of every sampling draw: keeps sampling's Philox stream apart from dropout's (c3 = 0). */
export const SAMPLING_DOMAIN = 0x53414d50;

/**
 * Picks the next token of every sequence from its logits and advances the sequence (the end of a decode
 * step). logits [B, Vp] (float; the first `classes` columns are the vocabulary, default Vp). Per sequence b:
 * params f32 [B, 4] = (temperature T ≥ 0, top-k k ≥ 0 (an integer), top-p p ∈ (0, 1], repetition penalty
 * ρ > 0); seeds i32 [B, 2] (a u64, low word first); positions i32 [B], the position of the token whose
 * logits these are; history i32 [B, maxLen], the sequence's tokens by position; tokens, finished, limits
 * i32 [B]; stopIds i32 [S] (−1 = an unused slot).
 *  1. z_j = logits[b, j] as f32 (j < classes). With ρ ≠ 1, each distinct token t of history[b, 0..positions[b]]
 *     gets z_t = z_t > 0 ? z_t / ρ : z_t · ρ (f32 arithmetic; HF's repetition penalty).
 *  2. T = 0: t = argmax z (the lowest index among equal maxima). T > 0: z_j ← z_j / T (f32), then
 *     top-k: j is kept iff z_j ≥ the k-th largest z (every j when k = 0 or k ≥ classes);
 *     top-p: with w_j = exp(z_j − max z) over the top-k set and P = p·Σ w, j is kept iff z_j ≥ τ, τ the
 *       largest value with Σ_{kept, z ≥ τ} w ≥ P (the smallest top set holding mass p: HF's top-p rule);
 *     t = argmax over kept j of z_j + g_j (Gumbel-max: an exact draw from the softmax over the kept set),
 *     g_j = −ln(−ln u_j), u_j = ((w >>> 9) + 0.5)·2⁻²³ with w word j mod 4 of Philox4x32-10 (rng.ts) with
 *     key seeds[b] and counter (floor(j/4), positions[b] + 1, 0, SAMPLING_DOMAIN): a draw depends on the
 *     seed and the position only, not on the batch or on when it is made. The GPU computes g and the
 *     top-p sums in f32, the CPU in f64: they pick the same token unless two candidates tie to rounding.
 *  3. Unless finished[b] ≠ 0 (then nothing is written): history[b, positions[b] + 1] = t; then, if t is one
 *     of stopIds or positions[b] + 2 ≥ limits[b], finished[b] = 1; otherwise tokens[b] = t and
 *     positions[b] += 1. positions[b] + 1 must be < maxLen (an error on the CPU; the GPU writes nothing).
 */
/**
 * Advances a serving step's decode rows to the next step on the device, so several decode steps run back
 * to back without the host (the serving engine's multi-step decoding): with idx = step[0], for every row
 * s < rows: record[idx·width + s] = sampled[s] (when idx < steps); where cachePositions[s] ≥ 0 (an idle
 * row's −1 stays as it is), tokens[s] = sampled[s] and positions[s] and cachePositions[s] each grow by
 * one (sampleTokens has moved its own positions on); then step[0] = idx + 1. All i32: sampled [≥ rows]
 * (the step's sampleTokens output), tokens, positions, cachePositions [rows], record [steps, width] with
 * width ≥ rows, step [1].
 */
export interface DecodeAdvanceArgs {
  sampled: Tensor;
  tokens: Tensor;
  positions: Tensor;
  cachePositions: Tensor;
  record: Tensor;
  step: Tensor;
}

/**
 * feedTokens: the rows of a serving step whose input token the previous step sampled (pipelined steps:
 * the host prepares and launches step i + 1 before it has read step i's tokens). For every row r with
 * from[r] ≥ 0, tokens[r] = sampled[from[r]]; rows with from[r] < 0 keep the token the host wrote.
 *   sampled i32 [n] (the previous step's sampleTokens output);  from, tokens i32 [rows];  from[r] < n.
 */
export interface FeedTokensArgs {
  sampled: Tensor;
  from: Tensor;
  tokens: Tensor;
}

/**
 * gatherColumns: out[r, j] = x[r, index[j]] — x's columns in the order `index` gives. An act-order GPTQ
 * weight stores its input channels sorted by group (its groups contiguous), so its product reads x in
 * that order (infer/forward.ts).
 *   x [rows, K] and out [rows, C] of one float dtype;  index i32 [C], each value in [0, K).
 */
export interface GatherColumnsArgs {
  x: Tensor;
  index: Tensor;
  out: Tensor;
}

/**
 * gptqRoundBlock: GPTQ's rounding of one block of a weight's input columns (quant/gptq-device.ts), each of
 * the weight's N output rows on its own. For i = 0 … width−1, with w the row's current values:
 *   at i % G = 0 the group's scale and zero from w[i … i+G−1] (quant-math.ts int4GroupParams: zero in the
 *   range, the scale rounded to f16), q[i] = clamp(rne(w[i] / s) + z, 0, 15),
 *   e[i] = (w[i] − s·(q[i] − z)) / U[i][i], then w[j] −= e[i]·U[i][j] for j > i (the error fed forward).
 * f32 arithmetic throughout, the update a fused multiply-add (so CPU and GPU agree to the last bit but for
 * a rare double rounding on the CPU).
 *   weights f32 [width, N]: Wᵀ's rows of the block (row i = input column i across the outputs), updated in place
 *   u f32 [width, width]: U's block, upper triangle read (U[i][i] > 0)
 *   q u8 [N, width] (values 0–15);  scales f32 [N, width/G] (f16 values);  zeros u8 [N, width/G]
 *   errors f32 [width, N]: e, laid out for the GEMM that feeds them to the later columns
 *   groupSize: G, dividing width
 */
export interface GptqRoundBlockArgs {
  weights: Tensor;
  u: Tensor;
  groupSize: number;
  q: Tensor;
  scales: Tensor;
  zeros: Tensor;
  errors: Tensor;
}

/**
 * int4ClipGroups: AWQ's clip search (quant/awq.ts). Each group of G weights of a row is clamped to the
 * shrunk range [lo·r, hi·r] (lo ≤ 0 ≤ hi: the group's extremes with zero included) of the ratio r from
 * `ratios` that minimises Σ_k meanSquare[k]·(w_k − ŵ_k)², ŵ_k the INT4 round-to-nearest value (quant-math.ts
 * int4GroupParams / int4QuantizeValue) of the clamped weight; the first ratio of equal errors wins. f32
 * arithmetic but for the error's sum (f64 on the CPU, f32 on the GPU: near-equal errors may pick apart).
 *   weight f32 [N, K] (clamped in place);  meanSquare f32 [K];  ratios f32 [R], each in (0, 1]
 *   groupSize: G, a multiple of 32 up to 256 dividing K
 */
export interface Int4ClipGroupsArgs {
  weight: Tensor;
  meanSquare: Tensor;
  ratios: Tensor;
  groupSize: number;
}

/**
 * scaleColumns: out[r, c] = x[r, c] · scale[c], or x[r, c] / scale[c] with `divide` — AWQ's rescaled
 * weights W·diag(s) and inputs X·diag(s)⁻¹ (quant/awq.ts). f32 arithmetic, rounded to out's dtype.
 *   x [rows, C] and out [rows, C] of one float dtype (out may be x);  scale f32 [C]
 */
export interface ScaleColumnsArgs {
  x: Tensor;
  scale: Tensor;
  out: Tensor;
  divide?: boolean;
}

/**
 * maskLogits: logits[rows[i], j] = −∞ for every class j < classes whose bit of masks[i] is 0 (bit j: word j >>> 5,
 * bit j & 31) — constrained decoding's allowed tokens (infer/structured/), applied before sampleTokens draws from
 * the rows. Other rows, and classes whose bit is 1, are left as they are.
 *   logits (n, Vp) float;  rows i32 (m), distinct, in [0, n);  masks i32 (m, ⌈classes / 32⌉);  classes ≤ Vp
 */
export interface MaskLogitsArgs {
  logits: Tensor;
  rows: Tensor;
  masks: Tensor;
  classes: number;
}

/**
 * biasLogits: logits[rows[i], tokens[i, t]] += biases[i, t] for every t with tokens[i, t] ≥ 0 (−1 pads a row's
 * list) — the API's logit_bias, added before sampleTokens draws from the rows. A row's tokens are distinct.
 *   logits (n, Vp) float;  rows i32 (m), distinct, in [0, n);  tokens i32 (m, k) in [−1, classes);  biases f32 (m, k)
 */
export interface BiasLogitsArgs {
  logits: Tensor;
  rows: Tensor;
  tokens: Tensor;
  biases: Tensor;
}

export interface SampleTokensArgs {
  logits: Tensor;
  classes?: number;
  params: Tensor;
  seeds: Tensor;
  positions: Tensor;
  history: Tensor;
  tokens: Tensor;
  finished: Tensor;
  limits: Tensor;
  stopIds: Tensor;
  /**
   * i32 [B, 2] (optional): each row's greedy pick as the LM head's gemm left it (RowArgmax, same classes). A
   * greedy row without a repetition penalty takes its token from it and leaves its logits unread (a slot of 0,
   * a row of NaN, is read as usual); every row's slot is then set to 0 for the next product.
   */
  argmax?: Tensor;
}

/**
 * The probability of one token per row under the distribution sampleTokens draws from (speculative
 * decoding's acceptance test, on the device): logits [R, Vp] (the first `classes` columns the
 * vocabulary), params f32 [R, 4] as sampleTokens' (temperature, top-k, top-p, repetition penalty),
 * tokens i32 [R], out f32 [R]. With z_j = fround(logit_j / T) (−0 as +0) and the kept set of
 * sampleTokens' step 2 (z ≥ the top-k threshold and ≥ top-p's τ):
 *   out[r] = exp(z_t − m) / Σ_{j kept} exp(z_j − m)  for t = tokens[r] kept (m: the largest z), else 0;
 * a greedy row (T = 0) gives 1 for its argmax (the lowest index on ties) and 0 otherwise. The repetition
 * penalty is not applied (ρ must be 1: callers with a penalty keep the host's acceptance; an error on the
 * CPU, ignored on the GPU), nor is a token outside [0, classes) allowed (CPU: an error; GPU: 0). f32 on the
 * GPU (the top-p masses as in sampleTokens), f64 on the CPU.
 */
export interface TokenProbabilitiesArgs {
  logits: Tensor;
  classes?: number;
  params: Tensor;
  tokens: Tensor;
  out: Tensor;
}

/** Counter word c3 of every speculative-decoding draw ("SPEC"): apart from sampleTokens' and dropout's streams. */
export const SPECULATIVE_DOMAIN = 0x53504543;

/** Counter word c2 of speculativeSample's noise: 3 for a residual draw, 4 for a bonus (the host's uniforms use 0). */
export const SPECULATIVE_NOISE_RESIDUAL = 3;
export const SPECULATIVE_NOISE_BONUS = 4;

/**
 * Speculative decoding's draw after the acceptance tests, on the device (speculative-accept.ts has the
 * rule): per row r, with p the distribution sampleTokens draws from for target[r] and q that of draft[r]
 * (tokenProbabilities' distributions: params f32 [R, 4] as theirs, no repetition penalty), one token from
 *   the residual  w_v = max(0, p_v − q_v)     (draft given: a rejection's resample), or
 *   p itself      w_v = p_v                   (no draft: the bonus token after K accepted),
 * and from p when the residual has no mass (p = q to rounding). The draw is Gumbel-max:
 *   out[r] = argmax over v with w_v > 0 of  s_v,  s_v = ln w_v + g_v (residual) or z_v + g_v (p; the same
 *   argmax: ln p_v = z_v − const),  g_v = −ln(−ln u_v),  u_v = ((word >>> 9) + 0.5)·2⁻²³
 * with word v mod 4 of Philox4x32-10 keyed by seeds[r] (a u64, low word first) at counter (floor(v/4),
 * positions[r], SPECULATIVE_NOISE_RESIDUAL or _BONUS, SPECULATIVE_DOMAIN): a draw depends on the seed and
 * the position only. A greedy row (T = 0) gives the target's argmax (the lowest index on ties).
 * target, draft [R, Vp] float (the same dtype), the first `classes` columns the vocabulary; seeds i32 [R, 2];
 * positions i32 [R] (the position of the token drawn); out i32 [R]. f32 on the GPU, f64 on the CPU: the two
 * pick the same token unless two candidates' scores tie to within rounding. ρ ≠ 1 is an error on the CPU
 * and ignored on the GPU, as in tokenProbabilities.
 */
export interface SpeculativeSampleArgs {
  target: Tensor;
  draft?: Tensor;
  classes?: number;
  params: Tensor;
  seeds: Tensor;
  positions: Tensor;
  out: Tensor;
}

// --- beam search and encoder-decoder decoding (src/infer/beam-search.ts, src/infer/seq2seq*.ts) -----------
// An item (one source sentence) has `beams` consecutive rows, row r = b·beams + j. Positions and cache-row
// tables live in device memory and are advanced by beamAdvance, so one captured decode step replays for
// every position.

/**
 * One beam-search step's candidate selection, fused (Hugging Face's log-softmax, running score, top-K):
 * logits [batch·beams, Vp], of which the first C = classes columns (default Vp) are the vocabulary;
 * beamScores f32 [batch·beams] (default 0). For row r and token v < C:
 *   score(r, v) = (z_rv − lse_r) + beamScores[r]          f32 arithmetic, in this order
 *   lse_r = ln Σ_v exp z_rv over v < C, bannedTokens left out when `renormalize` (HF's renormalize_logits:
 *           a second log-softmax after the processors) and counted otherwise (f64 on the CPU, f32 on the GPU).
 * bannedTokens (bad_words_ids of single tokens) score −∞. NaN logits count as −∞; a row whose lse is −∞
 * scores −∞ everywhere. For each item, its K best (beam, token) pairs of the beams·C are written, highest
 * score first; equal scores are ordered by the lower flat index beam·C + token, so the order is fully
 * determined. tokens, sourceBeams i32 [batch, K] (sourceBeams: the beam j within the item), scores f32
 * [batch, K]; K ≤ beams·C. The CUDA kernel finds them with LightSeq's hierarchical search (HARS: a threshold
 * from group maxima, then a sort of the few candidates above it), the CPU by sorting every candidate.
 */
export interface BeamTopKArgs {
  logits: Tensor;
  beams: number;
  classes?: number;
  beamScores?: Tensor;
  bannedTokens?: readonly number[];
  renormalize?: boolean;
  tokens: Tensor;
  sourceBeams: Tensor;
  scores: Tensor;
}

/**
 * The device half of a beam-search step, after beamTopK (candidates tokens, sourceBeams i32 [batch, K],
 * scores f32 [batch, K]); per item b, with t = positions[b·beams] (every row of an item shares its position):
 *  1. The next beams are the item's first `beams` candidates whose token is not one of eosTokens; if fewer
 *     exist, the remaining slots take the earliest of the others with 1e9 subtracted from their scores (HF
 *     keeps the top beams of the scores with finished candidates lowered by 1e9). With no eosTokens
 *     (greedy), the first `beams` candidates. Slot j: nextTokens[b·beams + j] = its token, beamScores[..] =
 *     its score, parent p = b·beams + its sourceBeam.
 *  2. cacheRows i32 [2, batch·beams, L]: half (t mod 2) maps, for row r and position i < t, the cache row
 *     holding position i of r's history (beamSelfAttention reads it). Half ((t + 1) mod 2) is written:
 *     next[r][i] = cur[p][i] for i < t and next[r][t] = p (the parent wrote its position-t keys in its own row).
 *  3. positions[r] = t + 1 for the item's rows. t < L (an error on the CPU; the GPU then writes no table row).
 * nextTokens, positions i32 [batch·beams]; beamScores f32 [batch·beams]; K ≥ beams.
 */
export interface BeamAdvanceArgs {
  tokens: Tensor;
  sourceBeams: Tensor;
  scores: Tensor;
  beams: number;
  eosTokens: readonly number[];
  nextTokens: Tensor;
  beamScores: Tensor;
  cacheRows: Tensor;
  positions: Tensor;
}

/**
 * One decoding step of causal self-attention over a key/value cache whose beams are reordered through
 * cacheRows (BeamAdvanceArgs) instead of by copying. qkv [R, 3H] is x·Wqkvᵀ without its bias (the Q, K, V
 * blocks side by side), bias [3H]; per row r, t = positions[r], and head h (d = H/heads):
 *   q = (qkv_q + b_q)/√d,  kCache[r, h, t] = qkv_k + b_k,  vCache[r, h, t] = qkv_v + b_v   (cache dtype)
 *   key i ≤ t lives in cache row c_i = cacheRows[t mod 2][r][i] for i < t, c_t = r
 *   out[r, h·d : (h+1)·d] = Σ_i softmax_i(q·kCache[c_i, h, i])·vCache[c_i, h, i]
 * kCache, vCache [R, heads, L, d]; cacheRows i32 [2, R, L]; positions i32 [R] with t < L (an error on the
 * CPU; the GPU writes zeros for such a row); out [R, H]. Float tensors share a dtype.
 */
export interface BeamSelfAttentionArgs {
  qkv: Tensor;
  bias: Tensor;
  heads: number;
  kCache: Tensor;
  vCache: Tensor;
  cacheRows: Tensor;
  positions: Tensor;
  out: Tensor;
}

/**
 * One decoding step of cross-attention, `beams` query rows per source: q [batch·beams, H] (projected, bias
 * added); kv [batch, Lk, 2·layers·H], every decoder layer's encoder keys and values side by side (layer i's
 * K at columns 2i·H, its V at (2i+1)·H: the packed projection of nn/cross-attention.ts); keyLengths i32
 * [batch]. Row r of item b = floor(r / beams), head h (d = H/heads):
 *   out[r, h·d : (h+1)·d] = Σ_{i < keyLengths[b]} softmax_i(q_h·K_{b,i,h}/√d)·V_{b,i,h}
 * A length outside [0, Lk] is an error on the CPU and clamped on the GPU; length 0 gives zeros.
 */
export interface BeamCrossAttentionArgs {
  q: Tensor;
  kv: Tensor;
  layer: number;
  heads: number;
  beams: number;
  keyLengths: Tensor;
  out: Tensor;
}

// --- quantized linear layers (src/quant/, docs/quantization.md) -------------------------------------

/**
 * INT4 weight-only linear (W4A16): out[m, n] = act(Σ_k x[m, k]·w[n, k] + bias[n]) with the weight
 * stored group-wise asymmetric, GPTQ/AWQ's convention w[n, k] = scale[n, k/G]·(q[n, k] − zero[n, k/G]):
 *   qweight i32 [N, K/8]: q[n, k] is nibble k%8 (bits 4·(k%8) .. +3, low nibble first) of qweight[n, k/8]
 *   scales  f16 [N, K/G]   zeros u8 [N, K/G] (any value 0..255; our quantizer writes 0..15)
 * x [M, K] and out [M, N] share a float dtype; bias [N] has it too. G (groupSize) divides K and is a
 * multiple of 32. The CUDA backend picks a memory-bound GEMV for M ≤ 8 (and f32) and a tensor-core
 * kernel (weights dequantized to the activation dtype in shared memory) above.
 *
 * `gated` (a gated MLP's first half, as gatedLinear): the weight's N = 2F rows are the gate's then the
 * up projection's, bias [2F] likewise, and out [M, F] = act(g)·u with g = x·w[n]ᵀ + bias[n] and
 * u = x·w[F + n]ᵀ + bias[F + n] — the product never stored (on CUDA one GEMV kernel for M ≤ 8);
 * `activation` is then required.
 */
export interface Int4LinearArgs {
  x: Tensor;
  qweight: Tensor;
  scales: Tensor;
  zeros: Tensor;
  groupSize: number;
  out: Tensor;
  bias?: Tensor;
  activation?: Activation;
  gated?: boolean;
  /** Each row's greedy pick over out (RowArgmax; not with gated): an INT4 LM head's, read by sampleTokens. */
  argmax?: RowArgmax;
}

/**
 * Round-to-nearest INT4 quantization of weight [N, K] (any float dtype) per group of G consecutive k
 * of one row, in f32 (the same bits on every backend):
 *   lo = min(0, min v), hi = max(0, max v) (zero is always representable)
 *   scale = f16(max(hi − lo, 1e-5) / 15);  zero = clamp(rne(−lo / scale), 0, 15)
 *   q = clamp(rne(v / scale) + zero, 0, 15)
 * with the f16-rounded scale used for q, so that scale·(q − zero) is what int4Linear computes.
 * Writes qweight, scales, zeros in int4Linear's layout.
 */
export interface Int4QuantizeWeightsArgs {
  weight: Tensor;
  groupSize: number;
  qweight: Tensor;
  scales: Tensor;
  zeros: Tensor;
}

/**
 * Per-row (per-token) dynamic symmetric INT8 quantization of x [M, K] (a float dtype), in f32:
 *   amax = max_k |x[m, k]|;  scales[m] = amax / 127;  out[m, k] = clamp(rne(x[m, k] · (127 / amax)), −127, 127)
 * (a row of zeros gets scale 0 and zeros). out i8 [M, K], scales f32 [M].
 */
export interface Int8QuantizeRowsArgs {
  x: Tensor;
  out: Tensor;
  scales: Tensor;
}

/**
 * out i32 [M, N] = a i8 [M, K] · bᵀ, b i8 [N, K] (the weight stored [out, in]), exact in integers
 * (cuBLASLt IMMA on the GPU: K and N multiples of 4).
 */
export interface Int8GemmArgs {
  a: Tensor;
  b: Tensor;
  out: Tensor;
}

/**
 * The W8A8 epilogue: out[m, n] = act(acc[m, n] · rowScales[m] · colScales[n] + bias[n]);
 * acc i32 [M, N], rowScales f32 [M] (per token), colScales f32 [N] (per output channel), out [M, N]
 * a float dtype, bias [N] in out's dtype.
 */
export interface Int8DequantizeArgs {
  acc: Tensor;
  rowScales: Tensor;
  colScales: Tensor;
  out: Tensor;
  bias?: Tensor;
  activation?: Activation;
}

/**
 * W8A8 linear in one op: exactly int8QuantizeRows(x) → int8Gemm(·, qweight) → int8Dequantize(·, scales,
 * bias, activation), out [M, N] = act(acc · rowScale · colScale + bias). Gated (a gated MLP's gate and up
 * projections in one weight, [2F, K]): out [M, F] = act(g)·u with g, u the dequantized gate column n and
 * up column F + n (bias [2F] added to both). x [M, K] a float dtype, qweight i8 [N, K], scales f32 [N],
 * bias [N] in x's dtype. A backend may fuse it (CUDA: one GEMV kernel for ≤ 4 rows, the activations
 * quantized in its prologue); otherwise it runs the three ops through `scratch` (xq i8 [M, K],
 * rowScales f32 [M], acc i32 [M, N], and up [M, N] in x's dtype when gated), or through scratch of its
 * own when none is given (CUDA's cannot grow inside a graph capture).
 */
export interface Int8LinearArgs {
  x: Tensor;
  qweight: Tensor;
  scales: Tensor;
  out: Tensor;
  bias?: Tensor;
  activation?: Activation;
  gated?: boolean;
  scratch?: Int8LinearScratch;
  /** Each row's greedy pick over out (RowArgmax; not with gated): an INT8 LM head's, read by sampleTokens. */
  argmax?: RowArgmax;
}

export interface Int8LinearScratch {
  xq: Tensor;
  rowScales: Tensor;
  acc: Tensor;
  up?: Tensor;
}

// --- the interface ---------------------------------------------------------------------------------

/** A recorded sequence of ops that can be replayed (a CUDA graph on the GPU; a closure on the CPU). */
export interface Graph {
  replay(): void;
  dispose(): void;
}

export interface MemoryStats {
  /** Number of allocations served (cache hits included). */
  allocations: number;
  /** Number of allocations that reached the device allocator (cache misses). */
  deviceAllocations: number;
  bytesInUse: number;
  peakBytesInUse: number;
  /** Bytes held by the backend, in use or cached for reuse. */
  bytesReserved: number;
}

/**
 * A point in the queue of work (a CUDA event on the GPU; the host clock on the CPU, where ops run at
 * once). Two markers time the work issued between them; dispose() releases the event.
 */
export interface TimeMarker {
  /** Milliseconds from `earlier` to this marker; waits for the work before this marker to finish. */
  elapsedSince(earlier: TimeMarker): number;
  dispose(): void;
}

/** A download queued behind the work issued before it (Backend.downloadLater). */
export interface PendingDownload {
  /** Waits for the work queued before the download, then returns the values (the same array on every call). */
  wait(): HostArray;
  /** Whether wait() would return without blocking (the copy has completed). */
  ready(): boolean;
}

/** Byte offsets of arena views are multiples of this (cudaMalloc's alignment; 16-byte vectors fit). */
export const ARENA_ALIGNMENT = 256;

/**
 * One allocation of `bytes` for planned activations (nn/plan.ts lays buffers into it by byte
 * offset). view() makes a contiguous tensor at a byte offset (a multiple of ARENA_ALIGNMENT) that
 * must fit inside the arena; views whose byte ranges overlap share memory, so buffers with disjoint
 * lifetimes can reuse bytes. Views own nothing (Backend.free of a view frees nothing); free()
 * releases the whole arena, after which its views must not be used.
 */
export interface Arena {
  readonly bytes: number;
  view(byteOffset: number, shape: readonly number[], dtype: DType): Tensor;
  free(): void;
}

export interface Backend {
  readonly name: BackendName;
  /** A human-readable description: the device name, or "CPU (reference)". */
  readonly description: string;

  // memory and data movement
  empty(shape: readonly number[], dtype: DType): Tensor;
  /** A tensor holding `values` (Float32Array for float dtypes, rounded to the dtype). */
  fromArray(values: HostArray | readonly number[], shape: readonly number[], dtype: DType): Tensor;
  upload(t: Tensor, values: HostArray | readonly number[]): void;
  /** Float dtypes come back as Float32Array, i32 as Int32Array, i8 as Int8Array, u8 as Uint8Array. */
  download(t: Tensor): HostArray;
  /**
   * download() without waiting: the copy is queued behind the work issued so far and the call returns;
   * wait() gives the values `t` holds at that point of the queue, whatever is issued after. (CUDA: into
   * page-locked memory; the CPU runs every op at once, so its values are read now.)
   */
  downloadLater(t: Tensor): PendingDownload;
  fill(t: Tensor, value: number): void;
  /** Elementwise copy with dtype conversion; shapes must have the same number of elements. */
  copy(src: Tensor, dst: Tensor): void;
  /** A contiguous view of `shape` starting `offset` elements into a contiguous tensor (no copy). */
  view(t: Tensor, offset: number, shape: readonly number[]): Tensor;
  /** Frees the tensor's memory now (views are not freed; their base owns the memory). */
  free(t: Tensor): void;
  /** One allocation of `bytes` that planned activations are carved from (see Arena). */
  createArena(bytes: number): Arena;
  memoryStats(): MemoryStats;
  /** Restarts peakBytesInUse from the bytes in use now (to measure the peak of one phase). */
  resetPeakMemory(): void;
  /** Waits until all queued work is done. */
  synchronize(): void;
  /** Records the ops `fn` issues into a graph; nothing runs until replay(). */
  captureGraph(fn: () => void): Graph;
  /**
   * Whether GEMMs may time their candidate algorithms (autotuning) from now on; returns the previous
   * setting. Absent on backends that do not tune.
   */
  setGemmTuning?(enabled: boolean): boolean;
  /**
   * Whether normMlp of `rows` rows of `dtype` (model width H, F hidden features) runs as one kernel, so a
   * decode forward gains by calling it instead of normLinear and the down GEMM. Absent: never (the CPU
   * backend implements normMlp at any size without offering it).
   */
  fusesMlp?(rows: number, dtype: DType, H: number, F: number): boolean;
  /**
   * Whether gemm (weights 'float', the default), int8Linear or int4Linear of `rows` rows of `dtype` (N columns of K)
   * forms its `argmax` (RowArgmax) inside its kernel, so a
   * decode step gains by asking for it and handing it to sampleTokens. Absent: never (the CPU backend implements
   * argmax at any size without offering it).
   */
  argmaxInProduct?(rows: number, dtype: DType, N: number, K: number, weights?: 'float' | 'int8' | 'int4'): boolean;
  /**
   * Whether decodeAttention / appendDecodeAttention of `rows` sequences take `project` inside their kernel
   * (heads Hq of d over kvHeads, projected to H, the O weight of `weights`), so a decode forward gains by asking
   * for it instead of the O GEMM. Absent: never (the CPU backend implements project at any size without offering it).
   */
  projectsAttention?(rows: number, dtype: DType, H: number, heads: number, kvHeads: number, headDim: number, weights?: 'float' | 'int4'): boolean;
  /**
   * Marks the current point of the queue, for timing. Inside captureGraph() (CUDA) the mark becomes a
   * node of the graph, recorded again by every replay: elapsedSince() then reads the latest replay.
   */
  mark(): TimeMarker;

  // ops
  gemm(args: GemmArgs): void;
  batchedGemm(args: BatchedGemmArgs): void;
  biasDropoutResidual(args: BiasDropoutResidualArgs): void;
  biasDropoutResidualBackward(args: BiasDropoutResidualBackwardArgs): void;
  biasActivationDropout(args: BiasActivationDropoutArgs): void;
  biasActivationDropoutBackward(args: BiasActivationDropoutBackwardArgs): void;
  biasQkvSplit(args: BiasQkvSplitArgs): void;
  biasQkvSplitBackward(args: BiasQkvSplitBackwardArgs): void;
  layerNormForward(args: LayerNormForwardArgs): void;
  layerNormBackward(args: LayerNormBackwardArgs): void;
  rmsNormForward(args: RmsNormForwardArgs): void;
  rmsNormBackward(args: RmsNormBackwardArgs): void;
  softmaxForward(args: SoftmaxForwardArgs): void;
  softmaxBackward(args: SoftmaxBackwardArgs): void;
  flashAttentionForward(args: FlashAttentionForwardArgs): void;
  flashAttentionBackward(args: FlashAttentionBackwardArgs): void;
  crossEntropyForward(args: CrossEntropyForwardArgs): void;
  crossEntropyBackward(args: CrossEntropyBackwardArgs): void;
  vocabShardMax(args: VocabShardMaxArgs): void;
  vocabShardSums(args: VocabShardSumsArgs): void;
  vocabShardLoss(args: VocabShardLossArgs): void;
  vocabShardCrossEntropyBackward(args: VocabShardCrossEntropyBackwardArgs): void;
  embeddingForward(args: EmbeddingForwardArgs): void;
  embeddingBackward(args: EmbeddingBackwardArgs): void;
  permute0213(args: Permute0213Args): void;
  dropout(args: DropoutOpArgs): void;
  sumSquares(args: SumSquaresArgs): void;
  adamW(args: AdamWArgs): void;
  randomFill(args: RandomFillArgs): void;
  // quantized linear layers (docs/quantization.md)
  int4Linear(args: Int4LinearArgs): void;
  int4QuantizeWeights(args: Int4QuantizeWeightsArgs): void;
  int8QuantizeRows(args: Int8QuantizeRowsArgs): void;
  int8Gemm(args: Int8GemmArgs): void;
  int8Dequantize(args: Int8DequantizeArgs): void;
  int8Linear(args: Int8LinearArgs): void;
  // inference
  embedTokens(args: EmbedTokensArgs): void;
  qkvRopeAppend(args: QkvRopeAppendArgs): void;
  decodeAttention(args: DecodeAttentionArgs): void;
  appendDecodeAttention(args: AppendDecodeAttentionArgs): void;
  residualNorm(args: ResidualNormArgs): void;
  gatedActivation(args: GatedActivationArgs): void;
  gatedLinear(args: GatedLinearArgs): void;
  normLinear(args: NormLinearArgs): void;
  normMlp(args: NormMlpArgs): void;
  tanhActivation(args: TanhActivationArgs): void;
  sampleTokens(args: SampleTokensArgs): void;
  maskLogits(args: MaskLogitsArgs): void;
  biasLogits(args: BiasLogitsArgs): void;
  tokenProbabilities(args: TokenProbabilitiesArgs): void;
  speculativeSample(args: SpeculativeSampleArgs): void;
  decodeAdvance(args: DecodeAdvanceArgs): void;
  feedTokens(args: FeedTokensArgs): void;
  gatherColumns(args: GatherColumnsArgs): void;
  gptqRoundBlock(args: GptqRoundBlockArgs): void;
  int4ClipGroups(args: Int4ClipGroupsArgs): void;
  scaleColumns(args: ScaleColumnsArgs): void;
  // beam search and encoder-decoder decoding
  beamTopK(args: BeamTopKArgs): void;
  beamAdvance(args: BeamAdvanceArgs): void;
  beamSelfAttention(args: BeamSelfAttentionArgs): void;
  beamCrossAttention(args: BeamCrossAttentionArgs): void;
}

export type { DType, FloatDType };
