// `blockpilot measure`: decodes every prompt with each policy (interleaved), live, and reports measured tau,
// tokens per second, the speedup over the first policy and the policy's share of the request time
// (synthetic pair, or a GGUF target with --model).

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "blockpilot/engine/batched_decoder.hpp"
#include "blockpilot/engine/step_timing.hpp"
#include "blockpilot_workbench/eval/measure.hpp"
#include "blockpilot_workbench/io/trace_json.hpp"
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
  if constexpr (!policy_fits_drafter<Policy, Drafter>) {
    throw cutoff_needs_confidence(m.name);
  } else {
    auto decoder = std::make_shared<speculative_decoder<Drafter, Target, Policy, Rule>>(drafter, target, std::move(policy));
    auto scratch = std::make_shared<generation_result>();
    return [decoder, scratch, &m, &work](std::size_t i) {
      if constexpr (std::same_as<Policy, per_prompt_oracle>) decoder->policy().key = work.keys[i];
      measure_request(*decoder, m, work.keys[i], work.prompts[i], work.config, *scratch);
    };
  }
}

/// decode_one for --batch N: called with a group's first prompt, decodes prompts first .. first + N - 1
/// together (batched_decoder: every step drafts each request's block and scores all of them in one pass),
/// each request on its own copy of the drafter and its own verifier of the target's model (made once here),
/// its own copy of the policy (request_policy). Each request goes to `m` as it would alone, its decode time
/// the group's share by tokens; the group, its wall time from the first step to the last, to `groups`.
/// With `rows` (joint), every step's drafts are planned for the group together (batched_decoder::plan_drafts)
/// by the step cost over rows, refined from the steps' scoring times when `learn_rows`.
template <class Rule, class Drafter, class Target, class Policy>
std::function<void(std::size_t)> decode_batch(const Drafter& drafter, const Target& target, Policy policy,
                                              policy_measurement& m, policy_measurement& groups, const workload& work,
                                              std::size_t n, std::optional<step_cost_model> rows = std::nullopt,
                                              bool learn_rows = true) {
  if constexpr (!policy_fits_drafter<Policy, Drafter>) {
    throw cutoff_needs_confidence(m.name);
  } else if constexpr (!std::same_as<Target, llama_verifier> || !std::copy_constructible<Drafter>) {
    throw error("--batch: needs --model and a lookup drafter (each request gets a copy of it)");
  } else {
    struct state {
      state(const Drafter& d, std::size_t n, Policy p, std::optional<step_cost_model> r, bool learn)
          : drafters(n, d), prototype(std::move(p)), rows(std::move(r)), learn_rows(learn) {}
      std::vector<Drafter> drafters;
      std::vector<std::unique_ptr<Target>> verifiers;
      Policy prototype;
      std::optional<step_cost_model> rows;  // joint: the step cost by rows
      bool learn_rows;
      batched_decoder<Drafter, Target, Policy, Rule> batch;
      /// One step; joint, planned by the current row costs, which its timing then refines.
      void step() {
        if constexpr (batch_trimming_policy<Policy>) {
          if (rows) {
            std::vector<double> curve;
            for (int r = 1; r <= rows->max_block_size(); ++r) curve.push_back(rows->cost(r));
            batch.plan_drafts(std::move(curve));
          }
        }
        batch.step();
        if (rows && learn_rows) rows->observe(batch.last_step().rows, batch.last_step().score_seconds);
      }
    };
    if constexpr (!batch_trimming_policy<Policy>)
      if (rows) throw error("--policy " + m.name + ": only the speed cut-off's drafts can be planned for a batch");
    auto s = std::make_shared<state>(drafter, n, std::move(policy), std::move(rows), learn_rows);
    for (std::size_t k = 0; k < n; ++k) s->verifiers.push_back(std::make_unique<Target>(target.model(), target.options()));
    return [s, &m, &groups, &work, n](std::size_t first) {
      const std::size_t count = std::min(n, work.prompts.size() - first);
      std::map<request_id, std::size_t> slot;
      for (std::size_t k = 0; k < count; ++k)
        slot[s->batch.add(s->drafters[k], *s->verifiers[k], work.prompts[first + k], work.config, request_policy(s->prototype))] = k;
      const auto t0 = std::chrono::steady_clock::now();
      while (!s->batch.empty()) s->step();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::vector<generation_result> done(count);
      for (auto& f : s->batch.take_finished()) done[slot.at(f.id)] = std::move(f.result);
      std::int64_t after_first = 0;
      double tau = 0, policy_seconds = 0;
      for (std::size_t k = 0; k < count; ++k) {
        if (done[k].error != status::success)
          throw error("measure " + m.name + ": prompt " + work.keys[first + k] + " failed in " + std::string(done[k].failed_stage) +
                      ": " + std::string(to_string(done[k].error)));
        after_first += done[k].stats.generated - 1;
      }
      for (std::size_t k = 0; k < count; ++k) {
        request_stats st = done[k].stats;
        const double share = after_first > 0 ? static_cast<double>(st.generated - 1) / static_cast<double>(after_first)
                                             : 1.0 / static_cast<double>(count);
        st.seconds.total = st.seconds.prefill + share * seconds;  // the stages overlap: verify is the whole batch's
        m.add(st);
        m.outputs.push_back(done[k].tokens);
        tau += m.tau.back() / static_cast<double>(count);
        policy_seconds += st.seconds.policy;
        groups.steps += st.steps;
        groups.fallbacks += st.policy_fallback;
      }
      groups.tau.push_back(tau);
      groups.tokens.push_back(after_first + 1);
      groups.decode_seconds.push_back(seconds);
      groups.generated += after_first + 1;
      groups.seconds.policy += policy_seconds;
      groups.seconds.total += seconds;
    };
  }
}

/// The policy a --policy spec decodes with: without its @DRAFTER, and joint[:MAX][,K=V...] (the speed cut-off
/// whose drafts the batch plans together) as its speed spec.
inline std::string own_policy_spec(const std::string& spec) {
  std::string own = spec.substr(0, spec.find('@'));
  return own.starts_with("joint") ? "speed" + own.substr(5) : own;
}

}  // namespace measure_detail

void add_measure_command(CLI::App& app) {
  struct options {
    workload_options work;
    std::vector<std::string> policies = {"none", "fixed:16"};
    std::string rule, oracle_sweep, window = "14:18", json_out, trace_out, versus;
    int rounds = 1, batch = 1;
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
                  "prefix of drafts with the most expected tokens per unit of step cost), joint[:MAX][,K=V...] (with "
                  "--batch: the speed cut-off with every step's drafts planned for the whole batch, priced by its rows), "
                  "cutoff:P_MIN[,INNER] (verify "
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
  cmd->add_option("--rounds", o->rounds, "Decode the prompt set this many times (the policy that decodes a prompt first moves on by one each "
                                       "prompt and each round)")
      ->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("--batch", o->batch, "Real mode, lookup drafter: serve the prompts N at a time, their blocks scored "
                                       "together in one pass each step; speeds are the groups' (tokens over wall time)")
      ->capture_default_str()->check(CLI::Range(1, 64));
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
      for (const char* option : {"--window", "--objective", "--step-cost"})
        if (cmd->count(option) > 0 && o->oracle_sweep.empty())
          throw error(std::string(option) + ": sets how --policy oracle chooses: needs --oracle-sweep DIR");
      std::optional<per_prompt_oracle> oracle;
      if (!o->oracle_sweep.empty()) {
        const auto [lo, hi] = parse_window(o->window);
        oracle = per_prompt_oracle::from(o->oracle_objective.apply(read_policy_dataset(o->oracle_sweep)), lo, hi);
      }
      if (o->batch > 1 && o->work.model.empty()) throw error("--batch: needs --model (a real target to batch)");
      for (const auto& spec : o->policies) {
        if (o->batch > 1 && (spec.find('@') != std::string::npos || spec == "oracle"))
          throw error("--batch: --policy " + spec + " decodes alone (@DRAFTER, oracle); not with a batch");
        if (o->batch == 1 && spec.starts_with("joint"))
          throw error("--policy " + spec + ": plans the drafts of requests served together: needs --batch N > 1");
        check_policy_spec(measure_detail::own_policy_spec(spec), oracle ? &*oracle : nullptr);
      }
      std::vector<policy_measurement> results(o->policies.size()), groups(o->policies.size());
      step_seconds costs, row_costs;  // row_costs: a batch step's seconds by its rows (--batch)
      o->work.run(*cmd, max_block_size, 0, 1, [&](auto& drafter, auto& target, const workload& work) {
        if (oracle) oracle->check_prompts(work.keys, work.prompts);
        const std::string rule = rule_or_default(o->rule, work.config.temperature);
        if (!o->trace_out.empty() && (work.config.temperature != 0 || rule != "greedy") && o->policies.front() != "none")
          throw error("--trace-out: at T > 0 the continuation depends on the policy: needs plain decoding (--policy none) "
                      "first, whose continuation is the target's own sample");
        with_rule(rule, [&](auto r) {
          if (std::any_of(o->policies.begin(), o->policies.end(), uses_step_costs)) {
            if (o->batch == 1) {
              costs = measure_step_seconds(target, work.prompts.front(), speed_aware_max_block, 3);
            } else if constexpr (std::same_as<std::decay_t<decltype(target)>, llama_verifier>) {
              // A request's step in a batch of N is priced as if every request scored a block of its size:
              // b rows each cost what one pass of N b rows does (on a verifier of its own, for the positions).
              const int n = o->batch, sizes = std::max(1, std::min(speed_aware_max_block, 64 / n));
              auto probe_options = target.options();
              probe_options.max_block = n * sizes;
              probe_options.max_positions = static_cast<std::int64_t>(work.prompts.front().size()) + 4 * n * sizes + 1;
              llama_verifier probe(target.model(), probe_options);
              row_costs = measure_step_seconds(probe, work.prompts.front(), n * sizes, 3);
              for (int b = 1; b <= sizes; ++b) costs.push_back(row_costs[static_cast<std::size_t>(n * b - 1)]);
            }
            fmt::print(stderr, "step time measured at load (ms, b = 1..{}{}): {::.2f}\n", costs.size(),
                       o->batch > 1 ? fmt::format(", {} requests' blocks together", o->batch) : "", milliseconds(costs));
          }
          // One decoder per policy, interleaved: each prompt is decoded by every policy in turn, the
          // first of them moving on by one each prompt and each round.
          std::vector<std::function<void(std::size_t)>> decode;
          using drafter_type = std::decay_t<decltype(drafter)>;
          std::vector<std::unique_ptr<lookup_drafter>> other_lookups;  // of policies decoded with another lookup
          std::vector<std::unique_ptr<owned_dflash_drafter>> other_dflash;  // ... or another DFlash drafter
          for (std::size_t p = 0; p < o->policies.size(); ++p) {
            results[p].name = groups[p].name = o->policies[p];
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
            const std::string spec = measure_detail::own_policy_spec(o->policies[p]);
            std::optional<step_cost_model> rows;
            bool learn_rows = true;
            if (o->policies[p].starts_with("joint")) {
              const auto comma = spec.find(',');
              const auto [options, cost_options] = speed_options(
                  o->policies[p], comma == std::string::npos ? std::string_view{} : std::string_view(spec).substr(comma + 1));
              rows = step_cost_model::from_seconds(row_costs, cost_options);
              learn_rows = options.learn_costs;
            }
            with_policy(spec, oracle ? &*oracle : nullptr, target.vocab_size(), costs, [&](auto& policy) {
              if (o->batch > 1)
                decode.push_back(measure_detail::decode_batch<decltype(r)>(*own, target, std::move(policy), results[p], groups[p],
                                                                            work, static_cast<std::size_t>(o->batch), rows,
                                                                            learn_rows));
              else
                decode.push_back(measure_detail::decode_one<decltype(r)>(*own, target, std::move(policy), results[p], work));
            });
          }
          progress_bar bar("measure", !o->quiet);
          // With --batch, a unit is a group of prompts, called with its first.
          const auto step = static_cast<std::size_t>(o->batch);
          const std::size_t n = (work.prompts.size() + step - 1) / step, total = n * static_cast<std::size_t>(o->rounds);
          for (std::size_t k = 0; k < total; ++k) {
            const std::size_t round = k / n, prompt = k % n;
            for (std::size_t p = 0; p < decode.size(); ++p) decode[(p + prompt + round) % decode.size()](prompt * step);
            bar.update(k + 1, total);
          }
        });
        nlohmann::ordered_json j{{"workload", work.metadata}, {"rule", rule}, {"prompts", work.keys},
                                 {"timing_comparable", !o->work.model.empty()},
                                 {"temperature", work.config.temperature}, {"max_new_tokens", work.config.max_new_tokens},
                                 {"rounds", o->rounds}, {"batch", o->batch}, {"step_seconds_at_load", costs}};
        for (std::size_t p = 0; p < results.size(); ++p) {
          j["policies"].push_back(measure_detail::to_json(results[p]));
          if (o->batch > 1)
            j["policies"].back()["groups"] = {{"tokens", groups[p].tokens}, {"decode_seconds", groups[p].decode_seconds}};
        }
        if (!o->json_out.empty()) write_json_file(o->json_out, j, 2);
        if (!o->trace_out.empty()) {
          decode_trace t{work.metadata, target.vocab_size(), work.config.temperature, work.config.max_new_tokens, {}};
          for (std::size_t i = 0; i < work.keys.size(); ++i)
            t.requests.push_back({work.keys[i], work.prompts[i], results.front().outputs[i]});
          write_json_file(o->trace_out, t.to_json(), -1);
        }
        if (o->json) {
          fmt::print("{}\n", j.dump(2));
          return;
        }
        fmt::print("{} prompts, rule {}, T = {}, {} new tokens at most\n\n", work.keys.size(), rule, work.config.temperature,
                   work.config.max_new_tokens);
        if (o->rounds > 1) fmt::print("{} rounds, policies interleaved prompt by prompt\n", o->rounds);
        const std::size_t versus_index = static_cast<std::size_t>(versus - o->policies.begin());
        if (o->batch > 1) {
          fmt::print("served {} at a time: speeds and intervals over the {} groups\n", o->batch, groups.front().tau.size() / o->rounds);
          measure_detail::print(groups, true, groups.front().tau.size() / static_cast<std::size_t>(o->rounds),
                                o->versus.empty() ? nullptr : &groups[versus_index]);
        } else {
          measure_detail::print(results, !o->work.model.empty(), work.keys.size(), o->versus.empty() ? nullptr : &results[versus_index]);
        }
      });
    } catch (const std::exception& e) {
      fail("measure", e);
    }
  });
}

}  // namespace blockpilot::cli
