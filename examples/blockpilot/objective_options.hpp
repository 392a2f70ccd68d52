// `--objective tau|speed` and `--step-cost`: what the oracle, evaluation and training maximise —
// tau, or the estimated speedup tau(b) / cost(b) (eval/step_cost.hpp) where a step's cost grows with b.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "blockpilot_workbench/eval/step_cost.hpp"

namespace blockpilot::cli {

struct objective_options {
  std::string objective = "tau";
  std::vector<double> step_cost;  ///< empty: fitted on the dataset's timing

  void add_to(CLI::App* cmd) {
    cmd->add_option("--objective", objective, "tau, or speed: tau(b) / step cost(b), the estimated speedup over the smallest size")
        ->capture_default_str()->check(CLI::IsMember({"tau", "speed"}));
    cmd->add_option("--step-cost", step_cost, "speed: cost of a step per size of the dataset relative to the smallest "
                                             "(default: fitted on the dataset's timing)")->delimiter(',');
  }

  /// The dataset under the chosen objective; reports the step cost it used on stderr.
  [[nodiscard]] policy_dataset apply(policy_dataset d) const {
    if (objective == "tau") {
      if (!step_cost.empty()) throw error("--step-cost: only with --objective speed");
      return d;
    }
    std::vector<double> cost = step_cost;
    if (cost.empty()) {
      const auto fit = fit_step_cost(d);
      cost = fit.cost;
      fmt::print(stderr, "step cost fitted on {} prompts (rms residual {:.1f} % of a prompt's mean seconds): {::.3f}\n",
                 d.size(), 100 * fit.relative_rms, cost);
    }
    if (cost.size() != d.sizes.size()) throw error("--step-cost: needs one value per block size of the dataset (" +
                                                   std::to_string(d.sizes.size()) + ")");
    return speed_objective(std::move(d), cost);
  }
};

}  // namespace blockpilot::cli
