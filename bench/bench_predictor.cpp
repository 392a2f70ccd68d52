// Decision time of the BlockPilot predictor (forward + argmax per row) on the CPU: the reference shape
// 151,936 → 2048 → 2048 → 5 and a compact 272 → 256 → 256 → 5, fp32 and bf16, batch 1 and 64.
// bytes_per_second counts the weight bytes one forward reads, so it shows the achieved bandwidth.
#include <benchmark/benchmark.h>

#include "bench_support.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "blockpilot/nn/mlp.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"

namespace nn = blockpilot::nn;

namespace {

const nn::mlp_shape reference_shape{151'936, {2048, 2048}, 5};
const nn::mlp_shape compact_shape{272, {256, 256}, 5};

template <class T>
const nn::mlp<T>& model(bool reference) {
  static const auto make = [](const nn::mlp_shape& s) {
    nn::mlp<float> m(s);
    blockpilot::nn::initialize(m, 1);
    return nn::mlp<T>(m);
  };
  if (reference) {
    static const nn::mlp<T> r = make(reference_shape);
    return r;
  }
  static const nn::mlp<T> c = make(compact_shape);
  return c;
}

template <class T>
void bm_decide(benchmark::State& state) {
  const bool reference = state.range(0) != 0;
  const std::int64_t batch = state.range(1);
  const auto& m = model<T>(reference);
  const std::int64_t d = m.shape().input, c = m.shape().classes;
  std::vector<float> x(static_cast<std::size_t>(batch * d)), logits(static_cast<std::size_t>(batch * c));
  std::vector<float> ws(static_cast<std::size_t>(m.workspace_size(batch)));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  for (auto& v : x) v = logit(rng);
  std::vector<std::int64_t> choice(static_cast<std::size_t>(batch));
  for (auto _ : state) {
    if (blockpilot::bench::decide(m, blockpilot::matrix_view<const float>(x.data(), batch, d), logits, ws, choice) !=
        blockpilot::status::success)
      state.SkipWithError("forward failed");
    benchmark::DoNotOptimize(choice.data());
    benchmark::ClobberMemory();
  }
  const auto forwards = (batch + m.row_tile - 1) / m.row_tile;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * forwards * m.parameter_bytes());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * batch);
  state.SetLabel(std::string(reference ? "151936-2048-2048-5" : "272-256-256-5") + " weights " +
                 std::to_string(m.parameter_bytes() / 1000) + " kB");
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"reference", "batch"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (int ref : {0, 1})
    for (int batch : {1, 64}) b->Args({ref, batch});
}

}  // namespace

BENCHMARK(bm_decide<Eigen::bfloat16>)->Apply(args);
BENCHMARK(bm_decide<float>)->Apply(args);

BENCHMARK_MAIN();
