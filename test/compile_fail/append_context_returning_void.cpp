// A drafter whose append_context returns void would never receive context features: it must not compile.
// expect: Drafter has append_context, but not as the decoder calls it
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct context_drafter : synthetic_drafter {
  using synthetic_drafter::synthetic_drafter;
  void append_context(matrix_view<const float>) {}
};
int main() {
  const synthetic_world w;
  context_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<context_drafter, synthetic_target, fixed_block_size<16>> dec(d, t);
}
