// Device building blocks shared by the kernels: widening loads of fp32 / bf16 rows, order keys of floats,
// and the (max, first index, non-finite flags) reduction of a row.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/kernels/common.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

namespace blockpilot::cuda_detail {

/// Exact widening of a logit to fp32.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// A key whose unsigned order is the float order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN), the
/// same as the CPU pass's order_key.
__device__ __forceinline__ std::uint32_t order_key(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  return bits ^ ((0u - (bits >> 31)) | 0x80000000u);
}
/// Inverse of order_key.
__device__ __forceinline__ float from_order_key(std::uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? key ^ 0x80000000u : ~key);
}

/// Elements of T in one 16-byte load.
template <class T>
inline constexpr int elements_per_load = 16 / static_cast<int>(sizeof(T));

/// The elements of one 16-byte load, widened to float in memory order (little-endian: the low half of
/// a 32-bit word is the lower bf16 element).
template <class T>
__device__ __forceinline__ void unpack(uint4 q, float (&out)[elements_per_load<T>]) {
  const std::uint32_t w[4] = {q.x, q.y, q.z, q.w};
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = __uint_as_float(w[e]);
  } else {
    static_assert(sizeof(T) == 2, "logits are fp32 or bf16");
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      out[2 * e] = __uint_as_float(w[e] << 16);
      out[2 * e + 1] = __uint_as_float(w[e] & 0xFFFF0000u);
    }
  }
}

/// Calls f(i, x) for every index i in [begin, end) of `data` (fp32 or bf16, widened to float x), split
/// over the `Threads` threads of the block. Thread t sees its indices in increasing order. When
/// data + begin is 16-byte aligned the body uses 16-byte loads, `Unroll` of them issued before any is
/// used (memory-level parallelism); otherwise, and for the tail, one element a load.
template <int Threads, int Unroll, class T, class F>
__device__ __forceinline__ void for_each_element(const T* __restrict__ data, std::int64_t begin, std::int64_t end,
                                                 F&& f) {
  constexpr int per = elements_per_load<T>;
  const T* start = data + begin;
  const std::int64_t n = end - begin;
  std::int64_t vectors = 0;
  if (reinterpret_cast<std::uintptr_t>(start) % 16 == 0) {
    vectors = n / per;
    const uint4* vec = reinterpret_cast<const uint4*>(start);
    std::int64_t v = threadIdx.x;
    for (; v + static_cast<std::int64_t>(Unroll - 1) * Threads < vectors; v += static_cast<std::int64_t>(Unroll) * Threads) {
      uint4 q[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) q[u] = __ldg(vec + v + u * Threads);
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        float x[per];
        unpack<T>(q[u], x);
#pragma unroll
        for (int e = 0; e < per; ++e) f(begin + (v + u * Threads) * per + e, x[e]);
      }
    }
    for (; v < vectors; v += Threads) {
      float x[per];
      unpack<T>(__ldg(vec + v), x);
#pragma unroll
      for (int e = 0; e < per; ++e) f(begin + v * per + e, x[e]);
    }
  }
  for (std::int64_t i = begin + vectors * per + threadIdx.x; i < end; i += Threads) f(i, to_float(data[i]));
}

/// Flags of the (max, index) reduction.
inline constexpr int flag_nan = 1;
inline constexpr int flag_pos_inf = 2;

/// The largest value seen, its first index (ties to the smaller index; -0 and +0 tie, as `==` says) and
/// whether a NaN or +inf was seen. The identity is {-inf, INT_MAX, 0}.
struct max_entry {
  float value;
  int index;
  int flags;
};

__device__ __forceinline__ max_entry max_identity() { return {-__int_as_float(0x7f800000), INT_MAX, 0}; }

__device__ __forceinline__ void max_update(max_entry& m, int i, float x) {
  if (x > m.value || (x == m.value && i < m.index)) {
    m.value = x;
    m.index = i;
  }
  m.flags |= (x != x ? flag_nan : 0) | (x == __int_as_float(0x7f800000) ? flag_pos_inf : 0);
}

struct max_combine {
  __device__ __forceinline__ max_entry operator()(const max_entry& a, const max_entry& b) const {
    const bool take_b = b.value > a.value || (b.value == a.value && b.index < a.index);
    return {take_b ? b.value : a.value, take_b ? b.index : a.index, a.flags | b.flags};
  }
};

/// Whether a row reduced to `m` is usable: no NaN, no +inf, and at least one finite value (the CPU's
/// checked_max; -inf entries are masked tokens).
__device__ __forceinline__ bool row_is_finite(const max_entry& m) {
  return m.flags == 0 && m.value > -__int_as_float(0x7f800000);
}

}  // namespace blockpilot::cuda_detail
