// A drafter that consumes context features with a verifier that provides none must not compile.
// expect: the drafter consumes target context features
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct context_drafter : synthetic_drafter {
  using synthetic_drafter::synthetic_drafter;
  status append_context(matrix_view<const float>) { return status::success; }
};
int main() {
  const synthetic_world w;
  context_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<context_drafter, synthetic_target, fixed_block_size<16>> dec(d, t);
}
