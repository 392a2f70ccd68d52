// The per-request oracle: the best block size in hindsight from a sweep over candidate sizes
// (ties to the smaller size, as the reference label construction does).
#pragma once

#include <cstddef>
#include <span>

#include "blockpilot/status.hpp"

namespace blockpilot {

/// Index of the largest tau (the first one on ties, i.e. the smaller size when sizes ascend).
[[nodiscard]] inline std::size_t best_index(std::span<const double> tau) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < tau.size(); ++i)
    if (tau[i] > tau[best]) best = i;
  return best;
}

/// Runs `tau_of(size)` for every candidate (ascending) and returns the size with the largest tau,
/// ties to the smaller size; `taus` receives every tau ([sizes.size()]).
template <class TauOf>
[[nodiscard]] int oracle_block_size(std::span<const int> sizes, TauOf&& tau_of, std::span<double> taus) {
  if (sizes.empty() || taus.size() < sizes.size()) throw error("oracle_block_size: no candidate sizes");
  for (std::size_t i = 0; i < sizes.size(); ++i) taus[i] = tau_of(sizes[i]);
  return sizes[best_index(taus.first(sizes.size()))];
}

}  // namespace blockpilot
