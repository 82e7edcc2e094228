// Host stand-ins for the CUDA built-ins the decode kernels use, so the kernel source runs
// on a CPU for tests.  Every CUDA thread of a block is a fiber; the block runs in lockstep
// rounds, each fiber advancing to its next shuffle or barrier.  A warp whose lanes do not
// all reach the same shuffle, or a block whose threads do not all reach __syncthreads, is
// reported as an error: on a GPU that would be undefined behaviour, not a pass.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline dim3 blockIdx, threadIdx;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
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

namespace simt {

enum class Wait { kNone, kShuffle, kBarrier, kDone };

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  Wait wait = Wait::kNone;
  long shuffles = 0;  // shuffles this thread has executed: lanes must agree
};

struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  std::function<void()> kernel;
  int current = 0;
  float exchange[2][1024];  // double-buffered: lanes read round k while writing round k + 1
};
inline Block* block = nullptr;

inline void yield(Wait why) {
  Fiber& f = block->fibers[block->current];
  f.wait = why;
  swapcontext(&f.ctx, &block->scheduler);
}

inline void entry() {
  block->kernel();
  yield(Wait::kDone);
}

// Lockstep check after a round: each warp's live lanes sit at the same shuffle, and a
// barrier holds every thread of the block.
inline void check_round(int threads) {
  bool any_barrier = false, all_barrier = true;
  for (int t = 0; t < threads; ++t) {
    const Fiber& f = block->fibers[t];
    any_barrier |= f.wait == Wait::kBarrier;
    all_barrier &= f.wait == Wait::kBarrier;
    const Fiber& lead = block->fibers[t / 32 * 32];
    if ((f.wait == Wait::kShuffle || lead.wait == Wait::kShuffle) &&
        (f.wait != lead.wait || f.shuffles != lead.shuffles))
      throw std::runtime_error("divergent shuffle in warp " + std::to_string(t / 32));
  }
  if (any_barrier && !all_barrier) throw std::runtime_error("__syncthreads not reached by every thread");
}

}  // namespace simt

inline void __syncthreads() { simt::yield(simt::Wait::kBarrier); }

inline float __shfl_xor_sync(unsigned, float v, int off) {
  auto& f = simt::block->fibers[simt::block->current];
  const int t = static_cast<int>(threadIdx.x), buf = f.shuffles++ % 2;
  simt::block->exchange[buf][t] = v;
  simt::yield(simt::Wait::kShuffle);
  return simt::block->exchange[buf][(t & ~31) | ((t & 31) ^ off)];
}

// Runs `kernel` for every block of `grid` with `threads` threads each.  Blocks run one at a
// time, so they share one set of fiber stacks (fresh stacks per block cost page faults that
// dominate grids of many small blocks).
template <class F>
void run_grid(dim3 grid, int threads, F kernel) {
  simt::Block b;
  b.kernel = kernel;
  b.fibers.resize(threads);
  for (auto& f : b.fibers) f.stack.resize(1 << 16);
  simt::block = &b;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        for (auto& f : b.fibers) {
          f.wait = simt::Wait::kNone;
          f.shuffles = 0;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.data();
          f.ctx.uc_stack.ss_size = f.stack.size();
          f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, simt::entry, 0);
        }
        for (bool live = true; live;) {
          live = false;
          for (int t = 0; t < threads; ++t) {
            if (b.fibers[t].wait == simt::Wait::kDone) continue;
            b.current = t;
            threadIdx = {static_cast<unsigned>(t), 0, 0};
            swapcontext(&b.scheduler, &b.fibers[t].ctx);
            live |= b.fibers[t].wait != simt::Wait::kDone;
          }
          simt::check_round(threads);
        }
      }
  simt::block = nullptr;
}
