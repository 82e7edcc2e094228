// A tokenization session's text, stored compactly so that checking a resent prompt against it
// is cheap. CPython stores a whole str at the width of its widest character, so one emoji in a
// 1M-character agent context makes every character 4 bytes. SessionText keeps chunks of
// kChunk code points, each at the narrowest width that holds it (1, 2 or 4 bytes): such a
// context costs ~1 byte a character, and comparing a new prompt against it reads the prompt's
// storage plus ~1 byte a character instead of twice the prompt's storage.
#pragma once

#include <Python.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zllm {

// Code points of a str's storage, by kind (1, 2 or 4 bytes each).
struct StrStorage {
  const void* data;
  size_t size;  // code points
  int kind;

  explicit StrStorage(PyObject* s)
      : data(PyUnicode_DATA(s)), size(size_t(PyUnicode_GET_LENGTH(s))), kind(PyUnicode_KIND(s)) {}
  uint32_t at(size_t i) const { return PyUnicode_READ(kind, data, i); }
  const uint8_t* bytes(size_t i) const { return static_cast<const uint8_t*>(data) + i * size_t(kind); }
};

// Appends the UTF-8 of code points p[0, n) to out (surrogates as 3 bytes: session texts hold none).
template <class Char>
void append_utf8(const Char* p, size_t n, std::string& out);
void append_utf8(const StrStorage& s, size_t from, size_t to, std::string& out);

// Hash of the code points s[at, at + n), the same at every storage width (not cryptographic).
uint64_t hash_code_points(const StrStorage& s, size_t at, size_t n);

class Scan;
class ScanHelper;

// A strong reference that may be let go on a thread without the GIL (the scan helper's): the
// decrement then waits for the next call that holds the GIL (release_dropped_refs).
class PyRef {
 public:
  explicit PyRef(PyObject* o) : o_(o) { Py_INCREF(o); }  // with the GIL
  ~PyRef();
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;

 private:
  PyObject* o_;
};

void release_dropped_refs();  // with the GIL

class SessionText {
 public:
  static constexpr size_t kChunk = 256;
  // Prompts this long are compared on two threads (scan_helper.h), in segments of kSegment
  // code points (16K, ~3 us each: what the caller redoes of a segment the helper holds).
  static constexpr size_t kParallelFrom = 256 * 1024;
  static constexpr size_t kSegment = 64 * kChunk;
  // A text built afresh keeps 1/8 of its size free for appends: outgrowing its storage at its
  // first resend would copy it into freshly mapped pages (page faults, ~0.2 ms at 1 MB).
  static constexpr size_t kHeadroom = 8;

  explicit SessionText(PyObject* s) : text_(std::make_shared<Text>()) { replace_from(s, 0); }
  // Copies (a session's fork) share the code points until one of them changes.
  SessionText(const SessionText&) = default;
  SessionText(SessionText&&) noexcept = default;

  size_t size() const { return text_->size; }
  size_t nbytes() const { return text_->data.capacity() + text_->chunks.capacity() * sizeof(Chunk); }
  // Length (code points) of the common prefix of this text and the str s.
  size_t common_prefix(PyObject* s) const;
  // This text becomes s, which shares its first `shared` code points: O(len(s) - shared).
  void replace_from(PyObject* s, size_t shared);
  // UTF-8 of the code points [from, to) (clipped to the text).
  std::string utf8(size_t from, size_t to) const;

 private:
  struct Chunk {
    uint32_t offset;  // into data
    uint32_t width;   // bytes a code point
  };
  // The code points, in chunks at the narrowest width, shared with copies and with scans the
  // helper thread may still be reading: a change to a shared Text first makes its own.
  struct Text {
    std::vector<uint8_t> data;
    std::vector<Chunk> chunks;
    size_t size = 0;

    size_t chunk_size(size_t k) const { return std::min(kChunk, size - k * kChunk); }
    uint32_t code_point(const Chunk& c, size_t i) const;
    size_t common_prefix(const StrStorage& s, size_t from, size_t to) const;
    // Whether segment k of this text equals s's, both clipped to their first n code points.
    bool same_segment(const StrStorage& s, size_t k, size_t n) const;
  };
  // The predicate of a scan of s's segments below n against this text, owning both.
  std::function<bool(size_t)> segments(PyObject* s, size_t n) const;
  friend class Divergence;

  std::shared_ptr<Text> text_;
};

// Where a prompt diverges from a session's text, known early. A resent prompt nearly always
// diverges in its last turn (in the agent trace, 90% of calls within 3.6K characters of the old
// end), so the caller compares the last kTail code points at once and takes the result as
// provisional, while the helper thread (scan_helper.h) proves the head equal; the caller
// repairs from the provisional point meanwhile and calls verified() before it changes
// anything. A prompt under kHelpedFrom is compared at once, whole: the helper wakes ~40 us
// after the post, too late to take part of so short a head.
class Divergence {
 public:
  static constexpr size_t kTail = 16 * 1024, kHelpedFrom = 128 * 1024;

  Divergence(const SessionText& text, PyObject* s);
  ~Divergence() { verified(); }
  Divergence(const Divergence&) = delete;
  Divergence& operator=(const Divergence&) = delete;

  // The provisional divergence, or after verified() the proven one.
  size_t at() const { return at_; }
  bool pending() const { return pending_; }
  // The proven divergence: finishes the head's proof when pending (never waiting for the
  // helper). Holds the helper until then, so other long scans run on their callers alone.
  size_t verified();

 private:
  // The text as it was compared, whatever it becomes, until the divergence is proven (then let
  // go, so the session's next change need not copy it).
  std::shared_ptr<const SessionText::Text> text_;
  const StrStorage s_;  // the str is kept alive by the binding (and by the scan's own reference)
  const pid_t pid_;
  ScanHelper* helper_ = nullptr;
  std::shared_ptr<Scan> scan_;  // the head's proof, while pending
  size_t at_ = 0, head_ = 0;  // head_: the code points the helper proves
  bool pending_ = false;
};

}  // namespace zllm
