// The whole decode loop for a verifier and a drafter written in Python (or the built-in lookup drafter),
// with a fixed block size, a predictor's, or the speed cut-off's per step; the verifier's step time by size.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"
#include "blockpilot/engine/block_invariance.hpp"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/engine/step_timing.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot/policy/step_cost_model.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "python_models.hpp"
#include "rules.hpp"

namespace blockpilot::python {

using namespace nb::literals;

namespace {

/// A fixed size or a predictor (owned by its Python object, which the call keeps alive).
struct bound_policy {
  std::variant<runtime_block_size, compact_predictor*> policy;

  [[nodiscard]] int max_block_size() const {
    return std::visit([](const auto& p) { return deref(p).max_block_size(); }, policy);
  }
  [[nodiscard]] block_size_choice choose(const request_features& f) {
    return std::visit([&](auto& p) { return deref(p).choose(f); }, policy);
  }

 private:
  template <class P>
  static P& deref(P& p) { return p; }
  template <class P>
  static P& deref(P* p) { return *p; }
};

bound_policy make_policy(const nb::handle& policy) {
  if (nb::isinstance<compact_predictor>(policy)) return {nb::cast<compact_predictor*>(policy)};
  if (!nb::isinstance<nb::int_>(policy)) throw nb::type_error("policy must be a block size (int) or a Predictor");
  const int b = nb::cast<int>(policy);
  if (b < 1 || b > block_size_limit)
    throw nb::value_error(("block size " + std::to_string(b) + " outside [1, " + std::to_string(block_size_limit) + "]").c_str());
  return {runtime_block_size{b}};
}

/// The speed cut-off, owned by its Python object: one instance serves every request, and learns from all.
struct speed_cutoff_ref {
  using logits_backend = speed_cutoff::logits_backend;
  speed_cutoff* policy;

  [[nodiscard]] int max_block_size() const { return policy->max_block_size(); }
  [[nodiscard]] block_size_choice choose(const request_features& f) { return policy->choose(f); }
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) { return policy->keep_drafts(confidence); }
  [[nodiscard]] int next(const step_record& step) { return policy->next(step); }
};

/// (tokens int32 [count], confidence float32 [count]): lookup's drafts after `context`, for an engine's own loop.
nb::tuple lookup_draft(lookup_drafter& drafter, nb::handle context_tokens, int count) {
  const int32_values context(context_tokens, "LookupDrafter.draft: context");
  for (const token_id t : context.span())
    if (t < 0 || t >= drafter.vocab_size())
      throw nb::value_error(("LookupDrafter.draft: context token " + std::to_string(t) + " outside the vocabulary of " +
                             std::to_string(drafter.vocab_size())).c_str());
  if (count < 0 || count > drafter.max_draft_rows())
    throw nb::value_error(("count " + std::to_string(count) + " outside [0, max_draft_rows = " +
                           std::to_string(drafter.max_draft_rows()) + "]").c_str());
  draft_request request;
  request.context = context.span();
  request.block_size = count + 1;
  std::vector<token_id> tokens(static_cast<std::size_t>(count));
  check(drafter.draft(request, tokens), "LookupDrafter.draft");
  const std::span<const float> graded = drafter.draft_confidence();
  const auto n = static_cast<std::size_t>(count);
  return nb::make_tuple(to_numpy(std::move(tokens), {n}), to_numpy(std::vector<float>(graded.begin(), graded.end()), {n}));
}

lookup_drafter make_lookup_drafter(std::int64_t vocab, int max_ngram, int min_ngram, int max_draft_rows,
                                   std::string_view confidence, const std::optional<std::vector<std::vector<token_id>>>& corpus) {
  if (confidence != "ngram" && confidence != "evidence")
    throw nb::value_error(("confidence must be 'ngram' or 'evidence', not '" + std::string(confidence) + "'").c_str());
  return lookup_drafter(vocab, max_ngram, min_ngram, max_draft_rows,
                        confidence == "ngram" ? lookup_confidence::ngram : lookup_confidence::evidence,
                        corpus ? std::make_shared<const ngram_corpus>(*corpus) : nullptr);
}

/// `f(verifier)` on a Python verifier; a callback's failure is named in the error, and what it raised
/// is the error's cause (callback_failure).
template <class F>
auto on_python_verifier(nb::object verifier_model, F&& f) {
  callback_errors errors;
  python_verifier verifier(std::move(verifier_model), errors);
  try {
    return f(verifier);
  } catch (const error& e) {
    const std::string message = std::string(e.what()) + (errors.detail.empty() ? "" : " (" + errors.detail + ")");
    if (errors.exception.is_valid()) throw callback_failure(message, errors.exception);
    throw error(message);
  }
}

std::vector<double> measure_steps(nb::object verifier_model, nb::handle context_tokens, int max_block, int repeats) {
  const int32_values context(context_tokens, "measure_step_seconds: context");
  return on_python_verifier(std::move(verifier_model), [&](python_verifier& v) {
    return measure_step_seconds(v, context.span(), max_block, repeats);
  });
}

/// check_block_invariance: (block_size, rows, max_abs_difference, argmax_changes) per size.
std::vector<std::tuple<int, int, double, int>> check_blocks(nb::object verifier_model, nb::handle prompt_tokens,
                                                           nb::handle continuation_tokens, const std::vector<int>& sizes) {
  const int32_values prompt(prompt_tokens, "check_block_invariance: prompt");
  const int32_values continuation(continuation_tokens, "check_block_invariance: continuation");
  return on_python_verifier(std::move(verifier_model), [&](python_verifier& v) {
    std::vector<std::tuple<int, int, double, int>> out;
    for (const auto& r : check_block_invariance(v, prompt.span(), continuation.span(), sizes))
      out.emplace_back(r.block_size, r.rows, r.max_abs_difference, r.argmax_changes);
    return out;
  });
}

template <class Rule, class Drafter, class Policy>
generation_result decode(Drafter& drafter, python_verifier& verifier, Policy policy, std::span<const token_id> prompt,
                         const generation_config& config) {
  speculative_decoder<Drafter, python_verifier, Policy, Rule> decoder(drafter, verifier, policy);
  generation_result result;
  decoder.generate(prompt, config, result);
  return result;
}

/// (GenerationResult, the exception a callback raised or None, what went wrong in words).
nb::tuple generate(nb::object verifier_model, nb::object drafter_model, nb::handle prompt_tokens, nb::handle policy,
                   std::string_view rule, int max_new_tokens, float temperature, std::uint64_t seed,
                   std::vector<token_id> stop_tokens, int top_k, float top_p, float min_p, nb::object on_tokens) {
  const int32_values prompt(prompt_tokens, "generate: prompt");
  callback_errors errors;
  python_verifier verifier(std::move(verifier_model), errors);
  std::stop_source stop;
  generation_config config;
  config.max_new_tokens = max_new_tokens;
  config.temperature = temperature;
  config.seed = seed;
  config.stop_tokens = std::move(stop_tokens);
  config.sampling = {top_k, top_p, min_p};
  config.cancel = stop.get_token();
  if (!on_tokens.is_none())
    config.on_tokens = [&](std::span<const token_id> tokens) {
      try {
        on_tokens(to_numpy(tokens));
      } catch (const nb::python_error& e) {
        errors.raised(e, "on_tokens");
        stop.request_stop();
      }
    };
  const auto finish = [&](generation_result result) {
    if (errors.exception.is_valid() && result.error == status::success)  // on_tokens raised on the last tokens: cancelled too
      result.error = status::cancelled, result.failed_stage = "cancel";
    return nb::make_tuple(std::move(result), errors.exception.is_valid() ? errors.exception : nb::none(), errors.detail);
  };
  if (nb::isinstance<speed_cutoff>(policy)) {
    if (!nb::isinstance<lookup_drafter>(drafter_model))
      throw nb::type_error("the SpeedCutoff policy needs a drafter that grades its drafts: a LookupDrafter");
    const speed_cutoff_ref chosen{nb::cast<speed_cutoff*>(policy)};
    return finish(with_rule(rule, [&]<class Rule>(Rule) {
      return decode<Rule>(nb::cast<lookup_drafter&>(drafter_model), verifier, chosen, prompt.span(), config);
    }));
  }
  const bound_policy chosen = make_policy(policy);
  return finish(with_rule(rule, [&]<class Rule>(Rule) {
    if (drafter_model.is_none()) {
      if (chosen.max_block_size() != 1) throw nb::value_error("without a drafter the block size must be 1");
      lookup_drafter none(verifier.vocab_size(), 1, 1, 0);
      return decode<Rule>(none, verifier, chosen, prompt.span(), config);
    }
    if (nb::isinstance<lookup_drafter>(drafter_model))
      return decode<Rule>(nb::cast<lookup_drafter&>(drafter_model), verifier, chosen, prompt.span(), config);
    python_drafter drafter(drafter_model, errors);
    return decode<Rule>(drafter, verifier, chosen, prompt.span(), config);
  }));
}

std::vector<double> acceptance_rates(const request_stats& s) {
  std::vector<double> rates;
  for (std::size_t j = 1; j + 1 < s.steps_by_block.size(); ++j) rates.push_back(s.acceptance_rate(static_cast<int>(j)));
  return rates;
}

std::map<std::string, double> stage_times(const request_stats& s) {
  const stage_seconds& t = s.seconds;
  return {{"prefill", t.prefill}, {"policy", t.policy},   {"draft", t.draft},
          {"verify", t.verify},   {"accept", t.accept},   {"streaming", t.streaming},
          {"bookkeeping", t.bookkeeping()},               {"total", t.total}};
}

}  // namespace

void bind_decoder(nb::module_& m) {
  nb::class_<lookup_drafter>(m, "LookupDrafter",
                             "Prompt-lookup drafting: proposes the tokens that followed the most recent earlier occurrence "
                             "of the context's last n tokens (n from max_ngram down to min_ngram). Runs inside the decoder, "
                             "without calls into Python.")
      .def(nb::new_(&make_lookup_drafter), "vocab_size"_a, "max_ngram"_a = 3, "min_ngram"_a = 1, "max_draft_rows"_a = 63,
           "confidence"_a = "ngram", "corpus"_a = nb::none(),
           "confidence grades each draft for the SpeedCutoff policy: 'ngram' (the matched n-gram's length over "
           "max_ngram) or 'evidence' (how far back the context agrees with the occurrence, and whether the "
           "n-gram's other occurrences continued alike). corpus (token id lists: what the target wrote for other "
           "requests) adds drafts where the context has no match or a weaker one than the corpus's: the most "
           "frequent next token after each 2- to 4-gram there, graded by its share.")
      .def_prop_ro("vocab_size", &lookup_drafter::vocab_size)
      .def_prop_ro("max_draft_rows", &lookup_drafter::max_draft_rows)
      .def("draft", &lookup_draft, "context"_a, "count"_a,
           nb::sig("def draft(self, context: Sequence[int] | NDArray[numpy.integer], count: int) -> tuple"),
           "The drafts an engine's own loop verifies next: context [n] is every committed token of the request "
           "(the last one the block's anchor); returns (tokens int32 [count], confidence float32 [count]), the "
           "continuation of the longest recent n-gram match and each draft's grade (0 where lookup pads). Token ids are "
           "any integers (int32 read in place); floats or ids outside int32 raise TypeError / ValueError, an empty "
           "context Error.");

  m.def("_measure_step_seconds", &measure_steps, "verifier"_a, "context"_a, "max_block"_a, "repeats"_a,
        "The loop behind blockpilot.measure_step_seconds (which documents it).");
  m.def("_check_block_invariance", &check_blocks, "verifier"_a, "prompt"_a, "continuation"_a, "block_sizes"_a,
        "The check behind blockpilot.check_block_invariance (which documents it).");

  nb::class_<request_stats>(m, "RequestStats", "What one request did: block size, steps, acceptance, time per stage.")
      .def_ro("block_size", &request_stats::block_size, "The size the policy chose after prefill.")
      .def_ro("policy_fallback", &request_stats::policy_fallback, "The policy could not use its model and chose its default.")
      .def_ro("steps", &request_stats::steps, "Decode steps (verifier score calls).")
      .def_ro("drafted", &request_stats::drafted)
      .def_ro("accepted", &request_stats::accepted)
      .def_ro("generated", &request_stats::generated)
      .def_ro("steps_by_length", &request_stats::steps_by_length, "[k]: steps that committed k tokens.")
      .def_ro("steps_by_block", &request_stats::steps_by_block, "[b]: steps run with block size b.")
      .def_prop_ro("tau", &request_stats::tau, "Mean tokens committed per step (accepted drafts + 1).")
      .def_prop_ro("acceptance_rates", &acceptance_rates, "[j - 1]: share of steps that drafted position j and accepted it.")
      .def_prop_ro("seconds", &stage_times, "Wall time per stage, in seconds.");

  nb::class_<generation_result>(m, "GenerationResult")
      .def_prop_ro("tokens", [](const generation_result& r) { return to_numpy(r.tokens); }, nb::rv_policy::move,
                   "int32 [n]: the generated tokens, prompt excluded (on an error: those committed before it).")
      .def_ro("stats", &generation_result::stats)
      .def_ro("error", &generation_result::error, "Status.success, or what ended the request early.")
      .def_prop_ro("failed_stage", [](const generation_result& r) { return std::string(r.failed_stage); });

  m.def("_generate", &generate, "verifier"_a, "drafter"_a.none(), "prompt"_a, "policy"_a, "rule"_a, "max_new_tokens"_a,
        "temperature"_a, "seed"_a, "stop_tokens"_a, "top_k"_a, "top_p"_a, "min_p"_a, "on_tokens"_a.none(),
        "The decode loop behind blockpilot.generate (which documents it).");
}

}  // namespace blockpilot::python
