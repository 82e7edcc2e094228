// The GPU tokenizer's kernels (csrc/gpu_tokenize_kernels.cuh) and their pipeline built for
// the host over the SIMT stand-ins of simt_host.h, behind a C entry point for ctypes.
// Device memory is a host buffer filled with garbage first, as cudaMalloc leaves it, so a
// kernel that read what no kernel wrote would show.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "simt_host.h"
#include "gpu_tokenize_kernels.cuh"

namespace {

using namespace zllm::gpu_tokenize;

struct HostLaunch {
  uint32_t max_blocks;
  template <class... P, class... A>
  void operator()(void (*kernel)(P...), uint32_t blocks, uint32_t threads, const A&... args) const {
    const unsigned grid = std::max(1u, std::min(blocks, max_blocks));
    run_grid(dim3{grid, 1, 1}, int(threads), [&] { kernel(args...); });
  }
};

}  // namespace

// Field for field as GpuRun in tests/kernels/gpu_tokenize_emulated.py.
struct HostRun {
  const uint8_t* text;
  const uint32_t* seg_bounds;
  const uint32_t* seg_tokens;
  const uint32_t* doc_offsets;
  uint32_t* out_ids;         // n entries
  uint32_t* out_ends;        // n entries
  uint32_t* out_doc_tokens;  // docs + 1 entries
  uint32_t* out_piece_ends;  // n entries, or null
  uint32_t n, segments, docs, max_blocks;
  uint32_t counters[16];     // out: the device's Counters
};

// 0 on success, 2 for a SIMT violation or another error.
extern "C" int host_gpu_tokenize(const Tables* t, HostRun* r) {
  try {
    static_assert(sizeof(Counters) == sizeof(r->counters), "HostRun mirrors Counters");
    const Capacity cap{bucket_bytes(r->n), std::max(r->segments, 1u), std::max(r->docs, 1u)};
    Workspace ws{};
    const size_t bytes = layout_workspace(cap, nullptr, &ws, true);
    std::vector<uint8_t> memory(bytes + 256, 0xA5);
    auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(memory.data()) + 255) & ~uintptr_t(255));
    layout_workspace(cap, base, &ws, true);
    std::memcpy(ws.text, r->text, r->n);
    std::memcpy(ws.seg_bounds, r->seg_bounds, 4 * (size_t(r->segments) + 1));
    std::memcpy(ws.seg_tokens, r->seg_tokens, 4 * size_t(r->segments));
    std::memcpy(ws.doc_offsets, r->doc_offsets, 4 * (size_t(r->docs) + 1));
    ws.counters->n = r->n;
    ws.counters->segments = r->segments;
    ws.counters->docs = r->docs;
    ws.counters->want_pieces = r->out_piece_ends != nullptr;
    kernels::run_pipeline(HostLaunch{r->max_blocks}, ws, *t);
    const Counters& c = *ws.counters;
    std::memcpy(r->counters, &c, sizeof(Counters));
    std::memcpy(r->out_ids, ws.out_ids, 4 * size_t(c.tokens));
    std::memcpy(r->out_ends, ws.out_ends, 4 * size_t(c.tokens));
    std::memcpy(r->out_doc_tokens, ws.out_doc_tokens, 4 * (size_t(r->docs) + 1));
    if (r->out_piece_ends) std::memcpy(r->out_piece_ends, ws.out_piece_ends, 4 * size_t(c.pieces));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_gpu_tokenize: %s\n", e.what());
    return 2;
  }
}
