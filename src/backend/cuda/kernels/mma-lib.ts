// Tensor-core building blocks for sm_80+ kernels (the FlashAttention forward and backward): warp-wide
// mma.sync m16n8k16 with f32 accumulators, ldmatrix fragment loads from shared memory, cp.async
// global→shared copies, an XOR-swizzled shared layout, and f32→f16/bf16 pair packing. Kernels include
// MMA_LIB after DEVICE_LIB (which has exp2_fast: ex2.approx.ftz.f32, one SFU instruction).
//
// Fragment layouts of mma.sync.aligned.m16n8k16.row.col (PTX ISA "Matrix fragments for mma.m16n8k16"),
// for lane = 4·g + t (g = lane >> 2 in 0..7, t = lane & 3). Each u32 register holds two 16-bit
// elements, the lower column (or k) index in the low half:
//   A (16×16, row-major, M×K)   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//                               a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B (16×8,  K×N, "col")       b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
//   C/D (16×8, f32)             c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// So the accumulators of two n-adjacent 16×8 tiles C0, C1, packed pairwise to 16 bits, are exactly the
// A fragment of the 16×16 matrix [C0 C1]: a = {pack(C0[0],C0[1]), pack(C0[2],C0[3]), pack(C1[0],C1[1]),
// pack(C1[2],C1[3])} (FlashAttention feeds P = softmax(S) to P·V this way, without shared memory).
//
// ldmatrix (.x1/.x2/.x4 = 1/2/4 matrices of 8×8 16-bit elements, one 16-byte row each): lanes
// 8i..8i+7 give the shared addresses of rows 0..7 of matrix i (for .x2 lanes 0..15, the other lanes'
// addresses are ignored but must be valid); register i of lane 4g + t then holds row g, columns
// 2t, 2t+1 of matrix i — or with .trans, column g, rows 2t, 2t+1 (the transposed fragment).
//   A from a row-major [rows][k] tile: .x4 with lane l addressing row (l & 15), k-column 8·(l >> 4).
//   B from a row-major [n][k] tile (Kᵀ in Q·Kᵀ: B[k][n] = K[n][k]): plain ldmatrix; .x4 with lane l
//     addressing row n0 + (l & 7) + 8·(l >> 4), k-column k0 + 8·((l >> 3) & 1) gives b0, b1 of n-tile
//     n0 in r[0], r[1] and of n-tile n0 + 8 in r[2], r[3].
//   B from a row-major [k][n] tile (V in P·V): ldmatrix.trans; .x4 with lane l addressing row
//     k0 + (l & 7) + 8·((l >> 3) & 1), column n0 + 8·(l >> 4) gives n-tile n0 in r[0], r[1], n0 + 8 in
//     r[2], r[3].
//
// Shared layout: tiles are rows of RC 16-byte chunks (RC = 8 elements each). An ldmatrix phase reads
// the same chunk column of 8 consecutive rows, so in a plain layout whose row stride is a multiple of
// 128 bytes all 8 land in the same 4 banks (8-way conflict). swizzled_offset stores chunk c of row r at
// chunk position c ^ (r & 7) (RC a multiple of 8: the "128-byte" swizzle, within each 128-byte group)
// or c ^ ((r >> 1) & 3) (RC a multiple of 4 only, e.g. 12 chunks: the "64-byte" swizzle; two rows share
// a 128-byte bank line and the odd row sits in the other half of it). Either way any 8 consecutive
// rows at one chunk column (an ldmatrix phase, or a warp storing accumulator pairs) hit 8 distinct
// bank groups, and the XOR never moves a chunk out of its aligned group of 4 (or 8), so row r keeps
// its RC chunks (RC may exceed the chunks actually used, e.g. 12 for an 80-wide row).
//
// cp.async.cg: a 16-byte global→shared copy that bypasses L1 and registers; with src-size 0 it writes
// 16 zero bytes and reads nothing (predicated tails). commit_group closes a group of copies, wait_group
// N waits until at most N of the most recent groups are still in flight (then __syncthreads makes the
// data visible to the other warps).

export const MMA_LIB = String.raw`
// ---- shared-memory addressing -------------------------------------------------------------------------
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// Byte offset of 16-byte chunk "chunk" of row "row" in a swizzled tile of RC chunks per row.
template <int RC>
__device__ __forceinline__ u32 swizzled_offset(int row, int chunk) {
  static_assert(RC % 4 == 0, "swizzled rows are a multiple of 4 chunks (64 bytes)");
  const int c = RC % 8 == 0 ? chunk ^ (row & 7) : chunk ^ ((row >> 1) & 3);
  return (u32)((row * RC + c) * 16);
}

// ---- ldmatrix -------------------------------------------------------------------------------------------
__device__ __forceinline__ void ldsm_x4(u32 addr, u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(u32 addr, u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32 (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_trans(u32 addr, u32 (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// ---- mma.sync m16n8k16, f32 accumulate: c += a·b ------------------------------------------------------
template <typename E> __device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- cp.async --------------------------------------------------------------------------------------------
// 16 bytes from global "src" to shared address "dst"; when !pred, 16 zero bytes and no global read.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// ---- f32 pairs -> 16-bit pairs (lo in the low half, round to nearest even) -------------------------------
template <typename E> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<__nv_bfloat16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ u32 pack2<__half>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// ---- cp.async of one 4-byte word (per-row f32 values: the backward's D and lse) ---------------------------
// cp.async.ca (through L1: .cg takes only 16 bytes); when !pred, a zero word and no global read.
__device__ __forceinline__ void cp_async_4(u32 dst, const void* src, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(pred ? 4 : 0) : "memory");
}
`;
