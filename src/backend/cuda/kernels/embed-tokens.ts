// embedTokens: a row gather with an optional position row per output row (a decode step's embedding;
// also picks the last prompt row of each sequence before the LM head).
//
// Math (backend.ts has the contract): out[r] = scale·tokenTable[tokens[r]] + positionTable[positions[r]].
// An id outside its table (token ∉ [0, V) or position ∉ [0, P)) makes the whole row NaN instead of a
// read outside the table, so the bug shows in the logits.
//
// Thread mapping: a block per row (grid R), its threads walking the row's H/VEC vectors (16-byte
// vectors where H and the addresses allow). The ids are read once per thread (a broadcast).
// Rows are few in decoding (one per sequence) and the table rows scattered, so this is latency-bound;
// the bytes are what a copy of the rows moves.
//
// Precision: f32 arithmetic (one FMA with the position row), stored in the tensors' dtype.
// Bytes per row (s = sizeof(dtype)): read H·s (+ H·s position row) + 4 (+ 4), write H·s.

import type { EmbedTokensArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkEmbedTokens } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface EmbedTokensSpec {
  readonly dtype: FloatDType;
  /** H, baked in. */
  readonly hidden: number;
  /** Elements per vector access; divides H. */
  readonly vec: number;
  /** A position row is added. */
  readonly positions: boolean;
}

export function embedTokensKey(s: EmbedTokensSpec): string {
  return `embed_tokens.${s.dtype}.h${s.hidden}.v${s.vec}${s.positions ? '.pos' : ''}`;
}

/** Threads a block: enough for one vector each up to 256 (H = 2048 bf16), looping beyond. */
export function embedTokensThreads(spec: EmbedTokensSpec): number {
  return Math.min(256, Math.max(32, Math.ceil(spec.hidden / spec.vec / 32) * 32));
}

export function embedTokensSource(spec: EmbedTokensSpec): KernelSource {
  const name = kernelIdentifier(embedTokensKey(spec));
  const threads = embedTokensThreads(spec);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ H: spec.hidden, VEC: spec.vec, VECS: spec.hidden / spec.vec, THREADS: threads, POSITIONS: spec.positions })}

// tokens, positions i32 [R]; table [V, H]; position_table [P, H]; out [R, H]. Grid R, block THREADS.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const int* __restrict__ tokens, const T* __restrict__ table, const int* __restrict__ positions,
    const T* __restrict__ position_table, T* __restrict__ out, int V, int P, float scale) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  const int r = blockIdx.x;
  const int id = tokens[r];
  const int p = POSITIONS ? positions[r] : 0;
  const bool bad = id < 0 || id >= V || (POSITIONS && (p < 0 || p >= P));
  const T* src = table + (size_t)(bad ? 0 : id) * H;
  const T* pos = position_table + (size_t)(bad ? 0 : p) * H;
  T* dst = out + (size_t)r * H;
  for (int k = threadIdx.x; k < VECS; k += THREADS) {
    float v[VEC];
    if (bad) {
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[i] = __int_as_float(0x7fc00000);
    } else {
      load_floats<T, VEC>(src + k * VEC, v, VEC);
      if (POSITIONS) {
        float w[VEC];
        load_floats<T, VEC>(pos + k * VEC, w, VEC);
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[i] = fmaf(scale, v[i], w[i]);
      } else {
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[i] *= scale;
      }
    }
    store_floats<T, VEC>(dst + k * VEC, v, VEC);
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export function embedTokens(host: KernelHost, args: EmbedTokensArgs): void {
  const c = new OpCheck('embedTokens', 'cuda');
  const { tokens, tokenTable, positions, positionTable, out, scale, rows, vocab, hidden, positionCount } = checkEmbedTokens(c, args);
  const ptrs = {
    tokens: devicePtr(c, 'tokens', tokens), table: devicePtr(c, 'tokenTable', tokenTable), out: devicePtr(c, 'out', out),
    positions: positions ? devicePtr(c, 'positions', positions) : 0n, positionTable: positionTable ? devicePtr(c, 'positionTable', positionTable) : 0n,
  };
  if (rows === 0 || hidden === 0) return;
  const dtype = tokenTable.dtype as FloatDType, size = byteSize(dtype);
  const accesses = [ptrs.table, ptrs.out, ...(positionTable ? [ptrs.positionTable] : [])].map((ptr) => ({ ptr, elementBytes: size }));
  const vec = pickVectorWidth(16 / size, accesses, hidden);
  const spec: EmbedTokensSpec = { dtype, hidden, vec, positions: positionTable !== undefined };
  host.kernel(embedTokensKey(spec), () => embedTokensSource(spec)).launch(
    { grid: rows, block: embedTokensThreads(spec) },
    [arg.ptr(ptrs.tokens), arg.ptr(ptrs.table), arg.ptr(ptrs.positions), arg.ptr(ptrs.positionTable), arg.ptr(ptrs.out), arg.i32(vocab), arg.i32(positionCount), arg.f32(scale)],
  );
}

/** GPT-2 (token + learned position) and Llama (token only) widths, f32, and a narrow-vector fallback. */
export function catalog(): KernelSource[] {
  return [
    embedTokensSource({ dtype: 'bf16', hidden: 768, vec: 8, positions: true }),
    embedTokensSource({ dtype: 'bf16', hidden: 2048, vec: 8, positions: false }),
    embedTokensSource({ dtype: 'f16', hidden: 4096, vec: 8, positions: false }),
    embedTokensSource({ dtype: 'f32', hidden: 768, vec: 4, positions: true }),
    embedTokensSource({ dtype: 'f32', hidden: 30, vec: 2, positions: false }),
  ];
}
