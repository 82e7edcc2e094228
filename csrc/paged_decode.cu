// Paged-attention decode on CUDA: one query token per sequence over a block-table KV cache
// shaped [num_blocks, block_size, num_kv_heads, head_dim].
//
// One thread block per (sequence, KV head, context split).  Inside a warp, LANES_PER_ROW
// lanes cover one cached token's head_dim with 16-byte loads, so a warp reads
// ROWS_PER_WARP tokens per step; every lane keeps the query slices of the whole GQA group,
// so one K/V load serves all query heads of its KV head.  Each row group runs its own fp32
// online softmax (base 2); row groups merge by warp shuffles, warps through shared memory.
// With several splits, pass 1 writes unnormalised partials and pass 2 merges them; the
// partial layout matches the Triton kernel's (row = (seq * num_heads + head) * splits + split).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "paged_decode.h"

namespace zllm {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;  // tokens each row group has in flight per step: hides DRAM latency

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// One 16-byte load; kept raw until used so in-flight tokens cost 4 registers, not VEC.
__device__ __forceinline__ uint4 load16(const void* src) {
  return __ldg(reinterpret_cast<const uint4*>(src));
}

template <typename T, int VEC>
__device__ __forceinline__ void widen(uint4 raw, float (&dst)[VEC]) {
  static_assert(sizeof(T) * VEC == 16, "a lane moves exactly 16 bytes");
  union { uint4 raw; T elems[VEC]; } u;
  u.raw = raw;
#pragma unroll
  for (int i = 0; i < VEC; ++i) dst[i] = to_float(u.elems[i]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* dst, const float (&src)[VEC], float scale) {
  union { uint4 raw; T elems[VEC]; } u;
#pragma unroll
  for (int i = 0; i < VEC; ++i) u.elems[i] = from_float<T>(src[i] * scale);
  *reinterpret_cast<uint4*>(dst) = u.raw;
}

// Running softmax state of one query head over the tokens one row group has seen.
template <int VEC>
struct Softmax {
  float m = -INFINITY;  // max score so far (base 2); -inf until the first token
  float l = 0.f;        // sum of exp2(score - m)
  float acc[VEC] = {};  // this lane's slice of sum(exp2(score - m) * v)

  __device__ __forceinline__ void add(float s, const float (&v)[VEC]) {
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new);  // 0 on the first token (m = -inf)
    const float p = exp2f(s - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = acc[i] * alpha + p * v[i];
    m = m_new;
  }

  // Fold another state in; either side may be empty (m = -inf).
  __device__ __forceinline__ void merge(float om, float ol, const float (&oacc)[VEC]) {
    const float m_new = fmaxf(m, om);
    if (m_new == -INFINITY) return;
    const float a = exp2f(m - m_new), b = exp2f(om - m_new);
    l = l * a + ol * b;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = acc[i] * a + oacc[i] * b;
    m = m_new;
  }
};

template <typename T, int HEAD_DIM, int GROUP>
__global__ void __launch_bounds__(kWarps * 32)
paged_decode_split_kernel(PagedDecodeArgs a) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int LANES_PER_ROW = HEAD_DIM / VEC;
  constexpr int ROWS_PER_WARP = 32 / LANES_PER_ROW;
  constexpr int ROWS_PER_STEP = kWarps * ROWS_PER_WARP * kUnroll;
  static_assert(LANES_PER_ROW <= 32 && 32 % LANES_PER_ROW == 0, "a token row must fit a warp");

  const int seq = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int seq_len = a.seq_lens[seq];
  const int start = split * a.split_len;
  if (start >= seq_len) return;  // uniform over the block: this split is past the context
  const int end = min(start + a.split_len, seq_len);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / LANES_PER_ROW;          // row group inside the warp
  const int col = (lane % LANES_PER_ROW) * VEC;  // this lane's head_dim slice
  const int row_id = warp * ROWS_PER_WARP + row;

  const T* q = static_cast<const T*>(a.q);
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.table_stride;

  float q_frag[GROUP][VEC];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    widen<T, VEC>(load16(q + seq * a.q_stride_seq + (kv_head * GROUP + g) * a.q_stride_head + col), q_frag[g]);
#pragma unroll
    for (int i = 0; i < VEC; ++i) q_frag[g][i] *= a.scale_log2;
  }

  Softmax<VEC> state[GROUP];
  for (int base = start; base < end; base += ROWS_PER_STEP) {
    uint4 k_raw[kUnroll], v_raw[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue every load before using any
      const int pos = base + u * kWarps * ROWS_PER_WARP + row_id;
      valid[u] = pos < end;
      if (valid[u]) {
        const int64_t page = table[pos / a.page_size];
        const int slot = pos % a.page_size;
        k_raw[u] = load16(k_cache + page * a.k_stride_block + slot * a.k_stride_slot +
                          kv_head * a.k_stride_head + col);
        v_raw[u] = load16(v_cache + page * a.v_stride_block + slot * a.v_stride_slot +
                          kv_head * a.v_stride_head + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[VEC], v[VEC];
      widen<T, VEC>(valid[u] ? k_raw[u] : make_uint4(0, 0, 0, 0), k);
      widen<T, VEC>(valid[u] ? v_raw[u] : make_uint4(0, 0, 0, 0), v);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) s += q_frag[g][i] * k[i];
        // Every lane shuffles (validity differs between row groups, not inside one).
#pragma unroll
        for (int off = LANES_PER_ROW / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (valid[u]) state[g].add(s, v);
      }
    }
  }

  // Merge the row groups of each warp, then the warps.
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int off = LANES_PER_ROW; off < 32; off *= 2) {
      float oacc[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) oacc[i] = __shfl_xor_sync(0xffffffffu, state[g].acc[i], off);
      const float om = __shfl_xor_sync(0xffffffffu, state[g].m, off);
      const float ol = __shfl_xor_sync(0xffffffffu, state[g].l, off);
      state[g].merge(om, ol, oacc);
    }
  }
  __shared__ float sm_acc[kWarps][GROUP][HEAD_DIM];
  __shared__ float sm_ml[kWarps][GROUP][2];
  if (row == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) sm_acc[warp][g][col + i] = state[g].acc[i];
      sm_ml[warp][g][0] = state[g].m;
      sm_ml[warp][g][1] = state[g].l;
    }
  }
  __syncthreads();
  if (warp != 0 || row != 0) return;
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    for (int w = 1; w < kWarps; ++w) {
      float oacc[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) oacc[i] = sm_acc[w][g][col + i];
      state[g].merge(sm_ml[w][g][0], sm_ml[w][g][1], oacc);
    }
    const int head = kv_head * GROUP + g;
    if (a.num_splits == 1) {
      store_vec<T, VEC>(static_cast<T*>(a.out) + seq * a.out_stride_seq + head * a.out_stride_head + col,
                        state[g].acc, 1.f / state[g].l);
    } else {
      const int64_t prow = (static_cast<int64_t>(seq) * a.num_heads + head) * a.num_splits + split;
#pragma unroll
      for (int i = 0; i < VEC; ++i) a.part_acc[prow * HEAD_DIM + col + i] = state[g].acc[i];
      a.part_ml[prow * 2] = state[g].m;
      a.part_ml[prow * 2 + 1] = state[g].l;
    }
  }
}

// Pass 2: one block per (sequence, query head), one thread per head_dim element.
template <typename T>
__global__ void paged_decode_merge_kernel(PagedDecodeArgs a) {
  const int seq = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int used = (a.seq_lens[seq] + a.split_len - 1) / a.split_len;
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

template <typename T, int HEAD_DIM, int GROUP>
cudaError_t launch(const PagedDecodeArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch, a.num_kv_heads, a.num_splits);
  paged_decode_split_kernel<T, HEAD_DIM, GROUP><<<grid, kWarps * 32, 0, stream>>>(a);
  if (a.num_splits > 1) {
    paged_decode_merge_kernel<T><<<dim3(a.batch, a.num_heads), HEAD_DIM, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename T, int HEAD_DIM>
cudaError_t dispatch_group(const PagedDecodeArgs& a, cudaStream_t stream) {
  switch (a.num_heads / a.num_kv_heads) {
    case 1: return launch<T, HEAD_DIM, 1>(a, stream);
    case 2: return launch<T, HEAD_DIM, 2>(a, stream);
    case 4: return launch<T, HEAD_DIM, 4>(a, stream);
    case 8: return launch<T, HEAD_DIM, 8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t dispatch_head_dim(const PagedDecodeArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return dispatch_group<T, 64>(a, stream);
    case 128: return dispatch_group<T, 128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

const char* paged_decode_cuda(const PagedDecodeArgs& a, std::uintptr_t stream_handle) {
  const auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  cudaError_t err = cudaErrorInvalidValue;
  switch (a.dtype) {
    case KvDtype::kFloat32: err = dispatch_head_dim<float>(a, stream); break;
    case KvDtype::kFloat16: err = dispatch_head_dim<__half>(a, stream); break;
    case KvDtype::kBFloat16: err = dispatch_head_dim<__nv_bfloat16>(a, stream); break;
  }
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace zllm
