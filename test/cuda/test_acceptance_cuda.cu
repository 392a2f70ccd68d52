// The CUDA acceptance rules against acceptance_op<Rule, cpu_backend> request by request, on the same
// logits, drafts, draft probabilities and Philox streams: statuses, accepted counts and bonus tokens must be
// identical. Ragged batches (padding rows hold NaN and must never be read), vocabularies around the segment
// size, misaligned rows, per-request temperatures (greedy, sampling and invalid ones), NaN / +inf / masked
// rows before and after the first rejection, invalid tokens and block sizes, drafts not from q, empty
// residuals, argument and workspace errors, the flattened layout (cumulative draft counts), CUDA-graph replay,
// and sampling controls (top-k / top-p / min-p, batch-wide and per request, invalid ones included): equal
// to the CPU request by request, and a chi-square of the GPU's committed tokens against the processed
// distribution, which catches a residual taken from the unprocessed p.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "blockpilot/cuda/acceptance.cuh"
#include "cpu_reference.hpp"
#include "device_test.cuh"
#include "support/processed_distribution.hpp"
#include "support/six_token_rows.hpp"

namespace bp = blockpilot;
namespace cpu = blockpilot::testing::cpu;
using bp::testing::checker;
using bp::testing::device_buffer;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

/// What is special about a request.
enum class special {
  none, nan_first_row, nan_after_rejection, pos_inf_row, all_masked_row, masked_tokens, bad_token, bad_block_size,
  draft_not_from_q, nan_q, empty_residual, count
};

/// A ragged batch in host memory, laid out as the GPU reads it.
struct batch_case {
  std::string name;
  int batch = 0, max_block = 0;
  std::int64_t vocab = 0, stride = 0, draft_stride = 0;
  std::vector<float> logits;  ///< [batch][max_block][stride]
  std::vector<float> q;       ///< [batch][max_block − 1][draft_stride]
  std::vector<bp::token_id> blocks;
  std::vector<int> sizes;
  std::vector<float> temperatures;
  std::vector<bp::philox_stream> rng;
  std::vector<special> kind;
  bool per_request_temperature = false;
  float temperature = 1.0f;
  bp::sampling_controls sampling{};              ///< every request's controls, unless…
  std::vector<bp::sampling_controls> controls;  ///< … these per-request ones are given (non-empty)

  float* row(int r, int j) { return logits.data() + (static_cast<std::int64_t>(r) * max_block + j) * stride; }
  float* q_row(int r, int j) { return q.data() + (static_cast<std::int64_t>(r) * (max_block - 1) + j) * draft_stride; }
  float request_temperature(int r) const { return per_request_temperature ? temperatures[static_cast<std::size_t>(r)] : temperature; }
  bp::sampling_controls request_sampling(int r) const { return controls.empty() ? sampling : controls[static_cast<std::size_t>(r)]; }
};

/// softmax(row / T) in double (T > 0), 0 for masked tokens.
std::vector<double> softmax(const float* row, std::int64_t vocab, double t) {
  double m = -INFINITY;
  for (std::int64_t i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(row[i]));
  std::vector<double> p(static_cast<std::size_t>(vocab));
  double z = 0.0;
  for (std::int64_t i = 0; i < vocab; ++i) z += p[static_cast<std::size_t>(i)] = std::exp((row[i] - m) / t);
  for (double& x : p) x /= z;
  return p;
}

bp::token_id draw(const std::vector<double>& p, std::mt19937& gen) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double target = u(gen), run = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    run += p[i];
    if (run > target) return static_cast<bp::token_id>(i);
  }
  return static_cast<bp::token_id>(p.size() - 1);
}

/// Builds a batch for `rule`: most drafts match what the target would pick (so requests accept several),
/// the rest are random; every special case appears in turn.
batch_case make_case(cpu::rule rule, std::string name, int batch, int max_block, std::int64_t vocab, std::int64_t pad,
                     float temperature, bool per_request, std::uint32_t seed) {
  batch_case c;
  c.name = std::move(name);
  c.batch = batch;
  c.max_block = max_block;
  c.vocab = vocab;
  c.stride = vocab + pad;
  c.draft_stride = vocab + pad;
  c.temperature = temperature;
  c.per_request_temperature = per_request;
  c.logits.assign(static_cast<std::size_t>(batch) * max_block * c.stride, qnan);  // padding: never read
  if (max_block > 1) c.q.assign(static_cast<std::size_t>(batch) * (max_block - 1) * c.draft_stride, qnan);
  c.blocks.assign(static_cast<std::size_t>(batch) * max_block, -7);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> token(0, static_cast<int>(vocab - 1));
  std::bernoulli_distribution follow(0.8);
  const float temperatures[] = {0.0f, 1e-6f, 0.5f, 1.0f, 1.7f, 0.9f, qnan, -1.0f, inf};
  for (int r = 0; r < batch; ++r) {
    const special kind = static_cast<special>(r % static_cast<int>(special::count));
    c.kind.push_back(kind);
    int b = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_block));
    if (r % 5 == 0) b = max_block;
    if (r % 5 == 1) b = 1;
    if (kind == special::nan_after_rejection) b = std::max(b, std::min(max_block, 3));
    c.sizes.push_back(kind == special::bad_block_size ? (r % 2 == 0 ? 0 : max_block + 1) : b);
    const float t = per_request ? temperatures[static_cast<std::size_t>(r) % std::size(temperatures)] : temperature;
    c.temperatures.push_back(t);
    c.rng.push_back({0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(r + 1) + seed, static_cast<std::uint64_t>(3 * r + 1)});
    const bool sampling = t >= 1e-5f && std::isfinite(t);
    // The token the target picks at row j: its argmax for greedy match (which never samples), its sample
    // for sample-and-match (rejection sampling draws its drafts from q instead).
    const float pick_t = rule != cpu::rule::greedy && sampling ? t : 0.0f;
    for (int j = 0; j < b; ++j) {
      float* row = c.row(r, j);
      for (std::int64_t i = 0; i < vocab; ++i) row[i] = normal(gen);
      if (kind == special::masked_tokens)
        for (std::int64_t i = 0; i < vocab; ++i)
          if (gen() % 3 == 0) row[i] = -inf;
    }
    bp::token_id* block = c.blocks.data() + static_cast<std::int64_t>(r) * max_block;
    block[0] = token(gen);
    for (int j = 0; j + 1 < b; ++j) {
      const float* row = c.row(r, j);
      bp::token_id target = 0;
      if (rule == cpu::rule::rejection && sampling) {
        // q: the target's softmax at T, perturbed; the draft is drawn from q.
        std::vector<float> noisy(row, row + vocab);
        for (float& x : noisy) x += 0.5f * normal(gen);
        const std::vector<double> qd = softmax(noisy.data(), vocab, t);
        float* q = c.q_row(r, j);
        for (std::int64_t i = 0; i < vocab; ++i) q[i] = static_cast<float>(qd[static_cast<std::size_t>(i)]);
        target = draw(qd, gen);
      } else {
        (void)cpu::sample_row(std::span<const float>(row, static_cast<std::size_t>(vocab)), pick_t,
                              c.rng.back().bits64(static_cast<std::uint32_t>(j), bp::random_domain::target_sample), target);
        if (rule == cpu::rule::rejection) {
          float* q = c.q_row(r, j);
          for (std::int64_t i = 0; i < vocab; ++i) q[i] = 1.0f / static_cast<float>(vocab);
        }
      }
      block[j + 1] = follow(gen) ? target : token(gen);
    }
    // The special cases.
    switch (kind) {
      case special::nan_first_row: c.row(r, 0)[token(gen)] = qnan; break;
      case special::nan_after_rejection:
        if (b >= 3) {
          // Row 0 rejects its draft for certain: a token the target masks (p = 0) but q proposes, or one
          // that differs from the target's pick; then row 2 holds a NaN that no rule may read.
          const bp::token_id x = static_cast<bp::token_id>((block[1] + 1) % vocab);
          if (rule == cpu::rule::rejection && sampling) {
            c.row(r, 0)[x] = -inf;
            c.q_row(r, 0)[x] = 0.5f;
          } else {
            bp::token_id target = 0;
            (void)cpu::sample_row(std::span<const float>(c.row(r, 0), static_cast<std::size_t>(vocab)), pick_t,
                                  c.rng.back().bits64(0, bp::random_domain::target_sample), target);
            if (vocab > 1 && x == target) c.row(r, 0)[x] = -inf;  // make sure x is not the target's pick
          }
          block[1] = x;
          c.row(r, 2)[token(gen)] = qnan;
        }
        break;
      case special::pos_inf_row: c.row(r, b - 1)[token(gen)] = inf; break;
      case special::all_masked_row: std::fill(c.row(r, 0), c.row(r, 0) + vocab, -inf); break;
      case special::bad_token: block[b - 1] = (r % 2 == 0) ? static_cast<bp::token_id>(vocab) : -1; break;
      case special::draft_not_from_q:
        if (b > 1 && rule == cpu::rule::rejection) c.q_row(r, 0)[block[1]] = 0.0f;
        break;
      case special::nan_q:
        if (b > 1 && rule == cpu::rule::rejection) c.q_row(r, 0)[block[1]] = qnan;
        break;
      case special::empty_residual:
        // q = 2p: every draft is accepted with probability 1/2, and the residual max(p − q, 0) is empty.
        if (rule == cpu::rule::rejection && sampling)
          for (int j = 0; j + 1 < b; ++j) {
            const std::vector<double> p = softmax(c.row(r, j), vocab, t);
            float* q = c.q_row(r, j);
            for (std::int64_t i = 0; i < vocab; ++i) q[i] = static_cast<float>(2.0 * p[static_cast<std::size_t>(i)]);
          }
        break;
      default: break;
    }
  }
  return c;
}

/// The batch on the device and one call of the rule.
struct device_case {
  device_buffer<float> logits, q, temperatures;
  device_buffer<bp::sampling_controls> controls;
  device_buffer<bp::token_id> blocks;
  device_buffer<int> sizes;
  device_buffer<bp::philox_stream> rng;
  device_buffer<bp::acceptance_result> results;
  device_buffer<bp::status> statuses;
  explicit device_case(const batch_case& c)
      : logits(c.logits), q(c.q), temperatures(c.temperatures), controls(c.controls), blocks(c.blocks), sizes(c.sizes), rng(c.rng),
        results(static_cast<std::size_t>(c.batch)), statuses(static_cast<std::size_t>(c.batch)) {
    results.fill_bytes(0x7f);
    statuses.fill_bytes(0x7f);
  }
  bp::batched_acceptance_input input(const batch_case& c) const {
    bp::batched_acceptance_input in;
    in.shape = {c.batch, c.max_block, c.vocab};
    in.target_logits = logits.data();
    in.logits_row_stride = c.stride;
    in.blocks = blocks.data();
    in.block_sizes = sizes.data();
    in.draft_probs = q.size() > 0 ? q.data() : nullptr;
    in.draft_row_stride = c.draft_stride;
    in.temperature = c.temperature;
    in.temperatures = c.per_request_temperature ? temperatures.data() : nullptr;
    in.sampling = c.sampling;
    in.per_request_sampling = c.controls.empty() ? nullptr : controls.data();
    in.rng = rng.data();
    return in;
  }
  bp::batched_acceptance_output output() const { return {results.data(), statuses.data()}; }
};

template <class Rule>
cpu::rule rule_of() {
  if constexpr (std::is_same_v<Rule, bp::greedy_match>) return cpu::rule::greedy;
  else if constexpr (std::is_same_v<Rule, bp::sample_and_match>) return cpu::rule::sample_match;
  else return cpu::rule::rejection;
}

/// Compares the device outcome of every request with the CPU rule; returns the accepted drafts in total.
long long compare(checker& ch, cpu::rule rule, batch_case& c, const std::vector<bp::acceptance_result>& got,
                  const std::vector<bp::status>& got_status, const char* what) {
  long long accepted = 0;
  int rejected_at_zero = 0, successes = 0;
  for (int r = 0; r < c.batch; ++r) {
    const int b = c.sizes[static_cast<std::size_t>(r)];
    bp::status want_status;
    bp::acceptance_result want{0, -1};
    if (b < 1 || b > c.max_block) {
      want_status = bp::status::invalid_block_size;
    } else {
      // The CPU reads packed rows: repack this request's b rows (and b − 1 q rows).
      std::vector<float> rows, q;
      for (int j = 0; j < b; ++j) rows.insert(rows.end(), c.row(r, j), c.row(r, j) + c.vocab);
      if (rule == cpu::rule::rejection)
        for (int j = 0; j + 1 < b; ++j) q.insert(q.end(), c.q_row(r, j), c.q_row(r, j) + c.vocab);
      want_status = cpu::accept(rule, rows.data(), b, c.vocab, c.blocks.data() + static_cast<std::int64_t>(r) * c.max_block,
                                q.empty() ? nullptr : q.data(), c.request_temperature(r), c.rng[static_cast<std::size_t>(r)], want,
                                c.request_sampling(r));
      if (want_status != bp::status::success) want = {0, -1};
    }
    const bp::acceptance_result g = got[static_cast<std::size_t>(r)];
    const bp::status gs = got_status[static_cast<std::size_t>(r)];
    ch.expect(gs == want_status && g.accepted == want.accepted && g.bonus == want.bonus,
              "%s %s request %d (b=%d T=%g kind %d): got {%s, %d, %d}, want {%s, %d, %d}", c.name.c_str(), what, r, b,
              c.request_temperature(r), static_cast<int>(c.kind[static_cast<std::size_t>(r)]),
              std::string(bp::to_string(gs)).c_str(), g.accepted, g.bonus, std::string(bp::to_string(want_status)).c_str(),
              want.accepted, want.bonus);
    if (want_status == bp::status::success) {
      ++successes;
      accepted += want.accepted;
      rejected_at_zero += want.accepted == 0;
    }
  }
  std::printf("acceptance_cuda: %s %s: %d successful requests, %lld drafts accepted, %d accepted none\n", c.name.c_str(), what,
              successes, accepted, rejected_at_zero);
  return accepted;
}

/// Per-request sampling controls for every request of `c`: each kind, their combination, top-k at and
/// next to the vocabulary, one that keeps everything, invalid ones.
void assign_controls(batch_case& c, std::uint32_t seed) {
  const auto v = static_cast<int>(c.vocab);
  const bp::sampling_controls kinds[] = {
      {}, {1, 1.0f, 0.0f}, {5, 1.0f, 0.0f}, {50, 1.0f, 0.0f}, {0, 0.5f, 0.0f}, {0, 0.95f, 0.0f}, {0, 1.0f, 0.1f},
      {0, 1.0f, 0.6f}, {10, 0.8f, 0.05f}, {v + 3, 0.999f, 0.0f}, {v, 1.0f, 0.0f}, {v - 1, 1.0f, 0.0f},
      {0, 0.0f, 0.0f}, {-1, 1.0f, 0.0f}};
  c.controls.clear();
  for (int r = 0; r < c.batch; ++r) c.controls.push_back(kinds[(static_cast<std::size_t>(r) * 7 + seed) % std::size(kinds)]);
}

/// One call of the rule on the batch, compared with the CPU; returns the accepted drafts in total.
template <class Rule>
long long run_and_compare(checker& ch, batch_case& c) {
  device_case d(c);
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  const bp::batched_acceptance_input in = d.input(c);
  device_buffer<std::byte> workspace(op::workspace_size(in.shape));
  const bp::status s = op::run(bp::cuda_backend{}, in, workspace.bytes(), d.output());
  ch.expect(s == bp::status::success, "%s: run: %s", c.name.c_str(), std::string(bp::to_string(s)).c_str());
  BLOCKPILOT_SYNC_OK();
  return compare(ch, rule_of<Rule>(), c, d.results.download(), d.statuses.download(), "stream");
}

template <class Rule>
void run_case(checker& ch, const char* label, int batch, int max_block, std::int64_t vocab, std::int64_t pad, float temperature,
              bool per_request, std::uint32_t seed) {
  if (bp::testing::quick_mode() && vocab > 40000) return;
  batch_case c = make_case(rule_of<Rule>(), std::string(Rule::name) + " " + label, batch, max_block, vocab, pad, temperature,
                           per_request, seed);
  const long long accepted = run_and_compare<Rule>(ch, c);
  if (max_block > 1 && vocab > 1) ch.expect(accepted > 0, "%s: no draft was accepted: the case tests too little", c.name.c_str());
}

/// The flattened layout (rows of all requests back to back, cumulative draft counts) decides exactly as
/// the padded one, request by request against the CPU. Requests of size 0 become max_block + 1 (the
/// flattened layout has no empty request): still invalid, their rows present but never read.
template <class Rule>
void flattened_layout(checker& ch, int batch, int max_block, std::int64_t vocab, std::int64_t pad, float temperature,
                      bool per_request, std::uint32_t seed) {
  const cpu::rule rule = rule_of<Rule>();
  batch_case c = make_case(rule, std::string(Rule::name) + " flattened", batch, max_block, vocab, pad, temperature, per_request, seed);
  if (per_request) assign_controls(c, seed);
  for (int& size : c.sizes)
    if (size < 1) size = max_block + 1;
  std::vector<int> offsets{0};
  std::vector<float> logits, q;
  std::vector<bp::token_id> blocks;
  const std::vector<float> unread(static_cast<std::size_t>(c.stride), qnan);
  for (int r = 0; r < batch; ++r) {
    const int b = c.sizes[static_cast<std::size_t>(r)];
    for (int j = 0; j < b; ++j) {
      const float* row = j < max_block ? c.row(r, j) : unread.data();
      logits.insert(logits.end(), row, row + c.stride);
      blocks.push_back(j < max_block ? c.blocks[static_cast<std::size_t>(r) * static_cast<std::size_t>(max_block) + static_cast<std::size_t>(j)] : 0);
      if (j + 1 < b && !c.q.empty()) {
        const float* q_row = j + 1 < max_block ? c.q_row(r, j) : unread.data();
        q.insert(q.end(), q_row, q_row + c.draft_stride);
      }
    }
    offsets.push_back(offsets.back() + b - 1);
  }
  device_buffer<float> d_logits(logits), d_q(q), d_temperatures(c.temperatures);
  device_buffer<bp::sampling_controls> d_controls(c.controls);
  device_buffer<bp::token_id> d_blocks(blocks);
  device_buffer<int> d_offsets(offsets);
  device_buffer<bp::philox_stream> d_rng(c.rng);
  device_buffer<bp::acceptance_result> results(static_cast<std::size_t>(batch));
  device_buffer<bp::status> statuses(static_cast<std::size_t>(batch));
  bp::batched_acceptance_input in;
  in.shape = {batch, max_block, vocab};
  in.target_logits = d_logits.data();
  in.logits_row_stride = c.stride;
  in.blocks = d_blocks.data();
  in.draft_offsets = d_offsets.data();
  in.draft_probs = q.empty() ? nullptr : d_q.data();
  in.draft_row_stride = c.draft_stride;
  in.temperature = c.temperature;
  in.temperatures = per_request ? d_temperatures.data() : nullptr;
  in.per_request_sampling = c.controls.empty() ? nullptr : d_controls.data();
  in.rng = d_rng.data();
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(in.shape));
  const bp::status s = op::run(bp::cuda_backend{}, in, workspace.bytes(), {results.data(), statuses.data()});
  ch.expect(s == bp::status::success, "%s: run: %s", c.name.c_str(), std::string(bp::to_string(s)).c_str());
  BLOCKPILOT_SYNC_OK();
  compare(ch, rule, c, results.download(), statuses.download(), "flattened");
}

template <class Rule>
void argument_checks(checker& ch) {
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  const bp::cuda_backend be{};
  batch_case c = make_case(rule_of<Rule>(), std::string(Rule::name) + " arguments", 6, 4, 3000, 0, 1.0f, false, 5);
  device_case d(c);
  const bp::batched_acceptance_input in = d.input(c);
  const std::size_t need = op::workspace_size(in.shape);
  ch.expect(need > 0 && need % 256 == 0, "%s: workspace size %zu", c.name.c_str(), need);
  device_buffer<std::byte> workspace(need + 256);
  ch.expect(op::run(be, in, workspace.bytes().first(need - 1), d.output()) == bp::status::workspace_too_small, "%s: short workspace", c.name.c_str());
  ch.expect(op::run(be, in, {}, d.output()) == bp::status::workspace_too_small, "%s: no workspace", c.name.c_str());
  ch.expect(op::run(be, in, workspace.bytes().subspan(8, need), d.output()) == bp::status::invalid_argument, "%s: misaligned workspace", c.name.c_str());
  auto bad = in;
  bad.shape.max_block = 0;
  ch.expect(op::run(be, bad, workspace.bytes(), d.output()) == bp::status::invalid_argument, "%s: max_block 0", c.name.c_str());
  bad = in;
  bad.shape.max_block = op::max_block_limit + 1;
  ch.expect(op::run(be, bad, workspace.bytes(), d.output()) == bp::status::invalid_argument, "%s: max_block too large", c.name.c_str());
  bad = in;
  bad.shape.vocab = op::max_vocab + 1;
  ch.expect(op::run(be, bad, workspace.bytes(), d.output()) == bp::status::invalid_argument, "%s: vocab too large", c.name.c_str());
  bad = in;
  bad.logits_row_stride = c.vocab - 1;
  ch.expect(op::run(be, bad, workspace.bytes(), d.output()) == bp::status::invalid_argument, "%s: stride < vocab", c.name.c_str());
  bad = in;
  bad.rng = nullptr;
  ch.expect(op::run(be, bad, workspace.bytes(), d.output()) == bp::status::invalid_argument, "%s: null rng", c.name.c_str());
  bad = in;
  bad.draft_probs = nullptr;
  const bp::status without_q = op::run(be, bad, workspace.bytes(), d.output());
  if constexpr (std::is_same_v<Rule, bp::rejection_sampling>) {
    ch.expect(without_q == bp::status::invalid_argument, "%s: null draft probabilities", c.name.c_str());
  } else {
    ch.expect(without_q == bp::status::success, "%s: draft probabilities are not needed", c.name.c_str());
    BLOCKPILOT_SYNC_OK();
    d.results.fill_bytes(0x7f);
    d.statuses.fill_bytes(0x7f);
  }
  bad = in;
  bad.shape.batch = 0;
  ch.expect(op::run(be, bad, {}, d.output()) == bp::status::success, "%s: empty batch", c.name.c_str());
  BLOCKPILOT_SYNC_OK();
  for (const bp::status s : d.statuses.download())
    if (!ch.expect(static_cast<int>(s) == 0x7f7f7f7f, "%s: a rejected call wrote a status", c.name.c_str())) break;
}

/// Captures one call in a CUDA graph and replays it with new streams (the next decode step's offsets):
/// each replay matches the CPU with the streams of that replay.
template <class Rule>
void graph_replay(checker& ch) {
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  batch_case c = make_case(rule_of<Rule>(), std::string(Rule::name) + " graph", 24, 6, 5000, 0, 0.9f, false, 17);
  device_case d(c);
  device_buffer<std::byte> workspace(op::workspace_size(d.input(c).shape));
  cudaStream_t stream;
  BLOCKPILOT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  BLOCKPILOT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const bp::status s = op::run(bp::cuda_backend{stream}, d.input(c), workspace.bytes(), d.output());
  BLOCKPILOT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ch.expect(s == bp::status::success, "%s: capture: %s", c.name.c_str(), std::string(bp::to_string(s)).c_str());
  cudaGraphExec_t exec;
  BLOCKPILOT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    for (bp::philox_stream& st : c.rng) st.offset += 1;
    d.rng.upload(c.rng);
    BLOCKPILOT_CUDA_OK(cudaGraphLaunch(exec, stream));
    BLOCKPILOT_CUDA_OK(cudaStreamSynchronize(stream));
    const std::string what = "replay " + std::to_string(replay);
    (void)compare(ch, rule_of<Rule>(), c, d.results.download(), d.statuses.download(), what.c_str());
  }
  BLOCKPILOT_CUDA_OK(cudaGraphExecDestroy(exec));
  BLOCKPILOT_CUDA_OK(cudaGraphDestroy(graph));
  BLOCKPILOT_CUDA_OK(cudaStreamDestroy(stream));
}

/// Sampling controls against the CPU, request by request, with per-request temperatures (greedy,
/// sampling, invalid): per-request controls, or `batch_wide` ones for every request.
template <class Rule>
void controls_case(checker& ch, const char* label, int batch, int max_block, std::int64_t vocab,
                   std::optional<bp::sampling_controls> batch_wide, std::uint32_t seed) {
  if (bp::testing::quick_mode() && vocab > 40000) return;
  batch_case c = make_case(rule_of<Rule>(), std::string(Rule::name) + " controls " + label, batch, max_block, vocab, 0, 1.0f,
                           true, seed);
  if (batch_wide) c.sampling = *batch_wide;
  else assign_controls(c, seed);
  (void)run_and_compare<Rule>(ch, c);
}

/// The committed tokens at block positions 1 and 2 of `trials` requests of one call, each with the target
/// rows p_rows at `temperature`, drafts from q_rows (raw q) and its own stream: as test_sampling's
/// run_trials on the CPU. With `broken`, a second call without the controls supplies the replacement token
/// of every rejection (the residual taken from the unprocessed p).
struct gpu_counts {
  bp::testing::six_counts first{}, second{};
  bool ran = true;  ///< every call and every request succeeded
};

template <class Rule>
gpu_counts gpu_trials(const bp::sampling_controls& controls, float temperature, bool broken) {
  namespace t = bp::testing;
  constexpr int trials = 20000, b = 3, vocab = t::six;
  const std::vector<float> rows = t::logits_for(t::p_rows, temperature);
  std::vector<float> logits, q;
  std::vector<bp::token_id> blocks;
  std::vector<bp::philox_stream> rng;
  for (int i = 0; i < trials; ++i) {
    const bp::philox_stream stream{777, static_cast<std::uint64_t>(i)};
    rng.push_back(stream);
    logits.insert(logits.end(), rows.begin(), rows.end());
    for (const auto& row : t::q_rows)
      for (const double x : row) q.push_back(static_cast<float>(x));
    blocks.insert(blocks.end(), {0, t::sample_from(t::q_rows[0], stream.uniform(1, bp::random_domain::draft_sample)),
                                 t::sample_from(t::q_rows[1], stream.uniform(2, bp::random_domain::draft_sample))});
  }
  const std::vector<int> sizes(trials, b);
  device_buffer<float> d_logits(logits), d_q(q);
  device_buffer<bp::token_id> d_blocks(blocks);
  device_buffer<int> d_sizes(sizes);
  device_buffer<bp::philox_stream> d_rng(rng);
  device_buffer<bp::acceptance_result> results(trials);
  device_buffer<bp::status> statuses(trials);
  bp::batched_acceptance_input in;
  in.shape = {trials, b, vocab};
  in.target_logits = d_logits.data();
  in.blocks = d_blocks.data();
  in.block_sizes = d_sizes.data();
  in.draft_probs = d_q.data();
  in.temperature = temperature;
  in.rng = d_rng.data();
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(in.shape));
  gpu_counts counts;
  const auto run = [&](const bp::sampling_controls& with) {
    in.sampling = with;
    results.fill_bytes(0x7f);
    statuses.fill_bytes(0x7f);
    counts.ran = counts.ran && op::run(bp::cuda_backend{}, in, workspace.bytes(), {results.data(), statuses.data()}) == bp::status::success;
    BLOCKPILOT_SYNC_OK();
    for (const bp::status s : statuses.download()) counts.ran = counts.ran && s == bp::status::success;
    std::vector<bp::acceptance_result> out = results.download();
    for (const bp::acceptance_result& r : out) counts.ran = counts.ran && r.accepted >= 0 && r.accepted < b && r.bonus >= 0 && r.bonus < vocab;
    return out;
  };
  const std::vector<bp::acceptance_result> got = run(controls);
  const std::vector<bp::acceptance_result> raw = broken ? run({}) : got;
  if (!counts.ran) return counts;
  for (int i = 0; i < trials; ++i) {
    bp::acceptance_result r = got[static_cast<std::size_t>(i)];
    if (broken && raw[static_cast<std::size_t>(i)].accepted == r.accepted && r.accepted < b - 1) r.bonus = raw[static_cast<std::size_t>(i)].bonus;
    const bp::token_id* block = blocks.data() + static_cast<std::ptrdiff_t>(i) * b;
    ++counts.first[static_cast<std::size_t>(r.accepted >= 1 ? block[1] : r.bonus)];
    if (r.accepted >= 1) ++counts.second[static_cast<std::size_t>(r.accepted >= 2 ? block[2] : r.bonus)];
  }
  return counts;
}

/// Whether both positions pass the chi-square test against the processed target rows.
template <class Rule>
bool gpu_reproduces(checker& ch, const bp::sampling_controls& controls, float temperature, bool broken) {
  namespace t = bp::testing;
  const gpu_counts c = gpu_trials<Rule>(controls, temperature, broken);
  ch.expect(c.ran, "%s: a call or a request of the chi-square batch failed", Rule::name.data());
  int dof_a = 0, dof_b = 0;
  const double a = t::chi_square(c.first, t::processed(t::p_rows[0], controls), dof_a);
  const double b = t::chi_square(c.second, t::processed(t::p_rows[1], controls), dof_b);
  std::printf("acceptance_cuda: %s%s T %g top_k %d top_p %g min_p %g: chi2 %g (%d dof), %g (%d dof)\n", Rule::name.data(),
              broken ? " (broken residual)" : "", temperature, controls.top_k, controls.top_p, controls.min_p, a, dof_a, b, dof_b);
  return t::passes_chi_square(a, dof_a) && t::passes_chi_square(b, dof_b);
}

template <class Rule>
void controls_distribution(checker& ch) {
  if constexpr (std::is_same_v<Rule, bp::greedy_match>) return;
  const bp::sampling_controls cases[] = {{3, 1.0f, 0.0f}, {0, 0.6f, 0.0f}, {0, 1.0f, 0.3f}, {4, 0.6f, 0.3f}, {1, 1.0f, 0.0f}};
  for (const auto& c : cases)
    for (const float t : {1.0f, 0.7f})
      ch.expect(gpu_reproduces<Rule>(ch, c, t, false), "%s: the committed tokens do not follow the processed distribution "
                "(top_k %d top_p %g min_p %g, T %g)", Rule::name.data(), c.top_k, c.top_p, c.min_p, t);
  if constexpr (std::is_same_v<Rule, bp::rejection_sampling>)
    for (const bp::sampling_controls c : {bp::sampling_controls{3, 1.0f, 0.0f}, bp::sampling_controls{0, 0.6f, 0.0f}})
      ch.expect(!gpu_reproduces<Rule>(ch, c, 1.0f, true), "the chi-square test missed a residual from the unprocessed p "
                "(top_k %d top_p %g)", c.top_k, c.top_p);
}

template <class Rule>
void all_cases(checker& ch) {
  argument_checks<Rule>(ch);
  run_case<Rule>(ch, "V=1000 B=5", 44, 5, 1000, 0, 0.8f, false, 1);
  run_case<Rule>(ch, "V=1000+1 B=17 per-request T", 45, 17, 1000, 1, 1.0f, true, 2);  // misaligned rows
  run_case<Rule>(ch, "V=16384 B=3", 22, 3, 16384, 0, 0.7f, false, 3);                  // exactly one segment
  run_case<Rule>(ch, "V=16385 B=9", 22, 9, 16385, 0, 1.0f, false, 4);                  // one element past it
  run_case<Rule>(ch, "V=151936 B=17", 32, 17, 151936, 0, 1.0f, false, 5);
  run_case<Rule>(ch, "V=151936 B=17 T=0", 11, 17, 151936, 0, 0.0f, false, 6);
  run_case<Rule>(ch, "V=3 B=4", 22, 4, 3, 0, 1.0f, false, 7);
  run_case<Rule>(ch, "V=2 B=1", 11, 1, 2, 0, 1.0f, true, 8);
  flattened_layout<Rule>(ch, 45, 17, 1000, 1, 1.0f, true, 9);
  flattened_layout<Rule>(ch, 22, 9, 16385, 0, 0.8f, false, 10);
  graph_replay<Rule>(ch);
  controls_case<Rule>(ch, "V=1000 B=5 per request", 56, 5, 1000, {}, 11);
  controls_case<Rule>(ch, "V=16385 B=9 per request", 28, 9, 16385, {}, 12);
  controls_case<Rule>(ch, "V=151936 B=17 per request", 28, 17, 151936, {}, 13);
  controls_case<Rule>(ch, "V=151936 B=5 batch-wide", 12, 5, 151936, bp::sampling_controls{20, 0.8f, 0.02f}, 14);
  // top-k beyond the unmasked tokens of the masked rows (the k-th weight is 0: the cut becomes 1).
  controls_case<Rule>(ch, "V=1000 B=5 top-k 900", 44, 5, 1000, bp::sampling_controls{900, 1.0f, 0.0f}, 15);
  // Invalid and inactive: no cut kernel runs, every request still reports invalid_argument.
  controls_case<Rule>(ch, "V=1000 B=5 top-k -1", 22, 5, 1000, bp::sampling_controls{-1, 1.0f, 0.0f}, 16);
  controls_case<Rule>(ch, "V=1000 B=5 top-p NaN", 22, 5, 1000, bp::sampling_controls{0, std::nanf(""), 0.0f}, 17);
  controls_distribution<Rule>(ch);
}

}  // namespace

int main() {
  bp::testing::require_device_or_skip("acceptance_cuda");
  checker ch("acceptance_cuda");
  all_cases<bp::greedy_match>(ch);
  all_cases<bp::sample_and_match>(ch);
  all_cases<bp::rejection_sampling>(ch);
  return ch.finish();
}
