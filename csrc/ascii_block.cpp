// The class rules as bitmask predicates. Bit k of a mask is the byte at pos + k; `X << 1` is
// "the previous byte is in X", `X >> 1` "the next byte is". Bit 0 is a piece start by
// assumption, which settles the one rule that would look before the window (a letter at bit 1
// after punctuation at bit 0: that punctuation starts its run, so it prefixes the letter).
//
// Derivation (each alternative of the regex in order, at the start of the run it meets):
// - a whitespace character starts a piece at the start of its run; inside the run at the
//   character after the run's last newline (`\s*[\r\n]`, when the family has it) and at the
//   run's last character (`\s+(?!\S)` leaves it to prefix what follows, or to `\s`);
// - space-prefixed families (r50k): a letter, digit or punctuation character starts a piece
//   when its class differs from the previous byte's and that byte is not ' ';
// - any-prefixed families: a letter starts a piece after a newline, a digit or a punctuation
//   piece's tail, or after a punctuation character that cannot prefix it: one that is part of
//   a longer punctuation run (`[^\s\p{L}\p{N}]++` takes the whole run) or that a ' ' before it
//   takes (` ?[^\s...]`); after whitespace it never does (the run's last character prefixes
//   it). Punctuation starts a run unless after punctuation or ' '; the newlines right after it
//   (and, for o200k, '/' among them) are its piece's tail (`[\r\n/]*`) and belong to no
//   whitespace run. Digits start groups of `digit_group`.
// - o200k's case-aware letters: inside a letter run a piece also starts where an upper-case
//   letter follows a lower-case one (`[U]*[W]+` takes the upper run, then the lower run).
// - contractions: an apostrophe that starts a piece (prefix kinds), or that follows a letter
//   piece (o200k's `C?`, once per piece), followed by s, d, m, t, ll, ve or re, makes that piece
//   or ends it, and the next character starts one.
// Whitespace runs that may continue past the window's covered bytes, and the last bytes whose
// rules look ahead, are left undecided for the next window or the scanner. In a window with
// multi-byte characters every byte of a character carries its class, so "the previous byte"
// is the previous character's last byte and starts are kept at characters' first bytes only;
// whitespace, digits, apostrophes and newlines are ASCII there, so the rules that look ahead
// or count bytes see single-byte characters.
#include "ascii_block.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ascii_classes.h"
#include "wide_classes.h"

namespace zllm {
namespace {

// Class masks of a 64-byte window, bit k for the byte at p + k.
struct Masks64 {
  uint64_t letter = 0, upper = 0, digit = 0, blank = 0, newline = 0, space = 0, apostrophe = 0, slash = 0, high = 0,
           continuation = 0;  // UTF-8 bytes 0x80-0xBF

  uint64_t other() const { return ~(high | letter | digit | blank); }
};

// SSE2, part of every x86-64 target: four 16-byte steps.
struct Sse2Masks {
  static WideCharacters wide(const uint8_t* p, uint64_t first_bytes, size_t readable, bool cased) {
    return wide_characters(p, first_bytes, readable, cased);
  }
  static Masks64 of(const uint8_t* p) {
    Masks64 m;
    for (int k = 0; k < 4; ++k) {
      const AsciiMasks16 c(p + 16 * k);
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
      const int at = 16 * k;
      m.letter |= uint64_t(c.letter) << at;
      m.upper |= uint64_t(c.upper) << at;
      m.digit |= uint64_t(c.digit) << at;
      m.blank |= uint64_t(c.blank) << at;
      m.newline |= uint64_t(c.newline) << at;
      m.high |= uint64_t(c.high) << at;
      m.space |= uint64_t(byte_mask(b, ' ')) << at;
      m.apostrophe |= uint64_t(byte_mask(b, '\'')) << at;
      m.slash |= uint64_t(byte_mask(b, '/')) << at;
      const __m128i below_lead = _mm_cmplt_epi8(b, _mm_set1_epi8(char(0xC0)));  // signed: 0x80-0xBF
      m.continuation |= uint64_t(uint32_t(_mm_movemask_epi8(_mm_and_si128(below_lead, b)))) << at;
    }
    return m;
  }
};

// AVX2, where the CPU has it: two 32-byte steps, half the SSE2 instructions (the masks were
// most of a window's work), without the 512-bit registers that lower some CPUs' clock.
struct Avx2Masks {
  [[gnu::target("avx2")]] static WideCharacters wide(const uint8_t* p, uint64_t first_bytes, size_t readable,
                                                     bool cased) {
    return wide_characters_avx2(p, first_bytes, readable, cased);
  }
  [[gnu::target("avx2")]] static Masks64 of(const uint8_t* p) {
    Masks64 m;
    for (int k = 0; k < 2; ++k) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
      // Signed compares are exact for lo >= 0: bytes >= 0x80 read as negative.
#define ZLLM_IN_RANGE(v, lo, hi)                                                       \
  uint32_t(_mm256_movemask_epi8(_mm256_and_si256(_mm256_cmpgt_epi8(v, _mm256_set1_epi8(char(lo - 1))), \
                                                 _mm256_cmpgt_epi8(_mm256_set1_epi8(char(hi + 1)), v))))
#define ZLLM_EQUAL(c) uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, _mm256_set1_epi8(c))))
      const int at = 32 * k;
      const uint32_t space = ZLLM_EQUAL(' ');
      m.letter |= uint64_t(ZLLM_IN_RANGE(_mm256_or_si256(b, _mm256_set1_epi8(0x20)), 'a', 'z')) << at;
      m.upper |= uint64_t(ZLLM_IN_RANGE(b, 'A', 'Z')) << at;
      m.digit |= uint64_t(ZLLM_IN_RANGE(b, '0', '9')) << at;
      m.space |= uint64_t(space) << at;
      m.blank |= uint64_t(ZLLM_IN_RANGE(b, '\t', '\r') | space) << at;
      m.newline |= uint64_t(ZLLM_EQUAL('\r') | ZLLM_EQUAL('\n')) << at;
      m.apostrophe |= uint64_t(ZLLM_EQUAL('\'')) << at;
      m.slash |= uint64_t(ZLLM_EQUAL('/')) << at;
#undef ZLLM_IN_RANGE
#undef ZLLM_EQUAL
      m.high |= uint64_t(uint32_t(_mm256_movemask_epi8(b))) << at;
      const __m256i continuation = _mm256_cmpgt_epi8(_mm256_set1_epi8(char(0xC0)), b);  // signed: 0x80-0xBF
      m.continuation |= uint64_t(uint32_t(_mm256_movemask_epi8(continuation))) << at;
    }
    return m;
  }
};

inline uint64_t lowest_bits(unsigned k) { return k >= 64 ? ~uint64_t(0) : (uint64_t(1) << k) - 1; }

// Bits of x extended towards higher bits through `through`: each run of `through` that holds
// a bit of x from there on.
inline uint64_t fill_up(uint64_t x, uint64_t through) {
  for (uint64_t next; (next = x | ((x << 1) & through)) != x;) x = next;
  return x;
}

// For each bit of `runs`, whether a bit of x lies at or after it within the same run
// (Kogge-Stone towards lower bits).
inline uint64_t any_after_in_run(uint64_t x, uint64_t runs) {
  uint64_t m = runs;
  x &= runs;
  for (int shift = 1; shift < 64; shift <<= 1) {
    x |= (x >> shift) & m;
    m &= m >> shift;
  }
  return x;
}

// Group starts of digit runs: each run's first digit (bit 0 included when it is a digit) and
// every `group`-th digit after it; `group` 0: runs are not split.
inline uint64_t digit_starts(uint64_t digit, unsigned group) {
  const uint64_t run_starts = digit & ~(digit << 1);
  if (group == 0) return run_starts | (digit & 1);
  if (group == 1) return digit;
  uint64_t whole = digit;  // bit k: bytes k - group + 1 .. k are all digits
  for (unsigned j = 1; j < group; ++j) whole &= digit << j;
  uint64_t starts = run_starts | (digit & 1);
  for (uint64_t x = starts; (x = (x << group) & whole);) starts |= x;
  return starts;
}

// The contraction at an apostrophe (p[0] == '\''), or 0: its length, 2 or 3.
inline unsigned contraction_length(const uint8_t* p, bool fold) {
  const uint8_t fold_bit = fold ? 0x20 : 0;  // exact for the letters below: only A-Z map to a-z
  const uint8_t a = p[1] | fold_bit, b = p[2] | fold_bit;
  if (a == 's' || a == 'd' || a == 'm' || a == 't') return 2;
  if (fold && p[1] == 0xC5 && p[2] == 0xBF) return 3;  // U+017F, long s, folds to s
  return (a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e') ? 3 : 0;
}

// Bits of x carried through the continuation bytes of their characters: a class found at a
// character's first byte, spread over all its bytes (at most three follow).
inline uint64_t over_characters(uint64_t x, uint64_t continuation) {
  x |= (x << 1) & continuation;
  x |= (x << 1) & continuation;
  return x | ((x << 1) & continuation);
}

// o200k: a caseless letter (Lo) is in both of its pattern's letter sets, and reads as lower
// case (upper case starts a piece after it) only where no upper-case letter touches it: the
// start of the first letter run where one does, else 64.
inline unsigned caseless_runs_end(uint64_t caseless, uint64_t upper, uint64_t letter) {
  const uint64_t touching = caseless & ((upper << 1) | (upper >> 1));
  const uint64_t runs = any_after_in_run(touching, letter);
  return runs ? unsigned(__builtin_ctzll(runs)) : 64;
}

}  // namespace

AsciiBlockRules AsciiBlockRules::of(const Grammar& g) {
  AsciiBlockRules r;
  r.digit_group = g.digit_group;
  r.slash = g.punct_slash;
  if (g.digits_only || !g.punct_space_prefix || g.digit_group > 8) return r;
  const bool newline_rules = g.punct_newlines && g.newline_rule && !g.digit_space_prefix;
  if (g.letters == Grammar::kSpacePrefixed && g.contractions == Grammar::kPrefixCaseSensitive &&
      g.digit_space_prefix && g.digit_group == 0 && !g.punct_newlines && !g.newline_rule && !g.punct_slash) {
    r.kind = kSpacePrefixed;
  } else if (g.letters == Grammar::kAnyPrefixed && g.contractions == Grammar::kPrefixCaseInsensitive && newline_rules) {
    r.kind = kAnyPrefixed;
  } else if (g.letters == Grammar::kCased && g.contractions == Grammar::kSuffixCaseInsensitive && newline_rules) {
    r.kind = kCased;
  }
  return r;
}

namespace {

template <class Masks>
[[gnu::always_inline]] inline AsciiBlock block_of(const AsciiBlockRules& rules, const uint8_t* s, size_t pos,
                                                  size_t n) {
  const bool cased = rules.kind == AsciiBlockRules::kCased;
  const Masks64 m = Masks::of(s + pos);
  unsigned covered = 64;  // leading bytes the rules cover
  uint64_t letter = m.letter, other = m.other(), upper = m.upper;
  if (m.high) {
    const WideCharacters w = Masks::wide(s + pos, m.high & ~m.continuation, n - pos, cased);
    covered = w.valid;
    letter |= over_characters(w.letter, m.continuation);
    other |= over_characters(w.other, m.continuation);
    if (cased) {
      upper |= over_characters(w.upper, m.continuation);
      covered = std::min(covered, caseless_runs_end(over_characters(w.caseless, m.continuation), upper, letter));
    }
  }
  if (covered < 8) return AsciiBlock{1, 0, covered};
  // Rules at k read bytes up to k + 2 (contractions), so they are exact up to covered - 3.
  unsigned decided = covered - 3 < 61 ? covered - 3 : 61;
  const uint64_t valid = lowest_bits(covered);
  const uint64_t digit = m.digit, punct = other & valid, after_space = m.space << 1;
  uint64_t starts = 1, white;
  if (rules.kind == AsciiBlockRules::kSpacePrefixed) {
    white = m.blank;
    starts |= white & (~(white << 1) | ~(white >> 1));
    starts |= ((letter & ~(letter << 1)) | (digit & ~(digit << 1)) | (punct & ~(punct << 1))) & ~after_space;
  } else {
    const uint64_t tails = rules.slash ? m.newline | m.slash : m.newline;
    const uint64_t absorbed = fill_up((punct << 1) & m.newline & ~uint64_t(1), tails);
    const uint64_t own_punct = punct & ~absorbed, after_punct = own_punct << 1;
    white = m.blank & ~absorbed;
    const uint64_t space = white & ~m.newline, newline = white & m.newline;
    const uint64_t newline_later = any_after_in_run(newline, white) >> 1;  // in the run, after k
    // Whether the character before the previous one ends in punctuation or ' ' (X << 2 when
    // both are ASCII): carried from the previous character's first byte through its bytes.
    const uint64_t before_previous = over_characters(((own_punct | m.space) << 1) & ~m.continuation, m.continuation) << 1;
    starts |= letter & ((m.newline << 1) | (digit << 1) | (absorbed << 1) | (after_punct & before_previous));
    if (cased) starts |= upper & ((letter & ~upper) << 1);
    starts |= digit_starts(digit, rules.digit_group);
    starts |= own_punct & ~after_punct & ~after_space;
    starts |= space & (~(white << 1) | ((newline << 1) & ~newline_later) | ~(white >> 1));
    starts |= newline & ~(white << 1);
  }
  // A whitespace run that reaches the last covered byte may go on: decided up to its start.
  if ((white >> (covered - 1)) & 1) {
    const uint64_t run_starts = white & ~(white << 1) & valid;
    const unsigned last_run = 63 - unsigned(__builtin_clzll(run_starts | 1));
    if (last_run < decided) decided = last_run;
  }
  unsigned after_contraction = 0;
  for (uint64_t ap = m.apostrophe & lowest_bits(decided + 1); ap; ap &= ap - 1) {
    const unsigned k = unsigned(__builtin_ctzll(ap));
    // Prefix kinds: a contraction is a piece of its own at an apostrophe that starts one.
    // Cased: it ends the letter piece just before it, unless those letters were themselves a
    // contraction's (a piece takes one).
    const bool at = rules.kind == AsciiBlockRules::kCased
                        ? k > 0 && ((letter >> (k - 1)) & 1) && k != after_contraction
                        : (starts >> k) & 1;
    if (!at) continue;
    if (const unsigned len = contraction_length(s + pos + k, rules.kind != AsciiBlockRules::kSpacePrefixed)) {
      const unsigned end = k + len;
      starts &= ~(lowest_bits(end) & ~lowest_bits(rules.kind == AsciiBlockRules::kCased ? k : k + 1));
      if (end < 64) starts |= uint64_t(1) << end;
      after_contraction = end;
    }
  }
  return AsciiBlock{starts & ~m.continuation, decided, covered};
}

AsciiBlock sse2_block(const AsciiBlockRules& rules, const uint8_t* s, size_t pos, size_t n) {
  return block_of<Sse2Masks>(rules, s, pos, n);
}

[[gnu::target("avx2")]] AsciiBlock avx2_block(const AsciiBlockRules& rules, const uint8_t* s, size_t pos, size_t n) {
  return block_of<Avx2Masks>(rules, s, pos, n);
}

// Resolved once, when the module loads.
const auto kBlock = cpu_has_avx2() ? avx2_block : sse2_block;

}  // namespace

AsciiBlock ascii_block(const AsciiBlockRules& rules, const uint8_t* s, size_t pos, size_t n) {
  return kBlock(rules, s, pos, n);
}

bool simd_masks_agree(const uint8_t* s, size_t n) {
  if (!cpu_has_avx2()) return true;
  for (size_t pos = 0; pos + 64 <= n; ++pos) {
    const Masks64 a = Sse2Masks::of(s + pos), b = Avx2Masks::of(s + pos);
    if (std::memcmp(&a, &b, sizeof(a)) != 0) return false;
    const uint64_t first = a.high & ~a.continuation;
    for (bool cased : {false, true}) {
      const WideCharacters x = Sse2Masks::wide(s + pos, first, n - pos, cased);
      const WideCharacters y = Avx2Masks::wide(s + pos, first, n - pos, cased);
      if (x.letter != y.letter || x.other != y.other || x.upper != y.upper || x.caseless != y.caseless ||
          x.valid != y.valid)
        return false;
    }
  }
  return true;
}

}  // namespace zllm
