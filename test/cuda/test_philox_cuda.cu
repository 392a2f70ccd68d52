// Host and device draw the same Philox numbers and compute the same fixed-point softmax weights,
// bit for bit: the basis of CPU-vs-CUDA comparisons on one random stream.
#include <cstdio>
#include <vector>

#include "blockpilot/cuda.cuh"
#include "blockpilot/detail/fixed_point_softmax.hpp"
#include "blockpilot/random/philox.hpp"
#include "device_test.cuh"

namespace {

__global__ void draw(blockpilot::philox_stream s, int n, unsigned long long* bits, double* uniforms) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bits[i] = s.bits64(static_cast<std::uint32_t>(i), blockpilot::random_domain::target_sample);
  uniforms[i] = s.uniform(static_cast<std::uint32_t>(i), blockpilot::random_domain::accept_test);
}

__global__ void weights(const float* logits, int n, float max_logit, float temperature, unsigned long long* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = blockpilot::detail::fixed_point_weight(logits[i], max_logit, temperature);
}

}  // namespace

int main() {
  blockpilot::testing::require_device_or_skip("philox_cuda");
  constexpr int n = 1 << 16;
  const blockpilot::philox_stream stream{0x1234'5678'9abc'def0ULL, 42};
  unsigned long long* d_bits;
  double* d_uniforms;
  float* d_logits;
  unsigned long long* d_weights;
  cudaMalloc(&d_bits, n * sizeof(unsigned long long));
  cudaMalloc(&d_uniforms, n * sizeof(double));
  cudaMalloc(&d_logits, n * sizeof(float));
  cudaMalloc(&d_weights, n * sizeof(unsigned long long));
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[i] = static_cast<float>(stream.uniform(i, blockpilot::random_domain::user) * 60.0 - 50.0);
  cudaMemcpy(d_logits, logits.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  draw<<<n / 256, 256>>>(stream, n, d_bits, d_uniforms);
  weights<<<n / 256, 256>>>(d_logits, n, 10.0f, 0.7f, d_weights);
  std::vector<unsigned long long> bits(n), w(n);
  std::vector<double> uniforms(n);
  cudaMemcpy(bits.data(), d_bits, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
  cudaMemcpy(uniforms.data(), d_uniforms, n * sizeof(double), cudaMemcpyDeviceToHost);
  cudaMemcpy(w.data(), d_weights, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
  if (blockpilot::cuda_detail::check(cudaGetLastError()) != blockpilot::status::success) {
    std::fprintf(stderr, "philox_cuda: kernel failed\n");
    return 1;
  }
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    mismatches += bits[i] != stream.bits64(i, blockpilot::random_domain::target_sample);
    mismatches += uniforms[i] != stream.uniform(i, blockpilot::random_domain::accept_test);
    mismatches += w[i] != blockpilot::detail::fixed_point_weight(logits[i], 10.0f, 0.7f);
  }
  std::printf("philox_cuda: %d mismatches in %d draws and weights\n", mismatches, 3 * n);
  return mismatches == 0 ? 0 : 1;
}
