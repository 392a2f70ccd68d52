// The sampling controls as cuts of a row's fixed-point weights, written once for the CPU and CUDA: min-p,
// top-k and top-p each keep the weights >= a threshold, so together they keep the weights >= the largest
// threshold. Top-k and top-p find theirs by a radix selection on the weights (11 bits a pass, from the
// top), which needs no copy of the row and whose passes a CUDA block runs as histograms.
#pragma once

#include <cmath>
#include <cstdint>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/detail/config.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"

namespace blockpilot::detail {

/// min-p's threshold: ceil(min_p · 2^40) (the row's largest weight is 2^40).
BLOCKPILOT_HOST_DEVICE inline std::uint64_t min_p_threshold(float min_p) {
  return static_cast<std::uint64_t>(ceil(static_cast<double>(min_p) * weight_scale));
}

/// top-p's target mass: ceil(top_p · total), within [1, total].
BLOCKPILOT_HOST_DEVICE inline std::uint64_t nucleus_target(float top_p, std::uint64_t total) {
  const auto target = static_cast<std::uint64_t>(ceil(static_cast<double>(top_p) * static_cast<double>(total)));
  return target < 1 ? 1 : target > total ? total : target;
}

/// A weight after the cut at `threshold`.
BLOCKPILOT_HOST_DEVICE inline std::uint64_t cut_weight(std::uint64_t w, std::uint64_t threshold) {
  return w >= threshold ? w : 0;
}

/// The selection: the largest w such that the elements whose weight is >= w have a mass >= target (mass
/// = 1 an element: the target-th largest weight, top-k's; mass = the weight: the nucleus threshold,
/// top-p's). Weights are <= 2^40, so four passes of 11 bits decide w, the highest digit first (a
/// 2,048-bin histogram of 64-bit masses: 16 KiB, in L1 or shared memory).
inline constexpr int weight_select_digit_bits = 11;
inline constexpr int weight_select_passes = 4;
inline constexpr int weight_select_bins = 1 << weight_select_digit_bits;
static_assert(weight_select_digit_bits * weight_select_passes > weight_bits);

/// A selection's progress (trivial, for shared memory: start from `{}`).
struct weight_select_state {
  std::uint64_t prefix;  ///< the digits decided so far
  std::uint64_t above;   ///< the mass of the elements above the prefix
};

/// The bit position of pass `pass`'s digit.
BLOCKPILOT_HOST_DEVICE inline int weight_select_shift(int pass) {
  return weight_select_digit_bits * (weight_select_passes - 1 - pass);
}

/// Whether weight `w` still matches the decided digits in the pass at `shift`.
BLOCKPILOT_HOST_DEVICE inline bool weight_select_candidate(std::uint64_t w, int shift, std::uint64_t prefix) {
  return (w >> (shift + weight_select_digit_bits)) == prefix;
}

/// Its digit in that pass.
BLOCKPILOT_HOST_DEVICE inline int weight_select_digit(std::uint64_t w, int shift) {
  return static_cast<int>((w >> shift) & (weight_select_bins - 1));
}

/// Ends a pass, given the masses of its candidates per digit: the highest digit d whose bins d.. plus
/// `above` reach `target` (digit 0 when none does earlier: the caller guarantees the total reaches it).
BLOCKPILOT_HOST_DEVICE inline void weight_select_step(const std::uint64_t* histogram, std::uint64_t target,
                                                      weight_select_state& s) {
  std::uint64_t above = s.above;
  int d = weight_select_bins - 1;
  for (; d > 0 && above + histogram[d] < target; --d) above += histogram[d];
  s.above = above;
  s.prefix = (s.prefix << weight_select_digit_bits) | static_cast<std::uint64_t>(d);
}

/// The row's cut for `controls` (active and valid) on `vocab` weights: keep the weights >= the result.
/// min-p, then top-k on what min-p keeps, then top-p on what is left, each cut at least 1 (the
/// heaviest weight, 2^40, always stays). `select(target, by_mass, cut)` runs the selection over the row's
/// weights after `cut` (by_mass: mass = weight, else 1); `total(cut)` sums them.
BLOCKPILOT_EXEC_CHECK_DISABLE
template <class Select, class Total>
BLOCKPILOT_HOST_DEVICE std::uint64_t controls_cut(const sampling_controls& controls, std::int64_t vocab, Select&& select,
                                                  Total&& total) {
  const auto at_least = [](std::uint64_t a, std::uint64_t b) { return a > b ? a : b; };
  std::uint64_t cut = controls.min_p > 0.0f ? min_p_threshold(controls.min_p) : 0;
  if (controls.top_k > 0 && controls.top_k < vocab)
    cut = at_least(cut, at_least(select(static_cast<std::uint64_t>(controls.top_k), false, cut), 1));
  if (controls.top_p < 1.0f) cut = at_least(cut, at_least(select(nucleus_target(controls.top_p, total(cut)), true, cut), 1));
  return cut;
}

}  // namespace blockpilot::detail
