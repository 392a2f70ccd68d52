// The library's own cost per decode step: the loop with a drafter and a verifier that cost
// nothing (fixed logits, constant drafts), so that it can be set against model time.
#include <benchmark/benchmark.h>

#include <vector>

#include "blockpilot/blockpilot.hpp"

using namespace blockpilot;

namespace {

constexpr std::int64_t vocab = 4;  // the acceptance rule's row passes are negligible at this size

/// Returns the same logits for every position: token `favourite` is the argmax.
class free_verifier {
 public:
  explicit free_verifier(token_id favourite) {
    for (int j = 0; j < 64; ++j)
      for (std::int64_t v = 0; v < vocab; ++v) rows_.push_back(v == favourite ? 1.0f : 0.0f);
  }
  std::int64_t vocab_size() const { return vocab; }
  status prefill(std::span<const token_id>, matrix_view<const float>& logits) {
    logits = {rows_.data(), 1, vocab};
    return status::success;
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    logits = {rows_.data(), static_cast<std::int64_t>(block.size()), vocab};
    return status::success;
  }
  status commit(int) { return status::success; }

 private:
  std::vector<float> rows_;
};

/// Proposes token `t` everywhere.
struct free_drafter {
  token_id t = 0;
  std::int64_t vocab_size() const { return vocab; }
  int max_draft_rows() const { return 63; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request& r, std::span<token_id> out) {
    std::fill(out.begin(), out.begin() + (r.block_size - 1), t);
    return status::success;
  }
  status commit(int) { return status::success; }
};

/// Args: block size, whether drafts are accepted (1) or all rejected (0).
void decode_loop_overhead(benchmark::State& state) {
  const int b = static_cast<int>(state.range(0));
  free_drafter d{state.range(1) != 0 ? 0 : 1};
  free_verifier v(0);
  speculative_decoder<free_drafter, free_verifier, runtime_block_size> dec(d, v, runtime_block_size{b});
  const std::vector<token_id> prompt = {1, 2, 3};
  generation_config c;
  c.max_new_tokens = 4096;
  generation_result r;
  std::int64_t steps = 0;
  double bookkeeping = 0, total = 0;
  for (auto _ : state) {
    if (dec.generate(prompt, c, r) != status::success) state.SkipWithError("decode failed");
    steps += r.stats.steps;
    bookkeeping += r.stats.seconds.bookkeeping();
    total += r.stats.seconds.total;
    benchmark::DoNotOptimize(r.tokens.data());
  }
  state.counters["steps"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["ns_per_step"] = static_cast<double>(total) * 1e9 / static_cast<double>(steps);
  state.counters["bookkeeping_ns_per_step"] = bookkeeping * 1e9 / static_cast<double>(steps);
  state.counters["tau"] = r.stats.tau();
}

}  // namespace

BENCHMARK(decode_loop_overhead)->ArgsProduct({{1, 2, 16, 32}, {1, 0}})->ArgNames({"b", "accept"})->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
