// What a decode step costs by block size on the machine that runs the decode: a prior curve (a
// short measurement at load, `measure_step_seconds` in engine/step_timing.hpp) refreshed from the step
// timings the decoder reports to per-step policies (`step_record::seconds`), each compared with the
// steps of its own request. Speed-aware policies choose the size with the most expected tokens per unit of this cost.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Cholesky>

#include "blockpilot/status.hpp"

namespace blockpilot {

struct step_cost_options {
  double memory = 0.995;      ///< the weight the past keeps at each new timing, in [0, 1)
  double prior_timings = 4;   ///< timings' worth of the prior curve (> 0)
  int group_timings = 32;     ///< a request's timings are compared in groups of at most this many (2..65536)
};

/// log seconds = log cost(b) + log scale(group) + noise: a regression of the step timings on the
/// size, with one free scale per group of timings (a request, or a stretch of a long one: its
/// context), so that only steps of the same group are compared, and a ridge toward the prior curve
/// worth `prior_timings` timings, so that a size timed in a few unlucky moments is not written off;
/// a size never timed follows the others' common departure from the prior. Sizes compared only with
/// each other (a policy that never takes a plain step) keep their prior level against b = 1.
/// Log-normal scatter of the timings averages out instead of drifting the curve. Every buffer is
/// sized at construction: observing a timing and refitting the curve allocate nothing.
class step_cost_model {
 public:
  /// prior[b-1]: the cost of a step of size b relative to b = 1 (prior[0] = 1, every value positive
  /// and finite). Throws `error` on a bad curve or options.
  explicit step_cost_model(std::vector<double> prior, step_cost_options options = {})
      : prior_(std::move(prior)), options_(options) {
    if (prior_.empty() || prior_[0] != 1.0 ||
        !std::all_of(prior_.begin(), prior_.end(), [](double c) { return std::isfinite(c) && c > 0; }))
      throw error("step_cost_model: the prior needs one positive, finite cost per size, 1 for b = 1");
    if (!(options.memory >= 0 && options.memory < 1) || !(options.prior_timings > 0) || !std::isfinite(options.prior_timings) ||
        options.group_timings < 2 || options.group_timings > max_group_timings)
      throw error("step_cost_model: needs memory in [0, 1), a finite prior_timings > 0 and group_timings in 2.." +
                  std::to_string(max_group_timings));
    const auto n = static_cast<Eigen::Index>(prior_.size()), k = n - 1;
    gram_ = Eigen::MatrixXd::Zero(n, n);
    moment_ = Eigen::VectorXd::Zero(n);
    group_count_ = Eigen::VectorXd::Zero(n);
    group_centred_ = Eigen::VectorXd::Zero(n);
    cost_ = prior_;
    count_.assign(prior_.size(), 0);
    group_.reserve(static_cast<std::size_t>(options.group_timings));
    log_prior_ = Eigen::VectorXd(k);
    for (Eigen::Index j = 0; j < k; ++j) log_prior_[j] = std::log(prior_[static_cast<std::size_t>(j + 1)]);
    normal_ = Eigen::MatrixXd::Identity(k + 1, k + 1);
    rhs_ = Eigen::VectorXd(k + 1);
    solution_ = Eigen::VectorXd(k + 1);
    ldlt_.compute(normal_);  // sized, and every field set (a copy of the model copies them)
  }

  static constexpr int max_group_timings = 65536;

  /// `1 + per_row (b - 1)` for b = 1..max_block: a verifier whose step grows linearly with the block.
  [[nodiscard]] static step_cost_model linear(int max_block, double per_row, step_cost_options options = {}) {
    if (max_block < 1 || !(per_row >= 0) || !std::isfinite(per_row))
      throw error("step_cost_model::linear: needs max_block >= 1 and a finite per_row >= 0");
    std::vector<double> prior;
    for (int b = 1; b <= max_block; ++b) prior.push_back(1.0 + per_row * (b - 1));
    return step_cost_model(std::move(prior), options);
  }

  /// The prior from measured seconds per size (seconds[b-1], e.g. `measure_step_seconds`), relative to b = 1.
  [[nodiscard]] static step_cost_model from_seconds(std::span<const double> seconds, step_cost_options options = {}) {
    if (seconds.empty() || !(seconds[0] > 0)) throw error("step_cost_model::from_seconds: needs a positive time for b = 1");
    std::vector<double> prior;
    for (const double s : seconds) prior.push_back(s / seconds[0]);
    return step_cost_model(std::move(prior), options);
  }

  [[nodiscard]] int max_block_size() const { return static_cast<int>(prior_.size()); }
  [[nodiscard]] std::span<const double> prior() const { return prior_; }
  [[nodiscard]] const step_cost_options& options() const { return options_; }
  /// Timings of size b added so far, an open group's included (a group that closes with one timing teaches nothing).
  [[nodiscard]] long observed(int b) const { return in_range(b) ? count_[index(b)] : 0; }

  /// Starts a request: closes the group of timings under way, which then teaches the curve, and
  /// reserves the next group's room (a copy of the model holds only what it has: copies are how
  /// per-request policies start).
  void begin_request() {
    close_group();
    group_.reserve(static_cast<std::size_t>(options_.group_timings));
  }

  /// Adds the seconds of one step of size b; a size out of range or a time that is not positive and
  /// finite is ignored. A group that reaches `group_timings` timings teaches the curve at once.
  void observe(int b, double seconds) {
    if (!in_range(b) || !(seconds > 0) || !std::isfinite(seconds)) return;
    group_.emplace_back(index(b), std::log(seconds));
    ++count_[index(b)];
    if (static_cast<int>(group_.size()) >= options_.group_timings) close_group();
  }

  /// The cost of size b relative to b = 1.
  [[nodiscard]] double cost(int b) const {
    if (!in_range(b)) throw error("step_cost_model::cost: size " + std::to_string(b) + " outside 1.." +
                                  std::to_string(max_block_size()));
    return cost_[index(b)];
  }

 private:
  [[nodiscard]] bool in_range(int b) const { return b >= 1 && b <= max_block_size(); }
  [[nodiscard]] static std::size_t index(int b) { return static_cast<std::size_t>(b - 1); }

  /// Adds the group's timings, centred on their own mean (the group's scale drops out), to the
  /// regression's sums, older sums fading by `memory` per timing, and solves for the curve. With x a
  /// timing's size indicator less the group's mean indicator, the sum of x x^T is diag(count) -
  /// count count^T / m and the sum of x (log seconds - mean) is each size's sum of centred logs.
  void close_group() {
    const auto m = static_cast<double>(group_.size());
    if (m >= 2) {
      Eigen::VectorXd& count = group_count_;
      Eigen::VectorXd& centred = group_centred_;
      count.setZero();
      centred.setZero();
      double mean = 0;
      for (const auto& [i, y] : group_) count[static_cast<Eigen::Index>(i)] += 1, mean += y / m;
      for (const auto& [i, y] : group_) centred[static_cast<Eigen::Index>(i)] += y - mean;
      const double fade = std::pow(options_.memory, m);
      gram_ *= fade;
      for (Eigen::Index j = 0; j < gram_.cols(); ++j)  // the rank-one update, in place
        for (Eigen::Index i = 0; i < gram_.rows(); ++i) gram_(i, j) -= count[i] * count[j] / m;
      gram_.diagonal() += count;
      moment_ *= fade;
      moment_ += centred;
      solve();
    }
    group_.clear();
  }

  /// log cost(b) = log prior(b) + level + own(b) for b = 2.. (b = 1 fixed at 0): a level that moves
  /// every size beside b = 1 together (so a size never timed follows the others) and each size's own
  /// departure, both shrunk toward 0 by `prior_timings`; the regularised normal equations of the
  /// centred timings in (own, level).
  void solve() {
    const auto k = static_cast<Eigen::Index>(prior_.size()) - 1;
    if (k < 1) return;
    const double p = options_.prior_timings;
    const auto g = gram_.bottomRightCorner(k, k);
    auto own = normal_.topLeftCorner(k, k);
    auto g_sum = normal_.topRightCorner(k, 1);
    auto r = rhs_.head(k);
    own = g;
    own.diagonal().array() += p;
    g_sum = g.rowwise().sum();
    normal_.bottomLeftCorner(1, k) = g_sum.transpose();
    normal_(k, k) = g_sum.sum() + p;
    r = moment_.tail(k);
    r.noalias() -= g * log_prior_;
    rhs_[k] = r.sum();
    ldlt_.compute(normal_);
    solution_.noalias() = ldlt_.solve(rhs_);
    const Eigen::VectorXd& z = solution_;
    for (Eigen::Index j = 0; j < k; ++j) cost_[static_cast<std::size_t>(j + 1)] = std::exp(log_prior_[j] + z[j] + z[k]);
  }

  std::vector<double> prior_, cost_;
  step_cost_options options_;
  std::vector<long> count_;
  Eigen::MatrixXd gram_;    ///< sum over timings of x x^T, x the group-centred size indicator
  Eigen::VectorXd moment_;  ///< sum over timings of x (log seconds - the group's mean)
  Eigen::VectorXd log_prior_;  ///< log prior for b = 2..
  std::vector<std::pair<std::size_t, double>> group_;  ///< (size index, log seconds) of the open group
  // Scratch of close_group and solve.
  Eigen::VectorXd group_count_, group_centred_;  ///< the group's timings per size, and their centred logs
  Eigen::MatrixXd normal_;                       ///< the normal equations in (own, level)
  Eigen::VectorXd rhs_, solution_;
  Eigen::LDLT<Eigen::MatrixXd> ldlt_;
};

}  // namespace blockpilot
