// Sentence embeddings from an encoder pass's hidden states [B·L, H] (row r = b·L + l, each sequence's real
// tokens first): one vector a sequence, shared by the BERT-family encoder (bert.ts) and decoder models used
// as embedders (decoder-encoder.ts).
//   'mean'  Σ_l mask·h / length     a batched GEMM of 0/1 rows [B, 1, L]·h [B, L, H]; ÷ on the host, in f64
//                                   (weights 1/length instead where Dense layers follow on the device)
//   'cls'   h[b·L]                  a row gather (embedTokens); BERT's [CLS], a decoder's first token
//   'last'  h[b·L + length − 1]     a row gather; sentence-transformers' lasttoken pooling (Qwen3-Embedding,
//                                   gte-Qwen2, e5-mistral: a causal model's last token has seen the whole text)
// then any Dense layers (sentence-transformers' Dense modules) on the device, the download queued, and the
// optional L2 normalisation on the host.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';

export type Pooling = 'cls' | 'mean' | 'last';
export const POOLINGS: readonly Pooling[] = ['mean', 'cls', 'last'];

export interface EmbeddingOptions {
  /** 'mean' (default): the mean of the real tokens' hidden states; 'cls': the first token's; 'last': the last real token's. */
  readonly pooling?: Pooling;
  /** Scale each vector to unit L2 norm (for cosine similarity by dot product). */
  readonly normalize?: boolean;
  /** Linear layers after the pooling (sentence-transformers' Dense modules), run on the device before normalising. */
  readonly dense?: readonly DenseLayer[];
}

/** y = activation(x·Wᵀ + bias) on the device: weight [out, in] and bias [out] in the encoder's dtype. */
export interface DenseLayer {
  readonly weight: Tensor;
  readonly bias?: Tensor;
  readonly activation: 'tanh' | 'identity';
}

/** Embeddings queued on the device (embeddingsLater): wait() gives the vectors (the same array on every call). */
export interface PendingEmbeddings {
  wait(): Float32Array[];
  /** Whether wait() would return without blocking on the device. */
  ready(): boolean;
}

/** A padded batch's shape and each sequence's real token count. */
export interface PooledBatch {
  readonly batch: number;
  readonly length: number;
  readonly lengths: Int32Array;
  /**
   * Packed rows (a decoder encoder's packed pass): sequence s's lengths[s] rows start at row rowStarts[s], not
   * s·length. After a shared prefix the rows are the suffixes' only ('last' pooling).
   */
  readonly rowStarts?: Int32Array;
}

/** A temporary tensor of the encoder pass, freed with its activations. */
export type TemporaryTensor = (shape: readonly number[], dtype: FloatDType | 'i32' | 'u8') => Tensor;

/** `pooling` checked (undefined: 'mean'); `who` names the caller in the error. */
export function checkedPooling(pooling: Pooling | undefined, who: string): Pooling {
  const value = pooling ?? 'mean';
  if (!POOLINGS.includes(value)) throw new ArgumentError(`${who}: pooling must be ${POOLINGS.join(', ')}, got '${String(value)}'`);
  return value;
}

/**
 * Inside an encoder pass: pools `hidden` [B·L, H], runs the Dense layers and queues the download; returns
 * embeddingsLater's result, whose wait() divides (mean without Dense layers) and normalises on the host.
 */
export function poolLater(b: Backend, hidden: Tensor, batch: PooledBatch, options: EmbeddingOptions, temp: TemporaryTensor, who: string): PendingEmbeddings {
  const pooling = checkedPooling(options.pooling, who), dense = options.dense ?? [];
  const { batch: B, length: L, lengths, rowStarts } = batch, H = hidden.shape[1]!, dtype = hidden.dtype as FloatDType;
  let pooled: Tensor;
  if (pooling === 'mean') {
    // Σ over the real tokens as a batched GEMM with exact 0/1 weights; the division is the host's, in f64 —
    // unless Dense layers follow on the device: then the weights are 1/length (the mean, rounded to the dtype).
    // Packed rows: one GEMM of a [B, R] weight matrix, row s covering its sequence's rows.
    // Padded rows: B products of a 1 × L weight row; packed: one of a B × R matrix. Weight row s covers sequence s's rows.
    const [G, M, K] = rowStarts ? [1, B, Math.max(...Array.from({ length: B }, (_, s) => rowStarts[s]! + lengths[s]!))] : [B, 1, L];
    const weights = new Float32Array(B * K);
    for (let s = 0; s < B; s++) {
      const first = s * K + (rowStarts ? rowStarts[s]! : 0);
      weights.fill(dense.length > 0 ? 1 / lengths[s]! : 1, first, first + lengths[s]!);
    }
    const ones = temp([G, M, K], dtype);
    pooled = temp([B, H], dtype);
    b.upload(ones, weights);
    b.batchedGemm({ a: ones, b: b.view(hidden, 0, [G, K, H]), out: b.view(pooled, 0, [G, M, H]) });
  } else {
    const start = (s: number) => (rowStarts ? rowStarts[s]! : s * L);
    pooled = gatherRows(b, hidden, Int32Array.from({ length: B }, (_, s) => start(s) + (pooling === 'last' ? lengths[s]! - 1 : 0)), temp);
  }
  for (const layer of dense) pooled = denseLayer(b, pooled, layer, temp);
  const width = pooled.shape[1]!, values = b.downloadLater(pooled);
  const divideBy = pooling === 'mean' && dense.length === 0 ? lengths : undefined;
  let vectors: Float32Array[] | undefined;
  return {
    wait: () => (vectors ??= pooledVectors(values.wait() as Float32Array, divideBy, B, width, options.normalize === true)),
    ready: () => values.ready(),
  };
}

/** Rows `rows` of `table` [N, H] as [rows.length, H] (embedTokens as a row gather). */
export function gatherRows(b: Backend, table: Tensor, rows: Int32Array, temp: TemporaryTensor): Tensor {
  const index = temp([rows.length], 'i32'), out = temp([rows.length, table.shape[1]!], table.dtype as FloatDType);
  b.upload(index, rows);
  b.embedTokens({ tokens: index, tokenTable: table, out });
  return out;
}

/** A linear layer over rows [B, in] → [B, out] (pooler, classification head, Dense module): the GEMM, then tanh(x + bias) or the bias in its epilogue. */
export function denseLayer(b: Backend, x: Tensor, layer: DenseLayer, temp: TemporaryTensor): Tensor {
  const out = temp([x.shape[0]!, layer.weight.shape[0]!], x.dtype as FloatDType);
  if (layer.activation === 'tanh') {
    b.gemm({ a: x, b: layer.weight, out, transB: true });
    b.tanhActivation({ x: out, ...(layer.bias ? { bias: layer.bias } : {}), out });
  } else {
    b.gemm({ a: x, b: layer.weight, out, transB: true, ...(layer.bias ? { epilogue: 'bias' as const, bias: layer.bias } : {}) });
  }
  return out;
}

/**
 * B vectors of H values from the device's rows: each divided by its sequence's real token count where
 * `divideBy` is given (mean pooling's sums), optionally L2-normalised, in f64. Plain loops: TypedArray.from
 * with a map function costs microseconds an element in V8, which made this host step four times the
 * encoder's own GPU time for a batch of 32.
 */
function pooledVectors(values: Float32Array, divideBy: Int32Array | undefined, B: number, H: number, normalize: boolean): Float32Array[] {
  const vectors: Float32Array[] = [];
  const vector = new Float64Array(H);
  for (let s = 0; s < B; s++) {
    const divisor = divideBy ? divideBy[s]! : 1;
    let squares = 0;
    for (let h = 0; h < H; h++) {
      const x = values[s * H + h]! / divisor;
      vector[h] = x;
      squares += x * x;
    }
    // A zero vector stays zero (as torch.nn.functional.normalize, whose divisor is max(norm, 1e-12)).
    const norm = normalize ? Math.max(Math.sqrt(squares), 1e-12) : 1;
    const out = new Float32Array(H);
    for (let h = 0; h < H; h++) out[h] = vector[h]! / norm;
    vectors.push(out);
  }
  return vectors;
}
