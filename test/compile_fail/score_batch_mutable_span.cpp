// A verifier whose score_batch takes span<V*> would be scored request by request: it must not compile.
// expect: Verifier has score_batch, but not as the batch calls it
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct batch_target : synthetic_target {
  using synthetic_target::synthetic_target;
  static status score_batch(std::span<batch_target*>, std::span<const std::span<const token_id>>,
                            std::span<matrix_view<const float>>) {
    return status::success;
  }
};
int main() {
  batched_decoder<synthetic_drafter, batch_target, fixed_block_size<4>> batch;
  (void)batch;
}
