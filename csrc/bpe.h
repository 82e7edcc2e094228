// Byte-level BPE over token ids: a vocabulary (bytes <-> id) and a merge table
// (left id, right id) -> (priority, merged id). tiktoken vocabularies derive the table from
// their ranks (priority = rank of the merged token); Hugging Face ones give it as `merges`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bit_filter.h"
#include "huge_pages.h"

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
  HugeVector<Slot> slots_;
  uint64_t mask_ = 0;
  // Most pieces that are no token are turned away by 16 bits a token (about 3% pass).
  BitFilter filter_;
};

struct Merge {
  uint32_t priority;  // kNoMerge when the pair does not merge
  uint32_t merged;
};
constexpr uint32_t kNoMerge = UINT32_MAX;
constexpr uint32_t kNoToken = UINT32_MAX;  // byte_ids_ of a byte the vocabulary has no token for

// (left id, right id) -> priority in one 8-byte slot: both ids (20 bits each) above the
// priority (24 bits), so the table is half the bytes of a {pair, Merge} slot and sized by the
// pairs it holds -- cold merging probes it several times per byte and it should stay in L2.
// The merged id is the priority itself (tiktoken ranks) or looked up by priority (Hugging Face
// merges, whose priority is the merge's index), only for the pair that merges.
class MergeTable {
 public:
  static constexpr uint32_t kMaxId = 1u << 20, kMaxPriority = (1u << 24) - 1;

  MergeTable() { rehash(16); }  // never without slots: finds run while it fills

  void insert(uint32_t left, uint32_t right, Merge m);  // a later insert of a pair wins
  void shrink_to_fit();                                 // once, after the last insert
  // The pair's priority, or kNoMerge.
  uint32_t priority(uint32_t left, uint32_t right) const {
    const uint64_t key = pair_key(left, right);
    if (!filter_.may_hold(mix(key))) return kNoMerge;
    for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if ((s >> 24) == key) return uint32_t(s & kMaxPriority);
      if (!s) return kNoMerge;
    }
  }
  // Brings in the lines priority(left, right) reads, ahead of it.
  void prefetch(uint32_t left, uint32_t right) const {
    const uint64_t key = pair_key(left, right);
    filter_.prefetch(mix(key));
    __builtin_prefetch(&slots_[slot_of(key)]);
  }
  // The id a merge of this priority makes.
  uint32_t merged(uint32_t priority) const { return merged_.empty() ? priority : merged_[priority]; }

 private:
  // +1 so that no occupied slot is 0 (the empty mark).
  static uint64_t pair_key(uint32_t left, uint32_t right) { return ((uint64_t(left) << 20) | right) + 1; }
  static uint64_t mix(uint64_t key) { return key * 0x9E3779B97F4A7C15ull; }
  uint64_t slot_of(uint64_t key) const { return (mix(key) >> 20) & mask_; }
  void rehash(size_t slots);
  HugeVector<uint64_t> slots_;  // key << 24 | priority, 0 = empty
  // Most pairs a merge asks about do not merge, and when cold their probes of the slots were
  // most of the lines merging touched (r50k code: 11,000 distinct such pairs, 4,400 that
  // merge); 4 bits a slot (about 10 a pair) let 9% of them through.
  BitFilter filter_;
  std::vector<uint32_t> merged_;  // priority -> merged id when they differ, else empty
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
  // shortcut, no piece cache).
  uint32_t* merge(const uint8_t* p, size_t n, uint32_t* w) const;
  size_t num_tokens() const { return offsets_.size() - 1; }
  bool has(uint32_t id) const { return id + 1 < offsets_.size() && offsets_[id + 1] > offsets_[id]; }
  std::string token_bytes(uint32_t id) const { return arena_.substr(offsets_[id], offsets_[id + 1] - offsets_[id]); }
  const std::string& arena() const { return arena_; }
  const std::vector<uint32_t>& offsets() const { return offsets_; }

 private:
  void derive_merges_from_ranks();
  void fill_byte_priorities();  // from merges_
  void insert_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges);
  uint32_t find(const uint8_t* p, size_t n, uint64_t h) const {
    return index_.find(p, n, h, offsets_.data(), arena_.data());
  }
  uint32_t* merge_small(const uint8_t* p, size_t n, uint32_t* w) const;
  // The priority of two single-byte tokens, from a dense table: every merge starts with these.
  uint32_t byte_priority(uint8_t a, uint8_t b) const { return byte_priorities_[a << 8 | b]; }
  uint32_t* merge_heap(const uint8_t* p, size_t n, uint32_t* w) const;

  std::string arena_;
  std::vector<uint32_t> offsets_;  // token id -> [offsets_[id], offsets_[id + 1])
  TokenIndex index_;
  MergeTable merges_;
  uint32_t byte_ids_[256];
  std::vector<uint32_t> byte_priorities_;  // [first byte << 8 | second byte]
  bool whole_piece_first_;
};

}  // namespace zllm
