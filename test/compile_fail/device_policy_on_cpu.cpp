// A policy that reads device logits cannot drive the decoder on cpu_backend (host logits), and the
// reverse holds on cuda_backend.
// expect: the policy reads the target's logits in another memory space than this Backend keeps them
#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
using namespace blockpilot;
struct device_policy {
  using logits_backend = cuda_backend;
  int max_block_size() const { return 16; }
  block_size_choice choose(const request_features&) { return {16, false}; }
};
int main() {
  const synthetic_world w;
  synthetic_drafter d(w);
  synthetic_target t(w);
  speculative_decoder<synthetic_drafter, synthetic_target, device_policy> dec(d, t);
}
