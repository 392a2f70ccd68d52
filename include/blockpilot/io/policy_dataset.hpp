// The training data of a block-size predictor: per prompt, the target's last prefill logits row and
// the tau measured at every candidate size. Stored as `dataset.safetensors` next to the reference
// `<B>.json` files of the same sweep, so that replay evaluation reads it too.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/io/acceptance_json.hpp"
#include "blockpilot/io/safetensors.hpp"

namespace blockpilot {

struct policy_dataset {
  std::vector<int> sizes;                      ///< candidate block sizes, ascending
  std::vector<std::string> prompts;            ///< prompt keys
  std::int64_t vocab = 0;
  std::vector<float> prefill_logits;           ///< [prompts][vocab], raw logits
  std::vector<double> tau;                     ///< [prompts][sizes]
  std::map<std::string, std::string> metadata; ///< how it was made (generator, temperature, ...)

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
  /// Appends one prompt.
  void add(std::string key, std::span<const float> logits, std::span<const double> prompt_tau) {
    prompts.push_back(std::move(key));
    prefill_logits.insert(prefill_logits.end(), logits.begin(), logits.end());
    tau.insert(tau.end(), prompt_tau.begin(), prompt_tau.end());
  }
};

inline constexpr const char* policy_dataset_file = "dataset.safetensors";

/// Writes `dir/dataset.safetensors` and the `<B>.json` files.
inline void write_policy_dataset(const policy_dataset& d, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  io::safetensors_writer w;
  const auto n = static_cast<std::int64_t>(d.size()), s = static_cast<std::int64_t>(d.sizes.size());
  const std::vector<std::int32_t> sizes(d.sizes.begin(), d.sizes.end());
  w.add<float>("prefill_logits", {n, d.vocab}, d.prefill_logits);
  w.add<double>("tau", {n, s}, d.tau);
  w.add<std::int32_t>("block_sizes", {s}, sizes);
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
  if (d.sizes.empty() || !std::is_sorted(d.sizes.begin(), d.sizes.end()) || d.sizes.front() < 1)
    throw fail("block_sizes", "must be ascending sizes >= 1");
  const auto* logits = tensor("prefill_logits");
  const auto* tau = tensor("tau");
  const auto n = static_cast<std::int64_t>(d.prompts.size());
  if (logits->shape.size() != 2 || logits->shape[0] != n) throw fail("prefill_logits", "shape must be [prompts][vocab]");
  if (tau->shape != std::vector<std::int64_t>{n, static_cast<std::int64_t>(d.sizes.size())})
    throw fail("tau", "shape must be [prompts][block sizes]");
  d.vocab = logits->shape[1];
  d.prefill_logits = file.values<float>(*logits);
  d.tau = file.values<double>(*tau);
  return d;
}

/// Concatenates shards of one sweep; they must agree on sizes, vocabulary and metadata, and no
/// prompt may appear twice.
[[nodiscard]] inline policy_dataset merge_policy_datasets(const std::vector<policy_dataset>& parts) {
  if (parts.empty()) throw error("merge: no datasets");
  policy_dataset out = parts.front();
  out.metadata.erase("shard");
  for (std::size_t p = 1; p < parts.size(); ++p) {
    const auto& d = parts[p];
    if (d.sizes != out.sizes || d.vocab != out.vocab)
      throw error("merge: part " + std::to_string(p) + " has other block sizes or vocabulary than part 0");
    auto metadata = d.metadata;
    metadata.erase("shard");
    if (metadata != out.metadata)
      throw error("merge: part " + std::to_string(p) + " field 'metadata': differs from part 0 (another sweep's settings)");
    for (std::size_t i = 0; i < d.size(); ++i) {
      if (std::find(out.prompts.begin(), out.prompts.end(), d.prompts[i]) != out.prompts.end())
        throw error("merge: prompt '" + d.prompts[i] + "' appears in more than one part");
      out.add(d.prompts[i], d.row(i), d.taus(i));
    }
  }
  return out;
}

}  // namespace blockpilot
