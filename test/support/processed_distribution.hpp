// The sampling controls applied to a six-token distribution in double precision, independently of the
// library, and the chi-square test of sampled counts against it: shared by the CPU and CUDA sampling tests.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>

#include "blockpilot/acceptance/sampling.hpp"
#include "support/six_token_rows.hpp"

namespace blockpilot::testing {

/// Chi-square critical values at significance 0.001 for 1..5 degrees of freedom.
inline constexpr double chi2_critical[six] = {0, 10.828, 13.816, 16.266, 18.467, 20.515};

using six_counts = std::array<std::int64_t, six>;

/// `p` after min-p, top-k and top-p (in that order, ties at each cut kept), renormalised.
inline six_dist processed(const six_dist& p, const sampling_controls& c) {
  six_dist out = p;
  const double top = *std::max_element(p.begin(), p.end());
  for (auto& x : out)
    if (x < c.min_p * top) x = 0;
  if (c.top_k > 0) {
    six_dist sorted = out;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<std::size_t>(std::min(c.top_k, six) - 1)];
    for (auto& x : out)
      if (x < kth) x = 0;
  }
  if (c.top_p < 1.0f) {
    six_dist sorted = out;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double total = std::accumulate(out.begin(), out.end(), 0.0);
    double mass = 0, threshold = 0;
    for (const double x : sorted) {
      mass += x;
      threshold = x;
      if (mass >= c.top_p * total) break;
    }
    for (auto& x : out)
      if (x < threshold) x = 0;
  }
  const double total = std::accumulate(out.begin(), out.end(), 0.0);
  for (auto& x : out) x /= total;
  return out;
}

/// Chi-square over the cells `p` keeps (`dof` = their number − 1); infinite when a cut token was sampled.
inline double chi_square(const six_counts& counts, const six_dist& p, int& dof) {
  std::int64_t n = 0;
  for (const auto c : counts) n += c;
  double chi2 = 0;
  dof = -1;
  for (std::size_t i = 0; i < six; ++i) {
    if (p[i] == 0) {
      if (counts[i] > 0) chi2 = std::numeric_limits<double>::infinity();
      continue;
    }
    ++dof;
    const double e = static_cast<double>(n) * p[i];
    chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return chi2;
}

/// Whether the counts pass the test at significance 0.001: no cut token sampled, and with one kept token or
/// below the critical value.
inline bool passes_chi_square(double chi2, int dof) {
  return chi2 != std::numeric_limits<double>::infinity() && (dof == 0 || chi2 < chi2_critical[dof]);
}

}  // namespace blockpilot::testing
