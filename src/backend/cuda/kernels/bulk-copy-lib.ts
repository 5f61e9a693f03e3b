// Device code for bulk copies from global into shared memory (the TMA unit's cp.async.bulk), completed on
// mbarriers: a producer sets how many bytes a barrier's phase expects, the copies count them off, and a
// consumer waits on the phase's parity. Used by the decode megakernel (decode-layers.ts) and the
// streaming INT4 GEMV (gemv-int4-stream.ts). The including kernel defines BARRIER_TIMEOUT_NS (a wait that
// long traps, an error rather than a hang) and smem_u32 (SMEM_ADDRESS_CODE, or MMA_LIB's).

/** The shared-state-space address of a shared-memory pointer. */
export const SMEM_ADDRESS_CODE = '__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }';

export const BULK_COPY_LIB = String.raw`__device__ __forceinline__ void mbar_init(u64* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(bar)) : "memory");
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
