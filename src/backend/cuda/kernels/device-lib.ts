// Device code shared by every generated kernel: fp16/bf16 conversion, 16-byte vector loads and
// stores, warp and block reductions, activations, and the Philox RNG (bit-identical to
// backend/rng.ts). Kernel sources start with DEVICE_LIB and then bake their spec in as constants.
//
// Why 16-byte vectors: a warp issuing 16-byte loads moves 512 bytes per instruction, which is what
// memory-bound kernels need to approach HBM bandwidth on Hopper; the kernels choose the element
// count per vector (4 × f32, 8 × f16/bf16) from their spec.

import type { FloatDType } from '../../../dtype.js';
import { cudaType } from '../../../dtype.js';

export const DEVICE_LIB = String.raw`
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned int u32;
typedef unsigned long long u64;

// ---- programmatic dependent launch (runtime/launch.ts) ------------------------------------------
// GRID_DEPENDENCY_WAIT: wait until the grids this one depends on have finished and their writes are
// visible; a kernel launched programmatically must run it before it reads anything they wrote (weights
// may be read before). GRID_DEPENDENCY_TRIGGER: this block's part no longer holds the next kernel back
// (it may launch once every block has triggered or exited; it still waits for this grid to finish).
// Both are no-ops in an ordinary launch, and before sm_90.
// Timeline builds (-DFUSEFORMER_TIMELINE -DFUSEFORMER_KERNEL_TAG=n; runtime/timeline.ts): block (0, 0, 0)
// stamps %globaltimer and the kernel's tag when its wait returns, i.e. when the kernels before it have
// completed — so consecutive stamps of a replayed step time each kernel on the chain as it runs, with
// its programmatic overlap kept (marker nodes would break it). fuseformer_timeline (set by the host per
// module): [0] stamps taken, [1] capacity, then (time ns, tag) pairs. GRID_DEPENDENCY_WAIT_ONE is the
// wait of a kernel in which one thread of a block waits (a producer lane): block 0's waiting thread stamps.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef FUSEFORMER_TIMELINE
__device__ unsigned long long* fuseformer_timeline = nullptr;
__device__ __forceinline__ void timeline_stamp(bool any_thread = false) {
  unsigned long long* t = fuseformer_timeline;
  if (t == nullptr || (blockIdx.x | blockIdx.y | blockIdx.z) != 0 || (!any_thread && (threadIdx.x | threadIdx.y | threadIdx.z) != 0)) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  const unsigned long long slot = atomicAdd(t, 1ull);
  if (slot < t[1]) {
    t[2 + 2 * slot] = now;
    t[3 + 2 * slot] = FUSEFORMER_KERNEL_TAG;
  }
}
#define GRID_DEPENDENCY_WAIT() do { asm volatile("griddepcontrol.wait;" ::: "memory"); timeline_stamp(); } while (0)
#define GRID_DEPENDENCY_WAIT_ONE() do { asm volatile("griddepcontrol.wait;" ::: "memory"); timeline_stamp(true); } while (0)
#else
#define GRID_DEPENDENCY_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define GRID_DEPENDENCY_WAIT_ONE() asm volatile("griddepcontrol.wait;" ::: "memory")
#endif
#define GRID_DEPENDENCY_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define GRID_DEPENDENCY_WAIT() do {} while (0)
#define GRID_DEPENDENCY_WAIT_ONE() do {} while (0)
#define GRID_DEPENDENCY_TRIGGER() do {} while (0)
#endif

// ---- conversion -------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// ---- 16-byte vectors ------------------------------------------------------------------------------
// Vec<T, N> holds N elements in one aligned register group; load_vec/store_vec compile to a single
// 16-byte (or 8/4-byte) memory instruction when sizeof(Vec) allows.
template <typename T, int N> struct __align__(sizeof(T) * N) Vec { T v[N]; };

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) { return *reinterpret_cast<const Vec<T, N>*>(p); }
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& x) { *reinterpret_cast<Vec<T, N>*>(p) = x; }

// Load N elements as floats, falling back to scalar loads for a partial tail (count < N).
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[N], int count) {
  if (count == N) {
    Vec<T, N> x = load_vec<T, N>(p);
    #pragma unroll
    for (int i = 0; i < N; i++) out[i] = to_float(x.v[i]);
  } else {
    #pragma unroll
    for (int i = 0; i < N; i++) out[i] = i < count ? to_float(p[i]) : 0.f;
  }
}
template <typename T, int N>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[N], int count) {
  if (count == N) {
    Vec<T, N> x;
    #pragma unroll
    for (int i = 0; i < N; i++) x.v[i] = from_float<T>(in[i]);
    store_vec<T, N>(p, x);
  } else {
    #pragma unroll
    for (int i = 0; i < N; i++) if (i < count) p[i] = from_float<T>(in[i]);
  }
}

// ---- reductions -------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Two sums reduced together (LayerNorm's Σx and Σx², or its backward's two row sums): one pass of
// shuffles and one barrier instead of two.
__device__ __forceinline__ float2 warp_sum2(float2 x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    x.x += __shfl_xor_sync(0xffffffffu, x.x, o);
    x.y += __shfl_xor_sync(0xffffffffu, x.y, o);
  }
  return x;
}

// Block-wide reductions; every thread gets the result. "shared" needs blockDim.x / 32 slots.
// The leading __syncthreads makes back-to-back calls that reuse "shared" safe.
__device__ __forceinline__ float block_sum(float x, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : 0.f;
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : __int_as_float(0xff800000);
  return warp_max(x);
}
__device__ __forceinline__ float2 block_sum2(float2 x, float2* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  x = warp_sum2(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : make_float2(0.f, 0.f);
  return warp_sum2(x);
}

// exp2 as the single SFU instruction (ex2.approx.ftz: relative error about 2^-22; results below
// 2^-126 flush to 0, exp2_fast(-inf) = 0). exp2f wraps the same instruction in range handling that
// softmax-style sums do not need, and costs several instructions per element.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax state (m, s): running maximum m and s = Σ exp2(v − m) over the values seen (base 2:
// callers scale by log2(e) first). Merging rescales both sides to the larger maximum; an empty side
// (m = −inf, s = 0) adds nothing, and two empty sides stay empty instead of making NaN from −inf − −inf.
// Merge order does not change the bits (a + b == b + a), so every lane ends with the same state.
__device__ __forceinline__ float2 max_sum_merge(float2 a, float2 b) {
  const float m = fmaxf(a.x, b.x);
  if (m == __int_as_float(0xff800000)) return a;
  return make_float2(m, a.y * exp2f(a.x - m) + b.y * exp2f(b.x - m));
}
__device__ __forceinline__ float2 warp_max_sum(float2 x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, x.x, o), __shfl_xor_sync(0xffffffffu, x.y, o));
    x = max_sum_merge(x, other);
  }
  return x;
}
__device__ __forceinline__ float2 block_max_sum(float2 x, float2* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  x = warp_max_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : make_float2(__int_as_float(0xff800000), 0.f);
  return warp_max_sum(x);
}

// ---- activations --------------------------------------------------------------------------------------
__device__ __forceinline__ float relu_f(float x) { return fmaxf(x, 0.f); }
__device__ __forceinline__ float relu_grad(float x) { return x > 0.f ? 1.f : 0.f; }
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_erf_grad(float x) {
  const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * __expf(-0.5f * x * x);
  return cdf + x * pdf;
}
// GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = 0.79788456080286536f * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
}

// ---- Philox4x32-10 (same rounds and counter mapping as backend/rng.ts) ----------------------------------
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
  #pragma unroll
  for (int round = 0; round < 10; round++) {
    const u32 lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const u32 lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u; k.y += 0xBB67AE85u;
  }
  return c;
}
// The four random words of Philox counter (offset + group) for an op called with (seed, offset).
__device__ __forceinline__ uint4 dropout_words(u64 seed, u64 offset, u64 group) {
  const u64 counter = offset + group;
  return philox4x32_10(make_uint4((u32)counter, (u32)(counter >> 32), 0u, 0u), make_uint2((u32)seed, (u32)(seed >> 32)));
}
// Dropout (rng.ts has the rule): element i is decided by counter offset + i/8, word (i%8)/2, the
// low 16 bits for even i and the high 16 bits for odd i; kept iff that uniform >= threshold
// (dropoutThreshold(p) = ceil(p·2^16) on the host). One Philox call decides 8 elements.
__device__ __forceinline__ bool dropout_keep16(u32 word, int half, u32 threshold) {
  return (half ? word >> 16 : word & 0xffffu) >= threshold;
}
__device__ __forceinline__ u32 word_at(uint4 w, int i) { return i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w; }

// Keep flags for the N consecutive elements starting at element "first" (N a power of two, first a
// multiple of N). N >= 8 consumes Philox counters first/8 .. first/8 + N/8 - 1 whole; N < 8 takes
// the N uniforms it needs from one counter (narrow vectors, e.g. f32's 4, redraw the same counter:
// correct, just more arithmetic).
template <int N>
__device__ __forceinline__ void dropout_keep_vec(u64 seed, u64 offset, u64 first, u32 threshold, bool (&keep)[N]) {
  if constexpr (N >= 8) {
    #pragma unroll
    for (int g = 0; g < N / 8; g++) {
      const uint4 w = dropout_words(seed, offset, (first >> 3) + g);
      #pragma unroll
      for (int j = 0; j < 8; j++) keep[8 * g + j] = dropout_keep16(word_at(w, j >> 1), j & 1, threshold);
    }
  } else {
    const uint4 w = dropout_words(seed, offset, first >> 3);
    const int lane = (int)(first & 7);
    #pragma unroll
    for (int i = 0; i < N; i++) keep[i] = dropout_keep16(word_at(w, (lane + i) >> 1), (lane + i) & 1, threshold);
  }
}
// Dropout masks are u8 (1 = kept); N mask bytes move in one N-byte access (the pointer must be
// N-aligned, which the launchers' vector-width choice guarantees).
template <int N>
__device__ __forceinline__ void store_mask(unsigned char* p, const bool (&keep)[N]) {
  Vec<unsigned char, N> m;
  #pragma unroll
  for (int i = 0; i < N; i++) m.v[i] = keep[i] ? 1 : 0;
  store_vec<unsigned char, N>(p, m);
}
template <int N>
__device__ __forceinline__ void store_mask_all_kept(unsigned char* p) {
  Vec<unsigned char, N> m;
  #pragma unroll
  for (int i = 0; i < N; i++) m.v[i] = 1;
  store_vec<unsigned char, N>(p, m);
}
`;

/** Elements per 16-byte vector for a float dtype: 4 for f32, 8 for f16/bf16. */
export function vectorWidth(dtype: FloatDType): number {
  return dtype === 'f32' ? 4 : 8;
}

/** `typedef <cuda type> <alias>;` so kernel bodies can be written once over T. */
export function typedefLine(alias: string, dtype: FloatDType): string {
  return `typedef ${cudaType(dtype)} ${alias};`;
}

// Thread-block cluster primitives (sm_90 PTX): a barrier over the cluster, this block's rank in it,
// and a load from another block's shared memory at the address of `p` in this one (decode attention's
// and the skinny GEMM's split-K combines).
export const CLUSTER_LIB = String.raw`__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_load_u32(const unsigned* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
`;
