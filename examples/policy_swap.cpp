// Fixed-size DFlash and the learned BlockPilot policy differ by one template argument. Trains a
// small compact predictor on a synthetic sweep, then decodes held-out prompts with both policies.
#include <cstdio>
#include <numeric>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/policy/blockpilot.hpp"

using namespace blockpilot;

int main() {
  synthetic_params params;
  params.vocab = 4096;
  const synthetic_world world(params);
  synthetic_drafter drafter(world);
  synthetic_target target(world);
  generation_config config;
  config.max_new_tokens = 256;

  // Training data: 512 prompts at every size of the window 14..18.
  const std::vector<int> window = {14, 15, 16, 17, 18};
  const auto prompts = synthetic_prompts(512, params.vocab, 8, 64, 1);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < prompts.size(); ++i) keys.push_back(std::to_string(i));
  const auto data = sweep_policy_dataset(drafter, target, keys, prompts, window, config);
  const compact_features features{64};
  std::vector<std::size_t> rows(prompts.size());
  std::iota(rows.begin(), rows.end(), std::size_t{0});
  const auto train_rows = std::span(rows).first(410), validation_rows = std::span(rows).subspan(410);
  nn::training_options options;
  options.hidden = {256, 256};
  options.loss = nn::loss_kind::expected_tau;
  options.cross_entropy_warmup = 30;
  options.patience = 30;
  const auto trained = nn::train(make_training_set(data, features, 14, 18, train_rows),
                                 make_training_set(data, features, 14, 18, validation_rows), options);
  nn::predictor_metadata meta;
  meta.vocab_size = params.vocab;
  meta.feature_extractor = std::string(compact_features::name);
  meta.feature_parameters = features.metadata();

  // The one-line swap: the policy is a template argument.
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dflash(drafter, target);
  speculative_decoder<synthetic_drafter, synthetic_target, blockpilot_policy<compact_features>> blockpilot(
      drafter, target, {features, {meta, trained.model}});

  double tau_fixed = 0, tau_learned = 0;
  generation_result r;
  const auto held_out = synthetic_prompts(128, params.vocab, 8, 64, 2);
  for (const auto& p : held_out) {
    if (dflash.generate(p, config, r) != status::success) return 1;
    tau_fixed += r.stats.tau() / static_cast<double>(held_out.size());
    if (blockpilot.generate(p, config, r) != status::success) return 1;
    tau_learned += r.stats.tau() / static_cast<double>(held_out.size());
  }
  std::printf("held-out mean tau: fixed_block_size<16> %.4f, blockpilot_policy<compact_features> %.4f (%+.2f %%)\n",
              tau_fixed, tau_learned, 100.0 * (tau_learned / tau_fixed - 1.0));
}
