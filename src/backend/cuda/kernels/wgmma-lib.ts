// Building blocks for Hopper's warpgroup MMA (sm_90a; kernels that use them set archSpecific): the
// 128-byte-swizzled shared layout wgmma reads, tiles copied into it by cp.async, matrix descriptors,
// the fence / commit / wait protocol, and generated wgmma wrappers (one asm operand per accumulator).
// Kernels include WGMMA_LIB after DEVICE_LIB and MMA_LIB (smem_u32, cp_async_16, pack2) and a typedef T.
//
// Layout. A tile of R rows × C columns (C a multiple of 64 16-bit elements) is stored as C/64 column
// blocks [C/64][R][64]: row r of a block is 128 bytes and its 16-byte chunk c sits at (c ^ r) mod 8, the
// hardware's 128-byte swizzle (address bits 4–6 XOR bits 7–9), so every block must start 1024-byte
// aligned. The same tile is read two ways:
//   K-major  rows = M or N, columns = K (Q, K, V, dO as the operand whose contiguous dimension is the
//            reduction): a k-step of 16 columns is a 32-byte advance of the start address inside a
//            block, the next 64 columns the next block; LBO unused (16), SBO = 1024 (8 rows).
//   MN-major rows = K, columns = N (V in P·V, dO in Pᵀ·dO, Q in dSᵀ·Q, K in dS·K, imm-trans = 1): a
//            k-step of 16 rows is a 2048-byte advance; LBO = the distance between column blocks
//            (R·128 bytes), SBO = 1024 (8 rows).
// Accumulators of wgmma.m64nN (f32, PTX ISA "Register Fragments"): warp w of the warpgroup owns rows
// 16w .. 16w + 15 and lane 4g + t holds, in registers 4n .. 4n + 3, row g columns 8n + 2t, +1 and row
// g + 8 the same columns — mma.sync's m16n8 layout, repeated across N. So two adjacent n-tiles packed
// to 16 bits are the A fragment (from registers) of the next wgmma along that dimension.
//
// Protocol. wgmma_fence before issuing (registers written by ordinary instructions become visible to
// the async unit), wgmma_commit to close a group, wgmma_wait<N> until at most N groups are pending.
// The compiler thinks a wgmma's registers are written when it is issued, so hold() them after the wait
// that completes it (and A fragments stay alive until then), and before the fence (so no ordinary
// instruction that defines them sinks past it: ptxas would then serialize the wgmma). Shared memory
// written by cp.async is made visible to wgmma by fence_proxy_async before the barrier.

export const WGMMA_LIB = String.raw`
// ---- 128-byte swizzled tiles ----------------------------------------------------------------------------
// Byte offset of 16-byte chunk c (of C/8) of row r in a tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ u32 sw128_offset(int r, int c) {
  return (u32)((((c >> 3) * ROWS + r) << 7) + ((((c & 7) ^ (r & 7))) << 4));
}
// Rows [row0, row0 + ROWS) of a [len, COLS] matrix (row stride "stride" elements) by cp.async, 16 bytes a
// thread a step over NTHREADS threads (thread index "tid"); rows past len are zero-filled (src-size 0).
template <int ROWS, int COLS, int NTHREADS>
__device__ __forceinline__ void load_sw128(u32 dst, const T* __restrict__ src, int row0, int len, int stride, int tid) {
  constexpr int CPR = COLS / 8, CHUNKS = ROWS * CPR;
  #pragma unroll
  for (int step = 0; step < (CHUNKS + NTHREADS - 1) / NTHREADS; step++) {
    const int idx = step * NTHREADS + tid;
    if (CHUNKS % NTHREADS != 0 && idx >= CHUNKS) break;
    const int r = idx / CPR, c = idx - r * CPR;
    const bool inside = row0 + r < len;
    cp_async_16(dst + sw128_offset<ROWS>(r, c), src + (long long)(inside ? row0 + r : 0) * stride + c * 8, inside);
  }
}

// ---- descriptors and the wgmma protocol --------------------------------------------------------------------
// Start address (bits 0-13), leading byte offset (16-29), stride byte offset (32-45) = 1024, swizzle
// mode 1 = 128 bytes (62-63); addresses and offsets in 16-byte units.
__device__ __forceinline__ u64 sw128_desc(u32 addr, u32 leading_bytes) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((leading_bytes & 0x3FFFF) >> 4) << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
// A K-major operand's k-step ks (16 columns) in a tile of ROWS rows starting at "tile".
template <int ROWS>
__device__ __forceinline__ u64 k_major_desc(u32 tile, int ks) {
  return sw128_desc(tile + (u32)(ks >> 2) * (ROWS * 128u) + (u32)(ks & 3) * 32u, 16);
}
// An MN-major operand's k-step kk (16 rows) in a tile of ROWS rows starting at "tile".
template <int ROWS>
__device__ __forceinline__ u64 mn_major_desc(u32 tile, int kk) {
  return sw128_desc(tile + (u32)kk * 2048u, ROWS * 128u);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
template <int N> __device__ __forceinline__ void hold(float (&x)[N]) {
  #pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(x[i]) :: "memory");
}
template <int N> __device__ __forceinline__ void hold(u32 (&x)[N][4]) {
  #pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+r"(x[i][0]), "+r"(x[i][1]), "+r"(x[i][2]), "+r"(x[i][3]) :: "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// The A fragment of k-step kk from accumulators (n-tiles 2kk and 2kk + 1), packed to T pairs.
template <int N>
__device__ __forceinline__ void accumulators_to_fragment(u32 (&a)[4], const float (&acc)[N], int kk) {
  a[0] = pack2<T>(acc[8 * kk + 0], acc[8 * kk + 1]);
  a[1] = pack2<T>(acc[8 * kk + 2], acc[8 * kk + 3]);
  a[2] = pack2<T>(acc[8 * kk + 4], acc[8 * kk + 5]);
  a[3] = pack2<T>(acc[8 * kk + 6], acc[8 * kk + 7]);
}
`;

function operandList(first: number, count: number): string {
  return Array.from({ length: count }, (_, i) => `%${first + i}`).join(', ');
}

function accumulatorBindings(count: number): string {
  return Array.from({ length: count }, (_, i) => `"+f"(d[${i}])`).join(', ');
}

/** The PTX type of a 16-bit kernel dtype. */
export function wgmmaType(dtype: 'bf16' | 'f16'): string {
  return dtype === 'bf16' ? 'bf16' : 'f16';
}

/**
 * wgmma_ss_n<n>(d, desc_a, desc_b, accumulate): d (64 × n, f32) = A·B (+ d when accumulate), A and B
 * K-major in shared memory (descriptors).
 */
export function wgmmaSharedShared(n: number, ptxType: string): string {
  const regs = n / 2;
  return `__device__ __forceinline__ void wgmma_ss_n${n}(float (&d)[${regs}], u64 desc_a, u64 desc_b, int accumulate) {
  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %${regs + 2}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n${n}k16.f32.${ptxType}.${ptxType} {${operandList(0, regs)}}, %${regs}, %${regs + 1}, p, 1, 1, 0, 0;\\n}\\n"
    : ${accumulatorBindings(regs)}
    : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}`;
}

/** wgmma_rs_n<n>(d, a, desc_b): d (64 × n, f32) += A·B, A from registers (four 16-bit pairs), B MN-major in shared memory. */
export function wgmmaRegisterShared(n: number, ptxType: string): string {
  const regs = n / 2;
  return `__device__ __forceinline__ void wgmma_rs_n${n}(float (&d)[${regs}], const u32 (&a)[4], u64 desc_b) {
  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %${regs + 5}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n${n}k16.f32.${ptxType}.${ptxType} {${operandList(0, regs)}}, {%${regs}, %${regs + 1}, %${regs + 2}, %${regs + 3}}, %${regs + 4}, p, 1, 1, 1;\\n}\\n"
    : ${accumulatorBindings(regs)}
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}`;
}

/** The wrappers a kernel needs, each width once. */
export function wgmmaWrappers(ptxType: string, sharedShared: readonly number[], registerShared: readonly number[]): string {
  return [...new Set(sharedShared)].map((n) => wgmmaSharedShared(n, ptxType))
    .concat([...new Set(registerShared)].map((n) => wgmmaRegisterShared(n, ptxType))).join('\n');
}
