// SmolLM2-135M (GGUF) on the CPU, weights in fp32 storage and in the file's quantised blocks: prefill and
// decode tokens/s, bytes of weights, the read bandwidth of this machine measured in the same run (so
// decode can be set against its bound: bandwidth / weight bytes per token), and the time of one batched
// score of b tokens relative to b = 1 (the verifier cost of a speculative block), to the time of reading
// the weights once, and to the roofline (the larger of that read and the step's multiply-adds at this
// core's peak rate, also measured in the run), per instruction-set variant of the weight-product kernels.
// A DFlash drafter's step (append a committed row, draft a block) is timed against a target step of one
// token in the same iterations, per weight storage and draft vocabulary of the drafter.
// Needs scripts/fetch-smollm2.sh; bench/compare_llama_cpp.py runs it next to llama.cpp.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "multiply_add_peak.hpp"
#include "blockpilot_workbench/models/dflash_drafter.hpp"
#include "blockpilot_workbench/models/llama.hpp"

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

/// The model in storage s (bp::llama_storage: 0 fp32, 1 quantised, 2 quantised with int8 activations),
/// loaded at first use; null when the file is absent.
const bp::llama_model* model(std::int64_t s) {
  static std::unique_ptr<bp::llama_model> m[3];
  if (!m[s] && std::filesystem::is_regular_file(smollm2_path()))
    m[s] = std::make_unique<bp::llama_model>(bp::llama_model::load(smollm2_path(), static_cast<bp::llama_storage>(s)));
  return m[s].get();
}

/// Read bandwidth (bytes/s) by thread count and buffer (0: 512 MB, beyond any cache; 1: 97 MB, the
/// quantised weights' size, which a large last-level cache may hold), measured by `memory_read`
/// (registered first).
double read_bandwidth[3][2] = {};

/// The bandwidth that bounds a step of `storage` (the buffer of its weights' size).
double bound_bandwidth(std::int64_t storage, int threads) { return read_bandwidth[threads][storage == 0 ? 0 : 1]; }

/// Multiply-adds per second (0: not measured) by thread count and activations (0: fp32, 1: int8), measured
/// by `multiply_add_peak` (registered first).
double peak_rate[3][2] = {};

/// The multiply-adds of the weight products of one token: every matrix element once.
double multiply_adds_per_token(const bp::llama_model& m) {
  const auto& c = m.config();
  const double per_layer = static_cast<double>(c.hidden) * ((c.heads + 2.0 * c.kv_heads) * c.head_dim + c.heads * c.head_dim + 3.0 * c.ffn);
  return c.layers * per_layer + static_cast<double>(c.vocab) * c.hidden;
}

/// f(p) for p = 0 .. threads - 1, p = 0 on the calling thread and the others on threads of their own.
template <class F>
void on_threads(int threads, F f) {
  std::vector<std::thread> helpers;
  for (int p = 1; p < threads; ++p) helpers.emplace_back(f, p);
  f(0);
  for (auto& h : helpers) h.join();
}

/// Deterministic token ids below the vocabulary size (bench/compare_llama_cpp.py uses the same).
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

bool ready(benchmark::State& state, std::int64_t storage) {
  if (model(storage)) return true;
  state.SkipWithError("SmolLM2 GGUF absent: run scripts/fetch-smollm2.sh");
  return false;
}

void weight_counters(benchmark::State& state, std::int64_t storage) {
  state.counters["weight_MB"] = static_cast<double>(model(storage)->weight_bytes()) / 1e6;
  state.counters["load_s"] = model(storage)->load_seconds();
}

/// One read of a buffer of MB megabytes, split over `threads` threads (each sums its half with 32 float
/// lanes), read again each iteration as a decode step reads every weight once: the bandwidth that bounds
/// a step over that many bytes of weights. Args: threads, MB (512: fp32 weights; 97: quantised).
void memory_read(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  static std::vector<float> all(std::size_t{128} << 20, 1.0f);
  const auto buffer = std::span(all).first(static_cast<std::size_t>(state.range(1)) << 18);
  const std::size_t part = buffer.size() / static_cast<std::size_t>(threads);
  std::vector<float> sums(static_cast<std::size_t>(threads));
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    on_threads(threads, [&](int p) { sums[static_cast<std::size_t>(p)] = bp::bench::bandwidth_sum(buffer.subspan(p * part, part)); });
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(sums.data());
  }
  const double bytes = static_cast<double>(buffer.size() * sizeof(float));
  double& bandwidth = read_bandwidth[threads][state.range(1) < 512 ? 1 : 0];
  bandwidth = bytes * static_cast<double>(state.iterations()) / seconds;
  state.counters["GB_per_s"] = bandwidth / 1e9;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}
BENCHMARK(memory_read)
    ->ArgsProduct({{1, 2}, {512, 97}})
    ->ArgNames({"threads", "MB"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The multiply-add peak of `threads` cores (each its own chains), the best of the iterations. Args:
/// threads, int8 (0: fp32 FMAs, 1: int8 dot products; see multiply_add_peak.hpp).
void multiply_add_peak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool int8 = state.range(1) != 0;
  double& best = peak_rate[threads][int8 ? 1 : 0];
  for (auto _ : state) {
    std::vector<double> rates(static_cast<std::size_t>(threads));
    on_threads(threads, [&](int p) { rates[static_cast<std::size_t>(p)] = bp::bench::multiply_add_peak(int8, 2'000'000); });
    double total = 0;
    for (const double r : rates) total += r;
    best = std::max(best, total);
  }
  if (best == 0) state.SkipWithError("no kernel of this kind on this CPU");
  state.counters["GMAC_per_s"] = best / 1e9;
}
BENCHMARK(multiply_add_peak)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->ArgNames({"threads", "int8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// Prefill of a 128-token prompt (two chunks of 64 rows). Args: storage (0 fp32, 1 quantised, 2 quantised
/// with int8 activations), threads.
void llama_prefill(benchmark::State& state) {
  const auto storage = state.range(0);
  if (!ready(state, storage)) return;
  bp::llama_verifier v(*model(storage), options(static_cast<int>(state.range(1)), 64));
  const auto prompt = tokens(128, 1);
  bp::matrix_view<const float> logits;
  for (auto _ : state) {
    if (v.prefill(prompt, logits) != bp::status::success) state.SkipWithError("prefill failed");
    benchmark::DoNotOptimize(logits.data);
  }
  state.counters["tokens_per_s"] = benchmark::Counter(128.0, benchmark::Counter::kIsIterationInvariantRate);
  weight_counters(state, storage);
}
BENCHMARK(llama_prefill)
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->ArgNames({"storage", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// Autoregressive decoding: 64 steps of score(1) + commit(1) after a 64-token prompt; bound_tokens_per_s
/// = read bandwidth (same thread count, this run) / weight bytes. Args: storage, threads.
void llama_decode(benchmark::State& state) {
  const auto storage = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  if (!ready(state, storage)) return;
  bp::llama_verifier v(*model(storage), options(threads, 64));
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
  weight_counters(state, storage);
  if (bound_bandwidth(storage, threads) > 0)
    state.counters["bound_tokens_per_s"] = bound_bandwidth(storage, threads) / static_cast<double>(model(storage)->weight_bytes());
}
BENCHMARK(llama_decode)
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->ArgNames({"storage", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// One score of b tokens after a prompt of `context` tokens (64 unless told), then commit(0), with the
/// kernels of `isa`; vs_b1 = time / time at b = 1 (measured by the b = 1 run, registered first);
/// vs_bound = time / (weight bytes / read bandwidth of the same thread count, this run): 1 is the time of
/// reading the weights once; vs_roofline = time / the larger of that read and b tokens' multiply-adds at
/// the peak of the same thread count and activations (this run); macs_per_token: the weight products'
/// multiply-adds of one token.
void score(benchmark::State& state, std::int64_t storage, int b, int threads, bp::cpu_isa isa, int context = 64) {
  static std::map<std::array<int, 4>, double> b1_seconds;
  if (!ready(state, storage)) return;
  if (isa != bp::cpu_isa::best && bp::detected_cpu_isa() < isa) {
    state.SkipWithError("this CPU does not run these kernels");
    return;
  }
  auto o = options(threads, 32);
  o.isa = isa;
  o.max_positions = context + 64;
  bp::llama_verifier v(*model(storage), o);
  bp::matrix_view<const float> logits;
  if (v.prefill(tokens(context, 3), logits) != bp::status::success) state.SkipWithError("prefill failed");
  const auto block = tokens(b, 4);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (v.score(block, logits) != bp::status::success || v.commit(0) != bp::status::success)
      state.SkipWithError("score failed");
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  weight_counters(state, storage);
  const double mean = seconds / static_cast<double>(state.iterations());
  double& b1 = b1_seconds[{static_cast<int>(storage), threads, static_cast<int>(isa), context}];
  if (b == 1) b1 = mean;
  if (b1 > 0) state.counters["vs_b1"] = mean / b1;
  if (bound_bandwidth(storage, threads) > 0)
    state.counters["vs_bound"] = mean * bound_bandwidth(storage, threads) / static_cast<double>(model(storage)->weight_bytes());
  const double macs = multiply_adds_per_token(*model(storage));
  state.counters["macs_per_token"] = macs;
  const double peak = peak_rate[threads][storage == 2 ? 1 : 0];
  if (bound_bandwidth(storage, threads) > 0 && peak > 0) {
    const double read = static_cast<double>(model(storage)->weight_bytes()) / bound_bandwidth(storage, threads);
    state.counters["vs_roofline"] = mean / std::max(read, b * macs / peak);
  }
  state.counters["tokens_per_s"] = benchmark::Counter(b, benchmark::Counter::kIsIterationInvariantRate);
}

/// score() with the best kernels this CPU runs. Args: storage (2: quantised weights, int8 activations),
/// b, threads.
void llama_score(benchmark::State& state) {
  score(state, state.range(0), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)), bp::cpu_isa::best);
}
BENCHMARK(llama_score)
    ->ArgsProduct({{0, 1, 2}, {1, 2, 4, 8, 16, 32}, {1, 2}})
    ->ArgNames({"storage", "b", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The cost of a score as the context grows (attention reads every earlier position). Args: storage, b,
/// context (prompt tokens before the block); 1 thread.
void llama_score_context(benchmark::State& state) {
  score(state, state.range(0), static_cast<int>(state.range(1)), 1, bp::cpu_isa::best, static_cast<int>(state.range(2)));
}
BENCHMARK(llama_score_context)
    ->ArgsProduct({{2}, {1, 8}, {256, 1024}})
    ->ArgNames({"storage", "b", "context"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The instruction-set variants side by side, 1 thread. Args: storage (1, 2), b, isa (cpu_isa: generic,
/// avx2, avx512, avx512_vnni = 0..3).
void llama_score_isa(benchmark::State& state) {
  score(state, state.range(0), static_cast<int>(state.range(1)), 1, static_cast<bp::cpu_isa>(state.range(2)));
}
BENCHMARK(llama_score_isa)
    ->ArgsProduct({{1, 2}, {1, 8}, {0, 1, 2, 3}})
    ->ArgNames({"storage", "b", "isa"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// N requests' blocks of b tokens (each after a prompt of 64 tokens of its own) scored in one score_batch
/// against the same N blocks scored one request after another, and against one request's block alone, all
/// three in every iteration (the reported time is the batch's); vs_separately = batch time / separate time,
/// vs_one = batch time / one block's time: what serving N requests together costs over serving one. Args:
/// storage, N, b, threads.
void llama_score_batch(benchmark::State& state) {
  const auto storage = state.range(0);
  const int n = static_cast<int>(state.range(1)), b = static_cast<int>(state.range(2)), threads = static_cast<int>(state.range(3));
  if (!ready(state, storage)) return;
  std::vector<std::unique_ptr<bp::llama_verifier>> owned;
  std::vector<bp::llama_verifier*> verifiers;
  std::vector<std::vector<bp::token_id>> block_tokens;
  bp::matrix_view<const float> logits;
  for (int i = 0; i < n; ++i) {
    auto o = options(threads, 32);
    o.max_positions = 128;
    owned.push_back(std::make_unique<bp::llama_verifier>(*model(storage), o));
    verifiers.push_back(owned.back().get());
    if (owned.back()->prefill(tokens(64, 3 + i), logits) != bp::status::success) state.SkipWithError("prefill failed");
    block_tokens.push_back(tokens(b, 4 + i));
  }
  const std::vector<std::span<const bp::token_id>> blocks(block_tokens.begin(), block_tokens.end());
  std::vector<bp::matrix_view<const float>> rows(static_cast<std::size_t>(n));
  const auto crop = [&] {
    for (auto* v : verifiers)
      if (v->commit(0) != bp::status::success) state.SkipWithError("commit failed");
  };
  const auto clock = [] { return std::chrono::steady_clock::now(); };
  const auto since = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double batch = 0, separately = 0, one = 0;
  for (auto _ : state) {
    auto t0 = clock();
    if (bp::llama_verifier::score_batch(verifiers, blocks, rows) != bp::status::success) state.SkipWithError("score_batch failed");
    const double step = since(t0);
    batch += step;
    crop();
    t0 = clock();
    for (int i = 0; i < n; ++i)
      if (verifiers[static_cast<std::size_t>(i)]->score(blocks[static_cast<std::size_t>(i)], logits) != bp::status::success)
        state.SkipWithError("score failed");
    separately += since(t0);
    crop();
    t0 = clock();
    if (verifiers.front()->score(blocks.front(), logits) != bp::status::success) state.SkipWithError("score failed");
    one += since(t0);
    crop();
    state.SetIterationTime(step);
  }
  weight_counters(state, storage);
  state.counters["vs_separately"] = batch / separately;
  state.counters["vs_one"] = batch / one;
  state.counters["rows_per_s"] = benchmark::Counter(n * b, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(llama_score_batch)
    ->ArgsProduct({{2}, {1, 2, 4, 8}, {1, 2, 4}, {1, 2}})
    ->ArgNames({"storage", "N", "b", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

/// The shipped DFlash drafter's folder (BLOCKPILOT_DFLASH_DRAFTER overrides it).
std::filesystem::path dflash_folder() {
  if (const char* p = std::getenv("BLOCKPILOT_DFLASH_DRAFTER")) return p;
  return std::filesystem::path(BLOCKPILOT_SOURCE_ROOT) / "examples/data/drafters/smollm2-dflash";
}

/// A drafter step against a target step on the int8 target: each iteration appends one committed row to
/// the drafter's context (after a 64-token prompt) and drafts a block of b, then scores one token with
/// the target (as plain decoding does), both timed; vs_score1 = drafting time / scoring time, summed over
/// the iterations. Args: weights (the drafter's storage: 0 fp32, 2 Q8_0 with int8 activations), vocab
/// (its draft vocabulary: 0 all 49,152 tokens, else the first N of the folder's draft_vocab.json), b.
void dflash_draft(benchmark::State& state) {
  if (!ready(state, 2)) return;
  const auto folder = dflash_folder();
  if (!std::filesystem::is_regular_file(folder / "model.safetensors")) {
    state.SkipWithError(("no DFlash drafter at " + folder.string()).c_str());
    return;
  }
  const auto storage = static_cast<bp::llama_storage>(state.range(0));
  const auto draft_model = bp::dflash_model::load(folder, storage);
  bp::dflash_options o;
  o.threads = 1;
  o.max_draft_rows = 15;
  o.max_positions = 1 << 16;
  if (const auto n = state.range(1); n > 0) o.draft_vocab = bp::read_draft_vocab(folder / "draft_vocab.json", n);
  const int b = static_cast<int>(state.range(2));
  auto to = options(1, 32);
  to.feature_layers = draft_model.config().target_layer_ids;
  to.max_positions = 1 << 12;
  bp::llama_verifier target(*model(2), to);
  bp::dflash_drafter drafter(draft_model, *model(2), o);
  bp::matrix_view<const float> logits;
  const auto prompt = tokens(64, 3);
  auto context = prompt;
  if (target.prefill(prompt, logits) != bp::status::success || drafter.begin(prompt) != bp::status::success ||
      drafter.append_context(target.context_features()) != bp::status::success) {
    state.SkipWithError("prefill failed");
    return;
  }
  const auto features = target.context_features();
  const auto last = features.rows_slice(features.rows - 1, 1);  // the committed row appended each step
  const auto one = tokens(1, 5);
  std::vector<bp::token_id> drafts(static_cast<std::size_t>(b - 1));
  double drafting = 0, scoring = 0;
  for (auto _ : state) {
    if (drafter.context_rows() >= features.rows + 16) {  // the drafter's context stays within 16 rows of the target's
      state.PauseTiming();
      (void)drafter.begin(prompt);
      (void)drafter.append_context(features);
      state.ResumeTiming();
    }
    context.resize(static_cast<std::size_t>(drafter.context_rows()) + 1);  // the rows after this step's append
    context.push_back(one[0]);
    const auto t0 = std::chrono::steady_clock::now();
    if (drafter.append_context(last) != bp::status::success ||
        drafter.draft({context, b, 0.0f, {}}, drafts) != bp::status::success)
      state.SkipWithError("draft failed");
    const auto t1 = std::chrono::steady_clock::now();
    if (target.score(one, logits) != bp::status::success || target.commit(0) != bp::status::success)
      state.SkipWithError("score failed");
    drafting += std::chrono::duration<double>(t1 - t0).count();
    scoring += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  state.counters["draft_ms"] = 1e3 * drafting / static_cast<double>(state.iterations());
  state.counters["score1_ms"] = 1e3 * scoring / static_cast<double>(state.iterations());
  state.counters["vs_score1"] = drafting / scoring;
  state.counters["drafter_MB"] = static_cast<double>(draft_model.weight_bytes()) / 1e6;
}
BENCHMARK(dflash_draft)
    ->ArgsProduct({{0, 2}, {0, 8192, 4096}, {2, 4, 8}})
    ->ArgNames({"weights", "vocab", "b"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
