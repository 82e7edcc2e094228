#include "session_text.h"

#include "mix64.h"
#include "scan_helper.h"

#include <pybind11/pybind11.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace py = pybind11;

namespace zllm {

template <class Char>
void append_utf8(const Char* p, size_t n, std::string& out) {
  const size_t at = out.size();
  out.resize(at + n * std::min<size_t>(4, sizeof(Char) + 1));
  auto* w = reinterpret_cast<uint8_t*>(out.data()) + at;
  for (size_t i = 0; i < n; ++i) {
    // Agent text is mostly ASCII even in a str stored at 4 bytes: copy such runs 8 at a time.
    while (i + 8 <= n) {
      uint32_t any = 0;
      for (size_t k = 0; k < 8; ++k) any |= uint32_t(p[i + k]);
      if (any >= 0x80) break;
      for (size_t k = 0; k < 8; ++k) w[k] = uint8_t(p[i + k]);
      w += 8;
      i += 8;
    }
    if (i == n) break;
    const uint32_t c = p[i];
    if (c < 0x80) {
      *w++ = uint8_t(c);
    } else if (c < 0x800) {
      *w++ = uint8_t(0xC0 | (c >> 6));
      *w++ = uint8_t(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      *w++ = uint8_t(0xE0 | (c >> 12));
      *w++ = uint8_t(0x80 | ((c >> 6) & 0x3F));
      *w++ = uint8_t(0x80 | (c & 0x3F));
    } else {
      *w++ = uint8_t(0xF0 | (c >> 18));
      *w++ = uint8_t(0x80 | ((c >> 12) & 0x3F));
      *w++ = uint8_t(0x80 | ((c >> 6) & 0x3F));
      *w++ = uint8_t(0x80 | (c & 0x3F));
    }
  }
  out.resize(size_t(w - reinterpret_cast<uint8_t*>(out.data())));
}

template void append_utf8<uint8_t>(const uint8_t*, size_t, std::string&);
template void append_utf8<uint16_t>(const uint16_t*, size_t, std::string&);
template void append_utf8<uint32_t>(const uint32_t*, size_t, std::string&);

void append_utf8(const StrStorage& s, size_t from, size_t to, std::string& out) {
  switch (s.kind) {
    case 1: return append_utf8(static_cast<const uint8_t*>(s.data) + from, to - from, out);
    case 2: return append_utf8(static_cast<const uint16_t*>(s.data) + from, to - from, out);
    default: return append_utf8(static_cast<const uint32_t*>(s.data) + from, to - from, out);
  }
}

// Whether a[0, n) and b[0, n) hold the same code points. A branch-free reduction, so the
// compiler vectorises it; the widening pairs get AVX-512 and AVX2 clones picked at load time (one
// vpmovzx per 8 or 16 characters of a prompt stored at 4 or 2 bytes, 16 or 32 with AVX-512).
template <class A, class B>
inline __attribute__((always_inline)) bool same_run(const A* a, const B* b, size_t n) {
  uint32_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= uint32_t(a[i]) ^ uint32_t(b[i]);
  return diff == 0;
}


#if defined(__x86_64__) && defined(__linux__) && !defined(__clang__) && __GNUC__ >= 11
#define ZLLM_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), noinline))
#else
#define ZLLM_SIMD_CLONES __attribute__((noinline))
#endif

ZLLM_SIMD_CLONES bool same_1_2(const uint8_t* a, const uint16_t* b, size_t n) { return same_run(a, b, n); }
ZLLM_SIMD_CLONES bool same_1_4(const uint8_t* a, const uint32_t* b, size_t n) { return same_run(a, b, n); }
ZLLM_SIMD_CLONES bool same_2_4(const uint16_t* a, const uint32_t* b, size_t n) { return same_run(a, b, n); }

namespace {

// 64 independent 32-bit lanes, code point i feeding lane i % 64: a loop the compiler turns into
// a few vector multiplies per 64 code points with enough of them in flight to keep up with
// memory. Each step is a bijection of its lane, so a lane loses nothing until the final fold.
template <class Char>
inline __attribute__((always_inline)) uint64_t lanes_hash(const Char* p, size_t n) {
  constexpr size_t kLanes = 64;
  uint32_t lane[kLanes];
  for (size_t k = 0; k < kLanes; ++k) lane[k] = uint32_t(k) * 0x9E3779B9u + 1;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) {
      const uint32_t x = (lane[k] ^ uint32_t(p[i + k])) * 0x85ebca6bu;
      lane[k] = x ^ (x >> 15);
    }
  uint64_t h = mix64(n);
  for (size_t k = 0; k < kLanes; k += 2) h = mix64(h ^ (uint64_t(lane[k]) | uint64_t(lane[k + 1]) << 32));
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return mix64(h);
}

}  // namespace

ZLLM_SIMD_CLONES uint64_t lanes_hash_1(const uint8_t* p, size_t n) { return lanes_hash(p, n); }
ZLLM_SIMD_CLONES uint64_t lanes_hash_2(const uint16_t* p, size_t n) { return lanes_hash(p, n); }
ZLLM_SIMD_CLONES uint64_t lanes_hash_4(const uint32_t* p, size_t n) { return lanes_hash(p, n); }

uint64_t hash_code_points(const StrStorage& s, size_t at, size_t n) {
  switch (s.kind) {
    case 1: return lanes_hash_1(static_cast<const uint8_t*>(s.data) + at, n);
    case 2: return lanes_hash_2(static_cast<const uint16_t*>(s.data) + at, n);
    default: return lanes_hash_4(static_cast<const uint32_t*>(s.data) + at, n);
  }
}

namespace {

// Whether chunks stored back to back at width `wa` equal s[at, at + n).
bool same_chunks(const uint8_t* a, uint32_t wa, const StrStorage& s, size_t at, size_t n) {
  const uint32_t ws = uint32_t(s.kind);
  if (wa == ws) return std::memcmp(a, s.bytes(at), n * wa) == 0;
  if (wa > ws) return false;  // the chunk holds a character s's storage cannot
  const auto* a2 = reinterpret_cast<const uint16_t*>(a);
  const auto* s2 = static_cast<const uint16_t*>(s.data) + at;
  const auto* s4 = static_cast<const uint32_t*>(s.data) + at;
  if (wa == 1) return ws == 2 ? same_1_2(a, s2, n) : same_1_4(a, s4, n);
  return same_2_4(a2, s4, n);
}

template <class Char>
uint32_t max_code_point(const Char* p, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, uint32_t(p[i]));
  return m;
}

template <class Dst, class Src>
void narrow(const Src* src, size_t n, uint8_t* out) {
  auto* dst = reinterpret_cast<Dst*>(out);
  for (size_t i = 0; i < n; ++i) dst[i] = Dst(src[i]);
}

// Copies s[at, at + n) into out at `width` bytes a code point.
void store(const StrStorage& s, size_t at, size_t n, uint32_t width, uint8_t* out) {
  if (width == uint32_t(s.kind)) {
    std::memcpy(out, s.bytes(at), n * width);
  } else if (s.kind == 2) {
    narrow<uint8_t>(static_cast<const uint16_t*>(s.data) + at, n, out);
  } else if (width == 1) {
    narrow<uint8_t>(static_cast<const uint32_t*>(s.data) + at, n, out);
  } else {
    narrow<uint16_t>(static_cast<const uint32_t*>(s.data) + at, n, out);
  }
}

uint32_t narrowest_width(const StrStorage& s, size_t at, size_t n) {
  if (s.kind == 1) return 1;
  const uint32_t m = s.kind == 2 ? max_code_point(static_cast<const uint16_t*>(s.data) + at, n)
                                 : max_code_point(static_cast<const uint32_t*>(s.data) + at, n);
  return m < 0x100 ? 1 : m < 0x10000 ? 2 : 4;
}

}  // namespace

namespace {

std::mutex dropped_mu;
std::vector<PyObject*> dropped;  // references let go of without the GIL, to decrement with it

}  // namespace

PyRef::~PyRef() {
  if (PyGILState_Check()) {
    Py_DECREF(o_);
    return;
  }
  std::lock_guard<std::mutex> lock(dropped_mu);
  dropped.push_back(o_);
}

void release_dropped_refs() {
  std::vector<PyObject*> now;
  {
    std::lock_guard<std::mutex> lock(dropped_mu);
    now.swap(dropped);
  }
  for (PyObject* o : now) Py_DECREF(o);
}

uint32_t SessionText::Text::code_point(const Chunk& c, size_t i) const {
  const uint8_t* p = data.data() + c.offset;
  if (c.width == 1) return p[i];
  if (c.width == 2) return reinterpret_cast<const uint16_t*>(p)[i];
  return reinterpret_cast<const uint32_t*>(p)[i];
}

bool SessionText::Text::same_segment(const StrStorage& s, size_t k, size_t n) const {
  const size_t at = k * kSegment, end = std::min(n, at + kSegment);
  return common_prefix(s, at, end) == end;
}

std::function<bool(size_t)> SessionText::segments(PyObject* str, size_t n) const {
  return [text = std::shared_ptr<const Text>(text_), s = StrStorage(str), pin = std::make_shared<PyRef>(str),
          n](size_t k) { return text->same_segment(s, k, n); };
}

size_t SessionText::common_prefix(PyObject* str) const {
  release_dropped_refs();
  const StrStorage s(str);
  const size_t n = std::min(text_->size, s.size);
  ScanHelper* helper = n >= kParallelFrom ? ScanHelper::get() : nullptr;
  const size_t failed = first_failing(helper, (n + kSegment - 1) / kSegment, segments(str, n));
  return failed * kSegment >= n ? n : text_->common_prefix(s, failed * kSegment, n);
}

Divergence::Divergence(const SessionText& text, PyObject* str) : text_(text.text_), s_(str), pid_(getpid()) {
  release_dropped_refs();
  const size_t n = std::min(text_->size, s_.size), segment = SessionText::kSegment;
  helper_ = n >= kHelpedFrom ? ScanHelper::get() : nullptr;
  head_ = n > kTail ? (n - kTail) / segment * segment : 0;
  if (helper_ != nullptr) {
    scan_ = std::make_shared<Scan>(head_ / segment, text.segments(str, head_));
    pending_ = helper_->post(scan_);
  }
  if (!pending_) {
    scan_.reset();
    at_ = text.common_prefix(str);
    text_.reset();
    return;
  }
  at_ = text_->common_prefix(s_, head_, n);
}

size_t Divergence::verified() {
  if (!pending_) return at_;
  // A child forked meanwhile has no helper thread: it proves the head alone.
  const size_t from = getpid() == pid_ ? scan_->finish() * SessionText::kSegment : 0;
  if (getpid() == pid_) helper_->release();
  scan_.reset();  // the helper may hold it a little longer, and the text with it
  const size_t proven = text_->common_prefix(s_, std::min(from, head_), head_);
  if (proven < head_) at_ = proven;
  text_.reset();
  pending_ = false;  // last: `pending` false means `at` is proven
  return at_;
}

// Common prefix within [from, to), from at a chunk start: the position of the first differing
// code point, or `to`. Chunks of one width lie back to back in data, so a run of them is
// compared in one call: a call per 256-character chunk cost more than reading it from cache
// (250K characters in cache: 27.8 us that way, 22.2 us by runs; from memory both read alike).
size_t SessionText::Text::common_prefix(const StrStorage& s, size_t from, size_t to) const {
  for (size_t k = from / kChunk, at = from; at < to;) {
    const Chunk& c = chunks[k];
    size_t end = k + 1;
    while (end * kChunk < to && chunks[end].width == c.width) ++end;
    const size_t len = std::min(end * kChunk, to) - at;
    if (!same_chunks(data.data() + c.offset, c.width, s, at, len)) {
      size_t i = 0;
      while (code_point(c, i) == s.at(at + i)) ++i;  // within the run: c's storage continues
      return at + i;
    }
    at += len;
    k = end;
  }
  return to;
}

void SessionText::replace_from(PyObject* str, size_t shared) {
  const StrStorage s(str);
  const Text& old = *text_;
  const size_t first = std::min({shared, old.size, s.size}) / kChunk;  // chunks before it are kept
  // Widths first, checked against the 4 GB limit before anything changes; then one resize.
  const size_t count = (s.size + kChunk - 1) / kChunk;
  std::vector<uint32_t> widths(count > first ? count - first : 0);
  const size_t kept = first < old.chunks.size() ? old.chunks[first].offset : old.data.size();  // bytes
  size_t end = kept;
  for (size_t k = first; k < count; ++k) {
    const size_t at = k * kChunk;
    widths[k - first] = narrowest_width(s, at, std::min(kChunk, s.size - at));
    end += std::min(kChunk, s.size - at) * widths[k - first];
  }
  if (end > UINT32_MAX) throw std::length_error("session text over 4 GB");
  if (text_.use_count() > 1) {  // a copy or a scan still reads it: this text gets its own
    // At the old capacity, as a change in place has: assigned at the kept size, the append
    // below regrew it, copying the kept text (~1 MB at 1M characters) a second time: 0.111 ms
    // then, 0.058 ms so. A busy host takes this path in 1-10 calls of 400 (a helper preempted
    // inside a segment still holds the text).
    auto own = std::make_shared<Text>();
    own->chunks.reserve(old.chunks.capacity());
    own->chunks.assign(old.chunks.begin(), old.chunks.begin() + std::min(first, old.chunks.size()));
    own->data.reserve(old.data.capacity());
    own->data.assign(old.data.begin(), old.data.begin() + kept);
    text_ = std::move(own);
  }
  Text& t = *text_;
  if (t.data.capacity() < end) {  // a text built afresh leaves room for the appends that follow
    t.data.reserve(std::max(end + end / kHeadroom, 2 * t.data.capacity()));
    t.chunks.reserve(std::max(count + count / kHeadroom, 2 * t.chunks.capacity()));
  }
  size_t offset = kept;
  t.chunks.resize(count);
  t.data.resize(end);
  for (size_t k = first; k < count; ++k) {
    const size_t at = k * kChunk, n = std::min(kChunk, s.size - at);
    t.chunks[k] = Chunk{uint32_t(offset), widths[k - first]};
    store(s, at, n, t.chunks[k].width, t.data.data() + offset);
    offset += n * t.chunks[k].width;
  }
  t.size = s.size;
}

std::string SessionText::utf8(size_t from, size_t to) const {
  std::string out;
  const Text& t = *text_;
  to = std::min(to, t.size);
  for (size_t at = from; at < to;) {
    const size_t k = at / kChunk, i = at - k * kChunk, n = std::min(t.chunk_size(k), i + (to - at)) - i;
    const Chunk& c = t.chunks[k];
    const uint8_t* p = t.data.data() + c.offset;
    if (c.width == 1) append_utf8(p + i, n, out);
    else if (c.width == 2) append_utf8(reinterpret_cast<const uint16_t*>(p) + i, n, out);
    else append_utf8(reinterpret_cast<const uint32_t*>(p) + i, n, out);
    at += n;
  }
  return out;
}

void register_session_text(py::module_& m) {
  // The scan primitive itself, over a Python predicate (which the helper calls holding the GIL):
  // what its tests use to hold the helper inside a segment.
  m.def("first_failing", [](size_t count, const py::object& ok) {
    PyObject* f = ok.ptr();
    return first_failing(ScanHelper::get(), count, [f, pin = std::make_shared<PyRef>(f)](size_t s) {
      py::gil_scoped_acquire gil;
      PyObject* r = PyObject_CallFunction(f, "n", Py_ssize_t(s));
      const int truth = r != nullptr ? PyObject_IsTrue(r) : -1;
      Py_XDECREF(r);
      if (truth < 0) PyErr_Clear();  // a predicate that raises fails its segment
      return truth == 1;
    });
  }, py::arg("count"), py::arg("ok"),
        "The smallest s in [0, count) with ok(s) false (or count): on this thread and the scan helper's.");
  py::class_<Divergence>(m, "Divergence", "Where a prompt diverges from a session's text (csrc/session_text.h).")
      .def_property_readonly("at", &Divergence::at, "The provisional divergence, or the proven one once verified.")
      .def_property_readonly("pending", &Divergence::pending)
      .def("verified", &Divergence::verified, "The proven divergence (finishing the head's proof, never waiting for the helper).");
  py::class_<SessionText>(m, "SessionText", "A session's text in chunks of the narrowest width (csrc/session_text.h).")
      .def(py::init([](const py::str& s) { return SessionText(s.ptr()); }), py::arg("text"))
      .def("__len__", &SessionText::size)
      .def_property_readonly("nbytes", &SessionText::nbytes)
      .def("common_prefix", [](const SessionText& t, const py::str& s) { return t.common_prefix(s.ptr()); },
           py::arg("text"), "Length of the common prefix with text, in code points.")
      .def("replace_from", [](SessionText& t, const py::str& s, size_t shared) { t.replace_from(s.ptr(), shared); },
           py::arg("text"), py::arg("shared"), "Becomes text, which shares the first `shared` code points.")
      .def("compare", [](const SessionText& t, const py::str& s) { return std::make_unique<Divergence>(t, s.ptr()); },
           py::arg("text"), py::keep_alive<0, 1>(), py::keep_alive<0, 2>(),
           "Where text diverges from this text: provisional while the helper thread proves the head.")
      .def("copy", [](const SessionText& t) { return SessionText(t); })
      .def("__str__", [](const SessionText& t) { return t.utf8(0, t.size()); });
}

}  // namespace zllm
