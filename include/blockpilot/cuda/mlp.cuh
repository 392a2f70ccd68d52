// The predictor MLP on cuda_backend: nn::mlp::forward for a batch of feature rows in device memory, one
// bandwidth-bound GEMV per layer over fp32 or bf16 weights (the reference shape 151,936 → 2048 → 2048 → 5
// reads 631 MB of bf16 weights once per 4 rows).
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/mlp.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/kernels/mlp.cuh"
#include "blockpilot/cuda/mlp_view.cuh"
#include "blockpilot/cuda/tuning/sm90.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// The MLP forward on a backend; the CPU one is nn::mlp::forward (nn/mlp.hpp).
template <class Backend>
struct mlp_forward_op;

/// logits `[batch][classes]` = network(x `[batch][input]`), fp32 activations, same operations as
/// nn::mlp::forward (standardise, W x + b, ReLU, residual add) with fp32 accumulation in another order.
/// Launches: one standardisation, then per layer a partial-GEMV kernel and an epilogue kernel.
template <>
struct mlp_forward_op<cuda_backend> {
  static constexpr int warps = cuda_detail::sm90_gemv.warps_per_block;
  static constexpr int rows_per_block = cuda_detail::sm90_gemv.rows_per_block;

  /// success, or invalid_argument for an invalid shape or batch outside [0, 262,140].
  [[nodiscard]] static constexpr status can_implement(const mlp_device_shape& shape, std::int64_t batch) {
    return shape.valid() && batch >= 0 && batch <= 65535 * std::int64_t{rows_per_block} ? status::success
                                                                                         : status::invalid_argument;
  }

  /// Bytes of device workspace for `batch` rows (arithmetic; 0 for an invalid shape).
  [[nodiscard]] static std::size_t workspace_size(const mlp_device_shape& shape, std::int64_t batch) {
    if (can_implement(shape, batch) != status::success) return 0;
    buffers b{};
    return carve(shape, batch, nullptr, b);
  }

  /// Enqueues the forward on `backend.stream` and returns without waiting. x, logits, the network and the
  /// workspace are device memory. invalid_argument for shape or stride mismatches or null pointers,
  /// workspace_too_small, cuda_error when a launch failed. No allocation, no synchronisation, no device
  /// query: graph-capturable.
  template <mlp_device_weight W>
  [[nodiscard]] static status run(const cuda_backend& backend, const mlp_device_view<W>& network,
                                  matrix_view<const float> x, matrix_view<float> logits, std::span<std::byte> workspace) {
    const mlp_device_shape& shape = network.shape;
    const std::int64_t batch = x.rows;
    if (const status s = can_implement(shape, batch); s != status::success) return s;
    if (x.cols != shape.input || logits.cols != shape.classes || logits.rows != batch || x.row_stride < x.cols ||
        logits.row_stride < logits.cols)
      return status::invalid_argument;
    if (batch == 0) return status::success;
    if (x.data == nullptr || logits.data == nullptr || network.parameters == nullptr || network.feature_mean == nullptr ||
        network.feature_std == nullptr)
      return status::invalid_argument;
    buffers b{};
    if (const status s = cuda_detail::check_workspace(workspace, carve(shape, batch, nullptr, b)); s != status::success)
      return s;
    carve(shape, batch, workspace.data(), b);
    const cudaStream_t stream = backend.stream;
    const int rows = static_cast<int>(batch);

    cuda_detail::mlp_standardize_kernel<float><<<grid_for(batch * shape.input), 256, 0, stream>>>(
        x.data, x.row_stride, rows, shape.input, network.feature_mean, network.feature_std, b.xs, b.xs_stride);
    const float* in = b.xs;
    std::int64_t in_stride = b.xs_stride;
    for (int l = 0; l < shape.linear_count(); ++l) {
      const bool head = l + 1 == shape.linear_count();
      const int n_in = shape.in_features(l), n_out = shape.out_features(l);
      float* out = head ? logits.data : b.act[l % 2];
      const std::int64_t out_stride = head ? logits.row_stride : b.act_stride;
      const slicing sl = slices(n_in, n_out);
      const W* weight = network.parameters + shape.weight_offset(l);
      const dim3 grid(static_cast<unsigned>((n_out + warps - 1) / warps), static_cast<unsigned>(sl.count),
                      static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
      constexpr int vec = cuda_detail::elements_per_load<W>;
      const bool vector_loads = reinterpret_cast<std::uintptr_t>(network.parameters) % 16 == 0 &&
                                shape.weight_offset(l) % vec == 0 && n_in % vec == 0;
      if (vector_loads)
        cuda_detail::mlp_gemv_partial_kernel<W, vec, rows_per_block, warps>
            <<<grid, warps * 32, 0, stream>>>(weight, n_in, n_out, sl.length, in, in_stride, rows, b.partial);
      else
        cuda_detail::mlp_gemv_partial_kernel<W, 1, rows_per_block, warps>
            <<<grid, warps * 32, 0, stream>>>(weight, n_in, n_out, sl.length, in, in_stride, rows, b.partial);
      cuda_detail::mlp_epilogue_kernel<W><<<grid_for(batch * n_out), 256, 0, stream>>>(
          b.partial, sl.count, rows, n_out, network.parameters + shape.bias_offset(l), !head,
          shape.residual(l) ? in : nullptr, in_stride, out, out_stride);
      in = out;
      in_stride = out_stride;
    }
    return cuda_detail::check(cudaGetLastError());
  }

 private:
  struct buffers {
    float* xs;
    std::int64_t xs_stride;
    float* act[2];
    std::int64_t act_stride;
    float* partial;
  };
  struct slicing {
    int count;
    int length;
  };

  /// The input of a layer split into `count` slices of `length` (a multiple of 256 = 32 lanes × 8
  /// elements) so that about target_warps warps share the layer, but no slice is shorter than min_slice.
  static constexpr slicing slices(int n_in, int n_out) {
    constexpr int granule = 256;
    const int by_warps = (cuda_detail::sm90_gemv.target_warps + n_out - 1) / n_out;
    const int by_length = std::max(1, n_in / cuda_detail::sm90_gemv.min_slice);
    const int wanted = std::max(1, std::min(by_warps, by_length));
    const int length = ((n_in + wanted - 1) / wanted + granule - 1) / granule * granule;
    return {(n_in + length - 1) / length, length};
  }

  static unsigned grid_for(std::int64_t work) {
    return static_cast<unsigned>(std::clamp<std::int64_t>((work + 255) / 256, 1, 4096));
  }

  static std::size_t carve(const mlp_device_shape& shape, std::int64_t batch, std::byte* base, buffers& b) {
    const auto rows = static_cast<std::size_t>(batch);
    b.xs_stride = (shape.input + 7) / 8 * 8;
    b.act_stride = (shape.max_hidden() + 7) / 8 * 8;
    std::size_t partial = 0;
    for (int l = 0; l < shape.linear_count(); ++l)
      partial = std::max(partial, static_cast<std::size_t>(slices(shape.in_features(l), shape.out_features(l)).count) *
                                      rows * static_cast<std::size_t>(shape.out_features(l)));
    cuda_detail::workspace_carver c(base);
    b.xs = c.take<float>(rows * static_cast<std::size_t>(b.xs_stride));
    b.act[0] = c.take<float>(rows * static_cast<std::size_t>(b.act_stride));
    b.act[1] = c.take<float>(rows * static_cast<std::size_t>(b.act_stride));
    b.partial = c.take<float>(partial);
    return c.size();
  }
};

}  // namespace blockpilot
