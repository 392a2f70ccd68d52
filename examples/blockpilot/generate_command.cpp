// `blockpilot generate`: speculative decoding with a real GGUF model (SmolLM2-class Llama) on the
// CPU: chat template, tokenizer, a drafter (none, prompt lookup, early exit or DFlash), a block-size policy, a rule.

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "blockpilot/blockpilot.hpp"
#include "options.hpp"
#include "policy_spec.hpp"
#include "real_model_options.hpp"

namespace blockpilot::cli {

namespace generate_detail {

/// The tokens of `ids` that are text (special tokens such as <|im_end|> are not shown).
inline std::string visible_text(const bpe_tokenizer& tokenizer, std::span<const token_id> ids) {
  std::vector<token_id> text;
  for (const token_id t : ids)
    if (!tokenizer.is_special(t)) text.push_back(t);
  return tokenizer.decode(text);
}

/// Decodes `prompt`, streaming the text to stdout as tokens are committed, then prints the
/// statistics; with `json`, prints one JSON object (text and statistics) at the end instead.
template <class Rule, class Drafter, class Policy>
void run(llama_verifier& verifier, Drafter& drafter, Policy policy, const bpe_tokenizer& tokenizer,
         const std::vector<token_id>& prompt, generation_config config, bool json) {
  speculative_decoder<Drafter, llama_verifier, Policy, Rule> decoder(drafter, verifier, std::move(policy));
  if (!json)
    config.on_tokens = [&](std::span<const token_id> ids) {
      fmt::print("{}", visible_text(tokenizer, ids));
      std::fflush(stdout);
    };
  generation_result r;
  const status s = decoder.generate(prompt, config, r);
  if (s != status::success) throw error(fmt::format("generation failed in {}: {}", r.failed_stage, to_string(s)));
  const auto& st = r.stats;
  const double decode = st.seconds.total - st.seconds.prefill;
  // The first token comes with the prefill: decoding makes the others (as measure counts them).
  const double tokens_per_second = decode > 0 ? static_cast<double>(st.generated - 1) / decode : 0.0;
  if (json) {
    const nlohmann::ordered_json j{
        {"text", visible_text(tokenizer, r.tokens)}, {"prompt_tokens", prompt.size()}, {"generated", st.generated},
        {"block_size", st.block_size}, {"fallback", st.policy_fallback}, {"rule", Rule::name}, {"mean_tau", st.tau()},
        {"steps", st.steps}, {"drafted", st.drafted}, {"accepted", st.accepted},
        {"decode_tokens_per_second", tokens_per_second},
        {"seconds",
         {{"prefill", st.seconds.prefill}, {"policy", st.seconds.policy}, {"draft", st.seconds.draft},
          {"verify", st.seconds.verify}, {"accept", st.seconds.accept}, {"total", st.seconds.total}}}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("\n\n");
  fmt::print("prompt {} tokens, generated {} tokens, block size {}{}, rule {}\n", prompt.size(), st.generated, st.block_size,
             st.policy_fallback ? " (policy fallback)" : "", Rule::name);
  fmt::print("tau {:.3f}, target calls {}, drafted {}, accepted {}\n", st.tau(), st.target_calls(), st.drafted, st.accepted);
  fmt::print("prefill {:.3f} s, decode {:.3f} s ({:.1f} tokens/s); policy {:.2f} ms, draft {:.3f} s, verify {:.3f} s, "
             "accept {:.3f} s, bookkeeping {:.4f} s\n",
             st.seconds.prefill, decode, tokens_per_second, 1e3 * st.seconds.policy, st.seconds.draft, st.seconds.verify,
             st.seconds.accept, st.seconds.bookkeeping());
}

template <class Drafter, class Policy>
void run_with_rule(const std::string& rule, const std::string& spec, llama_verifier& v, Drafter& d, Policy policy,
                   const bpe_tokenizer& t, const std::vector<token_id>& prompt, const generation_config& c, bool json) {
  if constexpr (!policy_fits_drafter<Policy, Drafter>)
    throw cutoff_needs_confidence(spec);
  else
    with_rule(rule, [&](auto r) { run<decltype(r)>(v, d, std::move(policy), t, prompt, c, json); });
}

}  // namespace generate_detail

void add_generate_command(CLI::App& app) {
  struct options {
    std::string model, prompt, drafter = "lookup", policy = "fixed:8", rule, storage = "fp32";
    generation_config config;
    int threads = 1;
    bool raw = false, json = false;
  };
  auto o = std::make_shared<options>();
  o->config.max_new_tokens = 128;
  CLI::App* cmd = app.add_subcommand("generate", "Generate with a GGUF Llama-family model (SmolLM2) as the target");
  cmd->add_option("--model", o->model, "gguf:PATH (scripts/fetch-smollm2.sh prints one)")->required();
  cmd->add_option("--prompt", o->prompt, "User message (wrapped in the chat template unless --raw)")->required();
  cmd->add_flag("--raw", o->raw, "Tokenize the prompt as is, without the chat template");
  cmd->add_flag("--json", o->json, "Print the text and the statistics as one JSON object (no streaming)");
  cmd->add_option("--drafter", o->drafter,
                  "none (plain decoding), lookup (prompt n-gram lookup; lookup:evidence grades its confidence by the "
                  "evidence for the match; either with ,corpus=FILE also drafts from a trace of the target's own "
                  "continuations), early-exit:L (the target's first L layers) or dflash:FOLDER (a DFlash "
                  "checkpoint)")
      ->capture_default_str();
  cmd->add_option("--policy", o->policy,
                  "none, fixed:B, mlp:FILE (a predictor trained on this model), refine:FIRST,SECOND, adaptive[:MAX], "
                  "speed[:MAX][,KEY=VALUE...] or cutoff:P_MIN[,INNER], as measure takes them; adaptive and speed measure "
                  "the step costs at load")
      ->capture_default_str();
  cmd->add_option("--rule", o->rule, "greedy, sample-match or rejection (default: greedy at T = 0, else sample-match)")
      ->check(CLI::IsMember({"greedy", "sample-match", "rejection"}));
  cmd->add_option("--temperature", o->config.temperature, "Sampling temperature")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--max-new-tokens", o->config.max_new_tokens, "Output length cap")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seed", o->config.seed, "Random stream seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads of the target's forward pass")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--storage", o->storage, "Target weights as fp32, kept quantized (fp32 activations) or quantized_int8 (int8 activations)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "quantized", "quantized_int8"}));
  cmd->callback([o, cmd] {
    try {
      const auto spec = drafter_spec::parse(o->drafter, true);
      if (spec.type == drafter_spec::kind::none && cmd->count("--policy") > 0 && o->policy != "none" && o->policy != "fixed:1")
        throw error("--policy " + o->policy + ": plain decoding (--drafter none) has no block size to choose");
      if (spec.type != drafter_spec::kind::none) check_policy_spec(o->policy, nullptr);
      const auto real = load_real_model(o->model, parse_storage(o->storage));
      const auto& tokenizer = real.tokenizer;
      require_prompt_fits(real, o->prompt, o->config.max_new_tokens, "--prompt");
      const auto prompt = o->raw ? tokenizer.encode(o->prompt) : tokenizer.encode_chat(o->prompt);
      o->config.stop_tokens = {tokenizer.eos_id()};
      const std::string rule = rule_or_default(o->rule, o->config.temperature);
      const std::string policy = spec.type == drafter_spec::kind::none ? "none" : o->policy;
      with_real_pair(real, spec, static_cast<std::int64_t>(prompt.size()), o->config.max_new_tokens, max_block_size,
                     o->threads, [&](auto& drafter, llama_verifier& verifier) {
                       step_seconds costs;
                       if (uses_step_costs(policy)) {
                         costs = measure_step_seconds(verifier, prompt, speed_aware_max_block, 3);
                         if (!o->json)
                           fmt::print(stderr, "step time measured at load (ms, b = 1..{}): {::.2f}\n", costs.size(),
                                      milliseconds(costs));
                       }
                       with_policy(policy, nullptr, verifier.vocab_size(), costs, [&](auto& p) {
                         generate_detail::run_with_rule(rule, policy, verifier, drafter, p, tokenizer, prompt, o->config,
                                                        o->json);
                       });
                     });
    } catch (const std::exception& e) {
      fail("generate", e);
    }
  });
}

}  // namespace blockpilot::cli
