// Paged decode attention on the CPU: each (sequence, KV head) streams its blocks once, in
// place, for every query head of its group.  The torch path gathers the blocks into a
// contiguous copy first and attends over that, so it moves each K/V byte three times (read,
// write, read again); at batch 16 and a few hundred positions that traffic was a third of a
// decode step (bench/engine.py).  The arithmetic lives in paged_attention_cpu.h, shared
// with the prefill kernel.
#include <cstdint>
#include <vector>

#include "paged_attention_cpu.h"
#include "paged_decode.h"

namespace zllm {
namespace {

using namespace cpu_attention;

// One KV head of one sequence: its query heads attend over every block, in order.
template <int kDim>
ZLLM_ALWAYS_INLINE void attend_kv_head(const PagedDecodeArgs& a, int seq, int kv_head) {
  const int group = a.num_heads / a.num_kv_heads;
  Row<kDim> rows[kMaxGroup];
  int keys[kMaxGroup];
  for (int i = 0; i < group; ++i) {
    rows[i].load(static_cast<const float*>(a.q) + seq * a.q_stride_seq + (kv_head * group + i) * a.q_stride_head,
                 a.scale_log2);
    keys[i] = a.seq_lens[seq];
  }
  attend_rows(a, rows, keys, group, a.block_tables + seq * a.table_stride, kv_head);
  for (int i = 0; i < group; ++i) {
    rows[i].store(static_cast<float*>(a.out) + seq * a.out_stride_seq + (kv_head * group + i) * a.out_stride_head);
  }
}

// Items are (sequence, KV head) pairs, numbered sequence-major.
// The one cloned function: what it inlines is compiled for each target.
__attribute__((target_clones("avx512f", "avx2", "default")))
void attend_items(const PagedDecodeArgs& a, int first, int last) {
  for (int item = first; item < last; ++item) {
    const int seq = item / a.num_kv_heads, kv_head = item % a.num_kv_heads;
    if (a.head_dim == 64) {
      attend_kv_head<64>(a, seq, kv_head);
    } else {
      attend_kv_head<128>(a, seq, kv_head);
    }
  }
}

}  // namespace

const char* paged_decode_cpu(const PagedDecodeArgs& a, int num_threads) {
  if (const char* err = check_shape(a)) return err;
  std::vector<int64_t> cost{0};
  for (int s = 0; s < a.batch; ++s) {
    for (int h = 0; h < a.num_kv_heads; ++h) cost.push_back(cost.back() + a.seq_lens[s]);
  }
  run_items(cost, num_threads, [&a](int first, int last) { attend_items(a, first, last); });
  return nullptr;
}

}  // namespace zllm
