// The checks of a flattened (ragged) batch that the acceptance ops trust their caller with, made once on
// the host for the CPU and the CUDA path alike (plain C++: nvcc compiles it too).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "blockpilot/acceptance/batched.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::python {

/// What a ragged batch holds, and why it cannot be decided (empty when it can).
struct ragged_layout {
  int max_block = 1;         ///< the largest d_r + 1
  std::int64_t drafts = 0;   ///< draft_offsets[batch]
  std::string refused;
};

/// draft_offsets [batch + 1] (host) against the rows of target_logits and blocks and of q (-1: no q given).
inline ragged_layout check_ragged(std::span<const int> draft_offsets, std::int64_t logit_rows, std::int64_t block_rows,
                                  std::int64_t q_rows, bool needs_q, std::string_view rule) {
  ragged_layout l;
  if (draft_offsets.empty() || draft_offsets[0] != 0) {
    l.refused = "draft_offsets[0] must be 0";
    return l;
  }
  std::int64_t largest = 1;  // a request's d_r + 1, in 64 bits: offsets [0, 2^31 - 1] overflow an int
  for (std::size_t r = 0; r + 1 < draft_offsets.size(); ++r) {
    if (draft_offsets[r + 1] < draft_offsets[r]) {
      l.refused = "draft_offsets must not decrease (request " + std::to_string(r) + ")";
      return l;
    }
    largest = std::max(largest, std::int64_t{draft_offsets[r + 1]} - draft_offsets[r] + 1);
  }
  l.drafts = draft_offsets.back();
  const auto rows = l.drafts + static_cast<std::int64_t>(draft_offsets.size()) - 1;
  const auto expected = [](const char* what, std::int64_t got, std::int64_t want) {
    return std::string(what) + " has " + std::to_string(got) + " rows, expected " + std::to_string(want);
  };
  if (largest > block_size_limit) {
    l.refused = "a request has " + std::to_string(largest - 1) + " drafts; at most " + std::to_string(block_size_limit - 1);
    return l;
  }
  l.max_block = static_cast<int>(largest);
  if (logit_rows != rows) l.refused = expected("target_logits", logit_rows, rows) + ": one row per block token";
  else if (block_rows != rows) l.refused = expected("blocks", block_rows, rows);
  else if (q_rows >= 0 && q_rows != l.drafts) l.refused = expected("draft_probs", q_rows, l.drafts) + ": one q row per draft";
  else if (needs_q && l.drafts > 0 && q_rows < 0)
    l.refused = "the " + std::string(rule) + " rule needs draft_probs, q of every draft row";
  return l;
}

/// Why a batch is beyond what the rules take on either backend (empty when it is not).
inline std::string beyond_rule_limits(std::int64_t batch, std::int64_t vocab) {
  if (batch <= batched_acceptance_shape::max_batch && vocab >= 1 && vocab <= detail::max_sampling_vocab) return {};
  return "the rules take at most " + std::to_string(batched_acceptance_shape::max_batch) + " requests of 1 to " +
         std::to_string(detail::max_sampling_vocab) + " tokens of vocabulary; got " + std::to_string(batch) +
         " requests of " + std::to_string(vocab);
}

}  // namespace blockpilot::python
