// The maths the CPU and CUDA compact feature passes share, written once for host and device: the
// temperature they accept, the number of statistics after the top-k probabilities, and the statistics
// themselves from a row's moments (in compact_statistic's order, features/compact.hpp).
#pragma once

#include <cmath>
#include <limits>

#include "blockpilot/detail/config.hpp"

namespace blockpilot::detail {

/// Statistics after the top-k probabilities of a compact feature vector.
inline constexpr int compact_statistic_count = 9;

/// A softmax temperature the extractors accept: finite, > 0, and with a finite inverse.
BLOCKPILOT_HOST_DEVICE constexpr bool valid_temperature(float t) noexcept {
  return t > 0.0f && t <= std::numeric_limits<float>::max() && 1.0f / t <= std::numeric_limits<float>::max();
}

/// log2(e) / T as the one float factor by which the CPU pass scales a row (its rounding scales the
/// row rather than shifting it).
BLOCKPILOT_HOST_DEVICE inline float log2e_over_temperature(float inv_t) noexcept {
  return static_cast<float>(1.4426950408889634 * static_cast<double>(inv_t));
}

/// The largest |row max · log2(e) / T| the feature passes take: the CPU pass measures the row against
/// a float reference near that value, which must resolve it within its rebase margin (92), so the
/// reference's spacing must stay below 92 (it is 64 just below 2^30). Beyond it, at temperatures where
/// the distribution is one-hot in any case (T < 1e-8 for a logit of 20), a row is non_finite_logits on
/// both backends.
inline constexpr float max_scaled_logit = 1073741824.0f;  // 2^30

/// Whether a row whose largest finite logit is `row_max` is within max_scaled_logit at temperature 1 / inv_t.
BLOCKPILOT_HOST_DEVICE inline bool scaled_max_in_range(float row_max, float inv_t) noexcept {
  return fabsf(row_max * log2e_over_temperature(inv_t)) < max_scaled_logit;
}

/// What a pass measures of a row (y = row / T, p = softmax(y), d = the log-weight of a token in nats
/// relative to the pass's reference, z = sum e^d).
struct compact_row_moments {
  double log_z;         ///< log z
  double mean_d;        ///< E_p[d]
  double mean_d2;       ///< E_p[d^2]
  double log_sum_exp;   ///< log sum exp(y)
  double max_y;         ///< max y
  double margin;        ///< top-1 minus top-2 of y (88 when there is no second finite logit)
  double top_k_mass;    ///< sum of the k probabilities
  double near_max;      ///< top-k tokens with y >= max y - 2
  double vocab;         ///< V
};

/// The compact statistics of a row, in compact_statistic's order, into out[0, compact_statistic_count).
/// Returns whether every one is finite as an Out (a finite moment can overflow a float).
template <class Out>
BLOCKPILOT_HOST_DEVICE inline bool compact_statistics(const compact_row_moments& m, Out* out) {
  const double entropy = fmax(m.log_z - m.mean_d, 0.0);
  out[0] = static_cast<Out>(entropy);
  out[1] = static_cast<Out>(fmax(m.mean_d2 - m.mean_d * m.mean_d, 0.0));
  out[2] = static_cast<Out>(m.log_sum_exp);
  out[3] = static_cast<Out>(m.max_y);
  out[4] = static_cast<Out>(fmin(m.margin, 88.0));
  out[5] = static_cast<Out>(m.top_k_mass);
  out[6] = static_cast<Out>(exp(entropy));
  out[7] = static_cast<Out>(m.near_max);
  out[8] = static_cast<Out>(log(m.vocab));
  bool finite = true;
  for (int i = 0; i < compact_statistic_count; ++i)
    finite = finite && fabs(static_cast<double>(out[i])) <= static_cast<double>(std::numeric_limits<Out>::max());
  return finite;
}

}  // namespace blockpilot::detail
