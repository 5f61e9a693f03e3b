// The kernel emulator's runtime (docs/emulator.md): fuseformer's generated CUDA C++ compiled for the host by
// g++ and run on the CPU, so a kernel's logic — indexing, reductions, the last-block hand-offs, the warp
// exchanges, the fragment layouts of mma.sync — is checked against the CPU reference where no GPU is.
//
// Every CUDA thread of a block is a fiber on one OS thread (a 64-bit stack switch, emu_switch below); a
// fiber runs until it reaches a barrier (__syncthreads, a warp exchange) and hands over to the next.
// Blocks run one after another, so __shared__ variables are function statics (poisoned when a block first
// declares them), atomics need no locks, and a kernel whose blocks wait for each other (flags, clusters)
// cannot run here. Inline PTX is translated to calls of emu_ptx_* by the source rewriter (rewrite.ts).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <sys/mman.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#ifndef __restrict__
#define __restrict__ __restrict
#endif

namespace emu {

struct Dim { unsigned x = 1, y = 1, z = 1; };
inline Dim thread_idx, block_idx, block_dim, grid_dim;

// --- fibers ------------------------------------------------------------------------------------------------
// emu_switch(from, to): saves the callee-saved registers, the SSE and x87 control words and the stack pointer
// into *from, then resumes the fiber whose stack pointer is `to` (System V x86-64).
extern "C" void emu_switch(void** from, void* to);
extern "C" void emu_fiber_start();
asm(R"(
.text
.hidden emu_switch
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.hidden emu_fiber_start
.globl emu_fiber_start
.type emu_fiber_start,@function
emu_fiber_start:
  movq %r12, %rdi
  call emu_fiber_main@PLT
  ud2
)");

enum class State { Runnable, BlockBarrier, WarpBarrier, Done };

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;
  State state = State::Runnable;
  Dim tid;
  unsigned linear = 0;
  unsigned warp_gen = 0;  // the generation of the warp barrier this fiber waits at
  unsigned long long spins = 0;  // spin_hint() calls since this fiber last passed a barrier
};

struct Warp {
  unsigned arrived = 0;     // lanes waiting at the barrier of generation `gen`
  unsigned gen = 0;
  unsigned char slots[2][32][32];  // exchanged values, double-buffered by generation parity
  unsigned long long sync_count = 0;
};

constexpr size_t STACK_BYTES = 256 * 1024;
constexpr size_t DYNAMIC_SHARED_BYTES = 232448;
constexpr unsigned char POISON = 0xff;  // NaN in f32 / f16 / bf16: a read of what nobody wrote shows

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned live = 0, at_barrier = 0, barrier_gen = 0;
  int barrier_votes[2] = {0, 0};  // the vote of each barrier, by generation parity
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  char* stacks = nullptr;
  size_t stack_count = 0;
  std::vector<void*> declared_shared;  // the __shared__ statics this block has declared (and poisoned)
  std::string error;
};

inline Block block;
alignas(1024) inline unsigned char dynamic_shared[DYNAMIC_SHARED_BYTES];
inline void* entry_target = nullptr;
inline void (*entry_call)(void*) = nullptr;

[[noreturn]] inline void fail_in_fiber(const std::string& message);

inline void release_block_barrier() {
  for (Fiber& f : block.fibers) if (f.state == State::BlockBarrier) f.state = State::Runnable;
  block.at_barrier = 0;
  block.barrier_gen++;
}

inline void yield() { emu_switch(&block.current->sp, block.scheduler_sp); }

inline unsigned lane() { return block.current->linear & 31u; }
inline Warp& warp() { return block.warps[block.current->linear >> 5]; }

/** __syncthreads: the fiber waits until every live thread of the block has arrived; votes sums its predicate. */
inline int sync_block(int vote = 0, int mode = 0) {
  Fiber* self = block.current;
  const unsigned gen = block.barrier_gen;
  int& votes = block.barrier_votes[gen & 1];
  if (block.at_barrier == 0) votes = mode == 1 ? 1 : 0;  // mode 1: AND, 2: OR, 3: count
  if (mode == 1) votes &= vote != 0;
  else if (mode == 2) votes |= vote != 0;
  else if (mode == 3) votes += vote != 0;
  self->state = State::BlockBarrier;
  self->spins = 0;
  if (++block.at_barrier == block.live) {
    release_block_barrier();
    return votes;
  }
  yield();
  return block.barrier_votes[gen & 1];
}

/** A warp barrier of the lanes in `mask`; returns the generation whose exchange slots the lanes wrote. */
inline unsigned sync_warp(unsigned mask) {
  Warp& w = warp();
  Fiber* self = block.current;
  const unsigned me = 1u << lane();
  if (!(mask & me)) fail_in_fiber("a warp exchange whose mask leaves out the calling lane");
  const unsigned gen = w.gen;
  self->warp_gen = gen;
  w.arrived |= me;
  w.sync_count++;
  self->spins = 0;
  if ((w.arrived & mask) == mask) {
    const unsigned base = block.current->linear & ~31u;
    for (unsigned l = 0; l < 32; l++) {
      if (!(mask & (1u << l)) || base + l >= block.fibers.size()) continue;
      Fiber& f = block.fibers[base + l];
      if (f.state == State::WarpBarrier) f.state = State::Runnable;
    }
    w.arrived &= ~mask;
    w.gen++;
    return gen;
  }
  self->state = State::WarpBarrier;
  yield();
  return gen;
}

template <class T> inline T exchange(unsigned mask, T value, int src_lane) {
  static_assert(sizeof(T) <= 32, "warp exchange of a value wider than 32 bytes");
  Warp& w = warp();
  const unsigned gen = w.gen;
  std::memcpy(w.slots[gen & 1][lane()], &value, sizeof(T));
  sync_warp(mask);
  T out;
  std::memcpy(&out, w.slots[gen & 1][src_lane & 31], sizeof(T));
  return out;
}

/** Every lane's `value` (by lane), after a barrier of `mask`; lanes outside the mask read as zero. */
template <class T> inline void gather(unsigned mask, const T& value, T (&all)[32]) {
  static_assert(sizeof(T) <= 32, "warp gather of a value wider than 32 bytes");
  Warp& w = warp();
  const unsigned gen = w.gen;
  std::memcpy(w.slots[gen & 1][lane()], &value, sizeof(T));
  sync_warp(mask);
  for (int l = 0; l < 32; l++) {
    if (mask & (1u << l)) std::memcpy(&all[l], w.slots[gen & 1][l], sizeof(T));
    else std::memset(&all[l], 0, sizeof(T));
  }
}

[[noreturn]] inline void fail_in_fiber(const std::string& message) {
  if (block.error.empty()) {
    char where[160];
    std::snprintf(where, sizeof where, " (block %u,%u,%u thread %u,%u,%u)", block_idx.x, block_idx.y, block_idx.z,
                  thread_idx.x, thread_idx.y, thread_idx.z);
    block.error = message + where;
  }
  block.current->state = State::Done;
  emu_switch(&block.current->sp, block.scheduler_sp);
  std::abort();  // never resumed
}

/** A __shared__ static as a block first declares it: poisoned, so a read before any write shows as NaN. */
inline void declare_shared(void* p, size_t bytes) {
  for (void* q : block.declared_shared) if (q == p) return;
  block.declared_shared.push_back(p);
  std::memset(p, POISON, bytes);
}

/**
 * A spin-wait's step (__nanosleep, an acquire load): other threads of the block run first, so one that waits
 * for a flag another thread of its block sets gets there; one that waits for another block never can (blocks
 * run one after another), and is stopped with an error after many steps instead of hanging.
 */
inline void spin_hint() {
  Fiber* self = block.current;
  if (++self->spins > 20000000ull) fail_in_fiber("a spin-wait that never ends (a block waiting for another block cannot run here: blocks run one after another)");
  if ((self->spins & 63) == 0) yield();
}

/** An instruction the emulator does not model, reached: the launch fails naming it. */
inline void unsupported(const char* what) { fail_in_fiber(what); }

inline unsigned shared_address(const void* p) {
  return (unsigned)((const unsigned char*)p - dynamic_shared);
}
inline void* shared_pointer(unsigned address) { return dynamic_shared + (int)address; }

extern "C" void emu_fiber_main(Fiber* f) {
  entry_call(entry_target);
  f->state = State::Done;
  emu_switch(&f->sp, block.scheduler_sp);
  std::abort();
}

inline void prepare_fiber(Fiber& f, char* stack_top) {
  // The first switch pops: control words, r15, r14, r13, r12 (the fiber), rbx, rbp, then returns into
  // emu_fiber_start with a 16-byte aligned stack for its call.
  uintptr_t top = (uintptr_t)stack_top & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = (void*)&emu_fiber_start;
  *--sp = nullptr;                           // rbp
  *--sp = nullptr;                           // rbx
  *--sp = (void*)&f;                         // r12
  *--sp = nullptr;                           // r13
  *--sp = nullptr;                           // r14
  *--sp = nullptr;                           // r15
  unsigned control[2] = {0x1f80u, 0x037fu};  // MXCSR and the x87 control word at their defaults
  std::memcpy(--sp, control, 8);
  f.sp = sp;
}

inline void run_block(unsigned threads) {
  Block& b = block;
  if (b.stack_count < threads) {
    if (b.stacks) munmap(b.stacks, b.stack_count * STACK_BYTES);
    b.stacks = (char*)mmap(nullptr, threads * STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b.stacks == MAP_FAILED) { b.stacks = nullptr; b.stack_count = 0; b.error = "could not map the fibers' stacks"; return; }
    b.stack_count = threads;
  }
  b.fibers.assign(threads, Fiber{});
  b.warps.assign((threads + 31) / 32, Warp{});
  b.live = threads;
  b.at_barrier = 0;
  b.barrier_gen = 0;
  b.declared_shared.clear();
  for (unsigned i = 0; i < threads; i++) {
    Fiber& f = b.fibers[i];
    f.linear = i;
    f.tid = {i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y)};
    prepare_fiber(f, b.stacks + (i + 1) * STACK_BYTES);
  }
  while (b.live > 0 && b.error.empty()) {
    bool progressed = false;
    for (Fiber& f : b.fibers) {
      if (f.state != State::Runnable) continue;
      progressed = true;
      b.current = &f;
      thread_idx = f.tid;
      emu_switch(&b.scheduler_sp, f.sp);
      if (f.state == State::Done) {
        b.live--;
        // Threads that exit no longer hold a barrier back.
        if (b.live > 0 && b.at_barrier == b.live) release_block_barrier();
      }
      if (!b.error.empty()) break;
    }
    if (!progressed && b.live > 0 && b.error.empty()) {
      unsigned at_block = 0, at_warp = 0;
      for (Fiber& f : b.fibers) at_block += f.state == State::BlockBarrier, at_warp += f.state == State::WarpBarrier;
      char message[200];
      std::snprintf(message, sizeof message, "deadlock in block %u,%u,%u: %u threads at __syncthreads, %u at a warp exchange whose lanes did not all arrive, %u live",
                    block_idx.x, block_idx.y, block_idx.z, at_block, at_warp, b.live);
      b.error = message;
    }
  }
}

template <class... A, size_t... I>
inline std::tuple<A...> unpack_args(const unsigned char* args, std::index_sequence<I...>) {
  std::tuple<A...> t;
  ((std::memcpy(&std::get<I>(t), args + 8 * I, sizeof(A))), ...);
  return t;
}

inline std::string launch_error;

/**
 * The order a grid's blocks run in (linear indices, x fastest), from FUSEFORMER_EMULATOR_BLOCK_ORDER read at each
 * launch: unset or "forward" in order, "reverse" last first, "shuffle" or "shuffle:SEED" a permutation drawn
 * from the seed (default 1) and the launch count. A kernel whose result depends on which block runs first — a
 * "last block" that is not the last, a reader of another block's output without a flag — shows it under the
 * other orders; f32 atomics then add in other orders too, so results may differ in their last bits.
 */
inline unsigned long long launches_run = 0;
inline bool block_order(unsigned n, std::vector<unsigned>& order) {
  order.resize(n);
  for (unsigned i = 0; i < n; i++) order[i] = i;
  const char* mode = std::getenv("FUSEFORMER_EMULATOR_BLOCK_ORDER");
  launches_run++;
  if (mode == nullptr || *mode == 0 || std::strcmp(mode, "forward") == 0) return true;
  if (std::strcmp(mode, "reverse") == 0) {
    for (unsigned i = 0; i < n; i++) order[i] = n - 1 - i;
    return true;
  }
  if (std::strncmp(mode, "shuffle", 7) == 0 && (mode[7] == 0 || mode[7] == ':')) {
    unsigned long long x = (mode[7] == ':' ? std::strtoull(mode + 8, nullptr, 10) : 1ull) * 0x9E3779B97F4A7C15ull + launches_run;
    for (unsigned i = n; i > 1; i--) {  // Fisher-Yates with a splitmix64 stream
      x += 0x9E3779B97F4A7C15ull;
      unsigned long long z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::swap(order[i - 1], order[z % i]);
    }
    return true;
  }
  launch_error = std::string("FUSEFORMER_EMULATOR_BLOCK_ORDER must be forward, reverse, shuffle or shuffle:SEED, got '") + mode + "'";
  return false;
}

/** Runs kernel `k` over the grid, its arguments in 8-byte slots (a pointer, an int, a float each). */
template <class... A>
const char* launch(void (*k)(A...), unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared_bytes, const unsigned char* args, int arg_count) {
  static_assert(((sizeof(A) <= 8) && ...), "a kernel argument wider than 8 bytes (a tensor map) cannot be emulated");
  launch_error.clear();
  if (arg_count != (int)sizeof...(A)) {
    launch_error = "the kernel takes " + std::to_string(sizeof...(A)) + " arguments, " + std::to_string(arg_count) + " given";
    return launch_error.c_str();
  }
  if (shared_bytes > DYNAMIC_SHARED_BYTES) { launch_error = "dynamic shared memory over 227 KiB"; return launch_error.c_str(); }
  const unsigned threads = bx * by * bz;
  if (threads == 0 || threads > 1024) { launch_error = "a block of " + std::to_string(threads) + " threads"; return launch_error.c_str(); }
  auto call = unpack_args<A...>(args, std::index_sequence_for<A...>{});
  struct Target { void (*k)(A...); std::tuple<A...>* call; } target{k, &call};
  entry_target = &target;
  entry_call = [](void* p) { auto* t = (Target*)p; std::apply(t->k, *t->call); };
  grid_dim = {gx, gy, gz};
  block_dim = {bx, by, bz};
  std::vector<unsigned> order;
  if (!block_order(gx * gy * gz, order)) return launch_error.c_str();
  for (unsigned i : order) {
    block_idx = {i % gx, i / gx % gy, i / (gx * gy)};
    std::memset(dynamic_shared, POISON, shared_bytes);
    block.error.clear();
    run_block(threads);
    if (!block.error.empty()) { launch_error = block.error; return launch_error.c_str(); }
  }
  return nullptr;
}

// --- numbers ---------------------------------------------------------------------------------------------
inline float bits_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned float_bits(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float bf16_float(unsigned short h) { return bits_float((unsigned)h << 16); }
inline unsigned short float_bf16(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  unsigned short u; std::memcpy(&u, &b, 2); return u;
}
inline float f16_float(unsigned short h) { __half x; std::memcpy(&x, &h, 2); return __half2float(x); }
inline unsigned short float_f16(float f) { __half x = __float2half_rn(f); unsigned short u; std::memcpy(&u, &x, 2); return u; }

}  // namespace emu

#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define blockDim emu::block_dim
#define gridDim emu::grid_dim
#define warpSize 32

// --- CUDA's device functions, on the host ----------------------------------------------------------------
inline void __syncthreads() { emu::sync_block(); }
inline int __syncthreads_count(int p) { return emu::sync_block(p, 3); }
inline int __syncthreads_and(int p) { return emu::sync_block(p, 1); }
inline int __syncthreads_or(int p) { return emu::sync_block(p, 2); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::sync_warp(mask); }
inline void __trap() { emu::fail_in_fiber("__trap()"); }
inline void __brkpt() { emu::fail_in_fiber("__brkpt()"); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) { emu::spin_hint(); }
inline unsigned __activemask() {
  // The lanes of this warp still running (in lockstep code: all that have not exited).
  unsigned m = 0, base = emu::block.current->linear & ~31u;
  for (unsigned l = 0; l < 32 && base + l < emu::block.fibers.size(); l++)
    if (emu::block.fibers[base + l].state != emu::State::Done) m |= 1u << l;
  return m;
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int l = (int)emu::lane();
  return emu::exchange(mask, v, (l & ~(width - 1)) + (src & (width - 1)));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  const int l = (int)emu::lane();
  const int src = l ^ m;
  return emu::exchange(mask, v, (src & ~(width - 1)) == (l & ~(width - 1)) ? src : l);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const int l = (int)emu::lane();
  const int src = l + (int)d;
  return emu::exchange(mask, v, src < (l & ~(width - 1)) + width ? src : l);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const int l = (int)emu::lane();
  const int src = l - (int)d;
  return emu::exchange(mask, v, src >= (l & ~(width - 1)) ? src : l);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  int all[32];
  emu::gather(mask, p != 0 ? 1 : 0, all);
  unsigned r = 0;
  for (int l = 0; l < 32; l++) if (all[l]) r |= 1u << l;
  return r & mask;
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == mask; }
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  unsigned all[32]; emu::gather(mask, v, all); unsigned s = 0; for (unsigned x : all) s += x; return s;
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
  unsigned all[32]; emu::gather(mask, v, all); unsigned s = 0; for (int l = 0; l < 32; l++) if (mask >> l & 1) s = all[l] > s ? all[l] : s; return s;
}
inline int __reduce_max_sync(unsigned mask, int v) {
  int all[32]; emu::gather(mask, v, all); int s = INT32_MIN; for (int l = 0; l < 32; l++) if (mask >> l & 1) s = all[l] > s ? all[l] : s; return s;
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) {
  unsigned all[32]; emu::gather(mask, v, all); unsigned s = ~0u; for (int l = 0; l < 32; l++) if (mask >> l & 1) s = all[l] < s ? all[l] : s; return s;
}
inline int __reduce_min_sync(unsigned mask, int v) {
  int all[32]; emu::gather(mask, v, all); int s = INT32_MAX; for (int l = 0; l < 32; l++) if (mask >> l & 1) s = all[l] < s ? all[l] : s; return s;
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) {
  unsigned all[32]; emu::gather(mask, v, all); unsigned s = 0; for (unsigned x : all) s |= x; return s;
}

// Atomics: one OS thread runs every fiber and switches only at barriers, so plain read-modify-writes are atomic.
template <class T> inline T __emu_atomic_add(T* p, T v) { T old = *p; *p = old + v; return old; }
inline float atomicAdd(float* p, float v) { return __emu_atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return __emu_atomic_add(p, v); }
inline int atomicAdd(int* p, int v) { return __emu_atomic_add(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __emu_atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __emu_atomic_add(p, v); }
inline int atomicSub(int* p, int v) { int old = *p; *p = old - v; return old; }
inline unsigned atomicSub(unsigned* p, unsigned v) { unsigned old = *p; *p = old - v; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }
template <class T> inline T atomicMax(T* p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <class T> inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <class T> inline T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <class T> inline T atomicAnd(T* p, T v) { T old = *p; *p = old & v; return old; }
inline unsigned atomicInc(unsigned* p, unsigned limit) { unsigned old = *p; *p = old >= limit ? 0 : old + 1; return old; }
inline __half atomicAdd(__half* p, __half v) { __half old = *p; *p = __float2half_rn(__half2float(old) + __half2float(v)); return old; }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { __nv_bfloat16 old = *p; *p = __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(v)); return old; }
inline __half2 atomicAdd(__half2* p, __half2 v) { __half2 old = *p; *p = __hadd2(old, v); return old; }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) { __nv_bfloat162 old = *p; *p = __hadd2(old, v); return old; }

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __clzll(unsigned long long x) { return x ? __builtin_clzll(x) : 64; }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __ffsll(unsigned long long x) { return __builtin_ffsll((long long)x); }
inline unsigned __brev(unsigned x) { x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1); x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2); x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4); return __builtin_bswap32(x); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x; unsigned r = 0;
  for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) { s &= 31; return s ? (hi << s) | (lo >> (32 - s)) : hi; }
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) { s &= 31; return s ? (lo >> s) | (hi << (32 - s)) : lo; }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline void sincospif(float x, float* s, float* c) { const double a = M_PI * (double)x; *s = (float)std::sin(a); *c = (float)std::cos(a); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float sinpif(float x) { return (float)std::sin(M_PI * (double)x); }
inline float cospif(float x) { return (float)std::cos(M_PI * (double)x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x / std::sqrt(2.0f)); }

inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)std::floor(x); }
inline int __float2int_ru(float x) { return (int)std::ceil(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)std::nearbyint(x); }
inline unsigned long long __float2ull_rn(float x) { return (unsigned long long)std::nearbyint(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __sad(int a, int b, unsigned c) { return (a > b ? a - b : b - a) + (int)c; }
inline long long clock64() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (long long)t.tv_sec * 1000000000ll + t.tv_nsec; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline unsigned __cvta_generic_to_shared(const void* p) { return emu::shared_address(p); }
inline void* __cvta_shared_to_generic(unsigned a) { return emu::shared_pointer(a); }
inline bool __isShared(const void* p) { return (const unsigned char*)p >= emu::dynamic_shared && (const unsigned char*)p < emu::dynamic_shared + emu::DYNAMIC_SHARED_BYTES; }
inline bool __isGlobal(const void* p) { return !__isShared(p); }
using std::min;
using std::max;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
inline float min(float a, int b) { return std::min(a, (float)b); }
inline float max(float a, int b) { return std::max(a, (float)b); }
inline long long min(long long a, int b) { return std::min(a, (long long)b); }
inline long long max(long long a, int b) { return std::max(a, (long long)b); }
inline unsigned min(unsigned a, int b) { return std::min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return std::max(a, (unsigned)b); }
inline size_t min(size_t a, int b) { return std::min(a, (size_t)b); }
inline size_t max(size_t a, int b) { return std::max(a, (size_t)b); }
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }

// --- inline PTX (rewrite.ts turns each asm statement into these) -------------------------------------------
namespace emu {
inline unsigned long long globaltimer() { return (unsigned long long)clock64(); }
template <class T> inline T load_as(unsigned long long address) { T v; std::memcpy(&v, (const void*)address, sizeof(T)); return v; }
template <class T> inline void store_as(unsigned long long address, T v) { std::memcpy((void*)address, &v, sizeof(T)); }
/** The bits of `s` into `d` (same size), or the value converted (a 16-bit register in a wider variable). */
template <class D, class S> inline void set_bits(D& d, S s) {
  if constexpr (sizeof(D) == sizeof(S)) std::memcpy(&d, &s, sizeof(S));
  else d = (D)s;
}
/** A register operand's bits as T (same size), or its value converted. */
template <class T, class S> inline T bits_as(S s) {
  if constexpr (sizeof(T) == sizeof(S) && !std::is_pointer_v<S>) { T t; std::memcpy(&t, &s, sizeof(T)); return t; }
  else return (T)s;
}
inline float ex2(float x) { return std::exp2(x); }
inline float rcp(float x) { return 1.0f / x; }
inline void red_add_f32(unsigned long long address, float v) { float* p = (float*)address; *p += v; }
inline unsigned pack_halves(unsigned short lo, unsigned short hi) { return (unsigned)lo | ((unsigned)hi << 16); }
/** cvt.rn.bf16x2.f32 d, a, b: d's upper half from a, its lower half from b. */
inline unsigned cvt_bf16x2(float a, float b) { return pack_halves(float_bf16(b), float_bf16(a)); }
inline unsigned cvt_f16x2(float a, float b) { return pack_halves(float_f16(b), float_f16(a)); }
inline void red_add_f16x2(unsigned long long address, unsigned v) {
  unsigned old = load_as<unsigned>(address);
  store_as(address, pack_halves(float_f16(f16_float(old & 0xffff) + f16_float(v & 0xffff)), float_f16(f16_float(old >> 16) + f16_float(v >> 16))));
}
inline void red_add_bf16x2(unsigned long long address, unsigned v) {
  unsigned old = load_as<unsigned>(address);
  store_as(address, pack_halves(float_bf16(bf16_float(old & 0xffff) + bf16_float(v & 0xffff)), float_bf16(bf16_float(old >> 16) + bf16_float(v >> 16))));
}
/** A packed pair op, element by element in double, rounded once (fma.rn / mul.rn .bf16x2 / .f16x2). */
template <bool BF16, class F> inline unsigned pair_op(unsigned a, unsigned b, unsigned c, F f) {
  auto in = [](unsigned short h) { return (double)(BF16 ? bf16_float(h) : f16_float(h)); };
  auto out = [](double d) { return BF16 ? float_bf16((float)d) : float_f16((float)d); };
  return pack_halves(out(f(in(a & 0xffff), in(b & 0xffff), in(c & 0xffff))), out(f(in(a >> 16), in(b >> 16), in(c >> 16))));
}
inline unsigned lop3(unsigned a, unsigned b, unsigned c, unsigned lut) {
  unsigned r = 0;
  for (int bit = 0; bit < 32; bit++) {
    const unsigned index = ((a >> bit & 1) << 2) | ((b >> bit & 1) << 1) | (c >> bit & 1);
    r |= ((lut >> index) & 1u) << bit;
  }
  return r;
}
inline int dp4a_s32(int a, int b, int c) {
  int s = c;
  for (int i = 0; i < 4; i++) s += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return s;
}
inline void cp_async(unsigned shared, unsigned long long global, int bytes, int src_bytes) {
  unsigned char* dst = (unsigned char*)shared_pointer(shared);
  const int n = src_bytes < bytes ? src_bytes : bytes;
  if (n > 0) std::memcpy(dst, (const void*)global, n);
  if (n < bytes) std::memset(dst + (n > 0 ? n : 0), 0, bytes - (n > 0 ? n : 0));
}

/**
 * ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lanes 8i..8i+7 give the row addresses of matrix i;
 * lane l receives, of each matrix, row l/4's elements 2(l%4) and 2(l%4)+1 (with .trans: column l/4's).
 */
inline void ldmatrix(unsigned address, int count, bool trans, unsigned* out) {
  unsigned all[32];
  gather(0xffffffffu, address, all);
  const unsigned l = lane();
  for (int m = 0; m < count; m++) {
    unsigned short e[2];
    for (int j = 0; j < 2; j++) {
      const unsigned row = trans ? 2 * (l % 4) + j : l / 4, col = trans ? l / 4 : 2 * (l % 4) + j;
      std::memcpy(&e[j], (const unsigned char*)shared_pointer(all[8 * m + row]) + 2 * col, 2);
    }
    out[m] = pack_halves(e[0], e[1]);
  }
}

/**
 * mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: the warp's D = A·B + C, g = lane / 4, t = lane % 4.
 * A (16 × 16) a0: (g, 2t..2t+1), a1: (g+8, 2t..), a2: (g, 2t+8..), a3: (g+8, 2t+8..); B (16 × 8) b0: rows
 * 2t..2t+1 of column g, b1: rows 2t+8..2t+9; C and D (16 × 8) c0..c1: (g, 2t..2t+1), c2..c3: (g+8, 2t..).
 */
template <bool BF16> inline void mma_m16n8k16(float* d, const unsigned* a, const unsigned* b, const float* c) {
  struct Fragments { unsigned a[4], b[2]; };
  Fragments mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
  gather(0xffffffffu, mine, all);
  auto h = [](unsigned word, int half) -> double { const unsigned short v = half ? word >> 16 : word & 0xffff; return BF16 ? bf16_float(v) : f16_float(v); };
  auto A = [&](int row, int k) { const int g = row % 8, t = (k % 8) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0); return h(all[4 * g + t].a[reg], k % 2); };
  auto B = [&](int k, int col) { const int t = (k % 8) / 2, reg = k >= 8 ? 1 : 0; return h(all[4 * col + t].b[reg], k % 2); };
  const unsigned l = lane(), g = l / 4, t = l % 4;
  float result[4];
  for (int i = 0; i < 4; i++) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i % 2);
    double s = 0;
    for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
    result[i] = (float)(s + (double)c[i]);
  }
  for (int i = 0; i < 4; i++) d[i] = result[i];
}
}  // namespace emu
