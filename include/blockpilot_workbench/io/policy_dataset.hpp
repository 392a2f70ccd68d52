// The training data of a block-size predictor: per prompt, the target's last prefill logits row, the
// prompt's token ids and the tau measured at every candidate size. Stored as `dataset.safetensors` next
// to the reference `<B>.json` files of the same sweep, so that replay evaluation reads it too.
// Optionally, features pooled over each request's first rows (the input of a refining policy's second
// stage).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/types.hpp"
#include "blockpilot_workbench/io/acceptance_json.hpp"
#include "blockpilot_workbench/io/safetensors.hpp"

namespace blockpilot {

/// Features pooled over the prefill row and the first committed positions' rows of each prompt,
/// decoded at `block_size` (pooled_features of the extractor that `extractor` describes).
struct pooled_rows_features {
  std::map<std::string, std::string> extractor;  ///< the extractor's metadata()
  int rows = 0;                                  ///< rows pooled per prompt, prefill row included
  int block_size = 0;                            ///< block size of the decode that produced the rows
  std::int64_t dim = 0;                          ///< features per prompt
  std::vector<float> values;                     ///< [prompts][dim]

  [[nodiscard]] std::span<const float> row(std::size_t i) const {
    return {values.data() + i * static_cast<std::size_t>(dim), static_cast<std::size_t>(dim)};
  }
  [[nodiscard]] bool same_recipe(const pooled_rows_features& o) const {
    return extractor == o.extractor && rows == o.rows && block_size == o.block_size && dim == o.dim;
  }
};

struct policy_dataset {
  std::vector<int> sizes;                      ///< candidate block sizes, ascending
  std::vector<std::string> prompts;            ///< prompt keys
  std::int64_t vocab = 0;
  std::vector<float> prefill_logits;           ///< [prompts][vocab], raw logits
  std::vector<double> tau;                     ///< [prompts][sizes]
  /// Wall seconds and generated tokens of each request ([prompts][sizes]); empty when the sweep
  /// did not record them (the step-cost fit of eval/step_cost.hpp reads them).
  std::vector<double> seconds;
  std::vector<std::int64_t> tokens;
  /// The prompts' token ids back to back, and where each starts ([prompts + 1]); both empty when the
  /// sweep did not record them (request features read them).
  std::vector<token_id> prompt_token_ids;
  std::vector<std::int64_t> prompt_offsets;
  std::map<std::string, std::string> metadata; ///< how it was made (generator, temperature, ...)
  std::optional<pooled_rows_features> pooled;  ///< present when the sweep recorded pooled features

  [[nodiscard]] std::size_t size() const { return prompts.size(); }
  [[nodiscard]] std::span<const float> row(std::size_t i) const {
    return {prefill_logits.data() + i * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab)};
  }
  [[nodiscard]] std::span<const double> taus(std::size_t i) const {
    return {tau.data() + i * sizes.size(), sizes.size()};
  }
  /// The tau values as a reference acceptance table.
  [[nodiscard]] acceptance_table acceptance(std::string source) const {
    acceptance_table t{sizes, prompts, {}, std::move(source)};
    for (std::size_t i = 0; i < size(); ++i) t.tau.emplace_back(taus(i).begin(), taus(i).end());
    return t;
  }
  [[nodiscard]] bool has_timing() const { return !seconds.empty(); }
  [[nodiscard]] bool has_prompt_tokens() const { return !prompt_offsets.empty(); }
  /// Appends one prompt; `prompt_seconds` and `prompt_tokens` either both empty (no timing) or
  /// one value per size, and `ids` (the prompt's tokens) empty or not, as for every other prompt.
  void add(std::string key, std::span<const float> logits, std::span<const double> prompt_tau,
           std::span<const double> prompt_seconds = {}, std::span<const std::int64_t> prompt_tokens = {},
           std::span<const token_id> ids = {}) {
    const bool timed = !prompt_seconds.empty();
    if (prompt_tokens.size() != prompt_seconds.size() || (timed && prompt_seconds.size() != prompt_tau.size()) ||
        (!prompts.empty() && timed != has_timing()))
      throw error("policy dataset: prompt '" + key + "': timing must be given for every prompt or for none");
    if (!prompts.empty() && ids.empty() == has_prompt_tokens())
      throw error("policy dataset: prompt '" + key + "': token ids must be given for every prompt or for none");
    if (!ids.empty()) {
      if (prompt_offsets.empty()) prompt_offsets.push_back(0);
      prompt_token_ids.insert(prompt_token_ids.end(), ids.begin(), ids.end());
      prompt_offsets.push_back(static_cast<std::int64_t>(prompt_token_ids.size()));
    }
    prompts.push_back(std::move(key));
    prefill_logits.insert(prefill_logits.end(), logits.begin(), logits.end());
    tau.insert(tau.end(), prompt_tau.begin(), prompt_tau.end());
    seconds.insert(seconds.end(), prompt_seconds.begin(), prompt_seconds.end());
    tokens.insert(tokens.end(), prompt_tokens.begin(), prompt_tokens.end());
  }
  /// Prompt i's seconds and generated tokens per size; empty without timing.
  [[nodiscard]] std::span<const double> seconds_of(std::size_t i) const {
    if (!has_timing()) return {};
    return {seconds.data() + i * sizes.size(), sizes.size()};
  }
  [[nodiscard]] std::span<const std::int64_t> tokens_of(std::size_t i) const {
    if (!has_timing()) return {};
    return {tokens.data() + i * sizes.size(), sizes.size()};
  }
  /// Prompt i's token ids; empty when the dataset has none.
  [[nodiscard]] std::span<const token_id> prompt_ids(std::size_t i) const {
    if (!has_prompt_tokens()) return {};
    const auto begin = static_cast<std::size_t>(prompt_offsets[i]), end = static_cast<std::size_t>(prompt_offsets[i + 1]);
    return {prompt_token_ids.data() + begin, end - begin};
  }
};

inline constexpr const char* policy_dataset_file = "dataset.safetensors";

/// Writes `dir/dataset.safetensors` and the `<B>.json` files.
inline void write_policy_dataset(const policy_dataset& d, const std::filesystem::path& dir) {
  io::create_folder(dir);
  io::safetensors_writer w;
  const auto n = static_cast<std::int64_t>(d.size()), s = static_cast<std::int64_t>(d.sizes.size());
  const std::vector<std::int32_t> sizes(d.sizes.begin(), d.sizes.end());
  w.add<float>("prefill_logits", {n, d.vocab}, d.prefill_logits);
  w.add<double>("tau", {n, s}, d.tau);
  w.add<std::int32_t>("block_sizes", {s}, sizes);
  if (d.has_timing()) {
    w.add<double>("seconds", {n, s}, d.seconds);
    w.add<std::int64_t>("tokens", {n, s}, d.tokens);
  }
  if (d.has_prompt_tokens()) {
    w.add<std::int32_t>("prompt_tokens", {static_cast<std::int64_t>(d.prompt_token_ids.size())}, d.prompt_token_ids);
    w.add<std::int64_t>("prompt_offsets", {n + 1}, d.prompt_offsets);
  }
  if (d.pooled) {
    const auto& p = *d.pooled;
    w.add<float>("pooled_features", {n, p.dim}, p.values);
    w.set_metadata("pooled_rows", std::to_string(p.rows));
    w.set_metadata("pooled_block_size", std::to_string(p.block_size));
    for (const auto& [k, v] : p.extractor) w.set_metadata("pooled_feature." + k, v);
  }
  for (const auto& [k, v] : d.metadata) w.set_metadata(k, v);
  w.set_metadata("format", "blockpilot-policy-dataset");
  w.set_metadata("prompts", nlohmann::json(d.prompts).dump());
  w.write(dir / policy_dataset_file);
  write_acceptance_folder(d.acceptance(dir.string()), dir);
}

/// Reads `dir/dataset.safetensors`; throws `error` naming the file and the field.
[[nodiscard]] inline policy_dataset read_policy_dataset(const std::filesystem::path& dir) {
  const auto path = dir / policy_dataset_file;
  const auto file = io::safetensors_file::read(path);
  const auto fail = [&](const std::string& field, const std::string& what) {
    return error("policy dataset '" + path.string() + "' field '" + field + "': " + what);
  };
  const auto tensor = [&](const char* name) {
    const auto* t = file.find(name);
    if (!t) throw fail(name, "missing tensor");
    return t;
  };
  policy_dataset d;
  d.metadata = file.metadata();
  if (d.metadata["format"] != "blockpilot-policy-dataset") throw fail("format", "expected 'blockpilot-policy-dataset'");
  try {
    d.prompts = nlohmann::json::parse(d.metadata.at("prompts")).get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    throw fail("prompts", std::string("not a JSON list of strings: ") + e.what());
  }
  d.metadata.erase("prompts");
  d.metadata.erase("format");
  const auto sizes = file.values<std::int32_t>(*tensor("block_sizes"));
  d.sizes.assign(sizes.begin(), sizes.end());
  if (tensor("block_sizes")->shape.size() != 1 || d.sizes.empty() || d.sizes.front() < 1 ||
      d.sizes.back() > block_size_limit || std::adjacent_find(d.sizes.begin(), d.sizes.end(), std::greater_equal<>()) != d.sizes.end())
    throw fail("block_sizes", "must be strictly ascending sizes in 1.." + std::to_string(block_size_limit));
  if (std::set<std::string> seen; std::any_of(d.prompts.begin(), d.prompts.end(), [&](const std::string& p) { return !seen.insert(p).second; }))
    throw fail("prompts", "a prompt key appears twice");
  const auto* logits = tensor("prefill_logits");
  const auto* tau = tensor("tau");
  const auto n = static_cast<std::int64_t>(d.prompts.size());
  if (logits->shape.size() != 2 || logits->shape[0] != n) throw fail("prefill_logits", "shape must be [prompts][vocab]");
  if (tau->shape != std::vector<std::int64_t>{n, static_cast<std::int64_t>(d.sizes.size())})
    throw fail("tau", "shape must be [prompts][block sizes]");
  d.vocab = logits->shape[1];
  d.prefill_logits = file.values<float>(*logits);
  d.tau = file.values<double>(*tau);
  if (const auto bad = std::ranges::find_if(d.tau, [](double t) { return !(t >= 0.0 && t <= block_size_limit); }); bad != d.tau.end())
    throw fail("tau", "entry " + std::to_string(bad - d.tau.begin()) + " is not a mean acceptance length in [0, " +
                          std::to_string(block_size_limit) + "]");
  const auto* seconds = file.find("seconds");
  const auto* tokens = file.find("tokens");
  if ((seconds == nullptr) != (tokens == nullptr)) throw fail(seconds ? "tokens" : "seconds", "missing tensor (the other timing tensor is there)");
  if (seconds) {
    if (seconds->shape != tau->shape) throw fail("seconds", "shape must be [prompts][block sizes]");
    if (tokens->shape != tau->shape) throw fail("tokens", "shape must be [prompts][block sizes]");
    d.seconds = file.values<double>(*seconds);
    d.tokens = file.values<std::int64_t>(*tokens);
    if (std::ranges::any_of(d.seconds, [](double x) { return !(x >= 0.0 && x <= std::numeric_limits<double>::max()); }))
      throw fail("seconds", "a value is negative or not finite");
    if (std::ranges::any_of(d.tokens, [](std::int64_t x) { return x < 0; })) throw fail("tokens", "a count is negative");
  }
  const auto* ids = file.find("prompt_tokens");
  const auto* offsets = file.find("prompt_offsets");
  if ((ids == nullptr) != (offsets == nullptr)) throw fail(ids ? "prompt_offsets" : "prompt_tokens", "missing tensor (the other prompt tensor is there)");
  if (ids) {
    if (ids->shape.size() != 1) throw fail("prompt_tokens", "shape must be [tokens]");
    if (offsets->shape != std::vector<std::int64_t>{n + 1}) throw fail("prompt_offsets", "shape must be [prompts + 1]");
    const auto t = file.values<std::int32_t>(*ids);
    d.prompt_token_ids.assign(t.begin(), t.end());
    d.prompt_offsets = file.values<std::int64_t>(*offsets);
    const auto& o = d.prompt_offsets;
    if (o.front() != 0 || o.back() != ids->shape[0] || std::adjacent_find(o.begin(), o.end(), std::greater_equal<>()) != o.end())
      throw fail("prompt_offsets", "must rise strictly from 0 to the number of prompt tokens");
    if (std::any_of(d.prompt_token_ids.begin(), d.prompt_token_ids.end(), [](token_id t) { return t < 0; }))
      throw fail("prompt_tokens", "token ids must be >= 0");
  }
  if (const auto* pooled = file.find("pooled_features")) {
    if (pooled->shape.size() != 2 || pooled->shape[0] != n) throw fail("pooled_features", "shape must be [prompts][features]");
    pooled_rows_features p;
    const auto positive = [&](const char* key) {
      const auto it = d.metadata.find(key);
      int v = 0;
      const bool read = it != d.metadata.end() && [&] {
        const char* end = it->second.data() + it->second.size();
        const auto r = std::from_chars(it->second.data(), end, v);
        return r.ec == std::errc{} && r.ptr == end;
      }();
      if (!read || v < 1)
        throw fail(key, "missing or not a positive integer (the dataset has pooled_features)");
      d.metadata.erase(it);
      return v;
    };
    p.rows = positive("pooled_rows");
    p.block_size = positive("pooled_block_size");
    for (auto it = d.metadata.begin(); it != d.metadata.end();) {
      if (it->first.starts_with("pooled_feature.")) {
        p.extractor.emplace(it->first.substr(15), it->second);
        it = d.metadata.erase(it);
      } else {
        ++it;
      }
    }
    if (!p.extractor.contains("name")) throw fail("pooled_feature.name", "missing (the dataset has pooled_features)");
    p.dim = pooled->shape[1];
    p.values = file.values<float>(*pooled);
    d.pooled = std::move(p);
  }
  return d;
}

namespace policy_dataset_detail {

/// The order of (part, row) in a merge: the parts' rows back to back, or, when the parts are the
/// shards 0/N..N-1/N of one sweep (in any order) with the sizes a shard has, the unsharded order
/// (shard I holds the prompts i ≡ I mod N).
[[nodiscard]] inline std::vector<std::pair<std::size_t, std::size_t>> merge_order(const std::vector<policy_dataset>& parts) {
  const std::size_t n = parts.size();
  std::size_t total = 0;
  for (const auto& d : parts) total += d.size();
  std::vector<std::size_t> part_of_shard(n, n);
  for (std::size_t p = 0; p < n; ++p) {
    const auto it = parts[p].metadata.find("shard");
    if (it == parts[p].metadata.end()) break;
    std::size_t shard = 0;  // the sweep writes "I/N"
    while (shard < n && it->second != std::to_string(shard) + "/" + std::to_string(n)) ++shard;
    if (shard == n || part_of_shard[shard] != n || parts[p].size() != (total + n - 1 - shard) / n) break;
    part_of_shard[shard] = p;
  }
  std::vector<std::pair<std::size_t, std::size_t>> order;
  if (std::find(part_of_shard.begin(), part_of_shard.end(), n) == part_of_shard.end()) {
    for (std::size_t i = 0; i < total; ++i) order.emplace_back(part_of_shard[i % n], i / n);
  } else {
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t i = 0; i < parts[p].size(); ++i) order.emplace_back(p, i);
  }
  return order;
}

}  // namespace policy_dataset_detail

/// Joins sweeps: they must agree on sizes, vocabulary and metadata, and no prompt may appear twice.
/// The shards of one sweep give its unsharded order whatever order they come in; other sweeps are
/// joined in the order given.
[[nodiscard]] inline policy_dataset merge_policy_datasets(const std::vector<policy_dataset>& parts) {
  if (parts.empty()) throw error("merge: no datasets");
  const policy_dataset& first = parts.front();
  auto settings = first.metadata;
  settings.erase("shard");
  std::set<std::string> keys;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto& d = parts[p];
    if (d.sizes != first.sizes || d.vocab != first.vocab)
      throw error("merge: part " + std::to_string(p) + " has other block sizes or vocabulary than part 0");
    auto metadata = d.metadata;
    metadata.erase("shard");
    if (metadata != settings)
      throw error("merge: part " + std::to_string(p) + " field 'metadata': differs from part 0 (another sweep's settings)");
    if (d.has_timing() != first.has_timing())
      throw error("merge: part " + std::to_string(p) + " field 'seconds': timing recorded in one part only");
    if (d.has_prompt_tokens() != first.has_prompt_tokens())
      throw error("merge: part " + std::to_string(p) + " field 'prompt_tokens': recorded in one part only");
    if (d.pooled.has_value() != first.pooled.has_value() || (d.pooled && !d.pooled->same_recipe(*first.pooled)))
      throw error("merge: part " + std::to_string(p) + " field 'pooled_features': recorded differently from part 0");
    for (const auto& key : d.prompts)
      if (!keys.insert(key).second) throw error("merge: prompt '" + key + "' appears in more than one part");
  }
  policy_dataset out;
  out.sizes = first.sizes;
  out.vocab = first.vocab;
  out.metadata = std::move(settings);
  if (first.pooled) {
    out.pooled = *first.pooled;
    out.pooled->values.clear();
  }
  for (const auto& [p, i] : policy_dataset_detail::merge_order(parts)) {
    const auto& d = parts[p];
    out.add(d.prompts[i], d.row(i), d.taus(i), d.seconds_of(i), d.tokens_of(i), d.prompt_ids(i));
    if (d.pooled) out.pooled->values.insert(out.pooled->values.end(), d.pooled->row(i).begin(), d.pooled->row(i).end());
  }
  return out;
}

}  // namespace blockpilot
