// What the decoding subcommands decode: the synthetic pair and its seeded prompt set (the default),
// or a GGUF target with a drafter and prompt files (`--model`). Builds the prompts and models once
// and hands them to the command.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "real_model_options.hpp"
#include "synthetic_options.hpp"

namespace blockpilot::cli {

/// The prompts of a run with their keys, the generation settings and how they were made.
struct workload {
  std::vector<std::string> keys;  ///< synthetic: the prompt's index; real: NAME:LINE
  std::vector<std::vector<token_id>> prompts;
  generation_config config;
  std::map<std::string, std::string> metadata;  ///< generator, and for a real target drafter and template
};

struct workload_options {
  synthetic_options synthetic;
  std::vector<std::string> prompt_files;
  std::string model, drafter = "lookup", lines, storage = "fp32";
  bool chat = true;
  int threads = 1;

  void add_to(CLI::App* cmd) {
    synthetic.add_to(cmd);
    cmd->add_option("--prompt-file", prompt_files,
                    "Real mode: a prompt file, one prompt per line, keys NAME:LINE (NAME = file stem without a trailing _N); "
                    "repeatable");
    cmd->add_option("--model", model, "Real mode: gguf:PATH of the target (scripts/fetch-smollm2.sh prints one)");
    cmd->add_option("--drafter", drafter, "Real mode: lookup (prompt n-gram; lookup:evidence grades its confidence by the evidence for the match; either with ,corpus=FILE also drafts from a trace of the target's own continuations), early-exit:L (the target's first L layers) or dflash:FOLDER (a "
                    "DFlash checkpoint: config.json + model.safetensors)")
        ->capture_default_str();
    cmd->add_option("--lines", lines, "Real mode: only lines A:B (1-based, inclusive) of each prompt file");
    cmd->add_flag("--chat,!--no-chat", chat, "Real mode: wrap each prompt in the model's chat template (default)");
    cmd->add_option("--threads", threads, "Real mode: threads of each forward pass")->capture_default_str()->check(CLI::Range(1, 64));
    cmd->add_option("--storage", storage, "Real mode: target weights as fp32, kept quantized (fp32 activations) or quantized_int8 (int8 activations)")
        ->capture_default_str()
        ->check(CLI::IsMember({"fp32", "quantized", "quantized_int8"}));
  }

  /// Throws unless shard `shard` of `shards` holds a prompt of `total`.
  static void require_prompts_in(std::size_t total, int shard, int shards) {
    if (static_cast<std::size_t>(shard) >= total)
      throw error(total == 0 ? std::string("--prompt-file: no prompt to run (the files, or their --lines, hold no line)")
                             : fmt::format("--shard {}/{}: this shard holds no prompt (there are {})", shard, shards, total));
  }

  /// Builds the prompts i with i mod shards == shard and the models for blocks up to `max_block`, then
  /// calls fn(drafter, target, workload). Throws `error` naming the option for a wrong combination.
  template <class Fn>
  void run(const CLI::App& cmd, int max_block, int shard, int shards, Fn&& fn) {
    workload w;
    w.config = synthetic.generation();
    const auto mine = [&](std::size_t i) { return i % static_cast<std::size_t>(shards) == static_cast<std::size_t>(shard); };
    if (model.empty()) {
      for (const char* real : {"--drafter", "--lines", "--chat", "--threads", "--storage"})
        if (cmd.count(real) > 0) throw error(std::string(real) + ": needs --model (the synthetic mode has no such setting)");
      if (!prompt_files.empty()) throw error("--prompt-file: needs --model (the synthetic mode counts its prompts with --prompts)");
      const auto world = synthetic.world();
      synthetic_drafter drafter(world, max_block);
      synthetic_target target(world);
      const auto all = synthetic.prompt_set();
      for (std::size_t i = 0; i < all.size(); ++i)
        if (mine(i)) w.keys.push_back(std::to_string(i)), w.prompts.push_back(all[i]);
      require_prompts_in(all.size(), shard, shards);
      w.metadata["generator"] = synthetic.describe();
      fn(drafter, target, w);
      return;
    }

    for (const char* option : {"--prompts", "--vocab", "--seed", "--prompt-seed"})
      if (cmd.count(option) > 0)
        throw error(std::string(option) + ": a synthetic-mode option; not with --model (prompt files: --prompt-file)");
    if (prompt_files.empty()) throw error("--prompt-file: the real mode needs a prompt file");
    const auto spec = drafter_spec::parse(drafter, false);
    const auto [first, last] = lines.empty() ? std::pair(1, 0) : parse_lines(lines);
    std::vector<prompt_line> all;
    std::map<std::string, std::string> key_files;  // prompts are known by their keys: no two alike
    for (const auto& file : prompt_files) {
      auto part = read_prompt_lines(file, first, last);
      for (const prompt_line& line : part)
        if (const auto [at, added] = key_files.emplace(line.key, file); !added)
          throw error("--prompt-file: " + file + " gives the key " + line.key + " that " + at->second +
                      " gives (keys are NAME:LINE, NAME the file's stem without a trailing _N): rename one");
      all.insert(all.end(), part.begin(), part.end());
    }
    require_prompts_in(all.size(), shard, shards);
    const auto real = load_real_model(model, parse_storage(storage));
    std::size_t longest = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!mine(i)) continue;
      w.keys.push_back(all[i].key);
      require_prompt_fits(real, all[i].text, w.config.max_new_tokens, "prompt " + all[i].key);
      w.prompts.push_back(chat ? real.tokenizer.encode_chat(all[i].text) : real.tokenizer.encode(all[i].text));
      longest = std::max(longest, w.prompts.back().size());
    }
    w.config.stop_tokens = {real.tokenizer.eos_id()};
    w.metadata["generator"] = "gguf:" + real.path.filename().string();
    w.metadata["drafter"] = spec.name();
    w.metadata["template"] = chat ? "chat" : "raw";
    w.metadata["storage"] = storage;
    with_real_pair(real, spec, static_cast<std::int64_t>(longest), w.config.max_new_tokens, max_block, threads,
                   [&](auto& drafter, auto& target) { fn(drafter, target, w); });
  }
};

}  // namespace blockpilot::cli
