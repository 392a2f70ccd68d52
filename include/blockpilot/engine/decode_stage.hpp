// The backend's share of the decode loop: the buffers of one request, the first token and one
// verification. speculative_decoder owns the loop and calls these; cuda/decode_stage.cuh adds cuda_backend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/backend.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/acceptance.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// `decode_stage<Acceptance, Backend>`, constructed from the backend tag:
/// - `logits_backend`: the backend whose memory holds the logits and q (what a policy must read);
/// - `reserve(max_block, vocab)`: sizes the request's buffers (allocates only when they grow; out_of_memory
///   when it cannot);
/// - `draft_probs(rows, vocab)`: the `[rows][vocab]` q buffer a drafter writes, in the backend's memory;
/// - `first_token(prefill, temperature, sampling, rng, token)`: the target's sample from its prefill row `[1][vocab]`
///   (the argmax when T < 1e-5; the decoder passes T = 0 under greedy_match) with `rng.bits64(0, target_sample)`,
///   after the sampling controls;
/// - `accept(input, result)`: the rule on one block, the logits and q in the backend's memory, the block and
///   the result on the host.
/// Left undefined for a Backend without an implementation.
template <class Acceptance, class Backend>
class decode_stage;

/// A Backend on which the decoder can run Acceptance.
template <class Acceptance, class Backend>
concept decodes_on = requires { sizeof(decode_stage<Acceptance, Backend>); };

/// A Policy that reads the logits where the stage keeps them (meaningful where decodes_on holds).
template <class Policy, class Acceptance, class Backend>
concept policy_fits_stage = reads_logits_on<Policy, typename decode_stage<Acceptance, Backend>::logits_backend>;

/// The host stage, for every Backend whose acceptance_op decides one block in host memory
/// (acceptance_rule<Acceptance, Backend>, as cpu_backend's): host buffers, the CPU first-token sample.
template <class Acceptance, class Backend>
  requires acceptance_rule<Acceptance, Backend>
class decode_stage<Acceptance, Backend> {
 public:
  using logits_backend = cpu_backend;  ///< host memory

  explicit decode_stage(Backend = {}) {}

  /// invalid_argument for a vocabulary the rules cannot take (> 2^22, as on CUDA); out_of_memory when an
  /// allocation fails.
  status reserve(int max_block, std::int64_t vocab) {
    if (vocab > detail::max_sampling_vocab) return status::invalid_argument;
    try {
      workspace_.resize(acceptance_op<Acceptance, Backend>::workspace_size(max_block, vocab));
      sample_weights_.resize(static_cast<std::size_t>(vocab));
      if constexpr (Acceptance::needs_draft_probabilities)
        draft_probs_.resize(static_cast<std::size_t>(std::max(max_block - 1, 0)) * static_cast<std::size_t>(vocab));
    } catch (const std::bad_alloc&) {
      return status::out_of_memory;  // what was resized stays valid: the next request sizes it again
    }
    return status::success;
  }

  [[nodiscard]] matrix_view<float> draft_probs(int rows, std::int64_t vocab) {
    return Acceptance::needs_draft_probabilities ? matrix_view<float>(draft_probs_.data(), rows, vocab)
                                                 : matrix_view<float>{};
  }

  status first_token(const matrix_view<const float>& prefill, float temperature, const sampling_controls& sampling,
                     philox_stream rng, token_id& token) {
    const auto vocab = static_cast<std::size_t>(prefill.cols);
    return cpu_detail::sample_row(prefill.row(0), temperature, rng.bits64(0, random_domain::target_sample),
                                  std::span<std::uint64_t>(sample_weights_.data(), vocab), token, sampling);
  }

  status accept(const acceptance_input& input, acceptance_result& result) {
    return acceptance_op<Acceptance, Backend>::run(input, workspace_, result);
  }

 private:
  std::vector<std::byte> workspace_;
  std::vector<std::uint64_t> sample_weights_;
  std::vector<float> draft_probs_;
};

}  // namespace blockpilot
