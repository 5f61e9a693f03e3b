// Token (+ position) embedding with scale and dropout, forward and backward.
//
// Math (backend.ts has the contract; tokens i32 [B, L], tokenTable [V, H], positionTable [P, H]):
//   forward   out[b, l] = dropout(scale·tokenTable[tokens[b, l]] + positionTable[positionOffset + l])
//             mask u8 [B, L, H] (1 = kept), drawn exactly as elementwise.ts draws it (element index
//             (b·L + l)·H + h); out and mask [B, L, H]
//   backward  g = dOut ⊙ mask / (1−p)
//             dTokenTable[tokens[b, l]] += scale·g[b, l];  dPositionTable[positionOffset + l] += Σ_b g[b, l]
//
// A split vocabulary (vocabStart, Megatron's vocab-parallel embedding): the table holds ids
// [vocabStart, vocabStart + V); every id is shifted by vocabStart, and an id outside the shard adds a
// zero token row forward (the `masked` spec; its position row is still added) and nothing backward.
//
// Out-of-range token ids (outside [0, V)): the CPU backend raises an error; a kernel cannot, so the
// forward never reads the table for such a token and writes NaN to that whole row of `out` (the mask
// is still written), so the bug shows up in the loss instead of as a silent read of another row. The
// backward skips such tokens (their gradient is dropped, never written out of bounds).
//
// Forward thread mapping: elementwise.ts's row tiles (rows = B·L tokens, columns = H/VEC vectors),
// with the token id read once per row (a broadcast within the warp) and the position row
// positionOffset + (row mod L).
//
// Backward thread mapping: block (TX, TY), grid (column chunks, ⌈L/TY⌉, batch chunks). Thread (x, y)
// owns column vector blockIdx.x·TX + x of position l = blockIdx.y·TY + y and walks the batches of its
// chunk (one at a time: loading 2 or 4 batches ahead measured equal or up to 15% slower, the extra
// registers costing occupancy). For each (b, l) it adds scale·g to the token's table row
// with vector atomics; it sums g over its batches in f32 registers and adds that sum to the position
// row once at the end. The grid is split over batches only as far as needed to fill the GPU (about
// two waves), so the position table sees ⌈B / batches-per-chunk⌉ atomic adds per element.
//
// Atomics: f32 tables use red.global.add.v4.f32 (16 bytes per instruction, sm_90); f16 and bf16
// tables use red.global.add.noftz.v4.{f16x2,bf16x2} (sm_90), or the half2/bfloat162 atomicAdd for
// narrower vectors, or the scalar atomicAdd. NON-DETERMINISM: the order in which atomic adds reach a
// table row (a token seen at several (b, l), or several batch chunks of a position) varies from run
// to run, so results can differ in the last bits between runs (f32), or by about one f16/bf16 ulp of
// the accumulated value per add: f16/bf16 atomics round the running sum to 16 bits after every add,
// unlike the CPU, which sums in f64 and rounds once. Tables that collect many adds per row (frequent
// tokens, large batches) should be f32 where that matters.
//
// Precision: loads convert to f32, arithmetic in f32.
//
// Bytes per element of out (s = sizeof(dtype)):
//   forward   read s (token row) [+ s position row], write s + 1 (out, mask); + 4 per row (token id)
//             f16 with positions: 7
//   backward  read s + 1 (dOut, mask), atomic read-modify-write s on the token row at L2 (+ 4 per row);
//             position rows: s per element per batch chunk
//
// Measured on an H200 (CUDA-graph replay; memcpy D2D = 4.28 TB/s), counting 3s + 1 bytes per element:
// forward bf16 B=32 L=512 V=50257 H=768 4.1 TB/s (table rows partly hit L2); backward 3.7 TB/s
// (bf16, same shape) and 3.7 TB/s (f16, B=16 L=1024 H=1024).

import type { EmbeddingBackwardArgs, EmbeddingForwardArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { checkEmbeddingBackward, checkEmbeddingForward } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { Access } from './elementwise.js';
import { dropoutArgs, maxVectorElements, pickVectorWidth, planRowTiles, rowTileShape, rowTileSource, DROPOUT_OFFSET, DROPOUT_PARAMS } from './elementwise.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

// ==== specs ============================================================================================

export interface EmbeddingForwardSpec {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly hasPositions: boolean;
  readonly hasDropout: boolean;
  /** A split vocabulary (vocabStart given): an id outside the table's rows adds a zero row instead of NaN. */
  readonly masked?: boolean;
}

export interface EmbeddingBackwardSpec {
  readonly dtype: FloatDType;
  /** The gradient tables' dtype: dtype, or f32 to accumulate in f32. */
  readonly tableDtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly hasPositions: boolean;
}

export function embeddingForwardKey(s: EmbeddingForwardSpec): string {
  return `embedding_forward.${s.dtype}.h${s.hidden}.v${s.vec}${s.hasPositions ? '.pos' : ''}${s.hasDropout ? '.drop' : ''}${s.masked ? '.masked' : ''}`;
}

export function embeddingBackwardKey(s: EmbeddingBackwardSpec): string {
  return `embedding_backward.${s.dtype}${s.tableDtype === s.dtype ? '' : `.table_${s.tableDtype}`}.h${s.hidden}.v${s.vec}${s.hasPositions ? '.pos' : ''}`;
}

// ==== forward ===============================================================================================

export function embeddingForwardSource(spec: EmbeddingForwardSpec): KernelSource {
  const pos = spec.hasPositions;
  const tokenPart = spec.masked ? '(valid ? scale * to_float(e.v[k]) : 0.f)' : 'scale * to_float(e.v[k])';
  const value = `${tokenPart}${pos ? ' + to_float(pe.v[k])' : ''}`;
  return rowTileSource(spec, {
    name: kernelIdentifier(embeddingForwardKey(spec)),
    params: 'const int* tokens, const T* token_table, const T* position_table, T* out, unsigned char* mask, '
      + `u32 seq_len, u32 vocab, int vocab_start, u32 position_offset, float scale, ${DROPOUT_PARAMS}`,
    setup: DROPOUT_OFFSET,
    // An id outside the table's rows reads nothing: its row becomes NaN below, or, with a split
    // vocabulary (masked), gets a zero token row.
    body: `const int token = tokens[row] - vocab_start;
const bool valid = (u32)token < vocab;
Vec<T, VEC> e;
if (valid) e = load_vec<T, VEC>(token_table + (size_t)token * H + col);${pos ? `
const Vec<T, VEC> pe = load_vec<T, VEC>(position_table + (size_t)(position_offset + row % seq_len) * H + col);` : ''}
${spec.hasDropout ? 'bool keep[VEC];\ndropout_keep_vec<VEC>(seed, offset, i, threshold, keep);\n' : ''}Vec<T, VEC> y;
#pragma unroll
for (int k = 0; k < VEC; k++) {
  const float x = ${spec.hasDropout ? `keep[k] ? (${value}) * keep_scale : 0.f` : value};
  y.v[k] = from_float<T>(${spec.masked ? 'x' : 'valid ? x : __int_as_float(0x7fc00000)'});
}
store_vec<T, VEC>(out + i, y);
${spec.hasDropout ? 'store_mask<VEC>(mask + i, keep);' : 'store_mask_all_kept<VEC>(mask + i);'}`,
    reduces: false,
  });
}

export function embeddingForward(host: KernelHost, args: EmbeddingForwardArgs): void {
  const c = new OpCheck('embeddingForward', 'cuda');
  const { tokens, tokenTable, positionTable, out, mask, ...shapes } = checkEmbeddingForward(c, args);
  const dtype = out.dtype as FloatDType;
  const s = byteSize(dtype);
  const ptrs = {
    tokens: devicePtr(c, 'tokens', tokens), tokenTable: devicePtr(c, 'tokenTable', tokenTable),
    positionTable: positionTable ? devicePtr(c, 'positionTable', positionTable) : 0n,
    out: devicePtr(c, 'out', out), mask: devicePtr(c, 'mask', mask),
  };
  const { hidden } = shapes;
  if (hidden === 0) return;
  const accesses: Access[] = [
    { ptr: ptrs.tokenTable, elementBytes: s }, { ptr: ptrs.out, elementBytes: s }, { ptr: ptrs.mask, elementBytes: 1 },
    ...(positionTable ? [{ ptr: ptrs.positionTable, elementBytes: s }] : []),
  ];
  const spec: EmbeddingForwardSpec = {
    dtype, hidden, vec: pickVectorWidth(maxVectorElements(dtype), accesses, hidden), hasPositions: positionTable !== undefined, hasDropout: args.p > 0,
    ...(shapes.vocabStart !== undefined ? { masked: true } : {}),
  };
  const rows = shapes.batch * shapes.seqLen;
  const tiling = planRowTiles(c, rows, hidden / spec.vec, false, host.multiProcessorCount);
  if (tiling.rowTiles === 0) return;
  host.kernel(embeddingForwardKey(spec), () => embeddingForwardSource(spec)).launch({ grid: tiling.grid, block: tiling.block }, [
    arg.ptr(ptrs.tokens), arg.ptr(ptrs.tokenTable), arg.ptr(ptrs.positionTable), arg.ptr(ptrs.out), arg.ptr(ptrs.mask),
    arg.u32(shapes.seqLen), arg.u32(shapes.vocab), arg.i32(shapes.vocabStart ?? 0), arg.u32(shapes.positionOffset), arg.f32(shapes.scale), ...dropoutArgs(args),
    arg.u32(rows), arg.u32(tiling.rowsPerTile),
  ]);
}

// ==== backward ==============================================================================================

const BACKWARD_BLOCK_THREADS = 256;
/** Threads the backward grid aims for, per SM (two waves of 2048). */
const BACKWARD_THREADS_PER_SM = 4096;
const MAX_GRID_YZ = 65535;

// Adds s·x[0..N) to p[0..N) with the widest atomic the alignment allows (the launcher's vector width
// guarantees p is aligned to min(16, N·sizeof(T)) bytes). red = atomic add without a return value.
const ATOMIC_ADD_DEVICE_CODE = String.raw`
template <int N>
__device__ __forceinline__ void atomic_add_vec(float* p, const float (&x)[N], float s) {
  if constexpr (N % 4 == 0) {
    #pragma unroll
    for (int c = 0; c < N; c += 4)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                   :: "l"(p + c), "f"(s * x[c]), "f"(s * x[c + 1]), "f"(s * x[c + 2]), "f"(s * x[c + 3]) : "memory");
  } else if constexpr (N == 2) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(s * x[0], s * x[1]));
  } else {
    atomicAdd(p, s * x[0]);
  }
}
__device__ __forceinline__ u32 half2_bits(__half2 h) { return *reinterpret_cast<u32*>(&h); }
__device__ __forceinline__ u32 bfloat162_bits(__nv_bfloat162 h) { return *reinterpret_cast<u32*>(&h); }
template <int N>
__device__ __forceinline__ void atomic_add_vec(__half* p, const float (&x)[N], float s) {
  if constexpr (N % 8 == 0) {
    #pragma unroll
    for (int c = 0; c < N; c += 8)
      asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};"
                   :: "l"(p + c), "r"(half2_bits(__floats2half2_rn(s * x[c], s * x[c + 1]))),
                      "r"(half2_bits(__floats2half2_rn(s * x[c + 2], s * x[c + 3]))),
                      "r"(half2_bits(__floats2half2_rn(s * x[c + 4], s * x[c + 5]))),
                      "r"(half2_bits(__floats2half2_rn(s * x[c + 6], s * x[c + 7]))) : "memory");
  } else if constexpr (N % 2 == 0) {
    #pragma unroll
    for (int c = 0; c < N; c += 2) atomicAdd(reinterpret_cast<__half2*>(p + c), __floats2half2_rn(s * x[c], s * x[c + 1]));
  } else {
    atomicAdd(p, __float2half_rn(s * x[0]));
  }
}
template <int N>
__device__ __forceinline__ void atomic_add_vec(__nv_bfloat16* p, const float (&x)[N], float s) {
  if constexpr (N % 8 == 0) {
    #pragma unroll
    for (int c = 0; c < N; c += 8)
      asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};"
                   :: "l"(p + c), "r"(bfloat162_bits(__floats2bfloat162_rn(s * x[c], s * x[c + 1]))),
                      "r"(bfloat162_bits(__floats2bfloat162_rn(s * x[c + 2], s * x[c + 3]))),
                      "r"(bfloat162_bits(__floats2bfloat162_rn(s * x[c + 4], s * x[c + 5]))),
                      "r"(bfloat162_bits(__floats2bfloat162_rn(s * x[c + 6], s * x[c + 7]))) : "memory");
  } else if constexpr (N % 2 == 0) {
    #pragma unroll
    for (int c = 0; c < N; c += 2) atomicAdd(reinterpret_cast<__nv_bfloat162*>(p + c), __floats2bfloat162_rn(s * x[c], s * x[c + 1]));
  } else {
    atomicAdd(p, __float2bfloat16_rn(s * x[0]));
  }
}
`;

export function embeddingBackwardSource(spec: EmbeddingBackwardSpec): KernelSource {
  const name = kernelIdentifier(embeddingBackwardKey(spec));
  const vectorsPerRow = spec.hidden / spec.vec;
  const { tx, ty } = backwardBlockShape(vectorsPerRow);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${typedefLine('TT', spec.tableDtype)}
${constants({ H: spec.hidden, VEC: spec.vec, VECS_PER_ROW: vectorsPerRow, TX: tx, TY: ty, HAS_POSITIONS: spec.hasPositions })}
${ATOMIC_ADD_DEVICE_CODE}
// Block (TX, TY); thread (x, y): column vector blockIdx.x·TX + x, position l = blockIdx.y·TY + y,
// batches [blockIdx.z·batches_per_chunk, +batches_per_chunk).
extern "C" __global__ void __launch_bounds__(TX * TY) ${name}(
    const int* __restrict__ tokens, const T* __restrict__ d_out, const unsigned char* __restrict__ mask,
    TT* d_token_table, TT* d_position_table, u32 batch, u32 seq_len, u32 vocab, int vocab_start, u32 position_offset,
    u32 batches_per_chunk, float scale, float keep_scale) {
  const u32 cvec = blockIdx.x * TX + threadIdx.x;
  const u32 l = blockIdx.y * TY + threadIdx.y;
  if ((VECS_PER_ROW % TX != 0 && cvec >= VECS_PER_ROW) || l >= seq_len) return;
  const u32 col = cvec * VEC;
  const u32 b_begin = blockIdx.z * batches_per_chunk;
  const u32 b_end = min(batch, b_begin + batches_per_chunk);
  float position_sum[VEC] = {};
  for (u32 b = b_begin; b < b_end; b++) {
    const u32 row = b * seq_len + l;
    const size_t i = (size_t)row * H + col;
    const int token = tokens[row] - vocab_start;
    const Vec<T, VEC> g = load_vec<T, VEC>(d_out + i);
    const Vec<unsigned char, VEC> m = load_vec<unsigned char, VEC>(mask + i);
    float d[VEC];
    #pragma unroll
    for (int k = 0; k < VEC; k++) {
      d[k] = m.v[k] ? to_float(g.v[k]) * keep_scale : 0.f;
      position_sum[k] += d[k];
    }
    // An id outside the table's rows contributes nothing (the forward made its row NaN, or, with a
    // split vocabulary, another rank's table holds it).
    if ((u32)token < vocab) atomic_add_vec<VEC>(d_token_table + (size_t)token * H + col, d, scale);
  }
  if (HAS_POSITIONS) atomic_add_vec<VEC>(d_position_table + (size_t)(position_offset + l) * H + col, position_sum, 1.f);
}
`;
  return { name, source };
}

export function backwardBlockShape(vectorsPerRow: number): { tx: number; ty: number } {
  const { tx } = rowTileShape(vectorsPerRow, false);
  return { tx, ty: BACKWARD_BLOCK_THREADS / tx };
}

export interface EmbeddingBackwardGrid {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number];
  readonly batchesPerChunk: number;
}

/** Splits the batch over blockIdx.z only as far as it takes to give the GPU about two waves of threads. */
export function planEmbeddingBackward(c: OpCheck, batch: number, seqLen: number, vectorsPerRow: number, multiProcessorCount: number): EmbeddingBackwardGrid {
  const { tx, ty } = backwardBlockShape(vectorsPerRow);
  const columnChunks = Math.ceil(vectorsPerRow / tx);
  const positionBlocks = Math.ceil(seqLen / ty);
  if (positionBlocks > MAX_GRID_YZ) c.fail(`L = ${seqLen} needs ${positionBlocks} position blocks, more than the grid allows (${MAX_GRID_YZ})`);
  const threadsPerChunk = columnChunks * tx * positionBlocks * ty;
  const wanted = Math.ceil((multiProcessorCount * BACKWARD_THREADS_PER_SM) / threadsPerChunk);
  const chunks = Math.max(1, Math.min(batch, wanted, MAX_GRID_YZ));
  const batchesPerChunk = Math.max(1, Math.ceil(batch / chunks));
  return { grid: [columnChunks, positionBlocks, Math.ceil(batch / batchesPerChunk)], block: [tx, ty], batchesPerChunk };
}

export function embeddingBackward(host: KernelHost, args: EmbeddingBackwardArgs): void {
  const c = new OpCheck('embeddingBackward', 'cuda');
  const { tokens, dOut, mask, dTokenTable, dPositionTable, ...shapes } = checkEmbeddingBackward(c, args);
  const dtype = dOut.dtype as FloatDType;
  const tableDtype = dTokenTable.dtype as FloatDType;
  if (dPositionTable && dPositionTable.dtype !== tableDtype) c.fail(`'dPositionTable' is ${dPositionTable.dtype} but 'dTokenTable' is ${tableDtype}: the CUDA kernel takes both tables in one dtype`);
  const s = byteSize(dtype), st = byteSize(tableDtype);
  const ptrs = {
    tokens: devicePtr(c, 'tokens', tokens), dOut: devicePtr(c, 'dOut', dOut), mask: devicePtr(c, 'mask', mask),
    dTokenTable: devicePtr(c, 'dTokenTable', dTokenTable), dPositionTable: dPositionTable ? devicePtr(c, 'dPositionTable', dPositionTable) : 0n,
  };
  const { hidden, batch, seqLen } = shapes;
  if (hidden === 0 || batch === 0 || seqLen === 0) return;
  const accesses: Access[] = [
    { ptr: ptrs.dOut, elementBytes: s }, { ptr: ptrs.mask, elementBytes: 1 }, { ptr: ptrs.dTokenTable, elementBytes: st },
    ...(dPositionTable ? [{ ptr: ptrs.dPositionTable, elementBytes: st }] : []),
  ];
  const spec: EmbeddingBackwardSpec = { dtype, tableDtype, hidden, vec: pickVectorWidth(maxVectorElements(dtype), accesses, hidden), hasPositions: dPositionTable !== undefined };
  const plan = planEmbeddingBackward(c, batch, seqLen, hidden / spec.vec, host.multiProcessorCount);
  host.kernel(embeddingBackwardKey(spec), () => embeddingBackwardSource(spec)).launch({ grid: plan.grid, block: plan.block }, [
    arg.ptr(ptrs.tokens), arg.ptr(ptrs.dOut), arg.ptr(ptrs.mask), arg.ptr(ptrs.dTokenTable), arg.ptr(ptrs.dPositionTable),
    arg.u32(batch), arg.u32(seqLen), arg.u32(shapes.vocab), arg.i32(shapes.vocabStart ?? 0), arg.u32(shapes.positionOffset), arg.u32(plan.batchesPerChunk),
    arg.f32(shapes.scale), arg.f32(1 / (1 - args.p)),
  ]);
}

// ==== catalog ===================================================================================================

/** Each dtype with and without positions and dropout, plus the narrow-vector atomic paths. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    const vec = maxVectorElements(dtype);
    for (const hasPositions of [true, false]) {
      for (const hasDropout of [true, false]) out.push(embeddingForwardSource({ dtype, hidden: 768, vec, hasPositions, hasDropout }));
      out.push(embeddingBackwardSource({ dtype, tableDtype: dtype, hidden: 768, vec, hasPositions }));
      if (dtype !== 'f32') out.push(embeddingBackwardSource({ dtype, tableDtype: 'f32', hidden: 768, vec, hasPositions }));
    }
    // half2 / bfloat162 / float2 atomics, then scalar atomics.
    out.push(embeddingBackwardSource({ dtype, tableDtype: dtype, hidden: 770, vec: 2, hasPositions: true }));
    out.push(embeddingBackwardSource({ dtype, tableDtype: dtype, hidden: 771, vec: 1, hasPositions: true }));
  }
  out.push(embeddingForwardSource({ dtype: 'bf16', hidden: 771, vec: 1, hasPositions: true, hasDropout: true }));
  // A split vocabulary (vocab-parallel embedding): ids outside the shard add a zero row.
  for (const hasPositions of [true, false]) out.push(embeddingForwardSource({ dtype: 'bf16', hidden: 768, vec: 8, hasPositions, hasDropout: false, masked: true }));
  out.push(embeddingForwardSource({ dtype: 'f32', hidden: 64, vec: 4, hasPositions: true, hasDropout: true, masked: true }));
  return out;
}
