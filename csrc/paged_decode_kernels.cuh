// Device code of the CUDA paged decode (launched from paged_decode.cu): one query token per
// sequence over a block-table KV cache shaped [num_blocks, block_size, num_kv_heads, head_dim].
//
// One thread block per (sequence, KV head, context split).  Inside a warp, a row group of
// LANES_PER_ROW lanes covers one cached token's head_dim with 16-byte loads (CHUNKS of them
// per lane), so a warp reads ROWS_PER_WARP tokens per load; every lane keeps its slice of
// the query of the whole GQA group, so one K/V load serves all query heads of its KV head.
// Each row group keeps its own fp32 online softmax (base 2), updated once per UNROLL
// tokens; row groups merge by warp shuffles, warps through shared memory.  With several
// splits, pass 1 writes unnormalised partials and pass 2 merges them; the partial layout
// matches the Triton kernel's (row = (seq * num_heads + head) * num_splits + split).
//
// Needs the CUDA fp16/bf16 types and intrinsics declared before inclusion.
#pragma once

#include <cstdint>

#include "paged_decode.h"

namespace zllm {
namespace decode_kernels {

constexpr int kWarps = 4;

// Where each lane's registers go.  Wider lane slices mean fewer lanes per token and so
// fewer shuffles per score; large groups hold more query/accumulator registers and take
// the narrow slice.  Every lane keeps 128 bytes of K/V in flight to hide DRAM latency.
template <typename T, int HEAD_DIM, int GROUP>
struct Geometry {
  static constexpr int VEC = 16 / sizeof(T);              // elements per 16-byte load
  static constexpr int CHUNKS = GROUP <= 4 ? 2 : 1;       // 16-byte loads per lane per token
  static constexpr int ELEMS = VEC * CHUNKS;              // head_dim elements per lane
  static constexpr int LANES_PER_ROW = HEAD_DIM / ELEMS;
  static constexpr int ROWS_PER_WARP = 32 / LANES_PER_ROW;
  static constexpr int UNROLL = 4 / CHUNKS;               // tokens per row group per step
  static constexpr int ROWS_PER_STEP = kWarps * ROWS_PER_WARP * UNROLL;
  static_assert(HEAD_DIM % ELEMS == 0 && 32 % LANES_PER_ROW == 0, "a token row must fit a warp");
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// A lane's slice of one row, loaded raw: in-flight tokens cost 4 registers per 16 bytes.
template <int CHUNKS>
struct RawSlice {
  uint4 chunk[CHUNKS];
};

template <typename T, int CHUNKS>
__device__ __forceinline__ RawSlice<CHUNKS> load_slice(const T* src) {
  RawSlice<CHUNKS> r;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) r.chunk[c] = __ldg(reinterpret_cast<const uint4*>(src) + c);
  return r;
}

template <typename T, int CHUNKS, int ELEMS>
__device__ __forceinline__ void widen(const RawSlice<CHUNKS>& raw, float (&dst)[ELEMS]) {
  constexpr int VEC = ELEMS / CHUNKS;
  static_assert(sizeof(T) * VEC == 16, "a chunk is 16 bytes");
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    union { uint4 raw; T elems[VEC]; } u;
    u.raw = raw.chunk[c];
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[c * VEC + i] = to_float(u.elems[i]);
  }
}

template <typename T, int ELEMS>
__device__ __forceinline__ void store_slice(T* dst, const float (&src)[ELEMS], float scale) {
  constexpr int VEC = 16 / sizeof(T);
#pragma unroll
  for (int c = 0; c < ELEMS / VEC; ++c) {
    union { uint4 raw; T elems[VEC]; } u;
#pragma unroll
    for (int i = 0; i < VEC; ++i) u.elems[i] = from_float<T>(src[c * VEC + i] * scale);
    reinterpret_cast<uint4*>(dst)[c] = u.raw;
  }
}

// Running softmax state of one query head over the tokens a row group has seen.
template <int ELEMS>
struct Softmax {
  float m = -INFINITY;    // max score so far (base 2); -inf while empty
  float l = 0.f;          // sum of exp2(score - m)
  float acc[ELEMS] = {};  // this lane's slice of sum(exp2(score - m) * v)

  // Raise the max to cover `scores` (-inf for masked tokens) and return their weights.
  template <int N>
  __device__ __forceinline__ void rescale(const float (&scores)[N], float (&p)[N]) {
    float m_new = m;
#pragma unroll
    for (int u = 0; u < N; ++u) m_new = fmaxf(m_new, scores[u]);
    const bool empty = m_new == -INFINITY;  // nothing seen yet: keep everything at zero
    const float alpha = empty ? 1.f : exp2f(m - m_new);
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < N; ++u) {
      p[u] = empty ? 0.f : exp2f(scores[u] - m_new);
      sum += p[u];
    }
    l = l * alpha + sum;
#pragma unroll
    for (int i = 0; i < ELEMS; ++i) acc[i] *= alpha;
    m = m_new;
  }

  // Fold another state in; either side may be empty.
  __device__ __forceinline__ void merge(float om, float ol, const float (&oacc)[ELEMS]) {
    const float m_new = fmaxf(m, om);
    if (m_new == -INFINITY) return;
    const float a = exp2f(m - m_new), b = exp2f(om - m_new);
    l = l * a + ol * b;
#pragma unroll
    for (int i = 0; i < ELEMS; ++i) acc[i] = acc[i] * a + oacc[i] * b;
    m = m_new;
  }
};

template <typename T, int HEAD_DIM, int GROUP>
__global__ void __launch_bounds__(kWarps * 32)
paged_decode_split_kernel(PagedDecodeArgs a) {
  using G = Geometry<T, HEAD_DIM, GROUP>;
  constexpr int ELEMS = G::ELEMS, CHUNKS = G::CHUNKS, UNROLL = G::UNROLL;

  const int seq = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int seq_len = a.seq_lens[seq];
  const int start = split * a.split_len;
  if (start >= seq_len) return;  // uniform over the block: this split is past the context
  const int end = min(start + a.split_len, seq_len);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / G::LANES_PER_ROW;            // row group inside the warp
  const int col = (lane % G::LANES_PER_ROW) * ELEMS;  // this lane's head_dim slice
  const int row_id = warp * G::ROWS_PER_WARP + row;

  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.table_stride;

  float q[GROUP][ELEMS];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const T* src = static_cast<const T*>(a.q) + seq * a.q_stride_seq +
                   (kv_head * GROUP + g) * a.q_stride_head + col;
    widen<T, CHUNKS, ELEMS>(load_slice<T, CHUNKS>(src), q[g]);
#pragma unroll
    for (int i = 0; i < ELEMS; ++i) q[g][i] *= a.scale_log2;
  }

  Softmax<ELEMS> state[GROUP];
  for (int base = start; base < end; base += G::ROWS_PER_STEP) {
    RawSlice<CHUNKS> k_raw[UNROLL], v_raw[UNROLL];
    bool valid[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {  // issue every load before using any
      const int pos = base + u * kWarps * G::ROWS_PER_WARP + row_id;
      valid[u] = pos < end;
      if (valid[u]) {
        const int64_t page = table[pos / a.page_size];
        const int slot = pos % a.page_size;
        k_raw[u] = load_slice<T, CHUNKS>(k_cache + page * a.k_stride_block +
                                         slot * a.k_stride_slot + kv_head * a.k_stride_head + col);
        v_raw[u] = load_slice<T, CHUNKS>(v_cache + page * a.v_stride_block +
                                         slot * a.v_stride_slot + kv_head * a.v_stride_head + col);
      }
    }
    float scores[GROUP][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float k[ELEMS];
      widen<T, CHUNKS, ELEMS>(k_raw[u], k);  // garbage when !valid; its score is masked
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < ELEMS; ++i) s += q[g][i] * k[i];
        // Every lane shuffles: validity differs between row groups, never inside one.
#pragma unroll
        for (int off = G::LANES_PER_ROW / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        scores[g][u] = valid[u] ? s : -INFINITY;
      }
    }
    float p[GROUP][UNROLL];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) state[g].rescale(scores[g], p[g]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (!valid[u]) continue;
      float v[ELEMS];
      widen<T, CHUNKS, ELEMS>(v_raw[u], v);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
#pragma unroll
        for (int i = 0; i < ELEMS; ++i) state[g].acc[i] += p[g][u] * v[i];
      }
    }
  }

  // Merge the row groups of each warp (lanes LANES_PER_ROW apart share a column slice) ...
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int off = G::LANES_PER_ROW; off < 32; off *= 2) {
      float oacc[ELEMS];
#pragma unroll
      for (int i = 0; i < ELEMS; ++i) oacc[i] = __shfl_xor_sync(0xffffffffu, state[g].acc[i], off);
      const float om = __shfl_xor_sync(0xffffffffu, state[g].m, off);
      const float ol = __shfl_xor_sync(0xffffffffu, state[g].l, off);
      state[g].merge(om, ol, oacc);
    }
  }
  // ... then the warps, through shared memory, in warp 0.
  __shared__ float sm_acc[kWarps][GROUP][HEAD_DIM];
  __shared__ float sm_ml[kWarps][GROUP][2];
  if (row == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int i = 0; i < ELEMS; ++i) sm_acc[warp][g][col + i] = state[g].acc[i];
      sm_ml[warp][g][0] = state[g].m;
      sm_ml[warp][g][1] = state[g].l;
    }
  }
  __syncthreads();
  if (warp != 0 || row != 0) return;
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    for (int w = 1; w < kWarps; ++w) {
      float oacc[ELEMS];
#pragma unroll
      for (int i = 0; i < ELEMS; ++i) oacc[i] = sm_acc[w][g][col + i];
      state[g].merge(sm_ml[w][g][0], sm_ml[w][g][1], oacc);
    }
    const int head = kv_head * GROUP + g;
    if (a.num_splits == 1) {
      T* dst = static_cast<T*>(a.out) + seq * a.out_stride_seq + head * a.out_stride_head + col;
      store_slice<T, ELEMS>(dst, state[g].acc, 1.f / state[g].l);
    } else {
      const int64_t prow = (static_cast<int64_t>(seq) * a.num_heads + head) * a.num_splits + split;
#pragma unroll
      for (int i = 0; i < ELEMS; ++i) a.part_acc[prow * HEAD_DIM + col + i] = state[g].acc[i];
      a.part_ml[prow * 2] = state[g].m;
      a.part_ml[prow * 2 + 1] = state[g].l;
    }
  }
}

// Pass 2: one block per (sequence, query head), one thread per head_dim element.
template <typename T>
__global__ void paged_decode_merge_kernel(PagedDecodeArgs a) {
  const int seq = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int used = (a.seq_lens[seq] + a.split_len - 1) / a.split_len;  // splits with tokens
  const int64_t row0 = (static_cast<int64_t>(seq) * a.num_heads + head) * a.num_splits;
  float m = -INFINITY;
  for (int s = 0; s < used; ++s) m = fmaxf(m, a.part_ml[(row0 + s) * 2]);
  float l = 0.f, acc = 0.f;
  for (int s = 0; s < used; ++s) {
    const float w = exp2f(a.part_ml[(row0 + s) * 2] - m);
    l += w * a.part_ml[(row0 + s) * 2 + 1];
    acc += w * a.part_acc[(row0 + s) * a.head_dim + d];
  }
  static_cast<T*>(a.out)[seq * a.out_stride_seq + head * a.out_stride_head + d] = from_float<T>(acc / l);
}

// The instances the kernel is built for: calls `launcher.template run<T, HEAD_DIM, GROUP>()`
// for the one matching `a`, or returns `unsupported` (zllm_core/model/cuda_attention.py
// mirrors this table to route other shapes to Triton).
template <typename T, int HEAD_DIM, class Launcher, class R>
R dispatch_group(const PagedDecodeArgs& a, const Launcher& launcher, R unsupported) {
  if (a.num_heads % a.num_kv_heads != 0) return unsupported;
  switch (a.num_heads / a.num_kv_heads) {
    case 1: return launcher.template run<T, HEAD_DIM, 1>();
    case 2: return launcher.template run<T, HEAD_DIM, 2>();
    case 4: return launcher.template run<T, HEAD_DIM, 4>();
    case 8: return launcher.template run<T, HEAD_DIM, 8>();
    default: return unsupported;
  }
}

template <typename T, class Launcher, class R>
R dispatch_head_dim(const PagedDecodeArgs& a, const Launcher& launcher, R unsupported) {
  switch (a.head_dim) {
    case 64: return dispatch_group<T, 64>(a, launcher, unsupported);
    case 128: return dispatch_group<T, 128>(a, launcher, unsupported);
    default: return unsupported;
  }
}

template <class Launcher, class R>
R dispatch(const PagedDecodeArgs& a, const Launcher& launcher, R unsupported) {
  switch (a.dtype) {
    case KvDtype::kFloat32: return dispatch_head_dim<float>(a, launcher, unsupported);
    case KvDtype::kFloat16: return dispatch_head_dim<__half>(a, launcher, unsupported);
    case KvDtype::kBFloat16: return dispatch_head_dim<__nv_bfloat16>(a, launcher, unsupported);
  }
  return unsupported;
}

}  // namespace decode_kernels
}  // namespace zllm
