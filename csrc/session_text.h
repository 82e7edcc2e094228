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

class Divergence;
class ScanHelper;

class SessionText {
 public:
  static constexpr size_t kChunk = 256;
  // Prompts this long are compared on two threads (scan_helper.h), in segments of kSegment
  // code points (16K, ~3 us each: short enough that the caller never waits long for the
  // helper's last one).
  static constexpr size_t kParallelFrom = 256 * 1024;
  static constexpr size_t kSegment = 64 * kChunk;

  explicit SessionText(PyObject* s) { replace_from(s, 0); }
  SessionText(const SessionText& o) : data_(o.data_), chunks_(o.chunks_), size_(o.size_) {}
  // A moved-from text is never one a Divergence reads (only fresh texts are moved).
  SessionText(SessionText&& o) noexcept
      : data_(std::move(o.data_)), chunks_(std::move(o.chunks_)), size_(o.size_) {}

  size_t size() const { return size_; }
  size_t nbytes() const { return data_.capacity() + chunks_.capacity() * sizeof(Chunk); }
  // Length (code points) of the common prefix of this text and s.
  size_t common_prefix(const StrStorage& s) const;
  // This text becomes s, which shares its first `shared` code points: O(len(s) - shared).
  // Finishes a Divergence still comparing against the old text first.
  void replace_from(PyObject* s, size_t shared);
  // UTF-8 of the code points [from, to) (clipped to the text).
  std::string utf8(size_t from, size_t to) const;

 private:
  struct Chunk {
    uint32_t offset;  // into data_
    uint32_t width;   // bytes a code point
  };
  size_t chunk_size(size_t k) const { return std::min(kChunk, size_ - k * kChunk); }
  uint32_t code_point(const Chunk& c, size_t i) const;
  size_t common_prefix(const StrStorage& s, size_t from, size_t to) const;
  // Whether segment k of this text equals s's, both clipped to their first n code points.
  bool same_segment(const StrStorage& s, size_t k, size_t n) const;
  friend class Divergence;

  std::vector<uint8_t> data_;
  std::vector<Chunk> chunks_;
  size_t size_ = 0;
  mutable Divergence* comparing_ = nullptr;  // a Divergence whose helper may be reading this text
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
  // The proven divergence: waits for the head's proof (helping with it) when pending. Holds
  // the helper until then, so other long scans run on their callers alone meanwhile.
  size_t verified();

 private:
  const SessionText& text_;
  const StrStorage s_;
  const pid_t pid_;
  ScanHelper* helper_ = nullptr;
  size_t at_ = 0, head_ = 0;  // head_: the code points the helper proves
  bool pending_ = false;
  std::function<bool(size_t)> segment_ok_;
};

}  // namespace zllm
