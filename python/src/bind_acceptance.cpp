// The acceptance rules on a batch of requests in the flattened (ragged) layout, through the library's
// batched CPU contract (acceptance/batched.hpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string_view.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "blockpilot/cpu/batched_acceptance.hpp"
#include "rules.hpp"

namespace blockpilot::python {

using namespace nb::literals;

namespace {

[[noreturn]] void fail(const std::string& what) { throw nb::value_error(("accept: " + what).c_str()); }

template <class A>
void expect_length(const A& a, std::size_t n, const char* name) {
  if (a.shape(0) != n) fail(std::string(name) + " has shape " + shape_text(a) + ", expected (" + std::to_string(n) + ",)");
}

nb::tuple accept_batch(std::string_view rule, const rows_array& target_logits, const tokens_array& blocks,
                       const host_array<int, nb::ndim<1>>& draft_offsets, const host_array<std::uint64_t, nb::ndim<1>>& seeds,
                       const host_array<std::uint64_t, nb::ndim<1>>& offsets, const host_array<float, nb::ndim<1>>& temperatures,
                       const std::optional<rows_array>& draft_probs, int top_k, float top_p, float min_p) {
  const std::size_t batch = seeds.shape(0);
  expect_length(offsets, batch, "offsets");
  expect_length(temperatures, batch, "temperatures");
  expect_length(draft_offsets, batch + 1, "draft_offsets");
  const int* cu = draft_offsets.data();
  if (cu[0] != 0) fail("draft_offsets[0] must be 0");
  int max_block = 1;
  for (std::size_t r = 0; r < batch; ++r) {
    if (cu[r + 1] < cu[r]) fail("draft_offsets must not decrease (request " + std::to_string(r) + ")");
    max_block = std::max(max_block, cu[r + 1] - cu[r] + 1);
  }
  if (max_block > block_size_limit)
    fail("a request has " + std::to_string(max_block - 1) + " drafts; at most " + std::to_string(block_size_limit - 1));
  const auto drafts = static_cast<std::size_t>(cu[batch]);
  const std::int64_t vocab = static_cast<std::int64_t>(target_logits.shape(1));
  if (target_logits.shape(0) != drafts + batch)
    fail("target_logits has shape " + shape_text(target_logits) + ", expected (" + std::to_string(drafts + batch) +
         ", vocab): one row per block token");
  expect_length(blocks, drafts + batch, "blocks");
  if (draft_probs && (draft_probs->shape(0) != drafts || draft_probs->shape(1) != target_logits.shape(1)))
    fail("draft_probs has shape " + shape_text(*draft_probs) + ", expected (" + std::to_string(drafts) + ", " +
         std::to_string(vocab) + "): one q row per draft");

  std::vector<philox_stream> streams(batch);
  for (std::size_t r = 0; r < batch; ++r) streams[r] = {seeds.data()[r], offsets.data()[r]};
  batched_acceptance_input in;
  in.shape = {static_cast<int>(batch), max_block, vocab};
  in.target_logits = target_logits.data();
  in.blocks = blocks.data();
  in.draft_offsets = cu;
  in.draft_probs = draft_probs ? draft_probs->data() : nullptr;
  in.temperatures = temperatures.data();
  in.sampling = {top_k, top_p, min_p};
  in.rng = streams.data();
  std::vector<acceptance_result> results(batch);
  std::vector<status> statuses(batch);
  const status call = with_rule(rule, [&]<class Rule>(Rule) {
    using op = batched_acceptance<Rule, cpu_backend>;
    if (Rule::needs_draft_probabilities && drafts > 0 && !draft_probs)
      fail("the " + std::string(Rule::name) + " rule needs draft_probs, q of every draft row");
    std::vector<std::byte> workspace(op::workspace_size(in.shape));
    const nb::gil_scoped_release unlocked;
    return op::run(cpu_backend{}, in, workspace, {results.data(), statuses.data()});
  });
  if (call != status::success) fail(std::string(to_string(call)));

  std::vector<int> accepted(batch), bonus(batch), codes(batch);
  for (std::size_t r = 0; r < batch; ++r) {
    accepted[r] = results[r].accepted;
    bonus[r] = results[r].bonus;
    codes[r] = static_cast<int>(statuses[r]);
  }
  return nb::make_tuple(to_numpy(std::move(accepted), {batch}), to_numpy(std::move(bonus), {batch}),
                        to_numpy(std::move(codes), {batch}));
}

}  // namespace

void bind_acceptance(nb::module_& m) {
  m.def("_accept", &accept_batch, "rule"_a, "target_logits"_a, "blocks"_a, "draft_offsets"_a, "seeds"_a, "offsets"_a,
        "temperatures"_a, "draft_probs"_a.none() = nb::none(), "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
        "The batched acceptance call behind blockpilot.accept (which documents it); returns (accepted, bonus, status codes).");
}

}  // namespace blockpilot::python
