// Per-worker cache of merged pieces: agent contexts repeat identifiers and indentation, so
// most multi-token pieces are merged once. Bounded: cleared whole when full (cheap, and a
// served context refills it in one pass).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace zllm {

class PieceCache {
 public:
  static constexpr size_t kMaxEntries = size_t(1) << 17;
  static constexpr size_t kMaxPieceBytes = 1024;

  PieceCache() : slots_(2 * kMaxEntries, 0) {}

  bool find(const uint8_t* p, size_t n, uint64_t h, std::vector<uint32_t>& out) const {
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      uint32_t s = slots_[i];
      if (!s) return false;
      const Entry& e = entries_[s - 1];
      if (e.hash == h && e.key_len == n && std::memcmp(keys_.data() + e.key_off, p, n) == 0) {
        out.insert(out.end(), ids_.begin() + e.ids_off, ids_.begin() + e.ids_off + e.ids_len);
        return true;
      }
    }
  }

  void insert(const uint8_t* p, size_t n, uint64_t h, const uint32_t* ids, size_t m) {
    if (n > kMaxPieceBytes) return;
    if (entries_.size() == kMaxEntries) clear();
    size_t i = h & (slots_.size() - 1);
    while (slots_[i]) i = (i + 1) & (slots_.size() - 1);
    entries_.push_back(Entry{h, uint32_t(keys_.size()), uint32_t(n), uint32_t(ids_.size()), uint32_t(m)});
    slots_[i] = uint32_t(entries_.size());
    keys_.append(reinterpret_cast<const char*>(p), n);
    ids_.insert(ids_.end(), ids, ids + m);
  }

 private:
  void clear() {
    std::fill(slots_.begin(), slots_.end(), 0);
    entries_.clear();
    keys_.clear();
    ids_.clear();
  }
  struct Entry {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, ids_len;
  };
  std::vector<uint32_t> slots_;  // entry index + 1, 0 = empty
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<uint32_t> ids_;
};

}  // namespace zllm
