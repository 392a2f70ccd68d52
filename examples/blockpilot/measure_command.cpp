// `blockpilot measure`: decodes every prompt with each policy (interleaved), live, and reports measured tau,
// tokens per second, the speedup over the first policy and the policy's share of the request time
// (synthetic pair, or a GGUF target with --model).

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "blockpilot_workbench/eval/measure.hpp"
#include "objective_options.hpp"
#include "policy_spec.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "workload.hpp"

namespace blockpilot::cli {

namespace measure_detail {

inline nlohmann::ordered_json to_json(const policy_measurement& m) {
  return {{"policy", m.name},
          {"mean_tau", m.mean_tau()},
          {"decode_tokens_per_second", m.decode_tokens_per_second()},
          {"tokens_per_second", m.tokens_per_second()},
          {"generated", m.generated},
          {"steps", m.steps},
          {"fallbacks", m.fallbacks},
          {"seconds",
           {{"prefill", m.seconds.prefill}, {"policy", m.seconds.policy}, {"draft", m.seconds.draft},
            {"verify", m.seconds.verify}, {"accept", m.seconds.accept}, {"total", m.seconds.total}}},
          {"tau", m.tau},
          {"tokens", m.tokens},
          {"first_block_size", m.first_block_size},
          {"decode_seconds", m.decode_seconds},
          {"steps_by_block", m.steps_by_block},
          {"steps_by_length", m.steps_by_length}};
}

/// The table; `timed` is false on the synthetic pair, whose drafter and target cost nothing like
/// models (its tokens/s compare no two policies), so there it shows tau and fallbacks only. With
/// `versus`, a column of every policy's speed over that one, with its interval.
inline void print(const std::vector<policy_measurement>& ms, bool timed, std::size_t prompts,
                  const policy_measurement* versus = nullptr) {
  std::size_t width = 8;
  for (const auto& m : ms) width = std::max(width, m.name.size());
  if (!timed) {
    fmt::print("synthetic pair: measured tau only (its costs are not a model's, so tokens/s compare nothing)\n");
    fmt::print("{:<{}}  {:>8}  {:>9}\n", "policy", width, "mean tau", "fallbacks");
    for (const auto& m : ms) fmt::print("{:<{}}  {:>8.4f}  {:>9}\n", m.name, width, m.mean_tau(), m.fallbacks);
    return;
  }
  const auto interval = [](const speedup_estimate& e) { return fmt::format("[{:.3f}, {:.3f}]", e.low, e.high); };
  fmt::print("{:<{}}  {:>8}  {:>10}  {:>9}  {:>16}  {:>11}  {:>12}  {:>9}", "policy", width, "mean tau", "decode t/s",
             "speedup", "95 % interval", "policy ms", "policy share", "fallbacks");
  if (versus) fmt::print("  vs {}", versus->name);
  fmt::print("\n");
  for (const auto& m : ms) {
    const auto n = static_cast<double>(m.tau.size());
    const auto e = decode_speedup(m, ms.front(), prompts);
    fmt::print("{:<{}}  {:>8.4f}  {:>10.2f}  {:>8.3f}x  {:>16}  {:>11.3f}  {:>11.4f}%  {:>9}", m.name, width, m.mean_tau(),
               m.decode_tokens_per_second(), e.ratio, interval(e),
               1e3 * m.seconds.policy / n, 100 * m.seconds.policy / m.seconds.total, m.fallbacks);
    if (versus) {
      const auto v = decode_speedup(m, *versus, prompts);
      fmt::print("  {:.3f} {}", v.ratio, interval(v));
    }
    fmt::print("\n");
  }
}

/// Decodes prompt i of `work` with `policy` (its own decoder) into `m`, when called with i.
template <class Rule, class Drafter, class Target, class Policy>
std::function<void(std::size_t)> decode_one(Drafter& drafter, Target& target, Policy policy, policy_measurement& m,
                                            const workload& work) {
  if constexpr (draft_trimming_policy<Policy> && !drafter_with_confidence<Drafter>) {
    throw error("--policy " + m.name + ": the cut-off needs a drafter that reports its confidence (lookup, dflash)");
  } else {
    auto decoder = std::make_shared<speculative_decoder<Drafter, Target, Policy, Rule>>(drafter, target, std::move(policy));
    auto scratch = std::make_shared<generation_result>();
    return [decoder, scratch, &m, &work](std::size_t i) {
      if constexpr (std::same_as<Policy, per_prompt_oracle>) decoder->policy().key = work.keys[i];
      measure_request(*decoder, m, work.keys[i], work.prompts[i], work.config, *scratch);
    };
  }
}

/// The largest size the speed-aware policies may choose: the step costs are measured up to it at load.
constexpr int speed_aware_max_block = 16;

/// Whether a spec needs the verifier's measured step costs.
inline bool uses_step_costs(const std::string& spec) {
  return spec.find("adaptive") != std::string::npos || spec.starts_with("speed");
}

}  // namespace measure_detail

void add_measure_command(CLI::App& app) {
  struct options {
    workload_options work;
    std::vector<std::string> policies = {"none", "fixed:16"};
    std::string rule, oracle_sweep, window = "14:18", json_out, trace_out, versus;
    int rounds = 1;
    objective_options oracle_objective;
    bool quiet = false, json = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand(
      "measure", "Decode every prompt with each policy; report measured tau, tokens/s and speedup over the first policy");
  o->work.add_to(cmd);
  cmd->add_option("--policy", o->policies,
                  "none (plain decoding), fixed:B, mlp:FILE, refine:FIRST,SECOND (FIRST fixed:B or a compact predictor, "
                  "SECOND a pooled-rows predictor), adaptive[:MAX] (a new size every step), speed[:MAX][,K=V...] (the "
                  "prefix of drafts with the most expected tokens per unit of step cost), cutoff:P_MIN[,INNER] (verify "
                  "only drafts the drafter is sure of) or oracle, each optionally @DRAFTER to decode with another drafter "
                  "of --drafter's kind (lookup[:evidence][,corpus=FILE] with --drafter lookup..., or "
                  "dflash:FOLDER[,vocab=N][,weights=S] tapping the same target layers with --drafter dflash:...); "
                  "repeatable, the first is the speedup's baseline")
      ->capture_default_str();
  cmd->add_option("--versus", o->versus, "One of the --policy specs: the table adds each policy's decode speed over "
                                         "it, with a 95 % bootstrap interval over prompts (a model's timings only)");
  cmd->add_option("--rule", o->rule, "greedy, sample-match or rejection (default: greedy at T = 0, else sample-match)")
      ->check(CLI::IsMember({"greedy", "sample-match", "rejection"}));
  cmd->add_option("--oracle-sweep", o->oracle_sweep, "Sweep folder of the same prompts: --policy oracle decodes each "
                                                     "prompt at its best size of --window there");
  cmd->add_option("--window", o->window, "The oracle's window LO:HI")->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Decode the prompt set this many times, each round starting with the next policy")
      ->capture_default_str()->check(CLI::Range(1, 100));
  o->oracle_objective.add_to(cmd);
  cmd->add_option("--json-out", o->json_out, "Also write the measurements here (per prompt: tau, tokens)")->check(output_file);
  cmd->add_option("--trace-out", o->trace_out, "Write every prompt's token ids and its continuation (the first policy's, "
                                               "first round) here: at T = 0 for `replay-steps`, at T > 0 (first policy "
                                               "none) as the target's samples")
      ->check(output_file);
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->add_flag("--json", o->json, "Print the measurements as JSON instead of the table");
  cmd->callback([o, cmd] {
    try {
      const auto versus = std::find(o->policies.begin(), o->policies.end(), o->versus);
      if (!o->versus.empty() && versus == o->policies.end())
        throw error("--versus " + o->versus + ": not one of the --policy specs");
      if (!o->versus.empty() && o->work.model.empty())
        throw error("--versus compares tokens/s, which the synthetic pair's costs do not: needs --model");
      std::optional<per_prompt_oracle> oracle;
      if (!o->oracle_sweep.empty()) {
        const auto [lo, hi] = parse_window(o->window);
        oracle = per_prompt_oracle::from(o->oracle_objective.apply(read_policy_dataset(o->oracle_sweep)), lo, hi);
      }
      std::vector<policy_measurement> results(o->policies.size());
      step_seconds costs;
      o->work.run(*cmd, max_block_size, 0, 1, [&](auto& drafter, auto& target, const workload& work) {
        const std::string rule = rule_or_default(o->rule, work.config.temperature);
        if (!o->trace_out.empty() && (work.config.temperature != 0 || rule != "greedy") && o->policies.front() != "none")
          throw error("--trace-out: at T > 0 the continuation depends on the policy: needs plain decoding (--policy none) "
                      "first, whose continuation is the target's own sample");
        with_rule(rule, [&](auto r) {
          if (std::any_of(o->policies.begin(), o->policies.end(), measure_detail::uses_step_costs)) {
            costs = measure_step_seconds(target, work.prompts.front(), measure_detail::speed_aware_max_block, 3);
            std::vector<double> ms;
            for (const double c : costs) ms.push_back(1e3 * c);
            fmt::print(stderr, "step time measured at load (ms, b = 1..{}): {::.2f}\n", costs.size(), ms);
          }
          // One decoder per policy, interleaved: each prompt is decoded by every policy in turn, the
          // first policy of a round moving on by one each round.
          std::vector<std::function<void(std::size_t)>> decode;
          using drafter_type = std::decay_t<decltype(drafter)>;
          std::vector<std::unique_ptr<lookup_drafter>> other_lookups;  // of policies decoded with another lookup
          std::vector<std::unique_ptr<owned_dflash_drafter>> other_dflash;  // ... or another DFlash drafter
          for (std::size_t p = 0; p < o->policies.size(); ++p) {
            results[p].name = o->policies[p];
            const auto at = o->policies[p].find('@');
            auto* own = &drafter;
            if (at != std::string::npos) {
              const auto other = std::string_view(o->policies[p]).substr(at + 1);
              if constexpr (std::same_as<drafter_type, lookup_drafter>) {
                other_lookups.push_back(std::make_unique<lookup_drafter>(
                    load_lookup_drafter(other, drafter.vocab_size(), drafter.max_draft_rows(),
                                        "--policy " + o->policies[p] + ": @DRAFTER is a lookup drafter")));
                own = other_lookups.back().get();
              } else if constexpr (std::same_as<drafter_type, dflash_drafter>) {
                other_dflash.push_back(std::make_unique<owned_dflash_drafter>(other, drafter, target.model(),
                                                                                "--policy " + o->policies[p]));
                own = &other_dflash.back()->drafter;
              } else {
                throw error("--policy " + o->policies[p] +
                            ": @DRAFTER needs --drafter lookup[...] or dflash:... (it swaps variants of those)");
              }
            }
            with_policy(o->policies[p].substr(0, at), oracle ? &*oracle : nullptr, target.vocab_size(), costs, [&](auto& policy) {
              decode.push_back(measure_detail::decode_one<decltype(r)>(*own, target, std::move(policy), results[p], work));
            });
          }
          progress_bar bar("measure", !o->quiet);
          const std::size_t n = work.prompts.size(), total = n * static_cast<std::size_t>(o->rounds);
          for (std::size_t k = 0; k < total; ++k) {
            const std::size_t round = k / n;
            for (std::size_t p = 0; p < decode.size(); ++p) decode[(p + round) % decode.size()](k % n);
            bar.update(k + 1, total);
          }
        });
        nlohmann::ordered_json j{{"workload", work.metadata}, {"rule", rule}, {"prompts", work.keys},
                                 {"timing_comparable", !o->work.model.empty()},
                                 {"temperature", work.config.temperature}, {"max_new_tokens", work.config.max_new_tokens},
                                 {"rounds", o->rounds}, {"step_seconds_at_load", costs}};
        for (const auto& m : results) j["policies"].push_back(measure_detail::to_json(m));
        if (!o->json_out.empty()) write_json_file(o->json_out, j, 2);
        if (!o->trace_out.empty()) {
          nlohmann::ordered_json t{{"workload", work.metadata}, {"vocab", target.vocab_size()},
                                   {"temperature", work.config.temperature}, {"max_new_tokens", work.config.max_new_tokens},
                                   {"requests", nlohmann::json::array()}};
          for (std::size_t i = 0; i < work.keys.size(); ++i)
            t["requests"].push_back({{"prompt", work.keys[i]}, {"prompt_ids", work.prompts[i]},
                                     {"tokens", results.front().outputs[i]}});
          write_json_file(o->trace_out, t, -1);
        }
        if (o->json) {
          fmt::print("{}\n", j.dump(2));
          return;
        }
        fmt::print("{} prompts, rule {}, T = {}, {} new tokens at most\n\n", work.keys.size(), rule, work.config.temperature,
                   work.config.max_new_tokens);
        if (o->rounds > 1) fmt::print("{} rounds, policies interleaved prompt by prompt\n", o->rounds);
        measure_detail::print(results, !o->work.model.empty(), work.keys.size(),
                              o->versus.empty() ? nullptr : &results[static_cast<std::size_t>(versus - o->policies.begin())]);
      });
    } catch (const std::exception& e) {
      fail("measure", e);
    }
  });
}

}  // namespace blockpilot::cli
