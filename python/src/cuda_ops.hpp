// The CUDA half of the binding (cuda_ops.cu, compiled by nvcc when the package is built with CUDA),
// called from the host bindings with plain pointers and vectors: no Python, Eigen or CUDA types cross.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::python::cuda_ops {

/// CUDA devices present (0 without a driver or a device).
int device_count() noexcept;

/// The acceptance rules, by a value that crosses into the nvcc translation unit.
enum class rule_id { greedy, sample_match, rejection };

/// One batched acceptance call in the flattened layout: arrays marked device are CUDA memory.
struct acceptance_call {
  rule_id rule = rule_id::greedy;
  const float* target_logits = nullptr;     ///< device [rows][vocab]
  std::int64_t rows = 0, vocab = 0;
  const token_id* blocks = nullptr;         ///< device [block_rows]
  std::int64_t block_rows = 0;
  const int* draft_offsets = nullptr;       ///< device [batch + 1]
  int batch = 0;
  const float* draft_probs = nullptr;       ///< device [draft_rows][vocab], or null
  std::int64_t draft_rows = -1;             ///< -1 without draft_probs
  std::span<const std::uint64_t> seeds, offsets;  ///< host [batch]
  std::span<const float> temperatures;            ///< host [batch]
  sampling_controls sampling{};
  std::uintptr_t stream = 0;                ///< cudaStream_t of the arrays (0: the default stream)
  int device = 0;                           ///< the CUDA device that holds the arrays
};

/// What came back to the host: per-request results and statuses, or why the call did not run.
struct acceptance_outcome {
  std::string refused;  ///< empty when the call ran; else a message (the inputs do not fit together)
  status call = status::success;
  std::vector<acceptance_result> results;
  std::vector<status> statuses;
};

/// Copies draft_offsets to the host to check them against the shapes, then runs the rule on `stream`
/// and waits for its results.
acceptance_outcome accept(const acceptance_call& call);

/// A compact predictor on the device: cuda_blockpilot_policy over a copy of the network, on the device
/// that is current when it is made. Calls from several threads take turns.
class predictor {
 public:
  struct network {
    std::span<const float> parameters, feature_mean, feature_std;
    int input = 0;
    std::vector<int> hidden;
    int classes = 0;
  };
  /// Throws blockpilot::error when the network or the features cannot run on the device.
  predictor(const network& n, int top_k, float temperature, std::int64_t training_block_size, std::int64_t window_k,
            std::int64_t vocab, std::uintptr_t stream);
  ~predictor();
  predictor(const predictor&) = delete;
  predictor& operator=(const predictor&) = delete;

  /// The decision for a row [vocab] on device(), which is made current for the call. The decision runs on
  /// the predictor's stream, after what `rows_stream` (the stream that writes the rows) has enqueued so far.
  block_size_choice choose(const float* row, std::int64_t vocab, std::uintptr_t rows_stream);
  /// The CUDA device that holds the network.
  [[nodiscard]] int device() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace blockpilot::python::cuda_ops
