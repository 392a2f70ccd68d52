// The compact feature extractor: the sorted top-k probabilities and a few softmax statistics of one
// logits row, computed in one streaming pass (CPU implementation in cpu/row_kernels.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "blockpilot/cpu/row_kernels.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// The statistics that follow the top-k probabilities in a compact feature vector: statistic s sits at
/// out[top_k + s]. All are finite. p = softmax(row / T), y = row / T; masked (-inf) tokens have p = 0.
enum class compact_statistic : int {
  entropy,           ///< H = -sum p log p, in nats
  varentropy,        ///< variance of -log p under p, in nats^2
  log_sum_exp,       ///< log sum exp(y)
  max_logit,         ///< max y
  top1_margin,       ///< top-1 minus top-2 of y, capped at 88 (also the value when no second finite logit exists)
  top_k_mass,        ///< sum of the k probabilities
  effective_tokens,  ///< exp(H), between 1 and the number of unmasked tokens
  near_max_tokens,   ///< number of top-k tokens with y >= max y - 2 (exact when it is below k)
  log_vocab,         ///< log V, the entropy of a uniform row
};

/// Number of compact_statistic values.
inline constexpr std::int64_t compact_statistic_count = detail::compact_statistic_count;

[[nodiscard]] constexpr std::string_view to_string(compact_statistic s) noexcept {
  constexpr std::string_view names[compact_statistic_count] = {
      "entropy", "varentropy", "log_sum_exp", "max_logit", "top1_margin",
      "top_k_mass", "effective_tokens", "near_max_tokens", "log_vocab"};
  return names[static_cast<int>(s)];
}

/// Compact features of a logits row `[V]` (host, fp32):
/// out `[top_k + compact_statistic_count]` = the top_k largest probabilities of softmax(row / T) in
/// descending order (0 where fewer than top_k tokens are unmasked), then the compact_statistic values.
/// One streaming pass over the row (vectorised exp with relative error < 2.5e-7, float lane sums folded
/// into doubles every 1024 elements); workspace: a top-k candidate buffer of 3 max(top_k, 2) + 64 floats.
/// Preconditions checked by extract(): 1 <= top_k <= min(V, max_top_k); temperature valid
/// (finite, > 0, finite inverse).
struct compact_features {
  int top_k = 256;
  float temperature = 1.0f;

  static constexpr std::string_view name = "compact";
  static constexpr int max_top_k = 4096;

  [[nodiscard]] constexpr std::int64_t feature_count(std::int64_t) const noexcept {
    return top_k + compact_statistic_count;
  }
  [[nodiscard]] constexpr std::size_t workspace_size(std::int64_t) const noexcept {
    return cpu_detail::row_kernels::compact_workspace_size(top_k);
  }
  /// Index of statistic s in the output.
  [[nodiscard]] constexpr std::int64_t offset(compact_statistic s) const noexcept {
    return top_k + static_cast<std::int64_t>(s);
  }

  /// success, invalid_argument (vocab < 1 or top_k outside [1, min(vocab, max_top_k)]) or invalid_temperature.
  [[nodiscard]] status can_implement(std::int64_t vocab) const noexcept {
    if (vocab < 1 || top_k < 1 || top_k > max_top_k || top_k > vocab) return status::invalid_argument;
    return detail::valid_temperature(temperature) ? status::success : status::invalid_temperature;
  }

  /// row `[V]`, workspace `[>= workspace_size(V)]`, out `[feature_count(V)]`, all host memory.
  /// non_finite_logits for a row with NaN, +inf or nothing finite, or whose maximum times log2(e) / T
  /// reaches 2^30 (detail::max_scaled_logit: T below about 1e-8, where the distribution is one-hot).
  [[nodiscard]] status extract(std::span<const float> row, std::span<float> workspace, std::span<float> out) const noexcept {
    const auto vocab = static_cast<std::int64_t>(row.size());
    if (const status s = can_implement(vocab); s != status::success) return s;
    if (static_cast<std::int64_t>(out.size()) != feature_count(vocab)) return status::invalid_argument;
    if (workspace.size() < workspace_size(vocab)) return status::workspace_too_small;
    return cpu_detail::row_kernels::compact_pass(row, top_k, 1.0f / temperature, workspace, out);
  }

  /// {name, top_k, temperature, statistics}; "statistics" lists the output layout so weight files
  /// written with another layout are rejected on load.
  [[nodiscard]] std::map<std::string, std::string> metadata() const {
    return {{"name", std::string(name)},
            {"top_k", std::to_string(top_k)},
            {"temperature", detail::format_float(temperature)},
            {"statistics", statistics_list()}};
  }

  /// Inverse of metadata(); throws blockpilot::error naming `source` and the offending field.
  [[nodiscard]] static compact_features from_metadata(const std::map<std::string, std::string>& metadata,
                                                      std::string_view source) {
    const detail::metadata_reader r(metadata, source, name);
    r.no_other_fields({"name", "top_k", "temperature", "statistics"});
    if (r.text("statistics") != statistics_list()) {
      r.fail("statistics", "this build writes '" + statistics_list() + "', got '" + r.text("statistics") + "'");
    }
    return {static_cast<int>(r.integer("top_k", 1, max_top_k)), r.temperature()};
  }

  /// The compact_statistic names in output order, comma separated.
  [[nodiscard]] static std::string statistics_list() {
    std::string s;
    for (int i = 0; i < compact_statistic_count; ++i) {
      s += (i ? "," : "");
      s += to_string(static_cast<compact_statistic>(i));
    }
    return s;
  }
};

}  // namespace blockpilot
