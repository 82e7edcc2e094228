// Device code of the token bitmask apply (launched from token_bitmask.cu; tests also run it
// on the host over SIMT stand-ins, see tests/kernels/token_bitmask_host.cpp).
//
// One thread block per (mask row, chunk of kChunk tokens).  Consecutive threads take
// consecutive tokens, so a warp's 32 tokens share one mask word (a single broadcast load)
// and its -inf stores coalesce.  Allowed tokens are left alone: logits are never read, and
// a mostly-allowed row costs little more than its mask.
#pragma once

#include <cstdint>

#include "token_bitmask.h"

namespace zllm {
namespace bitmask_kernels {

constexpr int kThreads = 256;
constexpr int kTokensPerThread = 4;
constexpr int kChunk = kThreads * kTokensPerThread;

inline dim3 grid(const TokenBitmaskArgs& a) {
  return dim3{unsigned(a.num_masks), unsigned((a.head_vocab + kChunk - 1) / kChunk), 1u};
}

// Bits is the logits' storage word (uint32_t for fp32, uint16_t for fp16 and bf16) and
// neg_inf its -inf pattern, so one instance serves both 16-bit types.
template <typename Bits>
__global__ void __launch_bounds__(kThreads) apply_token_bitmask_kernel(TokenBitmaskArgs a, Bits neg_inf) {
  const int mask = blockIdx.x;
  int64_t row = mask;
  if (a.rows != nullptr) {
    row = a.rows_int64 ? static_cast<const int64_t*>(a.rows)[mask]
                       : static_cast<const int32_t*>(a.rows)[mask];
  }
  if (row < 0 || row >= a.num_logit_rows) return;  // refused in Python; never write outside
  const int32_t* words = a.bitmask + mask * a.bitmask_stride;
  Bits* logits = static_cast<Bits*>(a.logits) + row * a.logits_stride;
  const int first = blockIdx.y * kChunk + threadIdx.x;
#pragma unroll
  for (int i = 0; i < kTokensPerThread; ++i) {
    const int t = first + i * kThreads;
    if (t >= a.head_vocab) break;
    // Tokens past the tokenizer's vocabulary (a padded head) are never allowed.
    const bool allowed =
        t < a.vocab_size && (static_cast<uint32_t>(__ldg(words + (t >> 5))) >> (t & 31) & 1u);
    if (!allowed) logits[t] = neg_inf;
  }
}

template <class Launcher, class R>
R dispatch(const TokenBitmaskArgs& a, const Launcher& launcher, R unsupported) {
  switch (a.dtype) {
    case LogitDtype::kFloat32: return launcher.template run<uint32_t>(0xff800000u);
    case LogitDtype::kFloat16: return launcher.template run<uint16_t>(0xfc00u);
    case LogitDtype::kBFloat16: return launcher.template run<uint16_t>(0xff80u);
  }
  return unsupported;
}

}  // namespace bitmask_kernels
}  // namespace zllm
