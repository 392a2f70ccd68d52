// Block-wide selections by radix select. On float order keys: four 8-bit histogram passes find the k-th
// largest key exactly, one more pass gathers the k values (the compact feature pass; this toolkit's CCCL
// has no cub::DeviceTopK). On fixed-point weights: detail/sampling_cut.hpp's selection, the sampling
// controls' cuts.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/kernels/radix_select.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "blockpilot/cuda/kernels/common.cuh"
#include "blockpilot/detail/sampling_cut.hpp"

namespace blockpilot::cuda_detail {

/// Shared memory of block_radix_select / block_gather_top for a block of `Threads` (>= 256) threads.
template <int Threads>
struct radix_select_storage {
  static_assert(Threads >= 256 && Threads % 32 == 0, "one thread per histogram bin, whole warps");
  static constexpr int warps = Threads / 32;
  int histogram[warps][256];  ///< one per warp: warps never contend for a bin
  typename cub::BlockScan<int, Threads>::TempStorage scan;
  std::uint32_t digit;  ///< the bin that holds the k-th largest key in the current pass
  int above;            ///< keys in higher bins
  int counters[2];      ///< gather positions: keys above the k-th, keys equal to it
};

/// The k-th largest order key among order_key(value_at(i)) for i in [0, n), and how many keys equal to
/// it belong to the top `keep` (take_equal >= 1; the top `keep` are the keep - take_equal keys above
/// kth plus take_equal of the keys equal to it). Pass `shift` histograms digit (key >> shift) & 255 of
/// the keys whose higher digits equal the digits chosen so far; an exclusive scan over the bins from
/// the top down counts the keys above each bin, and the one bin where that count first reaches `remaining`
/// is the next digit. Preconditions: 1 <= keep <= n; all threads of the block call it; Threads is a
/// multiple of 32.
template <int Threads, class ValueAt>
__device__ void block_radix_select(ValueAt value_at, int n, int keep, radix_select_storage<Threads>& st,
                                   std::uint32_t& kth, int& take_equal) {
  std::uint32_t prefix = 0;
  int remaining = keep;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const std::uint32_t high_mask = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int b = threadIdx.x; b < st.warps * 256; b += Threads) (&st.histogram[0][0])[b] = 0;
    __syncthreads();
    // The top digit of typical logits takes only a handful of values, and same-address shared atomics
    // serialise: each warp counts into its own histogram, and a warp whose counted keys all share one
    // digit (the common case in the first passes) adds once. (__match_any_sync grouping was measured
    // slower on sm_90: it cost most of a 35 µs segment pass.) The loop runs the same number of times in
    // every lane, so the warp votes are converged.
    int* histogram = st.histogram[threadIdx.x / 32];
    for (int base = 0; base < n; base += Threads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const std::uint32_t key = i < n ? order_key(value_at(i)) : 0u;
      const bool counted = i < n && (key & high_mask) == prefix;
      const unsigned counted_lanes = __ballot_sync(0xffffffffu, counted);
      if (counted_lanes == 0) continue;
      const std::uint32_t digit = (key >> shift) & 255u;
      const std::uint32_t first = __shfl_sync(0xffffffffu, digit, __ffs(counted_lanes) - 1);
      if (__all_sync(0xffffffffu, !counted || digit == first)) {
        if (threadIdx.x % 32 == static_cast<unsigned>(__ffs(counted_lanes) - 1)) atomicAdd(&histogram[first], __popc(counted_lanes));
      } else if (counted) {
        atomicAdd(&histogram[digit], 1);
      }
    }
    __syncthreads();
    // Thread t holds bin 255 - t, so the exclusive sum is the number of matching keys in higher bins.
    int count = 0;
    if (threadIdx.x < 256)
      for (int w = 0; w < st.warps; ++w) count += st.histogram[w][255 - threadIdx.x];
    int above = 0;
    cub::BlockScan<int, Threads>(st.scan).ExclusiveSum(count, above);
    if (threadIdx.x < 256 && above < remaining && remaining <= above + count) {  // exactly one thread
      st.digit = 255u - threadIdx.x;
      st.above = above;
    }
    __syncthreads();
    prefix |= st.digit << shift;
    remaining -= st.above;
    // No barrier needed here: the next pass writes digit / above only after two more barriers.
  }
  kth = prefix;
  take_equal = remaining;
}

/// Writes the top `keep` values of value_at(0..n) (as chosen by block_radix_select's kth / take_equal)
/// to out[0, keep), in no particular order. `out` may be shared or global memory; all threads call it.
template <int Threads, class ValueAt>
__device__ void block_gather_top(ValueAt value_at, int n, std::uint32_t kth, int take_equal, int keep, float* out,
                                 radix_select_storage<Threads>& st) {
  if (threadIdx.x == 0) {
    st.counters[0] = 0;
    st.counters[1] = 0;
  }
  __syncthreads();
  const int above_count = keep - take_equal;
  for (int i = threadIdx.x; i < n; i += Threads) {
    const float x = value_at(i);
    const std::uint32_t key = order_key(x);
    if (key > kth) {
      out[atomicAdd(&st.counters[0], 1)] = x;
    } else if (key == kth) {
      const int slot = atomicAdd(&st.counters[1], 1);
      if (slot < take_equal) out[above_count + slot] = x;
    }
  }
  __syncthreads();
}

/// Shared memory of block_select_weight for a block of `Threads` threads.
template <int Threads>
struct weight_select_storage {
  static_assert(detail::weight_select_bins % Threads == 0, "every thread owns as many bins");
  std::uint64_t histogram[detail::weight_select_bins];
  typename cub::BlockScan<std::uint64_t, Threads>::TempStorage scan;
  detail::weight_select_state state;
};

/// detail::weight_select_step by a block, from `state` (every thread's copy of st.state, read before the
/// barrier that ended the histogram): thread t owns `per` consecutive bins from the top (bins 2047 − t·per
/// down), an exclusive scan of the owners' sums gives the mass above each owner's bins, and the one owner
/// whose bins cross `target` writes the new st.state (digit 0 when none does, as the host step).
template <int Threads>
__device__ void block_select_step(std::uint64_t target, const detail::weight_select_state& state,
                                  weight_select_storage<Threads>& st) {
  constexpr int per = detail::weight_select_bins / Threads;
  const int top = detail::weight_select_bins - 1 - static_cast<int>(threadIdx.x) * per;
  std::uint64_t sum = 0;
#pragma unroll
  for (int e = 0; e < per; ++e) sum += st.histogram[top - e];
  std::uint64_t before = 0;
  cub::BlockScan<std::uint64_t, Threads>(st.scan).ExclusiveSum(sum, before);
  std::uint64_t above = state.above + before;
  const bool last = threadIdx.x == Threads - 1;  // owns bin 0
  if (above < target && (above + sum >= target || last)) {
    int d = top;
    for (; d > top - per + 1 && above + st.histogram[d] < target; --d) above += st.histogram[d];
    st.state = {(state.prefix << detail::weight_select_digit_bits) | static_cast<std::uint64_t>(d), above};
  }
}

/// detail/sampling_cut.hpp's selection over weight_at(0 .. n) by a block: the largest w such that the
/// elements whose weight is >= w have a mass >= target (mass = the weight when by_mass, else 1). Each
/// pass histograms the candidates' digits in shared memory, then block_select_step decides the digit. A
/// thread adds a run of equal digits at once (the high digits of most weights are 0: one bin would
/// otherwise take every atomic). All threads call it and get w.
template <int Threads, class WeightAt>
__device__ std::uint64_t block_select_weight(WeightAt weight_at, int n, std::uint64_t target, bool by_mass,
                                             weight_select_storage<Threads>& st) {
  if (threadIdx.x == 0) st.state = {};
  const auto add = [&](int digit, std::uint64_t mass) {
    if (mass != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&st.histogram[digit]), static_cast<unsigned long long>(mass));
  };
  for (int pass = 0; pass < detail::weight_select_passes; ++pass) {
    const int shift = detail::weight_select_shift(pass);
    for (int d = threadIdx.x; d < detail::weight_select_bins; d += Threads) st.histogram[d] = 0;
    __syncthreads();
    const detail::weight_select_state state = st.state;
    int run_digit = 0;
    std::uint64_t run_mass = 0;
    for (int i = threadIdx.x; i < n; i += Threads) {
      const std::uint64_t w = weight_at(i);
      if (!detail::weight_select_candidate(w, shift, state.prefix)) continue;
      const int digit = detail::weight_select_digit(w, shift);
      if (digit != run_digit) {
        add(run_digit, run_mass);
        run_digit = digit;
        run_mass = 0;
      }
      run_mass += by_mass ? w : 1;
    }
    add(run_digit, run_mass);
    __syncthreads();
    block_select_step<Threads>(target, state, st);
    __syncthreads();
  }
  const std::uint64_t w = st.state.prefix;
  __syncthreads();  // the storage may be reused at once
  return w;
}

}  // namespace blockpilot::cuda_detail
