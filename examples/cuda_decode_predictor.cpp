// Definitions of cuda_decode_predictor.hpp, compiled by the host compiler (Eigen lives here).
#include "cuda_decode_predictor.hpp"

#include <numeric>
#include <span>

#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot_workbench/nn/training.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"

namespace cuda_decode {

namespace bp = blockpilot;

namespace {
predictor_buffers buffers_of(const bp::nn::mlp<float>& net, const bp::nn::predictor_metadata& meta,
                             const bp::compact_features& features) {
  predictor_buffers out;
  const auto p = net.parameters();
  out.parameters.assign(p.begin(), p.end());
  out.feature_mean.assign(net.feature_mean().begin(), net.feature_mean().end());
  out.feature_std.assign(net.feature_std().begin(), net.feature_std().end());
  out.input = static_cast<int>(net.shape().input);
  for (const auto h : net.shape().hidden) out.hidden.push_back(static_cast<int>(h));
  out.classes = static_cast<int>(net.shape().classes);
  out.training_block_size = meta.training_block_size;
  out.window_k = meta.window_k;
  out.vocab_size = meta.vocab_size;
  out.top_k = features.top_k;
  out.temperature = features.temperature;
  return out;
}
}  // namespace

predictor_buffers make_predictor(const std::string& file, const bp::synthetic_params& params) {
  if (!file.empty()) {
    auto loaded = bp::nn::load_predictor<float>(file);
    if (loaded.metadata.feature_extractor != bp::compact_features::name)
      throw bp::error("predictor file '" + file + "' field 'feature_extractor': '" + loaded.metadata.feature_extractor +
                      "', this example runs 'compact'");
    auto parameters = loaded.metadata.feature_parameters;
    const auto features = bp::make_feature_extractor<bp::compact_features>(parameters, file);
    return buffers_of(loaded.network, loaded.metadata, features);
  }
  // A small sweep: 256 prompts at every size of the window 14..18, a compact predictor on their prefill rows.
  const bp::synthetic_world world(params);
  bp::synthetic_drafter drafter(world);
  bp::synthetic_target target(world);
  bp::generation_config config;
  config.max_new_tokens = 128;
  const std::vector<int> window = {14, 15, 16, 17, 18};
  const auto prompts = bp::synthetic_prompts(256, params.vocab, 8, 64, 1);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < prompts.size(); ++i) keys.push_back(std::to_string(i));
  const auto data = bp::sweep_policy_dataset(drafter, target, keys, prompts, window, config);
  const bp::compact_features features{64};
  std::vector<std::size_t> rows(prompts.size());
  std::iota(rows.begin(), rows.end(), std::size_t{0});
  bp::nn::training_options options;
  options.hidden = {64, 64};
  options.loss = bp::nn::loss_kind::expected_tau;
  options.cross_entropy_warmup = 30;
  options.patience = 30;
  const auto train_rows = std::span(rows).first(205), validation_rows = std::span(rows).subspan(205);
  const auto trained = bp::nn::train(bp::make_training_set(data, features, 14, 18, train_rows),
                                     bp::make_training_set(data, features, 14, 18, validation_rows), options);
  bp::nn::predictor_metadata meta;
  meta.vocab_size = params.vocab;
  return buffers_of(trained.model, meta, features);
}

}  // namespace cuda_decode
