// The cost of the sampling controls on one target row (V = 151,936, Qwen3's vocabulary): the fixed-point
// weights that every sampling rule computes anyway (the baseline), then the weights with min-p, top-k,
// top-p and all three (cpu_detail::apply_sampling_controls: one cut found by radix selection), and the
// same cuts found by sorting a copy of the weights (the plain way, for reference). Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N to interleave the variants.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench_support.hpp"
#include "blockpilot/cpu/row_ops.hpp"

using namespace blockpilot;

namespace {

constexpr std::int64_t vocab = 151936;

const std::vector<float>& row() {
  static const std::vector<float> r = bench::normal_logits(static_cast<std::size_t>(vocab), 2.0f, 5);
  return r;
}

const sampling_controls kinds[] = {{}, {0, 1.0f, 0.05f}, {50, 1.0f, 0.0f}, {0, 0.9f, 0.0f}, {50, 0.9f, 0.05f}};

void set_label(benchmark::State& state) {
  const sampling_controls& c = kinds[state.range(0)];
  state.SetLabel("top_k " + std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p).substr(0, 4) + " min_p " +
                 std::to_string(c.min_p).substr(0, 4));
}

/// The weights after the controls, as the rules compute them.
void controlled_weights(benchmark::State& state) {
  const sampling_controls& c = kinds[state.range(0)];
  std::vector<std::uint64_t> w(static_cast<std::size_t>(vocab));
  float m = 0.0f;
  token_id argmax;
  (void)cpu_detail::checked_max(row(), m, argmax);
  for (auto _ : state) benchmark::DoNotOptimize(cpu_detail::controlled_weights(row(), m, 1.0f, c, w));
  set_label(state);
}

/// The same cut from a sorted copy of the weights.
void sorted_reference(benchmark::State& state) {
  const sampling_controls& c = kinds[state.range(0)];
  std::vector<std::uint64_t> w(static_cast<std::size_t>(vocab)), sorted(w.size());
  float m = 0.0f;
  token_id argmax;
  (void)cpu_detail::checked_max(row(), m, argmax);
  for (auto _ : state) {
    std::uint64_t total = cpu_detail::fill_weights(row(), m, 1.0f, w);
    std::copy(w.begin(), w.end(), sorted.begin());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    std::uint64_t cut = c.min_p > 0.0f ? detail::min_p_threshold(c.min_p) : 0;
    if (c.top_k > 0) cut = std::max<std::uint64_t>(cut, sorted[static_cast<std::size_t>(c.top_k - 1)]);
    if (c.top_p < 1.0f) {
      total = 0;
      for (const auto v : sorted) total += detail::cut_weight(v, cut);
      const std::uint64_t target = detail::nucleus_target(c.top_p, total);
      std::uint64_t mass = 0;
      for (const auto v : sorted) {
        mass += detail::cut_weight(v, cut);
        if (mass >= target) {
          cut = std::max(cut, v);
          break;
        }
      }
    }
    total = 0;
    for (auto& v : w) total += v = detail::cut_weight(v, cut);
    benchmark::DoNotOptimize(total);
  }
  set_label(state);
}

}  // namespace

BENCHMARK(controlled_weights)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK(sorted_reference)->DenseRange(1, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
