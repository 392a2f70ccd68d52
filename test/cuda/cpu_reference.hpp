// The CPU implementations the CUDA tests compare against, behind an interface that needs no Eigen: the
// definitions live in cpu_reference.cpp, compiled by the host compiler, so the .cu files stay Eigen-free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::testing::cpu {

/// Statistics after the top-k probabilities in compact_features' layout.
int compact_statistic_count();

/// compact_features{top_k, temperature}.extract(row) into out (resized to top_k + statistics).
status compact_features(std::span<const float> row, int top_k, float temperature, std::vector<float>& out);

/// full_row_features{probabilities, temperature}.extract(row) into out (resized to the row's length).
status full_row_probabilities(std::span<const float> row, float temperature, std::vector<float>& out);

enum class rule { greedy, sample_match, rejection };

/// acceptance_op<Rule, cpu_backend>::run on one request: logits `[b][vocab]`, block `[b]`, draft_probs
/// `[b-1][vocab]` (rejection only; may be null otherwise), with sampling controls.
status accept(rule r, const float* logits, int b, std::int64_t vocab, const token_id* block, const float* draft_probs,
              float temperature, philox_stream rng, acceptance_result& out, const sampling_controls& sampling = {});

/// cpu_detail::sample_row on one row: what the target samples there at T with these bits.
status sample_row(std::span<const float> row, float temperature, std::uint64_t bits, token_id& token);

/// An nn::mlp<float> or nn::mlp<Eigen::bfloat16> initialised from a seed, with a random standardisation.
class mlp_reference {
 public:
  mlp_reference(int input, const std::vector<int>& hidden, int classes, std::uint64_t seed, bool bf16);
  ~mlp_reference();
  mlp_reference(const mlp_reference&) = delete;
  mlp_reference& operator=(const mlp_reference&) = delete;

  /// The parameter buffer as stored (fp32, or bf16 bits), in nn::mlp's order.
  [[nodiscard]] const void* parameters() const;
  [[nodiscard]] std::size_t parameter_bytes() const;
  [[nodiscard]] const std::vector<float>& feature_mean() const;
  [[nodiscard]] const std::vector<float>& feature_std() const;
  /// nn::mlp::forward: logits `[rows][classes]` from x `[rows][input]`.
  status forward(const float* x, std::int64_t rows, float* logits) const;

 private:
  friend block_size_choice blockpilot_choice(const mlp_reference&, int, float, std::int64_t, std::int64_t,
                                             std::span<const float>, float&);
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// blockpilot_policy<compact_features, nn::mlp>::choose on a host prefill row, with `net` as the predictor
/// (input top_k + 9, classes 2k + 1) and the window B − k … B + k. `margin` receives the gap between the
/// two largest class logits (NaN when the policy falls back).
block_size_choice blockpilot_choice(const mlp_reference& net, int top_k, float temperature, std::int64_t training_block_size,
                                    std::int64_t window_k, std::span<const float> row, float& margin);

/// nn::argmax over a class-logit row.
std::int64_t argmax(std::span<const float> v);

}  // namespace blockpilot::testing::cpu
