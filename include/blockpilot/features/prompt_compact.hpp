// The prompt_compact feature extractor: prompt features (what a drafter can copy from the text) followed
// by the compact features of the last prefill row (how sure the target is), one vector for one predictor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "blockpilot/concepts.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/features/prompt.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// out `[prompt.feature_count() + row.feature_count(V)]` = prompt features, then compact features of
/// request.prefill_logits `[V]` (host fp32). The two share one workspace (the larger of the two sizes).
struct prompt_compact_features {
  prompt_features prompt{};
  compact_features row{};

  static constexpr std::string_view name = "prompt_compact";

  [[nodiscard]] constexpr std::int64_t feature_count(std::int64_t vocab) const noexcept {
    return prompt.feature_count() + row.feature_count(vocab);
  }
  [[nodiscard]] constexpr std::size_t workspace_size(std::int64_t vocab) const noexcept {
    return std::max(prompt.workspace_size(), row.workspace_size(vocab));
  }

  [[nodiscard]] status extract(const request_features& request, std::span<float> workspace,
                               std::span<float> out) const noexcept {
    const auto vocab = static_cast<std::int64_t>(request.prefill_logits.size());
    if (static_cast<std::int64_t>(out.size()) != feature_count(vocab)) return status::invalid_argument;
    const auto split = static_cast<std::size_t>(prompt.feature_count());
    if (const status s = prompt.extract(request, workspace, out.first(split)); s != status::success) return s;
    return row.extract(request.prefill_logits, workspace, out.subspan(split));
  }

  /// {name}, the prompt extractor's fields as "prompt.<field>" and the row extractor's as "compact.<field>".
  [[nodiscard]] std::map<std::string, std::string> metadata() const {
    std::map<std::string, std::string> m{{"name", std::string(name)}};
    for (const auto& [k, v] : prompt.metadata()) if (k != "name") m["prompt." + k] = v;
    for (const auto& [k, v] : row.metadata()) if (k != "name") m["compact." + k] = v;
    return m;
  }

  /// Inverse of metadata(); throws blockpilot::error naming `source` and the offending field.
  [[nodiscard]] static prompt_compact_features from_metadata(const std::map<std::string, std::string>& metadata,
                                                             std::string_view source) {
    const detail::metadata_reader r(metadata, source, name);
    std::map<std::string, std::string> parts[2] = {{{"name", std::string(prompt_features::name)}},
                                                   {{"name", std::string(compact_features::name)}}};
    for (const auto& [k, v] : metadata) {
      if (k == "name") continue;
      if (k.starts_with("prompt.")) parts[0][k.substr(7)] = v;
      else if (k.starts_with("compact.")) parts[1][k.substr(8)] = v;
      else r.fail(k, "unknown field (expected prompt.<field> or compact.<field>)");
    }
    const std::string where(source);
    return {prompt_features::from_metadata(parts[0], where + " (prompt.)"),
            compact_features::from_metadata(parts[1], where + " (compact.)")};
  }
};

static_assert(request_feature_extractor<prompt_compact_features>);

}  // namespace blockpilot
