// Plain-C++ view of the GPU full tokenizer (issue 24), shared by the table builder
// (gpu_tokenize_tables.cpp), the kernels (gpu_tokenize_kernels.cuh), the CUDA launcher
// (gpu_tokenize.cu), the binding, and the host emulation of the kernels (tests/kernels).
//
// The device reads the CPU tokenizer's own definitions: zllm::Grammar (the rule table,
// from zllm_core/tokenizer/rules.py via Rules.to_native) and the class table of
// class_table.h, uploaded as is. Its merge semantics are the CPU's: lowest priority first,
// leftmost on ties (bpe.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pretokenizer.h"

#if defined(__CUDACC__)
#define ZLLM_HD __host__ __device__ __forceinline__
#else
#define ZLLM_HD inline
#endif

namespace zllm {
namespace gpu_tokenize {

constexpr uint32_t kNone = 0xFFFFFFFFu;
constexpr uint64_t kEmptyPair = ~uint64_t(0);
constexpr int kMaxStages = 4;      // pre-tokenizer steps (a Hugging Face Sequence of Splits)
constexpr int kMaxLevels = 7;      // bit trees of 32-bit words: up to 32^7 positions
constexpr uint32_t kThreadPiece = 32;   // pieces up to this many bytes: one thread each
constexpr uint32_t kWarpPiece = 128;    // up to this many: one warp; longer: one block
constexpr uint32_t kMaxPriority = (1u << 24) - 1;  // as MergeTable's
constexpr uint32_t kMinCapacity = 1u << 12;
constexpr uint32_t kMaxCapacity = 1u << 26;  // bytes of one batch (64 MiB)

// A token's bytes, found by their hash; id kNone marks an empty slot. When ids share their
// bytes the table keeps the lowest, the id the CPU's TokenIndex finds.
struct VocabSlot {
  uint64_t hash;
  uint32_t id;
  uint32_t len;
};

// (left id, right id) -> the merge's priority and the id it makes; key kEmptyPair: empty.
struct PairSlot {
  uint64_t key;
  uint32_t priority;
  uint32_t merged;
};

ZLLM_HD uint64_t pair_key(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }

ZLLM_HD uint64_t spread(uint64_t key) {
  key ^= key >> 31;
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 29);
}

// Hash of a byte string, little-endian 8-byte words (the host build and the device agree).
ZLLM_HD uint64_t bytes_hash(const uint8_t* p, uint32_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t(n) + 1), word = 0;
  for (uint32_t i = 0; i < n; ++i) {
    word |= uint64_t(p[i]) << (8 * (i & 7));
    if ((i & 7) == 7) {
      h = spread(h ^ word) + 0x2545F4914F6CDD1Dull;
      word = 0;
    }
  }
  return spread(spread(h ^ word) ^ (uint64_t(n) << 40));
}

// Everything the kernels read besides the text: pointers into device memory (host memory
// under emulation). Built once per tokenizer.
struct Tables {
  const uint16_t* row_of_block;  // ClassTable::kBlocks entries
  const uint8_t* class_rows;     // ClassTable rows, 64 CharClass values each
  const VocabSlot* vocab;
  uint64_t vocab_mask;           // slots - 1 (a power of two)
  const PairSlot* pairs;
  uint64_t pair_mask;
  const uint8_t* arena;          // token bytes: id -> arena[offsets[id], offsets[id + 1])
  const uint32_t* offsets;
  const uint32_t* byte_ids;      // 256 entries; kNone for a byte without a token
  uint32_t max_token_len;
  uint32_t whole_piece_first;    // a piece that is one token is that token
  uint32_t num_stages;
  Grammar stages[kMaxStages];
};

// Counts and flags the device keeps (no host round trip between stages); the host writes
// n, segments, docs and want_pieces before a run and reads the rest after it.
struct Counters {
  uint32_t n;         // text bytes
  uint32_t segments;  // ordinary-text and special-token segments
  uint32_t docs;      // texts of the batch
  uint32_t want_pieces;  // also write the pieces' end offsets
  uint32_t flags;     // Flag bits: the run is void and the CPU path must redo it
  uint32_t pieces;
  uint32_t tokens;
  uint32_t chars;     // code points of the text
  uint32_t warp_pieces;
  uint32_t block_pieces;
  uint32_t pad[6];
};
enum Flag : uint32_t {
  kPieceAcrossAnchor = 1,  // a piece crossed a position the class-pair rule called a sure start
  kDigitGroupBreak = 2,    // a digit group did not start where its run's grouping puts it
};

// Positions 0..bits-1 in 32-bit words, with summary levels above: bit i of level k + 1 says
// whether word i of level k is nonzero, so the next or last set bit from any position is a
// few word reads away however far it lies.
struct BitTree {
  uint32_t* level[kMaxLevels];
  uint32_t words[kMaxLevels];
  uint32_t levels;
};

// Per-position sets the classifier writes: bits at the first byte of each character.
enum ClassSet : int {
  kLead,              // every character
  kStopLetter,        // not \p{L}: where a letter run ends
  kStopUpper,         // not o200k's U = [Lu Lt Lm Lo M]
  kStopLower,         // not o200k's W = [Ll Lm Lo M]
  kStopDigit,         // not \p{N}
  kIsDigit,
  kStopPunct,         // not [^\s\p{L}\p{N}]
  kStopSpace,         // not \s
  kStopNewline,       // not CR or LF
  kStopNewlineSlash,  // not CR, LF or '/'
  kIsNewline,
  kIsLower,           // in W
  kNumClassSets
};

// Per-byte work arrays of the block-bucket merges (symbols live at their first byte).
struct BpeStore {
  uint32_t *sym, *nxt, *prv, *prio, *mrg, *sel, *rl, *ml, *rr, *mr, *own;
};

struct Capacity {
  uint32_t bytes;     // text bytes
  uint32_t segments;  // segments of the batch
  uint32_t docs;      // texts of the batch
};

// Device memory of one capacity: inputs, work arrays and outputs.
struct Workspace {
  Counters* counters;
  uint8_t* text;          // bytes [0, n), zero padding after
  uint32_t* seg_bounds;   // segments + 1 offsets: segment i is [seg_bounds[i], seg_bounds[i + 1])
  uint32_t* seg_tokens;   // kNone for ordinary text, else the special token's id
  uint32_t* doc_offsets;  // docs + 1 byte offsets of the batch's texts
  uint8_t* cls;           // CharClass at a character's first byte, kContinuation elsewhere
  BitTree sets[kNumClassSets];
  BitTree barriers;       // segment starts and n
  BitTree anchors[kMaxStages];
  BitTree starts[kMaxStages];
  uint32_t* upper_words;  // levels >= 2 of every tree, one range the run clears
  uint32_t upper_count;
  uint32_t* lead_rank;    // characters before each word (exclusive scan)
  uint32_t* start_rank;   // pieces before each word
  uint32_t* piece_start;  // pieces + 1 byte offsets
  uint32_t* ntok;         // tokens of each piece
  uint32_t* tok_off;      // pieces + 1: first token of each piece
  uint32_t* warp_list;
  uint32_t* block_list;
  uint32_t* ids;          // a piece's tokens at its first byte onwards
  uint32_t* ends;         // their end byte offsets
  BpeStore bpe;
  uint32_t* tile_sums;
  // Outputs (host-mapped memory on CUDA): ids, code point end offsets, first token of each text.
  uint32_t* out_ids;
  uint32_t* out_ends;
  uint32_t* out_doc_tokens;
  uint32_t* out_piece_ends;  // optional: pieces' end byte offsets
  Capacity cap;
};

// The smallest capacity of the bucket ladder (powers of two) holding n bytes.
inline uint32_t bucket_bytes(size_t n) {
  uint32_t c = kMinCapacity;
  while (c < n && c < kMaxCapacity) c <<= 1;
  return c;
}

namespace layout_detail {
inline size_t align(size_t x) { return (x + 255) & ~size_t(255); }
inline uint32_t words_for(uint32_t bits) { return (((bits + 31) / 32) + 31) / 32 * 32; }
}  // namespace layout_detail

// Lays out the workspace of `cap` from `base` (nullptr: only measures); returns its bytes.
// Outputs are laid out too unless `with_outputs` is false (the CUDA launcher maps its own).
inline size_t layout_workspace(const Capacity& cap, uint8_t* base, Workspace* ws, bool with_outputs) {
  using layout_detail::align;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    uint8_t* p = base ? base + at : nullptr;
    at = align(at + bytes);
    return p;
  };
  const uint32_t bits = cap.bytes + 64;  // position n and a margin
  const uint32_t w0 = layout_detail::words_for(bits);
  ws->cap = cap;
  ws->counters = reinterpret_cast<Counters*>(take(sizeof(Counters)));
  ws->text = take(size_t(w0) * 32 + 64);
  ws->seg_bounds = reinterpret_cast<uint32_t*>(take(4 * (size_t(cap.segments) + 1)));
  ws->seg_tokens = reinterpret_cast<uint32_t*>(take(4 * (size_t(cap.segments) + 1)));
  ws->doc_offsets = reinterpret_cast<uint32_t*>(take(4 * (size_t(cap.docs) + 1)));
  ws->cls = take(size_t(w0) * 32 + 64);
  BitTree* trees[kNumClassSets + 1 + 2 * kMaxStages];
  int k = 0;
  for (auto& t : ws->sets) trees[k++] = &t;
  trees[k++] = &ws->barriers;
  for (auto& t : ws->anchors) trees[k++] = &t;
  for (auto& t : ws->starts) trees[k++] = &t;
  uint32_t upper = 0;  // words of levels >= 2, in one range
  for (BitTree* t : trees) {
    t->levels = 0;
    for (uint32_t w = w0;; w = (w + 31) / 32) {
      t->words[t->levels++] = w;
      if (w == 1 || t->levels == kMaxLevels) break;
    }
    for (uint32_t l = 2; l < t->levels; ++l) upper += t->words[l];
  }
  for (BitTree* t : trees) {
    t->level[0] = reinterpret_cast<uint32_t*>(take(4 * size_t(t->words[0])));
    t->level[1] = reinterpret_cast<uint32_t*>(take(4 * size_t(t->words[1])));
  }
  ws->upper_words = reinterpret_cast<uint32_t*>(take(4 * size_t(upper)));
  ws->upper_count = upper;
  uint32_t off = 0;
  for (BitTree* t : trees)
    for (uint32_t l = 2; l < t->levels; ++l) {
      t->level[l] = ws->upper_words ? ws->upper_words + off : nullptr;
      off += t->words[l];
    }
  auto u32s = [&](size_t count) { return reinterpret_cast<uint32_t*>(take(4 * count)); };
  ws->lead_rank = u32s(w0 + 1);
  ws->start_rank = u32s(w0 + 1);
  ws->piece_start = u32s(size_t(cap.bytes) + 2);
  ws->ntok = u32s(size_t(cap.bytes) + 2);
  ws->tok_off = u32s(size_t(cap.bytes) + 2);
  ws->warp_list = u32s(cap.bytes / (kThreadPiece + 1) + 2);
  ws->block_list = u32s(cap.bytes / (kWarpPiece + 1) + 2);
  ws->ids = u32s(cap.bytes + 1);
  ws->ends = u32s(cap.bytes + 1);
  for (uint32_t** a : {&ws->bpe.sym, &ws->bpe.nxt, &ws->bpe.prv, &ws->bpe.prio, &ws->bpe.mrg, &ws->bpe.sel,
                       &ws->bpe.rl, &ws->bpe.ml, &ws->bpe.rr, &ws->bpe.mr, &ws->bpe.own})
    *a = u32s(cap.bytes + 1);
  ws->tile_sums = u32s(size_t(cap.bytes) / 1024 + 64);
  if (with_outputs) {
    ws->out_ids = u32s(cap.bytes + 1);
    ws->out_ends = u32s(cap.bytes + 1);
    ws->out_doc_tokens = u32s(size_t(cap.docs) + 1);
    ws->out_piece_ends = u32s(cap.bytes + 1);
  }
  return at;
}

}  // namespace gpu_tokenize
}  // namespace zllm
