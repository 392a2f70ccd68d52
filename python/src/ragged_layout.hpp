// The checks of a flattened (ragged) batch that the acceptance ops trust their caller with, made once on
// the host for the CPU and the CUDA path alike (plain C++: nvcc compiles it too).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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
  for (std::size_t r = 0; r + 1 < draft_offsets.size(); ++r) {
    if (draft_offsets[r + 1] < draft_offsets[r]) {
      l.refused = "draft_offsets must not decrease (request " + std::to_string(r) + ")";
      return l;
    }
    l.max_block = std::max(l.max_block, draft_offsets[r + 1] - draft_offsets[r] + 1);
  }
  l.drafts = draft_offsets.back();
  const auto rows = l.drafts + static_cast<std::int64_t>(draft_offsets.size()) - 1;
  const auto expected = [](const char* what, std::int64_t got, std::int64_t want) {
    return std::string(what) + " has " + std::to_string(got) + " rows, expected " + std::to_string(want);
  };
  if (l.max_block > block_size_limit)
    l.refused = "a request has " + std::to_string(l.max_block - 1) + " drafts; at most " + std::to_string(block_size_limit - 1);
  else if (logit_rows != rows) l.refused = expected("target_logits", logit_rows, rows) + ": one row per block token";
  else if (block_rows != rows) l.refused = expected("blocks", block_rows, rows);
  else if (q_rows >= 0 && q_rows != l.drafts) l.refused = expected("draft_probs", q_rows, l.drafts) + ": one q row per draft";
  else if (needs_q && l.drafts > 0 && q_rows < 0)
    l.refused = "the " + std::string(rule) + " rule needs draft_probs, q of every draft row";
  return l;
}

}  // namespace blockpilot::python
