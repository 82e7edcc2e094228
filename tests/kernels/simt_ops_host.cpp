// Kernels that exercise simt_host.h's warp operations, atomics and barriers, behind C entry
// points for ctypes (test_simt_host.py checks their results against CUDA's semantics).
#include <cstdio>
#include <exception>

#include "simt_host.h"

namespace {

constexpr int kThreads = 64;  // two warps

// out[k * kThreads + t]: each operation's result in thread t.
__global__ void warp_ops_kernel(int* out, unsigned* counter) {
  const int t = threadIdx.x, lane = t & 31;
  const int v = lane * 3 + t / 32 * 1000;
  int k = 0;
  out[k++ * kThreads + t] = __shfl_up_sync(0xffffffffu, v, 1);
  out[k++ * kThreads + t] = __shfl_down_sync(0xffffffffu, v, 2);
  out[k++ * kThreads + t] = __shfl_xor_sync(0xffffffffu, v, 5);
  out[k++ * kThreads + t] = __shfl_sync(0xffffffffu, v, 7);
  out[k++ * kThreads + t] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[k++ * kThreads + t] = static_cast<int>(__reduce_min_sync(0xffffffffu, 100u - lane));
  out[k++ * kThreads + t] = static_cast<int>(__reduce_add_sync(0xffffffffu, unsigned(lane)));
  out[k++ * kThreads + t] = __all_sync(0xffffffffu, lane < 40) + 2 * __any_sync(0xffffffffu, lane == 31);
  // Warp 0 reduces what every thread wrote while the other warp waits at the barrier.
  __shared__ int partial[kThreads];
  partial[t] = t;
  __syncthreads();
  if (t < 32) {
    const int sum = static_cast<int>(__reduce_add_sync(0xffffffffu, unsigned(partial[t] + partial[t + 32])));
    if (t == 0) partial[0] = sum;
  }
  __syncthreads();
  out[k++ * kThreads + t] = partial[0];
  out[k++ * kThreads + t] = static_cast<int>(atomicAdd(counter, 1u));
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x != 3) out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);  // lane 3 skips it
}

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 40) return;  // never reaches the barrier the others wait at
  __syncthreads();
  out[threadIdx.x] = 1;
}

template <class F>
int run(F kernel) {
  try {
    run_grid(dim3{2, 1, 1}, kThreads, kernel);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simt: %s\n", e.what());
    return 2;
  }
}

}  // namespace

extern "C" int simt_warp_ops(int* out, unsigned* counter) { return run([=] { warp_ops_kernel(out, counter); }); }
extern "C" int simt_divergent(int* out) { return run([=] { divergent_kernel(out); }); }
extern "C" int simt_early_exit(int* out) { return run([=] { early_exit_kernel(out); }); }
