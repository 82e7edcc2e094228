#include "gpu_tokenize_tables.h"

#include <cstring>
#include <stdexcept>

#include "class_table.h"

namespace zllm {
namespace gpu_tokenize {
namespace {

size_t slots_for(size_t keys) {
  size_t s = 16;
  while (s < 2 * keys + 1) s <<= 1;
  return s;
}

// Open addressing over the token bytes, lowest id first so a later duplicate is never found.
class VocabBuilder {
 public:
  VocabBuilder(const std::string& arena, const std::vector<uint32_t>& offsets, size_t count)
      : arena_(arena), offsets_(offsets), slots_(slots_for(count), VocabSlot{0, kNone, 0}) {}

  uint32_t find(const uint8_t* p, uint32_t n) const {
    const uint64_t h = bytes_hash(p, n);
    for (uint64_t i = h & mask();; i = (i + 1) & mask()) {
      const VocabSlot& s = slots_[i];
      if (s.id == kNone) return kNone;
      if (s.hash == h && s.len == n && std::memcmp(arena_.data() + offsets_[s.id], p, n) == 0) return s.id;
    }
  }
  void insert(uint32_t id) {
    const auto* p = reinterpret_cast<const uint8_t*>(arena_.data()) + offsets_[id];
    const uint32_t n = offsets_[id + 1] - offsets_[id];
    if (find(p, n) != kNone) return;
    const uint64_t h = bytes_hash(p, n);
    uint64_t i = h & mask();
    while (slots_[i].id != kNone) i = (i + 1) & mask();
    slots_[i] = VocabSlot{h, id, n};
  }
  std::vector<VocabSlot> take() { return std::move(slots_); }

 private:
  uint64_t mask() const { return slots_.size() - 1; }
  const std::string& arena_;
  const std::vector<uint32_t>& offsets_;
  std::vector<VocabSlot> slots_;
};

class PairBuilder {
 public:
  explicit PairBuilder(size_t count) : slots_(slots_for(count), PairSlot{kEmptyPair, kNone, kNone}) {}
  void insert(uint32_t left, uint32_t right, uint32_t priority, uint32_t merged) {  // a later insert wins
    const uint64_t key = pair_key(left, right), mask = slots_.size() - 1;
    uint64_t i = spread(key) & mask;
    while (slots_[i].key != kEmptyPair && slots_[i].key != key) i = (i + 1) & mask;
    slots_[i] = PairSlot{key, priority, merged};
  }
  std::vector<PairSlot> take() { return std::move(slots_); }

 private:
  std::vector<PairSlot> slots_;
};

}  // namespace

HostTables build_tables(const BytePairModel& model, const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                        const std::vector<Grammar>& stages) {
  if (stages.empty() || stages.size() > size_t(kMaxStages))
    throw std::invalid_argument("the device path takes 1 to " + std::to_string(kMaxStages) + " pre-tokenizer steps");
  HostTables h;
  h.arena = model.arena();
  h.offsets = model.offsets();
  h.whole_piece_first = model.whole_piece_first();
  h.stages = stages;
  const uint32_t count = uint32_t(model.num_tokens());
  std::vector<uint32_t> present;
  for (uint32_t id = 0; id < count; ++id) {
    const uint32_t n = h.offsets[id + 1] - h.offsets[id];
    if (n == 0) continue;
    present.push_back(id);
    h.max_token_len = std::max(h.max_token_len, n);
  }
  VocabBuilder vocab(h.arena, h.offsets, present.size());
  for (uint32_t id : present) vocab.insert(id);
  h.byte_ids.resize(256);
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = uint8_t(b);
    h.byte_ids[b] = vocab.find(&byte, 1);
  }
  const auto* arena = reinterpret_cast<const uint8_t*>(h.arena.data());
  if (!merges.empty()) {
    PairBuilder pairs(merges.size());
    std::string joined;
    for (uint32_t rank = 0; rank < merges.size(); ++rank) {
      const auto [l, r] = merges[rank];
      if (l >= count || r >= count) throw std::invalid_argument("merge " + std::to_string(rank) + " names an absent token");
      joined.assign(h.arena, h.offsets[l], h.offsets[l + 1] - h.offsets[l]);
      joined.append(h.arena, h.offsets[r], h.offsets[r + 1] - h.offsets[r]);
      const uint32_t merged = vocab.find(reinterpret_cast<const uint8_t*>(joined.data()), uint32_t(joined.size()));
      if (merged == kNone) throw std::invalid_argument("merge " + std::to_string(rank) + " makes an absent token");
      pairs.insert(l, r, rank, merged);
    }
    h.pairs = pairs.take();
  } else {
    std::vector<PairSlot> found;
    for (uint32_t id : present) {
      const uint8_t* p = arena + h.offsets[id];
      const uint32_t n = h.offsets[id + 1] - h.offsets[id];
      if (n < 2 || vocab.find(p, n) != id) continue;
      if (id > kMaxPriority) throw std::invalid_argument("token rank too large for the device merge table");
      for (uint32_t k = 1; k < n; ++k) {
        const uint32_t a = vocab.find(p, k), b = vocab.find(p + k, n - k);
        if (a != kNone && b != kNone) found.push_back(PairSlot{pair_key(a, b), id, id});
      }
    }
    PairBuilder pairs(found.size());
    for (const PairSlot& s : found) pairs.insert(uint32_t(s.key >> 32), uint32_t(s.key), s.priority, s.merged);
    h.pairs = pairs.take();
  }
  h.vocab = vocab.take();
  return h;
}

Tables host_view(const HostTables& h) {
  const ClassTable& ct = class_table();
  Tables t{};
  t.row_of_block = ct.row_of_block;
  t.class_rows = ct.rows;
  t.vocab = h.vocab.data();
  t.vocab_mask = h.vocab.size() - 1;
  t.pairs = h.pairs.data();
  t.pair_mask = h.pairs.size() - 1;
  t.arena = reinterpret_cast<const uint8_t*>(h.arena.data());
  t.offsets = h.offsets.data();
  t.byte_ids = h.byte_ids.data();
  t.max_token_len = h.max_token_len;
  t.whole_piece_first = h.whole_piece_first;
  t.num_stages = uint32_t(h.stages.size());
  for (size_t k = 0; k < h.stages.size(); ++k) t.stages[k] = h.stages[k];
  return t;
}

namespace {

void add_segment(Segments& segs, size_t begin, size_t end, uint32_t token) {
  if (end == begin) return;
  if (segs.bytes + end > kMaxCapacity) throw std::length_error("batch too large for the device path");
  segs.bounds.push_back(uint32_t(segs.bytes + begin));
  segs.tokens.push_back(token);
}

// The special matching at s[i] (the longest: specials are sorted longest first), or -1.
long special_at(const std::vector<Special>& specials, const uint8_t* s, size_t n, size_t i) {
  for (size_t k = 0; k < specials.size(); ++k) {
    const std::string& b = specials[k].bytes;
    if (b.size() <= n - i && std::memcmp(s + i, b.data(), b.size()) == 0) return long(k);
  }
  return -1;
}

}  // namespace

long add_text(const TokenizerCore& core, const SpecialPolicy& policy, const uint8_t* s, size_t n, Segments& segs) {
  segs.doc_offsets.push_back(uint32_t(segs.bytes));
  const std::vector<Special>& specials = core.specials();
  bool first_byte[256] = {};
  for (const Special& sp : specials) first_byte[uint8_t(sp.bytes[0])] = true;
  size_t start = 0;
  for (size_t i = 0; policy.any && i < n; ++i) {
    if (!first_byte[s[i]]) continue;
    const long k = special_at(specials, s, n, i);
    if (k < 0 || (!policy.disallowed[k] && !policy.allowed[k])) continue;  // ordinary text
    if (policy.disallowed[k]) return k;
    add_segment(segs, start, i, kNone);
    add_segment(segs, i, i + specials[k].bytes.size(), specials[k].id);
    start = i + specials[k].bytes.size();
    i = start - 1;
  }
  add_segment(segs, start, n, kNone);
  segs.bytes += n;
  return -1;
}

void finish(Segments& segs) {
  segs.bounds.push_back(uint32_t(segs.bytes));
  segs.doc_offsets.push_back(uint32_t(segs.bytes));
}

}  // namespace gpu_tokenize
}  // namespace zllm
