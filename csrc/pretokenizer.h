// Pre-tokenizer: the reference regexes of the supported families, decomposed into rules
// over character classes (see zllm_core/tokenizer/rules.py for the table and its proof
// obligations). A piece's extent depends only on the class of its first characters, on
// same-class runs that follow, and on run-level facts (where a whitespace run ends, the last
// newline inside it) -- never on backtracking over arbitrary text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zllm {

enum CharClass : uint8_t {
  kOther = 0,  // punctuation, symbols, controls, unassigned: [^\s\p{L}\p{N}] minus marks
  kLu, kLl, kLt, kLm, kLo,
  kMark,   // \p{M}
  kNum,    // \p{N}
  kSpace,  // \s except CR and LF
  kCR,
  kLF,
  kNumClasses
};

CharClass char_class(uint32_t cp);  // from class_table.h's table

// Decodes one code point of valid UTF-8 at s[i]; sets *len to its byte length.
inline uint32_t decode_utf8(const uint8_t* s, size_t i, int* len) {
  uint8_t b = s[i];
  if (b < 0x80) { *len = 1; return b; }
  if (b < 0xE0) { *len = 2; return ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); }
  if (b < 0xF0) {
    *len = 3;
    return ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
  }
  *len = 4;
  return ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
         (s[i + 3] & 0x3Fu);
}

// One family's rule parameters; mirrors zllm_core.tokenizer.rules.Rules field by field.
struct Grammar {
  enum Contractions : uint8_t { kNone, kPrefixCaseSensitive, kPrefixCaseInsensitive, kSuffixCaseInsensitive };
  enum Letters : uint8_t { kSpacePrefixed, kAnyPrefixed, kCased };
  uint8_t contractions = kNone;  // a Contractions value
  uint8_t letters = kAnyPrefixed;  // a Letters value
  uint8_t digit_group = 0;         // max digits per piece; 0 = unbounded run
  bool digit_space_prefix = false; // ` ?\p{N}+`
  bool punct_space_prefix = true;  // ` ?[^\s\p{L}\p{N}]+`
  bool punct_newlines = false;     // `[\r\n]*` after punctuation
  bool punct_slash = false;        // `/` joins that suffix (o200k)
  bool space_run_to_end = false;   // `\s+$`
  bool newline_rule = false;       // `\s*[\r\n]+`: a space run ends after its last newline
  bool digits_only = false;        // Split(`\p{N}{1,k}`): digit groups of digit_group, everything else a gap
};

// Appends the byte offset of each piece end in s[0, n) (relative to s) to `ends`.
void pretokenize(const Grammar& g, const uint8_t* s, size_t n, std::vector<uint32_t>& ends);
// The same, streamed: writes the ends of up to `cap` pieces starting at *pos, advances *pos,
// returns how many were written (0 only at the end of the text).
size_t next_pieces(const Grammar& g, const uint8_t* s, size_t n, size_t* pos, uint32_t* ends, size_t cap);

}  // namespace zllm
