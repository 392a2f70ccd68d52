// Which types model the concepts and which do not: each role minus one member fails its concept.
#define BOOST_TEST_MODULE concepts
#include <boost/test/unit_test.hpp>

#include <span>
#include <string_view>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"

using namespace blockpilot;

namespace {

struct minimal_drafter {
  std::int64_t vocab_size() const { return 8; }
  int max_draft_rows() const { return 15; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request&, std::span<token_id>) { return status::success; }
  status commit(int) { return status::success; }
};
struct drafter_without_commit {
  std::int64_t vocab_size() const { return 8; }
  int max_draft_rows() const { return 15; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request&, std::span<token_id>) { return status::success; }
};
struct drafter_without_max_rows {
  std::int64_t vocab_size() const { return 8; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request&, std::span<token_id>) { return status::success; }
  status commit(int) { return status::success; }
};
struct drafter_with_void_draft {
  std::int64_t vocab_size() const { return 8; }
  int max_draft_rows() const { return 15; }
  status begin(std::span<const token_id>) { return status::success; }
  void draft(const draft_request&, std::span<token_id>) {}
  status commit(int) { return status::success; }
};
struct probability_drafter : minimal_drafter {
  using minimal_drafter::draft;
  status draft(const draft_request&, std::span<token_id>, matrix_view<float>) { return status::success; }
};
struct context_drafter : minimal_drafter {
  status append_context(matrix_view<const float>) { return status::success; }
};
struct confident_drafter : minimal_drafter {
  std::span<const float> draft_confidence() const { return {}; }
};
struct drafter_with_confidence_as_ints : minimal_drafter {
  std::vector<int> draft_confidence() const { return {}; }
};
struct drafter_with_confidence_by_value : minimal_drafter {  // a span of it would dangle
  std::vector<float> draft_confidence() const { return {}; }
};

struct minimal_verifier {
  std::int64_t vocab_size() const { return 8; }
  status prefill(std::span<const token_id>, matrix_view<const float>&) { return status::success; }
  status score(std::span<const token_id>, matrix_view<const float>&) { return status::success; }
  status commit(int) { return status::success; }
};
struct verifier_without_score {
  std::int64_t vocab_size() const { return 8; }
  status prefill(std::span<const token_id>, matrix_view<const float>&) { return status::success; }
  status commit(int) { return status::success; }
};
struct verifier_without_vocab {
  status prefill(std::span<const token_id>, matrix_view<const float>&) { return status::success; }
  status score(std::span<const token_id>, matrix_view<const float>&) { return status::success; }
  status commit(int) { return status::success; }
};
struct featured_verifier : minimal_verifier {
  matrix_view<const float> context_features() const { return {}; }
};

struct policy_without_max {
  block_size_choice choose(const request_features&) { return {16, false}; }
};
struct policy_returning_int {
  int max_block_size() const { return 16; }
  int choose(const request_features&) { return 16; }
};
struct stepping_policy {
  int max_block_size() const { return 16; }
  block_size_choice choose(const request_features&) { return {16, false}; }
  int next(const step_record&) { return 8; }
};
struct trimming_policy {
  int max_block_size() const { return 16; }
  block_size_choice choose(const request_features&) { return {16, false}; }
  int keep_drafts(std::span<const float>) const { return 3; }
};
struct planned_policy : trimming_policy {
  void draft_gains(std::span<const float>, std::vector<double>& gains) const { gains.assign(3, 0.5); }
  int keep(std::span<const float>, int k) { return k; }
};
struct planned_policy_without_keep : trimming_policy {
  void draft_gains(std::span<const float>, std::vector<double>&) const {}
};
struct rule_without_op {
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "none";
};

}  // namespace

BOOST_AUTO_TEST_CASE(drafters) {
  BOOST_TEST(drafter<minimal_drafter>);
  BOOST_TEST(drafter<synthetic_drafter>);
  BOOST_TEST(!drafter<drafter_without_commit>);
  BOOST_TEST(!drafter<drafter_without_max_rows>);
  BOOST_TEST(!drafter<drafter_with_void_draft>);
  BOOST_TEST(!drafter<minimal_verifier>);
  BOOST_TEST(!drafter_with_probabilities<minimal_drafter>);
  BOOST_TEST(drafter_with_probabilities<probability_drafter>);
  BOOST_TEST(drafter_with_probabilities<synthetic_drafter>);
  BOOST_TEST(drafter_with_context<context_drafter>);
  BOOST_TEST(!drafter_with_context<minimal_drafter>);
  BOOST_TEST(drafter_with_confidence<confident_drafter>);
  BOOST_TEST(!drafter_with_confidence<minimal_drafter>);
  BOOST_TEST(!drafter_with_confidence<drafter_with_confidence_as_ints>);
  BOOST_TEST(!drafter_with_confidence<drafter_with_confidence_by_value>);
}

BOOST_AUTO_TEST_CASE(verifiers) {
  BOOST_TEST(verifier<minimal_verifier>);
  BOOST_TEST(verifier<synthetic_target>);
  BOOST_TEST(!verifier<verifier_without_score>);
  BOOST_TEST(!verifier<verifier_without_vocab>);
  BOOST_TEST(!verifier<minimal_drafter>);
  BOOST_TEST(verifier_with_context_features<featured_verifier>);
  BOOST_TEST(!verifier_with_context_features<minimal_verifier>);
}

BOOST_AUTO_TEST_CASE(policies_and_rules) {
  BOOST_TEST(block_size_policy<fixed_block_size<16>>);
  BOOST_TEST(block_size_policy<runtime_block_size>);
  BOOST_TEST(!block_size_policy<policy_without_max>);
  BOOST_TEST(!block_size_policy<policy_returning_int>);
  BOOST_TEST(!per_step_block_size_policy<fixed_block_size<16>>);
  BOOST_TEST(per_step_block_size_policy<stepping_policy>);
  BOOST_TEST(draft_trimming_policy<trimming_policy>);
  BOOST_TEST(!draft_trimming_policy<stepping_policy>);
  BOOST_TEST(!per_step_block_size_policy<trimming_policy>);
  BOOST_TEST(per_step_block_size_policy<adaptive_block_size>);
  BOOST_TEST(draft_trimming_policy<confidence_cutoff<fixed_block_size<8>>>);
  BOOST_TEST(batch_trimming_policy<planned_policy>);
  BOOST_TEST(batch_trimming_policy<speed_cutoff>);
  BOOST_TEST(!batch_trimming_policy<planned_policy_without_keep>);
  BOOST_TEST(!batch_trimming_policy<confidence_cutoff<fixed_block_size<8>>>);
  BOOST_TEST((acceptance_rule<greedy_match>));
  BOOST_TEST((acceptance_rule<rejection_sampling>));
  BOOST_TEST((!acceptance_rule<rule_without_op>));
  BOOST_TEST((!acceptance_rule<int>));
}

BOOST_AUTO_TEST_CASE(built_in_rules_by_name) {
  std::vector<std::string_view> seen;
  for (const std::string_view name : {"greedy", "sample-match", "rejection"})
    BOOST_TEST(with_builtin_rule(name, [&]<class Rule>(Rule) { seen.push_back(Rule::name); }));
  BOOST_TEST(seen == (std::vector<std::string_view>{"greedy", "sample-match", "rejection"}), boost::test_tools::per_element());
  for (const std::string_view name : {"", "Greedy", "typical", "rejection "})
    BOOST_TEST(!with_builtin_rule(name, [&](auto) { BOOST_ERROR("called for an unknown name"); }));
  BOOST_TEST(builtin_rule_names == "greedy, sample-match or rejection");
}

BOOST_AUTO_TEST_CASE(backends_of_the_decoder) {
  // Policies that read no logits run on every backend; the others where their logits_backend says.
  BOOST_TEST((reads_logits_on<fixed_block_size<16>, cpu_backend>));
  BOOST_TEST((reads_logits_on<fixed_block_size<16>, cuda_backend>));
  BOOST_TEST((reads_logits_on<runtime_block_size, cuda_backend>));
  BOOST_TEST((reads_logits_on<blockpilot_policy<compact_features>, cpu_backend>));
  BOOST_TEST((!reads_logits_on<blockpilot_policy<compact_features>, cuda_backend>));
  BOOST_TEST((reads_logits_on<stepping_policy, cpu_backend>));
  // Host code sees the host stage only: the CUDA one needs blockpilot/cuda/decode_stage.cuh (nvcc).
  BOOST_TEST((decodes_on<greedy_match, cpu_backend>));
  BOOST_TEST((decodes_on<rejection_sampling, cpu_backend>));
  BOOST_TEST((!decodes_on<rule_without_op, cpu_backend>));
  BOOST_TEST((!decodes_on<greedy_match, cuda_backend>));
  BOOST_TEST((policy_fits_stage<fixed_block_size<16>, greedy_match, cpu_backend>));
  BOOST_TEST((policy_fits_stage<blockpilot_policy<compact_features>, greedy_match, cpu_backend>));
}

BOOST_AUTO_TEST_CASE(swapping_the_policy_is_one_template_argument) {
  synthetic_params p;
  p.vocab = 64;
  const synthetic_world w(p);
  synthetic_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dflash(d, t);
  speculative_decoder<synthetic_drafter, synthetic_target, stepping_policy> other(d, t);
  const std::vector<token_id> prompt = {1, 2, 3};
  generation_result a, b;
  BOOST_TEST((dflash.generate(prompt, {}, a) == status::success));
  BOOST_TEST((other.generate(prompt, {}, b) == status::success));
  BOOST_TEST(a.tokens == b.tokens);  // greedy: the block size never changes the text
}
