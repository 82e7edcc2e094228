// Plain-C++ view of the CPU paged prefill kernel (paged_prefill_cpu.cpp): variable-length
// chunks, each attending to its sequence's cached blocks and causally to itself.
#pragma once

#include <cstdint>

#include "paged_decode.h"

namespace zllm {

struct PagedPrefillArgs {
  // batch is the number of sequences; q and out rows are tokens ([num_tokens, heads, dim]),
  // so q_stride_seq and out_stride_seq are a token's strides.  split fields are unused.
  PagedDecodeArgs paged;
  const int32_t* query_start_loc;  // [batch + 1]: sequence s owns token rows [qsl[s], qsl[s + 1])
  int num_tokens;                  // rows of q and out
};

// Runs on the calling thread and up to num_threads - 1 more (float32 caches); returns
// nullptr or why the arguments are refused.  The bits of every row are independent of
// num_threads and of which other chunks share the call.
const char* paged_prefill_cpu(const PagedPrefillArgs& args, int num_threads);

}  // namespace zllm
