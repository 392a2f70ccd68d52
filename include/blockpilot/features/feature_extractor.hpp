// The feature_extractor concepts (logits row, or the whole request -> policy input vector), loading an
// extractor from the metadata stored next to the policy weights, and the metadata field parsing shared
// by the extractors.
#pragma once

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "blockpilot/concepts.hpp"
#include "blockpilot/detail/compact_statistics.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// What every extractor describes of itself:
/// - feature_count(vocab): length of `out` for a row of `vocab` logits.
/// - workspace_size(vocab): floats of caller-owned workspace extract() needs (arithmetic on the shape).
/// - metadata(): name and parameters as text, stored in weight files so a policy reloads the exact
///   extractor it was trained with.
/// - F::name: a static constexpr std::string_view, also metadata()["name"].
template <class F>
concept described_extractor = requires(const F& f, std::int64_t vocab) {
  { f.feature_count(vocab) } -> std::convertible_to<std::int64_t>;
  { f.workspace_size(vocab) } -> std::convertible_to<std::size_t>;
  { f.metadata() } -> std::convertible_to<std::map<std::string, std::string>>;
  { F::name } -> std::convertible_to<std::string_view>;
};

/// Turns the target's last prefill logits row `[vocab]` (host memory, fp32) into the policy's input
/// vector `[feature_count(vocab)]`. Hot path: no allocation, status codes only.
/// extract(row, workspace, out): success, workspace_too_small, invalid_argument (sizes or configuration),
/// invalid_temperature, or non_finite_logits (NaN or +inf anywhere, or no finite value; -inf is a masked token).
template <class F>
concept feature_extractor = described_extractor<F> && requires(const F& f, std::span<const float> row,
                                                               std::span<float> workspace, std::span<float> out) {
  { f.extract(row, workspace, out) } -> std::same_as<status>;
};

/// The optional capability of reading the whole request: `extract(request, workspace, out)` sees the
/// prompt's token ids (host memory) besides the last prefill row, so features can describe the text
/// itself (how much of it repeats, how often prompt lookup would have hit). Same statuses as
/// feature_extractor, and `empty_prompt` when the extractor needs a prompt and gets none.
template <class F>
concept request_feature_extractor = described_extractor<F> && requires(const F& f, const request_features& request,
                                                                       std::span<float> workspace, std::span<float> out) {
  { f.extract(request, workspace, out) } -> std::same_as<status>;
};

/// What a predictor policy can read its input with: a row extractor or a request extractor.
template <class F>
concept policy_feature_extractor = feature_extractor<F> || request_feature_extractor<F>;

/// The features of a request through either kind of extractor (a row extractor reads prefill_logits).
template <policy_feature_extractor F>
[[nodiscard]] status extract_features(const F& f, const request_features& request, std::span<float> workspace,
                                      std::span<float> out) noexcept {
  if constexpr (request_feature_extractor<F>) return f.extract(request, workspace, out);
  else return f.extract(request.prefill_logits, workspace, out);
}

/// An extractor that can be rebuilt from its metadata(): static F from_metadata(map, source).
template <class F>
concept metadata_loadable = requires(const std::map<std::string, std::string>& metadata, std::string_view source) {
  { F::from_metadata(metadata, source) } -> std::same_as<F>;
};

/// Rebuilds an extractor from the metadata read from `source` (a file name, used in messages).
/// `metadata` holds exactly the fields metadata() wrote (a weight file keeps them apart from its own,
/// e.g. under a key prefix). Throws blockpilot::error naming `source` and the field when a field is
/// missing, unknown, malformed or out of range, or when metadata["name"] is not F::name.
template <policy_feature_extractor F>
[[nodiscard]] F make_feature_extractor(const std::map<std::string, std::string>& metadata, std::string_view source) {
  static_assert(metadata_loadable<F>,
                "make_feature_extractor<F>: give F a `static F from_metadata(const std::map<std::string, "
                "std::string>&, std::string_view source)` that validates every field and throws blockpilot::error");
  return F::from_metadata(metadata, source);
}

namespace detail {

/// Reads the fields of one extractor's metadata; every failure throws blockpilot::error as
/// "<source>: feature metadata field '<field>': <what>".
class metadata_reader {
 public:
  /// Checks that metadata["name"] equals `name`.
  metadata_reader(const std::map<std::string, std::string>& fields, std::string_view source, std::string_view name)
      : fields_(fields), source_(source) {
    if (text("name") != name) fail("name", "expected '" + std::string(name) + "', got '" + text("name") + "'");
  }

  [[nodiscard]] const std::string& text(std::string_view field) const {
    const auto it = fields_.find(std::string(field));
    if (it == fields_.end()) fail(field, "missing");
    return it->second;
  }

  /// An integer in [lo, hi].
  [[nodiscard]] std::int64_t integer(std::string_view field, std::int64_t lo, std::int64_t hi) const {
    const std::string& s = text(field);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
      fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + s + "'");
    }
    return v;
  }

  /// A float (also "inf" or "nan"; callers validate the range).
  [[nodiscard]] float real(std::string_view field) const {
    const std::string& s = text(field);
    float v = 0.0f;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) fail(field, "expected a number, got '" + s + "'");
    return v;
  }

  /// The field "temperature", which must satisfy valid_temperature().
  [[nodiscard]] float temperature() const {
    const float t = real("temperature");
    if (!valid_temperature(t)) fail("temperature", "expected a finite number > 0 with a finite inverse, got '" + text("temperature") + "'");
    return t;
  }

  /// Rejects fields outside `known` (a misspelt or foreign field would otherwise be silently ignored).
  void no_other_fields(std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : fields_) {
      if (std::find(known.begin(), known.end(), key) == known.end()) fail(key, "unknown field");
    }
  }

  [[noreturn]] void fail(std::string_view field, const std::string& what) const {
    throw error(std::string(source_) + ": feature metadata field '" + std::string(field) + "': " + what);
  }

 private:
  const std::map<std::string, std::string>& fields_;
  std::string_view source_;
};

/// Shortest text that parses back to exactly `v`.
[[nodiscard]] inline std::string format_float(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace detail
}  // namespace blockpilot
