// What a decode step costs by block size on the machine that runs the decode: a prior curve (a
// short measurement at load, `measure_step_seconds`) refreshed from the step timings the decoder
// reports to per-step policies (`step_record::seconds`), each compared with the steps of its own
// request. Speed-aware policies choose the size with the most expected tokens per unit of this cost.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"

namespace blockpilot {

class step_cost_model {
 public:
  /// prior[b-1]: the cost of a step of size b relative to b = 1 (prior[0] = 1, every value positive
  /// and finite). `memory` in [0, 1): the weight a size's estimate keeps of its past at each new timing
  /// (the first timings of a size are averaged plainly). Throws `error` on a bad curve or memory.
  explicit step_cost_model(std::vector<double> prior, double memory = 0.9)
      : prior_(std::move(prior)), ratio_(prior_.size(), 0.0), count_(prior_.size(), 0), memory_(memory) {
    if (prior_.empty() || prior_[0] != 1.0 ||
        !std::all_of(prior_.begin(), prior_.end(), [](double c) { return std::isfinite(c) && c > 0; }))
      throw error("step_cost_model: the prior needs one positive, finite cost per size, 1 for b = 1");
    if (!(memory >= 0 && memory < 1)) throw error("step_cost_model: memory must be in [0, 1)");
  }

  /// `1 + per_row (b - 1)` for b = 1..max_block: a verifier whose step grows linearly with the block.
  [[nodiscard]] static step_cost_model linear(int max_block, double per_row, double memory = 0.9) {
    if (max_block < 1 || !(per_row >= 0) || !std::isfinite(per_row))
      throw error("step_cost_model::linear: needs max_block >= 1 and a finite per_row >= 0");
    std::vector<double> prior;
    for (int b = 1; b <= max_block; ++b) prior.push_back(1.0 + per_row * (b - 1));
    return step_cost_model(std::move(prior), memory);
  }

  /// The prior from measured seconds per size (seconds[b-1], e.g. `measure_step_seconds`), relative to b = 1.
  [[nodiscard]] static step_cost_model from_seconds(std::span<const double> seconds, double memory = 0.9) {
    if (seconds.empty() || !(seconds[0] > 0)) throw error("step_cost_model::from_seconds: needs a positive time for b = 1");
    std::vector<double> prior;
    for (const double s : seconds) prior.push_back(s / seconds[0]);
    return step_cost_model(std::move(prior), memory);
  }

  [[nodiscard]] int max_block_size() const { return static_cast<int>(prior_.size()); }
  [[nodiscard]] std::span<const double> prior() const { return prior_; }
  /// Timings of size b that taught the model (a request's first timing only sets its scale).
  [[nodiscard]] long observed(int b) const { return in_range(b) ? count_[index(b)] : 0; }

  /// Starts a request. A step's time depends on the request (the context its attention reads), so the
  /// model learns each size's time relative to the other steps of the same request, never across
  /// requests: a large block timed in a long request is not compared with plain steps timed in short ones.
  void begin_request() { request_scale_ = 0, request_timings_ = 0; }

  /// Adds the seconds of one step of size b; a size out of range or a time that is not positive and
  /// finite is ignored. The time over the request's scale (its mean seconds per unit of cost so far)
  /// is one observation of cost(b); the request's first timing only sets that scale.
  void observe(int b, double seconds) {
    if (!in_range(b) || !(seconds > 0) || !std::isfinite(seconds)) return;
    const std::size_t i = index(b);
    if (request_timings_ > 0) {
      const double ratio = seconds / request_scale_;
      update(ratio_[i], count_[i], ratio);
      update(misfit_, misfit_count_, ratio / prior_[i]);
    }
    ++request_timings_;
    request_scale_ += (seconds / cost(b) - request_scale_) / static_cast<double>(request_timings_);
  }

  /// The cost of size b relative to b = 1: each size's learned ratio shrunk toward the prior scaled
  /// by how far the timings of every size are from it (as if `prior_timings` more timings had given
  /// that), so a size timed a few times in an unlucky moment is not written off and a size not timed
  /// yet follows the others; the prior alone before the first timing.
  [[nodiscard]] double cost(int b) const {
    if (!in_range(b)) throw error("step_cost_model::cost: size " + std::to_string(b) + " outside 1.." +
                                  std::to_string(max_block_size()));
    return estimate(b) / estimate(1);
  }

 private:
  [[nodiscard]] bool in_range(int b) const { return b >= 1 && b <= max_block_size(); }
  [[nodiscard]] static std::size_t index(int b) { return static_cast<std::size_t>(b - 1); }
  [[nodiscard]] double estimate(int b) const {
    const std::size_t i = index(b);
    const double n = static_cast<double>(count_[i]);
    return (n * ratio_[i] + prior_timings * prior_[i] * misfit_) / (n + prior_timings);
  }
  static constexpr double prior_timings = 4;
  void update(double& mean, long& count, double x) const {
    ++count;
    const double w = std::max(1.0 / static_cast<double>(count), 1.0 - memory_);
    mean += w * (x - mean);
  }

  std::vector<double> prior_, ratio_;  ///< ratio_[b-1]: b's seconds over its request's scale, learned
  std::vector<long> count_;
  double memory_;
  double misfit_ = 1;  ///< learned ratio over prior, over every size's timings
  long misfit_count_ = 0;
  double request_scale_ = 0;  ///< the request's seconds per unit of cost, over its timings so far
  long request_timings_ = 0;
};

/// Measures a verifier's step time per size: prefills `context` (a request's worth of tokens), then
/// scores blocks of b = 1..max_block tokens (the context's own tokens; any valid ones serve) and keeps
/// one of each (`commit(1)`, as a rejected draft does), `repeats` rounds with the sizes interleaved;
/// the median of a size's rounds, in seconds. The verifier's next prefill starts afresh. Throws
/// `error` when the verifier fails or the context is empty.
template <verifier V>
[[nodiscard]] std::vector<double> measure_step_seconds(V& v, std::span<const token_id> context, int max_block,
                                                       int repeats = 3) {
  if (context.empty() || max_block < 1 || repeats < 1)
    throw error("measure_step_seconds: needs a context, max_block >= 1 and repeats >= 1");
  std::vector<token_id> block(static_cast<std::size_t>(max_block));
  for (std::size_t j = 0; j < block.size(); ++j) block[j] = context[j % context.size()];
  matrix_view<const float> logits;
  if (v.prefill(context, logits) != status::success) throw error("measure_step_seconds: the verifier's prefill failed");
  std::vector<std::vector<double>> times(static_cast<std::size_t>(max_block));
  for (int r = 0; r < repeats; ++r)
    for (int b = 1; b <= max_block; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      if (v.score(std::span<const token_id>(block).first(static_cast<std::size_t>(b)), logits) != status::success ||
          v.commit(1) != status::success)
        throw error("measure_step_seconds: the verifier failed to score a block of " + std::to_string(b));
      times[static_cast<std::size_t>(b - 1)].push_back(
          std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9));
    }
  std::vector<double> median;
  for (auto& t : times) {
    std::nth_element(t.begin(), t.begin() + repeats / 2, t.end());
    median.push_back(t[static_cast<std::size_t>(repeats / 2)]);
  }
  return median;
}

}  // namespace blockpilot
