// zllm_core._native: one pybind11 module; each source file registers its own part.
#include <pybind11/pybind11.h>

namespace zllm {
void register_block_hash(pybind11::module_& m);
void register_tokenizer(pybind11::module_& m);
void register_incremental(pybind11::module_& m);
void register_session_text(pybind11::module_& m);
void register_paged_decode(pybind11::module_& m);
void register_token_bitmask(pybind11::module_& m);
void register_fence_walk(pybind11::module_& m);
void register_json_equal(pybind11::module_& m);
void register_json_items(pybind11::module_& m);
namespace gpu_tokenize {
void register_gpu_tokenize(pybind11::module_& m);
}  // namespace gpu_tokenize
}  // namespace zllm

PYBIND11_MODULE(_native, m) {
  m.doc() = "zllm_core native hot paths (block hashing, BPE, kernels)";
  zllm::register_block_hash(m);
  zllm::register_tokenizer(m);
  zllm::register_session_text(m);
  zllm::register_incremental(m);
  zllm::register_paged_decode(m);
  zllm::register_token_bitmask(m);
  zllm::register_fence_walk(m);
  zllm::register_json_equal(m);
  zllm::register_json_items(m);
  zllm::gpu_tokenize::register_gpu_tokenize(m);
#ifdef ZLLM_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
}
