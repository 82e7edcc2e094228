// A tokenization session's token ids and the code point offset where each token ends, in
// growable buffers: replacing the tail after token k costs O(new tokens), amortised. The
// buffers are numpy arrays and Python gets read-only views of them, which never change:
// appending writes past every view's end, and rewriting tokens a live view shows first moves
// the run to fresh buffers (copy on write). So a server hands a prompt's ids on without a
// copy, and pays one only when a request still holds them as its session moves on.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace zllm {

class TokenRun {
 public:
  static constexpr size_t kHeadroom = 8;  // a new run's room for appends: 1/8 of its size
  TokenRun() : ids_(0), ends_(0) {}
  TokenRun(const TokenRun&) = delete;  // two runs sharing buffers would write into each other
  TokenRun(TokenRun&&) = default;
  TokenRun& operator=(TokenRun&&) = default;

  size_t size() const { return size_; }
  size_t nbytes() const { return size_t(ids_.nbytes() + ends_.nbytes()); }
  const uint32_t* ids() const { return ids_.data(); }
  const uint32_t* ends() const { return ends_.data(); }
  // Python views of the first size() entries (read-only, sharing the buffers).
  pybind11::array_t<uint32_t> ids_view() const { return view(ids_); }
  pybind11::array_t<uint32_t> ends_view() const { return view(ends_); }

  // Keeps the first k tokens and makes room for n more after them; returns where they go
  // (ids, ends). Call with the GIL held (it reads the buffers' reference counts).
  std::pair<uint32_t*, uint32_t*> keep_and_extend(size_t k, size_t n) {
    k = std::min(k, size_);
    const size_t capacity = size_t(ids_.size());
    const bool shown = k < exposed_ && (Py_REFCNT(ids_.ptr()) > 1 || Py_REFCNT(ends_.ptr()) > 1);
    if (shown || k + n > capacity) {
      // Grown geometrically, and a new run leaves room for the appends that follow: growing a
      // 1M-character run copies ~2.4 MB into freshly mapped pages (~0.45 ms of page faults),
      // which its first resend would otherwise pay.
      const size_t wanted = k + n + (k + n) / kHeadroom;
      const size_t grown_to = k + n > capacity ? std::max({wanted, 2 * capacity, size_t(256)}) : capacity;
      ids_ = copied(ids_, k, grown_to);
      ends_ = copied(ends_, k, grown_to);
      exposed_ = 0;
    }
    size_ = k + n;
    return {data(ids_) + k, data(ends_) + k};
  }

  TokenRun prefix(size_t k) const {
    TokenRun out;
    k = std::min(k, size_);
    auto [ids, ends] = out.keep_and_extend(0, k);
    std::memcpy(ids, ids_.data(), k * sizeof(uint32_t));
    std::memcpy(ends, ends_.data(), k * sizeof(uint32_t));
    return out;
  }

 private:
  // The buffers are read-only arrays over memory a capsule owns: numpy then lets no view of
  // them (nor the buffers themselves) be made writable, and only this class writes them,
  // through the raw pointer.
  static uint32_t* data(const pybind11::array_t<uint32_t>& a) {
    return reinterpret_cast<uint32_t*>(pybind11::detail::array_proxy(a.ptr())->data);
  }
  static void freeze(const pybind11::array_t<uint32_t>& a) {
    pybind11::detail::array_proxy(a.ptr())->flags &= ~pybind11::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  static pybind11::array_t<uint32_t> copied(const pybind11::array_t<uint32_t>& a, size_t keep, size_t capacity) {
    auto* memory = new uint32_t[capacity];
    std::memcpy(memory, a.data(), keep * sizeof(uint32_t));
    pybind11::capsule owner(memory, [](void* p) { delete[] static_cast<uint32_t*>(p); });
    pybind11::array_t<uint32_t> out({capacity}, {sizeof(uint32_t)}, memory, owner);
    freeze(out);
    return out;
  }
  pybind11::array_t<uint32_t> view(const pybind11::array_t<uint32_t>& a) const {
    pybind11::array_t<uint32_t> v({size_}, {sizeof(uint32_t)}, a.data(), a);
    freeze(v);
    exposed_ = std::max(exposed_, size_);
    return v;
  }

  pybind11::array_t<uint32_t> ids_, ends_;
  size_t size_ = 0;
  mutable size_t exposed_ = 0;  // the longest view handed out of the current buffers
};

}  // namespace zllm
