// The GPU tokenizer on a CUDA device (gpu_tokenize.cu): tables uploaded once, and per
// capacity bucket a workspace and a CUDA graph of the whole pipeline. Declared for every
// build; defined only where nvcc compiled csrc/*.cu (ZLLM_WITH_CUDA).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "gpu_tokenize_tables.h"

namespace zllm {
namespace gpu_tokenize {

// Where a run's results go: host memory for at least n ids and ends (ends and piece_ends
// may be null: not wanted), and texts + 1 first-token offsets.
struct CudaOutputs {
  uint32_t* ids;
  uint32_t* ends;
  uint32_t* doc_tokens;
  uint32_t* piece_ends;
};

struct CudaCounts {
  uint32_t flags = 0;  // Flag bits: nonzero means the run is void (the caller uses the CPU)
  uint32_t tokens = 0, pieces = 0, chars = 0;
};

int cuda_device_count();

class CudaTokenizer {
 public:
  explicit CudaTokenizer(const HostTables& tables);
  ~CudaTokenizer();
  CudaTokenizer(const CudaTokenizer&) = delete;
  CudaTokenizer& operator=(const CudaTokenizer&) = delete;

  // Tokenizes the batch: texts[i]'s bytes, segmented by `segs`; copies the results to `out`
  // (once, from the buffers the kernels wrote). Thread-safe: runs go one at a time.
  CudaCounts run(const std::vector<std::string_view>& texts, const Segments& segs, const CudaOutputs& out);

 private:
  struct Bucket;
  Bucket& bucket_for(const Capacity& need);

  Tables tables_{};           // device pointers
  std::vector<void*> device_allocations_;
  void* stream_ = nullptr;    // cudaStream_t
  uint32_t max_blocks_ = 0;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::unique_ptr<Bucket>> buckets_;  // by capacity
  std::mutex mu_;
};

}  // namespace gpu_tokenize
}  // namespace zllm
