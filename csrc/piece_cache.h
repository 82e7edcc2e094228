// Per-worker caches of encoded pieces. Agent contexts repeat identifiers, indentation and
// punctuation, so most pieces were seen moments ago:
// - HotPieces: pieces of up to 16 bytes in an open-addressed table of 64-byte lines, two
//   32-byte slots a line, one prefetched line per lookup. A new cache starts as a copy of one
//   seeded with every short token of the vocabulary (see TokenizerCore), so a short piece that
//   misses is never one token and goes straight to merging: no vocabulary probe, whose filter
//   and index lines (megabytes, cold) missed every cache, and no eviction, whose losers came
//   back as misses on every warm pass (a direct-mapped table of 65,536 slots lost 1% of the
//   pieces of code that way, each costing a vocabulary probe and a piece-cache probe). Full,
//   it starts again from its seed;
// - PieceCache: merged pieces longer than that, up to kMaxPieceBytes, so BPE runs once per
//   distinct piece. Bounded: cleared whole when full (cheap; a served context refills it in
//   one pass).
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
  static constexpr size_t kMaxBytes = 16;
  static constexpr size_t kInline = 4;  // ids kept in the slot; longer encodings spill

  // At least `slots` slots (and 16,384: 512 KB, so HugePageAllocator aligns them to huge pages
  // and each pair of slots to a cache line); twice as many whenever 3/4 are taken, up to
  // kMaxSlots.
  explicit HotPieces(size_t slots) : spill_(kMaxBytes) {
    size_t n = size_t(1) << 14;
    while (n < slots && n < kMaxSlots) n *= 2;
    resize(n);
  }
  // Ids above this are never cached (no vocabulary has them: MergeTable::kMaxId).
  static constexpr uint32_t kMaxId = (1u << 24) - 1;

  // The piece's bytes and its hash, whose top bits are its home slot: a key stays valid when
  // the table grows or starts again from its seed between its making and its lookup.
  struct Key {
    uint64_t lo, hi, hash;
    uint32_t len;
  };
  // The first n <= kMaxBytes bytes at p, zero-padded; `readable` bytes from p may be read. With
  // 16 of them (all but a text's last piece) the key is two whole loads masked to n bytes: the
  // same value as load_prefix gives, without its branches on the piece length, which
  // mispredict every few pieces.
  Key key(const uint8_t* p, size_t n, size_t readable) const {
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
    return Key{lo, hi, hash(lo, hi, n), uint32_t(n)};
  }
  // Keys are made a batch ahead of their lookups and their lines prefetched, so a lookup
  // rarely waits for memory.
  void prefetch(const Key& k) const { __builtin_prefetch(&slots_[k.hash >> shift_]); }
  // On a hit, writes the piece's ids at w and returns their end, else returns null. Writes
  // kCopyAhead ids at w even when the piece has fewer (the caller leaves that much room), so a
  // copy has a fixed size: the common one a 16-byte store, a spilled one (at most a token a
  // byte) no call to memcpy. (The end is returned, not w advanced through a reference, so the
  // caller's w stays in a register across the out-of-line further probes.)
  static constexpr size_t kCopyAhead = kMaxBytes;
  uint32_t* find(const Key& k, uint32_t* w) {
    const Slot& home = slots_[k.hash >> shift_];
    if (holds(home, k)) return copy(home, w);
    return home.empty() ? nullptr : find_further(k, w);
  }
  // A piece find() missed. False when the cache is full at its largest (nothing was added).
  bool insert(const Key& k, const uint32_t* ids, size_t m) {
    if (m <= kInline && ids[0] > kMaxId) return true;  // kept nowhere: such ids are merged each time
    if (size_ == limit_ && !grow()) return false;
    Slot s;
    s.lo = k.lo;
    s.hi = k.hi;
    if (m <= kInline) {
      std::memcpy(s.ids, ids, m * sizeof(uint32_t));
      s.ids[0] |= uint32_t(m) << kCountShift;
    } else {
      s.ids[1] = uint32_t(spill_.size() - kMaxBytes);
      s.ids[2] = uint32_t(m);
      spill_.insert(spill_.end() - kMaxBytes, ids, ids + m);
    }
    s.ids[0] |= k.len << kLenShift;
    place(s);
    return true;
  }

 private:
  static constexpr uint64_t kLowBytes[9] = {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFF,
                                            0xFFFFFFFFFFFF, 0xFFFFFFFFFFFFFF, ~uint64_t(0)};
  // A slot's first id has 24 bits (every vocabulary's ids fit 20: MergeTable::kMaxId); above
  // them how many ids are inline (3 bits; 0: they spilled, ids[1] and ids[2] give where and
  // how many) and the piece's length (5 bits, 1-16; 0 marks an empty slot).
  static constexpr int kCountShift = 24, kLenShift = 27;
  static constexpr uint32_t kCountMask = 7;
  static constexpr size_t kMaxSlots = size_t(1) << 19;  // 16 MB

  struct alignas(32) Slot {
    uint64_t lo = 0, hi = 0;
    uint32_t ids[kInline] = {};
    bool empty() const { return ids[0] == 0; }
  };
  static bool holds(const Slot& s, const Key& k) {
    return ((s.lo ^ k.lo) | (s.hi ^ k.hi) | ((s.ids[0] >> kLenShift) ^ k.len)) == 0;
  }
  uint32_t* copy(const Slot& s, uint32_t* w) const {
    if (const uint32_t count = (s.ids[0] >> kCountShift) & kCountMask) {
      uint32_t ids[kInline];
      std::memcpy(ids, s.ids, sizeof(ids));
      ids[0] &= kMaxId;
      std::memcpy(w, ids, sizeof(ids));
      return w + count;
    }
    std::memcpy(w, spill_.data() + s.ids[1], kMaxBytes * sizeof(uint32_t));
    return w + s.ids[2];
  }
  static uint64_t hash(uint64_t lo, uint64_t hi, size_t n) {  // its top bits are the home slot
    return ((lo ^ n) * 0x9E3779B97F4A7C15ull) ^ (hi * 0xC2B2AE3D27D4EB4Full);
  }
  void resize(size_t slots) {
    slots_.assign(slots, Slot{});
    shift_ = 64 - __builtin_ctzll(slots);
    limit_ = slots / 4 * 3;
    size_ = 0;
  }
  // Into the first empty slot of its probe order.
  void place(const Slot& s) {
    const size_t h = hash(s.lo, s.hi, s.ids[0] >> kLenShift) >> shift_;
    size_t i = h;
    while (!slots_[i].empty()) i = after(i, h);
    slots_[i] = s;
    ++size_;
  }
  bool grow() {
    if (slots_.size() >= kMaxSlots) return false;
    HugeVector<Slot> old;
    old.swap(slots_);
    resize(2 * old.size());
    for (const Slot& s : old)
      if (!s.empty()) place(s);
    return true;
  }
  // A key's slots in probe order: its home, the other slot of that line (already loaded), then
  // the slots that follow.
  size_t after(size_t i, size_t home) const {
    if (i == home) return i ^ 1;
    return (i == (home ^ 1) ? (home | 1) + 1 : i + 1) & (slots_.size() - 1);
  }
  // Past the home slot, up to the first empty one (pieces are never removed one by one, so a
  // piece lies before any empty slot of its probe order).
  // A piece found there trades places with the one at its home: every probe order that
  // reaches a line takes both its slots before the next line, and no slot empties, so both
  // stay findable, and a piece looked up again finds its home (pieces inserted once the table
  // filled, such as the merged indentation of code, were 5-9% of the lookups of a warm pass
  // over code, each a mispredicted branch or two).
  [[gnu::noinline]] uint32_t* find_further(const Key& k, uint32_t* w) {
    const size_t home = k.hash >> shift_;
    for (size_t i = after(home, home);; i = after(i, home)) {
      if (slots_[i].empty()) return nullptr;
      if (holds(slots_[i], k)) {
        std::swap(slots_[i], slots_[home]);
        return copy(slots_[home], w);
      }
    }
  }

  HugeVector<Slot> slots_;  // slots 2k and 2k + 1 share a cache line
  int shift_ = 64;
  size_t size_ = 0, limit_ = 0;  // pieces held; grows at limit_ (3/4 of the slots)
  // Ids of pieces of more than kInline tokens (such as indentation, which r50k encodes one token
  // a space), then kMaxBytes more, for the fixed-size copy.
  std::vector<uint32_t> spill_;
};

class PieceCache {
 public:
  HotPieces hot;

  static constexpr size_t kMaxEntries = size_t(1) << 17;
  static constexpr size_t kMaxPieceBytes = 1024;

  explicit PieceCache(const HotPieces& seed) : hot(seed), seed_(seed), slots_(2 * kMaxEntries, 0) {
    filter_.reset(kFilterBits);
  }

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

  // A short piece into the hot cache, which starts again from its seed when full at its largest.
  void insert_hot(const HotPieces::Key& k, const uint32_t* ids, size_t m) {
    if (hot.insert(k, ids, m)) return;
    hot = seed_;
    hot.insert(k, ids, m);
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
  const HotPieces& seed_;  // the tokenizer's, which outlives its caches
  HugeVector<uint32_t> slots_;  // entry index + 1, 0 = empty
  BitFilter filter_;
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<uint32_t> ids_;
};

}  // namespace zllm
