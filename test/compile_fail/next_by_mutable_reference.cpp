// A policy whose next() takes a mutable step_record would never be asked after a step: it must not compile.
// expect: Policy has next, but not as the decoder calls it
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct policy {
  int max_block_size() const { return 8; }
  block_size_choice choose(const request_features&) { return {4, false}; }
  int next(step_record&) { return 8; }
};
int main() {
  const synthetic_world w;
  synthetic_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<synthetic_drafter, synthetic_target, policy> dec(d, t);
}
