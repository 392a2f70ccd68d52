// Feature-pass throughput on V = 151,936 random logits, against one plain read of the same rows; batch 1
// (the row stays in cache) and batch 64 (39 MB, streamed from memory). Compare bytes_per_second or ns/row.
// `compact_variant` runs the compact pass (k = 64) and the row maximum in each vector variant this CPU
// runs (0 generic, 1 avx2, 2 avx512): what the run-time choice of cpu/row_kernels.hpp gains.
#include <benchmark/benchmark.h>

#include "bench_support.hpp"

#include <array>
#include <cstdint>
#include <vector>

#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"

namespace {

constexpr std::size_t vocab = 151936;

/// 64 rows of N(0, 3) logits, fixed seed.
const std::vector<float>& rows() {
  static const std::vector<float> data = blockpilot::bench::normal_logits(64 * vocab, 3.0f, 20240601);
  return data;
}

/// Generated before main, so that no benchmark times the generation.
const std::vector<float>& rows_ready = rows();

std::span<const float> row(std::int64_t i) { return std::span(rows()).subspan(static_cast<std::size_t>(i) * vocab, vocab); }

void report(benchmark::State& state, std::int64_t batch) {
  state.SetBytesProcessed(state.iterations() * batch * static_cast<std::int64_t>(vocab * sizeof(float)));
  state.counters["s_per_row"] = benchmark::Counter(static_cast<double>(batch),
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

using blockpilot::bench::bandwidth_sum;

/// The plain `s += x` loop: without -ffast-math the compiler may not reorder float adds, so this runs at
/// one add latency per element.
float plain_sum(std::span<const float> r) {
  float s = 0.0f;
  for (const float x : r) s += x;
  return s;
}

template <float (*Sum)(std::span<const float>)>
void read_row(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  for (auto _ : state) {
    for (std::int64_t b = 0; b < batch; ++b) benchmark::DoNotOptimize(Sum(row(b)));
  }
  report(state, batch);
}

template <class Features>
void extract(benchmark::State& state, const Features& f) {
  const std::int64_t batch = state.range(0);
  std::vector<float> workspace(f.workspace_size(vocab));
  std::vector<float> out(static_cast<std::size_t>(f.feature_count(vocab)));
  for (auto _ : state) {
    for (std::int64_t b = 0; b < batch; ++b) {
      if (f.extract(row(b), workspace, out) != blockpilot::status::success) state.SkipWithError("extract failed");
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
  }
  report(state, batch);
}

void compact(benchmark::State& state) { extract(state, blockpilot::compact_features{static_cast<int>(state.range(1)), 1.0f}); }

namespace rk = blockpilot::cpu_detail::row_kernels;

/// Runs pass(row, variant) on `batch` rows per iteration (ranges: batch, variant); skipped where this CPU
/// does not run the variant.
template <class Pass>
void per_variant(benchmark::State& state, Pass pass) {
  const std::int64_t batch = state.range(0);
  const auto variant = static_cast<rk::vector_variant>(state.range(1));
  if (!rk::runs(variant)) {
    state.SkipWithError("this CPU does not run the variant");
    return;
  }
  for (auto _ : state) {
    for (std::int64_t b = 0; b < batch; ++b) {
      if (pass(row(b), variant) != blockpilot::status::success) state.SkipWithError("the pass failed");
      benchmark::ClobberMemory();
    }
  }
  report(state, batch);
}

void compact_variant(benchmark::State& state) {
  constexpr int k = 64;
  std::vector<float> workspace(rk::compact_workspace_size(k));
  std::vector<float> out(static_cast<std::size_t>(k + rk::compact_statistics));
  per_variant(state, [&](std::span<const float> r, rk::vector_variant v) { return rk::compact_pass(r, k, 1.0f, workspace, out, v); });
}

void row_max_variant(benchmark::State& state) {
  per_variant(state, [](std::span<const float> r, rk::vector_variant v) {
    float m = 0.0f;
    blockpilot::token_id a = 0;
    const blockpilot::status s = rk::checked_max(r, m, a, v);
    benchmark::DoNotOptimize(a);
    return s;
  });
}

void full_row_probabilities(benchmark::State& state) {
  extract(state, blockpilot::full_row_features{blockpilot::input_transform::probabilities, 1.0f});
}

}  // namespace

BENCHMARK(read_row<bandwidth_sum>)->Name("read_bandwidth_sum")->ArgName("batch")->Arg(1)->Arg(64);
BENCHMARK(read_row<plain_sum>)->Name("read_plain_sum")->ArgName("batch")->Arg(1)->Arg(64);
BENCHMARK(compact)->ArgNames({"batch", "k"})->ArgsProduct({{1, 64}, {64, 256, 1024}});
BENCHMARK(full_row_probabilities)->ArgName("batch")->Arg(1)->Arg(64);
BENCHMARK(compact_variant)->ArgNames({"batch", "variant"})->ArgsProduct({{1, 64}, {0, 1, 2}});
BENCHMARK(row_max_variant)->ArgNames({"batch", "variant"})->ArgsProduct({{1, 64}, {0, 1, 2}});

BENCHMARK_MAIN();
