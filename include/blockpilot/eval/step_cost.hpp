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

#include "blockpilot/io/policy_dataset.hpp"

namespace blockpilot {

/// Seconds of one decode step at each of a dataset's sizes, and each prompt's fixed seconds.
struct step_cost_fit {
  std::vector<double> step_seconds;    ///< [sizes]
  std::vector<double> prompt_seconds;  ///< [prompts]: prefill and everything else independent of b
  double rms_residual = 0;             ///< root-mean-square error of the fit, seconds

  /// Cost of one step at each size relative to the smallest size.
  [[nodiscard]] std::vector<double> relative() const {
    std::vector<double> r(step_seconds);
    for (double& c : r) c /= step_seconds.front();
    return r;
  }
};

/// Least-squares fit of seconds(i, b) = prompt_seconds(i) + steps(i, b) * step_seconds(b), with
/// steps = tokens / tau (the decode steps of request i at size b). The prompt terms are eliminated
/// (each is the mean over sizes of what the steps leave), leaving a linear problem in the step
/// seconds alone. Throws when the dataset has no timing or the fit gives a step no positive cost.
[[nodiscard]] inline step_cost_fit fit_step_cost(const policy_dataset& d) {
  if (!d.has_timing()) throw error("step cost: the dataset has no timing (sweep it again to record seconds and tokens)");
  const auto n = static_cast<Eigen::Index>(d.size()), m = static_cast<Eigen::Index>(d.sizes.size());
  Eigen::MatrixXd steps(n, m), seconds(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index k = 0; k < m; ++k) {
      const auto row = static_cast<std::size_t>(i), col = static_cast<std::size_t>(k);
      steps(i, k) = static_cast<double>(d.tokens_of(row)[col]) / std::max(d.taus(row)[col], 1.0);
      seconds(i, k) = d.seconds_of(row)[col];
    }
  // Row (i, k): sum_j (steps(i, j) [j == k] - steps(i, j) / m) s_j = seconds(i, k) - mean_j seconds(i, j).
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n * m, m);
  Eigen::VectorXd rhs(n * m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index k = 0; k < m; ++k) {
      a.row(i * m + k) = -steps.row(i) / static_cast<double>(m);
      a(i * m + k, k) += steps(i, k);
      rhs(i * m + k) = seconds(i, k) - seconds.row(i).mean();
    }
  const Eigen::VectorXd step = a.colPivHouseholderQr().solve(rhs);
  const Eigen::VectorXd prompt = (seconds - steps * step.asDiagonal()).rowwise().mean();
  if (!(step.array() > 0).all())
    throw error("step cost: the fit gives a step a non-positive cost (too few or too noisy timings)");
  const Eigen::MatrixXd residual = (seconds - steps * step.asDiagonal()).colwise() - prompt;
  return {std::vector<double>(step.begin(), step.end()), std::vector<double>(prompt.begin(), prompt.end()),
          std::sqrt(residual.squaredNorm() / static_cast<double>(n * m))};
}

/// The dataset with tau(i, b) replaced by the estimated decode speedup over the smallest size,
/// tau(i, b) / cost(b) with `cost` relative to the smallest size ([sizes], cost[0] = 1). Metadata
/// `objective` = "speed" and `step_cost` (JSON list) record the transformation.
[[nodiscard]] inline policy_dataset speed_objective(policy_dataset d, const std::vector<double>& cost) {
  if (cost.size() != d.sizes.size() || !std::ranges::all_of(cost, [](double c) { return c > 0; }))
    throw error("speed objective: need one positive step cost per block size of the dataset");
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t k = 0; k < cost.size(); ++k) d.tau[i * cost.size() + k] /= cost[k];
  d.metadata["objective"] = "speed";
  d.metadata["step_cost"] = nlohmann::json(cost).dump();
  return d;
}

/// `speed_objective` with the cost fitted on the dataset's own timing.
[[nodiscard]] inline policy_dataset speed_objective(policy_dataset d) {
  const auto cost = fit_step_cost(d).relative();
  return speed_objective(std::move(d), cost);
}

}  // namespace blockpilot
