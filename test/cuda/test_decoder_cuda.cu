// The decoder on cuda_backend against the CPU decoder: the device-resident synthetic pair's rows equal
// synthetic_target's bit for bit; for every rule at T = 0 and T = 1, several prompts and seeds, the tokens,
// the accepted count of every step and the statistics are identical (greedy match at T = 1 is greedy
// decoding); cuda_blockpilot_policy (fused and unfused) decides what blockpilot_policy decides on the same
// row and weights; bad inputs and a failing verifier give the same status and stage; a confidence cut-off
// trims the same drafts; an allocation the device cannot give is out_of_memory.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "blockpilot/cuda.cuh"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/policy/confidence_cutoff.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot_workbench/cuda/synthetic.cuh"
#include "cpu_reference.hpp"
#include "device_test.cuh"

namespace bp = blockpilot;
namespace cpu = blockpilot::testing::cpu;
using bp::testing::checker;
using bp::testing::device_buffer;

/// A user's rule on cuda_backend: its acceptance_op has the batched contract (here greedy match's own
/// kernels under another name), so the CUDA decode stage takes it like a built-in rule.
struct users_greedy {
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "users-greedy";
};
template <>
struct blockpilot::acceptance_op<users_greedy, blockpilot::cuda_backend> : blockpilot::acceptance_op<blockpilot::greedy_match, blockpilot::cuda_backend> {};
static_assert(blockpilot::batched_acceptance_rule<users_greedy, blockpilot::cuda_backend>);
static_assert(blockpilot::decodes_on<users_greedy, blockpilot::cuda_backend>);

namespace {

/// A verifier that records the n of every commit (a + 1 per step).
template <class V>
struct recording_verifier {
  V& inner;
  std::vector<int> commits;

  [[nodiscard]] std::int64_t vocab_size() const { return inner.vocab_size(); }
  bp::status prefill(std::span<const bp::token_id> prompt, bp::matrix_view<const float>& logits) {
    commits.clear();
    return inner.prefill(prompt, logits);
  }
  bp::status score(std::span<const bp::token_id> block, bp::matrix_view<const float>& logits) {
    return inner.score(block, logits);
  }
  bp::status commit(int n) {
    commits.push_back(n);
    return inner.commit(n);
  }
};

struct outcome {
  bp::status error = bp::status::success;
  std::string stage;
  std::vector<bp::token_id> tokens;
  std::vector<int> commits;
  bp::request_stats stats;
};

template <class Drafter, class Verifier, class Policy, class Rule, class Backend>
outcome decode(Drafter& d, Verifier& v, Policy policy, Backend backend, std::span<const bp::token_id> prompt,
               const bp::generation_config& config) {
  recording_verifier<Verifier> recorder{v, {}};
  bp::speculative_decoder<Drafter, recording_verifier<Verifier>, Policy, Rule, Backend> decoder(d, recorder, std::move(policy),
                                                                                                backend);
  bp::generation_result r;
  outcome o;
  o.error = decoder.generate(prompt, config, r);
  o.stage = std::string(r.failed_stage);
  o.tokens = r.tokens;
  o.commits = recorder.commits;
  o.stats = r.stats;
  return o;
}

/// Equal counts, entries past the shorter histogram counting as zero: a histogram's length is the
/// policy's max_block_size(), which differs between a fixed size and the BlockPilot policy's window.
bool same_histogram(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    if ((i < a.size() ? a[i] : 0) != (i < b.size() ? b[i] : 0)) return false;
  return true;
}

void compare(checker& c, const outcome& cpu, const outcome& gpu, const std::string& what) {
  c.expect(cpu.error == gpu.error && cpu.stage == gpu.stage, "%s: status %d at '%s' on the CPU, %d at '%s' on the GPU",
           what.c_str(), static_cast<int>(cpu.error), cpu.stage.c_str(), static_cast<int>(gpu.error), gpu.stage.c_str());
  std::size_t first = 0;
  while (first < cpu.tokens.size() && first < gpu.tokens.size() && cpu.tokens[first] == gpu.tokens[first]) ++first;
  c.expect(cpu.tokens == gpu.tokens, "%s: %zu tokens on the CPU, %zu on the GPU, first difference at %zu", what.c_str(),
           cpu.tokens.size(), gpu.tokens.size(), first);
  c.expect(cpu.commits == gpu.commits, "%s: per-step accepted counts differ (%zu and %zu steps)", what.c_str(),
           cpu.commits.size(), gpu.commits.size());
  c.expect(cpu.stats.block_size == gpu.stats.block_size && cpu.stats.policy_fallback == gpu.stats.policy_fallback &&
               cpu.stats.steps == gpu.stats.steps && cpu.stats.drafted == gpu.stats.drafted &&
               cpu.stats.accepted == gpu.stats.accepted && cpu.stats.generated == gpu.stats.generated &&
               same_histogram(cpu.stats.steps_by_length, gpu.stats.steps_by_length) &&
               same_histogram(cpu.stats.steps_by_block, gpu.stats.steps_by_block),
           "%s: statistics differ (block size %d / %d, fallback %d / %d, steps %lld / %lld, drafted %lld / %lld, "
           "accepted %lld / %lld, generated %lld / %lld)",
           what.c_str(), cpu.stats.block_size, gpu.stats.block_size, static_cast<int>(cpu.stats.policy_fallback),
           static_cast<int>(gpu.stats.policy_fallback), static_cast<long long>(cpu.stats.steps),
           static_cast<long long>(gpu.stats.steps), static_cast<long long>(cpu.stats.drafted),
           static_cast<long long>(gpu.stats.drafted), static_cast<long long>(cpu.stats.accepted),
           static_cast<long long>(gpu.stats.accepted), static_cast<long long>(cpu.stats.generated),
           static_cast<long long>(gpu.stats.generated));
}

/// Both pairs of one world.
struct pairs {
  const bp::synthetic_world& world;
  bp::cuda_backend backend;
  bp::synthetic_drafter cpu_drafter{world};
  bp::synthetic_target cpu_target{world};
  bp::cuda_synthetic_drafter gpu_drafter{world, backend};
  bp::cuda_synthetic_target gpu_target{world, backend, 64};
};

/// The device target's rows against synthetic_target's, bit for bit: the prefill row and a scored block.
void check_rows(checker& c, pairs& p, std::span<const bp::token_id> prompt) {
  const std::int64_t vocab = p.world.vocab_size();
  bp::matrix_view<const float> host, device;
  const auto same = [&](std::int64_t rows, const char* what) {
    std::vector<float> copy(static_cast<std::size_t>(rows * vocab));
    BLOCKPILOT_CUDA_OK(cudaStreamSynchronize(p.backend.stream));
    BLOCKPILOT_CUDA_OK(cudaMemcpy(copy.data(), device.data, copy.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < rows * vocab; ++i)
      differ += std::memcmp(&copy[static_cast<std::size_t>(i)], host.data + i, sizeof(float)) != 0;
    c.expect(device.rows == rows && differ == 0, "V=%lld %s: %lld entries differ from synthetic_target's",
             static_cast<long long>(vocab), what, static_cast<long long>(differ));
  };
  c.expect(p.cpu_target.prefill(prompt, host) == bp::status::success &&
               p.gpu_target.prefill(prompt, device) == bp::status::success,
           "prefill failed");
  same(1, "prefill row");
  std::vector<bp::token_id> block(17);
  for (std::size_t j = 0; j < block.size(); ++j) block[j] = static_cast<bp::token_id>((j * 7919 + 3) % static_cast<std::size_t>(vocab));
  c.expect(p.cpu_target.score(block, host) == bp::status::success && p.gpu_target.score(block, device) == bp::status::success,
           "score failed");
  same(17, "scored block");
}

template <class Rule>
void check_rule(checker& c, pairs& p, const std::vector<std::vector<bp::token_id>>& prompts, int max_new) {
  const bool large = p.world.vocab_size() > 100000;  // fewer sizes: every CPU row costs a full pass
  const std::vector<int> sizes = large ? std::vector<int>{16, 5} : std::vector<int>{16, 1, 5, 19};
  for (const float t : {0.0f, 1.0f})
    for (const int size : sizes)
      for (const std::uint64_t seed : {0ull, 7ull}) {
        bp::generation_config config;
        config.max_new_tokens = max_new;
        config.temperature = t;
        config.seed = seed;
        for (std::size_t i = 0; i < prompts.size(); ++i) {
          const std::string what = std::string(Rule::name) + " V=" + std::to_string(p.world.vocab_size()) +
                                   " T=" + std::to_string(t) + " b=" + std::to_string(size) + " seed=" +
                                   std::to_string(seed) + " prompt " + std::to_string(i);
          const outcome host = decode<bp::synthetic_drafter, bp::synthetic_target, bp::runtime_block_size, Rule>(
              p.cpu_drafter, p.cpu_target, {size}, bp::cpu_backend{}, prompts[i], config);
          const outcome device = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::runtime_block_size, Rule>(
              p.gpu_drafter, p.gpu_target, {size}, p.backend, prompts[i], config);
          c.expect(host.error == bp::status::success, "%s: the CPU decode failed", what.c_str());
          compare(c, host, device, what);
          if constexpr (std::is_same_v<Rule, bp::greedy_match>)
            if (t > 0.0f) {  // greedy match samples nothing, not even the first token
              bp::generation_config greedy = config;
              greedy.temperature = 0.0f;
              const outcome want = decode<bp::synthetic_drafter, bp::synthetic_target, bp::runtime_block_size, Rule>(
                  p.cpu_drafter, p.cpu_target, {size}, bp::cpu_backend{}, prompts[i], greedy);
              c.expect(device.tokens == want.tokens, "%s: not the greedy decoding at T = 0", what.c_str());
            }
        }
      }
}

/// Wraps a drafter and reports a confidence per position that follows from the context length and
/// the position alone (the same on both backends), so that a cut-off trims the blocks.
template <class D>
struct confident {
  D& inner;
  std::vector<float> confidence;
  [[nodiscard]] std::int64_t vocab_size() const { return inner.vocab_size(); }
  [[nodiscard]] int max_draft_rows() const { return inner.max_draft_rows(); }
  bp::status begin(std::span<const bp::token_id> prompt) { return inner.begin(prompt); }
  bp::status commit(int n) { return inner.commit(n); }
  void fill(const bp::draft_request& r) {
    confidence.resize(static_cast<std::size_t>(std::max(r.block_size - 1, 0)));
    for (std::size_t j = 0; j < confidence.size(); ++j)
      confidence[j] = static_cast<float>(bp::synthetic_world::mix(r.context.size() * 97 + j) % 100) / 100.0f;
  }
  bp::status draft(const bp::draft_request& r, std::span<bp::token_id> out) {
    fill(r);
    return inner.draft(r, out);
  }
  bp::status draft(const bp::draft_request& r, std::span<bp::token_id> out, bp::matrix_view<float> q) {
    fill(r);
    return inner.draft(r, out, q);
  }
  [[nodiscard]] std::span<const float> draft_confidence() const { return confidence; }
};

/// The confidence cut-off trims the same drafts on both backends: tokens, accepted counts and the
/// scored sizes equal the CPU's for every rule at T = 0 and T = 1.
template <class Rule>
void check_cutoff(checker& c, pairs& p, const std::vector<std::vector<bp::token_id>>& prompts, int max_new) {
  using cutoff = bp::confidence_cutoff<bp::runtime_block_size>;
  confident<bp::synthetic_drafter> host_drafter{p.cpu_drafter, {}};
  confident<bp::cuda_synthetic_drafter> device_drafter{p.gpu_drafter, {}};
  for (const float t : {0.0f, 1.0f})
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      bp::generation_config config;
      config.max_new_tokens = max_new;
      config.temperature = t;
      config.seed = 3 + i;
      const std::string what = std::string("cut-off, ") + std::string(Rule::name) + " T=" + std::to_string(t) +
                               " prompt " + std::to_string(i);
      const outcome host = decode<confident<bp::synthetic_drafter>, bp::synthetic_target, cutoff, Rule>(
          host_drafter, p.cpu_target, cutoff({12}, 0.3f), bp::cpu_backend{}, prompts[i], config);
      const outcome device = decode<confident<bp::cuda_synthetic_drafter>, bp::cuda_synthetic_target, cutoff, Rule>(
          device_drafter, p.gpu_target, cutoff({12}, 0.3f), p.backend, prompts[i], config);
      c.expect(host.error == bp::status::success && host.stats.drafted < host.stats.steps * 11,
               "%s: the CPU decode failed or trimmed nothing", what.c_str());
      compare(c, host, device, what);
    }
}

/// Bad inputs and a failing verifier: the same status and stage as on the CPU.
void check_errors(checker& c, pairs& p) {
  const auto vocab = static_cast<bp::token_id>(p.world.vocab_size());
  struct bad_case {
    const char* what;
    std::vector<bp::token_id> prompt;
    float temperature;
  };
  const std::vector<bad_case> cases = {
      {"empty prompt", {}, 0.0f},
      {"token = vocab", {1, 2, vocab}, 0.0f},
      {"token -1", {-1, 2, 3}, 1.0f},
      {"temperature -1", {1, 2, 3}, -1.0f},
      {"temperature NaN", {1, 2, 3}, std::numeric_limits<float>::quiet_NaN()},
      {"temperature inf", {1, 2, 3}, std::numeric_limits<float>::infinity()},
  };
  for (const bad_case& bad : cases) {
    bp::generation_config config;
    config.max_new_tokens = 16;
    config.temperature = bad.temperature;
    const outcome host = decode<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<16>, bp::rejection_sampling>(
        p.cpu_drafter, p.cpu_target, {}, bp::cpu_backend{}, bad.prompt, config);
    const outcome device =
        decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<16>, bp::rejection_sampling>(
            p.gpu_drafter, p.gpu_target, {}, p.backend, bad.prompt, config);
    c.expect(host.error != bp::status::success, "%s: the CPU decoder accepted it", bad.what);
    compare(c, host, device, bad.what);
  }
  // A block larger than the device target holds: the verifier's status at "verify", after the first token.
  bp::cuda_synthetic_target small(p.world, p.backend, 4);
  bp::generation_config config;
  config.max_new_tokens = 16;
  const std::vector<bp::token_id> prompt = {5, 6, 7};
  const outcome device = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<8>, bp::greedy_match>(
      p.gpu_drafter, small, {}, p.backend, prompt, config);
  c.expect(device.error == bp::status::invalid_block_size && device.stage == "verify" && device.tokens.size() == 1,
           "oversized block: status %d at '%s' with %zu tokens", static_cast<int>(device.error), device.stage.c_str(),
           device.tokens.size());
}

/// A device allocation that cannot be had is out_of_memory (not a CUDA error), leaves the block empty and
/// the device usable: the next reserve allocates.
void check_allocation_failure(checker& c) {
  bp::cuda_detail::device_allocation memory;
  const bp::status s = memory.reserve(std::size_t{1} << 60);
  c.expect(s == bp::status::out_of_memory && memory.data() == nullptr && memory.size() == 0,
           "an impossible allocation: status %d, %zu bytes", static_cast<int>(s), memory.size());
  c.expect(memory.reserve(4096) == bp::status::success && memory.data() != nullptr && memory.size() >= 4096,
           "an allocation after the failed one failed");
}

/// The stage refuses a q view that does not hold the b - 1 rows rejection sampling reads (the kernels
/// would read past it), and a block of one needs none.
void check_stage_draft_shapes(checker& c, cudaStream_t stream) {
  constexpr int max_block = 8;
  constexpr std::int64_t vocab = 1000;
  bp::decode_stage<bp::rejection_sampling, bp::cuda_backend> stage(bp::cuda_backend{stream});
  c.expect(stage.reserve(max_block, vocab) == bp::status::success, "stage reserve");
  device_buffer<float> logits(static_cast<std::size_t>(max_block) * vocab);
  device_buffer<float> q(static_cast<std::size_t>(max_block) * vocab);
  std::vector<float> uniform(static_cast<std::size_t>(max_block) * vocab, 1.0f / static_cast<float>(vocab));
  BLOCKPILOT_CUDA_OK(cudaMemcpy(logits.data(), uniform.data(), uniform.size() * sizeof(float), cudaMemcpyHostToDevice));
  BLOCKPILOT_CUDA_OK(cudaMemcpy(q.data(), uniform.data(), uniform.size() * sizeof(float), cudaMemcpyHostToDevice));
  BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<bp::token_id> block = {3, 1, 4, 1};
  const auto b = static_cast<std::int64_t>(block.size());
  struct q_case {
    const char* what;
    bp::matrix_view<const float> view;
    bool valid;
  };
  const std::vector<q_case> cases = {
      {"q of b - 1 rows", {q.data(), b - 1, vocab}, true},
      {"q with a wider stride", {q.data(), b - 1, vocab, vocab + 24}, true},
      {"no q", {}, false},
      {"q of b - 2 rows", {q.data(), b - 2, vocab}, false},
      {"q of another width", {q.data(), b - 1, vocab - 1}, false},
      {"q stride below its width", {q.data(), b - 1, vocab, vocab - 8}, false},
  };
  for (const q_case& qc : cases) {
    bp::acceptance_input in;
    in.block = block;
    in.target_logits = {logits.data(), b, vocab};
    in.draft_probs = qc.view;
    in.temperature = 1.0f;
    in.rng = bp::philox_stream{7, 0};
    bp::acceptance_result r{-1, -1};
    const bp::status s = stage.accept(in, r);
    c.expect(qc.valid ? s == bp::status::success && r.accepted >= 0 : s == bp::status::invalid_argument && r.accepted == -1,
             "stage accept, %s: status %d, accepted %d", qc.what, static_cast<int>(s), r.accepted);
  }
  bp::acceptance_input one;
  one.block = std::span<const bp::token_id>(block.data(), 1);
  one.target_logits = {logits.data(), 1, vocab};
  one.temperature = 1.0f;
  one.rng = bp::philox_stream{7, 1};
  bp::acceptance_result r{-1, -1};
  const bp::status s = stage.accept(one, r);
  c.expect(s == bp::status::success && r.accepted == 0 && r.bonus >= 0 && r.bonus < vocab,
           "a block of one without q: status %d, accepted %d, bonus %d", static_cast<int>(s), r.accepted, r.bonus);
}

/// Sampling controls on the device decoder: controls that keep one token make T = 1 greedy (whatever the
/// drafter proposes), so the output equals the CPU decoder's at T = 0; wider controls decode to the end; a
/// logits processor (host rows only) is refused at the start, as bad controls are on both backends.
template <class Rule>
void check_controls(checker& c, pairs& p, const std::vector<std::vector<bp::token_id>>& prompts, int max_new) {
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = std::string(Rule::name) + " controls, V=" + std::to_string(p.world.vocab_size()) + " prompt " +
                             std::to_string(i);
    bp::generation_config greedy;
    greedy.max_new_tokens = max_new;
    const outcome want = decode<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<8>, Rule>(
        p.cpu_drafter, p.cpu_target, {}, bp::cpu_backend{}, prompts[i], greedy);
    bp::generation_config one = greedy;
    one.temperature = 1.0f;
    for (const bp::sampling_controls keep_one : {bp::sampling_controls{1, 1.0f, 0.0f}, bp::sampling_controls{0, 1e-6f, 0.0f},
                                                 bp::sampling_controls{0, 1.0f, 1.0f}}) {
      one.sampling = keep_one;
      const outcome got = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<8>, Rule>(
          p.gpu_drafter, p.gpu_target, {}, p.backend, prompts[i], one);
      c.expect(got.error == bp::status::success && got.tokens == want.tokens,
               "%s: controls keeping one token (top_k %d top_p %g min_p %g) at T = 1 are not greedy (status %d)", what.c_str(),
               keep_one.top_k, keep_one.top_p, keep_one.min_p, static_cast<int>(got.error));
    }
    bp::generation_config wide = one;
    wide.sampling = {20, 0.9f, 0.05f};
    const outcome got = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<8>, Rule>(
        p.gpu_drafter, p.gpu_target, {}, p.backend, prompts[i], wide);
    c.expect(got.error == bp::status::success && static_cast<int>(got.tokens.size()) == max_new,
             "%s: top_k 20, top_p 0.9, min_p 0.05 at T = 1: status %d, %zu tokens", what.c_str(), static_cast<int>(got.error),
             got.tokens.size());
  }
  bp::generation_config processed;
  processed.max_new_tokens = 8;
  processed.process_logits = [](std::span<const bp::token_id>, std::span<float>) {};
  const outcome refused = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<8>, Rule>(
      p.gpu_drafter, p.gpu_target, {}, p.backend, prompts[0], processed);
  c.expect(refused.error == bp::status::invalid_argument && refused.stage == "input" && refused.tokens.empty(),
           "a logits processor on the device: status %d at '%s'", static_cast<int>(refused.error), refused.stage.c_str());
  bp::generation_config bad;
  bad.max_new_tokens = 8;
  bad.sampling = {0, 1.5f, 0.0f};
  const outcome host = decode<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<8>, Rule>(
      p.cpu_drafter, p.cpu_target, {}, bp::cpu_backend{}, prompts[0], bad);
  const outcome device = decode<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<8>, Rule>(
      p.gpu_drafter, p.gpu_target, {}, p.backend, prompts[0], bad);
  c.expect(host.error == bp::status::invalid_argument, "top_p 1.5 accepted by the CPU decoder");
  compare(c, host, device, "top_p 1.5");
}

/// A compact predictor on the device.
struct device_predictor {
  device_buffer<std::byte> parameters;
  device_buffer<float> mean, stddev;
  bp::mlp_device_view<float> view;
  device_predictor(const cpu::mlp_reference& net, int input, const std::vector<int>& hidden, int classes)
      : parameters(net.parameter_bytes()), mean(net.feature_mean()), stddev(net.feature_std()) {
    BLOCKPILOT_CUDA_OK(cudaMemcpy(parameters.data(), net.parameters(), net.parameter_bytes(), cudaMemcpyHostToDevice));
    BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
    bp::mlp_device_shape shape;
    shape.input = input;
    shape.hidden_count = static_cast<int>(hidden.size());
    for (std::size_t i = 0; i < hidden.size(); ++i) shape.hidden[i] = hidden[i];
    shape.classes = classes;
    view = {reinterpret_cast<const float*>(parameters.data()), mean.data(), stddev.data(), shape};
  }
};

/// cuda_blockpilot_policy against blockpilot_policy on the device target's prefill rows, then a decode with it
/// against the CPU decoder at the size the CPU policy chose.
void check_policy(checker& c, pairs& p, const std::vector<std::vector<bp::token_id>>& prompts,
                  const std::vector<int>& hidden, std::uint64_t net_seed, bool expect_fused) {
  constexpr int top_k = 64, window_k = 2, training_block_size = 16;
  constexpr float temperature = 1.0f;
  const int input = top_k + cpu::compact_statistic_count(), classes = 2 * window_k + 1;
  const std::int64_t vocab = p.world.vocab_size();
  const cpu::mlp_reference net(input, hidden, classes, net_seed, false);
  const device_predictor weights(net, input, hidden, classes);
  recording_verifier<bp::cuda_synthetic_target> recorder{p.gpu_target, {}};
  bp::speculative_decoder<bp::cuda_synthetic_drafter, recording_verifier<bp::cuda_synthetic_target>,
                          bp::cuda_blockpilot_policy<float>, bp::sample_and_match, bp::cuda_backend>
      decoder(p.gpu_drafter, recorder,
              bp::cuda_blockpilot_policy<float>(p.backend, bp::compact_features{top_k, temperature}, weights.view,
                                                {training_block_size, window_k, vocab}),
              p.backend);
  bp::cuda_blockpilot_policy<float>& policy = decoder.policy();
  c.expect(policy.fused() == expect_fused, "hidden %d: fused() is %d", hidden[0], static_cast<int>(policy.fused()));
  bp::mlp_device_view<float> empty = weights.view;  // the right shape, nothing uploaded
  empty.parameters = nullptr;
  bool refused = false;
  try {
    [[maybe_unused]] const bp::cuda_blockpilot_policy<float> unusable(
        p.backend, bp::compact_features{top_k, temperature}, empty, {training_block_size, window_k, vocab});
  } catch (const bp::error&) {
    refused = true;
  }
  c.expect(refused, "a network view without parameters is refused at construction");
  {  // a NaN output bias (the last parameter): the CPU policy falls back, so must the device's
    const device_predictor broken(net, input, hidden, classes);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    BLOCKPILOT_CUDA_OK(cudaMemcpy(broken.parameters.data() + net.parameter_bytes() - sizeof(float), &nan, sizeof(float),
                                  cudaMemcpyHostToDevice));
    BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
    bp::cuda_blockpilot_policy<float> nan_policy(p.backend, bp::compact_features{top_k, temperature}, broken.view,
                                                 {training_block_size, window_k, vocab});
    bp::matrix_view<const float> row;
    if (c.expect(p.gpu_target.prefill(prompts[0], row) == bp::status::success, "prefill failed")) {
      const bp::block_size_choice got = nan_policy.choose({prompts[0], row.row(0), temperature});
      c.expect(got.fallback && got.block_size == training_block_size,
               "hidden %d: a network with a NaN output chose %d%s, not the fallback %d", hidden[0], got.block_size,
               got.fallback ? " (fallback)" : "", training_block_size);
    }
  }
  int compared = 0, near_ties = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    bp::matrix_view<const float> row;
    if (!c.expect(p.gpu_target.prefill(prompts[i], row) == bp::status::success, "prefill failed")) return;
    BLOCKPILOT_CUDA_OK(cudaStreamSynchronize(p.backend.stream));
    std::vector<float> host(static_cast<std::size_t>(vocab));
    BLOCKPILOT_CUDA_OK(cudaMemcpy(host.data(), row.data, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float margin;
    const bp::block_size_choice expected =
        cpu::blockpilot_choice(net, top_k, temperature, training_block_size, window_k, host, margin);
    const bp::block_size_choice got = policy.choose({prompts[i], row.row(0), temperature});
    if (!expected.fallback && margin < 1e-3f) {
      ++near_ties;
      continue;
    }
    ++compared;
    c.expect(got.block_size == expected.block_size && got.fallback == expected.fallback,
             "policy, hidden %d, prompt %zu: device %d%s, CPU %d%s (margin %g)", hidden[0], i, got.block_size,
             got.fallback ? " (fallback)" : "", expected.block_size, expected.fallback ? " (fallback)" : "", margin);

    bp::generation_config config;
    config.max_new_tokens = 48;
    config.temperature = 1.0f;
    config.seed = i;
    const outcome host_run = decode<bp::synthetic_drafter, bp::synthetic_target, bp::runtime_block_size, bp::sample_and_match>(
        p.cpu_drafter, p.cpu_target, {expected.block_size}, bp::cpu_backend{}, prompts[i], config);
    bp::generation_result r;
    outcome device_run;
    device_run.error = decoder.generate(prompts[i], config, r);
    device_run.stage = std::string(r.failed_stage);
    device_run.tokens = r.tokens;
    device_run.commits = recorder.commits;
    device_run.stats = r.stats;
    compare(c, host_run, device_run, "decode with cuda_blockpilot_policy, prompt " + std::to_string(i));
  }
  c.expect(compared > 0, "policy, hidden %d: every decision was a near tie (%d)", hidden[0], near_ties);
  // A row of the wrong length falls back to B, as on the CPU.
  bp::matrix_view<const float> row;
  (void)p.gpu_target.prefill(prompts[0], row);
  const bp::block_size_choice short_row = policy.choose({prompts[0], row.row(0).first(static_cast<std::size_t>(vocab - 1)), temperature});
  c.expect(short_row.fallback && short_row.block_size == training_block_size, "a short row did not fall back");
}

}  // namespace

int main() {
  bp::testing::require_device_or_skip("test_decoder_cuda");
  checker c("test_decoder_cuda");
  check_allocation_failure(c);
  cudaStream_t stream;
  BLOCKPILOT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  check_stage_draft_shapes(c, stream);
  std::vector<std::int64_t> vocabs = {1000, 151936};
  if (bp::testing::quick_mode()) vocabs.pop_back();
  for (const std::int64_t vocab : vocabs) {
    bp::synthetic_params params;
    params.vocab = vocab;
    const bp::synthetic_world world(params);
    pairs p{world, bp::cuda_backend{stream}};
    const bool large = vocab > 100000;
    const auto prompts = bp::synthetic_prompts(large ? 2 : 4, vocab, 1, 40, 11 + static_cast<std::uint64_t>(vocab));
    for (const auto& prompt : prompts) check_rows(c, p, prompt);
    const int max_new = large ? 24 : 64;
    check_rule<bp::greedy_match>(c, p, prompts, max_new);
    check_rule<bp::sample_and_match>(c, p, prompts, max_new);
    check_rule<bp::rejection_sampling>(c, p, prompts, max_new);
    check_errors(c, p);
    check_cutoff<bp::greedy_match>(c, p, prompts, max_new);
    check_cutoff<bp::rejection_sampling>(c, p, prompts, max_new);
    check_controls<bp::sample_and_match>(c, p, prompts, max_new);
    check_controls<bp::rejection_sampling>(c, p, prompts, max_new);
    const auto policy_prompts = bp::synthetic_prompts(large ? 4 : 12, vocab, 4, 40, 5);
    check_policy(c, p, policy_prompts, {32, 32}, 3, true);
    if (!large) check_policy(c, p, policy_prompts, {4096, 4096}, 4, false);
  }
  BLOCKPILOT_CUDA_OK(cudaStreamDestroy(stream));
  return c.finish();
}
