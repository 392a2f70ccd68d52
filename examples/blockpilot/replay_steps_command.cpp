// `blockpilot replay-steps`: per-step and fixed-size policies replayed on the greedy continuations a
// `measure --trace-out` run recorded (eval/step_replay.hpp), with prompt lookup drafting: exact tau at
// T = 0 and the estimated speedup under a step cost curve, noise-free; the per-prompt oracle over the
// fixed sizes of --window and the per-step oracle (each step's size chosen knowing its outcome) beside
// them. Writes the JSON of `measure` (decode seconds = cost in plain steps x 1 ms), so that the same
// reports read it.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "blockpilot_workbench/eval/step_replay.hpp"
#include "blockpilot_workbench/io/trace_json.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "commands.hpp"
#include "options.hpp"
#include "policy_spec.hpp"
#include "real_model_options.hpp"

namespace blockpilot::cli {

namespace replay_steps_detail {

/// A greedy trace whose every request has its prompt's token ids.
inline decode_trace read_trace(const std::filesystem::path& path) {
  const std::string what = "--traces " + path.string();
  auto t = decode_trace::read(path, what);
  if (t.temperature != 0)
    throw error(what + ": recorded at T = " + fmt::format("{}", t.temperature) + "; the replay needs a greedy (T = 0) trace");
  for (const auto& r : t.requests)
    if (r.prompt_ids.empty()) throw error(what + ": prompt " + r.prompt + " has no token ids (a corpus, not a trace)");
  return t;
}

/// One policy over every request, as `measure` would have reported it (one round).
inline nlohmann::ordered_json to_json(const std::string& name, const std::vector<step_replay_result>& rs) {
  nlohmann::ordered_json tau = nlohmann::json::array(), tokens = nlohmann::json::array(), seconds = nlohmann::json::array(),
                         steps = nlohmann::json::array();
  double tau_sum = 0;
  for (const auto& r : rs) {
    tau.push_back(r.tau());
    tau_sum += r.tau();
    tokens.push_back(r.tokens);
    seconds.push_back(1e-3 * r.cost);
    steps.push_back(r.steps_by_block);
  }
  return {{"policy", name}, {"mean_tau", tau_sum / static_cast<double>(rs.size())}, {"tau", tau}, {"tokens", tokens},
          {"decode_seconds", seconds}, {"steps_by_block", steps}};
}

}  // namespace replay_steps_detail

void add_replay_steps_command(CLI::App& app) {
  struct options {
    std::string traces, window, json_out, drafter = "lookup";
    std::vector<std::string> policies = {"none", "fixed:4"};
    std::vector<double> step_cost, prior_cost;
    double timing_noise = 0;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand(
      "replay-steps", "Replay policies on recorded greedy decodes (measure --trace-out) with prompt lookup: exact tau, "
                      "and the estimated speedup under --step-cost");
  cmd->add_option("--traces", o->traces, "A trace of `measure --trace-out` (T = 0, greedy)")->required();
  cmd->add_option("--step-cost", o->step_cost, "Cost of a step of size b = 1, 2, ... relative to b = 1 (the speed-aware "
                                               "policies start from it too)")
      ->delimiter(',')->required();
  cmd->add_option("--policy", o->policies, "none, fixed:B, adaptive[:MAX], speed[:MAX] or cutoff:P_MIN[,INNER]; repeatable")
      ->capture_default_str();
  cmd->add_option("--drafter", o->drafter, "lookup or lookup:evidence (how lookup grades its confidence), either with "
                                           ",corpus=FILE (a trace of the target's continuations of other prompts)")
      ->capture_default_str();
  cmd->add_option("--prior-cost", o->prior_cost, "The curve the speed-aware policies start from, when it differs from "
                                                 "the --step-cost that prices the steps (a load measurement that missed)")
      ->delimiter(',');
  cmd->add_option("--timing-noise", o->timing_noise, "Scatter the step timings the policies learn from by a log-normal "
                                                     "factor of this standard deviation (live timings scatter; seeded)")
      ->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--window", o->window, "The per-prompt oracle's fixed sizes LO:HI (default: every size of --step-cost)");
  cmd->add_option("--json-out", o->json_out, "Also write the replay here, in the JSON of `measure`")->check(output_file);
  cmd->add_flag("--json", o->json, "Print the replay as JSON instead of the table");
  cmd->callback([o] {
    try {
      const auto t = replay_steps_detail::read_trace(o->traces);
      const auto& cost = o->step_cost;
      const auto positive = [](double c) { return std::isfinite(c) && c > 0; };
      if (cost.empty() || cost.front() != 1.0 || !std::ranges::all_of(cost, positive))
        throw error("--step-cost: needs cost(1) = 1 first and every cost finite and > 0");
      const std::string window = o->window.empty() ? "1:" + std::to_string(cost.size()) : o->window;
      const auto [lo, hi] = parse_window(window);
      if (hi > static_cast<int>(cost.size())) throw error("--window: --step-cost has no cost for " + std::to_string(hi));
      const int max_block = static_cast<int>(cost.size());
      const auto& prior = o->prior_cost.empty() ? cost : o->prior_cost;
      if (prior.size() != cost.size() || prior.front() != 1.0 || !std::ranges::all_of(prior, positive))
        throw error("--prior-cost: needs cost(1) = 1 first, every cost finite and > 0, and as many sizes as --step-cost");
      auto drafter = load_lookup_drafter(o->drafter, t.vocab, max_block - 1, "--drafter: replay-steps drafts with lookup");
      const auto replay = [&](auto& policy) {
        std::vector<step_replay_result> rs;
        std::mt19937_64 rng(1);
        for (std::size_t i = 0; i < t.requests.size(); ++i) {
          if constexpr (std::same_as<std::decay_t<decltype(policy)>, per_prompt_oracle>) policy.key = t.requests[i].prompt;
          rs.push_back(replay_steps(policy, drafter, t.requests[i].prompt_ids, t.requests[i].tokens, cost, 1e-3, o->timing_noise, &rng));
        }
        return rs;
      };
      std::vector<std::pair<std::string, std::vector<step_replay_result>>> results;
      for (const auto& spec : o->policies) {
        if (spec.starts_with("mlp:") || spec.starts_with("refine:") || spec == "oracle" ||
            spec.find(",mlp:") != std::string::npos)
          throw error("--policy " + spec + ": replay-steps runs policies that read no logits (the oracle is its own row)");
        with_policy(spec, nullptr, t.vocab, prior, [&](auto& policy) {
          if (policy.max_block_size() > max_block)
            throw error("--policy " + spec + ": reaches b = " + std::to_string(policy.max_block_size()) +
                        ", past the " + std::to_string(max_block) + " sizes --step-cost prices");
          results.emplace_back(spec, replay(policy));
        });
      }
      // The per-prompt oracle: each prompt's fastest fixed size of the window, by replay.
      per_prompt_oracle oracle;
      std::vector<std::vector<step_replay_result>> fixed;
      for (int b = lo; b <= hi; ++b) {
        runtime_block_size p{b};
        fixed.push_back(replay(p));
      }
      for (std::size_t i = 0; i < t.requests.size(); ++i) {
        int best = lo;
        for (int b = lo; b <= hi; ++b)
          if (fixed[static_cast<std::size_t>(b - lo)][i].cost < fixed[static_cast<std::size_t>(best - lo)][i].cost) best = b;
        oracle.best[t.requests[i].prompt] = best;
        oracle.largest = std::max(oracle.largest, best);
      }
      results.emplace_back("oracle:" + window, replay(oracle));
      std::vector<step_replay_result> per_step;
      for (std::size_t i = 0; i < t.requests.size(); ++i)
        per_step.push_back(replay_step_oracle(drafter, t.requests[i].prompt_ids, t.requests[i].tokens, cost));
      results.emplace_back("step-oracle", std::move(per_step));

      nlohmann::ordered_json j{{"workload", t.workload}, {"rule", "greedy"}, {"temperature", 0.0}, {"rounds", 1},
                               {"replay", {{"traces", o->traces}, {"step_cost", cost}, {"prior_cost", prior}}},
                               {"prompts", t.prompt_keys()}};
      for (const auto& [name, rs] : results) j["policies"].push_back(replay_steps_detail::to_json(name, rs));
      if (!o->json_out.empty()) write_json_file(o->json_out, j, 1);
      if (o->json) {
        fmt::print("{}\n", j.dump(2));
        return;
      }
      const auto total = [](const std::vector<step_replay_result>& rs) {
        double committed = 0, c = 0;
        for (const auto& r : rs) committed += static_cast<double>(r.committed), c += r.cost;
        return committed / c;
      };
      fmt::print("{} requests replayed, step cost {}\n\n", t.requests.size(), fmt::join(cost, ", "));
      fmt::print("{:<28}  {:>8}  {:>16}  {:>8}\n", "policy", "mean tau", "est. speedup", "vs first");
      for (std::size_t p = 0; p < results.size(); ++p)
        fmt::print("{:<28}  {:>8.4f}  {:>15.3f}x  {:>8.3f}\n", results[p].first, j["policies"][p]["mean_tau"].get<double>(),
                   total(results[p].second), total(results[p].second) / total(results.front().second));
    } catch (const std::exception& e) {
      fail("replay-steps", e);
    }
  });
}

}  // namespace blockpilot::cli
