// The compact feature pass over a batch of logit rows in one launch, optionally followed by a compact
// predictor MLP: the same features, in the same order, as cpu_detail::row_kernels::compact_pass.
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

/// One block of the compact feature pass, in CUB's agent style: the block's shared storage and the
/// named steps it runs, each called by every thread of the block. Block (s, r) of the grid (segments,
/// batch) handles logits [s · Segment, (s + 1) · Segment) of row r; the block that finishes its row last
/// also merges the row (run() lists the steps in order).
template <int Threads, int Segment, int Capacity, class Logit, class Predictor>
struct compact_feature_agent {
  static_assert(Capacity >= Segment && Capacity * sizeof(float) >= Threads * sizeof(feature_segment_partial));
  static_assert(feature_max_keep % Threads == 0);
  static constexpr int sort_items = feature_max_keep / Threads;
  static constexpr bool fused = !std::is_same_v<Predictor, no_fused_predictor>;
  static constexpr float inf = __builtin_huge_valf();
  using params = feature_params<Logit, Predictor>;
  using reduce_max = cub::BlockReduce<max_entry, Threads>;
  using reduce_moments = cub::BlockReduce<feature_moments, Threads>;
  using reduce_tail = cub::BlockReduce<feature_tail, Threads>;
  using block_sort = cub::BlockRadixSort<std::uint32_t, Threads, sort_items>;

  /// The row after the merge of its segments: usable (no NaN / +inf, some finite value), its max and
  /// its exp moments relative to that max.
  struct row_summary {
    bool ok;
    float max;
    double z, s, q;
  };

  /// `big` holds the segment, then the segment partials and the merge's candidates, then the features
  /// and the predictor's activations; `top` the row's selected values.
  struct storage {
    union {
      float values[Capacity];
      feature_segment_partial partials[Capacity * sizeof(float) / sizeof(feature_segment_partial)];
    } big;
    float top[feature_max_keep];
    union {
      typename reduce_max::TempStorage max;
      typename reduce_moments::TempStorage moments;
      typename reduce_tail::TempStorage tail;
      typename block_sort::TempStorage sort;
      radix_select_storage<Threads> select;
    } temp;
    max_entry segment_max;
    unsigned ticket;
    row_summary row;
  };

  const params& p;
  storage& st;
  const int r = static_cast<int>(blockIdx.y), seg = static_cast<int>(blockIdx.x);

  __device__ compact_feature_agent(const params& p_, storage& st_) : p(p_), st(st_) {}

  __device__ void run() {
    const int n = stage_segment();
    const feature_moments moments = segment_moments(n);
    select_segment_top(n);
    if (!publish_and_take_ticket(moments)) return;
    merge_moments();
    if (!st.row.ok) return fail_row();
    merge_candidates();
    sort_top();
    if (!compute_features()) return fail_row();
    write_features();
    if constexpr (fused) run_predictor();
  }

  /// 1. Stages the segment in shared memory (16-byte loads when aligned) while reducing its max and
  /// the NaN / +inf flags into st.segment_max; returns the segment's length.
  __device__ int stage_segment() {
    const Logit* logits = p.logits + static_cast<std::int64_t>(r) * p.row_stride;
    const int begin = seg * Segment;
    const int n = p.vocab - begin < Segment ? p.vocab - begin : Segment;
    max_entry m = max_identity();
    for_each_element<Threads, 2>(logits, begin, begin + n, [&](std::int64_t i, float x) {
      st.big.values[i - begin] = x;
      max_update(m, static_cast<int>(i), x);
    });
    m = reduce_max(st.temp.max).Reduce(m, max_combine());
    if (threadIdx.x == 0) st.segment_max = m;
    __syncthreads();
    return n;
  }

  /// 2. The exp moments relative to the segment max (expf, float per thread, double across threads; e = 0
  /// for masked tokens, NaN never counts).
  __device__ feature_moments segment_moments(int n) {
    const float xm = st.segment_max.value;
    float z = 0.0f, s = 0.0f, q = 0.0f;
    if (xm > -inf && xm < inf) {
      for (int i = threadIdx.x; i < n; i += Threads) {
        const float d = (st.big.values[i] - xm) * p.inv_t;
        const float e = expf(d);
        if (e > 0.0f) {
          z += e;
          s += e * d;
          q += e * d * d;
        }
      }
    }
    const feature_moments moments = reduce_moments(st.temp.moments).Reduce(feature_moments{z, s, q}, feature_moments_sum());
    __syncthreads();
    return moments;
  }

  /// 3. The segment's top `keep` values into its candidates (radix select, or all of them padded with -inf).
  __device__ void select_segment_top(int n) {
    float* candidates = p.candidates + (static_cast<std::int64_t>(r) * p.segments + seg) * p.keep;
    if (n <= p.keep) {
      for (int i = threadIdx.x; i < p.keep; i += Threads) candidates[i] = i < n ? st.big.values[i] : -inf;
    } else {
      select_top([&](int i) { return st.big.values[i]; }, n, candidates);
    }
  }

  /// 4. Publishes the segment's partial and takes a ticket: true for the block that takes the row's last.
  __device__ bool publish_and_take_ticket(const feature_moments& moments) {
    if (threadIdx.x == 0)
      p.partials[static_cast<std::int64_t>(r) * p.segments + seg] = {st.segment_max.value, st.segment_max.flags, moments.z,
                                                                     moments.s, moments.q};
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) st.ticket = atomicAdd(p.tickets + r, 1u);
    __syncthreads();
    if (st.ticket != static_cast<unsigned>(p.segments - 1)) return false;
    __threadfence();
    return true;
  }

  /// 5. The row's moments into st.row (L2 reads: other blocks wrote the partials), rebased to the row max:
  /// z' = c z, s' = c (s + δ z), q' = c (q + 2 δ s + δ² z), c = e^δ, δ = (segment max − row max) / T, in double.
  __device__ void merge_moments() {
    const feature_segment_partial* partials = p.partials + static_cast<std::int64_t>(r) * p.segments;
    for (int t = threadIdx.x; t < p.segments; t += Threads) {
      const feature_segment_partial* src = partials + t;
      st.big.partials[t] = {__ldcg(&src->max), __ldcg(&src->flags), __ldcg(&src->z), __ldcg(&src->s), __ldcg(&src->q)};
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float row_max = -inf;
      int flags = 0;
      for (int t = 0; t < p.segments; ++t) {
        row_max = st.big.partials[t].max > row_max ? st.big.partials[t].max : row_max;
        flags |= st.big.partials[t].flags;
      }
      double rz = 0.0, rs = 0.0, rq = 0.0;
      const bool ok = flags == 0 && row_max > -inf;
      if (ok) {
        for (int t = 0; t < p.segments; ++t) {
          const feature_segment_partial& v = st.big.partials[t];
          if (!(v.max > -inf)) continue;  // a fully masked segment adds nothing
          const double delta = (static_cast<double>(v.max) - static_cast<double>(row_max)) * static_cast<double>(p.inv_t);
          const double c = exp(delta);
          rz += c * v.z;
          rs += c * (v.s + delta * v.z);
          rq += c * (v.q + 2.0 * delta * v.s + delta * delta * v.z);
        }
      }
      st.row = {ok, row_max, rz, rs, rq};
    }
    __syncthreads();
  }

  /// 6. The top `keep` of all segments' candidates into st.top (radix select again, staged in shared
  /// memory when they fit).
  __device__ void merge_candidates() {
    const float* all = p.candidates + static_cast<std::int64_t>(r) * p.segments * p.keep;
    const int n_candidates = p.segments * p.keep;
    if (p.segments == 1) {
      for (int i = threadIdx.x; i < p.keep; i += Threads) st.top[i] = __ldcg(all + i);
      __syncthreads();
    } else if (n_candidates <= Capacity) {
      for (int i = threadIdx.x; i < n_candidates; i += Threads) st.big.values[i] = __ldcg(all + i);
      __syncthreads();
      select_top([&](int i) { return st.big.values[i]; }, n_candidates, st.top);
    } else {
      select_top([&](int i) { return __ldcg(all + i); }, n_candidates, st.top);
    }
  }

  /// 7. Sorts st.top descending by a block radix sort of order keys (so -0 sorts below +0 as on the CPU;
  /// the padding key 0 sorts last).
  __device__ void sort_top() {
    std::uint32_t keys[sort_items];
#pragma unroll
    for (int e = 0; e < sort_items; ++e) {
      const int i = threadIdx.x * sort_items + e;
      keys[e] = i < p.keep ? order_key(st.top[i]) : 0u;
    }
    __syncthreads();
    block_sort(st.temp.sort).SortDescending(keys);
#pragma unroll
    for (int e = 0; e < sort_items; ++e) {
      const int i = threadIdx.x * sort_items + e;  // blocked arrangement: thread t holds ranks t·items …
      if (i < p.keep) st.top[i] = from_order_key(keys[e]);
    }
    __syncthreads();
  }

  /// 8. The features, staged in st.big.values, with the CPU pass's formulas in double; also the row's max
  /// and log z for the probabilities pass. False when a statistic is not finite.
  __device__ bool compute_features() {
    const double inv_t = p.inv_t, row_max = st.row.max, rz = st.row.z;
    const double top0 = st.top[0];
    feature_tail tail{0.0, 0, 0};
    for (int i = threadIdx.x; i < p.keep; i += Threads) {
      const float v = st.top[i];
      const bool finite = v > -inf;  // sorted: the finite values come first
      tail.found += finite;
      if (i < p.top_k) {
        const double prob = finite ? exp((static_cast<double>(v) - row_max) * inv_t) / rz : 0.0;
        st.big.values[i] = static_cast<float>(prob);
        tail.mass += prob;
        tail.near_max += finite && (static_cast<double>(v) - top0) * inv_t >= -2.0;
      }
    }
    tail = reduce_tail(st.temp.tail).Reduce(tail, feature_tail_sum());
    if (threadIdx.x == 0) {
      const double s_ = st.row.s, q_ = st.row.q;
      const double log_z = log(rz);
      float stats[feature_statistics];
      const bool stats_finite = detail::compact_statistics(
          detail::compact_row_moments{
              .log_z = log_z,
              .mean_d = s_ / rz,
              .mean_d2 = q_ / rz,
              .log_sum_exp = row_max * inv_t + log_z,
              .max_y = top0 * inv_t,
              .margin = tail.found >= 2 ? (top0 - static_cast<double>(st.top[1])) * inv_t : 88.0,
              .top_k_mass = tail.mass,
              .near_max = static_cast<double>(tail.near_max),
              .vocab = static_cast<double>(p.vocab)},
          stats);
      for (int i = 0; i < feature_statistics; ++i) st.big.values[p.top_k + i] = stats[i];
      st.row.ok = stats_finite && isfinite(rz) && isfinite(s_) && isfinite(q_) &&
                  detail::scaled_max_in_range(st.row.max, p.inv_t);
      p.row_stats[r] = {st.row.max, log_z};
    }
    __syncthreads();
    return st.row.ok;
  }

  /// 9. The staged features to the output row, and its status.
  __device__ void write_features() {
    float* out = p.features + static_cast<std::int64_t>(r) * p.features_stride;
    for (int i = threadIdx.x; i < feature_count(); i += Threads) out[i] = st.big.values[i];
    if (threadIdx.x == 0) p.statuses[r] = status::success;
  }

  /// 10. The fused predictor on the staged features; it falls back (class -1) when a feature is not
  /// finite, as blockpilot_policy does.
  __device__ void run_predictor() {
    bool bad = false;
    for (int i = threadIdx.x; i < feature_count(); i += Threads) bad = bad || !isfinite(st.big.values[i]);
    if (__syncthreads_or(bad)) return predictor_fallback();
    const mlp_device_shape& shape = p.predictor.network.shape;
    float* x = st.big.values;
    float* act0 = x + (feature_count() + 3) / 4 * 4;
    float* act1 = act0 + shape.max_hidden();
    float* class_logits = act1 + shape.max_hidden();
    block_mlp_forward<Threads>(p.predictor.network, x, act0, act1, class_logits);
    if (p.predictor.class_logits != nullptr)
      for (int i = threadIdx.x; i < shape.classes; i += Threads)
        p.predictor.class_logits[static_cast<std::int64_t>(r) * p.predictor.class_logits_stride + i] = class_logits[i];
    if (threadIdx.x == 0) p.predictor.classes[r] = argmax_of(class_logits, shape.classes);
  }

  /// An unusable row: NaN features, status non_finite_logits, and the predictor's fallback.
  __device__ void fail_row() {
    float* out = p.features + static_cast<std::int64_t>(r) * p.features_stride;
    for (int i = threadIdx.x; i < feature_count(); i += Threads) out[i] = __int_as_float(0x7fc00000);
    if constexpr (fused) predictor_fallback();
    if (threadIdx.x == 0) p.statuses[r] = status::non_finite_logits;
  }

  /// Class -1 and NaN class logits.
  __device__ void predictor_fallback() {
    if (p.predictor.class_logits != nullptr)
      for (int i = threadIdx.x; i < p.predictor.network.shape.classes; i += Threads)
        p.predictor.class_logits[static_cast<std::int64_t>(r) * p.predictor.class_logits_stride + i] = __int_as_float(0x7fc00000);
    if (threadIdx.x == 0) p.predictor.classes[r] = -1;
  }

  [[nodiscard]] __device__ int feature_count() const { return p.top_k + feature_statistics; }

  /// The top `keep` of value_at(0 .. n) into `out`.
  template <class ValueAt>
  __device__ void select_top(ValueAt value_at, int n, float* out) {
    std::uint32_t kth;
    int take_equal;
    block_radix_select<Threads>(value_at, n, p.keep, st.temp.select, kth, take_equal);
    block_gather_top<Threads>(value_at, n, kth, take_equal, p.keep, out, st.temp.select);
  }
};

/// The compact feature pass: grid (segments, batch), `Threads` threads a block, one
/// compact_feature_agent a block. Rows that hold NaN or +inf, or no finite value, get status
/// non_finite_logits and NaN features.
template <int Threads, int Segment, int Capacity, class Logit, class Predictor>
__global__ void __launch_bounds__(Threads) compact_feature_kernel(const feature_params<Logit, Predictor> p) {
  using agent = compact_feature_agent<Threads, Segment, Capacity, Logit, Predictor>;
  __shared__ typename agent::storage storage;
  agent(p, storage).run();
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
