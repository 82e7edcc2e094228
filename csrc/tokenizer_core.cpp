#include "tokenizer_core.h"

#include <algorithm>
#include <cstring>

namespace zllm {

TokenizerCore::TokenizerCore(BytePairModel model, std::vector<Grammar> grammars, std::vector<Special> specials)
    : model_(std::move(model)),
      grammars_(std::move(grammars)),
      specials_(std::move(specials)),
      hot_seed_(seeded_hot_pieces(model_, &short_tokens_seeded_)) {
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const Special& a, const Special& b) { return a.bytes.size() > b.bytes.size(); });
  for (uint32_t k = 0; k < specials_.size(); ++k) {
    special_first_byte_[uint8_t(specials_[k].bytes[0])] = true;
    special_by_id_.emplace_back(specials_[k].id, k);
  }
  std::sort(special_by_id_.begin(), special_by_id_.end());
  for (int b = 0; b < 256; ++b) {
    if (!special_first_byte_[b]) continue;
    single_first_byte_ = single_first_byte_ == -1 ? b : -2;
  }
}

// When a piece that is one token is that token (tiktoken), every short token is the encoding
// of its own bytes: a new cache starts with all of them, so a short piece it lacks is never one
// and needs no vocabulary probe. Twice their count in slots: at most 3/8 full to begin with.
HotPieces TokenizerCore::seeded_hot_pieces(const BytePairModel& model, bool* complete) {
  *complete = false;
  if (!model.whole_piece_first()) return HotPieces(kUnseededSlots);
  const uint32_t* off = model.offsets().data();
  const uint8_t* arena = reinterpret_cast<const uint8_t*>(model.arena().data());
  const auto short_token = [&](uint32_t id) { return off[id + 1] > off[id] && off[id + 1] - off[id] <= HotPieces::kMaxBytes; };
  size_t count = 0;
  for (uint32_t id = 0; id < model.num_tokens(); ++id) count += short_token(id);
  HotPieces hot(2 * count);
  uint32_t scratch[HotPieces::kCopyAhead];
  for (uint32_t id = 0; id < model.num_tokens(); ++id) {
    if (!short_token(id)) continue;
    const uint8_t* p = arena + off[id];
    const size_t n = off[id + 1] - off[id];
    // Ascending ids: the lowest of the tokens that share their bytes, the one a vocabulary
    // lookup finds, is the one kept.
    const HotPieces::Key k = hot.key(p, n, n);
    if (!hot.find(k, scratch)) hot.insert(k, &id, 1);
  }
  *complete = model.num_tokens() <= size_t(HotPieces::kMaxId) + 1;
  return hot;
}

size_t TokenizerCore::find_special(const uint8_t* s, size_t n, size_t from, size_t* index) const {
  for (size_t i = from; i < n; ++i) {
    if (single_first_byte_ >= 0) {  // usually every special starts with '<': memchr is SIMD
      const void* hit = std::memchr(s + i, single_first_byte_, n - i);
      if (!hit) return n;
      i = static_cast<const uint8_t*>(hit) - s;
    } else if (!special_first_byte_[s[i]]) {
      continue;
    }
    for (size_t k = 0; k < specials_.size(); ++k) {
      const std::string& b = specials_[k].bytes;
      if (b.size() <= n - i && std::memcmp(s + i, b.data(), b.size()) == 0) {
        *index = k;
        return i;
      }
    }
  }
  return n;
}

long TokenizerCore::encode(const uint8_t* s, size_t n, const SpecialPolicy& policy, PieceCache& cache,
                           Tokens& out) const {
  const size_t capacity = worst_case_tokens(n);
  if (out.capacity < capacity) {
    out.ids.reset(new uint32_t[capacity]);
    out.capacity = capacity;
  }
  uint32_t* w = out.ids.get();
  size_t start = 0, from = 0, k = 0;
  while (policy.any) {
    size_t at = find_special(s, n, from, &k);
    if (at == n) break;
    if (policy.disallowed[k]) return long(k);
    if (!policy.allowed[k]) {  // neither: ordinary text, look again one byte on
      from = at + 1;
      continue;
    }
    w = encode_ordinary(s + start, at - start, cache, w);
    *w++ = specials_[k].id;
    start = from = at + specials_[k].bytes.size();
  }
  w = encode_ordinary(s + start, n - start, cache, w);
  out.size = size_t(w - out.ids.get());
  return -1;
}

void TokenizerCore::split(const uint8_t* s, size_t n, std::vector<uint32_t>& ends) const {
  if (grammars_.empty()) {
    if (n) ends.push_back(uint32_t(n));
    return;
  }
  pretokenize(grammars_[0], s, n, ends);
  std::vector<uint32_t> coarse, sub;
  for (size_t g = 1; g < grammars_.size(); ++g) {
    coarse.swap(ends);
    ends.clear();
    uint32_t begin = 0;
    for (uint32_t end : coarse) {
      sub.clear();
      pretokenize(grammars_[g], s + begin, end - begin, sub);
      for (uint32_t e : sub) ends.push_back(begin + e);
      begin = end;
    }
  }
}

uint32_t* TokenizerCore::encode_ordinary(const uint8_t* s, size_t n, PieceCache& cache, uint32_t* w) const {
  if (grammars_.size() == 1) {  // the common shape: stream pieces through a small buffer
    uint32_t ends[kBatch];
    size_t pos = 0, begin = 0;
    while (size_t k = next_pieces(grammars_[0], s, n, &pos, ends, kBatch)) {
      w = encode_pieces(s, n, begin, ends, k, cache, w);
      begin = ends[k - 1];
    }
    return w;
  }
  thread_local std::vector<uint32_t> ends;
  ends.clear();
  split(s, n, ends);
  for (size_t j = 0; j < ends.size(); j += kBatch)
    w = encode_pieces(s, n, j ? ends[j - 1] : 0, ends.data() + j, std::min(kBatch, ends.size() - j), cache, w);
  return w;
}

// Two passes over a batch of pieces: the hot cache's keys first, with their slots prefetched,
// then the lookups, which by then mostly find their slot in L1.
uint32_t* TokenizerCore::encode_pieces(const uint8_t* s, size_t n, size_t begin, const uint32_t* ends, size_t k,
                                       PieceCache& cache, uint32_t* w) const {
  HotPieces::Key keys[kBatch];
  for (size_t j = 0, b = begin; j < k; b = ends[j++]) {
    const size_t len = ends[j] - b;
    if (len > HotPieces::kMaxBytes) continue;
    keys[j] = cache.hot.key(s + b, len, n - b);
    cache.hot.prefetch(keys[j]);
  }
  for (size_t j = 0, b = begin; j < k; b = ends[j++]) {
    const uint8_t* p = s + b;
    const size_t len = ends[j] - b;
    if (len > HotPieces::kMaxBytes) {
      w = encode_long_piece(p, len, cache, w);
    } else if (uint32_t* end = cache.hot.find(keys[j], w)) {
      w = end;
    } else {
      w = encode_short_piece(p, len, keys[j], cache, w);
    }
  }
  return w;
}

// A short piece the hot cache lacks: merged, unless the cache does not hold every short token
// and the piece is one.
uint32_t* TokenizerCore::encode_short_piece(const uint8_t* p, size_t n, const HotPieces::Key& key,
                                            PieceCache& cache, uint32_t* w) const {
  uint32_t* end = w;
  if (n > 1 && model_.whole_piece_first() && !short_tokens_seeded_) {
    const int64_t id = model_.whole(p, n, hash_bytes(p, n));
    if (id >= 0) *end++ = uint32_t(id);
  }
  if (end == w) end = model_.merge(p, n, w);
  cache.insert_hot(key, w, size_t(end - w));
  return end;
}

// Long pieces have no hot-cache entry but repeat (and often miss the vocabulary), so the
// piece cache is asked first.
uint32_t* TokenizerCore::encode_long_piece(const uint8_t* p, size_t n, PieceCache& cache, uint32_t* w) const {
  const uint64_t h = hash_bytes(p, n);
  if (cache.find(p, n, h, w)) return w;
  uint32_t* end = w;
  if (model_.whole_piece_first()) {
    const int64_t id = model_.whole(p, n, h);
    if (id >= 0) *end++ = uint32_t(id);
  }
  if (end == w) end = model_.merge(p, n, w);
  cache.insert(p, n, h, w, size_t(end - w));
  return end;
}

bool TokenizerCore::append_token_bytes(uint32_t id, std::string& out) const {
  if (model_.has(id)) {
    const auto& off = model_.offsets();
    out.append(model_.arena(), off[id], off[id + 1] - off[id]);
    return true;
  }
  auto it = std::lower_bound(special_by_id_.begin(), special_by_id_.end(), std::make_pair(id, 0u));
  if (it == special_by_id_.end() || it->first != id) return false;
  out += specials_[it->second].bytes;
  return true;
}

std::unique_ptr<PieceCache> TokenizerCore::acquire_cache() {
  std::lock_guard<std::mutex> lock(caches_mu_);
  if (caches_.empty()) return std::make_unique<PieceCache>(hot_seed_);
  auto c = std::move(caches_.back());
  caches_.pop_back();
  return c;
}

void TokenizerCore::release_cache(std::unique_ptr<PieceCache> cache) {
  std::lock_guard<std::mutex> lock(caches_mu_);
  caches_.push_back(std::move(cache));
}

}  // namespace zllm
