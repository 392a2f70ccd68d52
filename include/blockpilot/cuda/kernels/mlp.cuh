// MLP kernels: the batched GEMV behind the reference-shape predictor (bandwidth-bound on the weights) and a
// one-block forward for compact predictors that the feature pass runs behind its merge.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/kernels/mlp.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cstdint>

#include "blockpilot/cuda/kernels/common.cuh"
#include "blockpilot/cuda/mlp_view.cuh"

namespace blockpilot::cuda_detail {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// xs[r][i] = (x[r][i] − mean[i]) · (1 / std[i]), the host's standardisation to the bit (the reciprocal
/// is an IEEE division, then one subtraction and one multiplication). Grid-stride over rows × input.
/// (A template so that every translation unit that includes this header may define it.)
template <class X>
__global__ void mlp_standardize_kernel(const X* __restrict__ x, std::int64_t x_stride, int rows, int input,
                                       const float* __restrict__ mean, const float* __restrict__ stddev,
                                       float* __restrict__ xs, std::int64_t xs_stride) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * input;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / input, i = t % input;
    const float inv = __frcp_rn(stddev[i]);  // the host's 1 / std, also under --use_fast_math
    xs[r * xs_stride + i] = (x[r * x_stride + i] - mean[i]) * inv;
  }
}

/// Partial dot products of one linear layer: partial[s][r][o] = sum over k in slice s of W[o][k] · x[r][k].
/// Thread mapping: warp w of block (bx, s, bz) owns output o = bx · Warps + w and batch rows
/// bz · Rows … bz · Rows + Rows − 1; its lanes stride over the slice [s · slice, (s + 1) · slice) of the
/// input, each lane loading `Vec` consecutive weights with one 16-byte load (Vec = 1: one element) and
/// using them for every row of the tile, so each weight is read once per row tile. Lane sums are
/// reduced with shuffles; slices are added in order by mlp_epilogue_kernel (deterministic).
/// Preconditions for Vec > 1: weight and every row start 16-byte aligned, slice a multiple of 32 · Vec,
/// x rows 16-byte aligned and n_in a multiple of Vec.
template <class W, int Vec, int Rows, int Warps>
__global__ void __launch_bounds__(Warps * 32)
    mlp_gemv_partial_kernel(const W* __restrict__ weight, int n_in, int n_out, int slice,
                            const float* __restrict__ x, std::int64_t x_stride, int rows,
                            float* __restrict__ partial) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int o = blockIdx.x * Warps + warp;
  if (o >= n_out) return;
  const int s = blockIdx.y;
  const int r0 = blockIdx.z * Rows;
  const int nr = rows - r0 < Rows ? rows - r0 : Rows;
  const int k_begin = s * slice;
  const int k_end = n_in - k_begin < slice ? n_in : k_begin + slice;
  const W* w = weight + static_cast<std::int64_t>(o) * n_in;
  const float* xr = x + r0 * x_stride;

  float acc[Rows];
#pragma unroll
  for (int r = 0; r < Rows; ++r) acc[r] = 0.0f;

  if constexpr (Vec > 1) {
    static_assert(Vec == elements_per_load<W>, "one 16-byte load of weights");
#pragma unroll 4
    for (int k = k_begin + lane * Vec; k < k_end; k += 32 * Vec) {
      float wv[Vec];
      unpack<W>(__ldg(reinterpret_cast<const uint4*>(w + k)), wv);
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        if (r < nr) {
#pragma unroll
          for (int q = 0; q < Vec / 4; ++q) {
            const float4 xv = *reinterpret_cast<const float4*>(xr + r * x_stride + k + 4 * q);
            acc[r] += wv[4 * q] * xv.x + wv[4 * q + 1] * xv.y + wv[4 * q + 2] * xv.z + wv[4 * q + 3] * xv.w;
          }
        }
      }
    }
  } else {
#pragma unroll 4
    for (int k = k_begin + lane; k < k_end; k += 32) {
      const float wk = to_float(w[k]);
#pragma unroll
      for (int r = 0; r < Rows; ++r)
        if (r < nr) acc[r] += wk * xr[r * x_stride + k];
    }
  }
#pragma unroll
  for (int r = 0; r < Rows; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && r < nr) partial[(static_cast<std::int64_t>(s) * rows + r0 + r) * n_out + o] = v;
  }
}

/// y[r][o] = act(sum_s partial[s][r][o] + bias[o]) with act = ReLU plus the residual input x[r][o] for a
/// residual hidden layer, ReLU for another hidden layer, nothing for the head (nn::mlp's order of
/// operations). Grid-stride over rows × n_out.
template <class W>
__global__ void mlp_epilogue_kernel(const float* __restrict__ partial, int slices, int rows, int n_out,
                                    const W* __restrict__ bias, bool hidden, const float* __restrict__ residual,
                                    std::int64_t residual_stride, float* __restrict__ y, std::int64_t y_stride) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * n_out;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / n_out, o = t % n_out;
    float v = 0.0f;
    for (int s = 0; s < slices; ++s) v += partial[(s * static_cast<std::int64_t>(rows) + r) * n_out + o];
    v += to_float(bias[o]);
    if (hidden) {
      v = v > 0.0f ? v : 0.0f;
      if (residual != nullptr) v += residual[r * residual_stride + o];
    }
    y[r * y_stride + o] = v;
  }
}

/// The whole network for one row inside one block (compact predictors): `x` `[input]` holds the features
/// in shared memory and is standardised in place; activations ping-pong between act0 and act1
/// (`[max_hidden]` each); the class logits land in `logits` `[classes]`. Warp w computes 4 outputs at a
/// time (o = 4w … 4w + 3, then 4 · warps further), its lanes striding over the inputs; weights are read
/// straight from global memory (a compact network is small and stays in L2). All threads call it; it
/// ends with a barrier.
template <int Threads, class W>
__device__ void block_mlp_forward(const mlp_device_view<W>& net, float* x, float* act0, float* act1, float* logits) {
  constexpr int warps = Threads / 32;
  const mlp_device_shape& shape = net.shape;
  for (int i = threadIdx.x; i < shape.input; i += Threads) {
    const float inv = __frcp_rn(net.feature_std[i]);
    x[i] = (x[i] - net.feature_mean[i]) * inv;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* in = x;
  for (int l = 0; l < shape.linear_count(); ++l) {
    const bool head = l + 1 == shape.linear_count();
    const int n_in = shape.in_features(l), n_out = shape.out_features(l);
    const bool residual = shape.residual(l);
    const W* w = net.parameters + shape.weight_offset(l);
    const W* b = net.parameters + shape.bias_offset(l);
    float* out = head ? logits : (l % 2 == 0 ? act0 : act1);
    for (int o0 = 4 * warp; o0 < n_out; o0 += 4 * warps) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
      for (int k = lane; k < n_in; k += 32) {
        const float xk = in[k];
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (o0 + u < n_out) acc[u] += to_float(w[static_cast<std::int64_t>(o0 + u) * n_in + k]) * xk;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] = warp_sum(acc[u]);
      if (lane == 0) {
        for (int u = 0; u < 4 && o0 + u < n_out; ++u) {
          float v = acc[u] + to_float(b[o0 + u]);
          if (!head) {
            v = v > 0.0f ? v : 0.0f;
            if (residual) v += in[o0 + u];
          }
          out[o0 + u] = v;
        }
      }
    }
    __syncthreads();
    in = out;
  }
}

/// nn::argmax: the first index of the largest non-NaN value; 0 when all are NaN.
__device__ __forceinline__ int argmax_of(const float* v, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if (v[i] == v[i] && (best < 0 || v[i] > v[best])) best = i;
  return best < 0 ? 0 : best;
}

}  // namespace blockpilot::cuda_detail
