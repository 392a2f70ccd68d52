// The BlockPilot policy: after prefill, a feature extractor turns the target's last logits row (and,
// for a request extractor, the prompt's tokens) into a feature vector, an MLP classifies it into the
// 2k+1 sizes B-k..B+k, and that size is used for the whole request. Falls back to B (and says so) when
// the features cannot be computed or are not finite, or the network's outputs are not.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/nn/mlp.hpp"
#include "blockpilot/nn/predictor.hpp"

namespace blockpilot {

/// `blockpilot_policy<Features, Model>`: Features models `feature_extractor` or
/// `request_feature_extractor`, Model is `nn::mlp<float>` or `nn::mlp<Eigen::bfloat16>`. Takes a
/// predictor in memory (from a file: blockpilot_workbench/nn/load_policy.hpp). Buffers are sized on the
/// first decision for a vocabulary and reused; a decision allocates nothing after that.
template <class Features, class Model = nn::mlp<float>>
class blockpilot_policy {
  static_assert(policy_feature_extractor<Features>,
                "blockpilot_policy<Features, Model>: Features must model blockpilot::feature_extractor or "
                "request_feature_extractor (compact_features, full_row_features, prompt_features, "
                "prompt_compact_features, or your own with feature_count/workspace_size/extract/metadata)");
  using weight_type = typename Model::weight_type;

 public:
  blockpilot_policy(Features features, nn::predictor<weight_type> predictor)
      : features_(std::move(features)), predictor_(std::move(predictor)) {
    const auto& shape = predictor_.network.shape();
    predictor_.metadata.check_network(features_, shape.input, shape.classes, "blockpilot_policy");
    if (predictor_.metadata.pooled_rows != 1)
      throw error("blockpilot_policy: the predictor pools " + std::to_string(predictor_.metadata.pooled_rows) +
                  " rows; it is a refining_policy's second stage");
  }

  [[nodiscard]] int max_block_size() const { return static_cast<int>(block_size_of(2 * window_k())); }
  [[nodiscard]] int default_block_size() const { return static_cast<int>(predictor_.metadata.training_block_size); }
  [[nodiscard]] const nn::predictor_metadata& metadata() const { return predictor_.metadata; }
  /// The predictor (metadata and network) the policy decides with.
  [[nodiscard]] const nn::predictor<weight_type>& predictor() const { return predictor_; }
  [[nodiscard]] const Features& features() const { return features_; }

  /// The block size for a request: B − k + argmax MLP(features(request)), or B with `fallback` set
  /// when the row has the wrong size, the features cannot be computed or are not finite, or the
  /// network's outputs are not finite.
  [[nodiscard]] block_size_choice choose(const request_features& request) {
    const auto vocab = static_cast<std::int64_t>(request.prefill_logits.size());
    if (vocab != predictor_.metadata.vocab_size) return fallback();
    prepare(vocab);
    if (extract_features(features_, request, workspace_, feature_row_) != status::success) return fallback();
    if (!std::all_of(feature_row_.begin(), feature_row_.end(), [](float x) { return std::isfinite(x); })) return fallback();
    if (predictor_.network.forward(feature_row_, class_logits_, network_workspace_) != status::success ||
        !std::all_of(class_logits_.begin(), class_logits_.end(), [](float x) { return std::isfinite(x); }))
      return fallback();
    return {static_cast<int>(block_size_of(nn::argmax(class_logits_))), false};
  }

 private:
  [[nodiscard]] std::int64_t window_k() const { return predictor_.metadata.window_k; }
  [[nodiscard]] std::int64_t block_size_of(std::int64_t c) const { return predictor_.metadata.block_size(c); }
  [[nodiscard]] block_size_choice fallback() const { return {default_block_size(), true}; }

  void prepare(std::int64_t vocab) {
    const auto n = static_cast<std::size_t>(features_.feature_count(vocab));
    if (feature_row_.size() == n) return;
    feature_row_.resize(n);
    workspace_.resize(features_.workspace_size(vocab));
    class_logits_.resize(static_cast<std::size_t>(2 * window_k() + 1));
    network_workspace_.resize(static_cast<std::size_t>(predictor_.network.workspace_size(1)));
  }

  Features features_;
  nn::predictor<weight_type> predictor_;
  std::vector<float> feature_row_, workspace_, class_logits_, network_workspace_;
};

}  // namespace blockpilot
