// The confidence cut-off: draft up to the policy's size, then verify only the drafts before the first
// one the drafter is less sure of than p_min (prompt lookup: the matched continuation). Wraps any
// block-size policy, per-request or per-step.
#pragma once

#include <cmath>
#include <span>

#include "blockpilot/concepts.hpp"

namespace blockpilot {

/// Models draft_trimming_policy (and per_step_block_size_policy when Inner does); the drafter must
/// model drafter_with_confidence.
template <block_size_policy Inner>
class confidence_cutoff {
 public:
  using logits_backend = typename detail::policy_logits_backend<Inner>::type;

  /// Throws `error` unless 0 <= p_min <= 1.
  confidence_cutoff(Inner inner, float p_min) : inner_(std::move(inner)), p_min_(p_min) {
    if (!(p_min >= 0.0f && p_min <= 1.0f)) throw error("confidence_cutoff: p_min must be in [0, 1]");
  }

  [[nodiscard]] int max_block_size() const { return inner_.max_block_size(); }
  [[nodiscard]] float p_min() const { return p_min_; }
  [[nodiscard]] Inner& inner() { return inner_; }
  [[nodiscard]] const Inner& inner() const { return inner_; }

  [[nodiscard]] block_size_choice choose(const request_features& f) { return inner_.choose(f); }
  [[nodiscard]] int next(const step_record& step)
    requires per_step_block_size_policy<Inner>
  {
    return inner_.next(step);
  }

  /// The drafts before the first with confidence below p_min (or not a number).
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) const {
    int kept = 0;
    while (kept < static_cast<int>(confidence.size()) && confidence[static_cast<std::size_t>(kept)] >= p_min_) ++kept;
    return kept;
  }

 private:
  Inner inner_;
  float p_min_;
};

}  // namespace blockpilot
