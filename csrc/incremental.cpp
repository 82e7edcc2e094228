// Native steps of incremental tokenization (zllm_core/tokenizer/incremental.py): where two
// texts diverge, which positions are stable piece boundaries, encoding a tail with token end
// offsets, and chained checkpoint hashes for finding a session by text prefix.
//
// Stable boundary (the proof; rules in zllm_core/tokenizer/rules.py, scanner in pretokenizer.cpp).
// The scanner decides the piece starting at c by reading only text at c and to its right, so
// a piece chain is fixed by its start and the text. Call s a stable boundary of text t when
//   (a) t[s-1] is CR or LF;
//   (b) the whitespace run t[s:r) holds no CR/LF and is followed by a non-whitespace char z at
//       r (r == s when the family has no `\s*[\r\n]+` rule; z != '/' when r == s and
//       punctuation absorbs `/`);
//   (c) in the old text and in the new one, no special token starts in [s - 1, r + len(z))
//       and none that starts earlier reaches past s - 1.
// Then no piece that starts before s can extend past s: letters, digits and contractions
// never contain CR/LF and their prefixes exclude it; punctuation's `[\r\n]*` tail stops at
// the space or z; a whitespace piece ends at or before the run's last newline, which is
// t[s-1]. So some piece ends exactly at s. And every decision for a piece starting before s
// reads text before R = r + len(z) only (class runs stop at the run's end, contractions look
// at most two characters ahead, a whitespace run is read to z). Hence if an old and a new
// text agree on [0, R) and (c) holds, both have a piece boundary at s, the same pieces (so
// the same tokens) before it, and tokens after it are those of the new text's tail alone.
// (c) makes the special-token scan cut both texts the same way before R, so s lies in an
// ordinary segment whose scanner sees the same text up to R. Later grammars of a Hugging Face
// Sequence only split the first grammar's pieces, so the first grammar decides. Positions are
// UTF-8 bytes of segments that start at the same offset of both texts.
//
// The end b of a special token [a, b) is a stable boundary too when the token is allowed,
// it is the longest special matching at a in both texts, and in neither text does a special
// that starts before a reach past a: the special scan, which takes the longest match at the
// leftmost position and resumes after it, then arrives at a and matches [a, b) in both texts
// whatever precedes it, text before a is a segment of its own with the same end, and text
// after b is scanned afresh from b, as a tokenization of the tail alone would be.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tokenizer_core.h"

namespace py = pybind11;

namespace zllm {
namespace {

struct View {
  const uint8_t* data;
  size_t size;
};

View utf8_view(const py::str& s) {  // zero-copy for ASCII str; cached UTF-8 otherwise
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (!p) throw py::error_already_set();
  return View{reinterpret_cast<const uint8_t*>(p), size_t(n)};
}

bool continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

size_t count_chars(const uint8_t* p, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += !continuation(p[i]);
  return c;
}

// Byte offset of code point `chars` in t (t.size if past the end).
size_t byte_offset(const View& t, size_t chars) {
  size_t i = 0;
  for (size_t c = 0; i < t.size; ++i)
    if (!continuation(t.data[i]) && c++ == chars) return i;
  return t.size;
}

// Bytes of x and y that agree, from the start, in whole chunks (to a chunk before the end).
size_t equal_chunks(const uint8_t* x, const uint8_t* y, size_t n) {
  constexpr size_t kChunk = 4096;
  size_t at = 0;
  while (at + kChunk <= n && std::memcmp(x + at, y + at, kChunk) == 0) at += kChunk;
  return at;
}

// (d, len(a), len(b)) in code points: d is the length of the common prefix of a and b.
// Equal kinds compare raw storage with memcmp; mixed kinds (rare) code point by code point.
py::tuple common_prefix(const py::str& a, const py::str& b) {
  PyObject *x = a.ptr(), *y = b.ptr();
  const Py_ssize_t nx = PyUnicode_GET_LENGTH(x), ny = PyUnicode_GET_LENGTH(y), n = std::min(nx, ny);
  const int kx = PyUnicode_KIND(x), ky = PyUnicode_KIND(y);
  const void *dx = PyUnicode_DATA(x), *dy = PyUnicode_DATA(y);
  Py_ssize_t i = 0;
  if (kx == ky) {
    const auto *px = static_cast<const uint8_t*>(dx), *py_ = static_cast<const uint8_t*>(dy);
    i = Py_ssize_t(equal_chunks(px, py_, size_t(n) * kx) / kx);
  }
  while (i < n && PyUnicode_READ(kx, dx, i) == PyUnicode_READ(ky, dy, i)) ++i;
  return py::make_tuple(i, nx, ny);
}

// Whether s[start:] holds a surrogate code point (only str of kind 2 or 4 can).
bool has_surrogates(const py::str& s, Py_ssize_t start) {
  PyObject* o = s.ptr();
  const int kind = PyUnicode_KIND(o);
  const void* data = PyUnicode_DATA(o);
  bool found = false;
  for (Py_ssize_t i = start, n = PyUnicode_GET_LENGTH(o); kind != PyUnicode_1BYTE_KIND && i < n; ++i)
    found |= (PyUnicode_READ(kind, data, i) & 0xFFFFF800u) == 0xD800u;
  return found;
}

CharClass class_at(const uint8_t* t, size_t i, int* len) {
  if (t[i] < 0x80) {
    *len = 1;
    return char_class(t[i]);
  }
  return char_class(decode_utf8(t, i, len));
}

// The tokenizer's specials, for finding them at a position (a first-byte table skips most).
class SpecialIndex {
 public:
  explicit SpecialIndex(const TokenizerCore& core) : specials_(core.specials()) {
    for (const Special& sp : specials_) {
      first_[uint8_t(sp.bytes[0])] = true;
      longest = std::max(longest, sp.bytes.size());
    }
  }

  // Index (in core.specials(), longest first) of the longest special at t[i], or -1.
  long at(const View& t, size_t i) const {
    if (!first_[t.data[i]]) return -1;
    for (size_t k = 0; k < specials_.size(); ++k) {
      const std::string& b = specials_[k].bytes;
      if (b.size() <= t.size - i && std::memcmp(t.data + i, b.data(), b.size()) == 0) return long(k);
    }
    return -1;
  }
  size_t length(long k) const { return specials_[size_t(k)].bytes.size(); }

  bool starts_in(const View& t, size_t from, size_t to) const {
    for (size_t i = from; i < to && i < t.size; ++i)
      if (at(t, i) >= 0) return true;
    return false;
  }
  // Whether the longest special at some i in [from, to) ends after `to`.
  bool crosses(const View& t, size_t from, size_t to) const {
    for (size_t i = from; i < to && i < t.size; ++i) {
      long k = at(t, i);
      if (k >= 0 && i + length(k) > to) return true;
    }
    return false;
  }

  size_t longest = 0;

 private:
  const std::vector<Special>& specials_;
  bool first_[256] = {};
};

// R (end of the text the proof reads) if s is a stable boundary of t, else 0. Needs s >= 1.
// `other` is the old text, which must agree with t on [0, R) and be free of specials too.
size_t stable_reads(const SpecialIndex& specials, const Grammar& g, const View& t,
                    const View& other, size_t s) {
  if (t.data[s - 1] != '\n' && t.data[s - 1] != '\r') return 0;
  size_t r = s;
  int len = 1;
  for (; r < t.size; r += len) {
    if (t.data[r] == '\r' || t.data[r] == '\n') return 0;
    if (class_at(t.data, r, &len) != kSpace) break;
  }
  if (r >= t.size || (r != s && !g.newline_rule) || (r == s && g.punct_slash && t.data[r] == '/')) return 0;
  const size_t reads = r + len;
  const size_t from = s > specials.longest ? s - specials.longest : 0;
  for (const View* x : {&t, &other})
    if (specials.crosses(*x, from, s - 1) || specials.starts_in(*x, s - 1, reads)) return 0;
  return reads;
}

// Stable boundaries found in the new text t (proof above), as byte offsets.
class BoundaryScan {
 public:
  BoundaryScan(const TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy, View t, View old)
      : specials_(core), g_(g), policy_(policy), t_(t), old_(old) {}

  // Calls visit(s) for each stable boundary s in [lo, limit] proven from text before limit.
  template <class Visit>
  void run(size_t lo, size_t limit, Visit visit) const {
    if (!g_.digits_only)
      for (size_t i = lo ? lo - 1 : 0; i < limit; ++i) {
        const uint8_t b = t_.data[i];
        if ((b == '\n' || b == '\r') && i + 1 < t_.size) {
          size_t reads = stable_reads(specials_, g_, t_, old_, i + 1);
          if (reads && reads <= limit) visit(i + 1);
        }
      }
    const size_t longest = specials_.longest;
    for (size_t a = lo > longest ? lo - longest : 0; a < limit; ++a) {
      size_t end = special_end(a);
      if (end && end >= lo && end <= limit) visit(end);
    }
  }

 private:
  size_t special_end(size_t a) const {  // b if [a, b) is a stable special, else 0
    long k = specials_.at(t_, a);
    if (k < 0 || !policy_.any || !policy_.allowed[size_t(k)] || specials_.at(old_, a) != k) return 0;
    const size_t from = a > specials_.longest ? a - specials_.longest : 0;
    if (specials_.crosses(t_, from, a) || specials_.crosses(old_, from, a)) return 0;
    return a + specials_.length(k);
  }

  SpecialIndex specials_;
  const Grammar& g_;
  const SpecialPolicy& policy_;
  View t_, old_;
};

// (first, last): the first stable boundary s >= lo and the last one, proven from text[:limit]
// where old and new agree; (-1, -1) when there is none. Positions are code points of the
// given texts (segments of the session's texts starting at the same offset).
py::tuple stable_boundaries(const TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy,
                            const py::str& old, const py::str& text, size_t lo, size_t limit) {
  View t = utf8_view(text), o = utf8_view(old);
  const size_t lo_b = byte_offset(t, lo), limit_b = std::min(byte_offset(t, limit), o.size);
  size_t first = SIZE_MAX, last = 0;
  BoundaryScan(core, g, policy, t, o).run(lo_b, limit_b, [&](size_t s) {
    first = std::min(first, s);
    last = std::max(last, s);
  });
  if (first == SIZE_MAX) return py::make_tuple(-1, -1);
  const long first_c = long(count_chars(t.data, first));
  return py::make_tuple(first_c, first_c + long(count_chars(t.data + first, last - first)));
}

size_t token_length(const TokenizerCore& core, uint32_t id) {
  const auto& off = core.model().offsets();
  if (core.model().has(id)) return off[id + 1] - off[id];
  for (const Special& sp : core.specials())
    if (sp.id == id) return sp.bytes.size();
  throw py::key_error(std::to_string(id));
}

// Tokens of text and the code point offset (plus base) where each one ends; a token ending
// inside a character ends after it (so the token that completes a character ends there too,
// and exactly the tokens before a character boundary have ends at or before it).
py::tuple encode_tail(TokenizerCore& core, const SpecialPolicy& policy, const py::str& text, size_t base) {
  View t = utf8_view(text);
  Tokens tokens;
  long bad;
  {
    py::gil_scoped_release nogil;
    std::unique_ptr<PieceCache> cache = core.acquire_cache();
    bad = core.encode(t.data, t.size, policy, *cache, tokens);
    core.release_cache(std::move(cache));
  }
  if (bad >= 0) throw py::value_error("disallowed special token in text");
  py::array_t<uint32_t> out_ids(tokens.size), out_ends(tokens.size);
  uint32_t* pi = out_ids.mutable_data();
  uint32_t* pe = out_ends.mutable_data();
  size_t at = 0, chars = base;
  for (size_t k = 0; k < tokens.size; ++k) {
    const uint32_t id = tokens.ids[k];
    const size_t end = at + token_length(core, id);
    for (; at < end; ++at) chars += !continuation(t.data[at]);
    pi[k] = id;
    pe[k] = uint32_t(chars);
  }
  return py::make_tuple(out_ids, out_ends);
}

uint64_t mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ull;
  h ^= h >> 27;
  h *= 0x81dadef4bc2dd44dull;
  return h ^ (h >> 33);
}

// Hash of one stride of bytes, four independent lanes of 8-byte words.
uint64_t hash_stride(const uint8_t* p, size_t n, uint64_t parent) {
  uint64_t lane[4] = {parent, parent ^ 0x9E3779B97F4A7C15ull, ~parent, parent + 0x632be59bd9b4e019ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * 0xbf58476d1ce4e5b9ull;
      lane[k] ^= lane[k] >> 29;
    }
  uint64_t h = mix(lane[0] ^ mix(lane[1] ^ mix(lane[2] ^ mix(lane[3]))));
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return mix(h ^ n);
}

// Chained hashes of the str's storage at code points (first + 1) * stride, (first + 2) *
// stride, ...: hash k covers text[:(first + k + 1) * stride] and continues `parent` (the hash
// at first * stride). Storage differs by kind (1, 2 or 4 bytes a code point), so the kind
// seeds the chain: a session is indexed again when its text changes kind.
py::array_t<uint64_t> checkpoint_hashes(const py::str& text, size_t stride, size_t first, uint64_t parent) {
  PyObject* o = text.ptr();
  const size_t kind = PyUnicode_KIND(o), n = PyUnicode_GET_LENGTH(o);
  const auto* data = static_cast<const uint8_t*>(PyUnicode_DATA(o));
  const size_t count = n / stride > first ? n / stride - first : 0;
  if (first == 0) parent = mix(kind);
  py::array_t<uint64_t> out(count);
  uint64_t* h = out.mutable_data();
  for (size_t k = 0; k < count; ++k)
    h[k] = parent = hash_stride(data + (first + k) * stride * kind, stride * kind, parent);
  return out;
}

}  // namespace

void register_incremental(py::module_& m) {
  m.def("common_prefix", &common_prefix, "(common prefix, len(a), len(b)) of two str, in code points.");
  m.def("unicode_kind", [](const py::str& s) { return int(PyUnicode_KIND(s.ptr())); },
        "Bytes per code point of the str's storage (1, 2 or 4).");
  m.def("has_surrogates", &has_surrogates, py::arg("text"), py::arg("start"), "Whether text[start:] holds a surrogate.");
  m.def("stable_boundaries", &stable_boundaries, py::arg("core"), py::arg("grammar"), py::arg("policy"), py::arg("old"),
        py::arg("text"), py::arg("lo"), py::arg("limit"), "(first, last) stable piece boundaries >= lo, proven from the shared text[:limit].");
  m.def("encode_tail", &encode_tail, py::arg("core"), py::arg("policy"), py::arg("text"), py::arg("base"),
        "(ids, end offsets) of text as uint32 arrays; offsets in code points, plus base.");
  m.def("checkpoint_hashes", &checkpoint_hashes, py::arg("text"), py::arg("stride"), py::arg("first"),
        py::arg("parent"), "Chained hashes of text at every stride code points after first * stride.");
}

}  // namespace zllm
