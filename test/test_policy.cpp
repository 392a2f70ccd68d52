// The BlockPilot policy end to end on the synthetic pair: sweep, train, held-out evaluation and decoding,
// fallbacks, predictor files, resumable and sharded sweeps, and the evaluation arithmetic by hand.
#define BOOST_TEST_MODULE policy
#include <boost/test/unit_test.hpp>

#include "support/check_error.hpp"
#include "support/test_models.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot_workbench/nn/training.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"

namespace fs = std::filesystem;
namespace bp = blockpilot;
namespace nn = blockpilot::nn;
namespace tt = boost::test_tools;

namespace {

constexpr std::int64_t vocab = 4096;
const std::vector<int> window{14, 15, 16, 17, 18};

bp::synthetic_world make_world(std::int64_t v) { return blockpilot::testing::synthetic_world_of(v); }
using blockpilot::testing::greedy;
using blockpilot::testing::keys_of;

using blockpilot::testing::temp_dir;

using blockpilot::testing::check_error;

/// Counts the draft calls of the drafter it wraps.
template <class Inner>
class counting_drafter {
 public:
  explicit counting_drafter(Inner inner) : inner_(std::move(inner)) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  int max_draft_rows() const { return inner_.max_draft_rows(); }
  bp::status begin(std::span<const bp::token_id> p) { return inner_.begin(p); }
  bp::status commit(int n) { return inner_.commit(n); }
  bp::status draft(const bp::draft_request& r, std::span<bp::token_id> out) {
    ++calls;
    return inner_.draft(r, out);
  }
  std::int64_t calls = 0;

 private:
  Inner inner_;
};

/// Replaces the prefill row's token 0 by `poison`: a verifier whose first row the policy cannot read.
class poisoned_prefill {
 public:
  poisoned_prefill(bp::synthetic_target inner, float poison) : inner_(std::move(inner)), poison_(poison) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  bp::status prefill(std::span<const bp::token_id> p, bp::matrix_view<const float>& logits) {
    if (const bp::status s = inner_.prefill(p, logits); s != bp::status::success) return s;
    row_.assign(logits.data, logits.data + logits.cols);
    row_[0] = poison_;
    logits = {row_.data(), 1, logits.cols};
    return bp::status::success;
  }
  bp::status score(std::span<const bp::token_id> b, bp::matrix_view<const float>& logits) { return inner_.score(b, logits); }
  bp::status commit(int n) { return inner_.commit(n); }

 private:
  bp::synthetic_target inner_;
  float poison_;
  std::vector<float> row_;
};

nn::predictor_metadata predictor_metadata(const bp::compact_features& f, nn::loss_kind loss) {
  nn::predictor_metadata m;
  m.training_block_size = 16;
  m.window_k = 2;
  m.vocab_size = vocab;
  m.feature_extractor = "compact";
  m.feature_parameters = f.metadata();
  m.input_transform = "compact";
  m.loss = std::string(nn::to_string(loss));
  return m;
}

/// An untrained compact predictor policy (enough for the fallback paths).
bp::blockpilot_policy<bp::compact_features> untrained_policy() {
  const bp::compact_features f{64};
  nn::mlp<float> net(nn::mlp_shape{f.feature_count(vocab), {32}, 5});
  blockpilot::nn::initialize(net, 7);
  return {f, nn::predictor<float>{predictor_metadata(f, nn::loss_kind::cross_entropy), std::move(net)}};
}

/// Swept training (1024 prompts, seed 1) and held-out (256, seed 2) sets on a vocab-4096 world, and a
/// compact predictor trained on them with each loss. Built once, on first use (~tens of seconds).
struct trained_setup {
  bp::synthetic_world world = make_world(vocab);
  std::vector<std::vector<bp::token_id>> held_out_prompts = bp::synthetic_prompts(256, vocab, 8, 32, 2);
  bp::policy_dataset train, held_out;
  bp::compact_features features{64};
  nn::training_result cross_entropy, expected_tau;

  trained_setup() {
    bp::synthetic_drafter drafter(world);
    bp::synthetic_target target(world);
    const auto train_prompts = bp::synthetic_prompts(1024, vocab, 8, 32, 1);
    train = bp::sweep_policy_dataset(drafter, target, keys_of(train_prompts.size()), train_prompts, window, greedy(256));
    held_out = bp::sweep_policy_dataset(drafter, target, keys_of(held_out_prompts.size()), held_out_prompts, window,
                                        greedy(256));
    std::vector<std::size_t> order(train.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), std::mt19937_64(0));
    const std::size_t held = order.size() / 5;
    const std::span<const std::size_t> validation_rows(order.data(), held), train_rows(order.data() + held, order.size() - held);
    const auto train_set = bp::make_training_set(train, features, 14, 18, train_rows);
    const auto validation_set = bp::make_training_set(train, features, 14, 18, validation_rows);
    nn::training_options o;
    o.hidden = {256, 256};
    o.max_epochs = 200;
    o.patience = 30;
    o.loss = nn::loss_kind::cross_entropy;
    cross_entropy = nn::train(train_set, validation_set, o);
    o.loss = nn::loss_kind::expected_tau;
    o.cross_entropy_warmup = 30;
    expected_tau = nn::train(train_set, validation_set, o);
  }

  [[nodiscard]] bp::blockpilot_policy<bp::compact_features> policy(nn::loss_kind loss) const {
    const auto& r = loss == nn::loss_kind::cross_entropy ? cross_entropy : expected_tau;
    return {features, nn::predictor<float>{predictor_metadata(features, loss), r.model}};
  }
};

const trained_setup& setup() {
  static const trained_setup s;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(trained_compact_predictor_beats_fixed_16_on_held_out_prompts) {
  const auto& s = setup();
  const auto& d = s.held_out;
  const auto fixed = bp::evaluate_choices(d, "fixed:16", std::vector<int>(d.size(), 16), 14, 18, 16);
  const auto oracle = bp::evaluate_choices(d, "oracle", bp::oracle_choices(d, 14, 18), 14, 18, 16);
  BOOST_TEST_MESSAGE("held out: fixed 16 tau " << fixed.mean_tau << ", oracle tau " << oracle.mean_tau);
  for (const auto loss : {nn::loss_kind::cross_entropy, nn::loss_kind::expected_tau}) {
    auto policy = s.policy(loss);
    const auto r = bp::evaluate_policy(d, std::string(nn::to_string(loss)), policy, 14, 18, 16);
    const auto& best = (loss == nn::loss_kind::cross_entropy ? s.cross_entropy : s.expected_tau).best;
    BOOST_TEST_MESSAGE(r.name << ": best epoch " << best.epoch << ", held-out tau " << r.mean_tau << " (fixed 16 "
                              << fixed.mean_tau << "), gain share " << 100 * r.gain_share.value_or(0) << " %, accuracy "
                              << r.accuracy << ", |b - b*| " << r.mean_abs_error);
    BOOST_TEST(r.fallbacks == 0);
    BOOST_TEST(r.mean_tau > fixed.mean_tau);
  }

  // Decoding with the learned policy: greedy output is the fixed-16 output, the size is the policy's.
  bp::synthetic_drafter drafter(s.world);
  bp::synthetic_target target(s.world), probe(s.world);
  using learned_decoder = bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target,
                                                  bp::blockpilot_policy<bp::compact_features>>;
  learned_decoder learned(drafter, target, s.policy(nn::loss_kind::expected_tau));
  bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<16>> fixed16(drafter, target);
  auto policy = s.policy(nn::loss_kind::expected_tau);
  int checked = 0;
  for (std::size_t i = 0; i < s.held_out_prompts.size() && checked < 4; ++i) {
    const auto& prompt = s.held_out_prompts[i];
    bp::matrix_view<const float> logits;
    BOOST_REQUIRE(probe.prefill(prompt, logits) == bp::status::success);
    const bp::block_size_choice choice = policy.choose({prompt, logits.row(0), 0.0f});
    if (choice.block_size == 16) continue;  // sizes other than 16 are the interesting ones
    ++checked;
    bp::generation_result a, b;
    BOOST_REQUIRE(learned.generate(prompt, greedy(256), a) == bp::status::success);
    BOOST_REQUIRE(fixed16.generate(prompt, greedy(256), b) == bp::status::success);
    BOOST_TEST(a.tokens == b.tokens);
    BOOST_TEST(a.stats.block_size == choice.block_size);
    BOOST_TEST(!a.stats.policy_fallback);
    const auto column = static_cast<std::size_t>(choice.block_size - 14);
    BOOST_TEST(a.stats.tau() == d.taus(i)[column]);  // the sweep measured exactly this decode
  }
  BOOST_TEST(checked == 4);
}

BOOST_AUTO_TEST_CASE(policy_falls_back_on_bad_rows) {
  auto policy = untrained_policy();
  const auto world = make_world(vocab);
  bp::synthetic_target target(world);
  const auto prompts = bp::synthetic_prompts(1, vocab, 8, 32, 3);
  bp::matrix_view<const float> logits;
  BOOST_REQUIRE(target.prefill(prompts[0], logits) == bp::status::success);
  const std::vector<float> good(logits.row(0).begin(), logits.row(0).end());
  BOOST_TEST(!policy.choose({prompts[0], good, 0.0f}).fallback);

  const auto expect_fallback = [&](const std::vector<float>& row) {
    const bp::block_size_choice c = policy.choose({prompts[0], row, 0.0f});
    BOOST_TEST(c.block_size == 16);
    BOOST_TEST(c.fallback);
  };
  auto nan_row = good, inf_row = good;
  nan_row[100] = std::numeric_limits<float>::quiet_NaN();
  inf_row[4095] = std::numeric_limits<float>::infinity();
  expect_fallback(nan_row);
  expect_fallback(inf_row);
  expect_fallback(std::vector<float>(good.begin(), good.begin() + 2048));
  BOOST_TEST(!policy.choose({prompts[0], good, 0.0f}).fallback);  // buffers survive a bad row

  // A network whose outputs are not finite (a NaN weight here) is not used either: B, and it says so.
  const bp::compact_features f{64};
  nn::mlp<float> broken(nn::mlp_shape{f.feature_count(vocab), {32}, 5});
  blockpilot::nn::initialize(broken, 7);
  broken.parameters().back() = std::numeric_limits<float>::quiet_NaN();
  bp::blockpilot_policy<bp::compact_features> broken_policy(
      f, nn::predictor<float>{predictor_metadata(f, nn::loss_kind::cross_entropy), std::move(broken)});
  const bp::block_size_choice c = broken_policy.choose({prompts[0], good, 0.0f});
  BOOST_TEST(c.block_size == 16);
  BOOST_TEST(c.fallback);
  // Nor a standardisation that would make finite features infinite.
  nn::mlp<float> tiny_std(nn::mlp_shape{4, {8}, 5});
  const std::vector<float> mean(4, 0.0f), stddev{1.0f, 1.0f, 1e-40f, 1.0f};
  check_error([&] { tiny_std.set_standardization(mean, stddev); }, {"feature_std", "finite inverse"});

  // In the decoder: a target of another vocabulary decodes at 16 and says so.
  const auto small = make_world(2048);
  bp::synthetic_drafter drafter(small);
  bp::synthetic_target small_target(small);
  bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, bp::blockpilot_policy<bp::compact_features>>
      decoder(drafter, small_target, untrained_policy());
  bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<16>> fixed(drafter, small_target);
  const auto small_prompts = bp::synthetic_prompts(1, 2048, 8, 32, 4);
  bp::generation_result a, b;
  BOOST_REQUIRE(decoder.generate(small_prompts[0], greedy(64), a) == bp::status::success);
  BOOST_REQUIRE(fixed.generate(small_prompts[0], greedy(64), b) == bp::status::success);
  BOOST_TEST(a.stats.block_size == 16);
  BOOST_TEST(a.stats.policy_fallback);
  BOOST_TEST(!b.stats.policy_fallback);
  BOOST_TEST(a.tokens == b.tokens);

  // A non-finite prefill row: the decision is recorded as a fallback whatever the request does next.
  for (const float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    bp::synthetic_drafter d(world);
    poisoned_prefill v(bp::synthetic_target(world), poison);
    bp::speculative_decoder<bp::synthetic_drafter, poisoned_prefill, bp::blockpilot_policy<bp::compact_features>> dec(
        d, v, untrained_policy());
    bp::generation_result r;
    (void)dec.generate(prompts[0], greedy(16), r);
    BOOST_TEST(r.stats.block_size == 16);
    BOOST_TEST(r.stats.policy_fallback);
  }
}

BOOST_AUTO_TEST_CASE(a_predictor_that_does_not_fit_its_extractor_is_refused) {
  // Refused when built, not a fallback on every request: the network's input against the extractor's
  // feature count, its classes against the window, a pooled predictor as a prefill-row one.
  const bp::compact_features f{64};
  const auto make = [&](std::int64_t inputs, std::int64_t classes, std::int64_t pooled) {
    nn::mlp<float> net(nn::mlp_shape{inputs, {32}, classes});
    blockpilot::nn::initialize(net, 7);
    auto m = predictor_metadata(f, nn::loss_kind::cross_entropy);
    m.pooled_rows = pooled;
    return bp::blockpilot_policy<bp::compact_features>(f, nn::predictor<float>{m, std::move(net)});
  };
  BOOST_TEST(make(f.feature_count(vocab), 5, 1).max_block_size() == 18);
  check_error([&] { (void)make(f.feature_count(vocab) + 1, 5, 1); }, {"blockpilot_policy", "takes 74 features", "gives 73"});
  check_error([&] { (void)make(f.feature_count(vocab), 4, 1); }, {"blockpilot_policy", "4 classes", "needs 5"});
  check_error([&] { (void)make(f.feature_count(vocab), 5, 4); }, {"blockpilot_policy", "pools 4 rows"});
  check_error(  // a predictor for no vocabulary would fall back on every request
      [&] {
        auto m = predictor_metadata(f, nn::loss_kind::cross_entropy);
        m.vocab_size = 0;
        (void)bp::blockpilot_policy<bp::compact_features>(f, nn::predictor<float>{m, nn::mlp<float>(nn::mlp_shape{73, {32}, 5})});
      },
      {"blockpilot_policy", "records no vocabulary"});
  // A window outside 1..256, whatever the network: B = 300, B = 2^32 + 16 (which an int would read as 16),
  // a negative k.
  for (const auto& [b, k] : {std::pair<std::int64_t, std::int64_t>{300, 2}, {(std::int64_t{1} << 32) + 16, 2}, {16, -1}}) {
    check_error(
        [&] {
          auto m = predictor_metadata(f, nn::loss_kind::cross_entropy);
          m.training_block_size = b;
          m.window_k = k;
          (void)bp::blockpilot_policy<bp::compact_features>(f, nn::predictor<float>{m, nn::mlp<float>(nn::mlp_shape{73, {32}, 5})});
        },
        {"blockpilot_policy", "must lie within 1..256"});
  }
}

BOOST_AUTO_TEST_CASE(policy_load_round_trip_and_mismatched_extractor) {
  const auto& s = setup();
  const temp_dir dir;
  const fs::path file = dir.path / "compact.safetensors", file_bf16 = dir.path / "compact_bf16.safetensors";
  const auto meta = predictor_metadata(s.features, nn::loss_kind::expected_tau);
  nn::save_predictor(file, s.expected_tau.model, meta);
  nn::save_predictor(file_bf16, nn::mlp<Eigen::bfloat16>(s.expected_tau.model), meta);

  auto in_memory = s.policy(nn::loss_kind::expected_tau);
  auto loaded = bp::load_blockpilot_policy<bp::compact_features>(file);
  auto loaded_bf16 = bp::load_blockpilot_policy<bp::compact_features, nn::mlp<Eigen::bfloat16>>(file_bf16);
  BOOST_TEST(loaded.features().top_k == 64);
  BOOST_TEST(loaded.max_block_size() == 18);
  BOOST_TEST((loaded.metadata().feature_parameters == s.features.metadata()));
  int same = 0, same_bf16 = 0, not_16 = 0;
  for (std::size_t i = 0; i < 50; ++i) {
    const bp::request_features r{{}, s.held_out.row(i), 0.0f};
    const auto want = in_memory.choose(r), got = loaded.choose(r), got_bf16 = loaded_bf16.choose(r);
    BOOST_TEST(!want.fallback);
    same += got.block_size == want.block_size && got.fallback == want.fallback;
    same_bf16 += got_bf16.block_size == want.block_size && !got_bf16.fallback;
    not_16 += want.block_size != 16;
  }
  BOOST_TEST_MESSAGE("50 held-out rows: fp32 file agrees on " << same << ", bf16 file on " << same_bf16
                                                              << "; choices other than 16: " << not_16);
  BOOST_TEST(same == 50);
  BOOST_TEST(same_bf16 >= 45);
  BOOST_TEST(not_16 > 0);

  check_error([&] { (void)bp::load_blockpilot_policy<bp::full_row_features>(file); }, {file.string(), "feature_extractor"});
  // A predictor for another vocabulary is refused at load when the target's is given (else every
  // request would silently fall back to B).
  const auto vocab = loaded.metadata().vocab_size;
  BOOST_TEST(bp::load_blockpilot_policy<bp::compact_features>(file, vocab).metadata().vocab_size == vocab);
  check_error([&] { (void)bp::load_blockpilot_policy<bp::compact_features>(file, vocab + 1); },
              {file.string(), "vocab_size", std::to_string(vocab + 1)});
}

BOOST_AUTO_TEST_CASE(sweep_resumes_from_its_journal) {
  const auto world = make_world(2048);
  bp::synthetic_target target(world);
  const auto prompts = bp::synthetic_prompts(6, 2048, 8, 32, 5);
  const auto keys = keys_of(prompts.size());
  const auto config = greedy(128);
  const temp_dir dir;
  const fs::path journal = dir.path / "journal.jsonl";

  counting_drafter full_drafter(bp::synthetic_drafter{world});
  const auto full = bp::sweep_policy_dataset(full_drafter, target, keys, prompts, window, config, journal);
  std::vector<std::string> lines;
  {
    std::ifstream in(journal);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  BOOST_REQUIRE(lines.size() == 6u);
  {  // an interrupted run: three records and a torn fourth
    std::ofstream out(journal, std::ios::trunc);
    for (std::size_t i = 0; i < 3; ++i) out << lines[i] << '\n';
    out << lines[3].substr(0, lines[3].size() / 2);
  }
  // The draft calls of the three prompts the journal lacks, decoded without a journal.
  counting_drafter rest_drafter(bp::synthetic_drafter{world});
  const std::span<const std::vector<bp::token_id>> last_three(prompts.data() + 3, 3);
  (void)bp::sweep_policy_dataset(rest_drafter, target, std::span<const std::string>(keys).subspan(3), last_three, window,
                                 config);

  counting_drafter resumed_drafter(bp::synthetic_drafter{world});
  const auto resumed = bp::sweep_policy_dataset(resumed_drafter, target, keys, prompts, window, config, journal);
  BOOST_TEST(resumed.prompts == full.prompts);
  BOOST_TEST(resumed.tau == full.tau);
  BOOST_TEST(resumed.prefill_logits == full.prefill_logits);
  BOOST_TEST(resumed_drafter.calls == rest_drafter.calls);
  BOOST_TEST(resumed_drafter.calls < full_drafter.calls);

  // The journal is whole again: a third run decodes nothing.
  counting_drafter third_drafter(bp::synthetic_drafter{world});
  const auto third = bp::sweep_policy_dataset(third_drafter, target, keys, prompts, window, config, journal);
  BOOST_TEST(third_drafter.calls == 0);
  BOOST_TEST(third.tau == full.tau);

  {  // a whole last record that lacks only its newline is kept and ended: the next record goes on a line of its own
    std::ofstream out(journal, std::ios::trunc);
    for (std::size_t i = 0; i < 5; ++i) out << lines[i] << (i < 4 ? "\n" : "");
  }
  for (int run = 0; run < 2; ++run) {
    counting_drafter drafter(bp::synthetic_drafter{world});
    BOOST_TEST(bp::sweep_policy_dataset(drafter, target, keys, prompts, window, config, journal).tau == full.tau);
    BOOST_TEST((run == 0 ? drafter.calls > 0 : drafter.calls == 0), "run " << run);  // the sixth prompt, then none
  }

  const std::vector<int> other{15, 16, 17};
  check_error([&] { (void)bp::sweep_policy_dataset(third_drafter, target, keys, prompts, other, config, journal); },
              {journal.string(), "sizes"});
}

BOOST_AUTO_TEST_CASE(bad_journal_lines_are_errors_naming_file_and_line) {
  const auto world = make_world(2048);
  bp::synthetic_drafter drafter(world);
  bp::synthetic_target target(world);
  const auto prompts = bp::synthetic_prompts(2, 2048, 8, 32, 5);
  const auto keys = keys_of(prompts.size());
  const temp_dir dir;
  const fs::path journal = dir.path / "journal.jsonl";
  const std::string good = R"({"prompt": "0", "sizes": [14, 15, 16, 17, 18], "tau": [3, 3, 3, 3, 3]})";
  const auto with_lines = [&](const std::string& second, const std::string& third = "") {
    std::ofstream(journal, std::ios::trunc) << good << "\n" << second << "\n" << third << (third.empty() ? "" : "\n");
    return [&] { (void)bp::sweep_policy_dataset(drafter, target, keys, prompts, window, greedy(32), journal); };
  };
  const std::string line2 = journal.string() + "' line 2";
  check_error(with_lines(R"({"prompt": "1", "sizes": [14, 15, 16, 17, 18], "tau": [3, 3, -5, 3, 3]})"),
              {line2, "field 'tau'", "outside [1, 16]"});
  check_error(with_lines(R"({"prompt": "1", "sizes": [14, 15, 16, 17, 18], "tau": [3, 3, 1e308, 3, 3]})"),
              {line2, "field 'tau'"});
  check_error(with_lines(R"({"prompt": "1", "sizes": [14, 15, 16, 17, 18], "tau": [3, 3]})"), {line2, "field 'tau'"});
  check_error(with_lines(R"({"sizes": [14, 15, 16, 17, 18], "tau": [3, 3, 3, 3, 3]})"), {line2, "field 'prompt'"});
  check_error(with_lines(R"({"prompt": "1", "sizes": [14, 15, 16, 17, 18], "tau": [3, 3, 3, 3, 3], "seconds": [1, 1, -1, 1, 1]})"),
              {line2, "field 'seconds'"});
  check_error(with_lines("[1, 2]"), {line2, "not a JSON object"});
  // A line that is not JSON is torn only at the end; in the middle it is an error.
  check_error(with_lines("{\"prompt\": ", good), {line2, "not JSON"});
  const auto torn_last = with_lines("{\"prompt\": ");
  BOOST_CHECK_NO_THROW(torn_last());
}

BOOST_AUTO_TEST_CASE(shards_merge_to_the_full_sweep) {
  const auto world = make_world(2048);
  bp::synthetic_drafter drafter(world);
  bp::synthetic_target target(world);
  const auto prompts = bp::synthetic_prompts(8, 2048, 8, 32, 6);
  const auto keys = keys_of(prompts.size());
  const auto config = greedy(128);
  const auto whole = bp::sweep_policy_dataset(drafter, target, keys, prompts, window, config);

  const temp_dir dir;
  std::vector<bp::policy_dataset> parts;
  for (std::size_t shard = 0; shard < 2; ++shard) {
    std::vector<std::string> k;
    std::vector<std::vector<bp::token_id>> p;
    for (std::size_t i = shard; i < prompts.size(); i += 2) {
      k.push_back(keys[i]);
      p.push_back(prompts[i]);
    }
    auto d = bp::sweep_policy_dataset(drafter, target, k, p, window, config);
    d.metadata = {{"generator", "synthetic vocab 2048"}, {"shard", std::to_string(shard) + "/2"}};
    const fs::path out = dir.path / ("shard" + std::to_string(shard));
    bp::write_policy_dataset(d, out);
    parts.push_back(bp::read_policy_dataset(out));
  }
  // The shards, in either order, give the unsharded sweep: its order, its rows and its tau.
  for (const auto& order : {std::vector<std::size_t>{0, 1}, std::vector<std::size_t>{1, 0}}) {
    const auto merged = bp::merge_policy_datasets({parts[order[0]], parts[order[1]]});
    BOOST_TEST(merged.prompts == whole.prompts, tt::per_element());
    BOOST_TEST(merged.sizes == whole.sizes);
    BOOST_TEST(!merged.metadata.contains("shard"));
    BOOST_TEST(merged.tau == whole.tau, tt::per_element());
    BOOST_TEST(merged.prefill_logits == whole.prefill_logits);
    BOOST_TEST(merged.prompt_token_ids == whole.prompt_token_ids);
  }
  // Other sweeps (not the shards of one) join in the order given.
  auto other = parts;
  for (auto& d : other) d.metadata.erase("shard");
  const auto joined = bp::merge_policy_datasets({other[1], other[0]});
  BOOST_TEST(joined.prompts == (std::vector<std::string>{"1", "3", "5", "7", "0", "2", "4", "6"}), tt::per_element());
  check_error([&] { (void)bp::merge_policy_datasets({parts[0], parts[0]}); }, {"'0'", "more than one part"});
  parts[1].metadata["generator"] = "synthetic vocab 4096";
  check_error([&] { (void)bp::merge_policy_datasets(parts); }, {"part 1", "'metadata'"});
}

BOOST_AUTO_TEST_CASE(evaluate_choices_hand_checked) {
  bp::policy_dataset d;
  d.sizes = window;
  d.vocab = 4;
  const std::vector<float> row{0.0f, 1.0f, 2.0f, 3.0f};
  //                                14   15   16   17   18      best (ties to the smaller size)
  d.add("tie", row, std::vector<double>{5.0, 5.2, 5.1, 5.2, 4.9});  // 15 (15 and 17 tie at 5.2)
  d.add("mid", row, std::vector<double>{4.0, 4.1, 4.5, 4.4, 4.3});  // 16
  d.add("top", row, std::vector<double>{6.0, 6.1, 6.2, 6.3, 6.6});  // 18
  BOOST_TEST(bp::oracle_choices(d, 14, 18) == (std::vector<int>{15, 16, 18}), tt::per_element());

  // Chosen 17, 16, 17: tau 5.2 + 4.5 + 6.3 = 16.0; oracle 5.2 + 4.5 + 6.6 = 16.3; fixed 16: 5.1 + 4.5 + 6.2 = 15.8.
  const auto r = bp::evaluate_choices(d, "hand", {17, 16, 17}, 14, 18, 16, 1);
  BOOST_TEST(r.mean_tau == 16.0 / 3, tt::tolerance(1e-12));
  BOOST_TEST(r.regret == 0.3 / 3, tt::tolerance(1e-9));                       // (16.3 - 16.0) / 3
  BOOST_TEST(r.gain_share.value() == 0.4, tt::tolerance(1e-9));               // (16.0 - 15.8) / (16.3 - 15.8)
  BOOST_TEST(r.reference_tau == 15.8 / 3, tt::tolerance(1e-12));
  BOOST_TEST(r.accuracy == 1.0 / 3, tt::tolerance(1e-12));                    // only "mid"; 17 loses the tie to 15
  BOOST_TEST(r.mean_abs_error == 1.0, tt::tolerance(1e-12));                  // (|17-15| + 0 + |17-18|) / 3
  BOOST_TEST(r.fallbacks == 1);
  std::vector<std::vector<int>> confusion(5, std::vector<int>(5, 0));         // [chosen - 14][best - 14]
  confusion[3][1] = confusion[2][2] = confusion[3][4] = 1;
  BOOST_TEST((r.confusion == confusion));

  const auto oracle = bp::evaluate_choices(d, "oracle", bp::oracle_choices(d, 14, 18), 14, 18, 16);
  BOOST_TEST(oracle.regret == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(oracle.gain_share.value() == 1.0, tt::tolerance(1e-12));
  BOOST_TEST(oracle.accuracy == 1.0, tt::tolerance(1e-12));
  const auto fixed = bp::evaluate_choices(d, "fixed:16", {16, 16, 16}, 14, 18, 16);
  BOOST_TEST(fixed.gain_share.value() == 0.0, tt::tolerance(1e-12));
  // A window whose oracle does not beat the reference has no gain to share (not 0 %): a one-size window,
  // and a window 14..15 whose oracle (5.2 + 4.1 + 6.1) trails fixed 16.
  BOOST_TEST(!bp::evaluate_choices(d, "one size", {16, 16, 16}, 16, 16, 16).gain_share.has_value());
  BOOST_TEST(!bp::evaluate_choices(d, "below", {14, 15, 15}, 14, 15, 16).gain_share.has_value());
  BOOST_TEST(bp::to_json(fixed)["gain_share"] == 0.0);
  BOOST_TEST(bp::to_json(bp::evaluate_choices(d, "one size", {16, 16, 16}, 16, 16, 16))["gain_share"].is_null());
  BOOST_TEST(fixed.mean_tau == 15.8 / 3, tt::tolerance(1e-12));
  BOOST_TEST(fixed.mean_abs_error == 1.0, tt::tolerance(1e-12));              // (1 + 0 + 2) / 3

  check_error([&] { (void)bp::evaluate_choices(d, "bad", {16, 16, 19}, 14, 18, 16); }, {"bad", "19"});
  check_error([&] { (void)bp::oracle_choices(d, 13, 17); }, {"13"});
  check_error([&] { (void)bp::evaluate_choices(d, "short", {16, 16}, 14, 18, 16); }, {"short", "2 choices for 3 prompts"});
  check_error([&] { (void)bp::evaluate_choices(d, "empty", {16, 16, 16}, 16, 15, 16); }, {"16:15", "exceeds"});
}

BOOST_AUTO_TEST_CASE(policy_dataset_round_trip_and_errors) {
  bp::policy_dataset d;
  d.sizes = window;
  d.vocab = 3;
  d.metadata = {{"generator", "hand"}, {"temperature", "0"}};
  d.add("a", std::vector<float>{0.5f, -1.0f, -std::numeric_limits<float>::infinity()},
        std::vector<double>{5.0, 5.25, 5.1, 5.2, 1.0 / 3});
  d.add("b \"quoted\"", std::vector<float>{1e-30f, 2.0f, 3.0f}, std::vector<double>{4.0, 4.1, 4.5, 4.4, 4.3});
  const temp_dir dir;
  bp::write_policy_dataset(d, dir.path / "ok");
  const auto back = bp::read_policy_dataset(dir.path / "ok");
  BOOST_TEST(back.sizes == d.sizes);
  BOOST_TEST(back.prompts == d.prompts);
  BOOST_TEST(back.vocab == d.vocab);
  BOOST_TEST(back.prefill_logits == d.prefill_logits);
  BOOST_TEST(back.tau == d.tau);
  BOOST_TEST((back.metadata == d.metadata));
  for (const int b : window) BOOST_TEST(fs::exists(dir.path / "ok" / (std::to_string(b) + ".json")));

  // tau of shape [2][4] next to 5 block sizes.
  const fs::path bad = dir.path / "bad";
  fs::create_directories(bad);
  bp::io::safetensors_writer w;
  const std::vector<float> logits(2 * 3, 0.0f);
  const std::vector<double> tau(2 * 4, 4.0);
  const std::vector<std::int32_t> sizes(window.begin(), window.end());
  w.add<float>("prefill_logits", {2, 3}, logits);
  w.add<double>("tau", {2, 4}, tau);
  w.add<std::int32_t>("block_sizes", {5}, sizes);
  w.set_metadata("format", "blockpilot-policy-dataset");
  w.set_metadata("prompts", R"(["a", "b"])");
  w.write(bad / bp::policy_dataset_file);
  check_error([&] { (void)bp::read_policy_dataset(bad); }, {(bad / bp::policy_dataset_file).string(), "'tau'"});

  // Each field of a well-shaped file checked: sizes, prompt keys, tau values.
  const auto write = [&](std::vector<std::int32_t> sizes, std::string prompts, std::vector<double> tau) {
    bp::io::safetensors_writer f;
    f.add<float>("prefill_logits", {2, 3}, logits);
    f.add<double>("tau", {2, static_cast<std::int64_t>(sizes.size())}, tau);
    f.add<std::int32_t>("block_sizes", {static_cast<std::int64_t>(sizes.size())}, sizes);
    f.set_metadata("format", "blockpilot-policy-dataset");
    f.set_metadata("prompts", prompts);
    f.write(bad / bp::policy_dataset_file);
    return bad;
  };
  BOOST_CHECK_NO_THROW((void)bp::read_policy_dataset(write({1, 2}, R"(["a", "b"])", {1, 1.5, 1, 2})));
  check_error([&] { (void)bp::read_policy_dataset(write({2, 2}, R"(["a", "b"])", {1, 1, 1, 1})); }, {"'block_sizes'", "strictly"});
  check_error([&] { (void)bp::read_policy_dataset(write({1, 257}, R"(["a", "b"])", {1, 1, 1, 1})); }, {"'block_sizes'", "1..256"});
  check_error([&] { (void)bp::read_policy_dataset(write({1, 2}, R"(["a", "a"])", {1, 1, 1, 1})); }, {"'prompts'", "twice"});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double t : {nan, -5.0, 1e9})
    check_error([&] { (void)bp::read_policy_dataset(write({1, 2}, R"(["a", "b"])", {1, 1, t, 1})); }, {"'tau'", "entry 2"});
}
