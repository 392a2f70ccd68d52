// A drafter without commit(n) must not compile as a Drafter.
// expect: Drafter does not model blockpilot::drafter
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct no_commit {
  std::int64_t vocab_size() const { return 8; }
  int max_draft_rows() const { return 15; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request&, std::span<token_id>) { return status::success; }
};
int main() {
  const synthetic_world w;
  no_commit d;
  synthetic_target t(w);
  speculative_decoder<no_commit, synthetic_target, fixed_block_size<16>> dec(d, t);
}
