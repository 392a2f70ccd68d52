// The prompt feature extractor: statistics of the prompt's own tokens that tell how much a drafter can
// copy from it — self-overlap of its n-grams, how often prompt lookup would have hit while reading it,
// how many drafts it would have had accepted, its length (CPU pass in cpu/prompt_statistics.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/prompt_statistics.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// The leading statistics of a prompt feature vector; after them come repeat_share(n) for n = 1..max_ngram
/// (positions whose last n tokens occurred earlier), then hit_share(n) (... and were followed there by the
/// token that follows here). Shares are over the positions of the analysed tail.
enum class prompt_statistic : int {
  log_length,       ///< log(1 + prompt tokens), the whole prompt
  distinct_share,   ///< distinct tokens / tokens of the tail
  lookup_hit,       ///< share of positions where prompt lookup (longest n-gram first) predicts the next token
  lookup_accepted,  ///< mean drafts lookup would have had accepted at a position, in a block of draft_tokens
};
inline constexpr std::int64_t prompt_statistic_count = 4;

[[nodiscard]] constexpr std::string_view to_string(prompt_statistic s) noexcept {
  constexpr std::string_view names[prompt_statistic_count] = {"log_length", "distinct_share", "lookup_hit",
                                                              "lookup_accepted"};
  return names[static_cast<int>(s)];
}

/// Prompt features of a request, from its token ids alone (the logits row is not read):
/// out `[prompt_statistic_count + 2 max_ngram]`. The tail of at most max_prompt_tokens tokens is analysed,
/// in one pass that replays lookup_drafter's rule over it with n-gram hash tables in the workspace
/// (max_ngram × 2^ceil(log2(2 max_prompt_tokens)) floats): O(tokens × max_ngram) probes, each confirmed by
/// comparing n tokens.
/// Preconditions checked by extract(): 1 <= max_ngram <= 8, 1 <= draft_tokens <= 64,
/// 1 <= max_prompt_tokens <= 2^20; a non-empty prompt (else empty_prompt).
struct prompt_features {
  int max_ngram = 3;
  int draft_tokens = 8;
  int max_prompt_tokens = 4096;

  static constexpr std::string_view name = "prompt";
  static constexpr int max_max_ngram = 8, max_draft_tokens = 64, max_max_prompt_tokens = 1 << 20;

  [[nodiscard]] constexpr std::int64_t feature_count(std::int64_t = 0) const noexcept {
    return prompt_statistic_count + 2 * std::int64_t{max_ngram};
  }
  [[nodiscard]] constexpr std::size_t workspace_size(std::int64_t = 0) const noexcept {
    return can_implement() == status::success
               ? static_cast<std::size_t>(max_ngram) * cpu_detail::prompt::table_slots(max_prompt_tokens)
               : 0;
  }
  /// Index of statistic s, of repeat_share(n) and of hit_share(n) in the output.
  [[nodiscard]] static constexpr std::int64_t offset(prompt_statistic s) noexcept { return static_cast<std::int64_t>(s); }
  [[nodiscard]] static constexpr std::int64_t repeat_offset(int n) noexcept { return prompt_statistic_count + n - 1; }
  [[nodiscard]] constexpr std::int64_t hit_offset(int n) const noexcept { return prompt_statistic_count + max_ngram + n - 1; }

  [[nodiscard]] constexpr status can_implement() const noexcept {
    const bool ok = max_ngram >= 1 && max_ngram <= max_max_ngram && draft_tokens >= 1 && draft_tokens <= max_draft_tokens &&
                    max_prompt_tokens >= 1 && max_prompt_tokens <= max_max_prompt_tokens;
    return ok ? status::success : status::invalid_argument;
  }

  /// request.prompt `[tokens]` (host), workspace `[>= workspace_size()]`, out `[feature_count()]`.
  [[nodiscard]] status extract(const request_features& request, std::span<float> workspace,
                               std::span<float> out) const noexcept {
    if (const status s = can_implement(); s != status::success) return s;
    if (static_cast<std::int64_t>(out.size()) != feature_count()) return status::invalid_argument;
    if (request.prompt.empty()) return status::empty_prompt;
    if (workspace.size() < workspace_size()) return status::workspace_too_small;
    const auto tail = request.prompt.last(std::min(request.prompt.size(), static_cast<std::size_t>(max_prompt_tokens)));
    cpu_detail::prompt::tallies t;
    if (const status s = cpu_detail::prompt::count(tail, max_ngram, draft_tokens, workspace, t); s != status::success) return s;
    out[offset(prompt_statistic::log_length)] = static_cast<float>(std::log1p(static_cast<double>(request.prompt.size())));
    out[offset(prompt_statistic::distinct_share)] = static_cast<float>(t.distinct_share);
    out[offset(prompt_statistic::lookup_hit)] = static_cast<float>(t.lookup_hit);
    out[offset(prompt_statistic::lookup_accepted)] = static_cast<float>(t.lookup_accepted);
    for (int n = 1; n <= max_ngram; ++n) {
      out[static_cast<std::size_t>(repeat_offset(n))] = static_cast<float>(t.repeat_share[n - 1]);
      out[static_cast<std::size_t>(hit_offset(n))] = static_cast<float>(t.hit_share[n - 1]);
    }
    return status::success;
  }

  /// {name, max_ngram, draft_tokens, max_prompt_tokens, statistics} ("statistics" names the layout).
  [[nodiscard]] std::map<std::string, std::string> metadata() const {
    return {{"name", std::string(name)},
            {"max_ngram", std::to_string(max_ngram)},
            {"draft_tokens", std::to_string(draft_tokens)},
            {"max_prompt_tokens", std::to_string(max_prompt_tokens)},
            {"statistics", statistics_list()}};
  }

  /// Inverse of metadata(); throws blockpilot::error naming `source` and the offending field.
  [[nodiscard]] static prompt_features from_metadata(const std::map<std::string, std::string>& metadata,
                                                     std::string_view source) {
    const detail::metadata_reader r(metadata, source, name);
    r.no_other_fields({"name", "max_ngram", "draft_tokens", "max_prompt_tokens", "statistics"});
    if (r.text("statistics") != statistics_list())
      r.fail("statistics", "this build writes '" + statistics_list() + "', got '" + r.text("statistics") + "'");
    return {static_cast<int>(r.integer("max_ngram", 1, max_max_ngram)),
            static_cast<int>(r.integer("draft_tokens", 1, max_draft_tokens)),
            static_cast<int>(r.integer("max_prompt_tokens", 1, max_max_prompt_tokens))};
  }

  /// The leading statistics' names, then "repeat_share(n)" and "hit_share(n)", comma separated.
  [[nodiscard]] static std::string statistics_list() {
    std::string s;
    for (int i = 0; i < prompt_statistic_count; ++i) s += std::string(i ? "," : "") + std::string(to_string(static_cast<prompt_statistic>(i)));
    return s + ",repeat_share(n),hit_share(n)";
  }
};

static_assert(request_feature_extractor<prompt_features> && !feature_extractor<prompt_features>);

}  // namespace blockpilot
