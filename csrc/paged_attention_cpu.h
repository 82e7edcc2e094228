// The arithmetic of the CPU paged attention kernels (paged_decode_cpu.cpp,
// paged_prefill_cpu.cpp), shared so that a query row gets the same bits whichever kernel
// runs it and whichever other rows share its call: a query at position p is computed
// exactly as a decode over p + 1 keys.
//
// Two loop forms compute the same expressions.  The row form runs one query row at a time:
// its dot products run in kLanes independent accumulators summed in a fixed tree.  The lane
// form, for tiles of many rows (a prefill chunk, a large query-head group), puts one row in
// each of kLanes lanes and evaluates the same tree for all of them at once, with the softmax
// bookkeeping of the whole tile vectorised; a block of keys is then read once per tile, and
// no dot needs a horizontal sum.  Both evaluate every product, sum, max and exponential in
// the same order, so (with contraction off for the files that include this, see
// CMakeLists.txt) they, and every target_clones variant, return the same bits.
// Everything here is always_inline: each kernel's one cloned function compiles it for its
// own target.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "paged_decode.h"

namespace zllm {
namespace cpu_attention {

#define ZLLM_ALWAYS_INLINE inline __attribute__((always_inline))

constexpr int kLanes = 16;
constexpr int kMaxGroup = 16;  // query heads per KV head
constexpr int kMaxPage = 256;
constexpr int kLaneMinRows = 4;  // tiles with fewer rows run in the row form

typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t LaneInts __attribute__((vector_size(kLanes * sizeof(int32_t))));

// a . b over kDim floats: kDim / kLanes lane-wise products, then a fixed pairwise tree over
// the chunks and over the lanes.  No loop-carried sum, so the dots of a block overlap.
template <int kDim>
ZLLM_ALWAYS_INLINE float dot(const float* a, const float* b) {
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

// dot's tree with a row in each lane: q[d] holds element d of every row.  Halving by width
// w pairs index i with i + w, so the sum over {base + i * stride : i < count} is the sum
// over its even members plus the sum over its odd ones: first over the chunks c of lane l
// (leaf c * kLanes + l), then over the lanes.
template <int kLane, int kBase, int kStride, int kCount>
ZLLM_ALWAYS_INLINE Lanes chunk_sum(const Lanes* q, const float* k) {
  if constexpr (kCount == 1) {
    constexpr int d = kBase * kLanes + kLane;
    return q[d] * k[d];
  } else {
    return chunk_sum<kLane, kBase, 2 * kStride, kCount / 2>(q, k) +
           chunk_sum<kLane, kBase + kStride, 2 * kStride, kCount / 2>(q, k);
  }
}

template <int kDim, int kBase = 0, int kStride = 1, int kCount = kLanes>
ZLLM_ALWAYS_INLINE Lanes lane_dot(const Lanes* q, const float* k) {
  if constexpr (kCount == 1) {
    return chunk_sum<kBase, 0, 1, kDim / kLanes>(q, k);
  } else {
    return lane_dot<kDim, kBase, 2 * kStride, kCount / 2>(q, k) +
           lane_dot<kDim, kBase + kStride, 2 * kStride, kCount / 2>(q, k);
  }
}

ZLLM_ALWAYS_INLINE int32_t to_int(float x) { return static_cast<int32_t>(x); }
ZLLM_ALWAYS_INLINE LaneInts to_int(Lanes x) { return __builtin_convertvector(x, LaneInts); }
ZLLM_ALWAYS_INLINE float to_float(int32_t x) { return static_cast<float>(x); }
ZLLM_ALWAYS_INLINE Lanes to_float(LaneInts x) { return __builtin_convertvector(x, Lanes); }

template <class F, class I>
ZLLM_ALWAYS_INLINE F from_bits(I bits) {
  F f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// 2^x for x <= 0 (scores minus their running max), of a float or of every lane, in plain
// arithmetic, so it vectorises where a libm call would not: x = n + f with |f| <= 1/2, 2^f
// from its Taylor series to degree 7 (relative error below 1e-8, under float rounding), 2^n
// built in the exponent bits.
template <class F>
ZLLM_ALWAYS_INLINE F exp2_nonpositive(F x) {
  const F floor = F{} - 126.f;
  x = x > floor ? x : floor;  // below: 0 within float's normal range
  const auto n = to_int(x - 0.5f);  // truncation toward zero: the nearest integer
  const F t = (x - to_float(n)) * 0.6931471805599453f;
  F y = F{} + 1.f / 5040;
  y = y * t + 1.f / 720;
  y = y * t + 1.f / 120;
  y = y * t + 1.f / 24;
  y = y * t + 1.f / 6;
  y = y * t + 0.5f;
  y = y * t + 1.f;
  return (y * t + 1.f) * from_bits<F>((n + 127) << 23);
}

// Online softmax state of one query row: running max and sum, unnormalised output.
template <int kDim>
struct Row {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.f;
  float q[kDim];  // the query, pre-scaled by softmax scale * log2(e)
  float acc[kDim] = {};

  void load(const float* query, float scale_log2) {
    for (int d = 0; d < kDim; ++d) q[d] = query[d] * scale_log2;
  }

  // The normalised output; a row that saw no key (sum 0: any key adds at least 2^0) writes
  // zeros, and a NaN stays one.
  void store(float* out) const {
    const float inv = sum != 0.f ? 1.f / sum : 0.f;
    for (int d = 0; d < kDim; ++d) out[d] = acc[d] * inv;
  }
};

ZLLM_ALWAYS_INLINE Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

ZLLM_ALWAYS_INLINE void store(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// The value half of a block for kRows rows that see the same n positions: each row's output
// rescaled, then its weights w[j * w_key + i] times the values, position by position.  The
// rows' outputs stay in registers (kRows * kDim / kLanes vectors) and share each value load.
template <int kDim, int kRows>
ZLLM_ALWAYS_INLINE void accumulate(Row<kDim>* rows, const float* w, int w_key, const float* rescale,
                                   const float* v, int64_t v_stride, int n) {
  constexpr int kChunks = kDim / kLanes;
  Lanes acc[kRows][kChunks];
  for (int i = 0; i < kRows; ++i) {
    for (int c = 0; c < kChunks; ++c) acc[i][c] = load(rows[i].acc + c * kLanes) * rescale[i];
  }
  for (int j = 0; j < n; ++j) {
    Lanes vj[kChunks];
    for (int c = 0; c < kChunks; ++c) vj[c] = load(v + j * v_stride + c * kLanes);
    for (int i = 0; i < kRows; ++i) {
      const float wij = w[j * w_key + i];
      for (int c = 0; c < kChunks; ++c) acc[i][c] += wij * vj[c];
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int c = 0; c < kChunks; ++c) store(rows[i].acc + c * kLanes, acc[i][c]);
  }
}

// A slot of the next block (its keys and values of one KV head), requested while this block
// is computed: blocks lie anywhere in the pool, so the hardware prefetcher cannot run ahead
// across them.  The lane form asks for one slot per dot, so the requests never pile up; the
// row form, bound by memory at a few rows, for the whole block at once.
template <int kDim>
ZLLM_ALWAYS_INLINE void prefetch_slot(const float* k, const float* v) {
  for (int d = 0; d < kDim; d += 64 / sizeof(float)) {
    __builtin_prefetch(k + d);
    __builtin_prefetch(v + d);
  }
}

// Rows per accumulate call in the lane form: 16 output vectors in registers.
template <int kDim>
constexpr int kRowBlock = 16 * kLanes / kDim;
static_assert(kRowBlock<64> == 4 && kRowBlock<128> == 2);

// Row form: one block of n positions for one row.
template <int kDim>
ZLLM_ALWAYS_INLINE void attend_block(Row<kDim>& r, const float* k, int64_t k_stride, const float* v,
                                     int64_t v_stride, int n) {
  // p[0..n) are the block's scores, then their weights; p[n] is the old max, then the
  // factor that rescales what came before (0 on the first block).
  float p[kMaxPage + 1];
  float block_max = r.max;
  for (int j = 0; j < n; ++j) {
    p[j] = dot<kDim>(r.q, k + j * k_stride);
    block_max = std::max(block_max, p[j]);
  }
  p[n] = r.max;
  for (int j = 0; j <= n; ++j) p[j] = exp2_nonpositive(p[j] - block_max);
  accumulate<kDim, 1>(&r, p, 1, &p[n], v, v_stride, n);
  float sum = r.sum * p[n];
  for (int j = 0; j < n; ++j) sum += p[j];
  r.sum = sum;
  r.max = block_max;
}

// Lane form: the running max and sum of up to kLanes rows, row i in lane i, and their
// queries transposed (q[d] holds element d of every row).
template <int kDim>
struct LaneRows {
  Lanes q[kDim] = {};  // unused lanes: zero queries that see no key
  Lanes max = Lanes{} - std::numeric_limits<float>::infinity();
  Lanes sum = {};
  LaneInts keys = {};  // positions row i sees

  LaneRows(const Row<kDim>* rows, const int* row_keys, int n_rows) {
    for (int i = 0; i < n_rows; ++i) {
      for (int d = 0; d < kDim; ++d) q[d][i] = rows[i].q[d];
      keys[i] = row_keys[i];
    }
  }
};

// Lane form: one block of n positions for up to kLanes rows (and the first next_n slots of
// the next block prefetched).  Row i sees the block's first keys[i] - start positions; the
// others are masked out of its max and weigh 0 in its sum (an exact no-op), and their values
// are never read for it, so it computes what the row form does.
template <int kDim>
ZLLM_ALWAYS_INLINE void attend_block_lanes(Row<kDim>* rows, int n_rows, LaneRows<kDim>& t, int start,
                                           const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                                           int n, const float* next_k, const float* next_v, int next_n) {
  const Lanes masked = Lanes{} - std::numeric_limits<float>::infinity();
  alignas(64) float w[kMaxPage * kLanes];  // w[j * kLanes + i]: row i's score, then weight, of position j
  Lanes block_max = t.max;
  for (int j = 0; j < n; ++j) {
    if (j < next_n) prefetch_slot<kDim>(next_k + j * k_stride, next_v + j * v_stride);
    const Lanes score = start + j < t.keys ? lane_dot<kDim>(t.q, k + j * k_stride) : masked;
    block_max = block_max < score ? score : block_max;  // std::max, lane-wise
    store(w + j * kLanes, score);
  }
  const Lanes rescale = exp2_nonpositive(t.max - block_max);
  Lanes sum = t.sum * rescale;
  for (int j = 0; j < n; ++j) {
    const Lanes weight = start + j < t.keys ? exp2_nonpositive(load(w + j * kLanes) - block_max) : Lanes{};
    sum += weight;
    store(w + j * kLanes, weight);
  }
  t.max = block_max;
  t.sum = sum;
  float factor[kLanes];
  store(factor, rescale);
  constexpr int kBlock = kRowBlock<kDim>;
  for (int i = 0; i < n_rows;) {
    bool whole = i + kBlock <= n_rows;  // kBlock rows that all see the n positions
    for (int b = 0; whole && b < kBlock; ++b) whole = t.keys[i + b] - start >= n;
    if (whole) {
      accumulate<kDim, kBlock>(rows + i, w + i, kLanes, factor + i, v, v_stride, n);
      i += kBlock;
    } else {
      const int seen = std::min(n, t.keys[i] - start);
      if (seen > 0) accumulate<kDim, 1>(rows + i, w + i, kLanes, factor + i, v, v_stride, seen);
      ++i;
    }
  }
}

// Up to kLanes query rows of one sequence and KV head: row i sees keys[i] positions
// (blocks through table), a row with none writes zeros.
template <int kDim>
ZLLM_ALWAYS_INLINE void attend_rows(const PagedDecodeArgs& a, Row<kDim>* rows, const int* keys, int n_rows,
                                    const int32_t* table, int kv_head) {
  const float* k_cache = static_cast<const float*>(a.k_cache) + kv_head * a.k_stride_head;
  const float* v_cache = static_cast<const float*>(a.v_cache) + kv_head * a.v_stride_head;
  const int len = *std::max_element(keys, keys + n_rows);
  const auto k_block = [&](int start) { return k_cache + table[start / a.page_size] * a.k_stride_block; };
  const auto v_block = [&](int start) { return v_cache + table[start / a.page_size] * a.v_stride_block; };
  if (n_rows < kLaneMinRows) {
    for (int start = 0; start < len; start += a.page_size) {
      const float* k = k_block(start);
      const float* v = v_block(start);
      const int next = start + a.page_size;
      for (int j = 0; j < std::min(a.page_size, len - next); ++j) {
        prefetch_slot<kDim>(k_block(next) + j * a.k_stride_slot, v_block(next) + j * a.v_stride_slot);
      }
      for (int i = 0; i < n_rows; ++i) {
        const int n = std::min(a.page_size, keys[i] - start);
        if (n > 0) attend_block(rows[i], k, a.k_stride_slot, v, a.v_stride_slot, n);
      }
    }
    return;
  }
  LaneRows<kDim> t(rows, keys, n_rows);
  for (int start = 0; start < len; start += a.page_size) {
    const int next = start + a.page_size, next_n = std::min(a.page_size, len - next);
    attend_block_lanes(rows, n_rows, t, start, k_block(start), a.k_stride_slot, v_block(start), a.v_stride_slot,
                       std::min(a.page_size, len - start), next_n > 0 ? k_block(next) : nullptr,
                       next_n > 0 ? v_block(next) : nullptr, next_n);
  }
  for (int i = 0; i < n_rows; ++i) rows[i].sum = t.sum[i];
}

// What both kernels refuse alike.
inline const char* check_shape(const PagedDecodeArgs& a) {
  if (a.dtype != KvDtype::kFloat32) return "only float32 caches are supported on the CPU";
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return "num_heads must be a multiple of num_kv_heads";
  if (a.num_heads / a.num_kv_heads > kMaxGroup) return "more than 16 query heads per KV head";
  if (a.head_dim != 64 && a.head_dim != 128) return "head_dim must be 64 or 128";
  if (a.page_size <= 0 || a.page_size > kMaxPage) return "page_size must be in 1..256";
  return nullptr;
}

// Runs items [0, n) as run(first, last) on the calling thread and up to num_threads - 1
// more, each taking a contiguous range of about equal cost (cost[i] is the running cost
// before item i, cost[n] the total, in keys times query tokens).  A thread costs tens of
// microseconds to start: worth it only for thousands of keys each.  Each item runs whole on
// one thread, so no result depends on the split.
template <class Run>
void run_items(const std::vector<int64_t>& cost, int num_threads, Run run) {
  const int n = static_cast<int>(cost.size()) - 1;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(num_threads, cost.back() / 4096), 1, std::max(n, 1)));
  if (threads <= 1) {
    run(0, n);
    return;
  }
  // Thread t starts at the first item whose running cost reaches t / threads of the total.
  std::vector<int> bounds(threads + 1, n);
  for (int t = 0; t < threads; ++t) {
    bounds[t] = static_cast<int>(std::lower_bound(cost.begin(), cost.end() - 1, cost.back() * t / threads) -
                                 cost.begin());
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(run, bounds[t], bounds[t + 1]);
  run(bounds[0], bounds[1]);
  for (auto& th : pool) th.join();
}

}  // namespace cpu_attention
}  // namespace zllm
