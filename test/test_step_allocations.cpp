// A decode step allocates nothing: the decoder's own work and its policy's — the per-step policies'
// cost model refits included — counted from a request's first step to its end, with the models'
// calls left out (they are the engine's). Heap use is counted twice: every operator new of the
// program, and every Eigen allocation (Eigen allocates with malloc; its run-time check reports here
// in any build, assertions on or off).
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
bool counting = false;         // inside the decoder's own work
std::size_t allocations = 0;   // operator new while counting
std::size_t eigen_allocations = 0;
}  // namespace

#define EIGEN_RUNTIME_NO_MALLOC
#define eigen_assert(x) (static_cast<bool>(x) ? void(0) : void(counting && ++eigen_allocations))

#define BOOST_TEST_MODULE step_allocations
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "support/test_models.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // both sides are replaced: malloc and free
#endif
void* operator new(std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n > 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace blockpilot;
using namespace blockpilot::testing;

namespace {

/// Counts what happens inside its scope (Eigen's check too), and pauses that inside a nested one.
class count_scope {
 public:
  explicit count_scope(bool on) : saved_(counting) { set(on); }
  ~count_scope() { set(saved_); }
  count_scope(const count_scope&) = delete;
  count_scope& operator=(const count_scope&) = delete;

 private:
  static void set(bool on) {
    counting = on;
    Eigen::internal::set_is_malloc_allowed(!on);
  }
  bool saved_;
};

/// Forwards to the drafter, uncounted: its allocations are the engine's.
template <class D>
class uncounted_drafter {
 public:
  explicit uncounted_drafter(D& d) : d_(d) {}
  [[nodiscard]] std::int64_t vocab_size() const { return d_.vocab_size(); }
  [[nodiscard]] int max_draft_rows() const { return d_.max_draft_rows(); }
  status begin(std::span<const token_id> prompt) {
    const count_scope off(false);
    return d_.begin(prompt);
  }
  status commit(int n) {
    const count_scope off(false);
    return d_.commit(n);
  }
  status draft(const draft_request& r, std::span<token_id> out) {
    const count_scope off(false);
    return d_.draft(r, out);
  }
  [[nodiscard]] std::span<const float> draft_confidence() {
    const count_scope off(false);
    return d_.draft_confidence();
  }

 private:
  D& d_;
};

/// Forwards to the verifier, uncounted.
template <class V>
class uncounted_verifier {
 public:
  explicit uncounted_verifier(V& v) : v_(v) {}
  [[nodiscard]] std::int64_t vocab_size() const { return v_.vocab_size(); }
  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    const count_scope off(false);
    return v_.prefill(prompt, logits);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    const count_scope off(false);
    return v_.score(block, logits);
  }
  status commit(int n) {
    const count_scope off(false);
    return v_.commit(n);
  }

 private:
  V& v_;
};

/// Decodes a few prompts with `policy`, counting every step; returns the most steps a request took.
template <class Policy>
std::int64_t count_steps(Policy policy) {
  const synthetic_world world = synthetic_world_of(97);
  synthetic_target target(world), reference(world);
  lookup_drafter lookup(97);
  uncounted_drafter<lookup_drafter> drafter(lookup);
  uncounted_verifier<synthetic_target> verifier(target);
  speculative_decoder<uncounted_drafter<lookup_drafter>, uncounted_verifier<synthetic_target>, Policy> dec(
      drafter, verifier, std::move(policy));
  std::int64_t steps = 0;
  for (const auto& prompt : synthetic_prompts(6, 97, 1, 12, 7)) {
    const generation_config config = greedy(200);
    generation_result r;
    BOOST_TEST_REQUIRE(dec.start(prompt, config, r) == status::success);
    {
      const count_scope on(true);
      while (!dec.done()) (void)dec.step();
    }
    BOOST_TEST_REQUIRE(r.error == status::success);
    BOOST_TEST(r.tokens == greedy_reference(reference, prompt, 200));
    steps = std::max(steps, r.stats.steps);
  }
  return steps;
}

void check_allocation_free(std::int64_t steps) {
  BOOST_TEST(steps > 40);  // the cost model refits inside a request's steps (groups of 32 timings)
  BOOST_TEST(allocations == 0u);
  BOOST_TEST(eigen_allocations == 0u);
  allocations = eigen_allocations = 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_count_sees_an_allocation) {  // the test's own instruments
  {
    const count_scope on(true);
    std::vector<int> v(3);
    Eigen::VectorXd x(4);
    (void)v;
    (void)x;
  }
  BOOST_TEST(allocations == 1u);
  BOOST_TEST(eigen_allocations == 1u);
  allocations = eigen_allocations = 0;
}

BOOST_AUTO_TEST_CASE(fixed_size_steps_allocate_nothing) {
  check_allocation_free(count_steps(runtime_block_size{4}));
}

BOOST_AUTO_TEST_CASE(adaptive_steps_allocate_nothing) {
  check_allocation_free(count_steps(adaptive_block_size(step_cost_model::linear(16, 0.05))));
}

BOOST_AUTO_TEST_CASE(confidence_cutoff_steps_allocate_nothing) {
  check_allocation_free(count_steps(confidence_cutoff<adaptive_block_size>(adaptive_block_size(step_cost_model::linear(16, 0.05)), 0.5f)));
}

BOOST_AUTO_TEST_CASE(speed_cutoff_steps_allocate_nothing) {
  check_allocation_free(count_steps(speed_cutoff(step_cost_model::linear(16, 0.05))));
}

BOOST_AUTO_TEST_CASE(copied_policies_allocate_nothing_in_a_step) {  // per-request policies start as copies
  const adaptive_block_size adaptive(step_cost_model::linear(16, 0.05));
  check_allocation_free(count_steps(adaptive));
  const speed_cutoff learner(step_cost_model::linear(16, 0.05));
  check_allocation_free(count_steps(learner.shared()));
  check_allocation_free(count_steps(learner));
}
