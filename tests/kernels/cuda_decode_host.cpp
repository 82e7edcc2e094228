// The CUDA paged decode kernels (csrc/paged_decode_kernels.cuh) built for the host over the
// fiber-based SIMT stand-ins of simt_host.h, behind a C entry point for ctypes.
#include <cstdio>
#include <exception>

#include "simt_host.h"
#include "paged_decode_kernels.cuh"

namespace {

struct HostLauncher {
  const zllm::PagedDecodeArgs& a;

  template <typename T, int HEAD_DIM, int GROUP>
  int run() const {
    using namespace zllm::decode_kernels;
    const dim3 grid{unsigned(a.batch), unsigned(a.num_kv_heads), unsigned(a.num_splits)};
    run_grid(grid, kWarps * 32, [this] { paged_decode_split_kernel<T, HEAD_DIM, GROUP>(a); });
    if (a.num_splits > 1) {
      const dim3 merge{unsigned(a.batch), unsigned(a.num_heads), 1};
      run_grid(merge, HEAD_DIM, [this] { paged_decode_merge_kernel<T>(a); });
    }
    return 0;
  }
};

}  // namespace

// 0 on success, 1 for a shape without a kernel instance, 2 for a SIMT violation.
extern "C" int host_paged_decode(const zllm::PagedDecodeArgs* a) {
  try {
    return zllm::decode_kernels::dispatch(*a, HostLauncher{*a}, 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_paged_decode: %s\n", e.what());
    return 2;
  }
}
