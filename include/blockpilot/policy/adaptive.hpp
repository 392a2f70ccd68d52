// The adaptive policy: a new block size before every step, from what the request has shown so far.
// It keeps an estimate of the chance that a draft is accepted (a prior, then moved by every step's
// accepted share) and picks the size with the most expected tokens per unit of
// step cost, the cost measured on the machine as the decode runs (step_cost_model).
#pragma once

#include <cmath>
#include <utility>

#include "blockpilot/concepts.hpp"
#include "blockpilot/policy/step_cost_model.hpp"

namespace blockpilot {

struct adaptive_options {
  double prior_acceptance = 0.5;  ///< a draft's acceptance chance before the request shows any
  double rate = 0.3;              ///< the share by which a drafting step moves the estimate toward what it saw
  double drift = 0.1;             ///< the share by which a plain step moves the estimate back to the prior
};

/// Models per_step_block_size_policy. Drafts are taken as accepted each with chance alpha until the
/// first rejection, so a step of size b commits (1 - alpha^b) / (1 - alpha) tokens on average; the
/// policy picks argmax_b of that over cost(b). Each drafting step moves alpha toward the share of its
/// drafts up to the first rejection that were accepted; a plain step it chose shows nothing, so alpha
/// drifts back to the prior and the policy tries drafting again after a run of them (a step a trimming
/// policy cut to one token shows nothing either, and leaves alpha as it is). The cost model persists
/// across requests (it is the machine's); alpha is per request.
class adaptive_block_size {
 public:
  using logits_backend = void;  ///< reads no logits: runs on every backend

  explicit adaptive_block_size(step_cost_model cost, adaptive_options options = {})
      : cost_(std::move(cost)), options_(options), alpha_(options.prior_acceptance) {
    const auto share = [](double x) { return x >= 0 && x <= 1; };
    if (!(options.prior_acceptance >= 0 && options.prior_acceptance < 1) || !share(options.rate) || !share(options.drift))
      throw error("adaptive_block_size: needs prior_acceptance in [0, 1) and rate, drift in [0, 1]");
  }

  [[nodiscard]] int max_block_size() const { return cost_.max_block_size(); }
  [[nodiscard]] const step_cost_model& cost_model() const { return cost_; }
  [[nodiscard]] const adaptive_options& options() const { return options_; }
  /// The current estimate of a draft's acceptance chance.
  [[nodiscard]] double acceptance() const { return alpha_; }

  /// Tokens a step of size b commits on average when each draft is accepted with chance alpha.
  [[nodiscard]] static double expected_tokens(double alpha, int b) {
    return alpha >= 1 ? static_cast<double>(b) : (1 - std::pow(alpha, b)) / (1 - alpha);
  }

  /// Starts a request from the prior.
  [[nodiscard]] block_size_choice choose(const request_features&) {
    alpha_ = options_.prior_acceptance;
    cost_.begin_request();
    chosen_ = best();
    return {chosen_, false};
  }

  [[nodiscard]] int next(const step_record& step) {
    if (step.step > 0) cost_.observe(step.block_size, step.seconds);  // the first runs on caches the prefill left cold
    if (step.block_size > 1) {
      const bool rejected = step.accepted < step.block_size - 1;
      const double seen = step.accepted / (step.accepted + (rejected ? 1.0 : 0.0));
      alpha_ += options_.rate * (seen - alpha_);
    } else if (chosen_ == 1) {
      alpha_ += options_.drift * (options_.prior_acceptance - alpha_);
    }
    chosen_ = best();
    return chosen_;
  }

 private:
  [[nodiscard]] int best() const {
    int best_b = 1;
    double best_rate = 0;
    for (int b = 1; b <= max_block_size(); ++b) {
      const double rate = expected_tokens(alpha_, b) / cost_.cost(b);
      if (rate > best_rate) best_b = b, best_rate = rate;
    }
    return best_b;
  }

  step_cost_model cost_;
  adaptive_options options_;
  double alpha_;
  int chosen_ = 1;  ///< the size it chose for the step under way
};

}  // namespace blockpilot
