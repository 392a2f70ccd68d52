// A policy that trims drafted blocks with a drafter that reports no confidence must not compile.
// expect: the policy trims drafted blocks by the drafter's confidence
#include "blockpilot/blockpilot.hpp"
#include "../support/test_models.hpp"
using namespace blockpilot;
int main() {
  const synthetic_world w;
  testing::random_drafter d(w.vocab_size());
  synthetic_target t(w);
  speculative_decoder<testing::random_drafter, synthetic_target, confidence_cutoff<fixed_block_size<8>>> dec(
      d, t, confidence_cutoff<fixed_block_size<8>>({}, 0.5f));
}
