// Definitions of cpu_reference.hpp: thin calls into the library's CPU implementations.
#include "cpu_reference.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <random>

#include "blockpilot/cpu/acceptance.hpp"
#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"
#include "blockpilot/nn/mlp.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"

namespace blockpilot::testing::cpu {

int compact_statistic_count() { return static_cast<int>(blockpilot::compact_statistic_count); }

status compact_features(std::span<const float> row, int top_k, float temperature, std::vector<float>& out) {
  const blockpilot::compact_features f{top_k, temperature};
  const auto vocab = static_cast<std::int64_t>(row.size());
  std::vector<float> workspace(f.workspace_size(vocab));
  out.assign(static_cast<std::size_t>(f.feature_count(vocab)), 0.0f);
  return f.extract(row, workspace, out);
}

status full_row_probabilities(std::span<const float> row, float temperature, std::vector<float>& out) {
  const full_row_features f{input_transform::probabilities, temperature};
  out.assign(row.size(), 0.0f);
  return f.extract(row, {}, out);
}

namespace {
template <class Rule>
status run_rule(const acceptance_input& in, acceptance_result& out) {
  std::vector<std::byte> workspace(acceptance_op<Rule, cpu_backend>::workspace_size(
      static_cast<int>(in.block.size()), in.target_logits.cols));
  return acceptance_op<Rule, cpu_backend>::run(in, workspace, out);
}
}  // namespace

status accept(rule r, const float* logits, int b, std::int64_t vocab, const token_id* block, const float* draft_probs,
              float temperature, philox_stream rng, acceptance_result& out, const sampling_controls& sampling) {
  acceptance_input in;
  in.sampling = sampling;
  in.target_logits = matrix_view<const float>(logits, b, vocab);
  in.block = std::span<const token_id>(block, static_cast<std::size_t>(b));
  if (draft_probs != nullptr && b > 1) in.draft_probs = matrix_view<const float>(draft_probs, b - 1, vocab);
  in.temperature = temperature;
  in.rng = rng;
  switch (r) {
    case rule::greedy: return run_rule<greedy_match>(in, out);
    case rule::sample_match: return run_rule<sample_and_match>(in, out);
    case rule::rejection: return run_rule<rejection_sampling>(in, out);
  }
  return status::invalid_argument;
}

status sample_row(std::span<const float> row, float temperature, std::uint64_t bits, token_id& token) {
  std::vector<std::uint64_t> weights(row.size());
  return cpu_detail::sample_row(row, temperature, bits, weights, token);
}

struct mlp_reference::impl {
  bool bf16;
  nn::mlp<float> f32;
  nn::mlp<Eigen::bfloat16> b16;
  std::vector<float> mean, stddev;
};

mlp_reference::mlp_reference(int input, const std::vector<int>& hidden, int classes, std::uint64_t seed, bool bf16)
    : impl_(std::make_unique<impl>()) {
  nn::mlp_shape shape;
  shape.input = input;
  shape.hidden.assign(hidden.begin(), hidden.end());
  shape.classes = classes;
  std::mt19937_64 rng(seed ^ 0x5eedULL);
  std::uniform_real_distribution<float> mean(-1.0f, 1.0f), stddev(0.5f, 2.0f);
  impl_->mean.resize(static_cast<std::size_t>(input));
  impl_->stddev.resize(static_cast<std::size_t>(input));
  for (int i = 0; i < input; ++i) {
    impl_->mean[static_cast<std::size_t>(i)] = mean(rng);
    impl_->stddev[static_cast<std::size_t>(i)] = stddev(rng);
  }
  impl_->bf16 = bf16;
  if (bf16) {
    impl_->b16 = nn::mlp<Eigen::bfloat16>(shape);
    blockpilot::nn::initialize(impl_->b16, seed);
    impl_->b16.set_standardization(impl_->mean, impl_->stddev);
  } else {
    impl_->f32 = nn::mlp<float>(shape);
    blockpilot::nn::initialize(impl_->f32, seed);
    impl_->f32.set_standardization(impl_->mean, impl_->stddev);
  }
}

mlp_reference::~mlp_reference() = default;

const void* mlp_reference::parameters() const {
  return impl_->bf16 ? static_cast<const void*>(impl_->b16.parameters().data())
                     : static_cast<const void*>(impl_->f32.parameters().data());
}
std::size_t mlp_reference::parameter_bytes() const {
  return static_cast<std::size_t>(impl_->bf16 ? impl_->b16.parameter_bytes() : impl_->f32.parameter_bytes());
}
const std::vector<float>& mlp_reference::feature_mean() const { return impl_->mean; }
const std::vector<float>& mlp_reference::feature_std() const { return impl_->stddev; }

status mlp_reference::forward(const float* x, std::int64_t rows, float* logits) const {
  const auto run = [&](const auto& net) {
    const nn::mlp_shape& s = net.shape();
    std::vector<float> workspace(static_cast<std::size_t>(net.workspace_size(rows)));
    return net.forward(matrix_view<const float>(x, rows, s.input), matrix_view<float>(logits, rows, s.classes), workspace);
  };
  return impl_->bf16 ? run(impl_->b16) : run(impl_->f32);
}

block_size_choice blockpilot_choice(const mlp_reference& net, int top_k, float temperature, std::int64_t training_block_size,
                                    std::int64_t window_k, std::span<const float> row, float& margin) {
  nn::predictor<float> predictor;
  predictor.metadata.training_block_size = training_block_size;
  predictor.metadata.window_k = window_k;
  predictor.metadata.vocab_size = static_cast<std::int64_t>(row.size());
  predictor.metadata.feature_extractor = std::string(blockpilot::compact_features::name);
  predictor.network = net.impl_->f32;
  blockpilot_policy<blockpilot::compact_features> policy({top_k, temperature}, std::move(predictor));
  const block_size_choice choice = policy.choose({{}, row, temperature});
  margin = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> features;
  if (choice.fallback || compact_features(row, top_k, temperature, features) != status::success) return choice;
  std::vector<float> logits(static_cast<std::size_t>(2 * window_k + 1));
  if (net.forward(features.data(), 1, logits.data()) != status::success) return choice;
  std::sort(logits.begin(), logits.end(), std::greater<>());
  margin = logits[0] - logits[1];
  return choice;
}

std::int64_t argmax(std::span<const float> v) { return nn::argmax(v); }

}  // namespace blockpilot::testing::cpu
