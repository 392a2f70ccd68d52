// The synthetic pair as the subcommands configure it: world, prompt set and generation options.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "blockpilot/engine/generation.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"

namespace blockpilot::cli {

struct synthetic_options {
  int prompts = 256;
  std::uint64_t prompt_seed = 1;
  std::int64_t vocab = 32768;
  std::uint64_t seed = 2026;
  int max_new = 256;
  float temperature = 0.0f;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--prompts", prompts, "Number of synthetic prompts")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--prompt-seed", prompt_seed, "Seed of the synthetic prompt set (use another for held-out prompts)")
        ->capture_default_str();
    cmd->add_option("--vocab", vocab, "Synthetic vocabulary size")->capture_default_str()->check(CLI::Range(16, 1 << 23));
    cmd->add_option("--seed", seed, "Synthetic world seed")->capture_default_str();
    cmd->add_option("--max-new-tokens", max_new, "Tokens per request")->capture_default_str()->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--temperature", temperature, "Sampling temperature (0 = greedy)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  }
  [[nodiscard]] synthetic_world world() const {
    synthetic_params p;
    p.vocab = vocab;
    p.seed = seed;
    return synthetic_world(p);
  }
  [[nodiscard]] std::vector<std::vector<token_id>> prompt_set() const {
    return synthetic_prompts(prompts, vocab, 8, 64, prompt_seed);
  }
  [[nodiscard]] generation_config generation() const {
    generation_config c;
    c.max_new_tokens = max_new;
    c.temperature = temperature;
    return c;
  }
  [[nodiscard]] std::string describe() const {
    return "synthetic pair: vocab " + std::to_string(vocab) + ", world seed " + std::to_string(seed) + ", prompt seed " +
           std::to_string(prompt_seed);
  }
};

}  // namespace blockpilot::cli
