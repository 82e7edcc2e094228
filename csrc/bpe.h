// Byte-level BPE over token ids: a vocabulary (bytes <-> id) and a merge table
// (left id, right id) -> (priority, merged id). tiktoken vocabularies derive the table from
// their ranks (priority = rank of the merged token); Hugging Face ones give it as `merges`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace zllm {

// The first min(n, 8) bytes of p, little-endian, zero-padded; never reads past p + n.
inline uint64_t load_prefix(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  if (n >= 8) {
    std::memcpy(&v, p, 8);
  } else if (n >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    v = lo | (uint64_t(hi) << (8 * (n - 4)));
  } else if (n > 0) {
    v = p[0] | (uint64_t(p[n / 2]) << (8 * (n / 2))) | (uint64_t(p[n - 1]) << (8 * (n - 1)));
  }
  return v;
}

uint64_t hash_bytes(const uint8_t* p, size_t n);

// Open-addressing map from a token's bytes to its id; keys live in the model's arena.
class TokenIndex {
 public:
  // Keys are token bytes arena[offsets[id], offsets[id + 1]); the index holds only ids, so
  // it stays valid when the model owning the arena moves.
  void build(const uint32_t* offsets, const char* arena, const std::vector<uint32_t>& ids);
  // Returns id + 1, or 0 when absent.
  uint32_t find(const uint8_t* p, size_t n, uint64_t h, const uint32_t* offsets, const char* arena) const;

 private:
  // A slot holds a key's first 8 bytes, so most lookups (pieces of up to 8 bytes) touch one
  // cache line and never the arena.
  struct Slot {
    uint64_t prefix;
    uint32_t len;
    uint32_t id_plus_1;  // 0 = empty
  };
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

struct Merge {
  uint32_t priority;
  uint32_t merged;
};

class MergeTable {
 public:
  void reserve(size_t n);
  void insert(uint32_t left, uint32_t right, Merge m);  // keeps the first insert of a pair
  const Merge* find(uint32_t left, uint32_t right) const;

 private:
  void grow();
  struct Slot {
    uint64_t key;  // (left << 32 | right) + 1, 0 = empty
    Merge merge;
  };
  std::vector<Slot> slots_;
  size_t size_ = 0;
  uint64_t mask_ = 0;
};

class BytePairModel {
 public:
  // tokens[id] = bytes of a mergeable token (ids without one are absent: empty string).
  // merges empty: derive from ranks (tiktoken); else (left, right) pairs in priority order.
  BytePairModel(const std::vector<std::string>& tokens,
                const std::vector<std::pair<uint32_t, uint32_t>>& merges, bool whole_piece_first);

  // The id of a piece that is one whole token, or -1.
  int64_t whole(const uint8_t* p, size_t n, uint64_t h) const;
  bool whole_piece_first() const { return whole_piece_first_; }
  // Writes the merged ids of one piece (at most n) at w and returns the end (no whole-piece
  // shortcut, no cache).
  uint32_t* merge(const uint8_t* p, size_t n, uint32_t* w) const;
  size_t num_tokens() const { return offsets_.size() - 1; }
  bool has(uint32_t id) const { return id + 1 < offsets_.size() && offsets_[id + 1] > offsets_[id]; }
  std::string token_bytes(uint32_t id) const { return arena_.substr(offsets_[id], offsets_[id + 1] - offsets_[id]); }
  const std::string& arena() const { return arena_; }
  const std::vector<uint32_t>& offsets() const { return offsets_; }

 private:
  void derive_merges_from_ranks();
  uint32_t find(const uint8_t* p, size_t n, uint64_t h) const {
    return index_.find(p, n, h, offsets_.data(), arena_.data());
  }
  uint32_t* merge_small(const uint8_t* p, size_t n, uint32_t* w) const;
  uint32_t* merge_heap(const uint8_t* p, size_t n, uint32_t* w) const;

  std::string arena_;
  std::vector<uint32_t> offsets_;  // token id -> [offsets_[id], offsets_[id + 1])
  TokenIndex index_;
  MergeTable merges_;
  uint32_t byte_ids_[256];
  bool whole_piece_first_;
};

}  // namespace zllm
