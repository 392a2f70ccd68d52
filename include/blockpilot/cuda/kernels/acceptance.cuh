// Acceptance kernels for a ragged batch (rows padded to max_block, a per-request block size): segment
// passes over the target rows (max / first argmax, fixed-point softmax totals), the sampling controls'
// cut of each row, per-request walks that reproduce the CPU rules' decisions, and inverse-CDF picks
// confined to one segment of one row.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/kernels/acceptance.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cstdint>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/acceptance/batched.hpp"
#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/cuda/kernels/common.cuh"
#include "blockpilot/cuda/kernels/radix_select.cuh"
#include "blockpilot/detail/fixed_point_softmax.hpp"
#include "blockpilot/detail/sampling_cut.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::cuda_detail {

/// Largest max_block the per-request kernels handle (one thread a row): the library's limit.
inline constexpr int acceptance_max_block = block_size_limit;

/// What the rejection walk leaves for the sampling kernels of one request.
struct rejection_decision {
  enum mode_t : int { done = 0, from_p = 1, from_residual = 2 };
  int mode;          ///< done: the result (or an error) is already written
  int row;           ///< the row to sample: the rejected one, or b − 1 when every draft was accepted
  float max;         ///< that row's maximum
  std::uint64_t cut;    ///< that row's sampling-controls cut
  std::uint64_t total;  ///< that row's fixed-point softmax total (after the cut)
  std::uint64_t bits;   ///< the 64 random bits of the draw
};

/// Everything the acceptance kernels read and write (device pointers; see cuda/acceptance.cuh).
struct acceptance_params {
  const float* logits;
  std::int64_t logits_row_stride;
  const token_id* blocks;
  const int* block_sizes;
  const int* draft_offsets;  ///< [batch + 1] in the flattened layout, else null
  const float* draft_probs;
  std::int64_t draft_row_stride;
  const float* temperatures;
  float temperature;
  sampling_controls sampling;
  const sampling_controls* per_request_sampling;
  const philox_stream* rng;
  int batch, max_block, vocab, segments, segment;
  // workspace
  max_entry* segment_max;          ///< [batch][max_block][segments]
  std::uint64_t* segment_total;    ///< [batch][max_block][segments]
  std::uint64_t* row_cut;          ///< [batch][max_block] (sampling rules, when controls are given), else null
  token_id* row_token;             ///< [batch][max_block] (sample-and-match)
  rejection_decision* decisions;   ///< [batch] (rejection sampling)
  std::uint64_t* residual_mass;    ///< [batch][segments] (rejection sampling)
  // outputs
  acceptance_result* results;
  status* statuses;
};

__device__ __forceinline__ float request_temperature(const acceptance_params& p, int r) {
  return p.temperatures != nullptr ? p.temperatures[r] : p.temperature;
}
__device__ __forceinline__ sampling_controls request_sampling(const acceptance_params& p, int r) {
  return p.per_request_sampling != nullptr ? p.per_request_sampling[r] : p.sampling;
}
/// The request's block size, or 0 when it is outside [1, max_block].
__device__ __forceinline__ int request_block(const acceptance_params& p, int r) {
  return detail::batched_block_size(p, p.max_block, r);
}
/// Request r's first target row (and block token): padded, or back to back after the rows of requests < r.
__device__ __forceinline__ std::int64_t first_row(const acceptance_params& p, int r) {
  return detail::batched_first_row(p, p.max_block, r);
}
__device__ __forceinline__ const float* target_row(const acceptance_params& p, int r, int j) {
  return p.logits + (first_row(p, r) + j) * p.logits_row_stride;
}
__device__ __forceinline__ const float* draft_row(const acceptance_params& p, int r, int j) {
  return p.draft_probs + (detail::batched_first_draft_row(p, p.max_block, r) + j) * p.draft_row_stride;
}
__device__ __forceinline__ std::int64_t row_index(const acceptance_params& p, int r, int j) {
  return static_cast<std::int64_t>(r) * p.max_block + j;
}

/// Row j's cut of its weights (sampling_cut_kernel): 0 (keep all) without controls.
__device__ __forceinline__ std::uint64_t row_cut(const acceptance_params& p, int r, int j) {
  return p.row_cut != nullptr ? p.row_cut[row_index(p, r, j)] : 0;
}
/// A target logit's fixed-point weight after its row's cut.
__device__ __forceinline__ std::uint64_t target_weight(float x, float max, float t, std::uint64_t cut) {
  return detail::cut_weight(detail::fixed_point_weight(x, max, t), cut);
}

/// The row's (max, first argmax, flags) from its segment records, by one thread.
__device__ __forceinline__ max_entry combine_row_max(const acceptance_params& p, int r, int j) {
  const max_entry* rec = p.segment_max + row_index(p, r, j) * p.segments;
  max_entry m = max_identity();
  for (int s = 0; s < p.segments; ++s) m = max_combine()(m, rec[s]);
  return m;
}
/// The row's fixed-point total from its segment records, by one thread (exact: integer sums).
__device__ __forceinline__ std::uint64_t combine_row_total(const acceptance_params& p, int r, int j) {
  const std::uint64_t* rec = p.segment_total + row_index(p, r, j) * p.segments;
  std::uint64_t t = 0;
  for (int s = 0; s < p.segments; ++s) t += rec[s];
  return t;
}

/// The CPU's residual weight: max(P_i − floor(q_i · total), 0), with q_i · total taken in double and
/// clamped to [0, total] (rejection_sampling::residual_weights).
__device__ __forceinline__ std::uint64_t residual_weight(std::uint64_t w, float q, std::uint64_t total) {
  const double qi = static_cast<double>(q) * static_cast<double>(total);
  const std::uint64_t qw = !(qi > 0.0) ? 0 : qi >= static_cast<double>(total) ? total : static_cast<std::uint64_t>(qi);
  return w > qw ? w - qw : 0;
}

/// Pass 1, every rule. Grid (segments, max_block, batch): block (s, j, r) reduces segment s of row j of
/// request r to (max, first argmax, NaN / +inf flags); rows j >= b and requests with an invalid block
/// size or temperature are skipped (the walk reports those).
template <int Threads, int Unroll>
__global__ void __launch_bounds__(Threads) acceptance_max_kernel(const acceptance_params p) {
  using reduce = cub::BlockReduce<max_entry, Threads>;
  __shared__ typename reduce::TempStorage temp;
  const int s = blockIdx.x, j = blockIdx.y, r = blockIdx.z;
  if (j >= request_block(p, r) || !detail::valid_sampling_temperature(request_temperature(p, r))) return;
  const std::int64_t begin = static_cast<std::int64_t>(s) * p.segment;
  const std::int64_t end = begin + p.segment < p.vocab ? begin + p.segment : p.vocab;
  max_entry m = max_identity();
  for_each_element<Threads, Unroll>(target_row(p, r, j), begin, end,
                                    [&](std::int64_t i, float x) { max_update(m, static_cast<int>(i), x); });
  m = reduce(temp).Reduce(m, max_combine());
  if (threadIdx.x == 0) p.segment_max[row_index(p, r, j) * p.segments + s] = m;
}

/// Pass 1b, sampling rules at T >= 1e-5 when sampling controls are given. Grid (max_block, batch): block
/// (j, r) finds row j's cut (detail::controls_cut, as cpu_detail::apply_sampling_controls: min-p by
/// arithmetic, top-k and top-p by block-wide weight selections over the row) into row_cut; 0 for rows
/// without active, valid controls (their requests are reported by the walks).
template <int Threads>
__global__ void __launch_bounds__(Threads) sampling_cut_kernel(const acceptance_params p) {
  using reduce = cub::BlockReduce<std::uint64_t, Threads>;
  __shared__ union {
    typename reduce::TempStorage sum;
    weight_select_storage<Threads> select;
  } temp;
  __shared__ max_entry row_max;
  __shared__ std::uint64_t row_total;
  const int j = blockIdx.x, r = blockIdx.y;
  const float t = request_temperature(p, r);
  const sampling_controls controls = request_sampling(p, r);
  if (j >= request_block(p, r) || !detail::valid_sampling_temperature(t) || t < detail::greedy_temperature ||
      controls.check() != status::success || !controls.active()) {
    if (threadIdx.x == 0) p.row_cut[row_index(p, r, j)] = 0;
    return;
  }
  if (threadIdx.x == 0) row_max = combine_row_max(p, r, j);
  __syncthreads();
  if (!row_is_finite(row_max)) {
    if (threadIdx.x == 0) p.row_cut[row_index(p, r, j)] = 0;
    return;
  }
  const float m = row_max.value;
  const float* row = target_row(p, r, j);
  const auto select = [&](std::uint64_t target, bool by_mass, std::uint64_t cut) {
    return block_select_weight<Threads>([&](int i) { return target_weight(row[i], m, t, cut); }, p.vocab, target, by_mass,
                                        temp.select);
  };
  const auto total = [&](std::uint64_t cut) {
    std::uint64_t sum = 0;
    for (int i = threadIdx.x; i < p.vocab; i += Threads) sum += target_weight(row[i], m, t, cut);
    sum = reduce(temp.sum).Sum(sum);
    if (threadIdx.x == 0) row_total = sum;
    __syncthreads();
    sum = row_total;
    __syncthreads();  // temp and row_total may be reused at once
    return sum;
  };
  const std::uint64_t cut = detail::controls_cut(controls, p.vocab, select, total);
  if (threadIdx.x == 0) p.row_cut[row_index(p, r, j)] = cut;
}

/// Pass 2, sampling rules at T >= 1e-5. Grid (segments, max_block, batch): block (s, j, r) sums the
/// fixed-point weights floor(2^40 e^((x − max) / T)), after the row's cut, of segment s of row j with the
/// row's maximum from pass 1 (rows that are not finite are skipped).
template <int Threads, int Unroll>
__global__ void __launch_bounds__(Threads) acceptance_total_kernel(const acceptance_params p) {
  using reduce = cub::BlockReduce<std::uint64_t, Threads>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ max_entry row_max;
  const int s = blockIdx.x, j = blockIdx.y, r = blockIdx.z;
  const float t = request_temperature(p, r);
  if (j >= request_block(p, r) || !detail::valid_sampling_temperature(t) || t < detail::greedy_temperature) return;
  if (threadIdx.x == 0) row_max = combine_row_max(p, r, j);
  __syncthreads();
  if (!row_is_finite(row_max)) return;
  const float m = row_max.value;
  const std::uint64_t cut = row_cut(p, r, j);
  const std::int64_t begin = static_cast<std::int64_t>(s) * p.segment;
  const std::int64_t end = begin + p.segment < p.vocab ? begin + p.segment : p.vocab;
  std::uint64_t total = 0;
  for_each_element<Threads, Unroll>(target_row(p, r, j), begin, end,
                                    [&](std::int64_t, float x) { total += target_weight(x, m, t, cut); });
  total = reduce(temp).Sum(total);
  if (threadIdx.x == 0) p.segment_total[row_index(p, r, j) * p.segments + s] = total;
}

template <int Threads>
struct pick_storage {
  typename cub::BlockScan<std::uint64_t, Threads>::TempStorage scan;
  int found;
  int segment;
  std::uint64_t threshold;
  std::uint64_t mass[Threads];
};

/// Inverse CDF inside [begin, end): the first index whose running weight sum (from begin) exceeds
/// `threshold` (end − 1 if none, which the callers' arithmetic rules out). Tiles of Threads × 4
/// consecutive elements, thread t owning 4 consecutive ones; an exclusive block scan of the thread sums
/// plus the running base gives each element's inclusive sum; the smallest crossing index wins
/// (atomicMin). All threads call it and get the index.
template <int Threads, class Weight>
__device__ int block_pick(int begin, int end, Weight weight, std::uint64_t threshold, pick_storage<Threads>& st) {
  constexpr int items = 4;
  std::uint64_t base = 0;
  for (int tile = begin; tile < end; tile += Threads * items) {
    const int first = tile + threadIdx.x * items;
    std::uint64_t w[items];
    std::uint64_t sum = 0;
#pragma unroll
    for (int e = 0; e < items; ++e) {
      w[e] = first + e < end ? weight(first + e) : 0;
      sum += w[e];
    }
    std::uint64_t prefix = 0, aggregate = 0;
    cub::BlockScan<std::uint64_t, Threads>(st.scan).ExclusiveSum(sum, prefix, aggregate);
    if (threadIdx.x == 0) st.found = INT_MAX;
    __syncthreads();
    std::uint64_t running = base + prefix;
#pragma unroll
    for (int e = 0; e < items; ++e) {
      running += w[e];
      if (first + e < end && running > threshold) {
        atomicMin(&st.found, first + e);
        break;
      }
    }
    __syncthreads();
    const int found = st.found;
    if (found != INT_MAX) return found;
    base += aggregate;
    __syncthreads();  // the scan storage and `found` are reused by the next tile
  }
  return end - 1;
}

/// Draws from a row whose weights are given per segment: masses[s] (shared, filled by the caller) are the
/// segment sums of weight(i); the draw is the CPU's pick_by_weight over the whole row with threshold
/// floor(bits · total / 2^64): thread 0 finds the segment where the running mass first exceeds it, then
/// the block scans that segment only. All threads call it after a barrier; all get the index.
template <int Threads, class Weight>
__device__ int block_pick_row(const acceptance_params& p, Weight weight, std::uint64_t bits, pick_storage<Threads>& st) {
  if (threadIdx.x == 0) {
    std::uint64_t total = 0;
    for (int s = 0; s < p.segments; ++s) total += st.mass[s];
    const std::uint64_t threshold = detail::scale_to_range(bits, total);
    // The first segment whose running mass exceeds the threshold; the last one if none does before it
    // (then before <= threshold, so the local threshold does not wrap around).
    std::uint64_t before = 0;
    int seg = 0;
    for (; seg + 1 < p.segments; ++seg) {
      if (before + st.mass[seg] > threshold) break;
      before += st.mass[seg];
    }
    st.segment = seg;
    st.threshold = threshold - before;
  }
  __syncthreads();
  const int seg = st.segment;
  const std::uint64_t local = st.threshold;
  __syncthreads();
  const int begin = seg * p.segment;
  const int end = p.vocab - begin < p.segment ? p.vocab : begin + p.segment;
  return block_pick<Threads>(begin, end, weight, local, st);
}

/// Sample-and-match at T >= 1e-5, pass 3. Grid (max_block, batch): block (j, r) draws the target's token
/// of row j with bits64(j, target_sample), exactly cpu_detail::sample_row.
template <int Threads>
__global__ void __launch_bounds__(Threads) sample_rows_kernel(const acceptance_params p) {
  __shared__ pick_storage<Threads> st;
  __shared__ max_entry row_max;
  const int j = blockIdx.x, r = blockIdx.y;
  const float t = request_temperature(p, r);
  if (j >= request_block(p, r) || !detail::valid_sampling_temperature(t) || t < detail::greedy_temperature) return;
  if (threadIdx.x == 0) row_max = combine_row_max(p, r, j);
  for (int s = threadIdx.x; s < p.segments; s += Threads) st.mass[s] = p.segment_total[row_index(p, r, j) * p.segments + s];
  __syncthreads();
  if (!row_is_finite(row_max)) return;
  const float m = row_max.value;
  const std::uint64_t cut = row_cut(p, r, j);
  const float* row = target_row(p, r, j);
  const std::uint64_t bits = p.rng[r].bits64(static_cast<std::uint32_t>(j), random_domain::target_sample);
  const int token = block_pick_row<Threads>(p, [&](int i) { return target_weight(row[i], m, t, cut); }, bits, st);
  if (threadIdx.x == 0) p.row_token[row_index(p, r, j)] = token;
}

/// Writes a request's outcome.
__device__ __forceinline__ void finish(const acceptance_params& p, int r, status s, int accepted = 0, token_id bonus = -1) {
  p.statuses[r] = s;
  p.results[r] = s == status::success ? acceptance_result{accepted, bonus} : acceptance_result{0, -1};
}

/// The checks of cpu_detail::check_acceptance_input, in its order, by thread 0 of a block per request
/// (tokens are checked by all threads: `bad_token` is the block's verdict).
__device__ __forceinline__ status validate_request(const acceptance_params& p, int r, int b, float t, bool bad_token) {
  if (b == 0) return status::invalid_block_size;
  if (!detail::valid_sampling_temperature(t)) return status::invalid_temperature;
  if (const status s = request_sampling(p, r).check(); s != status::success) return s;
  if (bad_token) return status::invalid_token;
  return status::success;
}

/// Greedy match and sample-and-match, last pass. One block per request, thread j per row: the target's
/// token of row j (first argmax, or the sample of pass 3), then thread 0 walks the rows as match_prefix
/// does: the first row that is not finite is an error, else accept while the next draft equals the token.
template <int Threads, bool Sampled>
__global__ void __launch_bounds__(Threads) match_walk_kernel(const acceptance_params p) {
  static_assert(Threads >= acceptance_max_block);
  __shared__ token_id target[acceptance_max_block];
  __shared__ bool finite[acceptance_max_block];
  const int r = blockIdx.x, j = threadIdx.x;
  const int b = request_block(p, r);
  const float t = request_temperature(p, r);
  const token_id* block = p.blocks + first_row(p, r);
  bool bad_token = false;
  if (j < b) {
    bad_token = block[j] < 0 || block[j] >= p.vocab;
    if (detail::valid_sampling_temperature(t)) {
      const max_entry m = combine_row_max(p, r, j);
      finite[j] = row_is_finite(m);
      target[j] = Sampled && t >= detail::greedy_temperature && finite[j] ? p.row_token[row_index(p, r, j)] : m.index;
    }
  }
  bad_token = __syncthreads_or(bad_token);
  if (threadIdx.x != 0) return;
  if (const status s = validate_request(p, r, b, t, bad_token); s != status::success) return finish(p, r, s);
  for (int row = 0; row < b; ++row) {
    if (!finite[row]) return finish(p, r, status::non_finite_logits);
    if (row + 1 == b || block[row + 1] != target[row]) return finish(p, r, status::success, row, target[row]);
  }
}

/// Rejection sampling, pass 3. One block per request, thread j per row: the row's max, argmax and total,
/// and for a draft row (j < b − 1) the acceptance test of draft x = block[j + 1]: accepted iff q(x) is
/// positive and finite and u · q(x) < P(x) / total with u = uniform(j, accept_test) (doubles, as on the
/// CPU). Thread 0 then walks: at T < 1e-5 the greedy rule (finished here); else the first rejected row
/// (or the bonus row b − 1 when all are accepted) becomes the request's decision for passes 4 and 5.
template <int Threads>
__global__ void __launch_bounds__(Threads) rejection_decide_kernel(const acceptance_params p) {
  static_assert(Threads >= acceptance_max_block);
  __shared__ max_entry row_max[acceptance_max_block];
  __shared__ std::uint64_t row_total[acceptance_max_block];
  __shared__ bool accept[acceptance_max_block];
  __shared__ bool from_q[acceptance_max_block];
  const int r = blockIdx.x, j = threadIdx.x;
  const int b = request_block(p, r);
  const float t = request_temperature(p, r);
  const bool greedy = t < detail::greedy_temperature;
  const token_id* block = p.blocks + first_row(p, r);
  bool bad_token = false;
  if (j < b) {
    bad_token = block[j] < 0 || block[j] >= p.vocab;
    if (detail::valid_sampling_temperature(t)) {
      const max_entry m = combine_row_max(p, r, j);
      row_max[j] = m;
      accept[j] = false;
      from_q[j] = false;
      if (!greedy && row_is_finite(m)) {
        const std::uint64_t total = combine_row_total(p, r, j);
        row_total[j] = total;
        const token_id x = j + 1 < b ? block[j + 1] : -1;
        if (x >= 0 && x < p.vocab) {
          const float qx = draft_row(p, r, j)[x];
          const double px = static_cast<double>(target_weight(target_row(p, r, j)[x], m.value, t, row_cut(p, r, j))) /
                            static_cast<double>(total);
          from_q[j] = qx > 0.0f && isfinite(qx);
          accept[j] = from_q[j] && p.rng[r].uniform(static_cast<std::uint32_t>(j), random_domain::accept_test) * qx < px;
        }
      }
    }
  }
  bad_token = __syncthreads_or(bad_token);
  if (threadIdx.x != 0) return;
  rejection_decision& d = p.decisions[r];
  d.mode = rejection_decision::done;
  if (const status s = validate_request(p, r, b, t, bad_token); s != status::success) return finish(p, r, s);
  if (greedy) {  // p is one-hot: exactly greedy match
    for (int row = 0; row < b; ++row) {
      if (!row_is_finite(row_max[row])) return finish(p, r, status::non_finite_logits);
      if (row + 1 == b || block[row + 1] != row_max[row].index) return finish(p, r, status::success, row, row_max[row].index);
    }
    return;
  }
  int row = 0;
  for (; row + 1 < b; ++row) {
    if (!row_is_finite(row_max[row])) return finish(p, r, status::non_finite_logits);
    if (!accept[row]) break;
  }
  if (!row_is_finite(row_max[row])) return finish(p, r, status::non_finite_logits);  // the bonus row b − 1
  const bool rejected = row + 1 < b;
  d.mode = rejected && from_q[row] ? rejection_decision::from_residual : rejection_decision::from_p;
  d.row = row;
  d.max = row_max[row].value;
  d.cut = row_cut(p, r, row);
  d.total = row_total[row];
  d.bits = rejected ? p.rng[r].bits64(static_cast<std::uint32_t>(row), random_domain::residual_sample)
                    : p.rng[r].bits64(static_cast<std::uint32_t>(row), random_domain::target_sample);
}

/// Rejection sampling, pass 4. Grid (segments, batch): for requests whose decision samples the residual,
/// block (s, r) sums segment s of the residual weights max(P_i − floor(q_i · total), 0) of the rejected row.
template <int Threads, int Unroll>
__global__ void __launch_bounds__(Threads) residual_mass_kernel(const acceptance_params p) {
  using reduce = cub::BlockReduce<std::uint64_t, Threads>;
  __shared__ typename reduce::TempStorage temp;
  const int s = blockIdx.x, r = blockIdx.y;
  const rejection_decision d = p.decisions[r];
  if (d.mode != rejection_decision::from_residual) return;
  const float t = request_temperature(p, r);
  const float* q = draft_row(p, r, d.row);
  const std::int64_t begin = static_cast<std::int64_t>(s) * p.segment;
  const std::int64_t end = begin + p.segment < p.vocab ? begin + p.segment : p.vocab;
  std::uint64_t mass = 0;
  for_each_element<Threads, Unroll>(target_row(p, r, d.row), begin, end, [&](std::int64_t i, float x) {
    mass += residual_weight(target_weight(x, d.max, t, d.cut), q[i], d.total);
  });
  mass = reduce(temp).Sum(mass);
  if (threadIdx.x == 0) p.residual_mass[static_cast<std::int64_t>(r) * p.segments + s] = mass;
}

/// Rejection sampling, pass 5. One block per request with a decision: the draw from the residual (or from
/// p when the residual's total mass is 0, or the draft did not come from q, or every draft was accepted),
/// with the decision's bits; accepted = the decision's row.
template <int Threads>
__global__ void __launch_bounds__(Threads) rejection_sample_kernel(const acceptance_params p) {
  __shared__ pick_storage<Threads> st;
  __shared__ bool use_residual;
  const int r = blockIdx.x;
  const rejection_decision d = p.decisions[r];
  if (d.mode == rejection_decision::done) return;
  const float t = request_temperature(p, r);
  const float* row = target_row(p, r, d.row);
  if (d.mode == rejection_decision::from_residual) {
    for (int s = threadIdx.x; s < p.segments; s += Threads) st.mass[s] = p.residual_mass[static_cast<std::int64_t>(r) * p.segments + s];
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t total = 0;
      for (int s = 0; s < p.segments; ++s) total += st.mass[s];
      use_residual = total != 0;  // an empty residual samples from p
    }
    __syncthreads();
  } else if (threadIdx.x == 0) {
    use_residual = false;
  }
  __syncthreads();
  int token;
  if (use_residual) {
    const float* q = draft_row(p, r, d.row);
    token = block_pick_row<Threads>(
        p, [&](int i) { return residual_weight(target_weight(row[i], d.max, t, d.cut), q[i], d.total); }, d.bits, st);
  } else {
    for (int s = threadIdx.x; s < p.segments; s += Threads) st.mass[s] = p.segment_total[row_index(p, r, d.row) * p.segments + s];
    __syncthreads();
    token = block_pick_row<Threads>(p, [&](int i) { return target_weight(row[i], d.max, t, d.cut); }, d.bits, st);
  }
  if (threadIdx.x == 0) finish(p, r, status::success, d.row, token);
}

}  // namespace blockpilot::cuda_detail
