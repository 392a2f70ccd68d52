// The decode loop on cuda_backend: speculative_decoder's stage for logits in device memory. Each
// verification is acceptance_op<Rule, cuda_backend> on a batch of one request; the host loop gets back
// only the decision.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/decode_stage.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/cpu/acceptance.hpp"
#include "blockpilot/cuda/acceptance.cuh"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/device_memory.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot/engine/decode_stage.hpp"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// The stage of `speculative_decoder<…, Acceptance, cuda_backend>`. The verifier's logits `[b][vocab]`
/// (any row stride >= vocab), the drafter's q `[b-1][vocab]` and the policy's prefill row are device memory,
/// and the models enqueue their work on `backend.stream` (or finish it before they return).
///
/// Device memory: one allocation per request shape (max_block, vocab), made by `reserve` when the shape
/// changes and kept otherwise: the rule's workspace, the first token's, the step's inputs, its decision, and
/// q. Per step: one host-to-device copy (stream, b, block), the rule's launches, one device-to-host copy
/// of {accepted, bonus, status} and a stream synchronisation (the host loop needs the decision).
/// The first token is sample-and-match on the prefill row as a block of one: cpu_detail::sample_row's
/// token, Philox draw and status (the argmax under greedy_match, for which the decoder passes T = 0).
/// Any rule with a batched implementation on cuda_backend (batched_acceptance_rule) runs here: the three
/// built-in ones, or a user's acceptance_op<Rule, cuda_backend> with the batched contract.
template <class Acceptance>
  requires batched_acceptance_rule<Acceptance, cuda_backend>
class decode_stage<Acceptance, cuda_backend> {
  using op = batched_acceptance<Acceptance, cuda_backend>;
  using first_op = batched_acceptance<sample_and_match, cuda_backend>;
  /// Whether the rule's op declares that it applies sampling controls (the built-in rules do); a user's
  /// rule without the flag gets active controls refused rather than ignored.
  static constexpr bool applies_controls = requires { requires op::applies_sampling_controls; };

  /// What the host writes before each call: the stream and b, then the block (at tokens_offset).
  struct step_inputs {
    philox_stream rng;
    int block_size;
  };
  static constexpr std::size_t tokens_offset = cuda_detail::align_up(sizeof(step_inputs), 16);
  /// What the host reads after each call.
  struct step_outputs {
    acceptance_result result;
    status rule_status;
  };

 public:
  using logits_backend = cuda_backend;  ///< device memory

  explicit decode_stage(cuda_backend backend = {}) : backend_(backend) {}

  /// invalid_argument when the rule cannot take the shape (max_block > 256, vocab > 2^22); out_of_memory,
  /// no_device or cuda_error when the allocation fails.
  status reserve(int max_block, std::int64_t vocab) {
    if (max_block == max_block_ && vocab == vocab_) return status::success;
    max_block_ = 0;
    vocab_ = 0;
    const batched_acceptance_shape shape{1, max_block, vocab};
    if (const status s = op::can_implement(shape); s != status::success) return s;
    if (const status s = memory_.reserve(carve(shape, nullptr)); s != status::success) return s;
    carve(shape, memory_.data());
    host_step_.resize(tokens_offset + static_cast<std::size_t>(max_block) * sizeof(token_id));
    max_block_ = max_block;
    vocab_ = vocab;
    return status::success;
  }

  [[nodiscard]] matrix_view<float> draft_probs(int rows, std::int64_t vocab) {
    return Acceptance::needs_draft_probabilities ? matrix_view<float>(draft_probs_, rows, vocab) : matrix_view<float>{};
  }

  status first_token(const matrix_view<const float>& prefill, float temperature, const sampling_controls& sampling,
                     philox_stream rng, token_id& token) {
    if (vocab_ == 0 || prefill.cols != vocab_ || (sampling.active() && !applies_controls)) return status::invalid_argument;
    const token_id anchor = 0;  // a block of one row has no draft to compare: any valid token
    if (const status s = upload(rng, std::span<const token_id>(&anchor, 1)); s != status::success) return s;
    batched_acceptance_input in = inputs({1, 1, vocab_}, prefill, temperature);
    in.sampling = sampling;
    if (const status s = first_op::run(backend_, in, first_workspace_, outputs()); s != status::success) return s;
    acceptance_result result;
    if (const status s = download(result); s != status::success) return s;
    token = result.bonus;
    return status::success;
  }

  status accept(const acceptance_input& input, acceptance_result& result) {
    const auto b = static_cast<std::int64_t>(input.block.size());
    const bool reads_q = Acceptance::needs_draft_probabilities && b > 1;
    if (b < 1 || b > max_block_ || input.target_logits.rows != b || input.target_logits.cols != vocab_ ||
        (reads_q && !cpu_detail::holds(input.draft_probs, b - 1, vocab_)) || (input.sampling.active() && !applies_controls))
      return status::invalid_argument;
    if (const status s = upload(input.rng, input.block); s != status::success) return s;
    batched_acceptance_input in = inputs({1, max_block_, vocab_}, input.target_logits, input.temperature);
    in.sampling = input.sampling;
    // A block of one reads no q; the rule still wants a buffer for its shape's max_block, so it gets ours.
    in.draft_probs = reads_q ? input.draft_probs.data : draft_probs_;
    in.draft_row_stride = reads_q ? input.draft_probs.row_stride : vocab_;
    if (const status s = op::run(backend_, in, workspace_, outputs()); s != status::success) return s;
    return download(result);
  }

 private:
  /// The layout of the one allocation: its size; with a base, also points the buffers into it.
  std::size_t carve(const batched_acceptance_shape& shape, std::byte* base) {
    const std::size_t rule_bytes = op::workspace_size(shape);
    const std::size_t first_bytes = first_op::workspace_size({1, 1, shape.vocab});
    const std::size_t step_bytes = tokens_offset + static_cast<std::size_t>(shape.max_block) * sizeof(token_id);
    const auto q_rows = static_cast<std::size_t>(Acceptance::needs_draft_probabilities ? shape.max_block - 1 : 0);
    cuda_detail::workspace_carver c(base);
    std::byte* rule = c.take<std::byte>(rule_bytes);
    std::byte* first = c.take<std::byte>(first_bytes);
    std::byte* step = c.take<std::byte>(step_bytes);
    auto* outputs = c.take<step_outputs>(1);
    float* q = q_rows == 0 ? nullptr : c.take<float>(q_rows * static_cast<std::size_t>(shape.vocab));
    if (base != nullptr) {
      workspace_ = {rule, rule_bytes};
      first_workspace_ = {first, first_bytes};
      step_ = step;
      outputs_ = outputs;
      draft_probs_ = q;
    }
    return c.size();
  }

  [[nodiscard]] batched_acceptance_input inputs(const batched_acceptance_shape& shape, const matrix_view<const float>& logits,
                                                float temperature) const {
    batched_acceptance_input in;
    in.shape = shape;
    in.target_logits = logits.data;
    in.logits_row_stride = logits.row_stride;
    in.blocks = reinterpret_cast<const token_id*>(step_ + tokens_offset);
    in.block_sizes = &reinterpret_cast<const step_inputs*>(step_)->block_size;
    in.rng = &reinterpret_cast<const step_inputs*>(step_)->rng;
    in.temperature = temperature;
    return in;
  }
  [[nodiscard]] batched_acceptance_output outputs() const { return {&outputs_->result, &outputs_->rule_status}; }

  /// One copy of the step's stream, b and block to the device.
  status upload(philox_stream rng, std::span<const token_id> block) {
    auto* h = reinterpret_cast<step_inputs*>(host_step_.data());
    h->rng = rng;
    h->block_size = static_cast<int>(block.size());
    std::copy(block.begin(), block.end(), reinterpret_cast<token_id*>(host_step_.data() + tokens_offset));
    return cuda_detail::check(cudaMemcpyAsync(step_, host_step_.data(), tokens_offset + block.size() * sizeof(token_id),
                                              cudaMemcpyHostToDevice, backend_.stream));
  }

  /// One copy of the decision to the host, then waits for it; the rule's status for the request.
  status download(acceptance_result& result) {
    step_outputs h{};
    if (const status s = cuda_detail::check(
            cudaMemcpyAsync(&h, outputs_, sizeof(step_outputs), cudaMemcpyDeviceToHost, backend_.stream));
        s != status::success)
      return s;
    if (const status s = cuda_detail::check(cudaStreamSynchronize(backend_.stream)); s != status::success) return s;
    if (h.rule_status != status::success) return h.rule_status;
    result = h.result;
    return status::success;
  }

  cuda_backend backend_;
  int max_block_ = 0;
  std::int64_t vocab_ = 0;
  cuda_detail::device_allocation memory_;
  std::span<std::byte> workspace_, first_workspace_;
  std::byte* step_ = nullptr;
  step_outputs* outputs_ = nullptr;
  float* draft_probs_ = nullptr;
  std::vector<std::byte> host_step_;
};

}  // namespace blockpilot
