// The full_row feature extractor: the whole logits row as the policy input, raw or as (log-)probabilities
// at a temperature; the reference BlockPilot predictor reads raw rows of V = 151,936 (reference B.2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "blockpilot/cpu/row_kernels.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// What full_row_features writes for a row x `[V]` at temperature T.
enum class input_transform {
  raw_logits,         ///< x (T ignored)
  probabilities,      ///< softmax(x / T)
  log_probabilities,  ///< x / T - logsumexp(x / T); masked (-inf) tokens stay -inf
};

[[nodiscard]] constexpr std::string_view to_string(input_transform t) noexcept {
  switch (t) {
    case input_transform::raw_logits: return "raw_logits";
    case input_transform::probabilities: return "probabilities";
    case input_transform::log_probabilities: return "log_probabilities";
  }
  return "unknown";
}

/// Inverse of to_string(input_transform); nullopt for any other text.
[[nodiscard]] constexpr std::optional<input_transform> parse_input_transform(std::string_view s) noexcept {
  for (const auto t : {input_transform::raw_logits, input_transform::probabilities, input_transform::log_probabilities}) {
    if (to_string(t) == s) return t;
  }
  return std::nullopt;
}

/// The whole row as features: out `[V]` = transform(row `[V]`), host fp32; no workspace.
/// Three passes at most (max and checks; exp and sum; scale), all vectorised.
/// Preconditions checked by extract(): V >= 1; temperature valid (finite, > 0, finite inverse) unless
/// transform is raw_logits.
struct full_row_features {
  input_transform transform = input_transform::raw_logits;
  float temperature = 1.0f;

  static constexpr std::string_view name = "full_row";

  [[nodiscard]] constexpr std::int64_t feature_count(std::int64_t vocab) const noexcept { return vocab; }
  [[nodiscard]] constexpr std::size_t workspace_size(std::int64_t) const noexcept { return 0; }

  /// success, invalid_argument (vocab < 1 or an unknown transform) or invalid_temperature.
  [[nodiscard]] status can_implement(std::int64_t vocab) const noexcept {
    if (vocab < 1 || !parse_input_transform(to_string(transform))) return status::invalid_argument;
    const bool needs_t = transform != input_transform::raw_logits;
    return needs_t && !detail::valid_temperature(temperature) ? status::invalid_temperature : status::success;
  }

  /// row `[V]`, workspace unused (may be empty), out `[V]`, all host memory.
  [[nodiscard]] status extract(std::span<const float> row, std::span<float>, std::span<float> out) const noexcept {
    if (const status s = can_implement(static_cast<std::int64_t>(row.size())); s != status::success) return s;
    if (out.size() != row.size()) return status::invalid_argument;
    float max = 0.0f;
    if (const status s = cpu_detail::row_kernels::row_max(row, max); s != status::success) return s;
    const float inv_t = 1.0f / temperature, ref = max * inv_t;
    switch (transform) {
      case input_transform::raw_logits:
        std::copy(row.begin(), row.end(), out.begin());
        break;
      case input_transform::probabilities: {
        const auto inv_z = static_cast<float>(1.0 / cpu_detail::row_kernels::sum_exp(row, inv_t, ref, out));
        for (float& p : out) p *= inv_z;
        break;
      }
      case input_transform::log_probabilities: {
        const float log_z = static_cast<float>(std::log(cpu_detail::row_kernels::sum_exp(row, inv_t, ref, out)));
        for (std::size_t i = 0; i < row.size(); ++i) out[i] = cpu_detail::row_kernels::generic::scaled(row[i], inv_t, ref) - log_z;
        break;
      }
    }
    return status::success;
  }

  /// {name, transform, temperature}.
  [[nodiscard]] std::map<std::string, std::string> metadata() const {
    return {{"name", std::string(name)},
            {"transform", std::string(to_string(transform))},
            {"temperature", detail::format_float(temperature)}};
  }

  /// Inverse of metadata(); throws blockpilot::error naming `source` and the offending field.
  [[nodiscard]] static full_row_features from_metadata(const std::map<std::string, std::string>& metadata,
                                                       std::string_view source) {
    const detail::metadata_reader r(metadata, source, name);
    r.no_other_fields({"name", "transform", "temperature"});
    const auto t = parse_input_transform(r.text("transform"));
    if (!t) r.fail("transform", "expected raw_logits, probabilities or log_probabilities, got '" + r.text("transform") + "'");
    return {*t, *t == input_transform::raw_logits ? r.real("temperature") : r.temperature()};
  }
};

}  // namespace blockpilot
