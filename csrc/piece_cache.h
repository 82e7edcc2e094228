// Per-worker caches of encoded pieces. Agent contexts repeat identifiers, indentation and
// punctuation, so most pieces were seen moments ago:
// - HotPieces: direct-mapped, pieces of up to 16 bytes, 2 MB (1 MB of slots lost a few
//   percent of the pieces of code, and prose has twice as many distinct ones), one
//   probe that usually hits in L2 -- the common case costs no vocabulary lookup at all. A new
//   cache starts as a copy of one seeded with the vocabulary's short tokens (see
//   TokenizerCore), so most new pieces that are one token hit too;
// - PieceCache: merged pieces up to kMaxPieceBytes, so BPE runs once per distinct piece.
//   A short one goes there only when the hot cache evicts it: nearly every piece new to the
//   hot cache is new to the piece cache too, and a probe of the piece cache for it would miss
//   every cache for nothing. Bounded: cleared whole when full (cheap; a served context
//   refills it in one pass).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bpe.h"
#include "huge_pages.h"

namespace zllm {

class HotPieces {
 public:
  static constexpr int kSlotBits = 16;
  static constexpr size_t kMaxBytes = 16, kSlots = size_t(1) << kSlotBits;
  static constexpr size_t kInline = 4;  // ids kept in the slot; longer encodings spill

  HotPieces() : slots_(kSlots), spill_(kMaxSpill + kMaxBytes) {}

  struct Key {
    uint64_t lo, hi;
    uint32_t len;
    uint32_t slot;
  };
  // The first n <= kMaxBytes bytes at p, zero-padded; `readable` bytes from p may be read. With
  // 16 of them (all but a text's last piece) the key is two whole loads masked to n bytes: the
  // same value as load_prefix gives, without its branches on the piece length, which
  // mispredict every few pieces.
  static Key key(const uint8_t* p, size_t n, size_t readable) {
    uint64_t lo, hi;
    if (readable < 16) {
      lo = load_prefix(p, n < 8 ? n : 8);
      hi = n > 8 ? load_prefix(p + 8, n - 8) : 0;
    } else {
      std::memcpy(&lo, p, 8);
      std::memcpy(&hi, p + 8, 8);
      lo &= kLowBytes[n < 8 ? n : 8];
      hi &= kLowBytes[n > 8 ? n - 8 : 0];
    }
    return Key{lo, hi, uint32_t(n), index(lo, hi, n)};
  }
  // Keys are made a batch ahead of their lookups and their slots prefetched, so a lookup
  // rarely waits for memory.
  void prefetch(const Key& k) const { __builtin_prefetch(&slots_[k.slot]); }
  // On a hit, writes the piece's ids at w, advances w and returns true. Writes kCopyAhead ids
  // at w even when the piece has fewer (the caller leaves that much room), so a copy has a
  // fixed size: the common one a 16-byte store, a spilled one (at most a token a byte) no
  // call to memcpy.
  static constexpr size_t kCopyAhead = kMaxBytes;
  bool find(const Key& k, uint32_t*& w) const {
    const Slot& s = slots_[k.slot];
    if ((s.lo ^ k.lo) | (s.hi ^ k.hi) | ((s.ids[0] >> kLenShift) ^ k.len)) return false;  // one branch, not three
    if (const uint32_t count = (s.ids[0] >> kCountShift) & kCountMask) {
      uint32_t ids[kInline];
      std::memcpy(ids, s.ids, sizeof(ids));
      ids[0] &= kIdMask;
      std::memcpy(w, ids, sizeof(ids));
      w += count;
    } else {
      std::memcpy(w, spill_.data() + s.ids[1], kMaxBytes * sizeof(uint32_t));
      w += s.ids[2];
    }
    return true;
  }
  // only_here: the ids came from merging and no other cache holds them (see evicts).
  void insert(const Key& k, const uint32_t* ids, size_t m, bool only_here) {
    Slot& s = slots_[k.slot];
    s = Slot{};
    if (m <= kInline) {
      if (ids[0] > kIdMask) return;
      std::memcpy(s.ids, ids, m * sizeof(uint32_t));
      s.ids[0] |= uint32_t(m) << kCountShift;
    } else {
      if (spilled_ + m > kMaxSpill) drop_spilled();
      s.ids[1] = uint32_t(spilled_);
      s.ids[2] = uint32_t(m);
      std::memcpy(spill_.data() + spilled_, ids, m * sizeof(uint32_t));
      spilled_ += m;
    }
    s.lo = k.lo;
    s.hi = k.hi;
    s.ids[0] |= (k.len << kLenShift) | (only_here ? kOnlyHere : 0);
  }
  // A piece the hot cache alone holds, about to lose its slot to k: merging it again would
  // cost far more than keeping it in the piece cache.
  struct Evicted {
    uint8_t bytes[kMaxBytes];
    uint32_t ids[kMaxBytes];
    size_t len, count;
  };
  bool evicts(const Key& k, Evicted& out) const {
    const Slot& s = slots_[k.slot];
    if (!(s.ids[0] & kOnlyHere)) return false;
    std::memcpy(out.bytes, &s.lo, 8);
    std::memcpy(out.bytes + 8, &s.hi, 8);
    out.len = s.ids[0] >> kLenShift;
    if ((out.count = (s.ids[0] >> kCountShift) & kCountMask)) {
      std::memcpy(out.ids, s.ids, sizeof(s.ids));
      out.ids[0] &= kIdMask;
    } else {
      out.count = s.ids[2];
      std::memcpy(out.ids, spill_.data() + s.ids[1], out.count * sizeof(uint32_t));
    }
    return true;
  }
  // A piece that is one token, into an empty slot only: seeding tokens in ascending ids gives
  // a slot to the lowest (most frequent) of the tokens that share it.
  void seed(const Key& k, uint32_t id) {
    if (!slots_[k.slot].ids[0]) insert(k, &id, 1, false);
  }

 private:
  static constexpr uint64_t kLowBytes[9] = {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFF,
                                            0xFFFFFFFFFFFF, 0xFFFFFFFFFFFFFF, ~uint64_t(0)};
  // A slot's first id has 23 bits (every vocabulary's ids fit 20: MergeTable::kMaxId); above
  // them kOnlyHere, how many ids are inline (3 bits; 0: they spilled, ids[1] and ids[2] give
  // where and how many) and the piece's length (5 bits, 1-16; 0 marks an empty slot).
  static constexpr int kCountShift = 24, kLenShift = 27;
  static constexpr uint32_t kIdMask = (1u << 23) - 1, kOnlyHere = 1u << 23, kCountMask = 7;
  // Spilled ids (pieces of more than kInline tokens, such as indentation that r50k encodes one
  // token a space) are kept until this many, then dropped with their slots and kept anew.
  static constexpr size_t kMaxSpill = size_t(1) << 18;
  static uint32_t index(uint64_t lo, uint64_t hi, size_t n) {  // the top bits of two products
    return uint32_t((((lo ^ n) * 0x9E3779B97F4A7C15ull) ^ (hi * 0xC2B2AE3D27D4EB4Full)) >> (64 - kSlotBits));
  }
  void drop_spilled() {
    for (Slot& s : slots_)
      if (s.ids[0] && !((s.ids[0] >> kCountShift) & kCountMask)) s = Slot{};
    spilled_ = 0;
  }
  // 32 bytes, two to a cache line: the 2 MB of slots hold twice the pieces (and seeded tokens)
  // that 64-byte slots with ten ids did.
  struct alignas(32) Slot {
    uint64_t lo = 0, hi = 0;
    uint32_t ids[kInline] = {};
  };
  HugeVector<Slot> slots_;
  std::vector<uint32_t> spill_;  // kMaxBytes more than it fills, for the fixed-size copy
  size_t spilled_ = 0;
};

class PieceCache {
 public:
  HotPieces hot;

  static constexpr size_t kMaxEntries = size_t(1) << 17;
  static constexpr size_t kMaxPieceBytes = 1024;

  explicit PieceCache(const HotPieces& seed) : hot(seed), slots_(2 * kMaxEntries, 0) { filter_.reset(kFilterBits); }

  bool find(const uint8_t* p, size_t n, uint64_t h, uint32_t*& w) const {
    if (!filter_.may_hold(h)) return false;
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      uint32_t s = slots_[i];
      if (!s) return false;
      const Entry& e = entries_[s - 1];
      if (e.hash == h && e.key_len == n && std::memcmp(keys_.data() + e.key_off, p, n) == 0) {
        std::memcpy(w, ids_.data() + e.ids_off, e.ids_len * sizeof(uint32_t));
        w += e.ids_len;
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
    filter_.add(h);
    keys_.append(reinterpret_cast<const char*>(p), n);
    ids_.insert(ids_.end(), ids, ids + m);
  }

  // A short piece into the hot cache (only_here: merged, so not in the piece cache); the one
  // it evicts moves to the piece cache when that alone would hold it.
  void insert_hot(const HotPieces::Key& k, const uint32_t* ids, size_t m, bool only_here) {
    HotPieces::Evicted e;
    if (hot.evicts(k, e)) insert(e.bytes, e.len, hash_bytes(e.bytes, e.len), e.ids, e.count);
    hot.insert(k, ids, m, only_here);
  }

 private:
  void clear() {
    std::fill(slots_.begin(), slots_.end(), 0);
    filter_.clear();
    entries_.clear();
    keys_.clear();
    ids_.clear();
  }
  struct Entry {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, ids_len;
  };
  // A piece the cache never held is turned away by 32 KB instead of a probe of the 1 MB of
  // slots (2 bits an entry when full, when 39% pass; a cold pass has few entries).
  static constexpr size_t kFilterBits = size_t(1) << 18;
  HugeVector<uint32_t> slots_;  // entry index + 1, 0 = empty
  BitFilter filter_;
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<uint32_t> ids_;
};

}  // namespace zllm
