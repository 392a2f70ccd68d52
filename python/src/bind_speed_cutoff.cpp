// The per-step policy for an engine's own loop: the speed cut-off's step by step calls (what to verify of
// the drafts, what the step showed), and the plan that decides the drafts of requests served together
// (plan_batch_drafts on any gains; BatchPlan for speed cut-offs, one call a step).
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "blockpilot/policy/batch_plan.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot/policy/step_cost_model.hpp"

namespace blockpilot::python {

using namespace nb::literals;

namespace {

using confidence_array = host_array<float, nb::ndim<1>>;  ///< [drafts] float32

speed_cutoff make_speed_cutoff(std::vector<double> step_costs, int levels, int positions, double prior_weight,
                               double request_weight, double memory, double explore, bool learn_costs) {
  return speed_cutoff(step_cost_model(std::move(step_costs)),
                      {levels, positions, prior_weight, request_weight, memory, explore, learn_costs});
}

std::vector<double> current_costs(const speed_cutoff& p) {
  std::vector<double> costs;
  for (int b = 1; b <= p.max_block_size(); ++b) costs.push_back(p.cost_model().cost(b));
  return costs;
}

nb::ndarray<nb::numpy, double> draft_gains(const speed_cutoff& p, const confidence_array& confidence) {
  std::vector<double> gains;
  p.draft_gains(as_span(confidence), gains);
  const std::size_t n = gains.size();
  return to_numpy(std::move(gains), {n});
}

/// The decoder's step_record for a step the engine ran itself (no rows: the cut-off reads none).
void observe(speed_cutoff& p, int step, int block_size, int accepted, double seconds) {
  if (step < 0 || block_size < 1 || accepted < 0 || accepted >= block_size || !std::isfinite(seconds) || seconds < 0)
    throw nb::value_error(("SpeedCutoff.observe: needs step >= 0, 0 <= accepted < block_size and seconds >= 0, not step " +
                           std::to_string(step) + ", block_size " + std::to_string(block_size) + ", accepted " +
                           std::to_string(accepted) + ", seconds " + std::to_string(seconds)).c_str());
  (void)p.next(step_record{step, block_size, accepted, {}, seconds});
}

void check_row_cost(const std::vector<double>& row_cost, const char* context) {
  for (const double c : row_cost)
    if (!std::isfinite(c) || c <= 0) throw nb::value_error((std::string(context) + ": row costs must be finite and > 0").c_str());
}

/// plan_batch_drafts on Python sequences, each request's gains checked as the plan needs them.
nb::ndarray<nb::numpy, std::int32_t> plan(const std::vector<std::vector<double>>& gains, const std::vector<double>& row_cost) {
  for (std::size_t i = 0; i < gains.size(); ++i)
    for (std::size_t k = 0; k < gains[i].size(); ++k)
      if (!(gains[i][k] >= 0 && gains[i][k] <= 1) || (k > 0 && gains[i][k] > gains[i][k - 1]))
        throw nb::value_error(("plan_batch_drafts: request " + std::to_string(i) +
                               "'s gains must be chances in [0, 1], non-increasing (draft " + std::to_string(k) + ")").c_str());
  check_row_cost(row_cost, "plan_batch_drafts");
  std::vector<std::span<const double>> spans(gains.begin(), gains.end());
  std::vector<std::int32_t> kept(gains.size());
  std::vector<std::tuple<double, int, int>> scratch;
  plan_batch_drafts(spans, row_cost, kept, scratch);
  const std::size_t n = kept.size();
  return to_numpy(std::move(kept), {n});
}

/// A batch's row cost curve and the plan's buffers, kept between steps: one call a step plans the speed
/// cut-offs' drafts without a NumPy array per request.
struct batch_planner {
  std::vector<double> row_cost;
  bool padded = false;  ///< row_cost is by the widest block (blocks padded to it), not by the rows in all
  std::vector<std::vector<double>> gains;
  std::vector<std::span<const double>> spans;
  std::vector<std::tuple<double, int, int>> scratch;

  batch_planner(std::vector<double> costs, bool padded_blocks) : row_cost(std::move(costs)), padded(padded_blocks) {
    if (row_cost.empty()) throw nb::value_error("BatchPlan: needs the cost of at least one row");
    check_row_cost(row_cost, "BatchPlan");
  }

  nb::ndarray<nb::numpy, std::int32_t> keep_drafts(const std::vector<speed_cutoff*>& cutoffs,
                                                   const std::vector<confidence_array>& confidence) {
    const std::size_t n = cutoffs.size();
    if (confidence.size() != n)
      throw nb::value_error(("BatchPlan.keep_drafts: " + std::to_string(n) + " cut-offs but " +
                             std::to_string(confidence.size()) + " confidence arrays").c_str());
    gains.resize(n);
    spans.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (cutoffs[i] == nullptr) throw nb::type_error("BatchPlan.keep_drafts: a cut-off is None");
      cutoffs[i]->draft_gains(as_span(confidence[i]), gains[i]);
      spans[i] = gains[i];
    }
    std::vector<std::int32_t> kept(n);
    if (padded)
      plan_padded_drafts(spans, row_cost, kept);
    else
      plan_batch_drafts(spans, row_cost, kept, scratch);
    for (std::size_t i = 0; i < n; ++i) kept[i] = cutoffs[i]->keep(as_span(confidence[i]), kept[i]);
    return to_numpy(std::move(kept), {n});
  }
};

}  // namespace

void bind_speed_cutoff(nb::module_& m) {
  nb::class_<speed_cutoff>(m, "SpeedCutoff",
                           "A per-step policy: before every step it verifies the prefix of the drafts with the most "
                           "expected committed tokens per unit of step cost. A draft's chance is learned by its "
                           "confidence level from the request's own steps and from every earlier request; the cost "
                           "curve starts from step_costs and follows the decode's own step timings. Keep one instance "
                           "for the requests of a verifier that run one after another, and give requests that run at "
                           "the same time shared() ones. Needs a LookupDrafter.\n\n"
                           "generate() drives it; an engine's own loop calls, per request, begin_request(), then every "
                           "step keep_drafts(confidence) (for a batch, BatchPlan.keep_drafts of every request's) and "
                           "observe(...) once the step is decided.")
      .def(nb::new_(&make_speed_cutoff), "step_costs"_a, nb::kw_only(), "levels"_a = 10, "positions"_a = 4,
           "prior_weight"_a = 4.0, "request_weight"_a = 8.0, "memory"_a = 0.998, "explore"_a = 0.0, "learn_costs"_a = true,
           "step_costs[b - 1]: a step of b tokens' cost relative to one (1.0 first; measure_step_seconds gives seconds "
           "to divide by their first). Its length is the largest block. Raises Error on a bad curve or option.")
      .def_prop_ro("max_block_size", &speed_cutoff::max_block_size)
      .def_prop_ro("step_costs", &current_costs, "The cost curve now: the prior refreshed by the step timings seen.")
      .def("acceptance", &speed_cutoff::acceptance, "level"_a, "position"_a,
           "The current chance that a draft of this confidence level, at this 0-based place in its block, is "
           "accepted given those before it were.")
      .def("shared", &speed_cutoff::shared,
           "Another cut-off for a request served at the same time as this one's: its own request's state, and "
           "the earlier requests' estimates pooled with this one (what either learns, both use). copy.copy gives "
           "an independent one.")
      .def("__copy__", [](const speed_cutoff& p) { return speed_cutoff(p); })
      .def("begin_request", [](speed_cutoff& p) { (void)p.choose({}); },
           "Starts a request: forgets the last request's own counts (the earlier requests' estimates stay).")
      .def("draft_gains", &draft_gains, "confidence"_a,
           "confidence: float32 [d], LookupDrafter.draft's grades of the step's drafts. Returns float64 [min(d, "
           "max_block_size - 1)]: [k - 1] is the chance that drafts 1..k are all accepted (non-increasing), what "
           "plan_batch_drafts weighs. Decides nothing.")
      .def("keep_drafts", [](speed_cutoff& p, const confidence_array& c) { return p.keep_drafts(as_span(c)); },
           "confidence"_a,
           "How many of the step's drafts to verify (a prefix, 0 for a plain step): the most expected committed "
           "tokens per unit of step cost. Call observe() once the step is decided.")
      .def("keep", [](speed_cutoff& p, const confidence_array& c, int k) { return p.keep(as_span(c), k); },
           "confidence"_a, "kept"_a,
           "Verifies the first `kept` drafts, decided elsewhere (plan_batch_drafts): clamped to [0, len(draft_gains)], "
           "returned. Call observe() once the step is decided.")
      .def("observe", &observe, "step"_a, "block_size"_a, "accepted"_a, "seconds"_a,
           "What the step showed: its 0-based number in the request, the tokens scored (anchor + the drafts kept), the "
           "drafts accepted, and its wall time (drafting, scoring, acceptance), which refreshes the cost curve "
           "unless learn_costs is off (in a batch the time is the batch's: keep it off there). Raises ValueError "
           "on impossible values.");

  m.def("plan_batch_drafts", &plan, "gains"_a, "row_cost"_a,
        "The drafts to verify for requests served in one batch step: gains[i] is request i's draft_gains (float64, "
        "non-increasing), row_cost[R - 1] a batch step's cost with R rows in all (one anchor per request plus the "
        "drafts; any unit). Keeps the largest gains of all requests for the number of draft rows that maximises "
        "(n + their gains) / row_cost[n + rows - 1]; with one request, keep_drafts' choice. Returns int32 [n], the "
        "drafts of each request to keep. Raises Error when row_cost has fewer than n entries, ValueError on bad "
        "gains or costs.");

  nb::class_<batch_planner>(m, "BatchPlan",
                            "The drafts of a batch's requests planned together, each step, for speed cut-offs: a "
                            "batch step's cost by its total rows (or by its widest block, padded), kept between steps "
                            "with the plan's buffers.")
      .def(nb::init<std::vector<double>, bool>(), "row_cost"_a, nb::kw_only(), "padded"_a = false,
           "row_cost[R - 1]: the cost of a batch step of R rows in all (any unit; a short curve is a row budget). "
           "padded: the engine pads every block to the longest, so row_cost[w - 1] is the cost of a step whose "
           "longest block has w rows, and each request verifies its drafts up to the chosen width. Raises "
           "ValueError on an empty curve or a cost that is not finite and > 0.")
      .def_ro("row_cost", &batch_planner::row_cost)
      .def_ro("padded", &batch_planner::padded)
      .def("keep_drafts", &batch_planner::keep_drafts, "cutoffs"_a, "confidence"_a,
           "One step: cutoffs[i] (a shared() copy per request) and confidence[i] (float32, LookupDrafter.draft's "
           "grades of request i's drafts). Each cut-off's draft_gains, the plan over them (plan_batch_drafts, or by "
           "width when padded), and each cut-off's keep of its share, in one call. Returns int32 [n], the drafts of each request to verify; "
           "call each cut-off's observe() once the step is decided. Raises Error when row_cost (by rows) has "
           "fewer entries than requests.");
}

}  // namespace blockpilot::python
