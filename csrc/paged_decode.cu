// Launch of the CUDA paged decode; the kernels and their instance table are in
// paged_decode_kernels.cuh (which tests also run on the host, see tests/kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "paged_decode.h"
#include "paged_decode_kernels.cuh"

namespace zllm {
namespace {

struct CudaLauncher {
  const PagedDecodeArgs& a;
  cudaStream_t stream;

  template <typename T, int HEAD_DIM, int GROUP>
  cudaError_t run() const {
    using namespace decode_kernels;
    const dim3 grid(a.batch, a.num_kv_heads, a.num_splits);
    paged_decode_split_kernel<T, HEAD_DIM, GROUP><<<grid, kWarps * 32, 0, stream>>>(a);
    if (a.num_splits > 1) {
      paged_decode_merge_kernel<T><<<dim3(a.batch, a.num_heads), HEAD_DIM, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
};

}  // namespace

const char* paged_decode_cuda(const PagedDecodeArgs& a, std::uintptr_t stream_handle) {
  const CudaLauncher launcher{a, reinterpret_cast<cudaStream_t>(stream_handle)};
  const cudaError_t err = decode_kernels::dispatch(a, launcher, cudaErrorInvalidValue);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace zllm
