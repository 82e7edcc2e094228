// Python entry points of the GPU full tokenizer: its tables, the segmentation of a batch, a
// TokenRun from device results, and (in builds that compiled csrc/*.cu) the CUDA device.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpu_tokenize_cuda.h"
#include "gpu_tokenize_tables.h"
#include "token_run.h"

namespace py = pybind11;

namespace zllm {
namespace gpu_tokenize {
namespace {

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> a(v.size());
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

std::string_view utf8_view(const py::handle& text) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(text.ptr(), &n);
  if (!p) throw py::error_already_set();  // lone surrogates: the Python layer repairs them first
  return {p, size_t(n)};
}

// Segments of `texts`, or the index of a disallowed special one of them holds (encode refuses
// those; the caller lets the CPU path raise its error).
long segment_texts(const TokenizerCore& core, const SpecialPolicy& policy, const py::list& texts, Segments& segs,
                   std::vector<std::string_view>* views) {
  for (const py::handle& t : texts) {
    const std::string_view v = utf8_view(t);
    const long bad = add_text(core, policy, reinterpret_cast<const uint8_t*>(v.data()), v.size(), segs);
    if (bad >= 0) return bad;
    views->push_back(v);
  }
  finish(segs);
  return -1;
}

py::tuple segments(const TokenizerCore& core, const SpecialPolicy& policy, const py::list& texts) {
  Segments segs;
  std::vector<std::string_view> views;
  const long bad = segment_texts(core, policy, texts, segs, &views);
  if (bad >= 0) return py::make_tuple(bad, py::none(), py::none(), py::none(), py::none());
  py::array_t<uint8_t> bytes(segs.bytes);
  uint8_t* w = bytes.mutable_data();
  for (const std::string_view& v : views) w = static_cast<uint8_t*>(std::memcpy(w, v.data(), v.size())) + v.size();
  return py::make_tuple(-1, bytes, to_array(segs.bounds), to_array(segs.tokens), to_array(segs.doc_offsets));
}

TokenRun token_run(const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& ids,
                   const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& ends) {
  if (ids.size() != ends.size()) throw std::invalid_argument("ids and ends differ in length");
  TokenRun run;
  auto [i, e] = run.keep_and_extend(0, size_t(ids.size()));
  std::memcpy(i, ids.data(), size_t(ids.size()) * sizeof(uint32_t));
  std::memcpy(e, ends.data(), size_t(ends.size()) * sizeof(uint32_t));
  return run;
}

// The tables of one tokenizer, kept for the device (or the emulation) to read.
struct PyTables {
  HostTables host;
  Tables view;
};

#ifdef ZLLM_WITH_CUDA
py::dict cuda_encode(CudaTokenizer& dev, const TokenizerCore& core, const SpecialPolicy& policy,
                     const py::list& texts, bool with_ends, bool with_pieces) {
  Segments segs;
  std::vector<std::string_view> views;
  py::dict out;
  const long bad = segment_texts(core, policy, texts, segs, &views);
  out["disallowed"] = bad;
  if (bad >= 0) return out;
  // At most one token (and one piece) a byte: arrays of that size, filled once by the run,
  // then viewed at their length (their pages are touched only as far as the run writes).
  const size_t n = segs.bytes;
  py::array_t<uint32_t> ids(n), ends(with_ends ? n : 0), pieces(with_pieces ? n : 0);
  py::array_t<uint32_t> doc_tokens(segs.doc_offsets.size());
  const CudaOutputs sink{ids.mutable_data(), with_ends ? ends.mutable_data() : nullptr, doc_tokens.mutable_data(),
                         with_pieces ? pieces.mutable_data() : nullptr};
  CudaCounts c;
  {
    py::gil_scoped_release nogil;  // the str buffers stay alive with `texts`
    c = dev.run(views, segs, sink);
  }
  const py::slice tokens(0, c.tokens, 1);
  out["flags"] = c.flags;
  out["ids"] = ids[tokens];
  if (with_ends) out["ends"] = ends[tokens];
  out["doc_tokens"] = doc_tokens;
  if (with_pieces) out["piece_ends"] = pieces[py::slice(0, c.pieces, 1)];
  out["chars"] = c.chars;
  return out;
}
#endif

}  // namespace

void register_gpu_tokenize(py::module_& m) {
  py::class_<PyTables, std::shared_ptr<PyTables>>(m, "GpuTables", "The GPU tokenizer's tables of one tokenizer.")
      .def_property_readonly("view", [](const PyTables& t) {
        return py::bytes(reinterpret_cast<const char*>(&t.view), sizeof(Tables));
      }, "The Tables struct over host memory, for the host emulation of the kernels (same build).");
  m.def("gpu_tables", [](const TokenizerCore& core,
                         const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& merge_pairs,
                         const std::vector<Grammar>& stages) {
    if (merge_pairs.size() % 2) throw std::invalid_argument("merges: (left, right) pairs");
    static_assert(sizeof(std::pair<uint32_t, uint32_t>) == 8, "pairs copy as two words");
    std::vector<std::pair<uint32_t, uint32_t>> merges(size_t(merge_pairs.size() / 2));
    if (!merges.empty()) std::memcpy(merges.data(), merge_pairs.data(), size_t(merge_pairs.size()) * 4);
    auto t = std::make_shared<PyTables>();
    {
      py::gil_scoped_release nogil;
      t->host = build_tables(core.model(), merges, stages);
    }
    t->view = host_view(t->host);
    return t;
  }, py::arg("core"), py::arg("merges"), py::arg("stages"),
        "Vocabulary and merge hash tables and the rule stages the GPU tokenizer uploads.");
  m.def("gpu_segments", &segments, py::arg("core"), py::arg("policy"), py::arg("texts"),
        "(disallowed special index or -1, bytes, segment bounds, segment tokens, text offsets) of a batch.");
  m.def("token_run", &token_run, py::arg("ids"), py::arg("ends"), "A TokenRun of given ids and end offsets.");
  m.attr("gpu_max_batch_bytes") = kMaxCapacity;
#ifdef ZLLM_WITH_CUDA
  m.def("cuda_device_count", [] { return cuda_device_count(); }, "CUDA devices visible (0 without a driver).");
  py::class_<CudaTokenizer>(m, "GpuTokenizerCuda", "The GPU tokenizer on the current CUDA device.")
      .def(py::init([](const std::shared_ptr<PyTables>& t) { return std::make_unique<CudaTokenizer>(t->host); }))
      .def("encode", &cuda_encode, py::arg("core"), py::arg("policy"), py::arg("texts"), py::arg("ends") = true,
           py::arg("pieces") = false);
#else
  m.def("cuda_device_count", [] { return 0; }, "CUDA devices visible (0: this build has no CUDA).");
#endif
}

}  // namespace gpu_tokenize
}  // namespace zllm
