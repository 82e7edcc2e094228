// Sequential evaluator of the class rules in pretokenizer.h. Each function below is one
// alternative of the reference regex, tried in the regex's order; an alternative's extent is
// fixed by runs of character classes, so no backtracking over text is ever needed.
#include "pretokenizer.h"

#include "ascii_block.h"
#include "ascii_classes.h"
#include "class_table.h"

namespace zllm {
namespace {

constexpr uint32_t bit(CharClass c) { return 1u << c; }

// bit(class) of each ASCII byte and 0 for the bytes of multi-byte characters, so run loops
// over ASCII text test one table entry per byte.
const uint32_t* ascii_bits() {
  static const std::vector<uint32_t> bits = [] {
    std::vector<uint32_t> b(256, 0);
    for (int c = 0; c < 128; ++c) b[c] = bit(CharClass(class_table().of(c)));
    return b;
  }();
  return bits.data();
}
constexpr uint32_t kLetters = bit(kLu) | bit(kLl) | bit(kLt) | bit(kLm) | bit(kLo);
constexpr uint32_t kSpaces = bit(kSpace) | bit(kCR) | bit(kLF);
constexpr uint32_t kPunct = bit(kOther) | bit(kMark);                // [^\s\p{L}\p{N}]
constexpr uint32_t kPrefix = bit(kOther) | bit(kMark) | bit(kSpace);  // [^\r\n\p{L}\p{N}]
constexpr uint32_t kUpper = bit(kLu) | bit(kLt) | bit(kLm) | bit(kLo) | bit(kMark);  // o200k
constexpr uint32_t kLower = bit(kLl) | bit(kLm) | bit(kLo) | bit(kMark);             // o200k

inline int utf8_len(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

inline uint8_t ascii_lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? c | 0x20 : c; }

// Bit k set where p[k] (k < 16) is an ASCII character whose class is in `set`, the same
// predicate as ascii_bits()[p[k]] & set. The ASCII classes are fixed by Unicode (see
// unicode_classes.inc): Lu = A-Z, Ll = a-z, Num = 0-9, Space = TAB VT FF and ' ', CR, LF, and
// every other ASCII byte is Other. Run loops test 16 bytes per step with it, so a run's end
// costs one predictable branch instead of a loop exit that mispredicts once per piece. `set`
// is a constant at every call site, so the unused classes fold away.
inline uint32_t class_mask(const uint8_t* p, uint32_t set) {
  const AsciiMasks16 c(p);
  const uint32_t letter = c.letter, upper = c.upper, digit = c.digit, blank = c.blank, newline = c.newline;
  uint32_t m = 0;
  if ((set & (bit(kLu) | bit(kLl))) == (bit(kLu) | bit(kLl))) {
    m |= letter;
  } else {
    if (set & bit(kLu)) m |= upper;
    if (set & bit(kLl)) m |= letter & ~upper;
  }
  if (set & bit(kNum)) m |= digit;
  if ((set & kSpaces) == kSpaces) {
    m |= blank;
  } else {
    if (set & bit(kSpace)) m |= blank & ~newline;
    if (set & bit(kCR)) m |= newline & ~c.line_feed;
    if (set & bit(kLF)) m |= c.line_feed;
  }
  if (set & bit(kOther)) m |= c.other();
  return m;
}

class Scanner {
 public:
  Scanner(const Grammar& g, const uint8_t* s, size_t n)
      : g_(g), s_(s), n_(n), table_(class_table()), ascii_(ascii_bits()) {}

  size_t piece_end(size_t i) const {
    if (g_.digits_only) return digit_split_end(i);
    if (ascii_[s_[i]] && (i + 1 == n_ || s_[i + 1] < 0x80) && s_[i] != '\'') {
      if (size_t e = ascii_piece_end(i)) return e;
    }
    const CharClass c0 = cls(i);
    const size_t next = i + utf8_len(s_[i]);
    if (s_[i] == '\'' && (g_.contractions == Grammar::kPrefixCaseSensitive ||
                          g_.contractions == Grammar::kPrefixCaseInsensitive)) {
      if (size_t e = contraction(i, g_.contractions == Grammar::kPrefixCaseInsensitive)) return e;
    }
    if (size_t e = letters(i, c0, next)) return e;
    if (size_t e = digits(i)) return e;
    if (size_t e = punctuation(i)) return e;
    return spaces(i);
  }

 private:
  CharClass cls(size_t i) const {
    uint8_t b = s_[i];
    if (b < 0x80) return CharClass(table_.of(b));
    int len;
    return CharClass(table_.of(decode_utf8(s_, i, &len)));
  }
  bool in(size_t i, uint32_t set) const { return i < n_ && (bit(cls(i)) & set); }
  size_t run(size_t i, uint32_t set) const {
    for (;;) {
      if (i < n_ && s_[i] < 0x80) i = ascii_run(i, set);  // skipped inside non-ASCII words
      if (i >= n_ || s_[i] < 0x80) return i;
      int len;
      if (!(bit(CharClass(table_.of(decode_utf8(s_, i, &len)))) & set)) return i;
      i += len;
    }
  }

  // The end of the run of ASCII characters in `set` from i.
  size_t ascii_run(size_t i, uint32_t set) const {
    for (; i + 16 <= n_; i += 16)
      if (uint32_t stop = ~class_mask(s_ + i, set) & 0xFFFF) return i + __builtin_ctz(stop);
    while (i < n_ && (ascii_[s_[i]] & set)) ++i;
    return i;
  }

  // The same for ASCII whitespace, also moving *after_newline to the end of the run's last
  // CR or LF (left alone when the run has none).
  size_t ascii_space_run(size_t i, size_t* after_newline) const {
    for (; i + 16 <= n_; i += 16) {
      const uint32_t stop = ~class_mask(s_ + i, kSpaces) & 0xFFFF;
      const uint32_t inside = stop ? (stop & (0u - stop)) - 1 : 0xFFFF;  // bits before the stop
      if (uint32_t nl = class_mask(s_ + i, bit(kCR) | bit(kLF)) & inside) *after_newline = i + 32 - __builtin_clz(nl);
      if (stop) return i + __builtin_ctz(stop);
    }
    for (; i < n_ && (ascii_[s_[i]] & kSpaces); ++i)
      if (s_[i] == '\r' || s_[i] == '\n') *after_newline = i + 1;
    return i;
  }

  // `'(?:[sdmt]|ll|ve|re)`, optionally under (?i), where s also folds to U+017F (long s).
  size_t contraction(size_t i, bool fold) const {
    if (i + 1 >= n_) return 0;
    uint8_t a = fold ? ascii_lower(s_[i + 1]) : s_[i + 1];
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
    if (fold && a == 0xC5 && i + 2 < n_ && s_[i + 2] == 0xBF) return i + 3;
    if (i + 2 >= n_) return 0;
    uint8_t b = fold ? ascii_lower(s_[i + 2]) : s_[i + 2];
    if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
    return 0;
  }

  size_t letters(size_t i, CharClass c0, size_t next) const {
    switch (g_.letters) {
      case Grammar::kSpacePrefixed: {  // ` ?\p{L}+`
        size_t j = s_[i] == ' ' ? i + 1 : i;
        return in(j, kLetters) ? run(j, kLetters) : 0;
      }
      case Grammar::kAnyPrefixed:  // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if (bit(c0) & kLetters) return run(i, kLetters);
        return (bit(c0) & kPrefix) && in(next, kLetters) ? run(next, kLetters) : 0;
      case Grammar::kCased:
        return cased_word(i, c0, next);
    }
    return 0;
  }

  // o200k: `P?U*W+C?|P?U+W*C?` with U = [Lu Lt Lm Lo M], W = [Ll Lm Lo M], C the contractions.
  // U* backtracks until W+ can start: to the run's end if a W follows it, else to the last
  // character inside the U-run that is also in W (Lm, Lo, M), which then ends the piece.
  size_t cased_word(size_t i, CharClass c0, size_t next) const {
    const bool prefixable = bit(c0) & kPrefix;
    for (int with_prefix = prefixable; with_prefix >= 0; --with_prefix) {
      size_t e = with_prefix ? next : i, last_lower_end = 0;
      while (in(e, kUpper)) {
        bool lower = bit(cls(e)) & kLower;
        e += utf8_len(s_[e]);
        if (lower) last_lower_end = e;
      }
      if (in(e, kLower)) return suffix(run(e, kLower));
      if (last_lower_end) return suffix(last_lower_end);
    }
    for (int with_prefix = prefixable; with_prefix >= 0; --with_prefix) {
      size_t s = with_prefix ? next : i;
      if (in(s, kUpper)) return suffix(run(run(s, kUpper), kLower));
    }
    return 0;
  }
  size_t suffix(size_t e) const {
    if (g_.contractions == Grammar::kSuffixCaseInsensitive && e < n_ && s_[e] == '\'') {
      if (size_t c = contraction(e, true)) return c;
    }
    return e;
  }

  size_t digits(size_t i) const {
    size_t j = (g_.digit_space_prefix && s_[i] == ' ') ? i + 1 : i;
    if (!in(j, bit(kNum))) return 0;
    if (g_.digit_group == 0) return run(j, bit(kNum));
    for (int k = 0; k < g_.digit_group && in(j, bit(kNum)); ++k) j += utf8_len(s_[j]);
    return j;
  }

  size_t punctuation(size_t i) const {  // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
    size_t j = (g_.punct_space_prefix && s_[i] == ' ') ? i + 1 : i;
    return in(j, kPunct) ? punct_run(j) : 0;
  }
  size_t punct_run(size_t j) const {
    size_t e = run(j, kPunct);
    if (g_.punct_newlines)
      while (e < n_ && (s_[e] == '\r' || s_[e] == '\n' || (g_.punct_slash && s_[e] == '/'))) ++e;
    return e;
  }

  // The same alternatives as piece_end when the character is ASCII but not an apostrophe and
  // is followed by ASCII or the end: the two characters' classes decide, with fewer branches
  // than the general path. Returns 0 to hand a case it does not cover to the general path.
  size_t ascii_piece_end(size_t i) const {
    const uint32_t c = ascii_[s_[i]], next = i + 1 < n_ ? ascii_[s_[i + 1]] : 0;
    const bool space = s_[i] == ' ';
    const uint32_t prefix = g_.letters == Grammar::kSpacePrefixed ? 0 : kPrefix;
    if (g_.letters == Grammar::kCased) {
      if (c & kLetters) return ascii_cased_word(i);
      if ((c & prefix) && (next & kLetters)) return ascii_cased_word(i + 1);
    } else {
      if (c & kLetters) return run(i + 1, kLetters);
      if (((c & prefix) || space) && (next & kLetters)) return run(i + 2, kLetters);
    }
    if (c & bit(kNum)) return digits(i);
    if (g_.digit_space_prefix && space && (next & bit(kNum))) return digits(i);
    if (c & kPunct) return punct_run(i);
    if (g_.punct_space_prefix && space && (next & kPunct)) return punct_run(i + 1);
    return spaces(i);
  }

  // o200k letters from an ASCII letter at s: ASCII upper case is only Lu (in U, not in W) and
  // lower case only Ll (in W, not in U), so `U*W+` is upper run + lower run when a lower
  // follows the upper run, and `U+W*` the upper run otherwise. 0 when a non-ASCII character
  // ends a run (it could be Lm, Lo or M): the general path decides those.
  size_t ascii_cased_word(size_t s) const {
    const size_t e = ascii_run(ascii_run(s, bit(kLu)), bit(kLl));
    if (e < n_ && s_[e] >= 0x80) return 0;
    return suffix(e);
  }

  // `\s+$`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s` in that order, decided by run-level facts: where
  // the run ends, where its last newline is, and where its last character starts.
  size_t spaces(size_t i) const {
    size_t e = i, last_start = i, after_newline = 0;
    for (;;) {
      const size_t a = ascii_space_run(e, &after_newline);
      if (a > e) last_start = a - 1;
      e = a;
      if (e >= n_ || s_[e] < 0x80 || !in(e, kSpaces)) break;
      last_start = e;  // a non-ASCII space: never CR or LF
      e += utf8_len(s_[e]);
    }
    if (e == n_ && g_.space_run_to_end) return e;
    if (after_newline && g_.newline_rule) return after_newline;
    if (e == n_) return e;
    return last_start > i ? last_start : e;
  }

  size_t digit_split_end(size_t i) const {  // Split(`\p{N}{1,k}`, Isolated); k = digit_group, 0 = unbounded
    if (!in(i, bit(kNum))) {
      size_t e = i;
      while (e < n_ && !in(e, bit(kNum))) e += utf8_len(s_[e]);
      return e;
    }
    if (g_.digit_group == 0) return run(i, bit(kNum));
    for (int k = 0; k < g_.digit_group && in(i, bit(kNum)); ++k) i += utf8_len(s_[i]);
    return i;
  }

  const Grammar& g_;
  const uint8_t* s_;
  size_t n_;
  const ClassTable table_;
  const uint32_t* ascii_;
};

}  // namespace

CharClass char_class(uint32_t cp) { return cp < 0x110000 ? CharClass(class_table().of(cp)) : kOther; }

void pretokenize(const Grammar& g, const uint8_t* s, size_t n, std::vector<uint32_t>& ends) {
  uint32_t chunk[256];
  size_t pos = 0;
  while (size_t k = next_pieces(g, s, n, &pos, chunk, 256)) ends.insert(ends.end(), chunk, chunk + k);
}

// Windows the block rules cover go through them, everything else (and a window whose first
// piece is longer than it) through the scanner, one piece at a time. A window may end
// up to 64 pieces, so when fewer places are left the call returns early and the next call
// starts with that window (filling the last places with the scanner put a quarter of all
// pieces through it).
size_t next_pieces(const Grammar& g, const uint8_t* s, size_t n, size_t* pos, uint32_t* ends, size_t cap) {
  Scanner scanner(g, s, n);
  const AsciiBlockRules rules = AsciiBlockRules::of(g);
  size_t k = 0, i = *pos, scalar_until = rules.kind == AsciiBlockRules::kNone ? n : 0;
  while (k < cap && i < n) {
    const bool window = i >= scalar_until && i + 64 <= n;
    if (window && k + 64 > cap && k > 0) break;
    if (window && k + 64 <= cap) {
      const AsciiBlock block = ascii_block(rules, s, i, n);
      uint64_t starts = block.starts & ((uint64_t(2) << block.decided) - 1) & ~uint64_t(1);
      if (starts) {
        for (; starts; starts &= starts - 1) ends[k++] = uint32_t(i + __builtin_ctzll(starts));
        i = ends[k - 1];
        continue;
      }
      scalar_until = i + block.valid + 1;  // past the first byte of the character that stopped it
    }
    ends[k++] = uint32_t(i = scanner.piece_end(i));
  }
  *pos = i;
  return k;
}

}  // namespace zllm
