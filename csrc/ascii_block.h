// Piece starts of a 64-byte ASCII window, decided for all 64 positions at once from class
// bitmasks: the same rules as the sequential scanner (pretokenizer.cpp), written as
// predicates on a position's class, its one or two predecessors' classes and run-level facts
// inside the window (where a whitespace run ends, whether a newline follows in it, which
// newlines a punctuation run absorbs). The per-piece branches of the scanner become a few
// dozen mask operations per window and one predictable loop over the set bits.
//
// Covered: the space-prefixed rules (r50k), the any-prefixed ones with `[\r\n]*` after
// punctuation and the newline rule (cl100k, Llama 3, Qwen2) and o200k's case-aware letters
// with suffixed contractions. A window may also hold non-ASCII letters, punctuation and
// symbols (prose in any script; for the prefix families marks too): each such character's
// class comes from the class table (wide_classes.h) and covers all its bytes, and rules about
// "the character before the previous one" follow character boundaries. For o200k a caseless
// letter (CJK, Arabic, Thai...) reads as lower case, so a letter run where one touches an
// upper-case letter ends the window. Non-ASCII whitespace and digits end a window (the
// scanner takes them), as do marks and modifier letters for o200k. The digit splitter stays
// on the scanner.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pretokenizer.h"

namespace zllm {

struct AsciiBlockRules {
  enum Kind : uint8_t { kNone, kSpacePrefixed, kAnyPrefixed, kCased };
  Kind kind = kNone;
  uint8_t digit_group = 0;  // as Grammar::digit_group
  bool slash = false;       // as Grammar::punct_slash

  static AsciiBlockRules of(const Grammar& g);
};

struct AsciiBlock {
  uint64_t starts;  // bit k: a piece starts at pos + k (bit 0, pos itself, is always set)
  unsigned decided;  // starts are exact for offsets 1..decided; 0: the window is not eligible
  unsigned valid;    // the window's leading bytes of characters the rules cover
};

// The window at s[pos, pos + 64) of a text of n >= pos + 64 bytes; pos is a piece start (so
// no rule needs the byte before it). Not eligible (decided 0) when fewer than 8 leading bytes
// are valid.
AsciiBlock ascii_block(const AsciiBlockRules& rules, const uint8_t* s, size_t pos, size_t n);

// The class masks and the classes of multi-byte characters (wide_classes.h) run on AVX2 where
// the CPU has it, else on SSE2 and scalar code: whether the two agree on every 64-byte window
// of s[0, n) (true without AVX2), so tests cover the path not taken.
bool simd_masks_agree(const uint8_t* s, size_t n);

}  // namespace zllm
