// The refining policy (a second decision from features pooled over the first committed rows): the
// rows the decoder hands to per-step policies, pooled features, the switch, its fallbacks, predictor
// files, pooled sweep data, and its held-out gain over the prefill-only policy on the synthetic pair.
#define BOOST_TEST_MODULE refining
#include <boost/test/unit_test.hpp>

#include "support/check_error.hpp"
#include "support/test_models.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot_workbench/nn/training.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"

namespace bp = blockpilot;
namespace nn = blockpilot::nn;
namespace tt = boost::test_tools;
using blockpilot::testing::check_error;
using blockpilot::testing::temp_dir;

namespace {

constexpr std::int64_t vocab = 4096;
const std::vector<int> window{14, 15, 16, 17, 18};

bp::synthetic_world make_world() { return blockpilot::testing::synthetic_world_of(vocab); }
using blockpilot::testing::greedy;
using blockpilot::testing::keys_of;

nn::predictor_metadata metadata(const bp::compact_features& f, std::int64_t pooled_rows) {
  nn::predictor_metadata m;
  m.vocab_size = vocab;
  m.feature_extractor = "compact";
  m.feature_parameters = f.metadata();
  m.input_transform = "compact";
  m.pooled_rows = pooled_rows;
  return m;
}

/// A second stage that always picks class `c` (zero weights, one positive output bias).
nn::predictor<float> constant_predictor(const bp::compact_features& f, std::int64_t pooled_rows, int c) {
  nn::mlp<float> net(nn::mlp_shape{f.feature_count(vocab), {8}, 5});
  net.bias(1)[static_cast<std::size_t>(c)] = 1.0f;
  return {metadata(f, pooled_rows), std::move(net)};
}

/// Wraps the synthetic target and keeps a copy of the rows of its last score call.
class copying_target {
 public:
  explicit copying_target(const bp::synthetic_world& w) : inner_(w) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  bp::status prefill(std::span<const bp::token_id> p, bp::matrix_view<const float>& l) { return inner_.prefill(p, l); }
  bp::status score(std::span<const bp::token_id> b, bp::matrix_view<const float>& l) {
    const bp::status s = inner_.score(b, l);
    last.assign(l.data, l.data + l.rows * l.cols);
    return s;
  }
  bp::status commit(int n) { return inner_.commit(n); }
  std::vector<float> last;

 private:
  bp::synthetic_target inner_;
};

/// A fixed size that checks the rows it is handed against the verifier's last score.
struct row_checking_policy {
  const copying_target* target;
  int size = 8;
  int steps = 0;
  bool rows_ok = true;
  [[nodiscard]] int max_block_size() const { return size; }
  [[nodiscard]] bp::block_size_choice choose(const bp::request_features&) { return {size, false}; }
  [[nodiscard]] int next(const bp::step_record& r) {
    ++steps;
    const auto n = static_cast<std::size_t>(r.target_logits.rows * r.target_logits.cols);
    rows_ok = rows_ok && r.target_logits.rows == r.accepted + 1 && r.target_logits.cols == vocab &&
              std::equal(target->last.begin(), target->last.begin() + static_cast<std::ptrdiff_t>(n), r.target_logits.data);
    return size;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(decoder_hands_the_committed_rows_to_per_step_policies) {
  const auto world = make_world();
  bp::synthetic_drafter drafter(world);
  copying_target target(world);
  bp::speculative_decoder<bp::synthetic_drafter, copying_target, row_checking_policy> decoder(drafter, target,
                                                                                           {&target});
  bp::generation_result r;
  for (const auto& prompt : bp::synthetic_prompts(4, vocab, 8, 32, 11)) {
    BOOST_REQUIRE(decoder.generate(prompt, greedy(64), r) == bp::status::success);
  }
  BOOST_TEST(decoder.policy().steps > 8);
  BOOST_TEST(decoder.policy().rows_ok);
}

BOOST_AUTO_TEST_CASE(pooled_features_average_the_extractor) {
  const auto world = make_world();
  bp::synthetic_target target(world);
  const bp::compact_features f{16};
  const auto prompt = bp::synthetic_prompts(1, vocab, 8, 32, 12)[0];
  bp::matrix_view<const float> prefill, block;
  BOOST_REQUIRE(target.prefill(prompt, prefill) == bp::status::success);
  const std::vector<float> first(prefill.data, prefill.data + vocab);
  const std::vector<bp::token_id> tokens{1, 2, 3};
  BOOST_REQUIRE(target.score(tokens, block) == bp::status::success);

  bp::pooled_features<bp::compact_features> pool(f, 3);
  pool.reset(vocab);
  BOOST_TEST(pool.add(first) == bp::status::success);
  BOOST_TEST(pool.add(block.row(0)) == bp::status::success);
  BOOST_TEST(!pool.full());
  BOOST_TEST(pool.add(block.row(1)) == bp::status::success);
  BOOST_TEST(pool.full());
  BOOST_TEST(pool.add(block.row(2)) == bp::status::success);  // full: ignored
  BOOST_TEST(pool.rows() == 3);

  const auto n = static_cast<std::size_t>(f.feature_count(vocab));
  std::vector<float> workspace(f.workspace_size(vocab)), a(n), b(n), c(n);
  BOOST_REQUIRE(f.extract(first, workspace, a) == bp::status::success);
  BOOST_REQUIRE(f.extract(block.row(0), workspace, b) == bp::status::success);
  BOOST_REQUIRE(f.extract(block.row(1), workspace, c) == bp::status::success);
  const auto mean = pool.mean();
  for (std::size_t i = 0; i < n; ++i) BOOST_TEST(mean[i] == (a[i] + b[i] + c[i]) / 3.0f, tt::tolerance(1e-5f));

  pool.reset(vocab);
  BOOST_TEST(pool.rows() == 0);
  std::vector<float> bad = first;
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(pool.add(bad) == bp::status::non_finite_logits);
  BOOST_TEST(pool.add(std::span<const float>(first).first(100)) == bp::status::invalid_argument);
  BOOST_TEST(pool.rows() == 0);
  check_error([&] { bp::pooled_features<bp::compact_features>(f, 0); }, {"rows_wanted"});
}

BOOST_AUTO_TEST_CASE(refining_policy_switches_once_the_pool_is_full) {
  const auto world = make_world();
  bp::synthetic_target target(world);
  const bp::compact_features f{16};
  const auto prompt = bp::synthetic_prompts(1, vocab, 8, 32, 13)[0];
  bp::matrix_view<const float> prefill, block;
  BOOST_REQUIRE(target.prefill(prompt, prefill) == bp::status::success);
  const std::vector<float> first(prefill.data, prefill.data + vocab);
  const std::vector<bp::token_id> tokens{1, 2, 3, 4};
  BOOST_REQUIRE(target.score(tokens, block) == bp::status::success);

  bp::refining_policy<bp::fixed_block_size<16>, bp::compact_features> policy({}, f, constant_predictor(f, 5, 4));
  BOOST_TEST(policy.max_block_size() == 18);
  for (int request = 0; request < 2; ++request) {  // the second request starts over
    BOOST_TEST(policy.choose({prompt, first, 0.0f}).block_size == 16);
    BOOST_TEST(policy.next({0, 16, 1, block.rows_slice(0, 2)}) == 16);  // 3 rows pooled
    BOOST_TEST(!policy.refined());
    BOOST_TEST(policy.next({1, 16, 2, block.rows_slice(0, 3)}) == 18);  // 6 >= 5 rows
    BOOST_TEST(policy.refined());
    BOOST_TEST(policy.next({2, 18, 0, block.rows_slice(0, 1)}) == 18);
  }

  // A row the extractor rejects settles on the first decision.
  std::vector<float> bad(first);
  bad[3] = std::numeric_limits<float>::infinity();
  BOOST_TEST(policy.choose({prompt, first, 0.0f}).block_size == 16);
  BOOST_TEST(policy.next({0, 16, 0, bp::matrix_view<const float>(bad.data(), 1, vocab)}) == 16);
  BOOST_TEST(policy.next({1, 16, 3, block}) == 16);
  BOOST_TEST(!policy.refined());

  // A second predictor of another vocabulary never overrides the first decision.
  auto other = constant_predictor(f, 5, 4);
  other.metadata.vocab_size = vocab + 1;
  bp::refining_policy<bp::fixed_block_size<16>, bp::compact_features> foreign({}, f, std::move(other));
  BOOST_TEST(foreign.choose({prompt, first, 0.0f}).block_size == 16);
  BOOST_TEST(foreign.next({0, 16, 3, block}) == 16);
  BOOST_TEST(foreign.next({1, 16, 3, block}) == 16);
  BOOST_TEST(!foreign.refined());

  // Nor does one whose outputs are not finite (a NaN bias): it keeps the first decision, unrefined.
  auto broken = constant_predictor(f, 5, 4);
  broken.network.bias(1)[2] = std::numeric_limits<float>::quiet_NaN();
  bp::refining_policy<bp::fixed_block_size<16>, bp::compact_features> unusable({}, f, std::move(broken));
  BOOST_TEST(unusable.choose({prompt, first, 0.0f}).block_size == 16);
  BOOST_TEST(unusable.next({0, 16, 3, block}) == 16);
  BOOST_TEST(unusable.next({1, 16, 3, block}) == 16);
  BOOST_TEST(!unusable.refined());

  // Greedy decoding stays exact: the refined decode equals the fixed-16 one token for token.
  bp::synthetic_drafter drafter(world);
  bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, decltype(policy)> refined(drafter, target, policy);
  bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, bp::fixed_block_size<16>> fixed(drafter, target);
  bp::generation_result a, b;
  BOOST_REQUIRE(refined.generate(prompt, greedy(200), a) == bp::status::success);
  BOOST_REQUIRE(fixed.generate(prompt, greedy(200), b) == bp::status::success);
  BOOST_TEST(a.tokens == b.tokens);
  BOOST_TEST(refined.policy().refined());
  BOOST_TEST(a.stats.steps_by_block[16] >= 1);
  BOOST_TEST(a.stats.steps_by_block[18] >= 1);
  BOOST_TEST(a.stats.steps_by_block[16] + a.stats.steps_by_block[18] == a.stats.steps);
}

BOOST_AUTO_TEST_CASE(predictor_files_say_how_many_rows_they_pool) {
  const temp_dir dir;
  const bp::compact_features f{16};
  const auto pooled = dir.path / "pooled.safetensors", single = dir.path / "single.safetensors";
  const auto p = constant_predictor(f, 8, 1);
  nn::save_predictor(pooled, p.network, p.metadata);
  nn::save_predictor(single, p.network, metadata(f, 1));
  BOOST_TEST(nn::load_predictor<float>(pooled).metadata.pooled_rows == 8);

  const auto load_refining = [](const std::filesystem::path& f) {
    return bp::load_refining_policy<bp::fixed_block_size<16>, bp::compact_features>({}, f);
  };
  BOOST_TEST(load_refining(pooled).metadata().pooled_rows == 8);
  check_error([&] { (void)load_refining(single); }, {"single.safetensors", "pooled_rows"});
  check_error([&] { (void)bp::load_blockpilot_policy<bp::compact_features>(pooled); }, {"pooled.safetensors", "pooled_rows"});
  check_error([&] { (void)bp::load_refining_policy<bp::fixed_block_size<16>, bp::full_row_features>({}, pooled); },
              {"feature_extractor"});
  check_error([&] { nn::save_predictor(dir.path / "bad.safetensors", p.network, metadata(f, 0)); }, {"pooled_rows"});
}

namespace {

/// Training (768 prompts) and held-out (256) sweeps with pooled features of 8 rows, and both
/// stages trained with the expected-tau loss. Built once (~a minute).
struct trained_stages {
  bp::synthetic_world world = make_world();
  std::vector<std::vector<bp::token_id>> train_prompts = bp::synthetic_prompts(768, vocab, 8, 32, 21);
  std::vector<std::vector<bp::token_id>> held_out_prompts = bp::synthetic_prompts(256, vocab, 8, 32, 22);
  bp::compact_features features{64};
  bp::policy_dataset train, held_out;
  nn::mlp<float> first, second;

  trained_stages() {
    bp::synthetic_drafter drafter(world);
    bp::synthetic_target target(world);
    train = bp::sweep_policy_dataset(drafter, target, keys_of(train_prompts.size()), train_prompts, window, greedy(256));
    held_out = bp::sweep_policy_dataset(drafter, target, keys_of(held_out_prompts.size()), held_out_prompts, window,
                                        greedy(256));
    bp::add_pooled_features(train, drafter, target, train_prompts, features, 8, 16, greedy(256));
    bp::add_pooled_features(held_out, drafter, target, held_out_prompts, features, 8, 16, greedy(256));
    std::vector<std::size_t> order(train.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), std::mt19937_64(0));
    const std::span<const std::size_t> validation(order.data(), order.size() / 5),
        fit(order.data() + order.size() / 5, order.size() - order.size() / 5);
    nn::training_options o;
    o.hidden = {128, 128};
    o.max_epochs = 150;
    o.patience = 30;
    o.loss = nn::loss_kind::expected_tau;
    o.cross_entropy_warmup = 20;
    first = nn::train(bp::make_training_set(train, features, 14, 18, fit), bp::make_training_set(train, features, 14, 18, validation), o).model;
    second = nn::train(bp::make_pooled_training_set(train, 14, 18, fit), bp::make_pooled_training_set(train, 14, 18, validation), o).model;
  }
};

const trained_stages& stages() {
  static const trained_stages s;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(pooled_sweep_data_round_trip_and_merge) {
  const auto& s = stages();
  BOOST_REQUIRE(s.train.pooled.has_value());
  BOOST_TEST(s.train.pooled->rows == 8);
  BOOST_TEST(s.train.pooled->block_size == 16);
  BOOST_TEST(s.train.pooled->dim == s.features.feature_count(vocab));
  BOOST_TEST(s.train.pooled->values.size() == s.train.size() * static_cast<std::size_t>(s.train.pooled->dim));
  BOOST_TEST((s.train.pooled->extractor == s.features.metadata()));

  const temp_dir dir;
  bp::write_policy_dataset(s.held_out, dir.path / "held");
  const auto back = bp::read_policy_dataset(dir.path / "held");
  BOOST_REQUIRE(back.pooled.has_value());
  BOOST_TEST(back.pooled->same_recipe(*s.held_out.pooled));
  BOOST_TEST(back.pooled->values == s.held_out.pooled->values);
  BOOST_TEST((back.metadata == s.held_out.metadata));

  bp::policy_dataset other = s.held_out;
  for (std::size_t i = 0; i < other.size(); ++i) other.prompts[i] = "other " + std::to_string(i);
  const auto merged = bp::merge_policy_datasets({s.held_out, other});
  BOOST_TEST(merged.size() == 2 * s.held_out.size());
  BOOST_TEST(merged.pooled->values.size() == merged.size() * static_cast<std::size_t>(merged.pooled->dim));
  BOOST_TEST((std::vector<float>(merged.pooled->row(s.held_out.size()).begin(), merged.pooled->row(s.held_out.size()).end()) ==
              std::vector<float>(s.held_out.pooled->row(0).begin(), s.held_out.pooled->row(0).end())));
  other.pooled.reset();
  check_error([&] { (void)bp::merge_policy_datasets({s.held_out, other}); }, {"pooled_features"});

  check_error([&] {
    bp::policy_dataset d = s.held_out;
    bp::synthetic_drafter drafter(s.world);
    bp::synthetic_target target(s.world);
    bp::add_pooled_features(d, drafter, target, std::span(s.held_out_prompts).first(3), s.features, 8, 16, greedy(8));
  }, {"prompts"});
}

BOOST_AUTO_TEST_CASE(refining_beats_the_prefill_policy_on_held_out_prompts) {
  const auto& s = stages();
  using first_policy = bp::blockpilot_policy<bp::compact_features>;
  nn::predictor_metadata first_meta = metadata(s.features, 1), second_meta = metadata(s.features, 8);
  const first_policy first(s.features, {first_meta, s.first});
  bp::synthetic_drafter drafter(s.world);
  bp::synthetic_target target(s.world);

  // Live decodes of every held-out prompt: fixed 16, the prefill-only policy, and the refining one.
  const auto mean_tau = [&]<class Policy>(Policy policy) {
    bp::speculative_decoder<bp::synthetic_drafter, bp::synthetic_target, Policy> decoder(drafter, target, std::move(policy));
    double sum = 0;
    bp::generation_result r;
    for (const auto& prompt : s.held_out_prompts) {
      BOOST_REQUIRE(decoder.generate(prompt, greedy(256), r) == bp::status::success);
      sum += r.stats.tau();
    }
    return sum / static_cast<double>(s.held_out_prompts.size());
  };
  const double fixed = mean_tau(bp::fixed_block_size<16>{});
  const double prefill_only = mean_tau(first);
  const double refined = mean_tau(bp::refining_policy<first_policy, bp::compact_features>(first, s.features, {second_meta, s.second}));
  const auto oracle = bp::evaluate_choices(s.held_out, "oracle", bp::oracle_choices(s.held_out, 14, 18), 14, 18, 16);
  const auto share = [&](double tau) { return 100 * (tau - fixed) / (oracle.mean_tau - fixed); };
  BOOST_TEST_MESSAGE("held-out live tau: fixed 16 " << fixed << ", prefill policy " << prefill_only << " (" << share(prefill_only)
                                                    << " % of the oracle gain), refining " << refined << " (" << share(refined)
                                                    << " %), oracle " << oracle.mean_tau);
  BOOST_TEST(prefill_only > fixed);
  BOOST_TEST(refined > prefill_only);

  // The dataset view of the second stage agrees in direction with the live decodes.
  const auto pooled = bp::evaluate_pooled_predictor(s.held_out, "pooled", nn::predictor<float>{second_meta, s.second}, 14, 18, 16);
  BOOST_TEST(pooled.fallbacks == 0);
  BOOST_TEST(pooled.mean_tau > fixed);
  auto other_vocab = second_meta;
  other_vocab.vocab_size += 1;
  check_error([&] { (void)bp::evaluate_pooled_predictor(s.held_out, "other", nn::predictor<float>{other_vocab, s.second}, 14, 18, 16); },
              {"other", "vocabulary"});
}
