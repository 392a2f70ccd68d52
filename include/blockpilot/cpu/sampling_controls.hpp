// top-k, top-p and min-p on a row of fixed-point softmax weights (cpu/row_ops.hpp): integer thresholds,
// so that the kept set does not depend on any summation order. Expected O(vocab) per row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"

namespace blockpilot::cpu_detail {

/// The largest w such that the weights >= w sum to at least `target` (> 0, <= their total): the
/// nucleus threshold. A weighted quickselect over `values`, which it reorders.
[[nodiscard]] inline std::uint64_t mass_threshold(std::span<std::uint64_t> values, std::uint64_t target) {
  std::size_t lo = 0, hi = values.size();  // the candidates are values[lo, hi)
  std::uint64_t needed = target;           // mass still needed from the candidates
  while (hi > lo) {
    const std::uint64_t pivot = values[lo + (hi - lo) / 2];
    // [lo, gt) > pivot, [gt, eq) == pivot, [eq, hi) < pivot
    const auto first = values.begin() + static_cast<std::ptrdiff_t>(lo), last = values.begin() + static_cast<std::ptrdiff_t>(hi);
    const auto greater_end = std::partition(first, last, [&](std::uint64_t v) { return v > pivot; });
    const auto equal_end = std::partition(greater_end, last, [&](std::uint64_t v) { return v == pivot; });
    std::uint64_t greater = 0;
    for (auto it = first; it != greater_end; ++it) greater += *it;
    const std::uint64_t equal = pivot * static_cast<std::uint64_t>(equal_end - greater_end);
    if (greater >= needed) {
      hi = static_cast<std::size_t>(greater_end - values.begin());
    } else if (greater + equal >= needed) {
      return pivot;
    } else {
      needed -= greater + equal;
      lo = static_cast<std::size_t>(equal_end - values.begin());
    }
  }
  return 0;  // unreachable when target <= the total
}

/// Applies `controls` to `weights` (zeroing what they cut) whose sum is `total`; returns the new sum
/// (> 0: the heaviest token, weight 2^40, always stays). `scratch` holds >= weights.size() entries.
[[nodiscard]] inline std::uint64_t apply_sampling_controls(std::span<std::uint64_t> weights, std::uint64_t total,
                                                           const sampling_controls& controls,
                                                           std::span<std::uint64_t> scratch) {
  if (!controls.active()) return total;
  const auto cut_below = [&](std::uint64_t threshold) {
    std::uint64_t sum = 0;
    for (auto& w : weights) {
      w = w >= threshold ? w : 0;
      sum += w;
    }
    return sum;
  };
  if (controls.min_p > 0.0f)
    total = cut_below(static_cast<std::uint64_t>(std::ceil(static_cast<double>(controls.min_p) * detail::weight_scale)));
  const auto kept = scratch.first(weights.size());
  if (controls.top_k > 0 && static_cast<std::size_t>(controls.top_k) < weights.size()) {
    std::copy(weights.begin(), weights.end(), kept.begin());
    const auto kth = kept.begin() + (controls.top_k - 1);
    std::nth_element(kept.begin(), kth, kept.end(), std::greater<>());
    total = cut_below(std::max<std::uint64_t>(*kth, 1));
  }
  if (controls.top_p < 1.0f) {
    std::copy(weights.begin(), weights.end(), kept.begin());
    const auto target = static_cast<std::uint64_t>(std::ceil(static_cast<double>(controls.top_p) * static_cast<double>(total)));
    total = cut_below(std::max<std::uint64_t>(mass_threshold(kept, std::clamp<std::uint64_t>(target, 1, total)), 1));
  }
  return total;
}

}  // namespace blockpilot::cpu_detail
