// `blockpilot compare`: the policy comparison. Sweeps the synthetic pair over block sizes, replays
// the measured DFlash acceptance data, and prints both side by side (tau per size, fixed sizes,
// per-prompt oracles), optionally as JSON for plotting.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "blockpilot_workbench/eval/replay.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
#include "data_dir.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "replay_report.hpp"

namespace blockpilot::cli {

namespace compare_detail {

inline std::string cell(std::optional<double> v, const char* format = "{:.4f}") {
  return v ? fmt::format(fmt::runtime(format), *v) : std::string("-");
}

inline void print_side_by_side(const replay_report& synthetic, const replay_report& real) {
  const auto base_s = synthetic.fixed_tau(replay_detail::reference_size);
  const auto base_r = real.fixed_tau(replay_detail::reference_size);
  fmt::print("\n{:>6}  {:>14}  {:>10}  {:>14}  {:>10}\n", "size", "synthetic tau", "/ tau(16)", "real tau", "/ tau(16)");
  for (const auto& [b, tau] : synthetic.fixed) {
    const auto r = real.fixed_tau(b);
    fmt::print("{:>6}  {:>14.4f}  {:>10}  {:>14}  {:>10}\n", b, tau, cell(base_s ? std::optional(tau / *base_s) : std::nullopt),
               cell(r), cell(r && base_r ? std::optional(*r / *base_r) : std::nullopt));
  }
  const auto row = [&](const std::string& name, double s, std::optional<double> r) {
    fmt::print("{:<36}  {:>10.4f}  {:>9}  {:>10}  {:>9}\n", name, s, replay_detail::percent_vs(s, base_s), cell(r),
               r ? replay_detail::percent_vs(*r, base_r) : "");
  };
  fmt::print("\n{:<36}  {:>10}  {:>9}  {:>10}  {:>9}\n", "policy (mean tau)", "synthetic", "vs 16", "real", "vs 16");
  if (base_s) row("fixed 16 (DFlash)", *base_s, base_r);
  row(fmt::format("best fixed: synthetic {} / real {}", synthetic.best_fixed_size, real.best_fixed_size),
      synthetic.best_fixed_tau, std::optional(real.best_fixed_tau));
  row(fmt::format("oracle over {}..{}", synthetic.window_lo, synthetic.window_hi), synthetic.oracle_window,
      std::optional(real.oracle_window));
  row("oracle over all sizes", synthetic.oracle_all, std::optional(real.oracle_all));
}

}  // namespace compare_detail

/// Registers `compare` on `app`.
void add_compare_command(CLI::App& app) {
  struct options {
    int prompts = 64, max_new = 256;
    std::int64_t vocab = 151936;
    std::uint64_t seed = 2026;
    std::vector<int> sizes = {4, 8, 13, 14, 15, 16, 17, 18, 19, 32};
    std::string window = "14:18", acceptance_dir, json_out;
    bool json = false, quiet = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("compare", "Policy comparison: synthetic pair sweep next to the measured DFlash data");
  cmd->add_option("--prompts", o->prompts, "Synthetic prompts")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--max-new-tokens", o->max_new, "Tokens per request")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab", o->vocab, "Synthetic vocabulary size")->capture_default_str()->check(CLI::Range(16, 1 << 23));
  cmd->add_option("--seed", o->seed, "Synthetic world seed")->capture_default_str();
  cmd->add_option("--sizes", o->sizes, "Block sizes to sweep")->capture_default_str()->delimiter(',')->check(CLI::Range(1, 256));
  cmd->add_option("--window", o->window, "Oracle window LO:HI")->capture_default_str();
  cmd->add_option("--acceptance-dir", o->acceptance_dir,
                 "Measured <B>.json folder to replay beside the synthetic sweep (default: examples/data/acceptance/gsm8k_T0)");
  cmd->add_flag("--json", o->json, "Print JSON instead of tables");
  cmd->add_option("--json-out", o->json_out, "Also write the JSON report to this file (for plots)")->check(output_file);
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->callback([o] {
    try {
      // Every option is checked, and the measured data read, before the sweep starts.
      const auto [lo, hi] = parse_window(o->window);
      std::sort(o->sizes.begin(), o->sizes.end());
      o->sizes.erase(std::unique(o->sizes.begin(), o->sizes.end()), o->sizes.end());
      for (int b = lo; b <= hi; ++b)
        if (!std::binary_search(o->sizes.begin(), o->sizes.end(), b))
          throw error(fmt::format("--window {}: size {} is not among --sizes", o->window, b));
      if (o->acceptance_dir.empty()) o->acceptance_dir = (data_dir() / "acceptance" / "gsm8k_T0").string();
      const auto measured = read_acceptance_folder(o->acceptance_dir);
      (void)window_sizes(measured, lo, hi);
      synthetic_params params;
      params.vocab = o->vocab;
      params.seed = o->seed;
      const synthetic_world world(params);
      synthetic_drafter drafter(world, o->sizes.back());
      synthetic_target target(world);
      const auto prompts = synthetic_prompts(o->prompts, o->vocab, 8, 64, o->seed + 1);
      generation_config config;
      config.max_new_tokens = o->max_new;
      progress_bar bar("sweep", !o->quiet);
      const auto table = sweep_block_sizes(drafter, target, prompts, o->sizes, config,
                                           [&](std::size_t done, std::size_t total) { bar.update(done, total); });
      const auto synthetic = replay(table, lo, hi, nullptr);

      const replay_report real = replay(measured, lo, hi, nullptr);

      nlohmann::ordered_json j{{"synthetic", to_json(synthetic)},
                               {"synthetic_config", {{"prompts", o->prompts}, {"max_new_tokens", o->max_new}, {"vocab", o->vocab}, {"seed", o->seed}}}};
      j["real"] = to_json(real), j["real_source"] = o->acceptance_dir;
      if (!o->json_out.empty()) write_json_file(o->json_out, j, 2);
      if (o->json) {
        fmt::print("{}\n", j.dump(2));
        return;
      }
      fmt::print("synthetic pair: {} prompts, vocabulary {}, {} new tokens, T = 0, greedy match\n", o->prompts, o->vocab, o->max_new);
      fmt::print("real: {} ({} prompts, a Qwen3 target with its DFlash-b16 drafter)\n", o->acceptance_dir, real.prompts);
      compare_detail::print_side_by_side(synthetic, real);
    } catch (const std::exception& e) {
      fail("compare", e);
    }
  });
}

}  // namespace blockpilot::cli
