// Features pooled over several target rows: the mean of one extractor's features over the prefill
// row and the rows of the first committed positions. One row is a noisy view of a prompt; a few
// more, which the verifier computes anyway, sharpen it (the refining policy's second decision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// Accumulates `Features` over rows until `rows_wanted` rows are in. `reset(vocab)` sizes the buffers
/// (allocating only when the vocabulary changes); `add(row)` allocates nothing.
template <feature_extractor Features>
class pooled_features {
 public:
  pooled_features(Features features, int rows_wanted) : features_(std::move(features)), wanted_(rows_wanted) {
    if (rows_wanted < 1) throw error("pooled_features: rows_wanted must be >= 1");
  }

  /// Starts a new pool for rows of `vocab` logits.
  void reset(std::int64_t vocab) {
    const auto n = static_cast<std::size_t>(features_.feature_count(vocab));
    if (vocab_ != vocab) {
      vocab_ = vocab;
      sum_.resize(n);
      row_features_.resize(n);
      mean_.resize(n);
      workspace_.resize(features_.workspace_size(vocab));
    }
    std::fill(sum_.begin(), sum_.end(), 0.0);
    rows_ = 0;
  }

  /// Adds one row (ignored once the pool is full). A row of another vocabulary size is
  /// invalid_argument; the extractor's status otherwise (a row that fails is not counted).
  [[nodiscard]] status add(std::span<const float> row) {
    if (full()) return status::success;
    if (static_cast<std::int64_t>(row.size()) != vocab_) return status::invalid_argument;
    if (const status s = features_.extract(row, workspace_, row_features_); s != status::success) return s;
    for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i] += row_features_[i];
    ++rows_;
    return status::success;
  }

  [[nodiscard]] bool full() const { return rows_ >= wanted_; }
  [[nodiscard]] int rows() const { return rows_; }
  [[nodiscard]] int rows_wanted() const { return wanted_; }
  [[nodiscard]] const Features& features() const { return features_; }

  /// The mean over the rows added so far (zeros before the first).
  [[nodiscard]] std::span<const float> mean() {
    for (std::size_t i = 0; i < sum_.size(); ++i) mean_[i] = rows_ ? static_cast<float>(sum_[i] / rows_) : 0.0f;
    return mean_;
  }

 private:
  Features features_;
  int wanted_;
  int rows_ = 0;
  std::int64_t vocab_ = -1;
  std::vector<double> sum_;
  std::vector<float> row_features_, mean_, workspace_;
};

}  // namespace blockpilot
