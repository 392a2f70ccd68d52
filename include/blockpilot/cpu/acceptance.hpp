// CPU implementations of the three acceptance rules. Only rows that a rule reads are touched:
// greedy and sample-and-match stop at the first mismatch.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"

namespace blockpilot {

namespace cpu_detail {

/// Whether a view has data for `rows` rows of `cols` columns (rows starting at least a row apart).
[[nodiscard]] inline bool holds(const matrix_view<const float>& m, std::int64_t rows, std::int64_t cols) {
  return rows <= 0 || (m.data != nullptr && m.rows >= rows && m.cols == cols && m.row_stride >= cols);
}

/// Shape checks shared by every rule: b >= 1 rows of the same vocabulary as the block, at most 2^22 wide.
[[nodiscard]] inline status check_acceptance_input(const acceptance_input& in) {
  const auto b = static_cast<std::int64_t>(in.block.size());
  if (b < 1 || in.target_logits.rows != b || in.target_logits.cols < 1 || in.target_logits.cols > detail::max_sampling_vocab ||
      !holds(in.target_logits, b, in.target_logits.cols))
    return status::invalid_argument;
  if (!detail::valid_sampling_temperature(in.temperature)) return status::invalid_temperature;
  if (const status s = in.sampling.check(); s != status::success) return s;
  for (const token_id t : in.block)
    if (t < 0 || t >= in.target_logits.cols) return status::invalid_token;
  return status::success;
}

/// The workspace of the sampling rules: a weight row, so 8-byte aligned (as any new, malloc or
/// vector allocation is).
inline constexpr std::size_t sampling_workspace_size(std::int64_t vocab) {
  return static_cast<std::size_t>(vocab) * sizeof(std::uint64_t);
}
[[nodiscard]] inline status check_sampling_workspace(std::span<std::byte> workspace, std::int64_t vocab) {
  if (workspace.size() < sampling_workspace_size(vocab)) return status::workspace_too_small;
  return reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(std::uint64_t) == 0 ? status::success
                                                                                          : status::invalid_argument;
}
inline std::span<std::uint64_t> weight_row(std::span<std::byte> workspace, std::int64_t vocab) {
  return {reinterpret_cast<std::uint64_t*>(workspace.data()), static_cast<std::size_t>(vocab)};
}

/// Walk rows 0..b-1, producing the target's token at each row with `token_at(j, token)`, and stop
/// at the first row whose token differs from the next draft.
template <class TokenAt>
[[nodiscard]] status match_prefix(const acceptance_input& in, TokenAt&& token_at, acceptance_result& out) {
  const int b = static_cast<int>(in.block.size());
  for (int j = 0; j < b; ++j) {
    token_id t;
    if (const status s = token_at(j, t); s != status::success) return s;
    if (j + 1 == b || in.block[static_cast<std::size_t>(j) + 1] != t) {
      out = {j, t};
      return status::success;
    }
  }
  return status::success;  // unreachable: the loop returns at j = b - 1
}

}  // namespace cpu_detail

template <>
struct acceptance_op<greedy_match, cpu_backend> {
  static constexpr std::size_t workspace_size(int, std::int64_t) { return 0; }
  [[nodiscard]] static status run(const acceptance_input& in, std::span<std::byte>, acceptance_result& out) {
    if (const status s = cpu_detail::check_acceptance_input(in); s != status::success) return s;
    return cpu_detail::match_prefix(
        in, [&](int j, token_id& t) { return cpu_detail::argmax_row(in.target_logits.row(j), t); }, out);
  }
};

template <>
struct acceptance_op<sample_and_match, cpu_backend> {
  static constexpr std::size_t workspace_size(int, std::int64_t vocab) { return cpu_detail::sampling_workspace_size(vocab); }
  [[nodiscard]] static status run(const acceptance_input& in, std::span<std::byte> workspace, acceptance_result& out) {
    if (const status s = cpu_detail::check_acceptance_input(in); s != status::success) return s;
    const std::int64_t vocab = in.target_logits.cols;
    if (const status s = cpu_detail::check_sampling_workspace(workspace, vocab); s != status::success) return s;
    const auto weights = cpu_detail::weight_row(workspace, vocab);
    return cpu_detail::match_prefix(
        in,
        [&](int j, token_id& t) {
          return cpu_detail::sample_row(in.target_logits.row(j), in.temperature,
                                        in.rng.bits64(static_cast<std::uint32_t>(j), random_domain::target_sample),
                                        weights, t, in.sampling);
        },
        out);
  }
};

template <>
struct acceptance_op<rejection_sampling, cpu_backend> {
  static constexpr std::size_t workspace_size(int, std::int64_t vocab) { return cpu_detail::sampling_workspace_size(vocab); }

  [[nodiscard]] static status run(const acceptance_input& in, std::span<std::byte> workspace, acceptance_result& out) {
    if (const status s = cpu_detail::check_acceptance_input(in); s != status::success) return s;
    const int b = static_cast<int>(in.block.size());
    const std::int64_t vocab = in.target_logits.cols;
    if (!cpu_detail::holds(in.draft_probs, b - 1, vocab)) return status::invalid_argument;
    if (in.temperature < detail::greedy_temperature)  // p is one-hot: exactly greedy match
      return acceptance_op<greedy_match, cpu_backend>::run(in, workspace, out);
    if (const status s = cpu_detail::check_sampling_workspace(workspace, vocab); s != status::success) return s;
    const auto weights = cpu_detail::weight_row(workspace, vocab);

    for (int j = 0; j + 1 < b; ++j) {
      const auto row = in.target_logits.row(j);
      float m;
      token_id argmax;
      if (const status s = cpu_detail::checked_max(row, m, argmax); s != status::success) return s;
      const std::uint64_t total = cpu_detail::controlled_weights(row, m, in.temperature, in.sampling, weights);
      const token_id x = in.block[static_cast<std::size_t>(j) + 1];
      const float qx = in.draft_probs.row(j)[static_cast<std::size_t>(x)];
      const double px = static_cast<double>(weights[static_cast<std::size_t>(x)]) / static_cast<double>(total);
      const bool draft_from_q = qx > 0.0f && std::isfinite(qx);
      if (draft_from_q && in.rng.uniform(static_cast<std::uint32_t>(j), random_domain::accept_test) * qx < px)
        continue;
      const std::uint64_t bits = in.rng.bits64(static_cast<std::uint32_t>(j), random_domain::residual_sample);
      std::uint64_t mass = total;
      if (draft_from_q) {
        mass = residual_weights(in.draft_probs.row(j), total, weights);
        if (mass == 0) mass = cpu_detail::controlled_weights(row, m, in.temperature, in.sampling, weights);  // empty residual: p
      }
      out = {j, cpu_detail::pick_by_weight(weights, mass, bits)};
      return status::success;
    }
    out.accepted = b - 1;
    return cpu_detail::sample_row(in.target_logits.row(b - 1), in.temperature,
                                  in.rng.bits64(static_cast<std::uint32_t>(b - 1), random_domain::target_sample),
                                  weights, out.bonus, in.sampling);
  }

 private:
  /// Replaces p's weights P_i by max(P_i − floor(q_i · total), 0) in place and returns their sum.
  static std::uint64_t residual_weights(std::span<const float> q, std::uint64_t total, std::span<std::uint64_t> weights) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const double qi = static_cast<double>(q[i]) * static_cast<double>(total);
      const std::uint64_t qw = !(qi > 0.0)                          ? 0
                               : qi >= static_cast<double>(total) ? total
                                                                  : static_cast<std::uint64_t>(qi);
      weights[i] = weights[i] > qw ? weights[i] - qw : 0;
      sum += weights[i];
    }
    return sum;
  }
};

}  // namespace blockpilot
