// `blockpilot generate`: speculative decoding with a real GGUF model (SmolLM2-class Llama) on the
// CPU: chat template, tokenizer, a drafter (none, prompt lookup or early exit), a block-size policy, a rule.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "blockpilot/blockpilot.hpp"
#include "options.hpp"
#include "real_model_options.hpp"

namespace blockpilot::cli {

namespace generate_detail {

template <class Rule, class Drafter, class Policy>
void run(llama_verifier& verifier, Drafter& drafter, Policy policy, const bpe_tokenizer& tokenizer,
         const std::vector<token_id>& prompt, const generation_config& config) {
  speculative_decoder<Drafter, llama_verifier, Policy, Rule> decoder(drafter, verifier, std::move(policy));
  generation_result r;
  const status s = decoder.generate(prompt, config, r);
  fmt::print("{}\n\n", tokenizer.decode(r.tokens));
  if (s != status::success) throw error(fmt::format("generation failed in {}: {}", r.failed_stage, to_string(s)));
  const auto& st = r.stats;
  const double decode = st.seconds.total - st.seconds.prefill;
  fmt::print("prompt {} tokens, generated {} tokens, block size {}{}, rule {}\n", prompt.size(), st.generated, st.block_size,
             st.policy_fallback ? " (policy fallback)" : "", Rule::name);
  fmt::print("tau {:.3f}, target calls {}, drafted {}, accepted {}\n", st.tau(), st.target_calls(), st.drafted, st.accepted);
  fmt::print("prefill {:.3f} s, decode {:.3f} s ({:.1f} tokens/s); policy {:.2f} ms, draft {:.3f} s, verify {:.3f} s, "
             "accept {:.3f} s, bookkeeping {:.4f} s\n",
             st.seconds.prefill, decode, decode > 0 ? static_cast<double>(st.generated) / decode : 0.0, 1e3 * st.seconds.policy,
             st.seconds.draft, st.seconds.verify, st.seconds.accept, st.seconds.bookkeeping());
}

template <class Drafter, class Policy>
void run_with_rule(const std::string& rule, llama_verifier& v, Drafter& d, Policy policy, const bpe_tokenizer& t,
                   const std::vector<token_id>& prompt, const generation_config& c) {
  with_rule(rule, [&](auto r) { run<decltype(r)>(v, d, std::move(policy), t, prompt, c); });
}

}  // namespace generate_detail

inline void add_generate_command(CLI::App& app) {
  struct options {
    std::string model, prompt, drafter = "lookup", policy = "fixed:8", rule, storage = "fp32";
    generation_config config;
    int threads = 1;
    bool raw = false;
  };
  auto o = std::make_shared<options>();
  o->config.max_new_tokens = 128;
  CLI::App* cmd = app.add_subcommand("generate", "Generate with a GGUF Llama-family model (SmolLM2) as the target");
  cmd->add_option("--model", o->model, "gguf:PATH (scripts/fetch-smollm2.sh prints one)")->required();
  cmd->add_option("--prompt", o->prompt, "User message (wrapped in the chat template unless --raw)")->required();
  cmd->add_flag("--raw", o->raw, "Tokenize the prompt as is, without the chat template");
  cmd->add_option("--drafter", o->drafter,
                  "none (plain decoding), lookup (prompt n-gram lookup), early-exit:L (the target's first L layers) or "
                  "dflash:FOLDER (a DFlash checkpoint)")
      ->capture_default_str();
  cmd->add_option("--policy", o->policy, "fixed:B or mlp:FILE (a predictor trained on this model)")->capture_default_str();
  cmd->add_option("--rule", o->rule, "greedy, sample-match or rejection (default: greedy at T = 0, else sample-match)")
      ->check(CLI::IsMember({"greedy", "sample-match", "rejection"}));
  cmd->add_option("--temperature", o->config.temperature, "Sampling temperature")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--max-new-tokens", o->config.max_new_tokens, "Output length cap")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seed", o->config.seed, "Random stream seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads of the target's forward pass")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--storage", o->storage, "Target weights as fp32 or kept quantized")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "quantized"}));
  cmd->callback([o] {
    try {
      const auto spec = drafter_spec::parse(o->drafter, true);
      const auto real = load_real_model(o->model, parse_storage(o->storage));
      const auto& tokenizer = real.tokenizer;
      const auto prompt = o->raw ? tokenizer.encode(o->prompt) : tokenizer.encode_chat(o->prompt);
      const std::int64_t positions = std::max<std::int64_t>(4096, static_cast<std::int64_t>(prompt.size()) +
                                                                      o->config.max_new_tokens + 65);
      const auto weights = drafter_weights::load(spec);
      llama_verifier_options target_options;
      target_options.max_positions = positions;
      target_options.max_block = 64;
      target_options.threads = o->threads;
      target_options.feature_layers = weights.feature_layers();
      llama_verifier verifier(real.model, target_options);
      o->config.stop_tokens = {tokenizer.eos_id()};
      const std::string rule = !o->rule.empty() ? o->rule : o->config.temperature < 1e-5f ? "greedy" : "sample-match";
      with_drafter(spec, weights, real.model, 64, positions, o->threads, [&](auto& drafter) {
        if (spec.type == drafter_spec::kind::none || o->policy == "fixed:1") {
          generate_detail::run_with_rule(rule, verifier, drafter, runtime_block_size{1}, tokenizer, prompt, o->config);
        } else if (o->policy.starts_with("fixed:")) {
          const auto b = parse_int(std::string_view(o->policy).substr(6));
          if (!b || *b < 1 || *b > 64) throw error("--policy: expected fixed:B with 1 <= B <= 64");
          generate_detail::run_with_rule(rule, verifier, drafter, runtime_block_size{*b}, tokenizer, prompt, o->config);
        } else if (o->policy.starts_with("mlp:")) {
          with_predictor_policy(o->policy.substr(4), [&](auto& policy) {
            generate_detail::run_with_rule(rule, verifier, drafter, policy, tokenizer, prompt, o->config);
          });
        } else {
          throw error("--policy: expected fixed:B or mlp:FILE, got '" + o->policy + "'");
        }
      });
    } catch (const std::exception& e) {
      fmt::print(stderr, "blockpilot generate: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace blockpilot::cli
