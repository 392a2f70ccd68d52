// The BlockPilot policy on cuda_backend: blockpilot_policy<compact_features, nn::mlp<W>>'s decision for
// a prefill row in device memory — the feature pass with the compact predictor fused behind it, or the
// feature pass and then the MLP when the network does not fit the fused kernel.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/blockpilot_policy.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/compact_features.cuh"
#include "blockpilot/cuda/device_memory.cuh"
#include "blockpilot/cuda/mlp.cuh"
#include "blockpilot/cuda/mlp_view.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// The block sizes a predictor chooses from: class c is B − k + c (nn::predictor_metadata's fields).
struct block_size_window {
  std::int64_t training_block_size = 16;  ///< B
  std::int64_t window_k = 2;              ///< k: 2k + 1 classes
  std::int64_t vocab_size = 0;            ///< the target's vocabulary (the prefill row's length)
};

/// `cuda_blockpilot_policy<W>` (W = float or __nv_bfloat16 weights): for a prefill row in device memory,
/// B − k + argmax MLP(compact_features(row)), or B with `fallback` set when the row has the wrong length,
/// its features or class logits are not finite or a launch fails — blockpilot_policy's decision on the same row and weights
/// (the class logits agree to about 1e-5, so a near tie may go the other way). Device buffers are allocated
/// at construction; a decision launches one kernel (two plus the MLP's when not fused), copies the class back
/// and waits for it.
template <mlp_device_weight W = float>
class cuda_blockpilot_policy {
  using features_op = compact_feature_op<cuda_backend>;

 public:
  using logits_backend = cuda_backend;  ///< reads request_features::prefill_logits in device memory

  /// `network`: the predictor in device memory, uploaded as nn::mlp keeps it (not owned: it must outlive
  /// the policy), input = features.top_k + 9, classes = 2k + 1. The logits' stream is `backend.stream`.
  /// Throws blockpilot::error for a configuration the ops cannot run or a failed allocation.
  cuda_blockpilot_policy(cuda_backend backend, compact_features features, mlp_device_view<W> network,
                         block_size_window window)
      : backend_(backend), features_(features), network_(network), window_(window) {
    if (network.parameters == nullptr || network.feature_mean == nullptr || network.feature_std == nullptr)
      throw error("cuda_blockpilot_policy: the network view has no parameters or feature statistics (upload it first)");
    const compact_feature_shape shape{1, window.vocab_size, features.top_k};
    if (features_op::can_implement(shape, features.temperature) != status::success)
      throw error("cuda_blockpilot_policy: compact_features{top_k = " + std::to_string(features.top_k) +
                  "} or its temperature cannot run on the device for vocab_size " + std::to_string(window.vocab_size));
    if (!block_size_window_fits(window.training_block_size, window.window_k))
      throw error("cuda_blockpilot_policy: the window B-k..B+k must lie within 1.." + std::to_string(block_size_limit));
    if (network.shape.input != features_op::feature_count(features.top_k) || network.shape.classes != 2 * window.window_k + 1)
      throw error("cuda_blockpilot_policy: the network maps " + std::to_string(network.shape.input) + " features to " +
                  std::to_string(network.shape.classes) + " classes; the policy needs top_k + 9 = " +
                  std::to_string(features_op::feature_count(features.top_k)) + " to 2k + 1 = " +
                  std::to_string(2 * window.window_k + 1));
    fused_ = features_op::can_fuse(features.top_k, network.shape) == status::success;
    if (!fused_ && mlp_forward_op<cuda_backend>::can_implement(network.shape, 1) != status::success)
      throw error("cuda_blockpilot_policy: the network's shape cannot run on the device");
    if (memory_.reserve(carve(nullptr)) != status::success) throw error("cuda_blockpilot_policy: device allocation failed");
    carve(memory_.data());
    host_.resize(result_bytes_);
  }

  [[nodiscard]] int max_block_size() const { return static_cast<int>(window_.training_block_size + window_.window_k); }
  [[nodiscard]] int default_block_size() const { return static_cast<int>(window_.training_block_size); }
  [[nodiscard]] const block_size_window& window() const { return window_; }
  /// Whether the network runs fused behind the feature pass.
  [[nodiscard]] bool fused() const { return fused_; }

  /// `request.prefill_logits`: device memory `[vocab]`.
  [[nodiscard]] block_size_choice choose(const request_features& request) {
    if (static_cast<std::int64_t>(request.prefill_logits.size()) != window_.vocab_size) return fallback();
    compact_feature_args<float> args;
    args.shape = {1, window_.vocab_size, features_.top_k};
    args.logits = request.prefill_logits.data();
    args.temperature = features_.temperature;
    args.features = features_row_;
    args.statuses = feature_status_;
    const int classes = network_.shape.classes;
    status s;
    if (fused_) {
      compact_predictor_args<W> predictor;
      predictor.network = network_;
      predictor.classes = class_;
      predictor.class_logits = class_logits_;
      predictor.class_logits_stride = classes;
      s = features_op::run(backend_, args, predictor, feature_workspace_);
    } else {
      s = features_op::run(backend_, args, feature_workspace_);
      if (s == status::success)
        s = mlp_forward_op<cuda_backend>::run(backend_, network_, matrix_view<const float>(features_row_, 1, network_.shape.input),
                                              matrix_view<float>(class_logits_, 1, classes), mlp_workspace_);
    }
    if (s != status::success || download() != status::success) return fallback();
    int c = 0;
    if (fused_) {
      c = *reinterpret_cast<const int*>(host_.data() + (reinterpret_cast<std::byte*>(class_) - results_));
      if (c < 0) return fallback();
    } else {
      const auto at = [&](const void* device) { return host_.data() + (static_cast<const std::byte*>(device) - results_); };
      if (*reinterpret_cast<const status*>(at(feature_status_)) != status::success) return fallback();
      const auto* features = reinterpret_cast<const float*>(at(features_row_));
      for (int i = 0; i < network_.shape.input; ++i)
        if (!std::isfinite(features[i])) return fallback();
      c = argmax(std::span<const float>(reinterpret_cast<const float*>(at(class_logits_)), static_cast<std::size_t>(classes)));
    }
    const auto* logits = reinterpret_cast<const float*>(host_.data() + (reinterpret_cast<std::byte*>(class_logits_) - results_));
    for (int i = 0; i < classes; ++i)  // as the CPU policy: a network whose outputs are not finite is not used
      if (!std::isfinite(logits[i])) return fallback();
    return {static_cast<int>(window_.training_block_size - window_.window_k + c), false};
  }

 private:
  [[nodiscard]] block_size_choice fallback() const { return {default_block_size(), true}; }

  /// nn::argmax: the first maximum, NaN ignored, 0 when every value is NaN.
  static int argmax(std::span<const float> v) {
    int best = -1;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isnan(v[i]) && (best < 0 || v[i] > v[static_cast<std::size_t>(best)])) best = static_cast<int>(i);
    return best < 0 ? 0 : best;
  }

  /// The layout of the one allocation: workspaces, then the results the host reads back in one copy
  /// (status, features, class logits, class). Its size; with a base, also points the buffers into it.
  std::size_t carve(std::byte* base) {
    const compact_feature_shape shape{1, window_.vocab_size, features_.top_k};
    const std::size_t feature_bytes = features_op::workspace_size(shape);
    const std::size_t mlp_bytes = fused_ ? 0 : mlp_forward_op<cuda_backend>::workspace_size(network_.shape, 1);
    cuda_detail::workspace_carver c(base);
    std::byte* feature_ws = c.take<std::byte>(feature_bytes);
    std::byte* mlp_ws = c.take<std::byte>(mlp_bytes);
    const std::size_t results_at = c.size();
    auto* st = c.take<status>(1);
    float* row = c.take<float>(static_cast<std::size_t>(features_op::feature_count(features_.top_k)));
    float* logits = c.take<float>(static_cast<std::size_t>(network_.shape.classes));
    int* cls = c.take<int>(1);
    const std::size_t size = c.size();
    if (base != nullptr) {
      feature_workspace_ = {feature_ws, feature_bytes};
      mlp_workspace_ = {mlp_ws, mlp_bytes};
      feature_status_ = st;
      features_row_ = row;
      class_logits_ = logits;
      class_ = cls;
      results_ = base + results_at;
      result_bytes_ = size - results_at;
    }
    return size;
  }

  /// One copy of the results to the host, then waits for it.
  status download() {
    if (const status s = cuda_detail::check(
            cudaMemcpyAsync(host_.data(), results_, result_bytes_, cudaMemcpyDeviceToHost, backend_.stream));
        s != status::success)
      return s;
    return cuda_detail::check(cudaStreamSynchronize(backend_.stream));
  }

  cuda_backend backend_;
  compact_features features_;
  mlp_device_view<W> network_;
  block_size_window window_;
  bool fused_ = false;
  cuda_detail::device_allocation memory_;
  std::span<std::byte> feature_workspace_, mlp_workspace_;
  status* feature_status_ = nullptr;
  float* features_row_ = nullptr;
  float* class_logits_ = nullptr;
  int* class_ = nullptr;
  std::byte* results_ = nullptr;
  std::size_t result_bytes_ = 0;
  std::vector<std::byte> host_;
};

}  // namespace blockpilot
