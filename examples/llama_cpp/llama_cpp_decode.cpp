// llama.cpp's model as the verifier of BlockPilot's decoder, side by side with llama.cpp's own greedy
// decoding and with the workbench's CPU verifier on the same GGUF file: greedy (T = 0) on held-out
// prompts, outputs compared with llama.cpp's greedy decoding, tokens/s from rounds that interleave the
// variants prompt by prompt. Writes the measurements as JSON (examples/python/side_by_side_report.py
// turns them into a table and a plot).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"
#include "../blockpilot/real_model_options.hpp"  // the prompt files and --lines of the blockpilot program
#include "llama_cpp_verifier.hpp"

namespace bp = blockpilot;

namespace {

struct outcome {
  std::vector<bp::token_id> tokens;
  int block_size = 1;
  double tau = 1.0, policy_seconds = 0.0;
};

struct variant {
  std::string name, family;
  std::function<outcome(const std::vector<bp::token_id>&)> run;
  std::vector<std::vector<double>> seconds{};  // [round][prompt]
  std::vector<std::vector<long>> tokens{};     // [round][prompt]
  std::vector<outcome> first_round{};
};

/// A policy the decoder refers to rather than owns (the predictor is loaded once).
template <class P>
struct policy_ref {
  P* policy;
  [[nodiscard]] int max_block_size() const { return policy->max_block_size(); }
  [[nodiscard]] bp::block_size_choice choose(const bp::request_features& f) { return policy->choose(f); }
};

template <class Verifier, class Policy>
outcome speculate(Verifier& verifier, bp::lookup_drafter& drafter, Policy policy, const std::vector<bp::token_id>& prompt,
                  const bp::generation_config& config) {
  bp::speculative_decoder<bp::lookup_drafter, Verifier, Policy> decoder(drafter, verifier, std::move(policy));
  bp::generation_result r;
  if (decoder.generate(prompt, config, r) != bp::status::success)
    throw bp::error(fmt::format("decoding failed in {}: {}", r.failed_stage, bp::to_string(r.error)));
  return {r.tokens, r.stats.block_size, r.stats.tau(), r.stats.seconds.policy};
}

void silence(ggml_log_level, const char*, void*) {}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"BlockPilot's decoder on llama.cpp's model, side by side with llama.cpp's greedy decoding"};
  std::string model_path, prompts_path, lines = "41:60", predictor_path, out_path = "llama_cpp_side_by_side.json";
  std::vector<int> sizes{2, 3, 4};
  int max_new = 64, rounds = 2, threads = 1;
  app.add_option("--model", model_path, "GGUF file (scripts/fetch-smollm2.sh)")->required()->check(CLI::ExistingFile);
  app.add_option("--prompts", prompts_path, "prompt file, one prompt per line")->required()->check(CLI::ExistingFile);
  app.add_option("--lines", lines, "1-based inclusive line range FIRST:LAST");
  app.add_option("--predictor", predictor_path, "compact predictor file for the learned block size")->check(CLI::ExistingFile);
  app.add_option("--sizes", sizes, "fixed block sizes of the lookup drafter, comma separated")->delimiter(',');
  app.add_option("--max-new-tokens", max_new)->check(CLI::Range(1, 4096));
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  app.add_option("--threads", threads)->check(CLI::Range(1, 256));
  app.add_option("--out", out_path, "JSON file of the measurements");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto [first, last] = bp::cli::parse_lines(lines);
    const auto texts = bp::cli::read_prompt_lines(prompts_path, first, last);

    llama_log_set(silence, nullptr);
    llama_backend_init();
    auto llama = bp::llama_cpp::load_model(model_path);
    const auto file = bp::io::gguf_file::open(model_path);
    const auto tokenizer = bp::bpe_tokenizer::from_gguf(file);
    const auto ours = bp::llama_model::load(file, bp::llama_storage::quantized_int8);
    const auto vocab = ours.config().vocab;

    std::vector<std::vector<bp::token_id>> prompts;
    std::size_t longest = 0;
    for (const auto& t : texts) {
      prompts.push_back(tokenizer.encode_chat(t.text));
      longest = std::max(longest, prompts.back().size());
    }
    const int max_block = std::max(64, *std::max_element(sizes.begin(), sizes.end()));
    const auto positions = static_cast<int>(longest) + max_new + max_block + 1;
    bp::llama_cpp::llama_cpp_verifier on_llama(*llama, positions, std::max(max_block, 512), threads);
    if (on_llama.vocab_size() != vocab) throw bp::error("llama.cpp and the workbench disagree on the vocabulary size");
    bp::llama_verifier_options options;
    options.max_positions = positions;
    options.max_block = max_block;
    options.threads = threads;
    bp::llama_verifier on_ours(ours, options);
    bp::lookup_drafter drafter(vocab, 3, 1, max_block - 1);
    bp::generation_config config;
    config.max_new_tokens = max_new;
    config.stop_tokens = {tokenizer.eos_id()};

    std::optional<bp::blockpilot_policy<bp::compact_features>> predictor;
    if (!predictor_path.empty()) predictor.emplace(bp::load_blockpilot_policy<bp::compact_features>(predictor_path, vocab));

    std::vector<variant> variants;
    variants.push_back({"llama.cpp: greedy", "llama.cpp", [&](const auto& p) {
                          return outcome{bp::llama_cpp::greedy_decode(on_llama, p, max_new, tokenizer.eos_id())};
                        }});
    const auto add_fixed = [&](auto& verifier, const std::string& on, const std::string& family, int b) {
      variants.push_back({fmt::format("blockpilot on {}: {}", on, b == 1 ? "plain (b = 1)" : fmt::format("lookup, b = {}", b)),
                          family,
                          [&verifier, &drafter, &config, b](const auto& p) {
                            return speculate(verifier, drafter, bp::runtime_block_size{b}, p, config);
                          }});
    };
    const auto add_learned = [&](auto& verifier, const std::string& on, const std::string& family) {
      if (!predictor) return;
      variants.push_back({fmt::format("blockpilot on {}: lookup, learned b", on), family,
                          [&verifier, &drafter, &config, &predictor](const auto& p) {
                            return speculate(verifier, drafter, policy_ref<bp::blockpilot_policy<bp::compact_features>>{&*predictor},
                                             p, config);
                          }});
    };
    add_fixed(on_llama, "llama.cpp", "blockpilot", 1);
    for (const int b : sizes) add_fixed(on_llama, "llama.cpp", "blockpilot", b);
    add_learned(on_llama, "llama.cpp", "blockpilot learned");
    add_fixed(on_ours, "its CPU verifier", "blockpilot cpu", 1);
    add_fixed(on_ours, "its CPU verifier", "blockpilot cpu", sizes.front());
    add_learned(on_ours, "its CPU verifier", "blockpilot cpu learned");

    for (auto& v : variants) (void)v.run(std::vector<bp::token_id>(prompts.front().begin(), prompts.front().begin() + std::min<std::size_t>(32, prompts.front().size())));
    for (int r = 0; r < rounds; ++r) {
      for (auto& v : variants) {
        v.seconds.emplace_back();
        v.tokens.emplace_back();
      }
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        const std::size_t shift = (static_cast<std::size_t>(r) * prompts.size() + i) % variants.size();
        for (std::size_t k = 0; k < variants.size(); ++k) {
          variant& v = variants[(shift + k) % variants.size()];
          const auto start = std::chrono::steady_clock::now();
          outcome o = v.run(prompts[i]);
          v.seconds.back().push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          v.tokens.back().push_back(static_cast<long>(o.tokens.size()));
          if (r == 0) v.first_round.push_back(std::move(o));
        }
        fmt::print(stderr, "round {}/{}, prompt {}/{}\n", r + 1, rounds, i + 1, prompts.size());
      }
    }

    // Outputs against llama.cpp's greedy decoding, and the workbench verifier's against its own plain decoding.
    const auto& reference = variants.front().first_round;
    const auto& cpu_plain = std::find_if(variants.begin(), variants.end(), [](const variant& v) { return v.family == "blockpilot cpu"; })->first_round;
    nlohmann::ordered_json out;
    out["setup"] = {{"model", std::filesystem::path(model_path).filename().string()},
                    {"prompts", fmt::format("{} lines {}", std::filesystem::path(prompts_path).filename().string(), lines)},
                    {"max_new_tokens", max_new}, {"rounds", rounds}, {"threads", threads}, {"device", "cpu"},
                    {"verifier of 'its CPU verifier'", "llama_verifier, storage quantized_int8"},
                    {"predictor", std::filesystem::path(predictor_path).filename().string()}};
    out["reference"] = variants.front().name;
    for (const auto& v : variants) {
      const bool cpu = v.family.starts_with("blockpilot cpu");
      int same = 0, same_as_own_plain = 0;
      double tau = 0, policy_seconds = 0;
      std::vector<int> block_sizes;
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        same += v.first_round[i].tokens == reference[i].tokens;
        same_as_own_plain += v.first_round[i].tokens == cpu_plain[i].tokens;
        tau += v.first_round[i].tau / static_cast<double>(prompts.size());
        policy_seconds += v.first_round[i].policy_seconds / static_cast<double>(prompts.size());
        block_sizes.push_back(v.first_round[i].block_size);
      }
      nlohmann::ordered_json j{{"variant", v.name}, {"family", v.family}, {"seconds", v.seconds}, {"tokens", v.tokens},
                               {"identical_outputs", same}, {"prompts", prompts.size()}};
      if (v.family != "llama.cpp") {
        j["tau"] = tau;
        j["block_sizes"] = block_sizes;
        j["policy_seconds_per_request"] = policy_seconds;
      }
      if (cpu) j["identical_to_own_plain"] = same_as_own_plain;
      out["variants"].push_back(j);
    }
    std::ofstream(out_path) << out.dump(1) << "\n";
    fmt::print("wrote {}\n", out_path);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "llama_cpp_decode: {}\n", e.what());
    return 2;
  }
}
