// The acceptance rules on cuda_backend for a ragged batch of requests: greedy match, sample-and-match and
// rejection sampling, each deciding exactly what acceptance_op<Rule, cpu_backend> decides per request.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/acceptance.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/acceptance/batched.hpp"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/kernels/acceptance.cuh"
#include "blockpilot/cuda/tuning/sm90.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

namespace cuda_detail {

/// The shared implementation of the three rules: the same passes, the rule picks which.
template <class Rule>
struct batched_acceptance_op {
  static constexpr bool sampled = std::is_same_v<Rule, sample_and_match>;
  static constexpr bool rejection = std::is_same_v<Rule, rejection_sampling>;
  static constexpr int threads = sm90_acceptance.threads;
  static constexpr int segment = sm90_acceptance.segment;
  static constexpr int unroll = sm90_acceptance.unroll;
  /// Largest max_block and vocabulary.
  static constexpr int max_block_limit = acceptance_max_block;
  static constexpr std::int64_t max_vocab = std::int64_t{threads} * segment;
  static_assert(max_vocab == detail::max_sampling_vocab, "the CPU and CUDA rules take the same vocabularies");

  /// success, or invalid_argument when a dimension is out of range.
  [[nodiscard]] static constexpr status can_implement(const batched_acceptance_shape& s) {
    return s.within_limits(max_vocab) ? status::success : status::invalid_argument;
  }

  /// Bytes of device workspace a call of this shape needs (arithmetic only; 0 for an invalid shape).
  [[nodiscard]] static std::size_t workspace_size(const batched_acceptance_shape& s) {
    if (can_implement(s) != status::success) return 0;
    acceptance_params p{};
    return carve(s, nullptr, p);
  }

  /// The rules apply `sampling` / `per_request_sampling` (the decode stage refuses active controls for a
  /// rule without this flag).
  static constexpr bool applies_sampling_controls = true;

  /// Enqueues the rule for every request on `backend.stream` and returns without waiting. Per-request
  /// outcomes (including non_finite_logits, invalid_temperature, invalid_argument for invalid sampling
  /// controls, invalid_token and invalid_block_size) are written to `out` on the device; the returned status covers the call itself: invalid_argument
  /// (shape, null pointer, stride), workspace_too_small, or cuda_error when a launch failed. No
  /// allocation, no synchronisation, no device query: the call can be captured in a CUDA graph.
  [[nodiscard]] static status run(const cuda_backend& backend, const batched_acceptance_input& in,
                                  std::span<std::byte> workspace, const batched_acceptance_output& out) {
    const batched_acceptance_shape& s = in.shape;
    if (const status st = can_implement(s); st != status::success) return st;
    if (s.batch == 0) return status::success;
    const std::int64_t logits_stride = in.logits_row_stride == 0 ? s.vocab : in.logits_row_stride;
    const std::int64_t draft_stride = in.draft_row_stride == 0 ? s.vocab : in.draft_row_stride;
    if (in.target_logits == nullptr || in.blocks == nullptr || (in.block_sizes == nullptr && in.draft_offsets == nullptr) ||
        in.rng == nullptr ||
        out.results == nullptr || out.statuses == nullptr || logits_stride < s.vocab)
      return status::invalid_argument;
    if (rejection && s.max_block > 1 && (in.draft_probs == nullptr || draft_stride < s.vocab))
      return status::invalid_argument;
    acceptance_params p{};
    if (const status st = check_workspace(workspace, carve(s, nullptr, p)); st != status::success) return st;
    carve(s, workspace.data(), p);
    p.logits = in.target_logits;
    p.logits_row_stride = logits_stride;
    p.blocks = in.blocks;
    p.block_sizes = in.block_sizes;
    p.draft_offsets = in.draft_offsets;
    p.draft_probs = in.draft_probs;
    p.draft_row_stride = draft_stride;
    p.temperatures = in.temperatures;
    p.temperature = in.temperature;
    p.sampling = in.sampling;
    p.per_request_sampling = in.per_request_sampling;
    if (!in.sampling.active() && in.per_request_sampling == nullptr) p.row_cut = nullptr;  // no cut to find
    p.rng = in.rng;
    p.results = out.results;
    p.statuses = out.statuses;

    const cudaStream_t stream = backend.stream;
    const dim3 rows(static_cast<unsigned>(p.segments), static_cast<unsigned>(s.max_block), static_cast<unsigned>(s.batch));
    acceptance_max_kernel<threads, unroll><<<rows, threads, 0, stream>>>(p);
    if (p.row_cut != nullptr) sampling_cut_kernel<threads><<<dim3(s.max_block, s.batch), threads, 0, stream>>>(p);
    if constexpr (rejection) {
      acceptance_total_kernel<threads, unroll><<<rows, threads, 0, stream>>>(p);
      rejection_decide_kernel<acceptance_max_block><<<s.batch, acceptance_max_block, 0, stream>>>(p);
      residual_mass_kernel<threads, unroll><<<dim3(p.segments, s.batch), threads, 0, stream>>>(p);
      rejection_sample_kernel<threads><<<s.batch, threads, 0, stream>>>(p);
    } else if constexpr (sampled) {
      acceptance_total_kernel<threads, unroll><<<rows, threads, 0, stream>>>(p);
      sample_rows_kernel<threads><<<dim3(s.max_block, s.batch), threads, 0, stream>>>(p);
      match_walk_kernel<acceptance_max_block, true><<<s.batch, acceptance_max_block, 0, stream>>>(p);
    } else {
      match_walk_kernel<acceptance_max_block, false><<<s.batch, acceptance_max_block, 0, stream>>>(p);
    }
    return check(cudaGetLastError());
  }

 private:
  /// The workspace layout (shared by the size query and the run); fills the shape fields of p and returns
  /// the bytes used.
  static std::size_t carve(const batched_acceptance_shape& s, std::byte* base, acceptance_params& p) {
    p.batch = s.batch;
    p.max_block = s.max_block;
    p.vocab = static_cast<int>(s.vocab);
    p.segment = segment;
    p.segments = static_cast<int>((s.vocab + segment - 1) / segment);
    const auto rows = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.max_block);
    const auto segs = static_cast<std::size_t>(p.segments);
    workspace_carver c(base);
    p.segment_max = c.take<max_entry>(rows * segs);
    if constexpr (sampled || rejection) {
      p.segment_total = c.take<std::uint64_t>(rows * segs);
      p.row_cut = c.take<std::uint64_t>(rows);
    }
    if constexpr (sampled) p.row_token = c.take<token_id>(rows);
    if constexpr (rejection) {
      p.decisions = c.take<rejection_decision>(static_cast<std::size_t>(s.batch));
      p.residual_mass = c.take<std::uint64_t>(static_cast<std::size_t>(s.batch) * segs);
    }
    return c.size();
  }
};

}  // namespace cuda_detail

/// Greedy match on the GPU for a ragged batch (see batched_acceptance_op::run). Two launches.
template <>
struct acceptance_op<greedy_match, cuda_backend> : cuda_detail::batched_acceptance_op<greedy_match> {};

/// Sample-and-match on the GPU for a ragged batch: every row j < b_r is sampled with
/// bits64(j, target_sample) of request r's stream, as on the CPU. Four launches, five with sampling
/// controls.
template <>
struct acceptance_op<sample_and_match, cuda_backend> : cuda_detail::batched_acceptance_op<sample_and_match> {};

/// Rejection sampling on the GPU for a ragged batch. Reads each target row twice (max, then fixed-point
/// total: one log-sum-exp pass), one q value per draft row, and the residual only of the rejected row;
/// the probability tensors are never materialised. Five launches, six with sampling controls (which cost
/// up to 9 more reads of each row: four selection passes each for top-k and top-p, one total).
template <>
struct acceptance_op<rejection_sampling, cuda_backend> : cuda_detail::batched_acceptance_op<rejection_sampling> {};

}  // namespace blockpilot
