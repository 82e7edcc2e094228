// Byte-pair merging by priority. Short pieces (most of them) use a flat scan whose cost is
// quadratic in a handful of symbols; long pieces use a heap over a linked list so a 50 MB
// piece stays O(n log n). Both take the lowest priority first and the leftmost on ties,
// which is what tiktoken and Hugging Face do.
#include "bpe.h"

#include "ascii_classes.h"
#include "mix64.h"

#include <immintrin.h>

#include <cstring>
#include <functional>
#include <queue>
#include <stdexcept>

namespace zllm {
namespace {

constexpr uint32_t kNone = UINT32_MAX;
// Up to here the scan beats the heap (its allocations and pops), even on the longest pieces
// code has, runs of indentation and comment rulers: merge-only benchmark, 1.6x at 49-80 bytes,
// 1.2x at 81-128. next/prev are bytes, so at most 255.
constexpr size_t kSmallPiece = 128;
constexpr int32_t kNoPair = INT32_MAX;  // merge priorities are below 2^24, so signed compares work

// Pieces longer than this find their lowest pair with AVX2 where the CPU has it: CJK and Thai
// sentences are single pieces of 30-300 bytes, and the scan, quadratic in their length, was
// most of merging them (cold multilingual text, qwen2: 1.18x with it).
constexpr size_t kVectorScan = 32;

// The first position of the lowest priority in prio[0, n - 1), without a branch per position.
size_t scalar_lowest(const int32_t* prio, size_t n) {
  size_t best = 0;
  int32_t low = prio[0];
  for (size_t k = 1; k + 1 < n; ++k) {
    const bool lower = prio[k] < low;
    low = lower ? prio[k] : low;
    best = lower ? k : best;
  }
  return best;
}

// The same eight positions at a time; prio holds kNoPair up to the next multiple of 8 past n - 1.
[[gnu::target("avx2")]] size_t avx2_lowest(const int32_t* prio, size_t n) {
  const __m256i* at = reinterpret_cast<const __m256i*>(prio);
  __m256i m = _mm256_loadu_si256(at);
  for (size_t k = 1; 8 * k + 1 < n; ++k) m = _mm256_min_epi32(m, _mm256_loadu_si256(at + k));
  __m128i h = _mm_min_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_min_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_min_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  const __m256i low = _mm256_broadcastd_epi32(h);
  for (size_t k = 0;; ++k)
    if (const int mask = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_loadu_si256(at + k), low))))
      return 8 * k + size_t(__builtin_ctz(unsigned(mask)));
}

const auto kLongLowest = cpu_has_avx2() ? avx2_lowest : scalar_lowest;

size_t table_size(size_t n) {
  size_t s = 16;
  while (s < 2 * n + 1) s <<= 1;
  return s;
}

}  // namespace

uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = load_prefix(p, n) ^ (uint64_t(n) * 0x9E3779B97F4A7C15ull);
  for (size_t k = 8; k < n; k += 8) {
    h = ((h << 27) | (h >> 37)) * 0xbf58476d1ce4e5b9ull;
    h ^= load_prefix(p + k, n - k);
  }
  return mix64(h);
}

void TokenIndex::build(const uint32_t* offsets, const char* arena, const std::vector<uint32_t>& ids) {
  slots_.assign(table_size(ids.size()), Slot{0, 0, 0});
  mask_ = slots_.size() - 1;
  filter_.reset(16 * ids.size());
  for (uint32_t id : ids) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(arena) + offsets[id];
    size_t n = offsets[id + 1] - offsets[id];
    const uint64_t h = hash_bytes(p, n);
    filter_.add(h);
    uint64_t i = h & mask_;
    while (slots_[i].id_plus_1) i = (i + 1) & mask_;
    slots_[i] = Slot{load_prefix(p, n), uint32_t(n), id + 1};
  }
}

uint32_t TokenIndex::find(const uint8_t* p, size_t n, uint64_t h, const uint32_t* offsets,
                          const char* arena) const {
  if (!filter_.may_hold(h)) return 0;
  const uint64_t prefix = load_prefix(p, n);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (!s.id_plus_1) return 0;
    if (s.len != n || s.prefix != prefix) continue;
    if (n <= 8 || std::memcmp(arena + offsets[s.id_plus_1 - 1] + 8, p + 8, n - 8) == 0) return s.id_plus_1;
  }
}

void MergeTable::rehash(size_t slots) {
  HugeVector<uint64_t> old(slots, 0);
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  filter_.reset(4 * slots);
  for (uint64_t s : old) {
    if (!s) continue;
    uint64_t i = slot_of(s >> 24);
    while (slots_[i]) i = (i + 1) & mask_;
    slots_[i] = s;
    filter_.add(mix(s >> 24));
  }
}

void MergeTable::insert(uint32_t left, uint32_t right, Merge m) {
  if (left >= kMaxId || right >= kMaxId || m.priority > kMaxPriority)
    throw std::invalid_argument("token id or merge priority too large for the merge table");
  if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
  if (merged_.size() <= m.priority) merged_.resize(m.priority + 1, kNone);
  merged_[m.priority] = m.merged;
  const uint64_t key = pair_key(left, right), slot = (key << 24) | m.priority;
  for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
    if ((slots_[i] >> 24) == key || !slots_[i]) {
      size_ += !slots_[i];
      slots_[i] = slot;
      filter_.add(mix(key));
      return;
    }
  }
}

void MergeTable::shrink_to_fit() {
  rehash(table_size(size_));
  bool identity = true;
  for (uint32_t p = 0; p < merged_.size() && identity; ++p) identity = merged_[p] == kNone || merged_[p] == p;
  if (identity) std::vector<uint32_t>().swap(merged_);
}

BytePairModel::BytePairModel(const std::vector<std::string>& tokens,
                             const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                             bool whole_piece_first)
    : whole_piece_first_(whole_piece_first) {
  offsets_.reserve(tokens.size() + 1);
  offsets_.push_back(0);
  std::vector<uint32_t> present;
  for (uint32_t id = 0; id < tokens.size(); ++id) {
    arena_ += tokens[id];
    offsets_.push_back(uint32_t(arena_.size()));
    if (!tokens[id].empty()) present.push_back(id);
  }
  index_.build(offsets_.data(), arena_.data(), present);
  for (int b = 0; b < 256; ++b) {
    uint8_t byte = uint8_t(b);
    // A byte without a token (SmolLM2 has none for \x04 or 0xF1) never reaches the model:
    // Tokenizer.normalize removes every character that contains one.
    uint32_t found = find(&byte, 1, hash_bytes(&byte, 1));
    byte_ids_[b] = found ? found - 1 : kNoToken;
  }
  if (merges.empty()) {
    derive_merges_from_ranks();
  } else {
    insert_merges(merges);
    fill_byte_priorities();
  }
  merges_.shrink_to_fit();
}

void BytePairModel::fill_byte_priorities() {
  byte_priorities_.resize(256 * 256);
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b)
      byte_priorities_[a << 8 | b] = byte_ids_[a] == kNoToken || byte_ids_[b] == kNoToken
                                         ? kNoMerge : merges_.priority(byte_ids_[a], byte_ids_[b]);
}

void BytePairModel::insert_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges) {
  std::string joined;
  for (uint32_t rank = 0; rank < merges.size(); ++rank) {
    auto [l, r] = merges[rank];
    if (!has(l) || !has(r)) throw std::invalid_argument("merge " + std::to_string(rank) + " names an absent token");
    joined = token_bytes(l) + token_bytes(r);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(joined.data());
    uint32_t found = find(p, joined.size(), hash_bytes(p, joined.size()));
    if (!found) throw std::invalid_argument("merge " + std::to_string(rank) + " makes a token absent from the vocabulary");
    merges_.insert(l, r, Merge{rank, found - 1});
  }
}

// tiktoken merges the adjacent pair whose concatenation has the lowest rank. Inside the span
// of a token that forms in some text, the merges happen in the same order as when its bytes
// are encoded alone (a merge across the span's edge would have stopped it forming), so a
// token forms only from the last pair of encoding its own bytes, and a pair that is not that
// one is never the lowest when it is adjacent. The table holds just those pairs, one per
// reachable token: cl100k 100,000 of the 233,378 ways of splitting its tokens in two, so cold
// merges probe a table half the size. Encoding a token's bytes needs only merges of shorter
// tokens, hence the order by length; pairs of bytes come first, for byte_priorities_.
void BytePairModel::derive_merges_from_ranks() {
  std::vector<std::vector<uint32_t>> by_length;
  for (uint32_t id = 0; id + 1 < offsets_.size(); ++id) {
    const size_t n = offsets_[id + 1] - offsets_[id];
    if (n < 2) continue;
    if (by_length.size() <= n) by_length.resize(n + 1);
    by_length[n].push_back(id);
  }
  const uint8_t* base = reinterpret_cast<const uint8_t*>(arena_.data());
  std::vector<uint32_t> parts;
  for (size_t n = 2; n < by_length.size(); ++n) {
    parts.resize(n);
    for (uint32_t id : by_length[n]) {
      const uint8_t* p = base + offsets_[id];
      if (n == 2) {
        merges_.insert(byte_ids_[p[0]], byte_ids_[p[1]], Merge{id, id});
      } else if (merge(p, n, parts.data()) == parts.data() + 2) {
        merges_.insert(parts[0], parts[1], Merge{id, id});
      }
    }
    if (n == 2) fill_byte_priorities();
  }
  if (byte_priorities_.empty()) fill_byte_priorities();
}

int64_t BytePairModel::whole(const uint8_t* p, size_t n, uint64_t h) const {
  return int64_t(find(p, n, h)) - 1;
}

uint32_t* BytePairModel::merge(const uint8_t* p, size_t n, uint32_t* w) const {
  if (n == 1) {
    *w = byte_ids_[p[0]];
    return w + 1;
  }
  return n <= kSmallPiece ? merge_small(p, n, w) : merge_heap(p, n, w);
}

// Symbols stay at their byte positions, linked by next/prev; a merged-away symbol's pair
// priority becomes kNoPair, so finding the next merge is a scan of the piece's positions, and
// nothing shifts. (On short pieces a SIMD minimum was slower: its vector loads wait for the
// scalar stores of the previous merge; past kVectorScan bytes it wins.)
uint32_t* BytePairModel::merge_small(const uint8_t* p, size_t n, uint32_t* w) const {
  int32_t prio[kSmallPiece + 8];  // of the pair (k, next[k]); kNoPair when none
  uint32_t ids[kSmallPiece];
  uint8_t next[kSmallPiece], prev[kSmallPiece];
  auto set_pair = [&](size_t k, uint32_t priority) { prio[k] = priority == kNoMerge ? kNoPair : int32_t(priority); };
  for (size_t k = 0; k < n; ++k) {
    ids[k] = byte_ids_[p[k]];
    next[k] = uint8_t(k + 1);
    prev[k] = uint8_t(k - 1);
  }
  for (size_t k = 0; k + 1 < n; ++k) set_pair(k, byte_priority(p[k], p[k + 1]));
  for (size_t k = n - 1; k < n + 8; ++k) prio[k] = kNoPair;
  // The pairs each first merge would make with its neighbours: probed a few steps later, and
  // their lines (the merge table's, cold in a first pass) load meanwhile, together.
  for (size_t k = 0; k + 1 < n; ++k) {
    if (prio[k] == kNoPair) continue;
    const uint32_t m = merges_.merged(uint32_t(prio[k]));
    if (k + 2 < n) merges_.prefetch(m, ids[k + 2]);
    if (k > 0) merges_.prefetch(ids[k - 1], m);
  }
  for (;;) {
    const size_t best = n > kVectorScan ? kLongLowest(prio, n) : scalar_lowest(prio, n);
    const int32_t low = prio[best];
    if (low == kNoPair) break;
    const size_t gone = next[best], after = next[gone];
    ids[best] = merges_.merged(uint32_t(low));
    // Both new pairs are known now: their probes' lines load together, not one after the other.
    if (after < n) merges_.prefetch(ids[best], ids[after]);
    if (best > 0) merges_.prefetch(ids[prev[best]], ids[best]);
    prio[gone] = kNoPair;
    next[best] = uint8_t(after);
    if (after < n) {
      prev[after] = uint8_t(best);
      set_pair(best, merges_.priority(ids[best], ids[after]));
    } else {
      prio[best] = kNoPair;
    }
    if (best > 0) set_pair(prev[best], merges_.priority(ids[prev[best]], ids[best]));
  }
  for (size_t k = 0; k < n; k = next[k]) *w++ = ids[k];
  return w;
}

uint32_t* BytePairModel::merge_heap(const uint8_t* p, size_t n, uint32_t* w) const {
  struct Node {
    uint32_t id;
    int64_t prev, next;
  };
  std::vector<Node> nodes(n);
  for (size_t k = 0; k < n; ++k) nodes[k] = Node{byte_ids_[p[k]], int64_t(k) - 1, k + 1 < n ? int64_t(k + 1) : -1};
  // (priority << 32 | position of the left symbol): lowest priority, then leftmost.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
  auto push = [&](int64_t left) {
    if (left < 0 || nodes[left].next < 0) return;
    const uint32_t priority = merges_.priority(nodes[left].id, nodes[nodes[left].next].id);
    if (priority != kNoMerge) heap.push((uint64_t(priority) << 32) | uint64_t(left));
  };
  for (size_t k = 0; k + 1 < n; ++k) push(int64_t(k));
  while (!heap.empty()) {
    uint64_t top = heap.top();
    heap.pop();
    int64_t left = int64_t(top & 0xFFFFFFFFu);
    Node& a = nodes[left];
    if (a.id == kNone || a.next < 0) continue;
    const uint32_t priority = merges_.priority(a.id, nodes[a.next].id);
    if (priority != uint32_t(top >> 32)) continue;  // stale: a neighbour changed
    Node& b = nodes[a.next];
    a.id = merges_.merged(priority);
    a.next = b.next;
    b.id = kNone;
    if (a.next >= 0) nodes[a.next].prev = left;
    push(a.prev);
    push(left);
  }
  for (int64_t k = 0; k >= 0; k = nodes[k].next) *w++ = nodes[k].id;
  return w;
}

}  // namespace zllm
