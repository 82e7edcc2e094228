// The CharClass of every code point as a two-level table: code points in blocks of 64, each
// block naming one of the distinct 64-entry rows (368 in all). 58 KB instead of a flat 1.1 MB
// byte per code point, and a script's text touches a few of its cache lines, where the flat
// table missed L1 on every new character of CJK or Hangul.
//
// Plain arrays with no pointers inside, so the GPU tokenizer can upload the same table (the
// one source of the classes for both paths).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zllm {

struct ClassTable {
  static constexpr int kBlockBits = 6;
  static constexpr size_t kBlocks = 0x110000 >> kBlockBits;

  const uint16_t* row_of_block;  // kBlocks entries: cp >> kBlockBits -> row
  const uint8_t* rows;           // num_rows * 64 CharClass values
  size_t num_rows;

  // cp < 0x110000.
  uint8_t of(uint32_t cp) const {
    return rows[(size_t(row_of_block[cp >> kBlockBits]) << kBlockBits) | (cp & ((1u << kBlockBits) - 1))];
  }
};

// Built once, on first use, from the generated ranges (unicode_classes.inc).
const ClassTable& class_table();

}  // namespace zllm
