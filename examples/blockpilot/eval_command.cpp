// `blockpilot eval` and `blockpilot predict`: score policies (fixed sizes, the oracle, predictor
// files) on a sweep dataset, and show a predictor's choice per prompt.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "objective_options.hpp"
#include "options.hpp"

namespace blockpilot::cli {

namespace eval_detail {

/// One `--policy` spec: fixed:B, oracle, mlp:FILE, or pooled:FILE (a refining policy's second stage,
/// scored on the dataset's pooled features).
inline policy_report run_policy(const policy_dataset& d, const std::string& spec, int lo, int hi, int reference) {
  if (spec == "oracle") return evaluate_choices(d, "oracle", oracle_choices(d, lo, hi), lo, hi, reference);
  if (spec.starts_with("fixed:")) {
    const auto b = parse_int(std::string_view(spec).substr(6));
    if (!b) throw error("--policy " + spec + ": expected fixed:B with an integer B");
    return evaluate_choices(d, spec, std::vector<int>(d.size(), *b), lo, hi, reference);
  }
  if (spec.starts_with("mlp:")) {
    const std::filesystem::path file = spec.substr(4);
    policy_report r;
    with_predictor_policy(file, d.vocab, [&](auto& policy) {
      r = evaluate_policy(d, "mlp:" + file.stem().string(), policy, lo, hi, reference);
    });
    return r;
  }
  if (spec.starts_with("pooled:")) {
    const std::filesystem::path file = spec.substr(7);
    return evaluate_pooled_predictor(d, "pooled:" + file.stem().string(), nn::load_predictor<float>(file), lo, hi, reference);
  }
  throw error("--policy " + spec + ": expected fixed:B, oracle, mlp:FILE or pooled:FILE");
}

inline void print_reports(const std::vector<policy_report>& reports, int reference, std::string_view value = "mean tau") {
  std::size_t width = 8;
  for (const auto& r : reports) width = std::max(width, r.name.size());
  fmt::print("{:<{}}  {:>8}  {:>9}  {:>7}  {:>10}  {:>8}  {:>7}  {:>9}\n", "policy", width, value,
             fmt::format("vs {}", reference), "regret", "gain share", "accuracy", "|b-b*|", "fallbacks");
  for (const auto& r : reports)
    fmt::print("{:<{}}  {:>8.4f}  {:>9}  {:>7.4f}  {:>10}  {:>8.3f}  {:>7.3f}  {:>9}\n", r.name, width, r.mean_tau,
               fmt::format("{:+.2f} %", 100 * (r.mean_tau / r.reference_tau - 1)), r.regret,
               r.gain_share ? fmt::format("{:.1f}%", 100 * *r.gain_share) : "n/a", r.accuracy, r.mean_abs_error, r.fallbacks);
}

}  // namespace eval_detail

void add_eval_command(CLI::App& app) {
  struct options {
    std::string dataset, window = "14:18", json_out;
    std::vector<std::string> policies = {"fixed:16", "oracle"};
    int reference = 16;
    bool json = false;
    objective_options objective;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("eval", "Score block-size policies on a sweep dataset (held-out prompts)");
  cmd->add_option("--dataset", o->dataset, "Sweep folder (dataset.safetensors)")->required();
  cmd->add_option("--policy", o->policies, "fixed:B, oracle, mlp:FILE or pooled:FILE; repeatable")->capture_default_str();
  cmd->add_option("--window", o->window, "Oracle window LO:HI")->capture_default_str();
  cmd->add_option("--reference", o->reference, "Fixed size whose gain the oracle share is measured from")->capture_default_str();
  o->objective.add_to(cmd);
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--json-out", o->json_out, "Also write the JSON report here (for plots)")->check(output_file);
  cmd->callback([o] {
    try {
      const auto [lo, hi] = parse_window(o->window);
      const auto data = o->objective.apply(read_policy_dataset(o->dataset));
      std::vector<policy_report> reports;
      for (const auto& spec : o->policies) reports.push_back(eval_detail::run_policy(data, spec, lo, hi, o->reference));
      nlohmann::ordered_json j{{"dataset", o->dataset}, {"prompts", data.size()}, {"window", {lo, hi}}, {"reference", o->reference},
                               {"objective", o->objective.objective}};
      if (data.metadata.contains("step_cost")) j["step_cost"] = nlohmann::json::parse(data.metadata.at("step_cost"));
      for (const auto& r : reports) j["policies"].push_back(to_json(r));
      if (!o->json_out.empty()) write_json_file(o->json_out, j, 2);
      if (o->json) fmt::print("{}\n", j.dump(2));
      else {
        fmt::print("{}: {} prompts, window {}..{}{}\n\n", o->dataset, data.size(), lo, hi,
                   o->objective.objective == "speed" ? ", objective: estimated speedup over the smallest size" : "");
        eval_detail::print_reports(reports, o->reference, o->objective.objective == "speed" ? "speedup" : "mean tau");
      }
    } catch (const std::exception& e) {
      fail("eval", e);
    }
  });
}

void add_predict_command(CLI::App& app) {
  struct options {
    std::string predictor, dataset;
    std::vector<std::string> prompts;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("predict", "A predictor's block size for prompts of a sweep dataset");
  cmd->add_option("--predictor", o->predictor, "Predictor file")->required();
  cmd->add_option("--dataset", o->dataset, "Sweep folder whose prefill rows to read")->required();
  cmd->add_option("--prompt", o->prompts, "Prompt keys (default: all)");
  cmd->add_flag("--json", o->json, "Print the predictions as JSON");
  cmd->callback([o] {
    try {
      const auto data = read_policy_dataset(o->dataset);
      for (const auto& key : o->prompts)
        if (std::find(data.prompts.begin(), data.prompts.end(), key) == data.prompts.end())
          throw error("--prompt " + key + ": no such prompt in " + o->dataset);
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      with_predictor_policy(o->predictor, data.vocab, [&](auto& policy) {
        for (std::size_t i = 0; i < data.size(); ++i) {
          if (!o->prompts.empty() && std::find(o->prompts.begin(), o->prompts.end(), data.prompts[i]) == o->prompts.end()) continue;
          const auto c = policy.choose(dataset_request(data, i));
          rows.push_back({{"prompt", data.prompts[i]}, {"block_size", c.block_size}, {"fallback", c.fallback}});
        }
      });
      if (o->json) {
        fmt::print("{}\n", nlohmann::ordered_json{{"predictor", o->predictor}, {"predictions", rows}}.dump(2));
        return;
      }
      fmt::print("{:>8}  {:>10}  {}\n", "prompt", "block size", "fallback");
      for (const auto& r : rows)
        fmt::print("{:>8}  {:>10}  {}\n", r["prompt"].get<std::string>(), r["block_size"].get<int>(),
                   r["fallback"].get<bool>() ? "yes" : "no");
    } catch (const std::exception& e) {
      fail("predict", e);
    }
  });
}

}  // namespace blockpilot::cli
