// Python entry points of the paged attention kernels: raw pointers, element strides and (for
// CUDA) a stream handle, so the extension never links against libtorch.  The CPU kernels
// (decode, prefill) are always registered; the CUDA decode launch only in builds that
// compiled csrc/*.cu (ZLLM_WITH_CUDA).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "paged_decode.h"
#include "paged_prefill.h"

namespace py = pybind11;

namespace zllm {
namespace {

using Pointers = std::array<std::uintptr_t, 8>;  // q, k, v, tables, seq_lens, out, part_acc, part_ml
using Sizes = std::array<int, 8>;  // dtype, batch, heads, kv_heads, head_dim, page, split_len, splits
using Strides = std::array<int64_t, 11>;  // q(seq, head), k(block, slot, head), v(...), table, out(seq, head)

PagedDecodeArgs unpack(const Pointers& p, const Sizes& n, const Strides& s, float scale_log2) {
  if (n[0] < 0 || n[0] > static_cast<int>(KvDtype::kBFloat16)) {
    throw std::invalid_argument("paged decode: unknown dtype code " + std::to_string(n[0]));
  }
  PagedDecodeArgs a{};
  a.q = reinterpret_cast<const void*>(p[0]);
  a.k_cache = reinterpret_cast<const void*>(p[1]);
  a.v_cache = reinterpret_cast<const void*>(p[2]);
  a.block_tables = reinterpret_cast<const int32_t*>(p[3]);
  a.seq_lens = reinterpret_cast<const int32_t*>(p[4]);
  a.out = reinterpret_cast<void*>(p[5]);
  a.part_acc = reinterpret_cast<float*>(p[6]);
  a.part_ml = reinterpret_cast<float*>(p[7]);
  a.dtype = static_cast<KvDtype>(n[0]);
  a.batch = n[1];
  a.num_heads = n[2];
  a.num_kv_heads = n[3];
  a.head_dim = n[4];
  a.page_size = n[5];
  a.split_len = n[6];
  a.num_splits = n[7];
  a.scale_log2 = scale_log2;
  a.q_stride_seq = s[0];
  a.q_stride_head = s[1];
  a.k_stride_block = s[2];
  a.k_stride_slot = s[3];
  a.k_stride_head = s[4];
  a.v_stride_block = s[5];
  a.v_stride_slot = s[6];
  a.v_stride_head = s[7];
  a.table_stride = s[8];
  a.out_stride_seq = s[9];
  a.out_stride_head = s[10];
  return a;
}

void decode_cpu(const Pointers& p, const Sizes& n, const Strides& s, float scale_log2, int num_threads) {
  const PagedDecodeArgs a = unpack(p, n, s, scale_log2);
  const char* err;
  {
    py::gil_scoped_release release;  // plain loops over memory Python does not touch meanwhile
    err = paged_decode_cpu(a, num_threads);
  }
  if (err) throw std::invalid_argument(std::string("paged_decode_cpu: ") + err);
}

void prefill_cpu(const Pointers& p, const Sizes& n, const Strides& s, std::uintptr_t query_start_loc,
                 int num_tokens, float scale_log2, int num_threads) {
  const PagedPrefillArgs a{unpack(p, n, s, scale_log2), reinterpret_cast<const int32_t*>(query_start_loc),
                           num_tokens};
  const char* err;
  {
    py::gil_scoped_release release;
    err = paged_prefill_cpu(a, num_threads);
  }
  if (err) throw std::invalid_argument(std::string("paged_prefill_cpu: ") + err);
}

#ifdef ZLLM_WITH_CUDA
void decode_cuda(const Pointers& p, const Sizes& n, const Strides& s, float scale_log2,
                 std::uintptr_t stream) {
  if (const char* err = paged_decode_cuda(unpack(p, n, s, scale_log2), stream)) {
    throw std::runtime_error(std::string("paged_decode_cuda: ") + err);
  }
}
#endif

}  // namespace

void register_paged_decode(py::module_& m) {
  m.def("paged_decode_cpu", &decode_cpu, py::arg("pointers"), py::arg("sizes"), py::arg("strides"),
        py::arg("scale_log2"), py::arg("num_threads"),
        "Paged decode attention on the CPU (field order: see csrc/paged_decode_binding.cpp).");
  m.def("paged_prefill_cpu", &prefill_cpu, py::arg("pointers"), py::arg("sizes"), py::arg("strides"),
        py::arg("query_start_loc"), py::arg("num_tokens"), py::arg("scale_log2"), py::arg("num_threads"),
        "Paged prefill attention on the CPU: variable-length chunks, batch = sequences, q rows = tokens.");
#ifdef ZLLM_WITH_CUDA
  m.def("paged_decode_cuda", &decode_cuda, py::arg("pointers"), py::arg("sizes"), py::arg("strides"),
        py::arg("scale_log2"), py::arg("stream"),
        "Enqueue paged decode attention (field order: see csrc/paged_decode_binding.cpp).");
#endif
}

}  // namespace zllm
