// SmolLM2-135M (GGUF) on the CPU: prefill and decode tokens/s, and the time of one batched score of b
// tokens relative to b = 1 (the verifier cost of a speculative block). Needs scripts/fetch-smollm2.sh.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "blockpilot/models/llama.hpp"

namespace {

namespace bp = blockpilot;

std::filesystem::path smollm2_path() {
  if (const char* p = std::getenv("BLOCKPILOT_SMOLLM2_GGUF")) return p;
  const char* cache = std::getenv("BLOCKPILOT_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base =
      cache ? std::filesystem::path(cache) : std::filesystem::path(home ? home : "") / ".cache" / "blockpilot";
  return base / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

/// The model, loaded once; null when the file is absent.
const bp::llama_model* model() {
  static const std::unique_ptr<bp::llama_model> m = [] {
    if (!std::filesystem::is_regular_file(smollm2_path())) return std::unique_ptr<bp::llama_model>();
    return std::make_unique<bp::llama_model>(bp::llama_model::load(smollm2_path()));
  }();
  return m.get();
}

/// Deterministic token ids below the vocabulary size.
std::vector<bp::token_id> tokens(int n, int salt) {
  std::vector<bp::token_id> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (1000 + 7919 * (i + 31 * salt)) % 49152;
  return t;
}

bp::llama_verifier_options options(int threads, int max_block) {
  bp::llama_verifier_options o;
  o.threads = threads;
  o.max_block = max_block;
  o.max_positions = 1024;
  return o;
}

bool ready(benchmark::State& state) {
  if (model()) return true;
  state.SkipWithError("SmolLM2 GGUF absent: run scripts/fetch-smollm2.sh");
  return false;
}

/// Prefill of a 128-token prompt (two chunks of 64 rows). Arg: threads.
void llama_prefill(benchmark::State& state) {
  if (!ready(state)) return;
  bp::llama_verifier v(*model(), options(static_cast<int>(state.range(0)), 64));
  const auto prompt = tokens(128, 1);
  bp::matrix_view<const float> logits;
  for (auto _ : state) {
    if (v.prefill(prompt, logits) != bp::status::success) state.SkipWithError("prefill failed");
    benchmark::DoNotOptimize(logits.data);
  }
  state.counters["tokens_per_s"] = benchmark::Counter(128.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["load_s"] = model()->load_seconds();
}
BENCHMARK(llama_prefill)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Autoregressive decoding: 64 steps of score(1) + commit(1) after a 64-token prompt. Arg: threads.
void llama_decode(benchmark::State& state) {
  if (!ready(state)) return;
  bp::llama_verifier v(*model(), options(static_cast<int>(state.range(0)), 64));
  const auto prompt = tokens(64, 2);
  bp::matrix_view<const float> logits;
  for (auto _ : state) {
    state.PauseTiming();
    if (v.prefill(prompt, logits) != bp::status::success) state.SkipWithError("prefill failed");
    state.ResumeTiming();
    bp::token_id next = 17;
    for (int step = 0; step < 64; ++step) {
      if (v.score(std::span(&next, 1), logits) != bp::status::success || v.commit(1) != bp::status::success)
        state.SkipWithError("score failed");
      next = static_cast<bp::token_id>(std::max_element(logits.data, logits.data + logits.cols) - logits.data);
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(64.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(llama_decode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One score of b tokens after a 64-token prompt, then commit(0); vs_b1 = time / time at b = 1
/// (measured by the b = 1 run, registered first). Args: b, threads.
void llama_score(benchmark::State& state) {
  if (!ready(state)) return;
  static double b1_seconds[3] = {0, 0, 0};
  const int b = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  bp::llama_verifier v(*model(), options(threads, 32));
  bp::matrix_view<const float> logits;
  if (v.prefill(tokens(64, 3), logits) != bp::status::success) state.SkipWithError("prefill failed");
  const auto block = tokens(b, 4);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (v.score(block, logits) != bp::status::success || v.commit(0) != bp::status::success)
      state.SkipWithError("score failed");
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double mean = seconds / static_cast<double>(state.iterations());
  if (b == 1) b1_seconds[threads] = mean;
  if (b1_seconds[threads] > 0) state.counters["vs_b1"] = mean / b1_seconds[threads];
  state.counters["tokens_per_s"] = benchmark::Counter(b, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(llama_score)
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {1, 2}})
    ->ArgNames({"b", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
