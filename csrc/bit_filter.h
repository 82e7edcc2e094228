// A one-hash Bloom filter over 64-bit hashes. The tables it guards span megabytes and a probe
// of one for a key it lacks misses every cache when cold; the filter, a few bits a key, stays
// near the core and answers most such probes with "absent".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zllm {

class BitFilter {
 public:
  // Empty, with at least `bits` bits (a power of two, at least 64).
  void reset(size_t bits) {
    int b = 6;
    while ((size_t(1) << b) < bits) ++b;
    words_.assign(size_t(1) << (b - 6), 0);
    shift_ = 64 - b;
  }
  void clear() { std::fill(words_.begin(), words_.end(), 0); }
  // By the hash's top bits, which a table indexed by its low bits leaves independent.
  void add(uint64_t h) { words_[bit(h) >> 6] |= uint64_t(1) << (bit(h) & 63); }
  bool may_hold(uint64_t h) const { return (words_[bit(h) >> 6] >> (bit(h) & 63)) & 1; }
  void prefetch(uint64_t h) const { __builtin_prefetch(&words_[bit(h) >> 6]); }

 private:
  uint64_t bit(uint64_t h) const { return h >> shift_; }
  std::vector<uint64_t> words_;
  int shift_ = 63;
};

}  // namespace zllm
