// llama.cpp's model as the verifier of BlockPilot's decoder, side by side with llama.cpp's own greedy
// decoding on the same GGUF file (any model llama.cpp loads; prompts through its tokenizer and chat
// template): greedy (T = 0), the lookup drafter under each --policy, outputs compared with llama.cpp's
// greedy decoding, tokens/s from rounds that interleave the variants prompt by prompt. The speed-aware
// policies start from llama.cpp's step cost measured at load. With --cpu-verifier, the same policies
// on the workbench's CPU verifier too (files it loads). Afterwards, each verifier's rows alone against
// the same rows in blocks (check_block_invariance) on every prompt's plain output: where they differ,
// outputs may leave the plain ones at a near-tie. Writes the measurements as JSON
// (examples/python/side_by_side_report.py turns them into a table and a plot); --trace-out writes llama.cpp's
// greedy continuations as `blockpilot measure --trace-out` does (traces for replay-steps, or lookup's corpus).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/io/trace_json.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "../blockpilot/policy_spec.hpp"         // the --policy specs of the blockpilot program
#include "../blockpilot/real_model_options.hpp"  // its prompt files, --lines and --drafter
#include "llama_cpp_verifier.hpp"

namespace bp = blockpilot;

namespace {

struct outcome {
  std::vector<bp::token_id> tokens;
  int block_size = 1;
  double tau = 1.0, policy_seconds = 0.0;
};

struct variant {
  std::string name, family, policy;
  std::function<outcome(const std::vector<bp::token_id>&)> run;
  std::vector<std::vector<double>> seconds{};  // [round][prompt]
  std::vector<std::vector<long>> tokens{};     // [round][prompt]
  std::vector<outcome> first_round{};
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

/// How a --policy spec reads in the table.
std::string describe(const std::string& spec) {
  if (spec == "none") return "plain (b = 1)";
  if (spec.starts_with("fixed:")) return "lookup, b = " + spec.substr(6);
  if (spec.starts_with("mlp:")) return "lookup, learned b";
  if (spec == "speed" || spec.starts_with("speed:") || spec.starts_with("speed,")) return "lookup, speed cut-off";
  return "lookup, " + spec;
}

void silence(ggml_log_level, const char*, void*) {}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"BlockPilot's decoder on llama.cpp's model, side by side with llama.cpp's greedy decoding"};
  std::string model_path, prompts_path, lines, template_kind = "chat", system, drafter_text = "lookup:evidence",
                                               out_path = "llama_cpp_side_by_side.json", trace_out;
  std::vector<std::string> policies{"none", "fixed:2", "fixed:4", "speed:8"};
  int max_new = 64, rounds = 2, threads = 1, every = 1;
  bool cpu_verifier = false, no_repack = false, greedy_only = false;
  app.add_option("--model", model_path, "GGUF file llama.cpp loads")->required()->check(CLI::ExistingFile);
  app.add_option("--prompts", prompts_path, "prompt file: a prompt per line, or .jsonl with a \"prompt\" per line")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--lines", lines, "1-based inclusive line range FIRST:LAST (default: all)");
  app.add_option("--every", every, "take every N-th prompt of the range")->check(CLI::Range(1, 1000));
  app.add_option("--template", template_kind, "chat: the prompt as a user turn of the file's chat template; raw: the text")
      ->check(CLI::IsMember({"chat", "raw"}))->capture_default_str();
  app.add_option("--system", system, "with --template chat: a system turn before each prompt");
  app.add_option("--drafter", drafter_text, "lookup[:evidence][,corpus=FILE]")->capture_default_str();
  app.add_option("--policy", policies,
                 "none, fixed:B, mlp:FILE (a compact predictor), speed[:MAX][,K=V...] (the speed cut-off, from the "
                 "verifier's step cost measured at load), cutoff:P_MIN[,INNER] or adaptive[:MAX]; repeatable")
      ->capture_default_str();
  app.add_flag("--cpu-verifier", cpu_verifier, "plain decoding and every policy on the workbench's CPU verifier too "
                                               "(quantized_int8 storage; a llama-architecture file)");
  app.add_flag("--no-repack", no_repack, "keep llama.cpp from repacking the weights for its multi-row kernels");
  app.add_option("--max-new-tokens", max_new)->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--out", out_path, "JSON file of the measurements")->capture_default_str()->check(bp::cli::output_file);
  app.add_option("--trace-out", trace_out, "JSON file of every prompt's tokens and llama.cpp's greedy continuation "
                                           "(the format of `blockpilot measure --trace-out`: replay-steps, or lookup's corpus)")
      ->check(bp::cli::output_file);
  app.add_flag("--greedy-only", greedy_only, "decode with llama.cpp's greedy loop only: no policies, no step cost "
                                             "measurement, no row checks (for --trace-out)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (cpu_verifier && !greedy_only && std::ranges::find(policies, "none") == policies.end())
      throw bp::error("--cpu-verifier holds the workbench's verifier to its own plain decoding: add --policy none");
    if (!system.empty() && template_kind != "chat") throw bp::error("--system: a turn of the chat template (--template chat)");
    const auto [first, last] = lines.empty() ? std::pair{1, 0} : bp::cli::parse_lines(lines);
    const auto all = bp::cli::read_prompt_lines(prompts_path, first, last);
    std::vector<bp::cli::prompt_line> texts;
    for (std::size_t i = 0; i < all.size(); i += static_cast<std::size_t>(every)) texts.push_back(all[i]);

    llama_log_set(silence, nullptr);
    llama_backend_init();
    auto llama = bp::llama_cpp::load_model(model_path, !no_repack);
    const auto stops = bp::llama_cpp::end_of_generation_tokens(*llama);
    std::vector<std::vector<bp::token_id>> prompts;
    std::size_t longest = 0;
    for (const auto& t : texts) {
      prompts.push_back(template_kind == "chat" ? bp::llama_cpp::tokenize_chat(*llama, t.text, system)
                                                : bp::llama_cpp::tokenize(*llama, t.text, false));
      longest = std::max(longest, prompts.back().size());
    }
    constexpr int max_block = bp::cli::max_block_size;
    const auto positions = static_cast<int>(longest) + max_new + max_block + 1;
    bp::llama_cpp::llama_cpp_verifier on_llama(*llama, positions, 512, threads);
    const auto vocab = on_llama.vocab_size();
    auto drafter = bp::cli::load_lookup_drafter(drafter_text, vocab, max_block - 1, "--drafter: expected lookup[:evidence][,corpus=FILE]");
    bp::generation_config config;
    config.max_new_tokens = max_new;
    config.stop_tokens = stops;

    std::optional<bp::llama_model> ours;
    std::unique_ptr<bp::llama_verifier> on_ours;
    int tokenized_alike = 0;  // prompts the workbench's tokenizer writes with the same tokens
    if (cpu_verifier) {
      const auto file = bp::io::gguf_file::open(model_path);
      const auto tokenizer = bp::bpe_tokenizer::from_gguf(file);
      for (std::size_t i = 0; i < texts.size(); ++i)
        tokenized_alike += (template_kind == "chat" ? tokenizer.encode_chat(texts[i].text, system) : tokenizer.encode(texts[i].text)) == prompts[i];
      ours.emplace(bp::llama_model::load(file, bp::llama_storage::quantized_int8));
      if (ours->config().vocab != vocab) throw bp::error("llama.cpp and the workbench disagree on the vocabulary size");
      bp::llama_verifier_options options;
      options.max_positions = positions;
      options.max_block = max_block;
      options.threads = threads;
      on_ours = std::make_unique<bp::llama_verifier>(*ours, options);
    }

    std::vector<variant> variants;
    variants.push_back({"llama.cpp: greedy", "llama.cpp", "", [&](const auto& p) {
                          return outcome{bp::llama_cpp::greedy_decode(on_llama, p, max_new, stops)};
                        }});
    nlohmann::ordered_json step_seconds;
    const auto add_policies = [&](auto& verifier, const std::string& on, const std::string& family) {
      const auto costs = bp::measure_step_seconds(verifier, prompts.front(), bp::cli::speed_aware_max_block, 3);
      step_seconds[on] = costs;
      for (const auto& spec : policies)
        bp::cli::with_policy(spec, nullptr, vocab, costs, [&](auto& policy) {
          using P = std::decay_t<decltype(policy)>;
          auto prototype = std::make_shared<P>(std::move(policy));
          variants.push_back({fmt::format("blockpilot on {}: {}", on, describe(spec)), family, spec,
                              [&verifier, &drafter, &config, prototype](const auto& p) {
                                return speculate(verifier, drafter, bp::cli::request_policy(*prototype), p, config);
                              }});
        });
    };
    if (!greedy_only) {
      add_policies(on_llama, "llama.cpp", "blockpilot");
      if (on_ours) add_policies(*on_ours, "its CPU verifier", "blockpilot cpu");
    }

    // A warm-up of every variant on the start of the first prompt, then the rounds.
    const std::vector<bp::token_id> warm(prompts.front().begin(), prompts.front().begin() + std::min<std::size_t>(32, prompts.front().size()));
    for (auto& v : variants) (void)v.run(warm);
    for (int r = 0; r < rounds; ++r) {
      for (auto& v : variants) {
        v.seconds.emplace_back();
        v.tokens.emplace_back();
      }
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        // Rotates from prompt to prompt and from round to round (r * prompts + i would repeat a prompt's
        // order in every round when the variants divide the prompts).
        const std::size_t shift = (static_cast<std::size_t>(r) + i) % variants.size();
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
    const auto own_plain = std::find_if(variants.begin(), variants.end(),
                                        [](const variant& v) { return v.family == "blockpilot cpu" && v.policy == "none"; });
    // Whether each verifier scores a row the same alone and in blocks, on every prompt's plain output.
    nlohmann::ordered_json invariance;
    const auto check_rows = [&](auto& verifier, const std::string& on, const std::vector<outcome>& plain) {
      constexpr int sizes[] = {2, 4, 8, 16};
      std::vector<bp::block_invariance> all;  // every prompt's, per size (block_invariance::add)
      for (const int b : sizes) all.push_back({b});
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        if (plain[i].tokens.size() < 2) continue;
        const auto one = bp::check_block_invariance(verifier, prompts[i], plain[i].tokens, sizes);
        for (std::size_t k = 0; k < one.size(); ++k) all[k].add(one[k]);
      }
      for (const auto& r : all)
        invariance[on].push_back({{"block_size", r.block_size}, {"rows", r.rows}, {"max_abs_difference", r.max_abs_difference},
                                  {"argmax_changes", r.argmax_changes}});
    };
    if (!greedy_only) {
      check_rows(on_llama, "llama.cpp", reference);
      if (on_ours) check_rows(*on_ours, "its CPU verifier", own_plain->first_round);
    }
    nlohmann::ordered_json out;
    out["setup"] = {{"model", std::filesystem::path(model_path).filename().string()},
                    {"prompts", fmt::format("{}{}{}", std::filesystem::path(prompts_path).filename().string(),
                                            lines.empty() ? "" : " lines " + lines, every > 1 ? fmt::format(", every {}", every) : "")},
                    {"template", template_kind}, {"system", system}, {"drafter", drafter_text},
                    {"max_new_tokens", max_new}, {"rounds", rounds}, {"threads", threads}, {"device", "cpu"},
                    {"repacked weights", !no_repack}, {"step_seconds", step_seconds}, {"block_invariance", invariance}};
    if (on_ours) {
      out["setup"]["verifier of 'its CPU verifier'"] = "llama_verifier, storage quantized_int8";
      out["setup"]["prompts tokenized alike by the workbench"] = tokenized_alike;
    }
    out["reference"] = variants.front().name;
    for (const auto& v : variants) {
      int same = 0, same_as_own_plain = 0;
      double tau = 0, policy_seconds = 0;
      std::vector<int> block_sizes;
      nlohmann::ordered_json differences = nlohmann::ordered_json::array();  // where an output leaves the reference's
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        const auto& tokens = v.first_round[i].tokens;
        if (tokens == reference[i].tokens)
          ++same;
        else
          differences.push_back({{"prompt", texts[i].key},
                                 {"at", std::ranges::mismatch(tokens, reference[i].tokens).in1 - tokens.begin()}});
        if (own_plain != variants.end()) same_as_own_plain += tokens == own_plain->first_round[i].tokens;
        tau += v.first_round[i].tau / static_cast<double>(prompts.size());
        policy_seconds += v.first_round[i].policy_seconds / static_cast<double>(prompts.size());
        block_sizes.push_back(v.first_round[i].block_size);
      }
      nlohmann::ordered_json j{{"variant", v.name}, {"family", v.family}, {"seconds", v.seconds}, {"tokens", v.tokens},
                               {"identical_outputs", same}, {"prompts", prompts.size()}, {"different_outputs", differences}};
      if (v.family != "llama.cpp") {
        j["policy"] = v.policy;
        j["tau"] = tau;
        j["block_sizes"] = block_sizes;
        j["policy_seconds_per_request"] = policy_seconds;
      }
      if (v.family == "blockpilot cpu") j["identical_to_own_plain"] = same_as_own_plain;
      out["variants"].push_back(j);
    }
    bp::cli::write_json_file(out_path, out, 1);
    fmt::print("wrote {}\n", out_path);
    if (!trace_out.empty()) {
      bp::decode_trace trace{{{"model", out["setup"]["model"]}, {"prompts", out["setup"]["prompts"]},
                              {"template", template_kind}, {"system", system}, {"decoded_by", "llama.cpp"}},
                             vocab, 0.0, max_new, {}};
      for (std::size_t i = 0; i < prompts.size(); ++i) trace.requests.push_back({texts[i].key, prompts[i], reference[i].tokens});
      bp::cli::write_json_file(trace_out, trace.to_json(), -1);
      fmt::print("wrote {}\n", trace_out);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "llama_cpp_decode: {}\n", e.what());
    return 2;
  }
}
