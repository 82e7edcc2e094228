// Plain-C++ view of the paged decode kernels (CUDA: paged_decode.cu, CPU:
// paged_decode_cpu.cpp), so the pybind11 binding compiles without CUDA headers.  Pointers
// are addresses on the kernel's device; strides are in elements.
#pragma once

#include <cstdint>

namespace zllm {

enum class KvDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct PagedDecodeArgs {
  const void* q;  // [batch, num_heads, head_dim]
  const void* k_cache;  // [num_blocks, page_size, num_kv_heads, head_dim]
  const void* v_cache;
  const int32_t* block_tables;  // [batch, table_stride]
  const int32_t* seq_lens;      // [batch]
  void* out;                    // like q
  float* part_acc;  // [batch * num_heads * num_splits, head_dim] when num_splits > 1
  float* part_ml;   // [batch * num_heads * num_splits, 2]: running max, running sum
  KvDtype dtype;
  int batch, num_heads, num_kv_heads, head_dim, page_size;
  int split_len, num_splits;
  float scale_log2;  // softmax scale * log2(e)
  int64_t q_stride_seq, q_stride_head;
  int64_t k_stride_block, k_stride_slot, k_stride_head;
  int64_t v_stride_block, v_stride_slot, v_stride_head;
  int64_t table_stride, out_stride_seq, out_stride_head;
};

// Enqueues the decode on `stream` (a cudaStream_t); returns nullptr or a CUDA error message.
const char* paged_decode_cuda(const PagedDecodeArgs& args, std::uintptr_t stream);

// Runs the decode on the calling thread and up to num_threads - 1 more (float32 caches; the
// split fields are unused); returns nullptr or why the arguments are refused.
const char* paged_decode_cpu(const PagedDecodeArgs& args, int num_threads);

}  // namespace zllm
