// Paged prefill attention on the CPU: the chunk of new tokens of each sequence attends to
// the sequence's cached blocks and causally to itself, reading the blocks in place.  The
// torch path gathers every context block into a copy and runs SDPA with a materialised
// mask, so a chunk of 8 tokens after 14K cached ones paid for a 14K-row gather per layer
// (bench/engine.py --mixed); here each block of K/V is read once per tile of query rows
// (up to 16: tokens times the query heads of a KV head) while every row of the tile attends
// to it.
//
// A query at absolute position p sees keys 0..p: each row is computed exactly as a decode
// over p + 1 keys (paged_attention_cpu.h), so a one-token chunk gets the bits the decode
// kernel gives it, and a mixed step (decodes and prefill chunks) runs as one call without
// changing any decode's result.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "paged_attention_cpu.h"
#include "paged_prefill.h"

namespace zllm {
namespace {

using namespace cpu_attention;

struct Item {
  int seq, first, count, kv_head;  // tokens [first, first + count) of seq's chunk
};

template <int kDim>
ZLLM_ALWAYS_INLINE void attend_tile(const PagedPrefillArgs& pa, const Item& it) {
  const PagedDecodeArgs& a = pa.paged;
  const int group = a.num_heads / a.num_kv_heads;
  const int row0 = pa.query_start_loc[it.seq];
  const int q_len = pa.query_start_loc[it.seq + 1] - row0;
  const int first_keys = a.seq_lens[it.seq] - q_len + it.first + 1;  // keys the tile's first token sees
  Row<kDim> rows[kLanes];
  int keys[kLanes];
  const int n_rows = it.count * group;
  for (int i = 0; i < n_rows; ++i) {
    const int token = row0 + it.first + i / group, head = it.kv_head * group + i % group;
    rows[i].load(static_cast<const float*>(a.q) + token * a.q_stride_seq + head * a.q_stride_head, a.scale_log2);
    keys[i] = first_keys + i / group;
  }
  attend_rows(a, rows, keys, n_rows, a.block_tables + it.seq * a.table_stride, it.kv_head);
  for (int i = 0; i < n_rows; ++i) {
    const int token = row0 + it.first + i / group, head = it.kv_head * group + i % group;
    rows[i].store(static_cast<float*>(a.out) + token * a.out_stride_seq + head * a.out_stride_head);
  }
}

// The one cloned function: what it inlines is compiled for each target.
__attribute__((target_clones("avx512f", "avx2", "default")))
void attend_items(const PagedPrefillArgs& a, const Item* items, int first, int last) {
  for (int i = first; i < last; ++i) {
    if (a.paged.head_dim == 64) {
      attend_tile<64>(a, items[i]);
    } else {
      attend_tile<128>(a, items[i]);
    }
  }
}

const char* check(const PagedPrefillArgs& pa) {
  const PagedDecodeArgs& a = pa.paged;
  if (const char* err = check_shape(a)) return err;
  if (pa.query_start_loc[0] != 0 || pa.query_start_loc[a.batch] != pa.num_tokens) {
    return "query_start_loc must run from 0 to the number of query rows";
  }
  for (int s = 0; s < a.batch; ++s) {
    const int q_len = pa.query_start_loc[s + 1] - pa.query_start_loc[s];
    if (q_len < 0 || q_len > a.seq_lens[s]) return "a chunk must be no longer than its sequence";
  }
  return nullptr;
}

}  // namespace

const char* paged_prefill_cpu(const PagedPrefillArgs& pa, int num_threads) {
  if (const char* err = check(pa)) return err;
  const PagedDecodeArgs& a = pa.paged;
  const int group = a.num_heads / a.num_kv_heads, tile = kLanes / group;
  // Items in (sequence, tile, KV head) order; the cost of each is its tokens times the keys
  // its last token sees.
  std::vector<Item> items;
  std::vector<int64_t> cost{0};
  for (int s = 0; s < a.batch; ++s) {
    const int q_len = pa.query_start_loc[s + 1] - pa.query_start_loc[s];
    for (int first = 0; first < q_len; first += tile) {
      const int count = std::min(tile, q_len - first);
      const int64_t keys = a.seq_lens[s] - q_len + first + count;
      for (int h = 0; h < a.num_kv_heads; ++h) {
        items.push_back({s, first, count, h});
        cost.push_back(cost.back() + count * keys);
      }
    }
  }
  run_items(cost, num_threads, [&](int first, int last) { attend_items(pa, items.data(), first, last); });
  return nullptr;
}

}  // namespace zllm
