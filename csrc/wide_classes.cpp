#include "wide_classes.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "class_table.h"
#include "pretokenizer.h"

namespace zllm {
namespace {

// Per row of the class table, which of its 64 code points the window rules read as letters,
// upper-case and caseless letters (cased rules only) and other (the rest they leave to the
// scanner).
struct RowKinds {
  std::vector<uint64_t> letter, other, upper, caseless;
  bool letter_lead[16] = {};  // per three-byte lead 0xE0 + i: every code point it starts is one kind
};

RowKinds build_row_kinds(bool cased) {
  const ClassTable& t = class_table();
  RowKinds k;
  for (size_t r = 0; r < t.num_rows; ++r) {
    uint64_t letter = 0, other = 0, upper = 0, caseless = 0;
    for (int c = 0; c < 64; ++c) {
      const uint8_t cls = t.rows[r * 64 + c];
      const bool is_letter = cased ? cls == kLu || cls == kLt || cls == kLl || cls == kLo : cls >= kLu && cls <= kLo;
      letter |= uint64_t(is_letter) << c;
      other |= uint64_t(cls == kOther || (!cased && cls == kMark)) << c;
      upper |= uint64_t(cased && (cls == kLu || cls == kLt)) << c;
      caseless |= uint64_t(cased && cls == kLo) << c;
    }
    k.letter.push_back(letter);
    k.other.push_back(other);
    k.upper.push_back(upper);
    k.caseless.push_back(caseless);
  }
  for (int lead = 0; lead < 16; ++lead) {
    k.letter_lead[lead] = true;
    for (uint32_t b = uint32_t(lead) << 6; b < uint32_t(lead + 1) << 6; ++b) {
      const uint16_t row = t.row_of_block[b];
      k.letter_lead[lead] &= k.letter[row] == ~uint64_t(0) && k.caseless[row] == (cased ? ~uint64_t(0) : 0);
    }
  }
  return k;
}

const RowKinds& row_kinds(bool cased) {
  static const RowKinds prefix = build_row_kinds(false), with_case = build_row_kinds(true);
  return cased ? with_case : prefix;
}

// The code point of the multi-byte character whose four bytes (zero-padded) are v.
inline uint32_t decode(uint32_t v, uint32_t len) {
  const uint32_t b0 = v & 0xFF;
  const uint32_t tail = ((v >> 8 & 0x3F) << 12) | ((v >> 16 & 0x3F) << 6) | (v >> 24 & 0x3F);
  return ((b0 & (0x7Fu >> len)) << (6 * (len - 1))) | (tail >> (6 * (4 - len)));
}

inline uint32_t length_of(uint8_t lead) { return 2 + (lead >= 0xE0) + (lead >= 0xF0); }

// Each character of `first_bytes` one at a time into w; the cut and unsupported ones into *stop.
// Templated on the rules so that the prefix families pay nothing for the cased ones' bitmaps.
template <bool kCased>
void classify_each(const uint8_t* p, uint64_t first_bytes, const RowKinds& kinds, WideCharacters& w, uint64_t* stop) {
  const ClassTable table = class_table();
  for (; first_bytes; first_bytes &= first_bytes - 1) {
    const unsigned k = unsigned(__builtin_ctzll(first_bytes));
    uint32_t v;
    std::memcpy(&v, p + k, 4);
    const uint32_t len = length_of(uint8_t(v)), cp = decode(v, len);
    if (cp >= 0x110000) {  // no character (bytes that are not UTF-8): the scanner's to judge, and
      *stop |= uint64_t(1) << k;  // past the table's last block
      continue;
    }
    const uint16_t row = table.row_of_block[cp >> ClassTable::kBlockBits];
    const unsigned col = cp & 63;
    const uint64_t letter = (kinds.letter[row] >> col) & 1, other = (kinds.other[row] >> col) & 1;
    w.letter |= letter << k;
    w.other |= other << k;
    if constexpr (kCased) {
      w.upper |= ((kinds.upper[row] >> col) & 1) << k;
      w.caseless |= ((kinds.caseless[row] >> col) & 1) << k;
    }
    *stop |= uint64_t(!(letter | other) || k + len > 64) << k;
  }
}

const uint8_t* readable_window(const uint8_t* p, size_t readable, uint8_t (&padded)[64 + 4]) {
  if (readable >= sizeof(padded)) return p;
  std::memset(padded, 0, sizeof(padded));
  std::memcpy(padded, p, 64);
  return padded;
}

}  // namespace

WideCharacters wide_characters(const uint8_t* p, uint64_t first_bytes, size_t readable, bool cased) {
  uint8_t padded[64 + 4];
  WideCharacters w;
  uint64_t stop = 0;
  p = readable_window(p, readable, padded);
  if (cased) {
    classify_each<true>(p, first_bytes, row_kinds(true), w, &stop);
  } else {
    classify_each<false>(p, first_bytes, row_kinds(false), w, &stop);
  }
  if (stop) w.valid = unsigned(__builtin_ctzll(stop));
  return w;
}

namespace {

struct Bytes64 {
  __m256i lo, hi;
};

[[gnu::target("avx2")]] inline Bytes64 load64(const uint8_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))};
}

[[gnu::target("avx2")]] inline uint64_t equal_mask(const Bytes64& b, uint8_t c) {
  const __m256i v = _mm256_set1_epi8(char(c));
  return uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b.lo, v))) |
         uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b.hi, v)))) << 32;
}

// Bit k: bit (col[k] & 63) of `bitmap` (pshufb picks the bitmap's byte, then the bit).
[[gnu::target("avx2")]] inline uint32_t bitmap_bits(__m256i col, uint64_t bitmap) {
  const __m256i table = _mm256_set1_epi64x(int64_t(bitmap));
  const __m256i seven = _mm256_set1_epi8(7);
  const __m256i byte = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(col, 3), seven));
  const __m256i bit = _mm256_shuffle_epi8(_mm256_set1_epi64x(int64_t(0x8040201008040201ull)), _mm256_and_si256(col, seven));
  return uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(byte, bit), bit)));
}

// The characters at `at` whose code point is set in `bitmap`, the column from `col`; rows
// that are all one kind (most) need no lookup.
[[gnu::target("avx2")]] inline uint64_t select(const Bytes64& col, uint64_t bitmap, uint64_t at) {
  if (bitmap == 0 || bitmap == ~uint64_t(0)) return bitmap & at;
  return (bitmap_bits(col.lo, bitmap) | uint64_t(bitmap_bits(col.hi, bitmap)) << 32) & at;
}

template <bool kCased>
[[gnu::target("avx2")]] inline void classify_row(const Bytes64& col, uint64_t at, uint16_t row, const RowKinds& kinds,
                                                 WideCharacters& w, uint64_t* stop) {
  const uint64_t letter = select(col, kinds.letter[row], at), other = select(col, kinds.other[row], at);
  w.letter |= letter;
  w.other |= other;
  if constexpr (kCased) {
    w.upper |= select(col, kinds.upper[row], at);
    w.caseless |= select(col, kinds.caseless[row], at);
  }
  *stop |= at & ~(letter | other);
}

[[gnu::target("avx2")]] inline uint64_t at_least_mask(const Bytes64& b, uint8_t c) {
  const __m256i v = _mm256_set1_epi8(char(c));
  return uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(b.lo, v), b.lo))) |
         uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(b.hi, v), b.hi)))) << 32;
}

constexpr int kMaxRows = 8;  // rows classified whole per window; past them, one at a time

template <bool kCased>
[[gnu::target("avx2")]] WideCharacters classify_rows(const uint8_t* p, uint64_t first_bytes) {
  const ClassTable table = class_table();
  const RowKinds& kinds = row_kinds(kCased);
  const Bytes64 b0 = load64(p), b1 = load64(p + 1), b2 = load64(p + 2);  // lane k: p[k], p[k + 1], p[k + 2]
  WideCharacters w;
  const uint64_t four_byte = first_bytes & at_least_mask(b0, 0xF0);
  uint64_t stop = 0, left = first_bytes & ~four_byte;
  for (int rows = 0; left && rows < kMaxRows; ++rows) {
    const unsigned k = unsigned(__builtin_ctzll(left));
    const uint8_t lead = p[k];
    const uint64_t same_lead = equal_mask(b0, lead) & left;
    if (lead < 0xE0) {  // the lead byte names the block, the second byte the code point in it
      classify_row<kCased>(b1, same_lead, table.row_of_block[lead & 0x1F], kinds, w, &stop);
      left &= ~same_lead;
    } else if (kinds.letter_lead[lead & 0x0F]) {  // all 4,096 code points caseless letters (CJK, Hangul)
      w.letter |= same_lead;
      if constexpr (kCased) w.caseless |= same_lead;
      left &= ~same_lead;
    } else {  // the lead and second byte name the block, the third the code point
      const uint64_t same_row = same_lead & equal_mask(b1, p[k + 1]);
      classify_row<kCased>(b2, same_row, table.row_of_block[uint32_t(lead & 0x0F) << 6 | (p[k + 1] & 0x3F)], kinds, w, &stop);
      left &= ~same_row;
    }
  }
  classify_each<kCased>(p, left | four_byte, kinds, w, &stop);
  // Characters the window cuts (those one at a time were checked already).
  for (uint64_t end = first_bytes & ~four_byte & (uint64_t(3) << 62); end; end &= end - 1) {
    const unsigned k = unsigned(__builtin_ctzll(end));
    if (k + length_of(p[k]) > 64) stop |= uint64_t(1) << k;
  }
  if (stop) w.valid = unsigned(__builtin_ctzll(stop));
  return w;
}

}  // namespace

[[gnu::target("avx2")]] WideCharacters wide_characters_avx2(const uint8_t* p, uint64_t first_bytes, size_t readable,
                                                            bool cased) {
  uint8_t padded[64 + 4];
  p = readable_window(p, readable, padded);
  return cased ? classify_rows<true>(p, first_bytes) : classify_rows<false>(p, first_bytes);
}

}  // namespace zllm
