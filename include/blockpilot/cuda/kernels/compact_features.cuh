// The compact feature pass over a batch of logit rows in one launch, optionally followed by a compact
// predictor MLP: the same features, in the same order, as cpu_detail::features::compact_pass.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/kernels/compact_features.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>

#include <cstdint>
#include <type_traits>

#include "blockpilot/cuda/kernels/common.cuh"
#include "blockpilot/cuda/kernels/mlp.cuh"
#include "blockpilot/cuda/kernels/radix_select.cuh"
#include "blockpilot/detail/compact_statistics.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot::cuda_detail {

/// Statistics after the top-k probabilities (compact_statistic in features/compact.hpp).
inline constexpr int feature_statistics = detail::compact_statistic_count;
/// Largest number of values a row's selection keeps: max(top_k, 2) <= 1024.
inline constexpr int feature_max_keep = 1024;

/// One segment's summary: its largest logit, non-finite flags, and the exp moments of d = (x − max) / T
/// over its finite entries: z = sum e^d, s = sum e^d d, q = sum e^d d^2.
struct feature_segment_partial {
  float max;
  int flags;
  double z, s, q;
};

/// A row's max logit and log sum e^((x − max) / T), kept for the optional probabilities pass.
struct feature_row_stats {
  float max;
  double log_z;
};

/// No predictor behind the feature pass.
struct no_fused_predictor {};

/// A compact MLP run by the merging block of each row, on the features it just computed.
template <class W>
struct fused_predictor {
  mlp_device_view<W> network;
  int* classes;                      ///< device `[batch]`: argmax class, or -1 when the features are unusable
  float* class_logits;               ///< device `[batch][classes]` (row stride below), or null
  std::int64_t class_logits_stride;
};

template <class Logit, class Predictor>
struct feature_params {
  const Logit* logits;  ///< device `[batch][row_stride]`
  std::int64_t row_stride;
  int vocab;
  int top_k;
  int keep;  ///< max(top_k, 2): the margin needs the top two
  float inv_t;
  int segments;
  float* features;  ///< device `[batch][features_stride]`
  std::int64_t features_stride;
  status* statuses;  ///< device `[batch]`
  unsigned* tickets;  ///< device `[batch]`, zero at launch
  feature_segment_partial* partials;  ///< device `[batch][segments]`
  float* candidates;  ///< device `[batch][segments][keep]`
  feature_row_stats* row_stats;  ///< device `[batch]`
  Predictor predictor;
};

struct feature_moments {
  double z, s, q;
};
struct feature_moments_sum {
  __device__ __forceinline__ feature_moments operator()(const feature_moments& a, const feature_moments& b) const {
    return {a.z + b.z, a.s + b.s, a.q + b.q};
  }
};
struct feature_tail {
  double mass;
  int near_max;
  int found;
};
struct feature_tail_sum {
  __device__ __forceinline__ feature_tail operator()(const feature_tail& a, const feature_tail& b) const {
    return {a.mass + b.mass, a.near_max + b.near_max, a.found + b.found};
  }
};

/// Grid (segments, batch), `Threads` threads a block. Block (s, r) handles logits [s · Segment, (s + 1) ·
/// Segment) of row r:
///  1. stages them in shared memory (16-byte loads when aligned) while reducing their max and the
///     NaN / +inf flags;
///  2. sums the exp moments relative to that max (expf, float per thread, double across threads);
///  3. selects its top `keep` values (radix select, or all of them padded with -inf) into the candidates;
///  4. publishes its partial, and takes a ticket; the block that takes the last ticket of the row merges:
///     moments rebased to the row max (z' = c z, s' = c (s + δ z), q' = c (q + 2 δ s + δ² z), c = e^δ,
///     δ = (segment max − row max) / T, in double), the top `keep` of all candidates (again radix
///     select, in shared memory when they fit), a block radix sort (descending) of those, then the
///     features exactly as the CPU pass defines them, and the fused predictor if there is one.
/// Rows that hold NaN or +inf, or no finite value, get status non_finite_logits and NaN features.
template <int Threads, int Segment, int Capacity, class Logit, class Predictor>
__global__ void __launch_bounds__(Threads) compact_feature_kernel(const feature_params<Logit, Predictor> p) {
  static_assert(Capacity >= Segment && Capacity * sizeof(float) >= Threads * sizeof(feature_segment_partial));
  static_assert(feature_max_keep % Threads == 0);
  constexpr int sort_items = feature_max_keep / Threads;
  constexpr float inf = __builtin_huge_valf();
  using reduce_max = cub::BlockReduce<max_entry, Threads>;
  using reduce_moments = cub::BlockReduce<feature_moments, Threads>;
  using reduce_tail = cub::BlockReduce<feature_tail, Threads>;
  using block_sort = cub::BlockRadixSort<std::uint32_t, Threads, sort_items>;

  // `big` holds the segment, then the segment partials and the merge's candidates, then the features and
  // the predictor's activations; `top` the row's selected values.
  __shared__ union {
    float values[Capacity];
    feature_segment_partial partials[Capacity * sizeof(float) / sizeof(feature_segment_partial)];
  } big;
  __shared__ float top[feature_max_keep];
  __shared__ union {
    typename reduce_max::TempStorage max;
    typename reduce_moments::TempStorage moments;
    typename reduce_tail::TempStorage tail;
    typename block_sort::TempStorage sort;
    radix_select_storage<Threads> select;
  } temp;
  __shared__ max_entry segment_max;
  __shared__ unsigned ticket;
  __shared__ struct {
    bool ok;
    float max;
    double z, s, q;
  } row;

  const int r = blockIdx.y, seg = blockIdx.x;
  const Logit* logits = p.logits + static_cast<std::int64_t>(r) * p.row_stride;
  const int begin = seg * Segment;
  const int n = p.vocab - begin < Segment ? p.vocab - begin : Segment;

  // 1. Stage the segment and reduce its max.
  max_entry m = max_identity();
  for_each_element<Threads, 2>(logits, begin, begin + n, [&](std::int64_t i, float x) {
    big.values[i - begin] = x;
    max_update(m, static_cast<int>(i), x);
  });
  m = reduce_max(temp.max).Reduce(m, max_combine());
  if (threadIdx.x == 0) segment_max = m;
  __syncthreads();
  const float xm = segment_max.value;

  // 2. Exp moments relative to the segment max (e = 0 for masked tokens, NaN never counts).
  float z = 0.0f, s = 0.0f, q = 0.0f;
  if (xm > -inf && xm < inf) {
    for (int i = threadIdx.x; i < n; i += Threads) {
      const float d = (big.values[i] - xm) * p.inv_t;
      const float e = expf(d);
      if (e > 0.0f) {
        z += e;
        s += e * d;
        q += e * d * d;
      }
    }
  }
  const feature_moments moments = reduce_moments(temp.moments).Reduce(feature_moments{z, s, q}, feature_moments_sum());
  __syncthreads();

  // 3. The segment's top `keep` values.
  float* candidates = p.candidates + (static_cast<std::int64_t>(r) * p.segments + seg) * p.keep;
  if (n <= p.keep) {
    for (int i = threadIdx.x; i < p.keep; i += Threads) candidates[i] = i < n ? big.values[i] : -inf;
  } else {
    const auto at = [&](int i) { return big.values[i]; };
    std::uint32_t kth;
    int take_equal;
    block_radix_select<Threads>(at, n, p.keep, temp.select, kth, take_equal);
    block_gather_top<Threads>(at, n, kth, take_equal, p.keep, candidates, temp.select);
  }

  // 4. Publish; the last block of the row goes on to merge.
  if (threadIdx.x == 0)
    p.partials[static_cast<std::int64_t>(r) * p.segments + seg] = {xm, segment_max.flags, moments.z, moments.s, moments.q};
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(p.tickets + r, 1u);
  __syncthreads();
  if (ticket != static_cast<unsigned>(p.segments - 1)) return;
  __threadfence();

  // Merge the moments (L2 reads: other blocks wrote them).
  const feature_segment_partial* partials = p.partials + static_cast<std::int64_t>(r) * p.segments;
  for (int t = threadIdx.x; t < p.segments; t += Threads) {
    const feature_segment_partial* src = partials + t;
    big.partials[t] = {__ldcg(&src->max), __ldcg(&src->flags), __ldcg(&src->z), __ldcg(&src->s), __ldcg(&src->q)};
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float row_max = -inf;
    int flags = 0;
    for (int t = 0; t < p.segments; ++t) {
      row_max = big.partials[t].max > row_max ? big.partials[t].max : row_max;
      flags |= big.partials[t].flags;
    }
    double rz = 0.0, rs = 0.0, rq = 0.0;
    const bool ok = flags == 0 && row_max > -inf;
    if (ok) {
      for (int t = 0; t < p.segments; ++t) {
        const feature_segment_partial& v = big.partials[t];
        if (!(v.max > -inf)) continue;  // a fully masked segment adds nothing
        const double delta = (static_cast<double>(v.max) - static_cast<double>(row_max)) * static_cast<double>(p.inv_t);
        const double c = exp(delta);
        rz += c * v.z;
        rs += c * (v.s + delta * v.z);
        rq += c * (v.q + 2.0 * delta * v.s + delta * delta * v.z);
      }
    }
    row.ok = ok;
    row.max = row_max;
    row.z = rz;
    row.s = rs;
    row.q = rq;
  }
  __syncthreads();

  const int feature_count = p.top_k + feature_statistics;
  float* out = p.features + static_cast<std::int64_t>(r) * p.features_stride;
  const auto fail = [&] {
    for (int i = threadIdx.x; i < feature_count; i += Threads) out[i] = __int_as_float(0x7fc00000);
    if constexpr (!std::is_same_v<Predictor, no_fused_predictor>) {
      const int classes = p.predictor.network.shape.classes;
      if (p.predictor.class_logits != nullptr)
        for (int i = threadIdx.x; i < classes; i += Threads)
          p.predictor.class_logits[static_cast<std::int64_t>(r) * p.predictor.class_logits_stride + i] = __int_as_float(0x7fc00000);
      if (threadIdx.x == 0) p.predictor.classes[r] = -1;
    }
    if (threadIdx.x == 0) p.statuses[r] = status::non_finite_logits;
  };
  if (!row.ok) {
    fail();
    return;
  }

  // Merge the candidates into `top`.
  const float* all = p.candidates + static_cast<std::int64_t>(r) * p.segments * p.keep;
  const int n_candidates = p.segments * p.keep;
  if (p.segments == 1) {
    for (int i = threadIdx.x; i < p.keep; i += Threads) top[i] = __ldcg(all + i);
    __syncthreads();
  } else if (n_candidates <= Capacity) {
    for (int i = threadIdx.x; i < n_candidates; i += Threads) big.values[i] = __ldcg(all + i);
    __syncthreads();
    const auto at = [&](int i) { return big.values[i]; };
    std::uint32_t kth;
    int take_equal;
    block_radix_select<Threads>(at, n_candidates, p.keep, temp.select, kth, take_equal);
    block_gather_top<Threads>(at, n_candidates, kth, take_equal, p.keep, top, temp.select);
  } else {
    const auto at = [&](int i) { return __ldcg(all + i); };
    std::uint32_t kth;
    int take_equal;
    block_radix_select<Threads>(at, n_candidates, p.keep, temp.select, kth, take_equal);
    block_gather_top<Threads>(at, n_candidates, kth, take_equal, p.keep, top, temp.select);
  }

  // Sort them descending (order keys, so -0 sorts below +0 as on the CPU; padding key 0 sorts last).
  std::uint32_t keys[sort_items];
#pragma unroll
  for (int e = 0; e < sort_items; ++e) {
    const int i = threadIdx.x * sort_items + e;
    keys[e] = i < p.keep ? order_key(top[i]) : 0u;
  }
  __syncthreads();
  block_sort(temp.sort).SortDescending(keys);
#pragma unroll
  for (int e = 0; e < sort_items; ++e) {
    const int i = threadIdx.x * sort_items + e;  // blocked arrangement: thread t holds ranks t·items …
    if (i < p.keep) top[i] = from_order_key(keys[e]);
  }
  __syncthreads();

  // The features, staged in big.values (the CPU pass's formulas, in double).
  const double inv_t = p.inv_t, row_max = row.max, rz = row.z;
  const double top0 = top[0];
  feature_tail tail{0.0, 0, 0};
  for (int i = threadIdx.x; i < p.keep; i += Threads) {
    const float v = top[i];
    const bool finite = v > -inf;  // sorted: the finite values come first
    tail.found += finite;
    if (i < p.top_k) {
      const double prob = finite ? exp((static_cast<double>(v) - row_max) * inv_t) / rz : 0.0;
      big.values[i] = static_cast<float>(prob);
      tail.mass += prob;
      tail.near_max += finite && (static_cast<double>(v) - top0) * inv_t >= -2.0;
    }
  }
  tail = reduce_tail(temp.tail).Reduce(tail, feature_tail_sum());
  if (threadIdx.x == 0) {
    const double z_ = rz, s_ = row.s, q_ = row.q;
    const double log_z = log(z_);
    double stats[feature_statistics];
    detail::compact_statistics(
        detail::compact_row_moments{
            .log_z = log_z,
            .mean_d = s_ / z_,
            .mean_d2 = q_ / z_,
            .log_sum_exp = row_max * inv_t + log_z,
            .max_y = top0 * inv_t,
            .margin = tail.found >= 2 ? (top0 - static_cast<double>(top[1])) * inv_t : 88.0,
            .top_k_mass = tail.mass,
            .near_max = static_cast<double>(tail.near_max),
            .vocab = static_cast<double>(p.vocab)},
        stats);
    bool finite = isfinite(z_) && isfinite(s_) && isfinite(q_);
    for (int i = 0; i < feature_statistics; ++i) {
      big.values[p.top_k + i] = static_cast<float>(stats[i]);
      finite = finite && isfinite(stats[i]);
    }
    row.ok = finite;
    p.row_stats[r] = {row.max, log_z};
  }
  __syncthreads();
  if (!row.ok) {
    fail();
    return;
  }
  for (int i = threadIdx.x; i < feature_count; i += Threads) out[i] = big.values[i];
  if (threadIdx.x == 0) p.statuses[r] = status::success;

  if constexpr (!std::is_same_v<Predictor, no_fused_predictor>) {
    // The policy falls back (class -1) when a feature is not finite, as blockpilot_policy does.
    bool bad = false;
    for (int i = threadIdx.x; i < feature_count; i += Threads) bad = bad || !isfinite(big.values[i]);
    if (__syncthreads_or(bad)) {
      if (p.predictor.class_logits != nullptr)
        for (int i = threadIdx.x; i < p.predictor.network.shape.classes; i += Threads)
          p.predictor.class_logits[static_cast<std::int64_t>(r) * p.predictor.class_logits_stride + i] = __int_as_float(0x7fc00000);
      if (threadIdx.x == 0) p.predictor.classes[r] = -1;
      return;
    }
    const mlp_device_shape& shape = p.predictor.network.shape;
    float* x = big.values;
    float* act0 = x + (feature_count + 3) / 4 * 4;
    float* act1 = act0 + shape.max_hidden();
    float* class_logits = act1 + shape.max_hidden();
    block_mlp_forward<Threads>(p.predictor.network, x, act0, act1, class_logits);
    if (p.predictor.class_logits != nullptr)
      for (int i = threadIdx.x; i < shape.classes; i += Threads)
        p.predictor.class_logits[static_cast<std::int64_t>(r) * p.predictor.class_logits_stride + i] = class_logits[i];
    if (threadIdx.x == 0) p.predictor.classes[r] = argmax_of(class_logits, shape.classes);
  }
}

/// The optional second launch of the feature pass: probs[r][i] = e^((x_i − max) / T − log z) for the rows
/// whose status is success (NaN for the others), full_row_features' probabilities transform. Grid
/// (ceil(V / Chunk), batch): block (c, r) writes elements [c · Chunk, (c + 1) · Chunk) of row r.
template <int Threads, int Chunk, class Logit>
__global__ void __launch_bounds__(Threads)
    feature_probabilities_kernel(const Logit* __restrict__ logits, std::int64_t row_stride, int vocab, float inv_t,
                                 const feature_row_stats* __restrict__ row_stats, const status* __restrict__ statuses,
                                 float* __restrict__ probs, std::int64_t probs_stride) {
  const int r = blockIdx.y;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * Chunk;
  const std::int64_t end = begin + Chunk < vocab ? begin + Chunk : vocab;
  float* out = probs + r * probs_stride;
  if (statuses[r] != status::success) {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += Threads) out[i] = __int_as_float(0x7fc00000);
    return;
  }
  const float max = row_stats[r].max;
  const auto log_z = static_cast<float>(row_stats[r].log_z);
  for_each_element<Threads, 2>(logits + r * row_stride, begin, end,
                               [&](std::int64_t i, float x) { out[i] = expf((x - max) * inv_t - log_z); });
}

/// Whether a fused predictor's features and activations fit the merge's shared memory.
template <int Capacity>
[[nodiscard]] constexpr bool fused_predictor_fits(int feature_count, const mlp_device_shape& shape) {
  return static_cast<std::int64_t>((feature_count + 3) / 4 * 4) + 2 * static_cast<std::int64_t>(shape.max_hidden()) +
             shape.classes <= Capacity;
}

}  // namespace blockpilot::cuda_detail
