// The compact feature pass on cuda_backend: compact_features::extract for a batch of fp32 or bf16 logit
// rows in one launch, optionally with a compact predictor MLP fused behind it.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/compact_features.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/kernels/compact_features.cuh"
#include "blockpilot/cuda/mlp_view.cuh"
#include "blockpilot/cuda/tuning/sm90.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// The shape of one batched feature pass (what the workspace size depends on).
struct compact_feature_shape {
  int batch = 0;           ///< rows, 0 … 65535
  std::int64_t vocab = 0;  ///< 1 … 2^21
  int top_k = 256;         ///< 1 … min(vocab, 1024)
};

/// Logit element types of the feature pass.
template <class T>
concept feature_logit = std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>;

/// One batched feature pass, device pointers.
template <feature_logit Logit>
struct compact_feature_args {
  compact_feature_shape shape;
  const Logit* logits = nullptr;    ///< `[batch][vocab]`, row r at r · row_stride
  std::int64_t row_stride = 0;      ///< >= vocab; 0 means vocab
  float temperature = 1.0f;         ///< finite, > 0, with a finite inverse (compact_features::temperature)
  float* features = nullptr;        ///< `[batch][top_k + 9]`: compact_features' layout; NaN on error
  std::int64_t features_stride = 0;  ///< >= top_k + 9; 0 means top_k + 9
  status* statuses = nullptr;       ///< `[batch]`: success or non_finite_logits, as extract() returns
  /// Optional `[batch][vocab]`: softmax(row / T) (full_row_features' probabilities transform), NaN for
  /// failed rows. One more launch, one more read of the logits.
  float* probabilities = nullptr;
  std::int64_t probabilities_stride = 0;  ///< >= vocab; 0 means vocab
};

/// The compact predictor behind the feature pass: the network (input = top_k + 9) and where its decision goes.
template <mlp_device_weight W>
struct compact_predictor_args {
  mlp_device_view<W> network;
  int* classes = nullptr;                ///< `[batch]`: argmax class, or -1 where blockpilot_policy falls back
  float* class_logits = nullptr;         ///< `[batch][classes]`, optional
  std::int64_t class_logits_stride = 0;  ///< >= classes; 0 means classes
};

/// The feature pass on a backend; the CPU extractor is compact_features (features/compact.hpp).
template <class Backend>
struct compact_feature_op;

/// One launch for the whole batch: per row the top_k largest probabilities of softmax(row / T), descending,
/// then entropy, varentropy, log-sum-exp, max logit, top-1 margin, top-k mass, effective tokens, near-max
/// tokens and log V — compact_features' definitions and order, to float tolerance (the CPU pass uses a
/// cheaper exp: its probabilities differ from exact ones by up to 8e-6 relative, these by about 1e-6).
template <>
struct compact_feature_op<cuda_backend> {
  static constexpr int threads = cuda_detail::sm90_features.threads;
  static constexpr int segment = cuda_detail::sm90_features.segment;
  static constexpr int capacity = cuda_detail::sm90_features.merge_capacity;
  static constexpr int max_top_k = cuda_detail::feature_max_keep;
  static constexpr std::int64_t max_vocab = std::int64_t{threads} * segment;
  static constexpr int statistic_count = cuda_detail::feature_statistics;

  [[nodiscard]] static constexpr std::int64_t feature_count(int top_k) { return top_k + statistic_count; }

  /// success; invalid_argument when a dimension is out of range; invalid_temperature when T is not
  /// finite and > 0 with a finite inverse (as compact_features::can_implement).
  [[nodiscard]] static constexpr status can_implement(const compact_feature_shape& s, float temperature) {
    if (s.batch < 0 || s.batch > 65535 || s.vocab < 1 || s.vocab > max_vocab || s.top_k < 1 || s.top_k > max_top_k ||
        s.top_k > s.vocab)
      return status::invalid_argument;
    return detail::valid_temperature(temperature) ? status::success : status::invalid_temperature;
  }

  /// Bytes of device workspace for this shape (arithmetic; 0 for an invalid shape).
  [[nodiscard]] static std::size_t workspace_size(const compact_feature_shape& s) {
    if (can_implement(s, 1.0f) != status::success) return 0;
    cuda_detail::feature_params<float, cuda_detail::no_fused_predictor> p{};
    return carve(s, nullptr, p);
  }

  /// Whether `network` can run fused behind a pass with this top_k: input = top_k + 9 and its features
  /// and activations fit the merging block's shared memory (about 2 · max hidden + top_k <= 8,100).
  [[nodiscard]] static constexpr status can_fuse(int top_k, const mlp_device_shape& network) {
    if (!network.valid() || network.input != feature_count(top_k) ||
        !cuda_detail::fused_predictor_fits<capacity>(static_cast<int>(feature_count(top_k)), network))
      return status::invalid_argument;
    return status::success;
  }

  /// Enqueues the pass on `backend.stream` (a memset of the row tickets, then one kernel, and one more for
  /// the probabilities when asked) and returns without waiting. Per-row outcomes go to args.statuses; the
  /// returned status covers the call:
  /// invalid_argument / invalid_temperature (see can_implement; null pointers, strides),
  /// workspace_too_small, or cuda_error. No allocation, no synchronisation, no device query.
  template <feature_logit Logit>
  [[nodiscard]] static status run(const cuda_backend& backend, const compact_feature_args<Logit>& args,
                                  std::span<std::byte> workspace) {
    cuda_detail::no_fused_predictor none;
    return launch(backend, args, none, workspace);
  }

  /// The pass with the compact predictor fused behind it (see can_fuse): also writes each row's class
  /// (-1 when the row's status is not success or a feature is not finite, as blockpilot_policy falls
  /// back) and, if asked, its class logits.
  template <feature_logit Logit, mlp_device_weight W>
  [[nodiscard]] static status run(const cuda_backend& backend, const compact_feature_args<Logit>& args,
                                  const compact_predictor_args<W>& predictor, std::span<std::byte> workspace) {
    if (const status s = can_fuse(args.shape.top_k, predictor.network.shape); s != status::success) return s;
    const auto& net = predictor.network;
    const std::int64_t stride = predictor.class_logits_stride == 0 ? net.shape.classes : predictor.class_logits_stride;
    if (args.shape.batch > 0 && (net.parameters == nullptr || net.feature_mean == nullptr || net.feature_std == nullptr ||
                                 predictor.classes == nullptr || stride < net.shape.classes))
      return status::invalid_argument;
    cuda_detail::fused_predictor<W> fused{net, predictor.classes, predictor.class_logits, stride};
    return launch(backend, args, fused, workspace);
  }

 private:
  template <class Logit, class Predictor>
  static std::size_t carve(const compact_feature_shape& s, std::byte* base, cuda_detail::feature_params<Logit, Predictor>& p) {
    p.vocab = static_cast<int>(s.vocab);
    p.top_k = s.top_k;
    p.keep = s.top_k > 2 ? s.top_k : 2;
    p.segments = static_cast<int>((s.vocab + segment - 1) / segment);
    const auto batch = static_cast<std::size_t>(s.batch);
    cuda_detail::workspace_carver c(base);
    p.tickets = c.take<unsigned>(batch);
    p.partials = c.take<cuda_detail::feature_segment_partial>(batch * static_cast<std::size_t>(p.segments));
    p.candidates = c.take<float>(batch * static_cast<std::size_t>(p.segments) * static_cast<std::size_t>(p.keep));
    p.row_stats = c.take<cuda_detail::feature_row_stats>(batch);
    return c.size();
  }

  template <class Logit, class Predictor>
  static status launch(const cuda_backend& backend, const compact_feature_args<Logit>& args, const Predictor& predictor,
                       std::span<std::byte> workspace) {
    const compact_feature_shape& s = args.shape;
    if (const status st = can_implement(s, args.temperature); st != status::success) return st;
    if (s.batch == 0) return status::success;
    const std::int64_t row_stride = args.row_stride == 0 ? s.vocab : args.row_stride;
    const std::int64_t features_stride = args.features_stride == 0 ? feature_count(s.top_k) : args.features_stride;
    const std::int64_t probabilities_stride = args.probabilities_stride == 0 ? s.vocab : args.probabilities_stride;
    if (args.logits == nullptr || args.features == nullptr || args.statuses == nullptr || row_stride < s.vocab ||
        features_stride < feature_count(s.top_k) || probabilities_stride < s.vocab)
      return status::invalid_argument;
    cuda_detail::feature_params<Logit, Predictor> p{};
    if (const status st = cuda_detail::check_workspace(workspace, carve(s, nullptr, p)); st != status::success) return st;
    carve(s, workspace.data(), p);
    p.logits = args.logits;
    p.row_stride = row_stride;
    p.inv_t = 1.0f / args.temperature;  // as compact_features::extract
    p.features = args.features;
    p.features_stride = features_stride;
    p.statuses = args.statuses;
    p.predictor = predictor;
    if (const status st = cuda_detail::check(cudaMemsetAsync(p.tickets, 0, static_cast<std::size_t>(s.batch) * sizeof(unsigned),
                                                             backend.stream));
        st != status::success)
      return st;
    cuda_detail::compact_feature_kernel<threads, segment, capacity, Logit, Predictor>
        <<<dim3(static_cast<unsigned>(p.segments), static_cast<unsigned>(s.batch)), threads, 0, backend.stream>>>(p);
    if (args.probabilities != nullptr) {
      constexpr int chunk = 4096;
      cuda_detail::feature_probabilities_kernel<threads, chunk, Logit>
          <<<dim3(static_cast<unsigned>((s.vocab + chunk - 1) / chunk), static_cast<unsigned>(s.batch)), threads, 0,
             backend.stream>>>(p.logits, row_stride, p.vocab, p.inv_t, p.row_stats, p.statuses, args.probabilities,
                               probabilities_stride);
    }
    return cuda_detail::check(cudaGetLastError());
  }
};

}  // namespace blockpilot
