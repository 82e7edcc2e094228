// The classes of a 64-byte window's multi-byte characters, as the block rules (ascii_block.cpp)
// see them, one bit each at the character's first byte:
// - prefix families: letters (\p{L}), and marks, punctuation and symbols (`[^\s\p{L}\p{N}]`);
// - o200k's cased letters: letters of a case (Lu, Lt: `upper`; Ll) and caseless ones (Lo), and
//   punctuation and symbols; marks and modifier letters, which its pattern counts as both
//   upper and lower case, are left to the scanner.
// Anything else (non-ASCII whitespace or digits, which the scanner takes) and a character the
// window cuts end `valid`.
//
// Text in one script keeps meeting the same few rows of the class table (class_table.h): the
// AVX2 path classifies all the window's characters of one row at once, from the row's letter
// and other bitmaps indexed by the characters' last bytes, and a row that is all letters
// (most of CJK and Hangul) by its first bytes alone; characters past the first few rows, and
// four-byte ones, go one at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zllm {

struct WideCharacters {
  uint64_t letter = 0, other = 0, upper = 0, caseless = 0;  // upper, caseless: cased rules only
  unsigned valid = 64;
};

// first_bytes: bit k set where p[k] starts a multi-byte character. `readable`: bytes from p
// that may be read (a character's bytes are read whole, and a few bytes past the window).
WideCharacters wide_characters(const uint8_t* p, uint64_t first_bytes, size_t readable, bool cased);
[[gnu::target("avx2")]] WideCharacters wide_characters_avx2(const uint8_t* p, uint64_t first_bytes, size_t readable,
                                                            bool cased);

}  // namespace zllm
