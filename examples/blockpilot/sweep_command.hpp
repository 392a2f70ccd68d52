// `blockpilot sweep`: decodes every prompt at every candidate size and writes the predictor's
// training data (dataset.safetensors + the reference <B>.json files). Resumable, shardable, mergeable.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "blockpilot/eval/sweep.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "synthetic_options.hpp"

namespace blockpilot::cli {

inline void add_sweep_command(CLI::App& app) {
  struct options {
    synthetic_options synthetic;
    std::string window = "14:18", shard = "0/1", out, rule = "greedy";
    std::vector<std::string> merge;
    bool quiet = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("sweep", "Decode prompts at every candidate block size; write a predictor dataset");
  o->synthetic.add_to(cmd);
  cmd->add_option("--window", o->window, "Candidate sizes LO:HI (B-k..B+k)")->capture_default_str();
  cmd->add_option("--rule", o->rule, "Acceptance rule")->capture_default_str()->check(CLI::IsMember({"greedy", "sample-match", "rejection"}));
  cmd->add_option("--shard", o->shard, "Run only prompts i with i mod N == I (I/N); merge the parts with --merge")->capture_default_str();
  cmd->add_option("--merge", o->merge, "Merge these sweep folders into --out instead of sweeping");
  cmd->add_option("--out", o->out, "Output folder (a sweep interrupted there resumes)")->required();
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->callback([o] {
    try {
      if (!o->merge.empty()) {
        std::vector<policy_dataset> parts;
        for (const auto& dir : o->merge) parts.push_back(read_policy_dataset(dir));
        const auto merged = merge_policy_datasets(parts);
        write_policy_dataset(merged, o->out);
        fmt::print("merged {} folders: {} prompts -> {}\n", parts.size(), merged.size(), o->out);
        return;
      }
      const auto [lo, hi] = parse_window(o->window);
      const auto [shard, shards] = parse_shard(o->shard);
      std::vector<int> sizes;
      for (int b = lo; b <= hi; ++b) sizes.push_back(b);
      if (std::find(sizes.begin(), sizes.end(), 16) == sizes.end()) sizes.push_back(16), std::sort(sizes.begin(), sizes.end());
      const auto world = o->synthetic.world();
      synthetic_drafter drafter(world, sizes.back());
      synthetic_target target(world);
      const auto all = o->synthetic.prompt_set();
      std::vector<std::string> keys;
      std::vector<std::vector<token_id>> prompts;
      for (std::size_t i = static_cast<std::size_t>(shard); i < all.size(); i += static_cast<std::size_t>(shards)) {
        keys.push_back(std::to_string(i));
        prompts.push_back(all[i]);
      }
      std::filesystem::create_directories(o->out);
      progress_bar bar("sweep " + o->shard, !o->quiet);
      const auto progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
      const auto journal = std::filesystem::path(o->out) / "journal.jsonl";
      const auto config = o->synthetic.generation();
      policy_dataset d =
          o->rule == "greedy" ? sweep_policy_dataset<greedy_match>(drafter, target, keys, prompts, sizes, config, journal, progress)
          : o->rule == "sample-match"
              ? sweep_policy_dataset<sample_and_match>(drafter, target, keys, prompts, sizes, config, journal, progress)
              : sweep_policy_dataset<rejection_sampling>(drafter, target, keys, prompts, sizes, config, journal, progress);
      d.metadata = {{"generator", o->synthetic.describe()},
                    {"rule", o->rule},
                    {"temperature", std::to_string(config.temperature)},
                    {"max_new_tokens", std::to_string(config.max_new_tokens)},
                    {"shard", o->shard}};
      write_policy_dataset(d, o->out);
      fmt::print("{} prompts x {} sizes -> {}\n", d.size(), d.sizes.size(), o->out);
    } catch (const std::exception& e) {
      fmt::print(stderr, "blockpilot sweep: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace blockpilot::cli
