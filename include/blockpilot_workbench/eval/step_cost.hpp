// The speed objective: where a step's cost grows with the block size (a CPU verifier, a drafter
// that costs per row), the best size is the one that maximises tokens per second, not tau. This
// header fits the cost of one decode step per block size from a sweep's timing and turns a
// dataset's tau into the estimated speedup tau(b) * cost(smallest) / cost(b), so that the oracle,
// the evaluation and predictor training all optimise speed instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include "blockpilot_workbench/io/policy_dataset.hpp"

namespace blockpilot {

/// The step cost of each size relative to the smallest, fitted on a sweep's timing.
struct step_cost_fit {
  std::vector<double> cost;            ///< [sizes]: seconds of a step at b over seconds at the smallest size
  std::vector<double> prompt_seconds;  ///< [prompts]: prefill and everything else independent of b
  std::vector<double> step_seconds;    ///< [prompts]: seconds of one step at the smallest size
  double relative_rms = 0;             ///< root-mean-square residual relative to each prompt's mean seconds
};

/// Least-squares fit of seconds(i, b) = prompt_seconds(i) + steps(i, b) * step_seconds(i) * cost(b),
/// steps = tokens / tau (the decode steps of request i at size b). A step's seconds depend on the
/// prompt (its context length), its cost relative to the smallest size is shared. Each prompt's
/// residuals are weighted by 1 / its mean seconds, so long prompts do not dominate; the fit
/// alternates exact minimisation over the per-prompt pair (prompt seconds clamped to
/// [0, the prompt's fastest request]) and the shared costs. Throws when the dataset has no timing
/// or the fit gives a size no positive cost.
[[nodiscard]] inline step_cost_fit fit_step_cost(const policy_dataset& d, int iterations = 2000) {
  if (!d.has_timing()) throw error("step cost: the dataset has no timing (sweep it again to record seconds and tokens)");
  const auto n = static_cast<Eigen::Index>(d.size()), m = static_cast<Eigen::Index>(d.sizes.size());
  Eigen::MatrixXd steps(n, m), seconds(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index k = 0; k < m; ++k) {
      const auto row = static_cast<std::size_t>(i), col = static_cast<std::size_t>(k);
      steps(i, k) = static_cast<double>(d.tokens_of(row)[col]) / std::max(d.taus(row)[col], 1.0);
      seconds(i, k) = d.seconds_of(row)[col];
    }
  const Eigen::VectorXd weight = seconds.rowwise().mean().cwiseInverse();
  // Start from the median ratio of seconds per step (prefill counted in): near the fit, and robust.
  Eigen::VectorXd cost(m), prompt(n), step(n);
  for (Eigen::Index k = 0; k < m; ++k) {
    std::vector<double> ratios;
    for (Eigen::Index i = 0; i < n; ++i)
      ratios.push_back(seconds(i, k) / steps(i, k) / (seconds(i, 0) / steps(i, 0)));
    std::nth_element(ratios.begin(), ratios.begin() + n / 2, ratios.end());
    cost(k) = ratios[static_cast<std::size_t>(n / 2)];
  }
  for (int it = 0; it < iterations; ++it) {
    for (Eigen::Index i = 0; i < n; ++i) {  // per prompt: seconds = prompt + step * x, x = steps * cost
      const Eigen::VectorXd x = steps.row(i).transpose().cwiseProduct(cost), y = seconds.row(i).transpose();
      const double xm = x.mean(), ym = y.mean(), sxx = (x.array() - xm).square().sum();
      double p = sxx > 0 ? ym - (x.array() - xm).matrix().dot(y) / sxx * xm : 0.0;
      p = std::clamp(p, 0.0, y.minCoeff());
      prompt(i) = p;
      step(i) = std::max(x.dot((y.array() - p).matrix()) / x.squaredNorm(), 1e-12);
    }
    for (Eigen::Index k = 0; k < m; ++k) {  // shared: seconds - prompt = (step * steps) * cost
      const Eigen::ArrayXd x = weight.array() * step.array() * steps.col(k).array();
      cost(k) = (x * weight.array() * (seconds.col(k) - prompt).array()).sum() / x.square().sum();
    }
    step *= cost(0);
    cost /= cost(0);
  }
  if (!(cost.array() > 0).all() || !cost.allFinite())
    throw error("step cost: the fit gives a size a non-positive cost (too few or too noisy timings)");
  const Eigen::MatrixXd model = (steps * cost.asDiagonal()).array().colwise() * step.array();
  const Eigen::MatrixXd residual = ((seconds - model).colwise() - prompt).array().colwise() * weight.array();
  return {std::vector<double>(cost.begin(), cost.end()), std::vector<double>(prompt.begin(), prompt.end()),
          std::vector<double>(step.begin(), step.end()), std::sqrt(residual.squaredNorm() / static_cast<double>(n * m))};
}

/// The dataset with tau(i, b) replaced by the estimated decode speedup over the smallest size,
/// tau(i, b) / cost(b) with `cost` relative to the smallest size ([sizes], cost[0] = 1). Metadata
/// `objective` = "speed" and `step_cost` (JSON list) record the transformation.
[[nodiscard]] inline policy_dataset speed_objective(policy_dataset d, const std::vector<double>& cost) {
  if (cost.size() != d.sizes.size() || !std::ranges::all_of(cost, [](double c) { return c > 0 && std::isfinite(c); }))
    throw error("speed objective: need one finite positive step cost per block size of the dataset");
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t k = 0; k < cost.size(); ++k) d.tau[i * cost.size() + k] /= cost[k];
  d.metadata["objective"] = "speed";
  d.metadata["step_cost"] = nlohmann::json(cost).dump();
  return d;
}

/// `speed_objective` with the cost fitted on the dataset's own timing.
[[nodiscard]] inline policy_dataset speed_objective(policy_dataset d) {
  auto cost = fit_step_cost(d).cost;
  return speed_objective(std::move(d), std::move(cost));
}

}  // namespace blockpilot
