// Python bindings of the native tokenizer. Encoding runs with the GIL released (the str's
// UTF-8 buffer stays alive with the argument), batches on std::threads.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "ascii_block.h"
#include "class_table.h"
#include "tokenizer_core.h"

namespace py = pybind11;

namespace zllm {
namespace {

struct Text {
  const uint8_t* data;
  size_t size;
};

Text utf8_of(const py::handle& obj) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
  if (!p) throw py::error_already_set();  // lone surrogates: the Python layer repairs them
  return Text{reinterpret_cast<const uint8_t*>(p), size_t(n)};
}

// One Python int per token id, made once: building a list of cached ints is several times
// cheaper than allocating an int per token (ids above 256 are not interned by Python).
std::vector<PyObject*>& int_cache() {
  static std::vector<PyObject*> ints;
  return ints;
}

void grow_int_cache(size_t n) {
  auto& ints = int_cache();
  while (ints.size() < n) ints.push_back(PyLong_FromSize_t(ints.size()));
}

py::list to_list(const Tokens& tokens) {
  const auto& ints = int_cache();
  const uint32_t* ids = tokens.ids.get();
  PyObject* list = PyList_New(Py_ssize_t(tokens.size));
  if (!list) throw py::error_already_set();
  for (size_t i = 0; i < tokens.size; ++i) {
    PyObject* v;
    if (ids[i] < ints.size()) {
      v = ints[ids[i]];
      Py_INCREF(v);
    } else {
      v = PyLong_FromUnsignedLong(ids[i]);
    }
    PyList_SET_ITEM(list, Py_ssize_t(i), v);
  }
  return py::reinterpret_steal<py::list>(list);
}

[[noreturn]] void raise_disallowed(const TokenizerCore& core, long k) {
  throw py::value_error("Encountered text corresponding to disallowed special token " +
                        py::repr(py::str(core.specials()[size_t(k)].bytes)).cast<std::string>() +
                        ".\nPass it in allowed_special to encode it as a special token, or in "
                        "disallowed_special=() to encode it as ordinary text.");
}

// A cache checked out for one call; returned even when encoding throws.
class CacheLease {
 public:
  explicit CacheLease(TokenizerCore& core) : core_(core), cache_(core.acquire_cache()) {}
  ~CacheLease() { core_.release_cache(std::move(cache_)); }
  PieceCache& operator*() { return *cache_; }

 private:
  TokenizerCore& core_;
  std::unique_ptr<PieceCache> cache_;
};

// Encodes text and returns convert(tokens). The output buffer is the thread's, kept between
// encodes (a fresh one would page-fault on the writes of every large text); it is taken out
// for the call, so a nested encode on this thread (Python code run by the conversion, such as
// a garbage collection's finalizers) finds none and allocates its own.
template <class Convert>
auto encode_one(TokenizerCore& core, const py::str& text, const SpecialPolicy& policy, Convert convert) {
  constexpr size_t kKeepTokens = size_t(1) << 24;
  thread_local Tokens kept;
  Tokens out = std::move(kept);
  kept = Tokens{};
  Text t = utf8_of(text);
  long bad;
  {
    py::gil_scoped_release nogil;
    CacheLease cache(core);
    bad = core.encode(t.data, t.size, policy, *cache, out);
  }
  if (bad >= 0) raise_disallowed(core, bad);
  auto result = convert(out);
  if (out.capacity <= kKeepTokens) kept = std::move(out);
  return result;
}

// The ids as one uint32 array: no Python object per token, for callers that hand ids to
// numpy or torch (tiktoken's encode_to_numpy; gigatoken returns its ids this way too). The
// array owns its buffer; when the array dies the buffer goes back to a small pool, its pages
// mapped, and a later text that fits one is encoded straight into it: no copy and no page
// faults. Otherwise the ids are encoded into the thread's kept buffer and copied into a new
// buffer of the same capacity (page faults inside the encode loop would evict its tables).
// The pool is touched only with the GIL held.
std::vector<std::unique_ptr<Tokens>>& lent_buffers() {
  static std::vector<std::unique_ptr<Tokens>> pool;
  return pool;
}

void give_back(Tokens* tokens) {
  constexpr size_t kKeepBuffers = 2, kKeepTokens = size_t(1) << 24;
  auto& pool = lent_buffers();
  if (pool.size() < kKeepBuffers && tokens->capacity <= kKeepTokens) {
    pool.emplace_back(tokens);
  } else {
    delete tokens;
  }
}

py::array_t<uint32_t> lend(std::unique_ptr<Tokens> tokens) {
  const uint32_t* ids = tokens->ids.get();
  const size_t size = tokens->size;
  py::capsule owner(tokens.get(), [](void* p) { give_back(static_cast<Tokens*>(p)); });
  tokens.release();
  return py::array_t<uint32_t>({size}, {sizeof(uint32_t)}, ids, owner);
}

py::array_t<uint32_t> copy_to_array(const Tokens& tokens) {
  auto copy = std::make_unique<Tokens>();
  copy->ids.reset(new uint32_t[tokens.capacity]);
  copy->capacity = tokens.capacity;
  copy->size = tokens.size;
  std::memcpy(copy->ids.get(), tokens.ids.get(), tokens.size * sizeof(uint32_t));
  return lend(std::move(copy));
}

py::array_t<uint32_t> encode_array(TokenizerCore& core, const py::str& text, const SpecialPolicy& policy) {
  Text t = utf8_of(text);
  auto& pool = lent_buffers();
  auto fits = std::find_if(pool.begin(), pool.end(), [&](const std::unique_ptr<Tokens>& b) {
    return b->capacity >= TokenizerCore::worst_case_tokens(t.size);
  });
  if (fits == pool.end()) return encode_one(core, text, policy, copy_to_array);
  std::unique_ptr<Tokens> out = std::move(*fits);
  pool.erase(fits);
  long bad;
  {
    py::gil_scoped_release nogil;
    CacheLease cache(core);
    bad = core.encode(t.data, t.size, policy, *cache, *out);
  }
  if (bad >= 0) {
    give_back(out.release());
    raise_disallowed(core, bad);
  }
  return lend(std::move(out));
}

py::list encode_batch(TokenizerCore& core, const py::list& texts, const SpecialPolicy& policy, int threads) {
  std::vector<Text> in;
  for (const py::handle& t : texts) in.push_back(utf8_of(t));
  std::vector<Tokens> out(in.size());
  std::vector<long> bad(in.size(), -1);
  {
    py::gil_scoped_release nogil;
    std::atomic<size_t> next{0};
    auto work = [&] {
      CacheLease cache(core);
      for (size_t i; (i = next.fetch_add(1)) < in.size();)
        bad[i] = core.encode(in[i].data, in[i].size, policy, *cache, out[i]);
    };
    size_t n = std::min<size_t>(std::max(threads, 1), in.size());
    std::vector<std::thread> pool;
    for (size_t k = 1; k < n; ++k) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
  }
  py::list result;
  for (size_t i = 0; i < in.size(); ++i) {
    if (bad[i] >= 0) raise_disallowed(core, bad[i]);
    result.append(to_list(out[i]));
  }
  return result;
}

py::bytes decode_bytes(const TokenizerCore& core, const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids)
    if (id < 0 || id > UINT32_MAX || !core.append_token_bytes(uint32_t(id), out)) throw py::key_error(std::to_string(id));
  return py::bytes(out);
}

std::unique_ptr<TokenizerCore> make_core(const std::vector<py::bytes>& tokens,
                                         const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                                         bool whole_piece_first, std::vector<Grammar> grammars,
                                         const std::vector<std::pair<py::bytes, uint32_t>>& specials) {
  std::vector<std::string> toks(tokens.begin(), tokens.end());
  std::vector<Special> sp;
  for (const auto& [b, id] : specials) sp.push_back(Special{std::string(b), id});
  BytePairModel model(toks, merges, whole_piece_first);
  size_t max_id = toks.size();
  for (const Special& x : sp) max_id = std::max<size_t>(max_id, x.id + 1);
  grow_int_cache(max_id);
  return std::make_unique<TokenizerCore>(std::move(model), std::move(grammars), std::move(sp));
}

py::list split_pieces(const TokenizerCore& core, const py::str& text) {
  Text t = utf8_of(text);
  std::vector<uint32_t> ends;
  core.split(t.data, t.size, ends);
  py::list pieces;
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    pieces.append(py::str(reinterpret_cast<const char*>(t.data) + begin, end - begin));
    begin = end;
  }
  return pieces;
}

py::bytes char_classes(const py::str& text) {
  Text t = utf8_of(text);
  std::string out;
  for (size_t i = 0; i < t.size;) {
    int len;
    out.push_back(char(char_class(decode_utf8(t.data, i, &len))));
    i += len;
  }
  return py::bytes(out);
}

}  // namespace

void register_tokenizer(py::module_& m) {
  py::class_<Grammar>(m, "Grammar", "One family's pre-tokenizer rule parameters (see tokenizer/rules.py)")
      .def(py::init<>())
      .def_readwrite("contractions", &Grammar::contractions)
      .def_readwrite("letters", &Grammar::letters)
      .def_readwrite("digit_group", &Grammar::digit_group)
      .def_readwrite("digit_space_prefix", &Grammar::digit_space_prefix)
      .def_readwrite("punct_space_prefix", &Grammar::punct_space_prefix)
      .def_readwrite("punct_newlines", &Grammar::punct_newlines)
      .def_readwrite("punct_slash", &Grammar::punct_slash)
      .def_readwrite("space_run_to_end", &Grammar::space_run_to_end)
      .def_readwrite("newline_rule", &Grammar::newline_rule)
      .def_readwrite("digits_only", &Grammar::digits_only);
  py::class_<SpecialPolicy>(m, "SpecialPolicy")
      .def(py::init([](std::vector<uint8_t> allowed, std::vector<uint8_t> disallowed) {
        bool any = false;
        for (size_t k = 0; k < allowed.size(); ++k) any |= allowed[k] || disallowed[k];
        return SpecialPolicy{std::move(allowed), std::move(disallowed), any};
      }));
  py::class_<TokenizerCore>(m, "TokenizerCore")
      .def(py::init(&make_core), py::arg("tokens"), py::arg("merges"), py::arg("whole_piece_first"),
           py::arg("grammars"), py::arg("specials"))
      .def("special_order", [](const TokenizerCore& c) {
        std::vector<uint32_t> ids;
        for (const Special& s : c.specials()) ids.push_back(s.id);
        return ids;
      }, "Special ids in the order SpecialPolicy vectors are indexed.")
      .def("encode", [](TokenizerCore& c, const py::str& t, const SpecialPolicy& p) { return encode_one(c, t, p, to_list); })
      .def("encode_array", &encode_array)
      .def("count", [](TokenizerCore& c, const py::str& t, const SpecialPolicy& p) {
        return encode_one(c, t, p, [](const Tokens& tokens) { return tokens.size; });
      })
      .def("encode_batch", &encode_batch, py::arg("texts"), py::arg("policy"), py::arg("threads"))
      .def("decode_bytes", &decode_bytes)
      .def("split", &split_pieces, "Pre-tokenizer pieces of ordinary text (no special splitting).");
  m.def("char_classes", &char_classes, "The CharClass of each code point, one byte each.");
  m.def("class_table", [] {
    const ClassTable& t = class_table();
    return py::make_tuple(py::bytes(reinterpret_cast<const char*>(t.row_of_block), ClassTable::kBlocks * sizeof(uint16_t)),
                          py::bytes(reinterpret_cast<const char*>(t.rows), t.num_rows << ClassTable::kBlockBits));
  }, "The two-level CharClass table (row of each 64-code-point block as uint16, then the rows): what the GPU path uploads.");
  m.def("simd_masks_agree", [](const py::bytes& b) {
    const std::string s = b;
    return simd_masks_agree(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }, "Whether the block rules' AVX2 and SSE2 class masks agree on every window of the bytes.");
}

}  // namespace zllm
