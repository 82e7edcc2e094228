// Plain-C++ view of the token bitmask apply (issue 18), shared by the CPU loop
// (token_bitmask.cpp), the CUDA kernel (token_bitmask.cu) and the binding, so none of them
// needs another's headers.  Layout as in xgrammar: token t is allowed iff bit t % 32 of
// word t / 32 of its mask row is 1.  Strides are in elements.
#pragma once

#include <cstdint>

namespace zllm {

// Element width is all the apply needs: it stores -inf's bit pattern, never a float.
enum class LogitDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct TokenBitmaskArgs {
  void* logits;            // [num_logit_rows, head_vocab], element stride 1
  const int32_t* bitmask;  // [num_masks, >= ceil(vocab_size / 32)], element stride 1
  const void* rows;        // [num_masks]: the logits row of each mask row; nullptr: row i
  bool rows_int64;         // rows holds int64 (else int32)
  LogitDtype dtype;
  int num_logit_rows, num_masks, vocab_size, head_vocab;  // tokens >= vocab_size are masked
  int64_t logits_stride, bitmask_stride;
};

// Sets the fenced rows' disallowed logits to -inf, in place, on the calling thread.
void apply_token_bitmask_cpu(const TokenBitmaskArgs& args);

// Enqueues the same on `stream` (a cudaStream_t); returns nullptr or a CUDA error message.
const char* apply_token_bitmask_cuda(const TokenBitmaskArgs& args, std::uintptr_t stream);

}  // namespace zllm
