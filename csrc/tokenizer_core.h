// The native tokenizer: special-token splitting (tiktoken's allowed/disallowed semantics),
// the pre-tokenizer grammars in sequence (a Hugging Face Sequence of Splits refines pieces
// left to right), and cached byte-pair merging. No Python here; bindings live apart.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bpe.h"
#include "piece_cache.h"
#include "pretokenizer.h"

namespace zllm {

// Which specials a call may encode as specials, and which ones it must refuse to see.
struct SpecialPolicy {
  std::vector<uint8_t> allowed, disallowed;  // indexed like TokenizerCore's specials
  bool any = false;                          // some special is allowed or disallowed
};

// Token ids of one text; allocated for the worst case (one token per byte) without zeroing,
// and reused by the next encode into the same Tokens when it is large enough.
struct Tokens {
  std::unique_ptr<uint32_t[]> ids;
  size_t size = 0;
  size_t capacity = 0;
};

struct Special {
  std::string bytes;
  uint32_t id;
};

class TokenizerCore {
 public:
  TokenizerCore(BytePairModel model, std::vector<Grammar> grammars, std::vector<Special> specials);

  // The ids of s[0, n) into out. Returns -1, or the index of a disallowed special found.
  // out grows to worst_case_tokens(n) ids unless it has them.
  long encode(const uint8_t* s, size_t n, const SpecialPolicy& policy, PieceCache& cache, Tokens& out) const;
  // Pieces of ordinary text (no special splitting), as end offsets relative to s.
  void split(const uint8_t* s, size_t n, std::vector<uint32_t>& ends) const;
  // A token covers at least one byte, a special too; the hot cache's copies write ahead.
  static size_t worst_case_tokens(size_t n) { return n + 1 + HotPieces::kCopyAhead; }
  bool append_token_bytes(uint32_t id, std::string& out) const;

  std::unique_ptr<PieceCache> acquire_cache();
  void release_cache(std::unique_ptr<PieceCache> cache);

  const std::vector<Special>& specials() const { return specials_; }
  const BytePairModel& model() const { return model_; }

 private:
  size_t find_special(const uint8_t* s, size_t n, size_t from, size_t* index) const;
  // Each writes the ids of its text at w (at most one per byte) and returns the end.
  uint32_t* encode_ordinary(const uint8_t* s, size_t n, PieceCache& cache, uint32_t* w) const;
  static constexpr size_t kBatch = 256;  // pieces per batch of cache lookups
  // The pieces of s[begin, ends[0]), [ends[0], ends[1]), ... [ends[k - 2], ends[k - 1]).
  uint32_t* encode_pieces(const uint8_t* s, size_t n, size_t begin, const uint32_t* ends, size_t k,
                          PieceCache& cache, uint32_t* w) const;
  uint32_t* encode_short_piece(const uint8_t* p, size_t n, const HotPieces::Key& key, PieceCache& cache,
                               uint32_t* w) const;
  uint32_t* encode_long_piece(const uint8_t* p, size_t n, PieceCache& cache, uint32_t* w) const;
  // Pieces of up to HotPieces::kMaxBytes a cache starts with; *complete: every short token.
  static HotPieces seeded_hot_pieces(const BytePairModel& model, bool* complete);
  static constexpr size_t kUnseededSlots = size_t(1) << 16;  // 2 MB; grows

  BytePairModel model_;
  std::vector<Grammar> grammars_;
  std::vector<Special> specials_;      // longest first, so a match at a position is the longest
  bool special_first_byte_[256] = {};
  int single_first_byte_ = -1;  // the one first byte all specials share, else negative
  std::vector<std::pair<uint32_t, uint32_t>> special_by_id_;  // (id, index) sorted by id
  bool short_tokens_seeded_ = false;  // a short piece the hot cache lacks is no token
  HotPieces hot_seed_;                // what a new cache's hot pieces start as
  std::mutex caches_mu_;
  std::vector<std::unique_ptr<PieceCache>> caches_;
};

}  // namespace zllm
