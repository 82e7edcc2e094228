// Launch of the CUDA token bitmask apply; the kernel is in token_bitmask_kernels.cuh.
#include <cuda_runtime.h>

#include <cstdint>

#include "token_bitmask.h"
#include "token_bitmask_kernels.cuh"

namespace zllm {
namespace {

struct CudaLauncher {
  const TokenBitmaskArgs& a;
  cudaStream_t stream;

  template <typename Bits>
  cudaError_t run(Bits neg_inf) const {
    using namespace bitmask_kernels;
    apply_token_bitmask_kernel<Bits><<<grid(a), kThreads, 0, stream>>>(a, neg_inf);
    return cudaGetLastError();
  }
};

}  // namespace

const char* apply_token_bitmask_cuda(const TokenBitmaskArgs& a, std::uintptr_t stream_handle) {
  if (a.num_masks == 0 || a.head_vocab == 0) return nullptr;  // an empty grid is a launch error
  const CudaLauncher launcher{a, reinterpret_cast<cudaStream_t>(stream_handle)};
  const cudaError_t err = bitmask_kernels::dispatch(a, launcher, cudaErrorInvalidValue);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace zllm
