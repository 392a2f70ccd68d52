// Tests of the prompt feature extractors: a hand-checked prompt, a naive reference and the lookup drafter
// itself on random prompts, the analysed tail, status codes, metadata, the combined extractor, prompt
// tokens in policy datasets, and a predictor that learns from the prompt what the last row cannot show.
#define BOOST_TEST_MODULE prompt_features
#include <boost/test/unit_test.hpp>

#include "support/check_error.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/prompt.hpp"
#include "blockpilot/features/prompt_compact.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "blockpilot_workbench/nn/training.hpp"

namespace bp = blockpilot;
namespace tt = boost::test_tools;
using bp::testing::check_error;
using bp::testing::temp_dir;

namespace {

std::vector<float> extract(const bp::prompt_features& f, std::span<const bp::token_id> prompt,
                           bp::status expect = bp::status::success) {
  std::vector<float> out(static_cast<std::size_t>(f.feature_count())), workspace(f.workspace_size());
  BOOST_TEST((f.extract({prompt, {}, 0.0f}, workspace, out) == expect));
  return out;
}

std::vector<bp::token_id> random_prompt(std::size_t length, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  std::vector<bp::token_id> t(length);
  for (auto& x : t) x = token(gen);
  // Copy a few earlier spans forward, as a prompt that quotes itself does.
  for (std::size_t copies = 0; copies < length / 16 && length > 8; ++copies) {
    const std::size_t from = gen() % (length / 2), to = length / 2 + gen() % (length / 2), n = 1 + gen() % 8;
    for (std::size_t j = 0; j < n && to + j < length; ++j) t[to + j] = t[from + j];
  }
  return t;
}

/// The statistics by brute force: for each position the most recent earlier occurrence of each n-gram,
/// found by scanning backwards, in double precision.
std::vector<double> reference(std::span<const bp::token_id> full, const bp::prompt_features& f) {
  const auto t = full.last(std::min(full.size(), static_cast<std::size_t>(f.max_prompt_tokens)));
  const std::size_t length = t.size();
  const double positions = static_cast<double>(std::max<std::size_t>(length - 1, 1));
  std::vector<double> out(static_cast<std::size_t>(f.feature_count()), 0.0);
  const auto earlier = [&](std::size_t i, int n) -> std::int64_t {  // end of the most recent t[i-n..i) before i
    if (static_cast<std::size_t>(n) > i) return -1;
    for (std::size_t end = i - 1; end >= static_cast<std::size_t>(n); --end)
      if (std::equal(t.begin() + static_cast<std::ptrdiff_t>(end) - n, t.begin() + static_cast<std::ptrdiff_t>(end),
                     t.begin() + static_cast<std::ptrdiff_t>(i) - n))
        return static_cast<std::int64_t>(end);
    return -1;
  };
  for (std::size_t i = 1; i < length; ++i) {
    std::int64_t lookup = -1;
    for (int n = f.max_ngram; n >= 1; --n) {
      const auto from = earlier(i, n);
      if (from < 0) continue;
      out[static_cast<std::size_t>(f.repeat_offset(n))] += 1 / positions;
      out[static_cast<std::size_t>(f.hit_offset(n))] += (t[static_cast<std::size_t>(from)] == t[i]) / positions;
      if (lookup < 0) lookup = from;
    }
    if (lookup < 0) continue;
    const auto from = static_cast<std::size_t>(lookup);
    out[static_cast<std::size_t>(f.offset(bp::prompt_statistic::lookup_hit))] += (t[from] == t[i]) / positions;
    int a = 0;
    while (a < f.draft_tokens && from + static_cast<std::size_t>(a) < i && i + static_cast<std::size_t>(a) < length &&
           t[from + static_cast<std::size_t>(a)] == t[i + static_cast<std::size_t>(a)])
      ++a;
    out[static_cast<std::size_t>(f.offset(bp::prompt_statistic::lookup_accepted))] += a / positions;
  }
  std::vector<bp::token_id> sorted(t.begin(), t.end());
  std::sort(sorted.begin(), sorted.end());
  out[static_cast<std::size_t>(f.offset(bp::prompt_statistic::distinct_share))] =
      static_cast<double>(std::unique(sorted.begin(), sorted.end()) - sorted.begin()) / static_cast<double>(length);
  out[static_cast<std::size_t>(f.offset(bp::prompt_statistic::log_length))] = std::log1p(static_cast<double>(full.size()));
  return out;
}

}  // namespace

static_assert(bp::request_feature_extractor<bp::prompt_features>);
static_assert(bp::request_feature_extractor<bp::prompt_compact_features>);
static_assert(!bp::feature_extractor<bp::prompt_features>);
static_assert(bp::policy_feature_extractor<bp::compact_features> && bp::policy_feature_extractor<bp::prompt_features>);
static_assert(!bp::policy_feature_extractor<int>);

BOOST_AUTO_TEST_CASE(hand_checked_prompt) {
  // a b c a b c a b c: positions 1..8; the 1-gram repeats from position 4, the 2-gram from 5, the 3-gram from 6,
  // every repeat predicts the next token. Drafts accepted (8 per block, never past what was read): 3, 3, 3, 2, 1.
  const std::vector<bp::token_id> t{1, 2, 3, 1, 2, 3, 1, 2, 3};
  const bp::prompt_features f{3, 8, 4096};
  const auto out = extract(f, t);
  BOOST_TEST(out.size() == 10u);
  BOOST_TEST(out[f.offset(bp::prompt_statistic::log_length)] == std::log1p(9.0), tt::tolerance(1e-6));
  BOOST_TEST(out[f.offset(bp::prompt_statistic::distinct_share)] == 3.0 / 9, tt::tolerance(1e-6));
  BOOST_TEST(out[f.offset(bp::prompt_statistic::lookup_hit)] == 5.0 / 8, tt::tolerance(1e-6));
  BOOST_TEST(out[f.offset(bp::prompt_statistic::lookup_accepted)] == 12.0 / 8, tt::tolerance(1e-6));
  for (int n = 1; n <= 3; ++n) {
    BOOST_TEST(out[static_cast<std::size_t>(f.repeat_offset(n))] == (6 - n) / 8.0, tt::tolerance(1e-6));
    BOOST_TEST(out[static_cast<std::size_t>(f.hit_offset(n))] == (6 - n) / 8.0, tt::tolerance(1e-6));
  }
  // A repeat that predicts wrongly: a b a c — "a" recurs at position 2 but was followed by b, not c.
  const std::vector<bp::token_id> u{7, 8, 7, 9};
  const auto v = extract(f, u);
  BOOST_TEST(v[static_cast<std::size_t>(f.repeat_offset(1))] == 1.0 / 3, tt::tolerance(1e-6));
  BOOST_TEST(v[static_cast<std::size_t>(f.hit_offset(1))] == 0.0);
  BOOST_TEST(v[f.offset(bp::prompt_statistic::lookup_accepted)] == 0.0);
  // One token: nothing to predict, every share 0.
  const auto one = extract(f, std::vector<bp::token_id>{5});
  BOOST_TEST(one[f.offset(bp::prompt_statistic::distinct_share)] == 1.0f);
  BOOST_TEST(std::count(one.begin(), one.end(), 0.0f) == 8);
}

BOOST_AUTO_TEST_CASE(matches_a_naive_reference_on_random_prompts) {
  int cases = 0;
  for (const int ngram : {1, 2, 3, 5})
    for (const int draft : {1, 3, 8})
      for (const std::size_t length : {2u, 3u, 17u, 200u, 1500u})
        for (const int vocab : {3, 40, 1000}) {
          const bp::prompt_features f{ngram, draft, 1024};  // 1500 tokens: the tail of 1024 is analysed
          const auto t = random_prompt(length, vocab, static_cast<unsigned>(length * 31 + vocab + ngram));
          const auto got = extract(f, t);
          const auto want = reference(t, f);
          for (std::size_t j = 0; j < got.size(); ++j) {
            BOOST_TEST_INFO("n " << ngram << " draft " << draft << " length " << length << " vocab " << vocab << " feature " << j);
            BOOST_TEST(got[j] == want[j], tt::tolerance(2e-6));
          }
          ++cases;
        }
  BOOST_TEST(cases == 180);
}

BOOST_AUTO_TEST_CASE(lookup_statistics_are_what_the_lookup_drafter_does) {
  // Replays the real drafter at every position of the prompt: its first draft is right where lookup_hit
  // counts a hit, and its matched drafts are accepted as lookup_accepted counts them.
  const int draft = 6;
  const bp::prompt_features f{3, draft, 4096};
  bp::lookup_drafter drafter(50, 3);
  for (const unsigned seed : {1u, 2u, 3u}) {
    const auto t = random_prompt(400, 50, seed);
    double hits = 0, accepted = 0;
    std::vector<bp::token_id> out(static_cast<std::size_t>(draft));
    for (std::size_t i = 1; i < t.size(); ++i) {
      bp::draft_request r;
      r.context = std::span(t).first(i);
      r.block_size = draft + 1;
      BOOST_REQUIRE(drafter.draft(r, out) == bp::status::success);
      const auto confidence = drafter.draft_confidence();
      if (confidence[0] == 0.0f) continue;  // no match: the drafter pads
      hits += out[0] == t[i];
      std::size_t a = 0;
      while (a < out.size() && confidence[a] > 0.0f && i + a < t.size() && out[a] == t[i + a]) ++a;
      accepted += static_cast<double>(a);
    }
    const auto got = extract(f, t);
    const double positions = static_cast<double>(t.size() - 1);
    BOOST_TEST(hits > 20);
    BOOST_TEST(got[f.offset(bp::prompt_statistic::lookup_hit)] == hits / positions, tt::tolerance(1e-6));
    BOOST_TEST(got[f.offset(bp::prompt_statistic::lookup_accepted)] == accepted / positions, tt::tolerance(1e-6));
  }
}

BOOST_AUTO_TEST_CASE(only_the_tail_is_analysed_and_the_length_is_the_whole_prompt) {
  const auto t = random_prompt(300, 20, 9);
  const bp::prompt_features f{3, 8, 50};
  const auto got = extract(f, t);
  auto tail = extract(bp::prompt_features{3, 8, 4096}, std::span(t).last(50));
  tail[f.offset(bp::prompt_statistic::log_length)] = static_cast<float>(std::log1p(300.0));
  BOOST_TEST(got == tail, tt::per_element());
}

BOOST_AUTO_TEST_CASE(status_codes) {
  const std::vector<bp::token_id> t{1, 2, 1, 2};
  const bp::prompt_features f{};
  (void)extract(f, {}, bp::status::empty_prompt);
  std::vector<float> out(static_cast<std::size_t>(f.feature_count())), workspace(f.workspace_size());
  std::vector<float> small(f.workspace_size() - 1), wrong(out.size() + 1);
  BOOST_TEST((f.extract({t, {}, 0.0f}, small, out) == bp::status::workspace_too_small));
  BOOST_TEST((f.extract({t, {}, 0.0f}, workspace, wrong) == bp::status::invalid_argument));
  for (const bp::prompt_features bad : {bp::prompt_features{0, 8, 10}, bp::prompt_features{9, 8, 10},
                                        bp::prompt_features{3, 0, 10}, bp::prompt_features{3, 65, 10},
                                        bp::prompt_features{3, 8, 0}, bp::prompt_features{3, 8, (1 << 20) + 1}}) {
    std::vector<float> o(static_cast<std::size_t>(std::max<std::int64_t>(bad.feature_count(), 0)));
    BOOST_TEST((bad.extract({t, {}, 0.0f}, workspace, o) == bp::status::invalid_argument));
    BOOST_TEST(bad.workspace_size() == 0u);
  }
  // The combined extractor passes on the row's status and the prompt's.
  const bp::prompt_compact_features c{{}, {4, 1.0f}};
  const std::vector<float> row{1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1.0f};
  std::vector<float> co(static_cast<std::size_t>(c.feature_count(5))), cw(c.workspace_size(5));
  BOOST_TEST((c.extract({t, row, 0.0f}, cw, co) == bp::status::non_finite_logits));
  BOOST_TEST((c.extract({{}, row, 0.0f}, cw, co) == bp::status::empty_prompt));
}

BOOST_AUTO_TEST_CASE(combined_extractor_is_the_two_back_to_back) {
  const auto t = random_prompt(120, 30, 4);
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(500);
  for (float& x : row) x = normal(gen);
  const bp::prompt_compact_features c{{2, 4, 64}, {16, 0.7f}};
  std::vector<float> out(static_cast<std::size_t>(c.feature_count(500))), workspace(c.workspace_size(500));
  BOOST_REQUIRE((c.extract({t, row, 0.0f}, workspace, out) == bp::status::success));
  const auto prompt = extract(c.prompt, t);
  std::vector<float> compact(static_cast<std::size_t>(c.row.feature_count(500))), cw(c.row.workspace_size(500));
  BOOST_REQUIRE((c.row.extract(row, cw, compact) == bp::status::success));
  BOOST_TEST(std::vector<float>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(prompt.size())) == prompt, tt::per_element());
  BOOST_TEST(std::vector<float>(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end()) == compact, tt::per_element());
}

BOOST_AUTO_TEST_CASE(metadata_round_trips_and_errors) {
  const bp::prompt_features f{4, 5, 2000};
  const auto g = bp::make_feature_extractor<bp::prompt_features>(f.metadata(), "p.safetensors");
  BOOST_TEST((g.max_ngram == 4 && g.draft_tokens == 5 && g.max_prompt_tokens == 2000));
  const bp::prompt_compact_features c{{2, 3, 100}, {32, 0.5f}};
  const auto d = bp::make_feature_extractor<bp::prompt_compact_features>(c.metadata(), "c.safetensors");
  BOOST_TEST((d.prompt.max_ngram == 2 && d.prompt.draft_tokens == 3 && d.prompt.max_prompt_tokens == 100));
  BOOST_TEST((d.row.top_k == 32 && d.row.temperature == 0.5f));

  auto m = f.metadata();
  m["max_ngram"] = "9";
  check_error([&] { (void)bp::prompt_features::from_metadata(m, "p.safetensors"); }, {"p.safetensors", "'max_ngram'"});
  m = f.metadata();
  m["statistics"] = "log_length";
  check_error([&] { (void)bp::prompt_features::from_metadata(m, "p.safetensors"); }, {"'statistics'"});
  m = f.metadata();
  m["colour"] = "red";
  check_error([&] { (void)bp::prompt_features::from_metadata(m, "p.safetensors"); }, {"'colour'", "unknown"});
  auto n = c.metadata();
  n["compact.top_k"] = "0";
  check_error([&] { (void)bp::prompt_compact_features::from_metadata(n, "c.safetensors"); }, {"c.safetensors", "'top_k'"});
  n = c.metadata();
  n["row.top_k"] = "3";
  check_error([&] { (void)bp::prompt_compact_features::from_metadata(n, "c.safetensors"); }, {"'row.top_k'", "unknown"});
  n = c.metadata();
  n.erase("prompt.draft_tokens");
  check_error([&] { (void)bp::prompt_compact_features::from_metadata(n, "c.safetensors"); }, {"'draft_tokens'", "missing"});
}

BOOST_AUTO_TEST_CASE(datasets_keep_prompt_tokens) {
  const std::vector<int> sizes{1, 2, 3};
  const std::vector<float> row{0.0f, 1.0f};
  const std::vector<double> tau{1.0, 1.5, 1.7};
  bp::policy_dataset d;
  d.sizes = sizes;
  d.vocab = 2;
  d.add("a", row, tau, {}, {}, std::vector<bp::token_id>{5, 6, 7});
  d.add("b", row, tau, {}, {}, std::vector<bp::token_id>{9});
  check_error([&] { d.add("c", row, tau); }, {"'c'", "token ids"});
  const temp_dir dir;
  bp::write_policy_dataset(d, dir.path / "ok");
  const auto back = bp::read_policy_dataset(dir.path / "ok");
  BOOST_TEST(back.has_prompt_tokens());
  BOOST_TEST(std::vector<bp::token_id>(back.prompt_ids(0).begin(), back.prompt_ids(0).end()) == (std::vector<bp::token_id>{5, 6, 7}));
  BOOST_TEST(std::vector<bp::token_id>(back.prompt_ids(1).begin(), back.prompt_ids(1).end()) == (std::vector<bp::token_id>{9}));
  const auto merged = bp::merge_policy_datasets({back, [&] {
                                                   bp::policy_dataset e;
                                                   e.sizes = sizes;
                                                   e.vocab = 2;
                                                   e.add("c", row, tau, {}, {}, std::vector<bp::token_id>{3, 3});
                                                   return e;
                                                 }()});
  BOOST_TEST(merged.size() == 3u);
  BOOST_TEST(merged.prompt_ids(2).size() == 2u);

  bp::policy_dataset plain;
  plain.sizes = sizes;
  plain.vocab = 2;
  plain.add("x", row, tau);
  check_error([&] { (void)bp::merge_policy_datasets({back, plain}); }, {"part 1", "'prompt_tokens'"});
  check_error([&] { (void)bp::make_training_set(plain, bp::prompt_features{}, 1, 3); }, {"'prompt'", "sweep it again"});

  // Offsets that do not rise are refused on reading, naming the field.
  bp::policy_dataset broken = d;
  broken.prompt_offsets = {0, 3, 3};
  bp::write_policy_dataset(broken, dir.path / "bad");
  check_error([&] { (void)bp::read_policy_dataset(dir.path / "bad"); }, {"dataset.safetensors", "'prompt_offsets'"});
}

BOOST_AUTO_TEST_CASE(a_predictor_learns_from_the_prompt_what_the_row_cannot_show) {
  // Every prefill row is the same; the best size is 3 for prompts that repeat themselves and 1 for prompts
  // that do not. Compact features see no difference; prompt features separate the two.
  std::mt19937 gen(11);
  const std::vector<float> row{0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f, 1.0f};
  const auto make = [&](int first, int count) {
    bp::policy_dataset d;
    d.sizes = {1, 2, 3};
    d.vocab = 8;
    for (int i = first; i < first + count; ++i) {
      const bool copies = i % 2 == 0;
      auto t = random_prompt(60 + gen() % 60, 5000, static_cast<unsigned>(100 + i));
      if (copies) std::copy(t.begin(), t.begin() + 30, t.end() - 30);
      const std::vector<double> tau = copies ? std::vector<double>{1.0, 1.6, 2.1} : std::vector<double>{1.0, 0.8, 0.7};
      d.add("p" + std::to_string(i), row, tau, {}, {}, t);
    }
    return d;
  };
  const auto train = make(0, 120), held = make(120, 40);
  bp::nn::training_options o;
  o.hidden = {16};
  o.max_epochs = 150;
  o.patience = 150;
  o.cross_entropy_warmup = 0;
  o.seed = 3;
  const std::vector<std::size_t> train_rows = [] {
    std::vector<std::size_t> r(100);
    std::iota(r.begin(), r.end(), std::size_t{0});
    return r;
  }();
  std::vector<std::size_t> validation_rows(20);
  std::iota(validation_rows.begin(), validation_rows.end(), std::size_t{100});
  const auto fit = [&](const auto& features) {
    const auto model = bp::nn::train(bp::make_training_set(train, features, 1, 3, train_rows),
                                     bp::make_training_set(train, features, 1, 3, validation_rows), o).model;
    bp::nn::predictor<float> p{{}, model};
    p.metadata.training_block_size = 2;
    p.metadata.window_k = 1;
    p.metadata.vocab_size = 8;
    bp::blockpilot_policy<std::decay_t<decltype(features)>> policy(features, p);
    return bp::evaluate_policy(held, "policy", policy, 1, 3, 1);
  };
  const auto prompt = fit(bp::prompt_features{});
  const auto compact = fit(bp::compact_features{4, 1.0f});
  BOOST_TEST_MESSAGE("accuracy: prompt " << prompt.accuracy << ", compact " << compact.accuracy);
  BOOST_TEST(prompt.accuracy >= 0.9);
  BOOST_TEST(compact.accuracy <= 0.6);  // one size for every prompt: half of them wrong
  BOOST_TEST(prompt.fallbacks == 0);
}
