// Paged decode attention on the CPU: each (sequence, KV head) streams its blocks once, in
// place, for every query head of its group.  The torch path gathers the blocks into a
// contiguous copy first and attends over that, so it moves each K/V byte three times (read,
// write, read again); at batch 16 and a few hundred positions that traffic was a third of a
// decode step (bench/engine.py).
//
// Dot products run in kLanes independent accumulators summed in a fixed order, so the
// compiler vectorises them on the wheel's baseline target and on each target_clones
// variant alike, and (with contraction off for this file, see CMakeLists.txt) every variant
// returns the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "paged_decode.h"

namespace zllm {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxGroup = 16;  // query heads per KV head
constexpr int kMaxPage = 256;

// a . b over kDim floats: kDim / kLanes lane-wise products, then a fixed pairwise tree over
// the chunks and over the lanes.  No loop-carried sum, so the dots of a block overlap.
template <int kDim>
inline __attribute__((always_inline)) float dot(const float* a, const float* b) {
  float part[kDim / kLanes][kLanes];
  for (int c = 0; c < kDim / kLanes; ++c) {
    for (int l = 0; l < kLanes; ++l) part[c][l] = a[c * kLanes + l] * b[c * kLanes + l];
  }
  for (int width = kDim / kLanes / 2; width > 0; width /= 2) {
    for (int c = 0; c < width; ++c) {
      for (int l = 0; l < kLanes; ++l) part[c][l] += part[c + width][l];
    }
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) part[0][l] += part[0][l + width];
  }
  return part[0][0];
}

// p[j] = 2^p[j] for p[j] <= 0 (scores minus their running max) in plain arithmetic, so the
// loop vectorises where a libm call would not: x = n + f with |f| <= 1/2, 2^f from its
// Taylor series to degree 7 (relative error below 1e-8, under float rounding), 2^n built in
// the exponent bits.
inline __attribute__((always_inline)) void exp2_nonpositive(float* p, int count) {
  int32_t exponent[kMaxPage + 1];
  for (int j = 0; j < count; ++j) {
    const float x = p[j] > -126.f ? p[j] : -126.f;  // below: 0 within float's normal range
    const int n = static_cast<int>(x - 0.5f);  // truncation toward zero: the nearest integer
    const float t = (x - static_cast<float>(n)) * 0.6931471805599453f;
    float y = 1.f / 5040;
    y = y * t + 1.f / 720;
    y = y * t + 1.f / 120;
    y = y * t + 1.f / 24;
    y = y * t + 1.f / 6;
    y = y * t + 0.5f;
    y = y * t + 1.f;
    p[j] = y * t + 1.f;
    exponent[j] = (n + 127) << 23;
  }
  float scale[kMaxPage + 1];
  std::memcpy(scale, exponent, sizeof(float) * count);
  for (int j = 0; j < count; ++j) p[j] *= scale[j];
}

// Online softmax state of one query head: running max and sum, unnormalised output.
template <int kDim>
struct Row {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.f;
  float q[kDim];  // the query, pre-scaled by softmax scale * log2(e)
  float acc[kDim] = {};
};

// One block of n positions for one query head.  The output accumulates position by position
// in a local array the compiler keeps in registers (kDim / kLanes vectors).
template <int kDim>
inline __attribute__((always_inline)) void attend_block(Row<kDim>& r, const float* k, int64_t k_stride,
                                                        const float* v, int64_t v_stride, int n) {
  // p[0..n) are the block's scores, then their weights; p[n] is the old max, then the
  // factor that rescales what came before (0 on the first block).
  float p[kMaxPage + 1];
  float block_max = r.max;
  for (int j = 0; j < n; ++j) {
    p[j] = dot<kDim>(r.q, k + j * k_stride);
    block_max = std::max(block_max, p[j]);
  }
  p[n] = r.max;
  for (int j = 0; j <= n; ++j) p[j] -= block_max;
  exp2_nonpositive(p, n + 1);
  const float rescale = p[n];
  float acc[kDim];
  for (int d = 0; d < kDim; ++d) acc[d] = r.acc[d] * rescale;
  float sum = r.sum * rescale;
  for (int j = 0; j < n; ++j) {
    const float* vj = v + j * v_stride;
    for (int d = 0; d < kDim; ++d) acc[d] += p[j] * vj[d];
    sum += p[j];
  }
  std::memcpy(r.acc, acc, sizeof acc);
  r.sum = sum;
  r.max = block_max;
}

// One KV head of one sequence: its query heads attend over every block, in order.
template <int kDim>
inline __attribute__((always_inline)) void attend_kv_head(const PagedDecodeArgs& a, int seq, int kv_head) {
  const int group = a.num_heads / a.num_kv_heads, len = a.seq_lens[seq];
  const float* q = static_cast<const float*>(a.q) + seq * a.q_stride_seq;
  const float* k_cache = static_cast<const float*>(a.k_cache) + kv_head * a.k_stride_head;
  const float* v_cache = static_cast<const float*>(a.v_cache) + kv_head * a.v_stride_head;
  const int32_t* table = a.block_tables + seq * a.table_stride;
  Row<kDim> rows[kMaxGroup];
  for (int i = 0; i < group; ++i) {
    const float* qi = q + (kv_head * group + i) * a.q_stride_head;
    for (int d = 0; d < kDim; ++d) rows[i].q[d] = qi[d] * a.scale_log2;
  }
  for (int start = 0; start < len; start += a.page_size) {
    const int n = std::min(a.page_size, len - start);
    const int64_t block = table[start / a.page_size];
    const float* k = k_cache + block * a.k_stride_block;
    const float* v = v_cache + block * a.v_stride_block;
    for (int i = 0; i < group; ++i) attend_block(rows[i], k, a.k_stride_slot, v, a.v_stride_slot, n);
  }
  float* out = static_cast<float*>(a.out) + seq * a.out_stride_seq;
  for (int i = 0; i < group; ++i) {
    float* oi = out + (kv_head * group + i) * a.out_stride_head;
    const float inv = len > 0 ? 1.f / rows[i].sum : 0.f;
    for (int d = 0; d < kDim; ++d) oi[d] = rows[i].acc[d] * inv;
  }
}

// Items are (sequence, KV head) pairs, numbered sequence-major; a thread takes a range.
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
  if (a.dtype != KvDtype::kFloat32) return "only float32 caches are supported on the CPU";
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return "num_heads must be a multiple of num_kv_heads";
  if (a.num_heads / a.num_kv_heads > kMaxGroup) return "more than 16 query heads per KV head";
  if (a.head_dim != 64 && a.head_dim != 128) return "head_dim must be 64 or 128";
  if (a.page_size <= 0 || a.page_size > kMaxPage) return "page_size must be in 1..256";
  const int items = a.batch * a.num_kv_heads;
  // A thread costs tens of microseconds to start: worth it only for thousands of positions.
  int64_t positions = 0;
  for (int s = 0; s < a.batch; ++s) positions += a.seq_lens[s];
  const int threads = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(num_threads, positions * a.num_kv_heads / 4096), 1, items));
  if (threads <= 1) {
    attend_items(a, 0, items);
    return nullptr;
  }
  std::vector<std::thread> pool;
  const int per = (items + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(attend_items, std::cref(a), std::min(items, t * per), std::min(items, (t + 1) * per));
  }
  attend_items(a, 0, std::min(items, per));
  for (auto& th : pool) th.join();
  return nullptr;
}

}  // namespace zllm
