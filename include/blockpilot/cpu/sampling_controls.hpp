// top-k, top-p and min-p on a row of fixed-point softmax weights (cpu/row_ops.hpp): one integer cut
// (detail/sampling_cut.hpp, shared with CUDA), so that the kept set does not depend on any summation
// order. O(vocab) per row, in place.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/detail/sampling_cut.hpp"

namespace blockpilot::cpu_detail {

/// detail/sampling_cut.hpp's selection over `weights` after `cut`, one pass after the other: the largest
/// w such that the weights >= w have a mass >= target (mass = the weight when by_mass, else 1).
[[nodiscard]] inline std::uint64_t select_weight(std::span<const std::uint64_t> weights, std::uint64_t target, bool by_mass,
                                                 std::uint64_t cut = 0) {
  detail::weight_select_state state{};
  std::array<std::uint64_t, detail::weight_select_bins> histogram;
  for (int pass = 0; pass < detail::weight_select_passes; ++pass) {
    const int shift = detail::weight_select_shift(pass);
    histogram.fill(0);
    for (const std::uint64_t w : weights) {
      const std::uint64_t c = detail::cut_weight(w, cut);
      if (detail::weight_select_candidate(c, shift, state.prefix))
        histogram[static_cast<std::size_t>(detail::weight_select_digit(c, shift))] += by_mass ? c : 1;
    }
    detail::weight_select_step(histogram.data(), target, state);
  }
  return state.prefix;
}

/// Applies `controls` to `weights` (zeroing what they cut) whose sum is `total`; returns the new sum
/// (> 0: the heaviest token, weight 2^40, always stays).
[[nodiscard]] inline std::uint64_t apply_sampling_controls(std::span<std::uint64_t> weights, std::uint64_t total,
                                                           const sampling_controls& controls) {
  if (!controls.active()) return total;
  const auto sum_after = [&](std::uint64_t cut) {
    std::uint64_t sum = 0;
    for (const std::uint64_t w : weights) sum += detail::cut_weight(w, cut);
    return sum;
  };
  const std::uint64_t cut = detail::controls_cut(
      controls, static_cast<std::int64_t>(weights.size()),
      [&](std::uint64_t target, bool by_mass, std::uint64_t c) { return select_weight(weights, target, by_mass, c); }, sum_after);
  total = 0;
  for (auto& w : weights) total += w = detail::cut_weight(w, cut);
  return total;
}

}  // namespace blockpilot::cpu_detail
