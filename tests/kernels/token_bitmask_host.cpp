// The CUDA token bitmask kernel (csrc/token_bitmask_kernels.cuh) built for the host over the
// SIMT stand-ins of simt_host.h, behind a C entry point for ctypes.
#include <cstdio>
#include <exception>

#include "simt_host.h"
#include "token_bitmask_kernels.cuh"

namespace {

struct HostLauncher {
  const zllm::TokenBitmaskArgs& a;

  template <typename Bits>
  int run(Bits neg_inf) const {
    using namespace zllm::bitmask_kernels;
    run_grid(grid(a), kThreads, [this, neg_inf] { apply_token_bitmask_kernel<Bits>(a, neg_inf); });
    return 0;
  }
};

}  // namespace

// 0 on success, 1 for an unknown dtype, 2 for a SIMT violation.
extern "C" int host_apply_token_bitmask(const zllm::TokenBitmaskArgs* a) {
  try {
    return zllm::bitmask_kernels::dispatch(*a, HostLauncher{*a}, 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_apply_token_bitmask: %s\n", e.what());
    return 2;
  }
}
