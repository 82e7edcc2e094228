// Device code of the GPU full tokenizer (launched from gpu_tokenize.cu; tests also run it on
// the host over the SIMT stand-ins of tests/kernels/simt_host.h, so the code a GPU runs is
// the code CI checks against the CPU tokenizer).
//
// Pre-tokenization, per stage of the family's rules (zllm::Grammar, the CPU's own table):
//  1. classify: every character's CharClass from the CPU's class table, and bit sets of the
//     positions where each kind of run stops (letters, digits, punctuation, whitespace, the
//     o200k cases, newlines) with summary levels, so a run's end, the last newline or the
//     last lower-case letter before a position is a few word reads from anywhere;
//  2. anchors: a per-character predicate over the class pair at each character (bounded
//     lookback of one character) marks the positions no piece of the family can span: a
//     letter after a digit, a digit after a letter, a letter after a newline, and so on;
//  3. walk: from each anchor one thread follows the CPU scanner's own alternatives
//     (Scanner::piece_end in pretokenizer.cpp, transliterated with run ends from the bit
//     sets instead of loops) to the next anchor, marking piece starts. Inside a digit run
//     of groups of k the starts follow from the character offset, so no walk crosses a long
//     digit run. A piece that would cross an anchor sets a flag that voids the run (the CPU
//     redoes it), so a wrong anchor can cost speed but never exactness.
// Pieces are then compacted by a scan, and merged in length buckets:
//  - up to 32 bytes, one thread each, the CPU's flat merge loop in registers;
//  - up to 128 bytes, one warp each in shared memory, and longer, one block each over global
//    memory, both by rounds: the lowest priority present (a warp reduction), its occurrences
//    taken left to right without overlap (a scan of candidate runs), and merged together up
//    to the first one whose new neighbour pair would rank lower (then the sequential order
//    differs), which is the CPU's lowest-priority-leftmost order exactly.
// A final compaction writes ids in order. Every count the stages need stays on the device;
// grids are sized by capacity and loop over the device-resident counts.
#pragma once

#include <cstdint>

#include "class_table.h"
#include "gpu_tokenize.h"

namespace zllm {
namespace gpu_tokenize {
namespace kernels {

constexpr int kThreads = 256;          // every kernel's block but the warp bucket's
constexpr int kWarpBpeThreads = 128;   // four warps, one piece each
constexpr int kScanItems = 8;
constexpr uint32_t kScanTile = kThreads * kScanItems;

__device__ __forceinline__ uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint32_t lowest_bit(uint32_t m) { return uint32_t(__ffs(int(m))) - 1; }
__device__ __forceinline__ uint32_t highest_bit(uint32_t m) { return 31 - uint32_t(__clz(int(m))); }
__device__ __forceinline__ uint32_t bits_below(uint32_t i) { return i ? 0xFFFFFFFFu >> (32 - i) : 0; }  // i < 32
__device__ __forceinline__ uint32_t utf8_len(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
constexpr uint8_t kContinuation = 0xFF;  // cls of a byte inside a character
// The class at byte b read as a character's: a stray continuation byte (invalid UTF-8, which no
// str holds) is punctuation.
__device__ __forceinline__ uint8_t class_at(const uint8_t* cls, uint32_t b) {
  return cls[b] == kContinuation ? uint8_t(kOther) : cls[b];
}
// The first byte of the character before byte b (b > 0), never before the text.
__device__ __forceinline__ uint32_t prev_lead(const uint8_t* cls, uint32_t b) {
  uint32_t a = b - 1;
  while (a > 0 && cls[a] == kContinuation) --a;
  return a;
}

// ---------------------------------------------------------------------------- bit trees

__device__ __forceinline__ bool test_bit(const BitTree& t, uint32_t p) { return (t.level[0][p >> 5] >> (p & 31)) & 1u; }

// The first set position >= p, or kNone.
__device__ uint32_t first_set(const BitTree& t, uint32_t p) {
  uint32_t idx = p, lv = 0;
  for (;;) {
    if (lv == t.levels) return kNone;
    const uint32_t w = idx >> 5;
    if (w >= t.words[lv]) return kNone;
    const uint32_t m = t.level[lv][w] & (0xFFFFFFFFu << (idx & 31));
    if (m) {
      idx = (w << 5) + lowest_bit(m);
      break;
    }
    idx = w + 1;
    ++lv;
  }
  while (lv > 0) {
    --lv;
    idx = (idx << 5) + lowest_bit(t.level[lv][idx]);
  }
  return idx;
}

// The last set position <= p, or kNone.
__device__ uint32_t last_set(const BitTree& t, uint32_t p) {
  int64_t idx = p;
  uint32_t lv = 0;
  for (;;) {
    if (idx < 0 || lv == t.levels) return kNone;
    const uint32_t w = uint32_t(idx) >> 5, i = uint32_t(idx) & 31;
    const uint32_t m = t.level[lv][w] & (i == 31 ? 0xFFFFFFFFu : (2u << i) - 1);
    if (m) {
      idx = int64_t(w << 5) + highest_bit(m);
      break;
    }
    idx = int64_t(w) - 1;
    ++lv;
  }
  while (lv > 0) {
    --lv;
    idx = (idx << 5) + highest_bit(t.level[lv][idx]);
  }
  return uint32_t(idx);
}

// Sets bit idx of level lv and the summary bits above it that were not yet set.
__device__ void set_summary(const BitTree& t, uint32_t lv, uint32_t idx) {
  for (; lv < t.levels; ++lv, idx >>= 5) {
    const uint32_t old = atomicOr(&t.level[lv][idx >> 5], 1u << (idx & 31));
    if (old) return;  // the word was nonzero: whoever set it sets the levels above
  }
}

// A warp's 32 consecutive level-0 words (word chunk * 32 + lane): stores them (unless the
// caller already did), their level-1 summary word, and the summary above.
__device__ void publish_words(const BitTree& t, uint32_t chunk, uint32_t lane, uint32_t word, bool store) {
  if (store) t.level[0][chunk * 32 + lane] = word;
  const uint32_t nonzero = __ballot_sync(0xFFFFFFFFu, word != 0);
  if (lane == 0) {
    t.level[1][chunk] = nonzero;
    if (nonzero && t.levels > 2) set_summary(t, 2, chunk);
  }
}

__device__ __forceinline__ void mark(const BitTree& t, uint32_t p) { atomicOr(&t.level[0][p >> 5], 1u << (p & 31)); }

// Set positions before p, from a word-level exclusive scan of the tree's popcounts.
__device__ __forceinline__ uint32_t rank_of(const BitTree& t, const uint32_t* word_rank, uint32_t p) {
  return word_rank[p >> 5] + __popc(t.level[0][p >> 5] & bits_below(p & 31));
}

// ---------------------------------------------------------------------------- thread layout

struct WarpSpan {  // a grid's warps over chunks of 32 words (1024 positions)
  uint32_t lane, warp, warps;
};
__device__ __forceinline__ WarpSpan warp_span() {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  return {threadIdx.x & 31, t >> 5, (gridDim.x * blockDim.x) >> 5};
}
__device__ __forceinline__ uint32_t global_thread() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t grid_threads() { return gridDim.x * blockDim.x; }
// Words of positions [0, n]: position n carries the end-of-text marks.
__device__ __forceinline__ uint32_t active_words(uint32_t n) { return (n >> 5) + 1; }
__device__ __forceinline__ uint32_t active_chunks(uint32_t n) { return (active_words(n) + 31) >> 5; }

// ---------------------------------------------------------------------------- classes

__host__ __device__ constexpr uint32_t cbit(uint32_t c) { return 1u << c; }
constexpr uint32_t kLetters = cbit(kLu) | cbit(kLl) | cbit(kLt) | cbit(kLm) | cbit(kLo);
constexpr uint32_t kSpaces = cbit(kSpace) | cbit(kCR) | cbit(kLF);
constexpr uint32_t kNewlines = cbit(kCR) | cbit(kLF);
constexpr uint32_t kPunct = cbit(kOther) | cbit(kMark);                 // [^\s\p{L}\p{N}]
constexpr uint32_t kPrefix = cbit(kOther) | cbit(kMark) | cbit(kSpace);  // [^\r\n\p{L}\p{N}]
constexpr uint32_t kUpper = cbit(kLu) | cbit(kLt) | cbit(kLm) | cbit(kLo) | cbit(kMark);  // o200k U
constexpr uint32_t kLower = cbit(kLl) | cbit(kLm) | cbit(kLo) | cbit(kMark);             // o200k W
constexpr uint32_t kDigits = cbit(kNum);

// decode_utf8 of pretokenizer.h, reading nothing at or past n.
__device__ uint32_t decode_at(const uint8_t* s, uint32_t i, uint32_t n) {
  const uint32_t b = s[i], len = utf8_len(uint8_t(b));
  if (i + len > n) return 0xFFFD;  // a truncated character (never in text Python encoded)
  if (len == 1) return b;
  if (len == 2) return ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
  if (len == 3) return ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
  return ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
}

__device__ __forceinline__ uint8_t class_of(const Tables& t, uint32_t cp) {
  if (cp >= 0x110000) return kOther;
  constexpr uint32_t kBits = ClassTable::kBlockBits;
  return t.class_rows[(uint32_t(t.row_of_block[cp >> kBits]) << kBits) | (cp & ((1u << kBits) - 1))];
}

// ---------------------------------------------------------------------------- segments

// The segment holding byte p (segments are nonempty and ordered).
__device__ uint32_t segment_of(const Workspace& ws, uint32_t p) {
  uint32_t lo = 0, hi = ws.counters->segments;  // seg_bounds[lo] <= p < seg_bounds[hi]
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) >> 1;
    if (ws.seg_bounds[mid] <= p) lo = mid; else hi = mid;
  }
  return lo;
}

// Bits of word w's positions that lie inside a special token but not at its start: no piece
// starts there.
__device__ uint32_t special_body(const Workspace& ws, uint32_t w) {
  const Counters& c = *ws.counters;
  const uint32_t base = w << 5;
  if (base >= c.n || c.segments == 0) return 0;
  uint32_t body = 0;
  for (uint32_t s = segment_of(ws, base); s < c.segments && ws.seg_bounds[s] < base + 32; ++s) {
    if (ws.seg_tokens[s] == kNone) continue;
    const uint32_t lo = umax(ws.seg_bounds[s] + 1, base), hi = umin(ws.seg_bounds[s + 1], base + 32);
    for (uint32_t p = lo; p < hi; ++p) body |= 1u << (p - base);
  }
  return body;
}

// ---------------------------------------------------------------------------- 1. classify

__global__ void __launch_bounds__(kThreads) clear_kernel(Workspace ws) {
  for (uint32_t i = global_thread(); i < ws.upper_count; i += grid_threads()) ws.upper_words[i] = 0;
  if (global_thread() == 0) {
    ws.counters->flags = 0;
    ws.counters->warp_pieces = 0;
    ws.counters->block_pieces = 0;
  }
}

__global__ void __launch_bounds__(kThreads) classify_kernel(Workspace ws, Tables t) {
  const uint32_t n = ws.counters->n;
  const WarpSpan span = warp_span();
  for (uint32_t chunk = span.warp; chunk < active_chunks(n); chunk += span.warps) {
    const uint32_t w = chunk * 32 + span.lane;
    uint32_t words[kNumClassSets] = {};
    for (uint32_t k = 0; k < 32; ++k) {
      const uint32_t b = w * 32 + k;
      uint8_t c = kContinuation;
      if (b < n && (ws.text[b] & 0xC0) != 0x80) {
        c = class_of(t, decode_at(ws.text, b, n));
        const uint32_t m = cbit(c), one = 1u << k;
        words[kLead] |= one;
        if (!(m & kLetters)) words[kStopLetter] |= one;
        if (!(m & kUpper)) words[kStopUpper] |= one;
        if (!(m & kLower)) words[kStopLower] |= one;
        if (!(m & kDigits)) words[kStopDigit] |= one;
        if (m & kDigits) words[kIsDigit] |= one;
        if (!(m & kPunct)) words[kStopPunct] |= one;
        if (!(m & kSpaces)) words[kStopSpace] |= one;
        if (!(m & kNewlines)) words[kStopNewline] |= one;
        if (!(m & kNewlines) && ws.text[b] != '/') words[kStopNewlineSlash] |= one;
        if (m & kNewlines) words[kIsNewline] |= one;
        if (m & kLower) words[kIsLower] |= one;
      }
      ws.cls[b] = c;
    }
    for (int s = 0; s < kNumClassSets; ++s) publish_words(ws.sets[s], chunk, span.lane, words[s], true);
  }
}

// Stage 0's barriers: every segment start (texts of the batch, special tokens, the text
// after them) and n. Pieces never cross one.
__global__ void __launch_bounds__(kThreads) barriers_kernel(Workspace ws) {
  const Counters& c = *ws.counters;
  const WarpSpan span = warp_span();
  for (uint32_t chunk = span.warp; chunk < active_chunks(c.n); chunk += span.warps) {
    const uint32_t w = chunk * 32 + span.lane, base = w << 5;
    uint32_t word = 0;
    if (base <= c.n && c.segments) {
      for (uint32_t s = base < c.n ? segment_of(ws, base) : c.segments; s <= c.segments; ++s) {
        const uint32_t p = ws.seg_bounds[s];
        if (p >= base + 32) break;
        if (p >= base) word |= 1u << (p - base);
      }
    }
    if (c.n >= base && c.n < base + 32) word |= 1u << (c.n - base);
    publish_words(ws.barriers, chunk, span.lane, word, true);
  }
}

// ---------------------------------------------------------------------------- 2. anchors

// Whether a piece of grammar g can hold a character of class ca (first byte ba) followed by
// one of class cb (first byte bb). Read off the alternatives of pretokenizer.cpp: letters
// after a one-character prefix, contractions, digits after an optional space, punctuation
// after an optional space with its newline (and o200k slash) tail, whitespace runs, and
// o200k's cased words with their marks and suffix contraction. Where it answers false the
// position is a sure piece start (an anchor); the walk checks that no piece crosses one.
__device__ bool can_span(const Grammar& g, uint8_t ca, uint8_t ba, uint8_t cb, uint8_t bb) {
  const uint32_t a = cbit(ca), b = cbit(cb);
  if (g.digits_only) return ((a & kDigits) != 0) == ((b & kDigits) != 0);
  if ((a | b) & kDigits) return ((a & b) & kDigits) || (g.digit_space_prefix && ba == ' ' && (b & kDigits));
  if ((a & kSpaces) && (b & kSpaces)) return true;
  const bool cased = g.letters == Grammar::kCased;
  const uint32_t word = cased ? (kLetters | cbit(kMark)) : kLetters;  // what follows a word's prefix
  if (b & word) {
    if (a & word) {
      // In a cased word a W-only letter (Ll) never precedes a U-only one (Lu, Lt), except
      // inside a case-insensitive contraction ('lL), which is ASCII.
      if (cased && ca == kLl && (cb == kLu || cb == kLt))
        return g.contractions != Grammar::kNone && ba < 0x80 && bb < 0x80;
      return true;
    }
    if (g.letters == Grammar::kSpacePrefixed ? ba == ' ' : (a & kPrefix) != 0) return true;
    if (g.contractions != Grammar::kNone && ba == '\'') return true;
  }
  if (b & kPunct) {
    if (a & kPunct) return true;
    if (g.punct_space_prefix && ba == ' ') return true;
    if (g.punct_slash && bb == '/' && (a & kNewlines)) return true;
    if (g.contractions == Grammar::kSuffixCaseInsensitive && bb == '\'' && (a & word)) return true;
  }
  if (b & kNewlines) return g.punct_newlines && (a & kPunct);
  return false;
}

// Stage `stage`'s anchors (and its start set, seeded with them).
__global__ void __launch_bounds__(kThreads) anchors_kernel(Workspace ws, Tables t, uint32_t stage) {
  const uint32_t n = ws.counters->n;
  const Grammar g = t.stages[stage];
  const BitTree& barriers = stage == 0 ? ws.barriers : ws.starts[stage - 1];
  const WarpSpan span = warp_span();
  for (uint32_t chunk = span.warp; chunk < active_chunks(n); chunk += span.warps) {
    const uint32_t w = chunk * 32 + span.lane;
    const uint32_t bar = barriers.level[0][w];
    uint32_t pairs = 0;
    for (uint32_t m = ws.sets[kLead].level[0][w] & ~bar; m; m &= m - 1) {
      const uint32_t b = (w << 5) + lowest_bit(m), a = prev_lead(ws.cls, b);
      if (!can_span(g, class_at(ws.cls, a), ws.text[a], ws.cls[b], ws.text[b])) pairs |= 1u << (b & 31);
    }
    const uint32_t word = (bar | pairs) & ~special_body(ws, w);
    ws.starts[stage].level[0][w] = word;
    publish_words(ws.anchors[stage], chunk, span.lane, word, true);
  }
}

// ---------------------------------------------------------------------------- 3. walk

// Scanner::piece_end of pretokenizer.cpp over the bit sets: positions are bytes, `limit`
// (the next barrier) plays the text end, and a run's end is one query instead of a loop.
struct Scanner {
  const uint8_t* s;
  const uint8_t* cls;
  const BitTree* sets;
  Grammar g;
  uint32_t limit;

  __device__ bool in(uint32_t i, uint32_t set) const {
    return i < limit && cls[i] != kContinuation && (cbit(cls[i]) & set);
  }
  // The end of the run of characters from i whose stop set is `stop` (i itself when it stops).
  __device__ uint32_t run(uint32_t i, int stop) const {
    return i >= limit ? i : umin(first_set(sets[stop], i), limit);
  }

  __device__ uint32_t piece_end(uint32_t i) const {
    if (g.digits_only) return digit_split_end(i);
    const uint8_t c0 = class_at(cls, i);
    const uint32_t next = i + utf8_len(s[i]);
    if (s[i] == '\'' && (g.contractions == Grammar::kPrefixCaseSensitive ||
                         g.contractions == Grammar::kPrefixCaseInsensitive)) {
      if (uint32_t e = contraction(i, g.contractions == Grammar::kPrefixCaseInsensitive)) return e;
    }
    if (uint32_t e = letters(i, c0, next)) return e;
    if (uint32_t e = digits(i)) return e;
    if (uint32_t e = punctuation(i)) return e;
    return spaces(i);
  }

  __device__ static uint8_t ascii_lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? c | 0x20 : c; }

  __device__ uint32_t contraction(uint32_t i, bool fold) const {
    if (i + 1 >= limit) return 0;
    const uint8_t a = fold ? ascii_lower(s[i + 1]) : s[i + 1];
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
    if (fold && a == 0xC5 && i + 2 < limit && s[i + 2] == 0xBF) return i + 3;
    if (i + 2 >= limit) return 0;
    const uint8_t b = fold ? ascii_lower(s[i + 2]) : s[i + 2];
    if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
    return 0;
  }

  __device__ uint32_t letters(uint32_t i, uint8_t c0, uint32_t next) const {
    switch (g.letters) {
      case Grammar::kSpacePrefixed: {
        const uint32_t j = s[i] == ' ' ? i + 1 : i;
        return in(j, kLetters) ? run(j, kStopLetter) : 0;
      }
      case Grammar::kAnyPrefixed:
        if (cbit(c0) & kLetters) return run(i, kStopLetter);
        return (cbit(c0) & kPrefix) && in(next, kLetters) ? run(next, kStopLetter) : 0;
      case Grammar::kCased:
        return cased_word(i, c0, next);
    }
    return 0;
  }

  // `P?U*W+C?|P?U+W*C?`: U* gives back to its last W character when no W follows its run.
  __device__ uint32_t cased_word(uint32_t i, uint8_t c0, uint32_t next) const {
    const bool prefixable = cbit(c0) & kPrefix;
    for (int with_prefix = prefixable; with_prefix >= 0; --with_prefix) {
      const uint32_t start = with_prefix ? next : i;
      const uint32_t e = run(start, kStopUpper);
      uint32_t last_lower_end = 0;
      if (e > start) {
        const uint32_t lw = last_set(sets[kIsLower], e - 1);
        if (lw != kNone && lw >= start) last_lower_end = lw + utf8_len(s[lw]);
      }
      if (in(e, kLower)) return suffix(run(e, kStopLower));
      if (last_lower_end) return suffix(last_lower_end);
    }
    for (int with_prefix = prefixable; with_prefix >= 0; --with_prefix) {
      const uint32_t start = with_prefix ? next : i;
      if (in(start, kUpper)) return suffix(run(run(start, kStopUpper), kStopLower));
    }
    return 0;
  }
  __device__ uint32_t suffix(uint32_t e) const {
    if (g.contractions == Grammar::kSuffixCaseInsensitive && e < limit && s[e] == '\'') {
      if (uint32_t c = contraction(e, true)) return c;
    }
    return e;
  }

  __device__ uint32_t digits(uint32_t i) const {
    uint32_t j = (g.digit_space_prefix && s[i] == ' ') ? i + 1 : i;
    if (!in(j, kDigits)) return 0;
    if (g.digit_group == 0) return run(j, kStopDigit);
    for (int k = 0; k < g.digit_group && in(j, kDigits); ++k) j += utf8_len(s[j]);
    return j;
  }

  __device__ uint32_t punctuation(uint32_t i) const {
    const uint32_t j = (g.punct_space_prefix && s[i] == ' ') ? i + 1 : i;
    if (!in(j, kPunct)) return 0;
    const uint32_t e = run(j, kStopPunct);
    if (!g.punct_newlines) return e;
    return run(e, g.punct_slash ? kStopNewlineSlash : kStopNewline);
  }

  // `\s+$`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s`, from where the run ends, its last newline and
  // where its last character starts.
  __device__ uint32_t spaces(uint32_t i) const {
    const uint32_t e = run(i, kStopSpace);
    uint32_t last_start = e - 1;
    while (last_start > i && cls[last_start] == kContinuation) --last_start;
    const uint32_t nl = last_set(sets[kIsNewline], e - 1);
    const uint32_t after_newline = (nl != kNone && nl >= i) ? nl + 1 : 0;
    if (e == limit && g.space_run_to_end) return e;
    if (after_newline && g.newline_rule) return after_newline;
    if (e == limit) return e;
    return last_start > i ? last_start : e;
  }

  __device__ uint32_t digit_split_end(uint32_t i) const {
    if (!in(i, kDigits)) return umin(first_set(sets[kIsDigit], i), limit);
    if (g.digit_group == 0) return run(i, kStopDigit);
    for (int k = 0; k < g.digit_group && in(i, kDigits); ++k) i += utf8_len(s[i]);
    return i;
  }
};

struct Walk {
  const Workspace& ws;
  const Tables& t;
  Grammar g;
  const BitTree& barriers;
  const BitTree& anchors;
  const BitTree& starts;

  // A digit whose run (within the stage's barriers) began before it.
  __device__ bool inside_digit_run(uint32_t b) const {
    return g.digit_group > 0 && ws.cls[b] == kNum && !test_bit(barriers, b) && ws.cls[prev_lead(ws.cls, b)] == kNum;
  }
  // Whether the k-groups counted from its run's first digit start at digit b.
  __device__ bool starts_digit_group(uint32_t b) const {
    uint32_t first = 0;  // the run's first character, as a character index
    const uint32_t other = last_set(ws.sets[kStopDigit], b - 1);
    if (other != kNone) first = rank_of(ws.sets[kLead], ws.lead_rank, other) + 1;
    const uint32_t bar = last_set(barriers, b);
    if (bar != kNone) first = umax(first, rank_of(ws.sets[kLead], ws.lead_rank, bar));
    return (rank_of(ws.sets[kLead], ws.lead_rank, b) - first) % g.digit_group == 0;
  }

  // Marks the pieces from anchor p up to the next anchor.
  __device__ void segment(uint32_t p) const {
    if (test_bit(ws.barriers, p) && ws.seg_tokens[segment_of(ws, p)] != kNone) return;  // a special token
    const uint32_t next_anchor = first_set(anchors, p + 1);
    const Scanner sc{ws.text, ws.cls, ws.sets, g, first_set(barriers, p + 1)};
    for (uint32_t q = p;;) {
      const uint32_t e = sc.piece_end(q);
      if (e <= q || e > next_anchor) {
        atomicOr(&ws.counters->flags, uint32_t(kPieceAcrossAnchor));
        return;
      }
      if (e == next_anchor) return;
      q = e;
      if (inside_digit_run(q)) {  // the rest of the run is the digit pass's
        if (!starts_digit_group(q)) atomicOr(&ws.counters->flags, uint32_t(kDigitGroupBreak));
        return;
      }
      mark(starts, q);
    }
  }
};

__global__ void __launch_bounds__(kThreads) walk_kernel(Workspace ws, Tables t, uint32_t stage) {
  const uint32_t n = ws.counters->n;
  const Walk walk{ws, t, t.stages[stage], stage == 0 ? ws.barriers : ws.starts[stage - 1], ws.anchors[stage],
                  ws.starts[stage]};
  for (uint32_t w = global_thread(); w < active_words(n); w += grid_threads()) {
    const uint32_t limit = (w << 5) < n ? umin(32, n - (w << 5)) : 0;
    const uint32_t in_text = limit == 32 ? 0xFFFFFFFFu : bits_below(limit);
    for (uint32_t m = walk.anchors.level[0][w] & in_text; m; m &= m - 1) walk.segment((w << 5) + lowest_bit(m));
    if (walk.g.digit_group == 0) continue;
    const uint32_t digits = ws.sets[kIsDigit].level[0][w] & in_text & ~special_body(ws, w);
    for (uint32_t m = digits; m; m &= m - 1) {
      const uint32_t b = (w << 5) + lowest_bit(m);
      if (walk.inside_digit_run(b) && walk.starts_digit_group(b)) mark(walk.starts, b);
    }
  }
}

// Summary levels of a tree whose level-0 words were set by atomics (a stage's starts, which
// the next stage reads as its barriers).
__global__ void __launch_bounds__(kThreads) summarize_kernel(Workspace ws, BitTree t) {
  const uint32_t n = ws.counters->n;
  const WarpSpan span = warp_span();
  for (uint32_t chunk = span.warp; chunk < active_chunks(n); chunk += span.warps)
    publish_words(t, chunk, span.lane, t.level[0][chunk * 32 + span.lane], false);
}

// ---------------------------------------------------------------------------- groups

// A warp or a block acting together; the merge rounds and scans are written once over these.
struct WarpGroup {
  static constexpr uint32_t kSize = 32;
  uint32_t rank;
  __device__ void sync() const { __syncwarp(); }
  __device__ uint32_t min(uint32_t v) const { return __reduce_min_sync(0xFFFFFFFFu, v); }
  template <class Op>
  __device__ uint32_t exclusive_scan(uint32_t v, uint32_t identity, Op op, uint32_t* total) const {
    for (uint32_t d = 1; d < 32; d <<= 1) {
      const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, v, d);
      if (rank >= d) v = op(y, v);
    }
    *total = __shfl_sync(0xFFFFFFFFu, v, 31);
    const uint32_t before = __shfl_up_sync(0xFFFFFFFFu, v, 1);
    return rank == 0 ? identity : before;
  }
};

struct BlockGroup {
  static constexpr uint32_t kSize = kThreads;
  static constexpr uint32_t kWarps = kThreads / 32;
  uint32_t rank;
  uint32_t* shared;  // kWarps + 1 words
  __device__ void sync() const { __syncthreads(); }
  __device__ uint32_t min(uint32_t v) const {
    const uint32_t w = __reduce_min_sync(0xFFFFFFFFu, v);
    if ((rank & 31) == 0) shared[rank >> 5] = w;
    __syncthreads();
    if (rank < 32) {
      const uint32_t r = __reduce_min_sync(0xFFFFFFFFu, rank < kWarps ? shared[rank] : kNone);
      if (rank == 0) shared[kWarps] = r;
    }
    __syncthreads();
    const uint32_t result = shared[kWarps];
    __syncthreads();
    return result;
  }
  template <class Op>
  __device__ uint32_t exclusive_scan(uint32_t v, uint32_t identity, Op op, uint32_t* total) const {
    const WarpGroup warp{rank & 31};
    uint32_t warp_total;
    const uint32_t in_warp = warp.exclusive_scan(v, identity, op, &warp_total);
    if ((rank & 31) == 0) shared[rank >> 5] = warp_total;
    __syncthreads();
    if (rank < 32) {
      uint32_t all;
      const uint32_t before = warp.exclusive_scan(rank < kWarps ? shared[rank] : identity, identity, op, &all);
      __syncthreads();
      if (rank < kWarps) shared[rank] = before;
      if (rank == 0) shared[kWarps] = all;
    } else {
      __syncthreads();
    }
    __syncthreads();
    const uint32_t result = op(shared[rank >> 5], in_warp);
    *total = shared[kWarps];
    __syncthreads();
    return result;
  }
};

struct Add {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a + b; }
};

// ---------------------------------------------------------------------------- 4. scans

// Exclusive prefix sums of a device-resident number of values: tile sums, their scan (one
// block), then each tile with its carry. Src gives count(counters) and value(i).
struct LeadWords {
  const uint32_t* words;
  __device__ uint32_t count(const Counters& c) const { return active_words(c.n); }
  __device__ uint32_t value(const Counters&, uint32_t i) const { return __popc(words[i]); }
};
struct StartWords {  // piece starts before position n
  const uint32_t* words;
  __device__ uint32_t count(const Counters& c) const { return active_words(c.n); }
  __device__ uint32_t value(const Counters& c, uint32_t i) const {
    const uint32_t w = words[i];
    if ((i << 5) + 32 <= c.n) return __popc(w);
    return (i << 5) >= c.n ? 0 : __popc(w & bits_below(c.n - (i << 5)));
  }
};
struct PieceTokens {
  const uint32_t* ntok;
  __device__ uint32_t count(const Counters& c) const { return c.pieces; }
  __device__ uint32_t value(const Counters&, uint32_t i) const { return ntok[i]; }
};

template <class Src>
__device__ uint32_t tile_values(const Counters& c, const Src& src, uint32_t tile, uint32_t (&v)[kScanItems]) {
  const uint32_t count = src.count(c), first = tile * kScanTile + threadIdx.x * kScanItems;
  uint32_t sum = 0;
  for (int k = 0; k < kScanItems; ++k) {
    v[k] = first + k < count ? src.value(c, first + k) : 0;
    sum += v[k];
  }
  return sum;
}

template <class Src>
__global__ void __launch_bounds__(kThreads) scan_tiles_kernel(Workspace ws, Src src) {
  __shared__ uint32_t shared[BlockGroup::kWarps + 1];
  const Counters& c = *ws.counters;
  const BlockGroup g{threadIdx.x, shared};
  const uint32_t tiles = (src.count(c) + kScanTile - 1) / kScanTile;
  for (uint32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint32_t v[kScanItems], total;
    g.exclusive_scan(tile_values(c, src, tile, v), 0, Add{}, &total);
    if (threadIdx.x == 0) ws.tile_sums[tile] = total;
  }
}

template <class Src>
__global__ void __launch_bounds__(kThreads) scan_sums_kernel(Workspace ws, Src src) {
  __shared__ uint32_t shared[BlockGroup::kWarps + 1];
  const BlockGroup g{threadIdx.x, shared};
  const uint32_t tiles = (src.count(*ws.counters) + kScanTile - 1) / kScanTile;
  uint32_t carry = 0;
  for (uint32_t base = 0; base < tiles; base += kThreads) {
    const uint32_t i = base + threadIdx.x;
    const uint32_t v = i < tiles ? ws.tile_sums[i] : 0;
    uint32_t total;
    const uint32_t before = g.exclusive_scan(v, 0, Add{}, &total);
    if (i < tiles) ws.tile_sums[i] = carry + before;
    carry += total;
  }
  if (threadIdx.x == 0) ws.tile_sums[tiles] = carry;
}

template <class Src>
__global__ void __launch_bounds__(kThreads) scan_apply_kernel(Workspace ws, Src src, uint32_t* out) {
  __shared__ uint32_t shared[BlockGroup::kWarps + 1];
  const Counters& c = *ws.counters;
  const BlockGroup g{threadIdx.x, shared};
  const uint32_t count = src.count(c), tiles = (count + kScanTile - 1) / kScanTile;
  for (uint32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint32_t v[kScanItems], total;
    uint32_t at = ws.tile_sums[tile] + g.exclusive_scan(tile_values(c, src, tile, v), 0, Add{}, &total);
    const uint32_t first = tile * kScanTile + threadIdx.x * kScanItems;
    for (int k = 0; k < kScanItems; ++k) {
      if (first + k < count) out[first + k] = at;
      at += v[k];
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) out[count] = ws.tile_sums[tiles];
}

// ---------------------------------------------------------------------------- 5. pieces

__global__ void __launch_bounds__(kThreads) pieces_kernel(Workspace ws, BitTree starts) {
  Counters& c = *ws.counters;
  const uint32_t n = c.n;
  for (uint32_t w = global_thread(); w < active_words(n); w += grid_threads()) {
    const uint32_t limit = (w << 5) < n ? umin(32, n - (w << 5)) : 0;
    uint32_t rank = ws.start_rank[w];
    for (uint32_t m = starts.level[0][w] & (limit == 32 ? 0xFFFFFFFFu : bits_below(limit)); m; m &= m - 1)
      ws.piece_start[rank++] = (w << 5) + lowest_bit(m);
  }
  if (global_thread() == 0) {
    const uint32_t pieces = ws.start_rank[active_words(n)];
    c.pieces = pieces;
    ws.piece_start[pieces] = n;
  }
}

// ---------------------------------------------------------------------------- 6. merges

struct PairHit {
  uint32_t priority, merged;
};

__device__ PairHit pair_lookup(const Tables& t, uint32_t left, uint32_t right) {
  if (left == kNone || right == kNone) return {kNone, kNone};
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = spread(key) & t.pair_mask;; i = (i + 1) & t.pair_mask) {
    const PairSlot& s = t.pairs[i];
    if (s.key == key) return {s.priority, s.merged};
    if (s.key == kEmptyPair) return {kNone, kNone};
  }
}

// The id of the token whose bytes are p[0, n), or kNone.
__device__ uint32_t vocab_find(const Tables& t, const uint8_t* p, uint32_t n) {
  if (n > t.max_token_len) return kNone;
  const uint64_t h = bytes_hash(p, n);
  for (uint64_t i = h & t.vocab_mask;; i = (i + 1) & t.vocab_mask) {
    const VocabSlot& s = t.vocab[i];
    if (s.id == kNone) return kNone;
    if (s.hash != h || s.len != n) continue;
    const uint8_t* token = t.arena + t.offsets[s.id];
    uint32_t k = 0;
    while (k < n && token[k] == p[k]) ++k;
    if (k == n) return s.id;
  }
}

// One thread: BytePairModel::merge_small's loop (bpe.cpp) with the arrays in registers.
// Writes the tokens and their end offsets at ids/ends[0, count) and returns the count.
__device__ uint32_t merge_in_thread(const Tables& t, const uint8_t* p, uint32_t n, uint32_t base, uint32_t* ids,
                                    uint32_t* ends) {
  if (n == 1 || t.whole_piece_first) {
    const uint32_t id = n == 1 ? t.byte_ids[p[0]] : vocab_find(t, p, n);
    if (id != kNone || n == 1) {
      ids[0] = id;
      ends[0] = base + n;
      return 1;
    }
  }
  uint32_t sym[kThreadPiece], prio[kThreadPiece], mrg[kThreadPiece];
  uint8_t nxt[kThreadPiece], prv[kThreadPiece];
  for (uint32_t k = 0; k < n; ++k) {
    sym[k] = t.byte_ids[p[k]];
    nxt[k] = uint8_t(k + 1);
    prv[k] = uint8_t(k - 1);
  }
  for (uint32_t k = 0; k + 1 < n; ++k) {
    const PairHit h = pair_lookup(t, sym[k], sym[k + 1]);
    prio[k] = h.priority;
    mrg[k] = h.merged;
  }
  prio[n - 1] = kNone;
  for (;;) {
    uint32_t best = 0, low = prio[0];
    for (uint32_t k = 1; k + 1 < n; ++k) {
      const bool lower = prio[k] < low;
      low = lower ? prio[k] : low;
      best = lower ? k : best;
    }
    if (low == kNone) break;
    const uint32_t gone = nxt[best], after = nxt[gone];
    sym[best] = mrg[best];
    prio[gone] = kNone;
    nxt[best] = uint8_t(after);
    if (after < n) {
      prv[after] = uint8_t(best);
      const PairHit h = pair_lookup(t, sym[best], sym[after]);
      prio[best] = h.priority;
      mrg[best] = h.merged;
    } else {
      prio[best] = kNone;
    }
    if (best > 0) {
      const uint32_t left = prv[best];
      const PairHit h = pair_lookup(t, sym[left], sym[best]);
      prio[left] = h.priority;
      mrg[left] = h.merged;
    }
  }
  uint32_t count = 0;
  for (uint32_t k = 0; k < n; k = nxt[k]) {
    ids[count] = sym[k];
    ends[count++] = base + nxt[k];
  }
  return count;
}

// Run parities for taking a round's occurrences left to right without overlap: over the
// symbols in order, f(x) = (x & a) ^ b with (a, b) packed as a | b << 1: a candidate pair
// toggles, another symbol resets, a merged-away position (no symbol) passes x on. An
// occurrence is taken when the candidates right before it are an even number.
constexpr uint32_t kPass = 1, kReset = 0, kToggle = 3;
__device__ __forceinline__ uint32_t parity_apply(uint32_t f, uint32_t x) { return (x & f & 1u) ^ (f >> 1); }
struct ParityCompose {  // g after f
  __device__ uint32_t operator()(uint32_t f, uint32_t g) const {
    return (f & g & 1u) | ((((f >> 1) & g) ^ (g >> 1)) & 1u) << 1;
  }
};

// The merges of one piece by a warp or a block, in rounds (see the file comment). Symbols
// stay at their first byte; st holds the piece's positions [0, n).
template <class G>
__device__ uint32_t merge_in_group(const G& g, const Tables& t, const uint8_t* p, uint32_t n, uint32_t base,
                                   const BpeStore& st, uint32_t* ids, uint32_t* ends) {
  constexpr uint32_t kItems = 4, kTile = G::kSize * kItems;
  if (t.whole_piece_first) {
    const uint32_t id = g.min(g.rank == 0 ? vocab_find(t, p, n) : kNone);
    if (id != kNone) {
      if (g.rank == 0) {
        ids[0] = id;
        ends[0] = base + n;
      }
      g.sync();
      return 1;
    }
  }
  for (uint32_t k = g.rank; k < n; k += G::kSize) {
    st.sym[k] = t.byte_ids[p[k]];
    st.nxt[k] = k + 1;
    st.prv[k] = k == 0 ? kNone : k - 1;
  }
  g.sync();
  for (uint32_t k = g.rank; k < n; k += G::kSize) {
    const PairHit h = k + 1 < n ? pair_lookup(t, st.sym[k], st.sym[k + 1]) : PairHit{kNone, kNone};
    st.prio[k] = h.priority;
    st.mrg[k] = h.merged;
  }
  g.sync();
  for (;;) {
    uint32_t low = kNone;
    for (uint32_t k = g.rank; k < n; k += G::kSize) low = umin(low, st.prio[k]);
    const uint32_t m = g.min(low);
    if (m == kNone) break;
    // Select this priority's occurrences that the sequential order would merge in turn.
    uint32_t carry = 0;
    for (uint32_t tile = 0; tile < n; tile += kTile) {
      const uint32_t first = tile + g.rank * kItems;
      uint32_t f = kPass;
      for (uint32_t i = 0; i < kItems && first + i < n; ++i) {
        const uint32_t k = first + i;
        const uint32_t fk = st.sym[k] == kNone ? kPass : st.prio[k] == m ? kToggle : kReset;
        f = ParityCompose{}(f, fk);
      }
      uint32_t all;
      const uint32_t before = g.exclusive_scan(f, kPass, ParityCompose{}, &all);
      uint32_t x = parity_apply(before, carry);
      for (uint32_t i = 0; i < kItems && first + i < n; ++i) {
        const uint32_t k = first + i;
        const bool live = st.sym[k] != kNone, candidate = live && st.prio[k] == m;
        st.sel[k] = candidate && x == 0;
        x = live ? (candidate ? x ^ 1u : 0u) : x;
      }
      carry = parity_apply(all, carry);
    }
    g.sync();
    // The pairs each merge makes with its neighbours at its turn; the first that ranks below
    // m ends the round there (the sequential order would take that pair next).
    uint32_t first_lower = kNone;
    for (uint32_t k = g.rank; k < n; k += G::kSize) {
      if (!st.sel[k]) continue;
      const uint32_t right_sym = st.nxt[k], right = st.nxt[right_sym], merged = st.mrg[k], left = st.prv[k];
      uint32_t owner = kNone, left_sym = kNone;
      if (left != kNone) {
        const uint32_t before_left = st.prv[left];
        if (before_left != kNone && st.sel[before_left]) {
          left_sym = st.mrg[before_left];  // merged into the symbol before it this round
        } else {
          left_sym = st.sym[left];
          owner = left;  // this merge updates the pair of the symbol to its left
        }
      }
      const PairHit lh = left != kNone ? pair_lookup(t, left_sym, merged) : PairHit{kNone, kNone};
      const PairHit rh = right < n ? pair_lookup(t, merged, st.sym[right]) : PairHit{kNone, kNone};
      st.rl[k] = lh.priority;
      st.ml[k] = lh.merged;
      st.rr[k] = rh.priority;
      st.mr[k] = rh.merged;
      st.own[k] = owner;
      if (lh.priority < m || rh.priority < m) first_lower = umin(first_lower, k);
    }
    const uint32_t last = g.min(first_lower);
    g.sync();
    for (uint32_t k = g.rank; k < n; k += G::kSize) {
      if (!st.sel[k] || k > last) continue;
      const uint32_t gone = st.nxt[k], right = st.nxt[gone], merged = st.mrg[k];
      st.sym[k] = merged;
      st.sym[gone] = kNone;
      st.prio[gone] = kNone;
      st.nxt[k] = right;
      if (right < n) st.prv[right] = k;
      if (right < n && st.sel[right] && right <= last) {  // the symbol to the right merged too
        st.prio[k] = st.rl[right];
        st.mrg[k] = st.ml[right];
      } else {
        st.prio[k] = st.rr[k];
        st.mrg[k] = st.mr[k];
      }
      if (st.own[k] != kNone) {
        st.prio[st.own[k]] = st.rl[k];
        st.mrg[st.own[k]] = st.ml[k];
      }
    }
    g.sync();
  }
  uint32_t written = 0;
  for (uint32_t tile = 0; tile < n; tile += kTile) {
    const uint32_t first = tile + g.rank * kItems;
    uint32_t live = 0;
    for (uint32_t i = 0; i < kItems && first + i < n; ++i) live += st.sym[first + i] != kNone;
    uint32_t all;
    uint32_t at = written + g.exclusive_scan(live, 0, Add{}, &all);
    for (uint32_t i = 0; i < kItems && first + i < n; ++i) {
      const uint32_t k = first + i;
      if (st.sym[k] == kNone) continue;
      ids[at] = st.sym[k];
      ends[at++] = base + st.nxt[k];
    }
    written += all;
  }
  g.sync();
  return written;
}

// One thread per piece: special tokens, the thread bucket, and the lists of longer pieces.
__global__ void __launch_bounds__(kThreads) merge_dispatch_kernel(Workspace ws, Tables t) {
  Counters& c = *ws.counters;
  const uint32_t pieces = c.pieces;
  for (uint32_t k = global_thread(); k < pieces; k += grid_threads()) {
    const uint32_t ps = ws.piece_start[k], n = ws.piece_start[k + 1] - ps;
    if (test_bit(ws.barriers, ps)) {
      const uint32_t special = ws.seg_tokens[segment_of(ws, ps)];
      if (special != kNone) {
        ws.ids[ps] = special;
        ws.ends[ps] = ps + n;
        ws.ntok[k] = 1;
        continue;
      }
    }
    if (n <= kThreadPiece) {
      ws.ntok[k] = merge_in_thread(t, ws.text + ps, n, ps, ws.ids + ps, ws.ends + ps);
    } else if (n <= kWarpPiece) {
      ws.warp_list[atomicAdd(&c.warp_pieces, 1u)] = k;
    } else {
      ws.block_list[atomicAdd(&c.block_pieces, 1u)] = k;
    }
  }
}

__global__ void __launch_bounds__(kWarpBpeThreads) merge_warp_kernel(Workspace ws, Tables t) {
  constexpr uint32_t kWarps = kWarpBpeThreads / 32;
  __shared__ uint32_t store[kWarps][11][kWarpPiece];
  const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(*a)[kWarpPiece] = store[w];
  const BpeStore st{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]};
  const WarpGroup g{lane};
  const uint32_t count = ws.counters->warp_pieces, warps = gridDim.x * kWarps;
  for (uint32_t i = blockIdx.x * kWarps + w; i < count; i += warps) {
    const uint32_t k = ws.warp_list[i], ps = ws.piece_start[k], n = ws.piece_start[k + 1] - ps;
    const uint32_t tokens = merge_in_group(g, t, ws.text + ps, n, ps, st, ws.ids + ps, ws.ends + ps);
    if (lane == 0) ws.ntok[k] = tokens;
  }
}

__global__ void __launch_bounds__(kThreads) merge_block_kernel(Workspace ws, Tables t) {
  __shared__ uint32_t shared[BlockGroup::kWarps + 1];
  const BlockGroup g{threadIdx.x, shared};
  const uint32_t count = ws.counters->block_pieces;
  for (uint32_t i = blockIdx.x; i < count; i += gridDim.x) {
    const uint32_t k = ws.block_list[i], ps = ws.piece_start[k], n = ws.piece_start[k + 1] - ps;
    const BpeStore& b = ws.bpe;
    const BpeStore st{b.sym + ps, b.nxt + ps, b.prv + ps, b.prio + ps, b.mrg + ps, b.sel + ps,
                      b.rl + ps, b.ml + ps, b.rr + ps, b.mr + ps, b.own + ps};
    const uint32_t tokens = merge_in_group(g, t, ws.text + ps, n, ps, st, ws.ids + ps, ws.ends + ps);
    if (threadIdx.x == 0) ws.ntok[k] = tokens;
  }
}

// ---------------------------------------------------------------------------- 7. output

// Every piece's tokens to their place in the output (one thread per byte of the text), with
// the code point offset where each ends, and the first token of each text of the batch.
__global__ void __launch_bounds__(kThreads) compact_kernel(Workspace ws, BitTree starts) {
  Counters& c = *ws.counters;
  const uint32_t n = c.n;
  const BitTree& lead = ws.sets[kLead];
  for (uint32_t b = global_thread(); b < n; b += grid_threads()) {
    const uint32_t k = rank_of(starts, ws.start_rank, b + 1) - 1, j = b - ws.piece_start[k];
    if (j >= ws.ntok[k]) continue;
    const uint32_t at = ws.tok_off[k] + j;
    ws.out_ids[at] = ws.ids[b];
    ws.out_ends[at] = rank_of(lead, ws.lead_rank, ws.ends[b]);
  }
  for (uint32_t d = global_thread(); d <= c.docs; d += grid_threads()) {
    const uint32_t off = ws.doc_offsets[d];
    ws.out_doc_tokens[d] = ws.tok_off[off >= n ? c.pieces : rank_of(starts, ws.start_rank, off)];
  }
  if (c.want_pieces)
    for (uint32_t k = global_thread(); k < c.pieces; k += grid_threads()) ws.out_piece_ends[k] = ws.piece_start[k + 1];
  if (global_thread() == 0) {
    c.tokens = ws.tok_off[c.pieces];
    c.chars = rank_of(lead, ws.lead_rank, n);
  }
}

// ---------------------------------------------------------------------------- pipeline

inline uint32_t blocks_for(uint64_t items, uint32_t per_block) {
  return uint32_t((items + per_block - 1) / per_block);
}

// Every kernel of one run, in order, through `launch(kernel, blocks, threads, args...)` (a
// CUDA stream, captured into a graph per capacity, or the host emulation). Geometry comes
// from the capacity only; each kernel loops over the counts the device wrote.
template <class Launch>
void run_pipeline(const Launch& launch, const Workspace& ws, const Tables& t) {
  const Capacity& cap = ws.cap;
  const uint32_t words = cap.bytes / 32 + 3, chunks = (words + 31) / 32;
  const uint32_t chunk_blocks = blocks_for(chunks, kThreads / 32), word_blocks = blocks_for(words, kThreads);
  const uint32_t byte_blocks = blocks_for(cap.bytes, kThreads * 4);
  const uint32_t word_tiles = blocks_for(words, kScanTile), byte_tiles = blocks_for(cap.bytes + 1, kScanTile);
  launch(clear_kernel, blocks_for(ws.upper_count, kThreads * 4), kThreads, ws);
  launch(classify_kernel, chunk_blocks, kThreads, ws, t);
  launch(barriers_kernel, chunk_blocks, kThreads, ws);
  const LeadWords lead{ws.sets[kLead].level[0]};
  launch(scan_tiles_kernel<LeadWords>, word_tiles, kThreads, ws, lead);
  launch(scan_sums_kernel<LeadWords>, 1, kThreads, ws, lead);
  launch(scan_apply_kernel<LeadWords>, word_tiles, kThreads, ws, lead, ws.lead_rank);
  for (uint32_t stage = 0; stage < t.num_stages; ++stage) {
    launch(anchors_kernel, chunk_blocks, kThreads, ws, t, stage);
    launch(walk_kernel, word_blocks, kThreads, ws, t, stage);
    if (stage + 1 < t.num_stages) launch(summarize_kernel, chunk_blocks, kThreads, ws, ws.starts[stage]);
  }
  const BitTree& starts = ws.starts[t.num_stages - 1];
  const StartWords start_words{starts.level[0]};
  launch(scan_tiles_kernel<StartWords>, word_tiles, kThreads, ws, start_words);
  launch(scan_sums_kernel<StartWords>, 1, kThreads, ws, start_words);
  launch(scan_apply_kernel<StartWords>, word_tiles, kThreads, ws, start_words, ws.start_rank);
  launch(pieces_kernel, word_blocks, kThreads, ws, starts);
  launch(merge_dispatch_kernel, blocks_for(cap.bytes, kThreads * 4), kThreads, ws, t);
  launch(merge_warp_kernel, blocks_for(cap.bytes / (kThreadPiece + 1) + 1, kWarpBpeThreads / 32),
         kWarpBpeThreads, ws, t);
  launch(merge_block_kernel, blocks_for(cap.bytes / (kWarpPiece + 1) + 1, 1), kThreads, ws, t);
  const PieceTokens tokens{ws.ntok};
  launch(scan_tiles_kernel<PieceTokens>, byte_tiles, kThreads, ws, tokens);
  launch(scan_sums_kernel<PieceTokens>, 1, kThreads, ws, tokens);
  launch(scan_apply_kernel<PieceTokens>, byte_tiles, kThreads, ws, tokens, ws.tok_off);
  launch(compact_kernel, byte_blocks, kThreads, ws, starts);
}

}  // namespace kernels
}  // namespace gpu_tokenize
}  // namespace zllm
