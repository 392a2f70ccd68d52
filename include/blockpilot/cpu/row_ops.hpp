// CPU passes over one logits row: argmax, maximum with validation, fixed-point softmax weights and
// inverse-CDF sampling. The building blocks of every acceptance rule on the CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "blockpilot/cpu/row_kernels.hpp"
#include "blockpilot/cpu/sampling_controls.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::cpu_detail {

/// Maximum of a row. NaN or +inf anywhere, or no finite value at all, is `non_finite_logits`;
/// -inf entries are masked tokens. Also returns the first index of the maximum (ties to the smaller id).
[[nodiscard]] inline status checked_max(std::span<const float> row, float& max_value, token_id& argmax) {
  if (row.empty()) return status::non_finite_logits;
  return row_kernels::checked_max(row, max_value, argmax);
}

/// Greedy token of a row (first maximum).
[[nodiscard]] inline status argmax_row(std::span<const float> row, token_id& token) {
  float m;
  return checked_max(row, m, token);
}

/// Fixed-point softmax weights of `row` at temperature T (> greedy_temperature) into `weights`
/// ([vocab], caller-owned); returns their sum, which is > 0 (the maximum has weight 2^40).
[[nodiscard]] inline std::uint64_t fill_weights(std::span<const float> row, float max_logit, float temperature,
                                                std::span<std::uint64_t> weights) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    weights[i] = detail::fixed_point_weight(row[i], max_logit, temperature);
    total += weights[i];
  }
  return total;
}

/// Inverse CDF: the first index whose running weight sum exceeds floor(r · total / 2^64).
[[nodiscard]] inline token_id pick_by_weight(std::span<const std::uint64_t> weights, std::uint64_t total,
                                             std::uint64_t random_bits) {
  const std::uint64_t threshold = detail::scale_to_range(random_bits, total);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    running += weights[i];
    if (running > threshold) return static_cast<token_id>(i);
  }
  return static_cast<token_id>(weights.size() - 1);  // unreachable: threshold < total
}

/// The fixed-point weights of softmax(row / T) after the sampling controls; returns their sum.
[[nodiscard]] inline std::uint64_t controlled_weights(std::span<const float> row, float max_logit, float temperature,
                                                      const sampling_controls& controls, std::span<std::uint64_t> weights) {
  const auto w = weights.first(row.size());
  return apply_sampling_controls(w, fill_weights(row, max_logit, temperature, w), controls);
}

/// One token from softmax(row / T) after `controls` (argmax when T < 1e-5), drawn with `random_bits`.
/// `weights` is a caller-owned [vocab] row.
[[nodiscard]] inline status sample_row(std::span<const float> row, float temperature, std::uint64_t random_bits,
                                       std::span<std::uint64_t> weights, token_id& token,
                                       const sampling_controls& controls = {}) {
  float m;
  if (const status s = checked_max(row, m, token); s != status::success) return s;
  if (temperature < detail::greedy_temperature) return status::success;
  if (static_cast<std::int64_t>(row.size()) > detail::max_sampling_vocab) return status::invalid_argument;
  const std::uint64_t total = controlled_weights(row, m, temperature, controls, weights);
  token = pick_by_weight(weights.first(row.size()), total, random_bits);
  return status::success;
}

/// q_row = a one-hot distribution on `token` (a deterministic drafter's q); nothing when q_row is empty.
inline void write_one_hot(std::span<float> q_row, token_id token) {
  if (q_row.empty()) return;
  std::ranges::fill(q_row, 0.0f);
  q_row[static_cast<std::size_t>(token)] = 1.0f;
}

/// A drafter's token from its logits row: the argmax with a one-hot q when T < 1e-5, else a sample
/// of softmax(row / T) drawn with `random_bits`, q = the fixed-point probabilities it was drawn
/// from, after `controls`. `q_row` may be empty (q not wanted); `weights` is a caller-owned [vocab] row.
[[nodiscard]] inline status draft_from_row(std::span<const float> row, float temperature, std::uint64_t random_bits,
                                           std::span<std::uint64_t> weights, std::span<float> q_row, token_id& token,
                                           const sampling_controls& controls = {}) {
  float m;
  if (const status s = checked_max(row, m, token); s != status::success) return s;
  if (temperature < detail::greedy_temperature) {
    write_one_hot(q_row, token);
    return status::success;
  }
  if (static_cast<std::int64_t>(row.size()) > detail::max_sampling_vocab) return status::invalid_argument;
  const std::uint64_t total = controlled_weights(row, m, temperature, controls, weights);
  token = pick_by_weight(weights.first(row.size()), total, random_bits);
  if (!q_row.empty())
    for (std::size_t v = 0; v < row.size(); ++v)
      q_row[v] = static_cast<float>(static_cast<double>(weights[v]) / static_cast<double>(total));
  return status::success;
}

}  // namespace blockpilot::cpu_detail
