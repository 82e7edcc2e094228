// The token fence's vocabulary walk: run a byte DFA from one state over every token and say,
// per token, how many bytes its end state leaves to acceptance (far: the token dies). A
// token stops at its first dead byte, so structural states (where nearly every token dies on
// its first byte) cost about one step a token.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace py = pybind11;

namespace zllm {
namespace {

using Table = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using Offsets = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::array_t<uint16_t> fence_walk(const Table& table, const Bytes& classes, const Table& distance,
                                const Bytes& flat, const Offsets& offsets, int32_t start, int far) {
  if (table.ndim() != 2 || classes.size() != 256 || distance.size() != table.shape(0) || offsets.ndim() != 1) {
    throw std::invalid_argument("fence_walk: table [states, classes], classes [256], distance [states]");
  }
  const int64_t states = table.shape(0), width = table.shape(1), n = offsets.size() - 1;
  if (start < 0 || start >= states || n < 0 || far < 1 || far > 65535) {
    throw std::invalid_argument("fence_walk: start state, offsets or far out of range");
  }
  const int32_t* t = table.data();
  const uint8_t* cls = classes.data();
  const int32_t* dist = distance.data();
  const uint8_t* bytes = flat.data();
  const int64_t* off = offsets.data();
  if (off[0] != 0 || off[n] != flat.size()) throw std::invalid_argument("fence_walk: offsets do not span flat");
  const int32_t dead = static_cast<int32_t>(states - 1);
  py::array_t<uint16_t> out(n);
  uint16_t* r = out.mutable_data();
  {
    py::gil_scoped_release released;
    for (int64_t i = 0; i < n; ++i) {
      int32_t s = start;
      for (int64_t j = off[i]; j < off[i + 1] && s != dead; ++j) s = t[s * width + cls[bytes[j]]];
      r[i] = s == dead ? static_cast<uint16_t>(far) : static_cast<uint16_t>(std::min<int32_t>(dist[s], far - 1));
    }
  }
  return out;
}

}  // namespace

void register_fence_walk(py::module_& m) {
  m.def("fence_walk", &fence_walk, py::arg("table"), py::arg("classes"), py::arg("distance"),
        py::arg("flat"), py::arg("offsets"), py::arg("start"), py::arg("far"),
        "Per token (in flat/offsets order): bytes left to acceptance after walking it from start; "
        "far where it dies. The last table row is the dead state.");
}

}  // namespace zllm
