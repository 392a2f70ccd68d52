// The batched acceptance contract, one for every backend: a step of N requests in one call, in the padded
// or the flattened (ragged) layout. On cuda_backend it is acceptance_op itself (cuda/acceptance.cuh); on
// the CPU a loop over requests of the per-request acceptance_op (cpu/batched_acceptance.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/detail/config.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// The shape of one batched acceptance call (what the workspace size depends on).
struct batched_acceptance_shape {
  int batch = 0;           ///< requests, 0 … 65535
  int max_block = 0;       ///< rows per request in the padded layout, 1 … block_size_limit (>= every block size)
  std::int64_t vocab = 0;  ///< 1 … 2^22
  static constexpr int max_batch = 65535;

  /// Within the bounds above (every backend's can_implement starts here).
  [[nodiscard]] constexpr bool within_limits(std::int64_t max_vocab) const noexcept {
    return batch >= 0 && batch <= max_batch && max_block >= 1 && max_block <= block_size_limit && vocab >= 1 &&
           vocab <= max_vocab;
  }
};

/// One verification step of a batch, every pointer in the backend's memory. Two layouts: padded — request
/// r's block size is b_r = block_sizes[r], its rows at r · max_block (padding rows are never read) — or
/// flattened — `draft_offsets` given (the cumulative draft counts, as vLLM's cu_num_draft_tokens): request
/// r has d_r = draft_offsets[r + 1] − draft_offsets[r] drafts, b_r = d_r + 1 rows of target_logits and
/// tokens of blocks starting at draft_offsets[r] + r, and its q rows at draft_offsets[r]; block_sizes is
/// then ignored. b_r outside [1, max_block] is reported per request (invalid_block_size).
struct batched_acceptance_input {
  batched_acceptance_shape shape;
  /// Row j of request r (the target's distribution for block position j + 1) starts at
  /// (first_row(r) + j) · logits_row_stride.
  const float* target_logits = nullptr;
  std::int64_t logits_row_stride = 0;  ///< elements between rows, >= vocab; 0 means vocab
  /// Request r's anchor, then its b_r − 1 drafts, from first_row(r) (padded: entries >= b_r are ignored).
  const token_id* blocks = nullptr;
  const int* block_sizes = nullptr;    ///< `[batch]`: b_r (padded layout)
  const int* draft_offsets = nullptr;  ///< `[batch + 1]`, non-decreasing from 0 (flattened layout)
  /// q of each draft row (rejection sampling; null for the other rules): padded `[batch][max_block − 1][vocab]`.
  const float* draft_probs = nullptr;
  std::int64_t draft_row_stride = 0;     ///< >= vocab; 0 means vocab
  float temperature = 0.0f;              ///< every request's T (T < 1e-5 is greedy), unless…
  const float* temperatures = nullptr;   ///< … `[batch]` per-request temperatures are given
  sampling_controls sampling{};          ///< every request's top-k / top-p / min-p (acceptance/sampling.hpp), unless…
  const sampling_controls* per_request_sampling = nullptr;  ///< … `[batch]` per-request controls are given
  const philox_stream* rng = nullptr;    ///< `[batch]`: each request's stream for this step (seed, offset)
};

/// Where a batched acceptance call writes, in the backend's memory.
struct batched_acceptance_output {
  acceptance_result* results = nullptr;  ///< `[batch]`: accepted drafts and the bonus token; {0, -1} on error
  status* statuses = nullptr;            ///< `[batch]`: the status acceptance_op<Rule, cpu_backend> would return
};

namespace detail {
// Where request r lies in either layout, for the CPU loop and the CUDA kernels alike: `In` has the
// input's `draft_offsets` and `block_sizes`.
/// Request r's block size (0 when outside [1, max_block]).
template <class In>
BLOCKPILOT_HOST_DEVICE int batched_block_size(const In& in, int max_block, int r) {
  const int b = in.draft_offsets != nullptr ? in.draft_offsets[r + 1] - in.draft_offsets[r] + 1 : in.block_sizes[r];
  return b >= 1 && b <= max_block ? b : 0;
}
/// Request r's first target row and block token.
template <class In>
BLOCKPILOT_HOST_DEVICE std::int64_t batched_first_row(const In& in, int max_block, int r) {
  return in.draft_offsets != nullptr ? std::int64_t{in.draft_offsets[r]} + r : std::int64_t{r} * max_block;
}
/// Request r's first q row.
template <class In>
BLOCKPILOT_HOST_DEVICE std::int64_t batched_first_draft_row(const In& in, int max_block, int r) {
  return in.draft_offsets != nullptr ? std::int64_t{in.draft_offsets[r]} : std::int64_t{r} * (max_block - 1);
}
}  // namespace detail

/// The batched implementation of `Rule` on `Backend`: `can_implement(shape)`, `workspace_size(shape)` in
/// bytes and `run(backend, input, workspace, output)`, which enqueues or runs the decisions of every
/// request and returns the status of the call itself (per-request statuses go to `output`). By default the
/// backend's acceptance_op (which is batched on cuda_backend); on the CPU a loop over requests. An
/// implementation that applies the input's sampling controls says so with `static constexpr bool
/// applies_sampling_controls = true` (the built-in CUDA rules do); the CUDA decode stage refuses active
/// controls for one that does not, rather than decide on the unprocessed distribution.
template <class Rule, class Backend>
struct batched_acceptance : acceptance_op<Rule, Backend> {};

/// A rule with a batched implementation on `Backend`.
template <class Rule, class Backend>
concept batched_acceptance_rule =
    requires(const Backend& backend, const batched_acceptance_shape& shape, const batched_acceptance_input& in,
             std::span<std::byte> workspace, const batched_acceptance_output& out) {
      { batched_acceptance<Rule, Backend>::can_implement(shape) } -> std::same_as<status>;
      { batched_acceptance<Rule, Backend>::workspace_size(shape) } -> std::convertible_to<std::size_t>;
      { batched_acceptance<Rule, Backend>::run(backend, in, workspace, out) } -> std::same_as<status>;
    };

}  // namespace blockpilot
