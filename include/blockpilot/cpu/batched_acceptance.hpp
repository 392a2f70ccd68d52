// The batched acceptance contract on the CPU: every request of the batch through acceptance_op<Rule,
// cpu_backend>, in order, in either layout. Any rule with a per-request CPU op gets it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "blockpilot/acceptance/batched.hpp"
#include "blockpilot/backend.hpp"
#include "blockpilot/cpu/acceptance.hpp"

namespace blockpilot {

template <class Rule>
  requires acceptance_rule<Rule, cpu_backend>
struct batched_acceptance<Rule, cpu_backend> {
  using op = acceptance_op<Rule, cpu_backend>;

  [[nodiscard]] static constexpr status can_implement(const batched_acceptance_shape& s) {
    return s.within_limits(detail::max_sampling_vocab) ? status::success : status::invalid_argument;
  }
  /// One request's workspace, reused by each in turn.
  [[nodiscard]] static std::size_t workspace_size(const batched_acceptance_shape& s) {
    return op::workspace_size(s.max_block, s.vocab);
  }

  /// Decides every request; per-request outcomes go to `out` ({0, -1} with the status on an error).
  [[nodiscard]] static status run(const cpu_backend&, const batched_acceptance_input& in, std::span<std::byte> workspace,
                                  const batched_acceptance_output& out) {
    const batched_acceptance_shape& s = in.shape;
    if (const status st = can_implement(s); st != status::success) return st;
    const std::int64_t logits_stride = in.logits_row_stride == 0 ? s.vocab : in.logits_row_stride;
    const std::int64_t draft_stride = in.draft_row_stride == 0 ? s.vocab : in.draft_row_stride;
    if (s.batch == 0) return status::success;
    if (in.target_logits == nullptr || in.blocks == nullptr || (in.block_sizes == nullptr && in.draft_offsets == nullptr) ||
        in.rng == nullptr || out.results == nullptr || out.statuses == nullptr || logits_stride < s.vocab)
      return status::invalid_argument;
    if (Rule::needs_draft_probabilities && s.max_block > 1 && (in.draft_probs == nullptr || draft_stride < s.vocab))
      return status::invalid_argument;  // q is read only there, as on the device
    if (workspace.size() < workspace_size(s)) return status::workspace_too_small;
    for (int r = 0; r < s.batch; ++r) {
      const int b = detail::batched_block_size(in, s.max_block, r);
      acceptance_result result{0, -1};
      status st = status::invalid_block_size;
      if (b > 0) {
        const std::int64_t first = detail::batched_first_row(in, s.max_block, r);
        acceptance_input request{{in.target_logits + first * logits_stride, b, s.vocab, logits_stride},
                                 {in.blocks + first, static_cast<std::size_t>(b)},
                                 {},
                                 in.temperatures != nullptr ? in.temperatures[r] : in.temperature,
                                 in.rng[r]};
        request.sampling = in.per_request_sampling != nullptr ? in.per_request_sampling[r] : in.sampling;
        if (in.draft_probs != nullptr && b > 1)
          request.draft_probs = {in.draft_probs + detail::batched_first_draft_row(in, s.max_block, r) * draft_stride, b - 1, s.vocab,
                                 draft_stride};
        st = op::run(request, workspace, result);
        if (st != status::success) result = {0, -1};
      }
      out.results[r] = result;
      out.statuses[r] = st;
    }
    return status::success;
  }
};

}  // namespace blockpilot
