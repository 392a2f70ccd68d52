// Policies from predictor files: the checks that tie a file to the policy that reads it (feature
// extractor, pooled rows, the target's vocabulary), with messages that name the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot/policy/refining.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"

namespace blockpilot {

/// A blockpilot_policy from a predictor file; its metadata names the feature extractor, which must be
/// `Features`. With target_vocab > 0 the file must have been trained on a target of that vocabulary (a
/// predictor for another vocabulary would fall back to B on every request): refused otherwise.
template <class Features, class Model = nn::mlp<float>>
[[nodiscard]] blockpilot_policy<Features, Model> load_blockpilot_policy(const std::filesystem::path& file,
                                                                       std::int64_t target_vocab = 0) {
  auto p = nn::load_predictor<typename Model::weight_type>(file);
  if (target_vocab > 0 && p.metadata.vocab_size != target_vocab)
    throw error("predictor file '" + file.string() + "' field 'vocab_size': trained for a vocabulary of " +
                std::to_string(p.metadata.vocab_size) + " tokens, the target has " + std::to_string(target_vocab));
  if (p.metadata.pooled_rows != 1)
    throw error("predictor file '" + file.string() + "' field 'pooled_rows': " + std::to_string(p.metadata.pooled_rows) +
                " rows pooled; a predictor of pooled rows is the second stage of a refining_policy");
  if (p.metadata.feature_extractor != Features::name)
    throw error("predictor file '" + file.string() + "' field 'feature_extractor': '" + p.metadata.feature_extractor +
                "', but this policy extracts '" + std::string(Features::name) + "'");
  auto features = make_feature_extractor<Features>(p.metadata.feature_parameters, file.string());
  return {std::move(features), std::move(p)};
}

/// A refining_policy whose second stage comes from a predictor file with extractor `Features` and
/// pooled_rows >= 2.
template <class First, class Features, class Model = nn::mlp<float>>
[[nodiscard]] refining_policy<First, Features, Model> load_refining_policy(First first,
                                                                          const std::filesystem::path& second_file) {
  auto p = nn::load_predictor<typename Model::weight_type>(second_file);
  if (p.metadata.feature_extractor != Features::name)
    throw error("predictor file '" + second_file.string() + "' field 'feature_extractor': '" +
                p.metadata.feature_extractor + "', but this policy pools '" + std::string(Features::name) + "'");
  if (p.metadata.pooled_rows < 2)
    throw error("predictor file '" + second_file.string() +
                "' field 'pooled_rows': 1, a prefill-row predictor; the second stage pools >= 2 rows");
  auto features = make_feature_extractor<Features>(p.metadata.feature_parameters, second_file.string());
  return {std::move(first), std::move(features), std::move(p)};
}

}  // namespace blockpilot
