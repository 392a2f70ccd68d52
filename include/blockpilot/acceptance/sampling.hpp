// Sampling controls on the target's distribution: top-k, top-p (nucleus), min-p, and a logits-processor
// hook. The acceptance rules reproduce the processed distribution exactly; drafters receive the same
// controls in their draft_request, so that q can follow them too.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// Truncations of the softmax at the request's temperature, applied in this order on its fixed-point
/// weights (cpu/sampling_controls.hpp): min-p, top-k, then top-p on what is left. The most probable
/// token always survives, so greedy decoding (T < 1e-5) is unchanged by them.
struct sampling_controls {
  int top_k = 0;       ///< keep the k heaviest tokens (every token tied with the k-th as well); 0 = off
  float top_p = 1.0f;  ///< keep the heaviest tokens until their mass reaches top_p of the total (ties kept); 1 = off
  float min_p = 0.0f;  ///< keep tokens with probability >= min_p × the largest probability; 0 = off

  [[nodiscard]] constexpr bool active() const { return top_k > 0 || top_p < 1.0f || min_p > 0.0f; }
  /// success, or invalid_argument for top_k < 0, top_p outside (0, 1], min_p outside [0, 1].
  [[nodiscard]] constexpr status check() const {
    const bool ok = top_k >= 0 && top_p > 0.0f && top_p <= 1.0f && min_p >= 0.0f && min_p <= 1.0f;
    return ok ? status::success : status::invalid_argument;
  }
};

/// A logits processor: rewrites the logits row that follows `prefix` (every committed token, then the
/// block's tokens up to that row) in place — penalties, bans, grammar masks (-inf masks a token). It
/// must be a function of `prefix` and the row only: the decoder calls it on each target row it decides
/// on, and drafters that honour it call it on their own rows.
using logits_processor = std::function<void(std::span<const token_id> prefix, std::span<float> row)>;

}  // namespace blockpilot
