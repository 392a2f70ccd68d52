// Whole BlockPilot decision time at V = 151,936, batch 1 and 64, in one run: the compact policy (one
// feature pass + a 73 → 256 → 256 → 5 MLP), the reference 151,936 → 2048 → 2048 → 5 MLP (bf16, fp32),
// and one bandwidth-bound read of the same rows. Compare the us_per_decision counters. The per-step
// decisions too, for 1, 8 and 64 requests of 15 drafts: the speed cut-off request by request, and the
// plan of the whole batch's drafts (us_per_decision: per request and step).
#include <benchmark/benchmark.h>

#include "bench_support.hpp"

#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <random>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "blockpilot/features/compact.hpp"
#include "blockpilot/nn/mlp.hpp"
#include "blockpilot/policy/batch_plan.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"

namespace nn = blockpilot::nn;

namespace {

constexpr std::int64_t vocab = 151936;
constexpr std::int64_t max_batch = 64;

/// 64 peaked rows, fixed seed: N(0, 2) logits, then 1..8 tokens raised by 6..20 (a few plausible
/// continuations well above the tail, different per row).
const std::vector<float>& rows() {
  static const std::vector<float> data = [] {
    std::mt19937 gen(20240601);
    std::normal_distribution<float> tail(0.0f, 2.0f);
    std::uniform_int_distribution<std::int64_t> token(0, vocab - 1);
    std::uniform_int_distribution<int> heads(1, 8);
    std::uniform_real_distribution<float> boost(6.0f, 20.0f);
    std::vector<float> r(static_cast<std::size_t>(max_batch * vocab));
    for (float& x : r) x = tail(gen);
    for (std::int64_t b = 0; b < max_batch; ++b)
      for (int h = heads(gen); h > 0; --h) r[static_cast<std::size_t>(b * vocab + token(gen))] += boost(gen);
    return r;
  }();
  return data;
}

/// Generated before main, so that no benchmark times the generation.
const std::vector<float>& rows_ready = rows();

std::span<const float> row(std::int64_t i) {
  return std::span(rows()).subspan(static_cast<std::size_t>(i * vocab), static_cast<std::size_t>(vocab));
}

using clock_type = std::chrono::steady_clock;

/// us_per_decision = wall time of the timed loop (started at `start`) / (iterations × batch), a plain
/// number (an inverted rate counter would print seconds); `bytes`: what one iteration reads (0: none counted).
void report(benchmark::State& state, clock_type::time_point start, std::int64_t batch, std::int64_t bytes) {
  const std::chrono::duration<double, std::micro> elapsed = clock_type::now() - start;
  if (bytes > 0) state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  state.counters["us_per_decision"] = elapsed.count() / static_cast<double>(state.iterations() * batch);
}

void compact_policy_decision(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  const blockpilot::compact_features extractor{64};
  nn::mlp<float> network(nn::mlp_shape{64 + blockpilot::compact_statistic_count, {256, 256}, 5});
  blockpilot::nn::initialize(network, 1);
  nn::predictor_metadata metadata;
  metadata.training_block_size = 16;
  metadata.window_k = 2;
  metadata.vocab_size = vocab;
  metadata.feature_extractor = "compact";
  metadata.feature_parameters = extractor.metadata();
  blockpilot::blockpilot_policy<blockpilot::compact_features> policy(
      extractor, nn::predictor<float>{metadata, std::move(network)});
  if (policy.choose({{}, row(0), 0.0f}).fallback) state.SkipWithError("the policy fell back");  // sizes the buffers
  const auto start = clock_type::now();
  for (auto _ : state) {
    for (std::int64_t b = 0; b < batch; ++b) benchmark::DoNotOptimize(policy.choose({{}, row(b), 0.0f}));
  }
  report(state, start, batch, batch * vocab * static_cast<std::int64_t>(sizeof(float)));
}

/// The reference predictor, initialised once (fp32 master; bf16 rounded from it).
const nn::mlp<float>& reference_fp32() {
  static const nn::mlp<float> m = [] {
    nn::mlp<float> r(nn::mlp_shape{vocab, {2048, 2048}, 5});
    blockpilot::nn::initialize(r, 1);
    return r;
  }();
  return m;
}
template <class T>
const nn::mlp<T>& reference_model() {
  if constexpr (std::same_as<T, float>) return reference_fp32();
  else {
    static const nn::mlp<T> m(reference_fp32());
    return m;
  }
}

template <class T>
void reference_mlp_decision(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  const auto& m = reference_model<T>();
  const std::int64_t c = m.shape().classes;
  std::vector<float> logits(static_cast<std::size_t>(batch * c));
  std::vector<float> ws(static_cast<std::size_t>(m.workspace_size(batch)));
  std::vector<std::int64_t> choice(static_cast<std::size_t>(batch));
  const blockpilot::matrix_view<const float> x(rows().data(), batch, vocab);
  const auto start = clock_type::now();
  for (auto _ : state) {
    if (blockpilot::bench::decide(m, x, logits, ws, choice) != blockpilot::status::success) state.SkipWithError("forward failed");
    benchmark::DoNotOptimize(choice.data());
    benchmark::ClobberMemory();
  }
  const auto forwards = (batch + m.row_tile - 1) / m.row_tile;
  report(state, start, batch,
         forwards * m.parameter_bytes() + batch * vocab * static_cast<std::int64_t>(sizeof(float)));
}

using blockpilot::bench::bandwidth_sum;

void read_row_once(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  const auto start = clock_type::now();
  for (auto _ : state) {
    for (std::int64_t b = 0; b < batch; ++b) benchmark::DoNotOptimize(bandwidth_sum(row(b)));
  }
  report(state, start, batch, batch * vocab * static_cast<std::int64_t>(sizeof(float)));
}

constexpr int drafts = 15;

/// Each request's drafts' grades, fixed seed; cut-offs sharing one set of earlier-request estimates.
struct step_batch {
  std::vector<std::vector<float>> confidence;
  std::vector<blockpilot::speed_cutoff> cutoffs;
  std::vector<double> row_cost;

  explicit step_batch(std::int64_t batch) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> grade(0.0f, 1.0f);
    std::vector<double> step_cost;
    for (int b = 1; b <= drafts + 1; ++b) step_cost.push_back(1.0 + 0.12 * (b - 1));
    const blockpilot::speed_cutoff first{blockpilot::step_cost_model(step_cost)};
    for (std::int64_t r = 0; r < batch; ++r) {
      confidence.emplace_back(drafts);
      for (float& c : confidence.back()) c = grade(gen);
      cutoffs.push_back(first.shared());
    }
    for (std::int64_t rows = 1; rows <= batch * (drafts + 1); ++rows) row_cost.push_back(1.0 + 0.05 * static_cast<double>(rows - 1));
  }
};

void speed_cutoff_per_request(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  step_batch s(batch);
  const auto start = clock_type::now();
  for (auto _ : state)
    for (std::int64_t r = 0; r < batch; ++r)
      benchmark::DoNotOptimize(s.cutoffs[static_cast<std::size_t>(r)].keep_drafts(s.confidence[static_cast<std::size_t>(r)]));
  report(state, start, batch, 0);
}

void batch_plan(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  step_batch s(batch);
  std::vector<std::vector<double>> gains(static_cast<std::size_t>(batch));
  std::vector<std::span<const double>> spans(static_cast<std::size_t>(batch));
  std::vector<int> kept(static_cast<std::size_t>(batch));
  std::vector<std::tuple<double, int, int>> scratch;
  const auto start = clock_type::now();
  for (auto _ : state) {
    for (std::size_t r = 0; r < gains.size(); ++r) {
      s.cutoffs[r].draft_gains(s.confidence[r], gains[r]);
      spans[r] = gains[r];
    }
    blockpilot::plan_batch_drafts(spans, s.row_cost, kept, scratch);
    for (std::size_t r = 0; r < gains.size(); ++r) benchmark::DoNotOptimize(s.cutoffs[r].keep(s.confidence[r], kept[r]));
  }
  report(state, start, batch, 0);
}

}  // namespace

BENCHMARK(speed_cutoff_per_request)->ArgName("batch")->Arg(1)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(batch_plan)->ArgName("batch")->Arg(1)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(read_row_once)->ArgName("batch")->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(compact_policy_decision)->ArgName("batch")->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
// The reference shape takes tens of ms (batch 1) to seconds (batch 64) per iteration: fixed iterations.
BENCHMARK(reference_mlp_decision<Eigen::bfloat16>)->Name("reference_mlp_decision<bf16>")->ArgName("batch")->Arg(1)
    ->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(reference_mlp_decision<Eigen::bfloat16>)->Name("reference_mlp_decision<bf16>")->ArgName("batch")->Arg(64)
    ->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(reference_mlp_decision<float>)->Name("reference_mlp_decision<fp32>")->ArgName("batch")->Arg(1)
    ->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(reference_mlp_decision<float>)->Name("reference_mlp_decision<fp32>")->ArgName("batch")->Arg(64)
    ->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
