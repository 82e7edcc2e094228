// The GPU tokenizer on a CUDA device: tables uploaded once; per capacity bucket a workspace,
// pinned staging for the inputs, host-mapped outputs the last kernel writes directly, and a
// CUDA graph of the whole pipeline (kernels in gpu_tokenize_kernels.cuh), so a run is a few
// input copies, one graph launch and one synchronisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "class_table.h"
#include "gpu_tokenize_cuda.h"
#include "gpu_tokenize_kernels.cuh"

namespace zllm {
namespace gpu_tokenize {

// Kernels take the workspace and the tables by value: within CUDA's 4 KB of parameters.
static_assert(sizeof(Workspace) + sizeof(Tables) + 16 <= 4096, "kernel parameters over 4 KB");

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("GPU tokenizer: ") + what + ": " + cudaGetErrorString(e));
}

struct CudaLaunch {
  cudaStream_t stream;
  uint32_t max_blocks;
  template <class... P, class... A>
  void operator()(void (*kernel)(P...), uint32_t blocks, uint32_t threads, const A&... args) const {
    kernel<<<std::max(1u, std::min(blocks, max_blocks)), threads, 0, stream>>>(args...);
  }
};

template <class T>
const T* upload(const T* host, size_t count, std::vector<void*>& owned) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc tables");
  owned.push_back(p);
  if (count) check(cudaMemcpy(p, host, count * sizeof(T), cudaMemcpyHostToDevice), "upload tables");
  return static_cast<const T*>(p);
}

uint32_t pow2_at_least(size_t n, uint32_t floor) {
  uint32_t c = floor;
  while (c < n) c <<= 1;
  return c;
}

}  // namespace

struct CudaTokenizer::Bucket {
  Workspace ws{};            // device pointers, outputs host-mapped
  void* device = nullptr;
  uint8_t* staging = nullptr;  // pinned: text, then segment bounds, tokens, text offsets
  uint8_t* mapped = nullptr;   // pinned, mapped: the outputs and the counters
  Counters* counters = nullptr;
  uint32_t *out_ids = nullptr, *out_ends = nullptr, *out_docs = nullptr, *out_pieces = nullptr;
  cudaGraphExec_t graph = nullptr;

  ~Bucket() {
    if (graph) cudaGraphExecDestroy(graph);
    if (device) cudaFree(device);
    if (staging) cudaFreeHost(staging);
    if (mapped) cudaFreeHost(mapped);
  }
};

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

CudaTokenizer::CudaTokenizer(const HostTables& h) {
  const ClassTable& ct = class_table();
  Tables t = host_view(h);
  t.row_of_block = upload(ct.row_of_block, ClassTable::kBlocks, device_allocations_);
  t.class_rows = upload(ct.rows, ct.num_rows << ClassTable::kBlockBits, device_allocations_);
  t.vocab = upload(h.vocab.data(), h.vocab.size(), device_allocations_);
  t.pairs = upload(h.pairs.data(), h.pairs.size(), device_allocations_);
  t.arena = upload(reinterpret_cast<const uint8_t*>(h.arena.data()), h.arena.size(), device_allocations_);
  t.offsets = upload(h.offsets.data(), h.offsets.size(), device_allocations_);
  t.byte_ids = upload(h.byte_ids.data(), h.byte_ids.size(), device_allocations_);
  tables_ = t;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "device attributes");
  max_blocks_ = uint32_t(sms) * 8;  // with 256 threads a block: a full SM's worth each
}

CudaTokenizer::~CudaTokenizer() {
  buckets_.clear();
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  for (void* p : device_allocations_) cudaFree(p);
}

CudaTokenizer::Bucket& CudaTokenizer::bucket_for(const Capacity& need) {
  const auto key = std::make_tuple(need.bytes, need.segments, need.docs);
  auto it = buckets_.find(key);
  if (it != buckets_.end()) return *it->second;
  auto b = std::make_unique<Bucket>();
  const size_t bytes = layout_workspace(need, nullptr, &b->ws, false);
  check(cudaMalloc(&b->device, bytes), "cudaMalloc workspace");
  layout_workspace(need, static_cast<uint8_t*>(b->device), &b->ws, false);
  check(cudaMallocHost(&b->staging, size_t(need.bytes) + 4 * (2 * size_t(need.segments) + need.docs + 8)),
        "cudaMallocHost staging");
  const size_t out_words = 3 * (size_t(need.bytes) + 1) + need.docs + 1;
  check(cudaHostAlloc(&b->mapped, sizeof(Counters) + 4 * out_words, cudaHostAllocMapped), "cudaHostAlloc outputs");
  b->counters = reinterpret_cast<Counters*>(b->mapped);
  b->out_ids = reinterpret_cast<uint32_t*>(b->mapped + sizeof(Counters));
  b->out_ends = b->out_ids + need.bytes + 1;
  b->out_pieces = b->out_ends + need.bytes + 1;
  b->out_docs = b->out_pieces + need.bytes + 1;
  void* device_view = nullptr;
  check(cudaHostGetDevicePointer(&device_view, b->mapped, 0), "cudaHostGetDevicePointer");
  auto* mapped_words = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(device_view) + sizeof(Counters));
  b->ws.out_ids = mapped_words;
  b->ws.out_ends = mapped_words + need.bytes + 1;
  b->ws.out_piece_ends = mapped_words + 2 * (size_t(need.bytes) + 1);
  b->ws.out_doc_tokens = mapped_words + 3 * (size_t(need.bytes) + 1);
  // The whole pipeline as one graph: geometry depends on the capacity only.
  auto stream = static_cast<cudaStream_t>(stream_);
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  kernels::run_pipeline(CudaLaunch{stream, max_blocks_}, b->ws, tables_);
  cudaMemcpyAsync(b->counters, b->ws.counters, sizeof(Counters), cudaMemcpyDeviceToHost, stream);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  const cudaError_t made = cudaGraphInstantiate(&b->graph, graph, 0);
  cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return *buckets_.emplace(key, std::move(b)).first->second;
}

CudaCounts CudaTokenizer::run(const std::vector<std::string_view>& texts, const Segments& segs,
                              const CudaOutputs& out) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t n = uint32_t(segs.bytes), segments = uint32_t(segs.bounds.size() - 1);
  const uint32_t docs = uint32_t(segs.doc_offsets.size() - 1);
  CudaCounts counts;
  if (n == 0) {
    std::memset(out.doc_tokens, 0, 4 * (size_t(docs) + 1));
    return counts;
  }
  const uint32_t cap_bytes = bucket_bytes(n);
  Bucket& b = bucket_for(Capacity{cap_bytes, pow2_at_least(segments, cap_bytes / 64), pow2_at_least(docs, 64)});
  auto stream = static_cast<cudaStream_t>(stream_);
  uint8_t* w = b.staging;
  for (const std::string_view& t : texts) w = static_cast<uint8_t*>(std::memcpy(w, t.data(), t.size())) + t.size();
  auto* bounds = reinterpret_cast<uint32_t*>(b.staging + ((size_t(n) + 3) & ~size_t(3)));
  std::memcpy(bounds, segs.bounds.data(), 4 * (size_t(segments) + 1));
  uint32_t* tokens = bounds + segments + 1;
  std::memcpy(tokens, segs.tokens.data(), 4 * size_t(segments));
  uint32_t* offsets = tokens + segments;
  std::memcpy(offsets, segs.doc_offsets.data(), 4 * (size_t(docs) + 1));
  uint32_t* header = offsets + docs + 1;  // Counters' first fields
  header[0] = n;
  header[1] = segments;
  header[2] = docs;
  header[3] = out.piece_ends != nullptr;
  check(cudaMemcpyAsync(b.ws.text, b.staging, n, cudaMemcpyHostToDevice, stream), "copy text");
  check(cudaMemcpyAsync(b.ws.seg_bounds, bounds, 4 * (size_t(segments) + 1), cudaMemcpyHostToDevice, stream), "copy segments");
  check(cudaMemcpyAsync(b.ws.seg_tokens, tokens, 4 * size_t(segments), cudaMemcpyHostToDevice, stream), "copy segments");
  check(cudaMemcpyAsync(b.ws.doc_offsets, offsets, 4 * (size_t(docs) + 1), cudaMemcpyHostToDevice, stream), "copy offsets");
  check(cudaMemcpyAsync(b.ws.counters, header, 16, cudaMemcpyHostToDevice, stream), "copy counts");
  check(cudaGraphLaunch(b.graph, stream), "cudaGraphLaunch");
  check(cudaStreamSynchronize(stream), "tokenize");
  const Counters& c = *b.counters;
  counts.flags = c.flags;
  counts.tokens = c.tokens;
  counts.pieces = c.pieces;
  counts.chars = c.chars;
  std::memcpy(out.ids, b.out_ids, 4 * size_t(c.tokens));
  if (out.ends) std::memcpy(out.ends, b.out_ends, 4 * size_t(c.tokens));
  std::memcpy(out.doc_tokens, b.out_docs, 4 * (size_t(docs) + 1));
  if (out.piece_ends) std::memcpy(out.piece_ends, b.out_pieces, 4 * size_t(c.pieces));
  return counts;
}

}  // namespace gpu_tokenize
}  // namespace zllm
