// Host stand-ins for the CUDA built-ins the kernels use, so the kernel source runs on a CPU
// for tests.  Every CUDA thread of a block is a fiber; the block runs in lockstep rounds,
// each fiber advancing to its next warp operation (shuffle, ballot, reduction, __syncwarp)
// or barrier.  A warp whose lanes do not all reach the same warp operation, or a block whose
// threads do not all reach __syncthreads, is reported as an error: on a GPU that would be
// undefined behaviour, not a pass.  Warp operations take a full mask only: every live lane
// of the warp must take part.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline dim3 blockIdx, threadIdx, blockDim, gridDim;
constexpr int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one at a time

struct __half { _Float16 v; };
inline float __half2float(__half h) { return static_cast<float>(h.v); }
inline __half __float2half_rn(float f) { return {static_cast<_Float16>(f)}; }
struct __nv_bfloat16 { uint16_t bits; };
inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
template <class T> T __ldg(const T* p) { return *p; }
using std::min;

// Bit intrinsics, with CUDA's results for a zero argument.
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// Atomics: blocks run one at a time and a fiber runs until its next warp operation, so a
// plain read-modify-write is atomic here.
template <class T, class U> T atomicAdd(T* p, U v) { T old = *p; *p = static_cast<T>(old + v); return old; }
template <class T, class U> T atomicSub(T* p, U v) { T old = *p; *p = static_cast<T>(old - v); return old; }
template <class T, class U> T atomicOr(T* p, U v) { T old = *p; *p = static_cast<T>(old | v); return old; }
template <class T, class U> T atomicAnd(T* p, U v) { T old = *p; *p = static_cast<T>(old & v); return old; }
template <class T, class U> T atomicMin(T* p, U v) { T old = *p; if (static_cast<T>(v) < old) *p = static_cast<T>(v); return old; }
template <class T, class U> T atomicMax(T* p, U v) { T old = *p; if (static_cast<T>(v) > old) *p = static_cast<T>(v); return old; }
template <class T, class U> T atomicExch(T* p, U v) { T old = *p; *p = static_cast<T>(v); return old; }
template <class T, class U, class V> T atomicCAS(T* p, U compare, V v) {
  T old = *p;
  if (old == static_cast<T>(compare)) *p = static_cast<T>(v);
  return old;
}
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace simt {

enum class Wait { kNone, kShuffle, kBarrier, kDone };

// On x86-64 a fiber switch saves the callee-saved registers on the fiber's own stack and
// swaps stack pointers: a few nanoseconds, where swapcontext makes a signal-mask system call
// each way (about 0.6 us a round trip, which dominated kernels with many warp operations).
// Other architectures keep ucontext.
#if defined(__x86_64__)
#define SIMT_STACK_SWITCH 1
// Saves the caller's registers and stack pointer in *from and resumes the fiber at `to`.
__attribute__((naked, noinline)) static void switch_stack(void** /*from*/, void* /*to*/) {
  asm("pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
      "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}
#else
#define SIMT_STACK_SWITCH 0
#endif

struct Fiber {
#if SIMT_STACK_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  std::vector<char> stack;
  Wait wait = Wait::kNone;
  long shuffles = 0;  // warp operations this thread has executed: lanes must agree
};

struct Block {
  std::vector<Fiber> fibers;  // the first `threads` are the block's (the rest wait in the pool)
  int threads = 0;
#if SIMT_STACK_SWITCH
  void* scheduler = nullptr;
#else
  ucontext_t scheduler;
#endif
  std::function<void()> kernel;
  int current = 0;
  // Double-buffered: lanes read round k while writing round k + 1.  Each slot holds the
  // bits of one lane's value (at most 8 bytes).
  uint64_t exchange[2][1024];
};
inline Block* block = nullptr;

inline void yield(Wait why) {
  Fiber& f = block->fibers[block->current];
  f.wait = why;
#if SIMT_STACK_SWITCH
  switch_stack(&f.sp, block->scheduler);
#else
  swapcontext(&f.ctx, &block->scheduler);
#endif
}

inline void entry() {
  block->kernel();
  yield(Wait::kDone);
  __builtin_unreachable();  // the scheduler never resumes a finished fiber
}

// Makes the fiber start at entry() when next resumed.
inline void start(Fiber& f) {
  f.wait = Wait::kNone;
  f.shuffles = 0;
#if SIMT_STACK_SWITCH
  // The frame switch_stack pops: six registers, then entry() as the return address, above it
  // a null slot standing for entry's own return address (so entry sees a call's alignment).
  auto top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<void**>(top) - 8;
  for (int i = 0; i < 6; ++i) frame[i] = nullptr;
  frame[6] = reinterpret_cast<void*>(&entry);
  frame[7] = nullptr;
  f.sp = frame;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, entry, 0);
#endif
}

inline void resume(Block& b, int t) {
  b.current = t;
  threadIdx = {static_cast<unsigned>(t), 0, 0};
#if SIMT_STACK_SWITCH
  switch_stack(&b.scheduler, b.fibers[t].sp);
#else
  swapcontext(&b.scheduler, &b.fibers[t].ctx);
#endif
}

// Lockstep check after a round: each warp's live lanes sit at the same warp operation (a
// lane at a barrier while its warp shuffles, or one that finished, is divergence).
inline void check_round(int threads) {
  for (int t = 0; t < threads; ++t) {
    const Fiber& f = block->fibers[t];
    const Fiber& lead = block->fibers[t / 32 * 32];
    if ((f.wait == Wait::kShuffle || lead.wait == Wait::kShuffle) &&
        (f.wait != lead.wait || f.shuffles != lead.shuffles))
      throw std::runtime_error("divergent shuffle in warp " + std::to_string(t / 32));
  }
}

// Threads at a barrier wait there until every thread of the block is (then all go on); a
// barrier that some thread finished without reaching is an error.
inline bool release_barrier(int threads) {
  int waiting = 0, done = 0;
  for (int t = 0; t < threads; ++t) {
    waiting += block->fibers[t].wait == Wait::kBarrier;
    done += block->fibers[t].wait == Wait::kDone;
  }
  if (waiting == 0 || waiting + done < threads) return false;
  if (done) throw std::runtime_error("__syncthreads not reached by every thread");
  for (int t = 0; t < threads; ++t) block->fibers[t].wait = Wait::kNone;
  return true;
}

template <class T> uint64_t bits_of(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp values are at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T> T value_of(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

// One warp operation: publishes this lane's value, waits for the round, and returns the
// values of the calling lane's warp (index = lane).
inline const uint64_t* warp_round(uint64_t v) {
  Fiber& f = block->fibers[block->current];
  const int t = static_cast<int>(threadIdx.x), buf = f.shuffles++ % 2;
  block->exchange[buf][t] = v;
  yield(Wait::kShuffle);
  return &block->exchange[buf][t & ~31];
}
inline int lane() { return static_cast<int>(threadIdx.x) & 31; }
// Lanes of the calling thread's warp (the last warp of a block may be partial).
inline int warp_lanes() {
  const int first = static_cast<int>(threadIdx.x) & ~31;
  return block->threads - first < 32 ? block->threads - first : 32;
}

}  // namespace simt

inline void __syncthreads() { simt::yield(simt::Wait::kBarrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt::warp_round(0); }

template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const uint64_t* lanes = simt::warp_round(simt::bits_of(v));
  const int l = simt::lane();
  return simt::value_of<T>(lanes[(l & ~(width - 1)) + (src & (width - 1))]);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const uint64_t* lanes = simt::warp_round(simt::bits_of(v));
  const int l = simt::lane();
  return simt::value_of<T>(lanes[(l & (width - 1)) >= static_cast<int>(delta) ? l - static_cast<int>(delta) : l]);
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const uint64_t* lanes = simt::warp_round(simt::bits_of(v));
  const int l = simt::lane(), src = l + static_cast<int>(delta);
  return simt::value_of<T>(lanes[(src & ~(width - 1)) == (l & ~(width - 1)) && src < simt::warp_lanes() ? src : l]);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const uint64_t* lanes = simt::warp_round(simt::bits_of(v));
  const int l = simt::lane(), src = l ^ mask;
  return simt::value_of<T>(lanes[src < ((l & ~(width - 1)) + width) && src < simt::warp_lanes() ? src : l]);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  const uint64_t* lanes = simt::warp_round(predicate != 0);
  unsigned bits = 0;
  for (int k = 0; k < simt::warp_lanes(); ++k) bits |= static_cast<unsigned>(lanes[k] != 0) << k;
  return bits;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  const unsigned live = simt::warp_lanes() == 32 ? ~0u : (1u << simt::warp_lanes()) - 1;
  return __ballot_sync(mask, predicate) == live;
}

namespace simt {
template <class T, class Op> T warp_reduce(T v, Op op) {
  const uint64_t* lanes = warp_round(bits_of(v));
  T acc = value_of<T>(lanes[0]);
  for (int k = 1; k < warp_lanes(); ++k) acc = op(acc, value_of<T>(lanes[k]));
  return acc;
}
}  // namespace simt
inline unsigned __reduce_min_sync(unsigned, unsigned v) { return simt::warp_reduce(v, [](unsigned a, unsigned b) { return b < a ? b : a; }); }
inline int __reduce_min_sync(unsigned, int v) { return simt::warp_reduce(v, [](int a, int b) { return b < a ? b : a; }); }
inline unsigned __reduce_max_sync(unsigned, unsigned v) { return simt::warp_reduce(v, [](unsigned a, unsigned b) { return b > a ? b : a; }); }
inline int __reduce_max_sync(unsigned, int v) { return simt::warp_reduce(v, [](int a, int b) { return b > a ? b : a; }); }
inline unsigned __reduce_add_sync(unsigned, unsigned v) { return simt::warp_reduce(v, [](unsigned a, unsigned b) { return a + b; }); }
inline int __reduce_add_sync(unsigned, int v) { return simt::warp_reduce(v, [](int a, int b) { return a + b; }); }

namespace simt {
// Blocks run one at a time, so every grid shares one set of fiber stacks, kept for the
// process: fresh stacks per block, or per launch, cost page faults that dominated grids of
// many small blocks and pipelines of many small launches.
inline std::vector<Fiber>& fiber_pool(int threads) {
  static std::vector<Fiber> pool;
  if (pool.size() < static_cast<size_t>(threads)) pool.resize(threads);
  for (auto& f : pool)
    if (f.stack.empty()) f.stack.resize(1 << 16);
  return pool;
}
}  // namespace simt

// Runs `kernel` for every block of `grid` with `threads` threads each.
template <class F>
void run_grid(dim3 grid, int threads, F kernel) {
  simt::Block b;
  b.kernel = kernel;
  std::vector<simt::Fiber>& pool = simt::fiber_pool(threads);
  b.fibers.swap(pool);  // back to the pool however run_grid leaves
  b.threads = threads;
  struct Return {
    std::vector<simt::Fiber>& from;
    std::vector<simt::Fiber>& to;
    ~Return() { to.swap(from); }
  } give_back{b.fibers, pool};
  struct Current {  // clears simt::block however run_grid leaves
    explicit Current(simt::Block* b) { simt::block = b; }
    ~Current() { simt::block = nullptr; }
  } current(&b);
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        for (int t = 0; t < threads; ++t) simt::start(b.fibers[t]);
        for (;;) {
          simt::release_barrier(threads);
          bool ran = false;
          for (int t = 0; t < threads; ++t) {
            const simt::Wait w = b.fibers[t].wait;
            if (w == simt::Wait::kDone || w == simt::Wait::kBarrier) continue;
            simt::resume(b, t);
            ran = true;
          }
          if (!ran) break;  // every thread finished: release_barrier lets none wait for one that did
          simt::check_round(threads);
        }
      }
}
