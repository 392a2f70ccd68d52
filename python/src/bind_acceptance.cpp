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
#include "errors.hpp"
#include "blockpilot/cpu/batched_acceptance.hpp"
#include "ragged_layout.hpp"
#include "rules.hpp"

namespace blockpilot::python {

using namespace nb::literals;

namespace {

[[noreturn]] void fail(const std::string& what) { throw nb::value_error(("accept: " + what).c_str()); }

template <class A>
void expect_length(const A& a, std::size_t n, const char* name) {
  if (a.shape(0) != n) fail(std::string(name) + " has shape " + shape_text(a) + ", expected (" + std::to_string(n) + ",)");
}

nb::tuple accept_batch(std::string_view rule, const rows_array& target_logits, nb::handle block_tokens,
                       nb::handle draft_offset_values, const host_array<std::uint64_t, nb::ndim<1>>& seeds,
                       const host_array<std::uint64_t, nb::ndim<1>>& offsets, const host_array<float, nb::ndim<1>>& temperatures,
                       const std::optional<rows_array>& draft_probs, int top_k, float top_p, float min_p) {
  const int32_values blocks(block_tokens, "accept: blocks"), draft_offsets(draft_offset_values, "accept: draft_offsets");
  const std::size_t batch = seeds.shape(0);
  expect_length(offsets, batch, "offsets");
  expect_length(temperatures, batch, "temperatures");
  if (draft_offsets.span().size() != batch + 1)
    fail("draft_offsets has " + std::to_string(draft_offsets.span().size()) + " entries, expected " + std::to_string(batch + 1));
  const std::int64_t vocab = static_cast<std::int64_t>(target_logits.shape(1));
  if (draft_probs && draft_probs->shape(1) != target_logits.shape(1))
    fail("draft_probs has shape " + shape_text(*draft_probs) + ", expected (drafts, " + std::to_string(vocab) + ")");
  check_rule_limits(batch, vocab);

  std::vector<philox_stream> streams(batch);
  for (std::size_t r = 0; r < batch; ++r) streams[r] = {seeds.data()[r], offsets.data()[r]};
  std::vector<acceptance_result> results(batch);
  std::vector<status> statuses(batch);
  const status call = with_rule(rule, [&]<class Rule>(Rule) {
    const ragged_layout layout =
        check_ragged(draft_offsets.span(), static_cast<std::int64_t>(target_logits.shape(0)),
                     static_cast<std::int64_t>(blocks.span().size()), draft_probs ? static_cast<std::int64_t>(draft_probs->shape(0)) : -1,
                     Rule::needs_draft_probabilities, Rule::name);
    if (!layout.refused.empty()) fail(layout.refused);
    batched_acceptance_input in;
    in.shape = {static_cast<int>(batch), layout.max_block, vocab};
    in.target_logits = target_logits.data();
    in.blocks = blocks.span().data();
    in.draft_offsets = draft_offsets.span().data();
    in.draft_probs = draft_probs ? draft_probs->data() : nullptr;
    in.temperatures = temperatures.data();
    in.sampling = {top_k, top_p, min_p};
    in.rng = streams.data();
    using op = batched_acceptance<Rule, cpu_backend>;
    std::vector<std::byte> workspace(op::workspace_size(in.shape));
    const nb::gil_scoped_release unlocked;
    return op::run(cpu_backend{}, in, workspace, {results.data(), statuses.data()});
  });
  check(call, "accept");  // as on the device: Error with the status
  return results_to_numpy(results, statuses);
}

}  // namespace

void bind_acceptance(nb::module_& m) {
  m.def("_accept", &accept_batch, "rule"_a, "target_logits"_a, "blocks"_a, "draft_offsets"_a, "seeds"_a, "offsets"_a,
        "temperatures"_a, "draft_probs"_a.none() = nb::none(), "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
        "The batched acceptance call behind blockpilot.accept (which documents it); returns (accepted, bonus, status codes).");
}

}  // namespace blockpilot::python
