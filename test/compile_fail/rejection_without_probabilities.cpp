// Rejection sampling with a drafter that has no draft probabilities must not compile.
// expect: this acceptance rule needs draft probabilities
#include "blockpilot/blockpilot.hpp"
#include "../support/test_models.hpp"
using namespace blockpilot;
int main() {
  const synthetic_world w;
  testing::random_drafter d(w.vocab_size());
  synthetic_target t(w);
  speculative_decoder<testing::random_drafter, synthetic_target, fixed_block_size<16>, rejection_sampling> dec(d, t);
}
