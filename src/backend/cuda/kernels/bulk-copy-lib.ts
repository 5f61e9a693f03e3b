// Device code for bulk copies from global into shared memory (the TMA unit's cp.async.bulk), completed on
// mbarriers: a producer sets how many bytes a barrier's phase expects, the copies count them off, and a
// consumer waits on the phase's parity. Used by the streamed GEMM (gemm-stream.ts). The including kernel
// defines BARRIER_TIMEOUT_NS (a wait that long traps, an error rather than a hang) and smem_u32
// (SMEM_ADDRESS_CODE, or MMA_LIB's).

/** The shared-state-space address of a shared-memory pointer. */
export const SMEM_ADDRESS_CODE = '__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }';

export const BULK_COPY_LIB = String.raw`__device__ __forceinline__ void mbar_init(u64* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(bar)) : "memory");
}
// A barrier whose phase completes after "count" arrivals (and the bytes expected of it).
__device__ __forceinline__ void mbar_init_count(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u64* bar, u32 parity) {
  u32 done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}
__device__ __forceinline__ u64 global_timer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Waits for the phase of this parity to complete; 2 s without it traps (an error, not a hang).
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return;
  const u64 start = global_timer();
  while (!mbar_try_wait(bar, parity)) if (global_timer() - start > BARRIER_TIMEOUT_NS) __trap();
}
`;

/**
 * 2-D tensor-map copies (cp.async.bulk.tensor): the kernel takes a CUtensorMap by value
 * (`const __grid_constant__ TensorMap`, encoded by the runtime at launch: kernel.ts arg.tensorMap)
 * and copies one box of it per instruction into shared memory, its bytes counted off an mbarrier.
 * Include after BULK_COPY_LIB.
 */
export const TENSOR_MAP_LIB = String.raw`struct __align__(64) TensorMap { unsigned long long opaque[16]; };
// The box at (column c0, row c1) of the map into shared memory (128-byte aligned), its bytes counted off the barrier.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, u64* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
`;
