// The binding's CUDA ops: the batched acceptance rules and the compact predictor on cuda_backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "blockpilot/cuda.cuh"
#include "cuda_ops.hpp"
#include "ragged_layout.hpp"

namespace blockpilot::python::cuda_ops {

int device_count() noexcept {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

namespace {

/// Makes `device` current for a call and gives the caller's back at the end.
class device_guard {
 public:
  explicit device_guard(int device)
      : ok_(cudaGetDevice(&previous_) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {}
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  int previous_ = -1;
  bool ok_;
};

template <class Rule>
acceptance_outcome run_rule(const acceptance_call& c, cudaStream_t stream) {
  acceptance_outcome out;
  const auto n = static_cast<std::size_t>(c.batch);
  std::vector<int> offsets(n + 1);
  if (cuda_detail::check(cudaMemcpyAsync(offsets.data(), c.draft_offsets, offsets.size() * sizeof(int),
                                         cudaMemcpyDeviceToHost, stream)) != status::success ||
      cuda_detail::check(cudaStreamSynchronize(stream)) != status::success) {
    out.call = status::cuda_error;
    return out;
  }
  const ragged_layout ragged = check_ragged(offsets, c.rows, c.block_rows, c.draft_rows, Rule::needs_draft_probabilities, Rule::name);
  if (!ragged.refused.empty()) {
    out.refused = ragged.refused;
    return out;
  }
  using op = acceptance_op<Rule, cuda_backend>;
  batched_acceptance_input in;
  in.shape = {c.batch, ragged.max_block, c.vocab};
  if (op::can_implement(in.shape) != status::success) {
    out.refused = "the CUDA rules take at most 65535 requests, blocks of up to " + std::to_string(op::max_block_limit) +
                  " rows and vocabularies of up to " + std::to_string(op::max_vocab) + " tokens";
    return out;
  }
  std::vector<philox_stream> streams(n);
  for (std::size_t r = 0; r < n; ++r) streams[r] = {c.seeds[r], c.offsets[r]};
  // One allocation: the streams and temperatures, the outputs, then the rule's workspace (sized by a
  // carve of a null base, then carved for real).
  philox_stream* rng = nullptr;
  float* temperatures = nullptr;
  acceptance_result* results = nullptr;
  status* statuses = nullptr;
  const auto carve = [&](std::byte* base) {
    cuda_detail::workspace_carver c(base);
    rng = c.take<philox_stream>(n);
    temperatures = c.take<float>(n);
    results = c.take<acceptance_result>(n);
    statuses = c.take<status>(n);
    return c.size();
  };
  const std::size_t fixed = carve(nullptr), workspace = op::workspace_size(in.shape);
  cuda_detail::device_allocation memory;
  if (const status s = memory.reserve(fixed + workspace); s != status::success) {
    out.call = s;
    return out;
  }
  carve(memory.data());
  in.target_logits = c.target_logits;
  in.blocks = c.blocks;
  in.draft_offsets = c.draft_offsets;
  in.draft_probs = c.draft_probs;
  in.temperatures = temperatures;
  in.sampling = c.sampling;
  in.rng = rng;
  out.results.resize(n);
  out.statuses.resize(n);
  status s = cuda_detail::check(cudaMemcpyAsync(rng, streams.data(), n * sizeof(philox_stream), cudaMemcpyHostToDevice, stream));
  if (s == status::success)
    s = cuda_detail::check(cudaMemcpyAsync(temperatures, c.temperatures.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  if (s == status::success)
    s = op::run(cuda_backend{stream}, in, {memory.data() + fixed, workspace}, {results, statuses});
  if (s == status::success)
    s = cuda_detail::check(cudaMemcpyAsync(out.results.data(), results, n * sizeof(acceptance_result), cudaMemcpyDeviceToHost, stream));
  if (s == status::success)
    s = cuda_detail::check(cudaMemcpyAsync(out.statuses.data(), statuses, n * sizeof(status), cudaMemcpyDeviceToHost, stream));
  if (s == status::success) s = cuda_detail::check(cudaStreamSynchronize(stream));
  out.call = s;
  return out;
}

}  // namespace

acceptance_outcome accept(const acceptance_call& c) {
  const auto stream = reinterpret_cast<cudaStream_t>(c.stream);
  if (c.batch == 0) return {};
  const device_guard on_device(c.device);
  if (!on_device.ok()) return {.call = status::cuda_error};
  switch (c.rule) {
    case rule_id::greedy: return run_rule<greedy_match>(c, stream);
    case rule_id::sample_match: return run_rule<sample_and_match>(c, stream);
    case rule_id::rejection: break;
  }
  return run_rule<rejection_sampling>(c, stream);
}

struct predictor::state {
  int device = 0;
  std::mutex turns;  // one workspace and one stream: one decision at a time
  cudaStream_t stream = nullptr;
  cudaEvent_t rows_ready = nullptr;  // recorded on the rows' stream, waited for on `stream`
  cuda_detail::device_allocation weights;
  std::optional<cuda_blockpilot_policy<float>> policy;
  ~state() {
    if (rows_ready != nullptr) (void)cudaEventDestroy(rows_ready);
  }
};

predictor::predictor(const network& n, int top_k, float temperature, std::int64_t training_block_size,
                     std::int64_t window_k, std::int64_t vocab, std::uintptr_t stream)
    : state_(std::make_unique<state>()) {
  if (cudaGetDevice(&state_->device) != cudaSuccess) throw error("CudaPredictor: no current CUDA device");
  state_->stream = reinterpret_cast<cudaStream_t>(stream);
  if (cudaEventCreateWithFlags(&state_->rows_ready, cudaEventDisableTiming) != cudaSuccess)
    throw error("CudaPredictor: creating an event failed");
  if (n.hidden.size() > static_cast<std::size_t>(mlp_max_hidden_layers))
    throw error("CudaPredictor: at most " + std::to_string(mlp_max_hidden_layers) + " hidden layers run on the device");
  mlp_device_shape shape;
  shape.input = n.input;
  shape.hidden_count = static_cast<int>(n.hidden.size());
  std::copy(n.hidden.begin(), n.hidden.end(), shape.hidden);
  shape.classes = n.classes;
  const std::size_t bytes = (n.parameters.size() + n.feature_mean.size() + n.feature_std.size()) * sizeof(float);
  if (state_->weights.reserve(bytes) != status::success) throw error("CudaPredictor: device allocation failed");
  auto* p = reinterpret_cast<float*>(state_->weights.data());
  float* mean = p + n.parameters.size();
  float* std = mean + n.feature_mean.size();
  // On the predictor's stream, waited for: the first decision reads the whole network, whatever the flags.
  const cudaStream_t on = state_->stream;
  const auto upload = [on](float* to, std::span<const float> from) {
    return cudaMemcpyAsync(to, from.data(), from.size() * sizeof(float), cudaMemcpyHostToDevice, on) == cudaSuccess;
  };
  if (!upload(p, n.parameters) || !upload(mean, n.feature_mean) || !upload(std, n.feature_std) ||
      cudaStreamSynchronize(on) != cudaSuccess)
    throw error("CudaPredictor: uploading the network failed");
  state_->policy.emplace(cuda_backend{reinterpret_cast<cudaStream_t>(stream)}, compact_features{top_k, temperature},
                         mlp_device_view<float>{p, mean, std, shape},
                         block_size_window{training_block_size, window_k, vocab});
}

predictor::~predictor() = default;

block_size_choice predictor::choose(const float* row, std::int64_t vocab, std::uintptr_t rows_stream) {
  const std::lock_guard turn(state_->turns);
  const device_guard on_device(state_->device);
  if (!on_device.ok()) throw error("CudaPredictor: cannot make its device current");
  if (const auto from = reinterpret_cast<cudaStream_t>(rows_stream); from != state_->stream)
    if (cudaEventRecord(state_->rows_ready, from) != cudaSuccess ||
        cudaStreamWaitEvent(state_->stream, state_->rows_ready, 0) != cudaSuccess)
      throw error("CudaPredictor: cannot order the decision after the rows' stream");
  return state_->policy->choose({{}, {row, static_cast<std::size_t>(vocab)}, 0.0f});
}

int predictor::device() const noexcept { return state_->device; }

}  // namespace blockpilot::python::cuda_ops
