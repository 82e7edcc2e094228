// Host side of the GPU full tokenizer: the tables it uploads, built from the CPU tokenizer's
// model, and the split of texts into ordinary-text and special-token segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu_tokenize.h"
#include "tokenizer_core.h"

namespace zllm {
namespace gpu_tokenize {

// Host copies of the arrays Tables points to (the class table is the CPU's own, class_table()).
struct HostTables {
  std::vector<VocabSlot> vocab;
  std::vector<PairSlot> pairs;
  std::vector<uint32_t> byte_ids;  // 256
  std::string arena;
  std::vector<uint32_t> offsets;
  uint32_t max_token_len = 0;
  bool whole_piece_first = false;
  std::vector<Grammar> stages;
};

// Merge pairs as the CPU merges: `merges` in priority order (Hugging Face; a later duplicate
// of a pair wins) or, when empty, tiktoken's definition: a pair merges when its concatenation
// is a token, at that token's rank (every split of every token into two tokens).
HostTables build_tables(const BytePairModel& model, const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                        const std::vector<Grammar>& stages);

// Tables over the host copies (the emulation's device memory is the host's).
Tables host_view(const HostTables& h);

// One batch as the device takes it: the texts' bytes back to back, split into segments at the
// special tokens the policy allows (as TokenizerCore::encode splits), and each text's start.
struct Segments {
  std::vector<uint32_t> bounds;  // segments + 1 byte offsets (empty segments are left out)
  std::vector<uint32_t> tokens;  // kNone: ordinary text; else the special token's id
  std::vector<uint32_t> doc_offsets;
  size_t bytes = 0;
};

// Adds one text (its bytes will sit at segs.bytes). Returns -1, or the index (in the core's
// special order) of a disallowed special the text holds: encode refuses such a text.
long add_text(const TokenizerCore& core, const SpecialPolicy& policy, const uint8_t* s, size_t n, Segments& segs);
void finish(Segments& segs);  // closes the last segment and text

}  // namespace gpu_tokenize
}  // namespace zllm
