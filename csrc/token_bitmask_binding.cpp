// Python entry points of the token bitmask apply: raw pointers, element strides and (for
// CUDA) a stream handle, so the extension never links against libtorch.  The CPU loop is
// always registered; the CUDA launch only in builds that compiled csrc/*.cu (ZLLM_WITH_CUDA).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "token_bitmask.h"

namespace py = pybind11;

namespace zllm {
namespace {

using Pointers = std::array<std::uintptr_t, 3>;  // logits, bitmask, rows (0: mask i -> row i)
using Sizes = std::array<int, 6>;  // dtype, rows_int64, num_logit_rows, num_masks, vocab_size, head_vocab
using Strides = std::array<int64_t, 2>;  // logits row, bitmask row

TokenBitmaskArgs unpack(const Pointers& p, const Sizes& n, const Strides& s) {
  if (n[0] < 0 || n[0] > static_cast<int>(LogitDtype::kBFloat16)) {
    throw std::invalid_argument("token bitmask: unknown logits dtype code " + std::to_string(n[0]));
  }
  TokenBitmaskArgs a{};
  a.logits = reinterpret_cast<void*>(p[0]);
  a.bitmask = reinterpret_cast<const int32_t*>(p[1]);
  a.rows = reinterpret_cast<const void*>(p[2]);
  a.dtype = static_cast<LogitDtype>(n[0]);
  a.rows_int64 = n[1] != 0;
  a.num_logit_rows = n[2];
  a.num_masks = n[3];
  a.vocab_size = n[4];
  a.head_vocab = n[5];
  a.logits_stride = s[0];
  a.bitmask_stride = s[1];
  return a;
}

void apply_cpu(const Pointers& p, const Sizes& n, const Strides& s) {
  const TokenBitmaskArgs a = unpack(p, n, s);
  py::gil_scoped_release release;  // plain loops over memory Python does not touch meanwhile
  apply_token_bitmask_cpu(a);
}

#ifdef ZLLM_WITH_CUDA
void apply_cuda(const Pointers& p, const Sizes& n, const Strides& s, std::uintptr_t stream) {
  if (const char* err = apply_token_bitmask_cuda(unpack(p, n, s), stream)) {
    throw std::runtime_error(std::string("apply_token_bitmask_cuda: ") + err);
  }
}
#endif

}  // namespace

void register_token_bitmask(py::module_& m) {
  m.def("apply_token_bitmask_cpu", &apply_cpu, py::arg("pointers"), py::arg("sizes"),
        py::arg("strides"),
        "Mask disallowed logits to -inf on the CPU (field order: see csrc/token_bitmask_binding.cpp).");
#ifdef ZLLM_WITH_CUDA
  m.def("apply_token_bitmask_cuda", &apply_cuda, py::arg("pointers"), py::arg("sizes"),
        py::arg("strides"), py::arg("stream"),
        "Enqueue the same on a CUDA stream (field order: see csrc/token_bitmask_binding.cpp).");
#endif
}

}  // namespace zllm
