// ASCII character classes of 16 bytes at once (SSE2: part of every x86-64 target, so no
// dispatch is needed). The classes of ASCII are fixed by Unicode (see unicode_classes.inc):
// Lu = A-Z, Ll = a-z, Num = 0-9, Space = TAB VT FF and ' ', CR, LF; every other ASCII byte is
// Other. Bytes >= 0x80 are in no class here.
#pragma once

#include <emmintrin.h>

#include <cstdint>

namespace zllm {

// Whether this CPU runs AVX2 (the block rules' class masks have a path for it).
inline bool cpu_has_avx2() {
  __builtin_cpu_init();  // may run before the runtime's own detection, in a static initializer
  return __builtin_cpu_supports("avx2");
}

// Bit k set where byte k lies in [lo, hi]. Signed byte compares are exact since lo >= 0:
// bytes >= 0x80 read as negative and never match.
inline uint32_t range_mask(__m128i b, char lo, char hi) {
  __m128i in = _mm_and_si128(_mm_cmpgt_epi8(b, _mm_set1_epi8(char(lo - 1))),
                             _mm_cmplt_epi8(b, _mm_set1_epi8(char(hi + 1))));
  return uint32_t(_mm_movemask_epi8(in));
}
inline uint32_t byte_mask(__m128i b, char c) { return uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_set1_epi8(c)))); }

struct AsciiMasks16 {
  uint32_t letter, upper, digit, blank, newline, line_feed, high;  // blank: \s with CR and LF; high: >= 0x80

  explicit AsciiMasks16(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    letter = range_mask(_mm_or_si128(b, _mm_set1_epi8(0x20)), 'a', 'z');  // folds case
    upper = range_mask(b, 'A', 'Z');
    digit = range_mask(b, '0', '9');
    blank = range_mask(b, '\t', '\r') | byte_mask(b, ' ');
    line_feed = byte_mask(b, '\n');
    newline = byte_mask(b, '\r') | line_feed;
    high = uint32_t(_mm_movemask_epi8(b));
  }
  uint32_t other() const { return ~(high | letter | digit | blank) & 0xFFFF; }
};

}  // namespace zllm
