// A drafter's token from one of its logits rows, following the request the way the target is held to
// it: the logits processor, the temperature and the sampling controls. For CPU drafters, the
// library's own and an engine's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/row_ops.hpp"

namespace blockpilot {

/// The buffers of draft_token, sized on first use (a drafter keeps one).
struct draft_scratch {
  std::vector<std::uint64_t> weights;  ///< [vocab]: the fixed-point weights
  std::vector<float> row;              ///< [vocab]: the processed row
  std::vector<token_id> prefix;        ///< the processor's prefix
};

/// Draft j (1-based) of request `r` from `row`: `drafts` are the request's drafts before it. The row is
/// rewritten by r.process_logits (after r.context and drafts) when there is one; then the argmax with a
/// one-hot q at T < 1e-5, else a sample after r.sampling with q the distribution it was drawn from
/// (`q_row` may be empty). Draws r.rng.bits64(j, draft_sample).
[[nodiscard]] inline status draft_token(std::span<const float> row, const draft_request& r, int j,
                                        std::span<const token_id> drafts, draft_scratch& scratch, std::span<float> q_row,
                                        token_id& token) {
  const std::size_t vocab = row.size();
  if (scratch.weights.size() < vocab) scratch.weights.resize(vocab);
  if (r.process_logits != nullptr && *r.process_logits) {
    scratch.row.assign(row.begin(), row.end());
    scratch.prefix.assign(r.context.begin(), r.context.end());
    scratch.prefix.insert(scratch.prefix.end(), drafts.begin(), drafts.end());
    (*r.process_logits)(scratch.prefix, scratch.row);
    row = scratch.row;
  }
  return cpu_detail::draft_from_row(row, r.temperature, r.rng.bits64(static_cast<std::uint32_t>(j), random_domain::draft_sample),
                        std::span<std::uint64_t>(scratch.weights).first(vocab), q_row, token, r.sampling);
}

}  // namespace blockpilot
