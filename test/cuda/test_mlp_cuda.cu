// The CUDA MLP forward against nn::mlp::forward with the same parameters and inputs: fp32 and bf16
// weights, residual and plain hidden layers, no hidden layer, odd widths (scalar loads) and aligned ones
// (16-byte loads), batches around the 4-row tile, the reference shape 151,936 → 2048 → 2048 → 5 in bf16,
// argument and workspace errors, and CUDA-graph replay.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "blockpilot/cuda/mlp.cuh"
#include "cpu_reference.hpp"
#include "device_test.cuh"

namespace bp = blockpilot;
namespace cpu = blockpilot::testing::cpu;
using bp::testing::checker;
using bp::testing::device_buffer;

namespace {

bp::mlp_device_shape device_shape(int input, const std::vector<int>& hidden, int classes) {
  bp::mlp_device_shape s;
  s.input = input;
  s.hidden_count = static_cast<int>(hidden.size());
  for (std::size_t i = 0; i < hidden.size(); ++i) s.hidden[i] = hidden[i];
  s.classes = classes;
  return s;
}

std::vector<float> normal_rows(std::int64_t count, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = d(gen);
  return v;
}

/// A network on the device: parameters as the CPU stores them, and its standardisation.
struct device_network {
  device_buffer<std::byte> parameters;
  device_buffer<float> mean, stddev;
  explicit device_network(const cpu::mlp_reference& net)
      : parameters(net.parameter_bytes()), mean(net.feature_mean()), stddev(net.feature_std()) {
    BLOCKPILOT_CUDA_OK(cudaMemcpy(parameters.data(), net.parameters(), net.parameter_bytes(), cudaMemcpyHostToDevice));
    BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
  }
  template <class W>
  bp::mlp_device_view<W> view(const bp::mlp_device_shape& shape) const {
    return {reinterpret_cast<const W*>(parameters.data()), mean.data(), stddev.data(), shape};
  }
};

template <class W>
void run_case(checker& c, int input, const std::vector<int>& hidden, int classes, std::int64_t batch, std::int64_t x_pad = 0) {
  if (bp::testing::quick_mode() && input > 5000) return;
  const bool bf16 = std::is_same_v<W, __nv_bfloat16>;
  std::string what = std::string(bf16 ? "bf16" : "fp32") + " " + std::to_string(input);
  for (const int h : hidden) what += "-" + std::to_string(h);
  what += "-" + std::to_string(classes) + " batch " + std::to_string(batch);
  const cpu::mlp_reference net(input, hidden, classes, 99 + static_cast<std::uint64_t>(input), bf16);
  const device_network dev(net);
  const bp::mlp_device_shape shape = device_shape(input, hidden, classes);
  c.expect(shape.parameter_count() * static_cast<std::int64_t>(sizeof(W)) == static_cast<std::int64_t>(net.parameter_bytes()),
           "%s: parameter count", what.c_str());

  const std::int64_t x_stride = input + x_pad;
  const std::vector<float> x = normal_rows(batch * x_stride, static_cast<std::uint32_t>(batch + input));
  std::vector<float> x_packed;
  for (std::int64_t r = 0; r < batch; ++r) x_packed.insert(x_packed.end(), x.begin() + r * x_stride, x.begin() + r * x_stride + input);
  std::vector<float> want(static_cast<std::size_t>(batch * classes));
  c.expect(net.forward(x_packed.data(), batch, want.data()) == bp::status::success, "%s: CPU forward", what.c_str());

  device_buffer<float> d_x(x);
  device_buffer<float> d_logits(static_cast<std::size_t>(batch * classes));
  d_logits.fill_bytes(0x55);
  using op = bp::mlp_forward_op<bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(shape, batch));
  const bp::status s = op::run(bp::cuda_backend{}, dev.view<W>(shape), bp::matrix_view<const float>(d_x.data(), batch, input, x_stride),
                               bp::matrix_view<float>(d_logits.data(), batch, classes), workspace.bytes());
  c.expect(s == bp::status::success, "%s: run: %s", what.c_str(), std::string(bp::to_string(s)).c_str());
  BLOCKPILOT_SYNC_OK();
  const std::vector<float> got = d_logits.download();
  double err = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += want[i] * static_cast<double>(want[i]);
  }
  const double relative = std::sqrt(err / std::max(norm, 1e-30));
  c.expect(relative <= 1e-4, "%s: |gpu - cpu| / |cpu| = %.3g", what.c_str(), relative);
  for (std::int64_t r = 0; r < batch; ++r) {
    const std::span<const float> row(want.data() + r * classes, static_cast<std::size_t>(classes));
    std::vector<float> sorted(row.begin(), row.end());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (classes > 1 && sorted[0] - sorted[1] < 1e-3f * (1.0f + std::abs(sorted[0]))) continue;  // nearly tied
    const std::span<const float> g(got.data() + r * classes, static_cast<std::size_t>(classes));
    c.expect(cpu::argmax(g) == cpu::argmax(row), "%s: row %lld class", what.c_str(), static_cast<long long>(r));
  }
  std::printf("mlp_cuda: %s: relative error %.3g\n", what.c_str(), relative);
}

void argument_checks(checker& c) {
  using op = bp::mlp_forward_op<bp::cuda_backend>;
  const bp::cuda_backend be{};
  const cpu::mlp_reference net(40, {64, 64}, 5, 7, false);
  const device_network dev(net);
  const bp::mlp_device_shape shape = device_shape(40, {64, 64}, 5);
  device_buffer<float> x(3 * 40), logits(3 * 5);
  logits.fill_bytes(0x55);
  const std::size_t need = op::workspace_size(shape, 3);
  device_buffer<std::byte> workspace(need + 256);
  const bp::matrix_view<const float> xv(x.data(), 3, 40);
  const bp::matrix_view<float> lv(logits.data(), 3, 5);
  const auto view = dev.view<float>(shape);
  c.expect(op::run(be, view, xv, lv, workspace.bytes().first(need - 1)) == bp::status::workspace_too_small, "workspace short");
  c.expect(op::run(be, view, xv, lv, {}) == bp::status::workspace_too_small, "no workspace");
  c.expect(op::run(be, view, xv, lv, workspace.bytes().subspan(4, need)) == bp::status::invalid_argument, "misaligned workspace");
  c.expect(op::run(be, view, bp::matrix_view<const float>(x.data(), 3, 39), lv, workspace.bytes()) == bp::status::invalid_argument, "x width");
  c.expect(op::run(be, view, xv, bp::matrix_view<float>(logits.data(), 2, 5), workspace.bytes()) == bp::status::invalid_argument, "rows");
  auto bad = view;
  bad.parameters = nullptr;
  c.expect(op::run(be, bad, xv, lv, workspace.bytes()) == bp::status::invalid_argument, "null parameters");
  bad = view;
  bad.shape.hidden_count = bp::mlp_max_hidden_layers + 1;
  c.expect(op::run(be, bad, xv, lv, workspace.bytes()) == bp::status::invalid_argument, "too many layers");
  c.expect(op::run(be, view, bp::matrix_view<const float>(x.data(), 0, 40), bp::matrix_view<float>(logits.data(), 0, 5), {}) ==
               bp::status::success, "empty batch");
  BLOCKPILOT_SYNC_OK();
  for (const float f : logits.download()) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (!c.expect(bits == 0x55555555u, "a rejected call wrote logits")) break;
  }
}

void graph_replay(checker& c) {
  using op = bp::mlp_forward_op<bp::cuda_backend>;
  const cpu::mlp_reference net(300, {128, 128}, 5, 11, true);
  const device_network dev(net);
  const bp::mlp_device_shape shape = device_shape(300, {128, 128}, 5);
  const int batch = 6;
  device_buffer<float> x(batch * 300), logits(batch * 5);
  device_buffer<std::byte> workspace(op::workspace_size(shape, batch));
  cudaStream_t stream;
  BLOCKPILOT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  BLOCKPILOT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const bp::status s = op::run(bp::cuda_backend{stream}, dev.view<__nv_bfloat16>(shape), bp::matrix_view<const float>(x.data(), batch, 300),
                               bp::matrix_view<float>(logits.data(), batch, 5), workspace.bytes());
  BLOCKPILOT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  c.expect(s == bp::status::success, "graph capture: %s", std::string(bp::to_string(s)).c_str());
  cudaGraphExec_t exec;
  BLOCKPILOT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    const std::vector<float> host = normal_rows(batch * 300, static_cast<std::uint32_t>(31 + replay));
    x.upload(host);
    BLOCKPILOT_CUDA_OK(cudaGraphLaunch(exec, stream));
    BLOCKPILOT_CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<float> want(batch * 5);
    (void)net.forward(host.data(), batch, want.data());
    const std::vector<float> got = logits.download();
    for (std::size_t i = 0; i < want.size(); ++i)
      c.expect(std::abs(got[i] - want[i]) <= 1e-3f * (1.0f + std::abs(want[i])), "graph replay %d logit %zu: got %g, want %g",
               replay, i, got[i], want[i]);
  }
  BLOCKPILOT_CUDA_OK(cudaGraphExecDestroy(exec));
  BLOCKPILOT_CUDA_OK(cudaGraphDestroy(graph));
  BLOCKPILOT_CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace

int main() {
  bp::testing::require_device_or_skip("mlp_cuda");
  checker c("mlp_cuda");
  argument_checks(c);
  for (const std::int64_t batch : {1, 3, 4, 9}) {
    run_case<float>(c, 73, {256, 256}, 5, batch);          // layer 0 scalar (73 inputs), layers 1-2 vector
    run_case<__nv_bfloat16>(c, 73, {256, 256}, 5, batch);
  }
  run_case<float>(c, 1000, {}, 7, 2, 3);                  // no hidden layer; strided input
  run_case<__nv_bfloat16>(c, 37, {50, 60, 60, 20}, 3, 5);  // residual only where widths repeat
  run_case<float>(c, 4096, {512, 512}, 5, 2);
  run_case<__nv_bfloat16>(c, 4096, {512, 512}, 5, 5);
  run_case<__nv_bfloat16>(c, 20000, {1000}, 5, 1);         // input split into slices
  run_case<__nv_bfloat16>(c, 151936, {2048, 2048}, 5, 2);  // the reference shape
  graph_replay(c);
  return c.finish();
}
