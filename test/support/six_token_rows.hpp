// The six-token distributions of the acceptance and sampling tests: target rows p, draft rows q, logits
// that give p at a temperature, and drawing from q.
#pragma once

#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "blockpilot/types.hpp"

namespace blockpilot::testing {

inline constexpr int six = 6;
using six_dist = std::array<double, six>;
inline const six_dist p_rows[3] = {{0.30, 0.25, 0.20, 0.12, 0.08, 0.05}, {0.05, 0.10, 0.15, 0.20, 0.22, 0.28}, {0.4, 0.1, 0.1, 0.1, 0.2, 0.1}};
inline const six_dist q_rows[2] = {{0.10, 0.40, 0.05, 0.25, 0.05, 0.15}, {0.30, 0.02, 0.28, 0.10, 0.20, 0.10}};

/// Logits whose softmax at temperature T is `p`: T · log p.
inline std::vector<float> logits_for(std::span<const six_dist> rows, float temperature) {
  std::vector<float> out;
  for (const auto& p : rows)
    for (const double x : p) out.push_back(static_cast<float>(temperature * std::log(x)));
  return out;
}

/// The token of q at uniform u (inverse CDF).
inline token_id sample_from(const six_dist& q, double u) {
  double c = 0;
  for (int i = 0; i < six; ++i)
    if (u < (c += q[static_cast<std::size_t>(i)])) return i;
  return six - 1;
}

}  // namespace blockpilot::testing
