// The refining policy: two decisions per request. A first policy picks the block size after
// prefill; once the first steps have committed enough positions, a second predictor reads the
// features pooled over the prefill row and those positions' target rows (which verification
// computed anyway) and picks the size for the rest of the request.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/features/pooled.hpp"
#include "blockpilot/nn/mlp.hpp"
#include "blockpilot/nn/predictor.hpp"

namespace blockpilot {

/// `refining_policy<First, Features, Model>`: First models `block_size_policy` (a fixed size or a
/// `blockpilot_policy`); the second stage is an MLP over `pooled_features<Features>` of
/// `pooled_rows` rows (from its predictor file). When the rows are not of the second predictor's
/// vocabulary, or a row's features fail or are not finite, the first decision stays. A decision
/// allocates nothing once the buffers fit the vocabulary.
template <block_size_policy First, feature_extractor Features, class Model = nn::mlp<float>>
class refining_policy {
  static_assert(!per_step_block_size_policy<First>,
                "refining_policy<First, ...>: First decides once per request (fixed_block_size, blockpilot_policy)");
  using weight_type = typename Model::weight_type;

 public:
  refining_policy(First first, Features features, nn::predictor<weight_type> second)
      : first_(std::move(first)),
        second_(std::move(second)),
        pool_(std::move(features), static_cast<int>(second_.metadata.pooled_rows)) {
    if (second_.metadata.pooled_rows < 2) throw error("refining_policy: the second predictor must pool >= 2 rows");
    const auto& shape = second_.network.shape();
    second_.metadata.check_network(pool_.features(), shape.input, shape.classes, "refining_policy (second predictor)");
    class_logits_.resize(static_cast<std::size_t>(second_.network.shape().classes));
    network_workspace_.resize(static_cast<std::size_t>(second_.network.workspace_size(1)));
  }

  [[nodiscard]] int max_block_size() const {
    return std::max(first_.max_block_size(), static_cast<int>(second_.metadata.block_size(2 * second_.metadata.window_k)));
  }
  [[nodiscard]] First& first() { return first_; }
  [[nodiscard]] const nn::predictor_metadata& metadata() const { return second_.metadata; }
  /// Whether the current request's second decision has been taken.
  [[nodiscard]] bool refined() const { return refined_; }

  [[nodiscard]] block_size_choice choose(const request_features& request) {
    const auto vocab = static_cast<std::int64_t>(request.prefill_logits.size());
    pool_.reset(vocab);
    refined_ = false;
    settled_ = vocab != second_.metadata.vocab_size || pool_.add(request.prefill_logits) != status::success;
    const block_size_choice c = first_.choose(request);
    current_ = c.block_size;
    return c;
  }

  [[nodiscard]] int next(const step_record& step) {
    if (settled_) return current_;
    for (std::int64_t j = 0; j < step.target_logits.rows && !pool_.full(); ++j) {
      if (pool_.add(step.target_logits.row(j)) != status::success) return settle();
    }
    if (!pool_.full()) return current_;
    const auto mean = pool_.mean();
    if (!std::all_of(mean.begin(), mean.end(), [](float x) { return std::isfinite(x); })) return settle();
    if (second_.network.forward(mean, class_logits_, network_workspace_) != status::success ||
        !std::all_of(class_logits_.begin(), class_logits_.end(), [](float x) { return std::isfinite(x); }))
      return settle();
    current_ = static_cast<int>(second_.metadata.block_size(nn::argmax(class_logits_)));
    refined_ = true;
    return settle();
  }

 private:
  int settle() {
    settled_ = true;
    return current_;
  }

  First first_;
  nn::predictor<weight_type> second_;
  pooled_features<Features> pool_;
  std::vector<float> class_logits_, network_workspace_;
  int current_ = 1;
  bool settled_ = true, refined_ = false;
};

}  // namespace blockpilot
