#include "class_table.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "pretokenizer.h"

namespace zllm {
namespace {

struct ClassRange {
  uint32_t lo, hi;
  CharClass cls;
};
#include "unicode_classes.inc"

struct Storage {
  std::vector<uint16_t> row_of_block;
  std::vector<uint8_t> rows;
};

// The flat table first (a few ms, once), then each block's row deduplicated.
Storage build() {
  std::vector<uint8_t> flat(0x110000, kOther);
  for (const ClassRange& r : kClassRanges)
    for (uint32_t c = r.lo; c <= r.hi; ++c) flat[c] = r.cls;
  flat['\r'] = kCR;
  flat['\n'] = kLF;
  constexpr size_t kRow = size_t(1) << ClassTable::kBlockBits;
  Storage s;
  std::map<std::string, uint16_t> index;
  for (size_t b = 0; b < ClassTable::kBlocks; ++b) {
    std::string row(reinterpret_cast<const char*>(flat.data() + b * kRow), kRow);
    auto it = index.emplace(row, uint16_t(index.size())).first;
    if (it->second == s.rows.size() / kRow) s.rows.insert(s.rows.end(), row.begin(), row.end());
    s.row_of_block.push_back(it->second);
  }
  return s;
}

}  // namespace

const ClassTable& class_table() {
  static const Storage storage = build();
  static const ClassTable table{storage.row_of_block.data(), storage.rows.data(),
                                storage.rows.size() >> ClassTable::kBlockBits};
  return table;
}

}  // namespace zllm
