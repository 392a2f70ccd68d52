// A policy whose keep_drafts returns nothing would never trim a block: it must not compile.
// expect: Policy has keep_drafts, but not as the decoder calls it
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct policy {
  int max_block_size() const { return 8; }
  block_size_choice choose(const request_features&) { return {8, false}; }
  void keep_drafts(std::span<const float>) {}
};
int main() {
  const synthetic_world w;
  lookup_drafter d(w.vocab_size());
  synthetic_target t(w);
  speculative_decoder<lookup_drafter, synthetic_target, policy> dec(d, t);
}
