// A policy whose choose() returns an int is not a block_size_policy.
// expect: Policy does not model blockpilot::block_size_policy
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct int_policy {
  int max_block_size() const { return 16; }
  int choose(const request_features&) { return 16; }
};
int main() {
  const synthetic_world w;
  synthetic_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<synthetic_drafter, synthetic_target, int_policy> dec(d, t);
}
