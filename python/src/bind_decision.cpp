// The block-size decision: compact features of last-token rows, and predictors loaded from files.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"
#include "errors.hpp"

namespace blockpilot::python {

using namespace nb::literals;

namespace {

compact_features make_compact_features(int top_k, float temperature) {
  const compact_features f{top_k, temperature};
  if (top_k < 1 || top_k > compact_features::max_top_k)
    throw nb::value_error(("top_k must be in [1, " + std::to_string(compact_features::max_top_k) + "]").c_str());
  if (!detail::valid_temperature(temperature)) throw status_error(status::invalid_temperature, "CompactFeatures");
  return f;
}

nb::ndarray<nb::numpy, float> extract(const compact_features& f, const rows_array& rows) {
  const std::int64_t n = static_cast<std::int64_t>(rows.shape(0)), vocab = static_cast<std::int64_t>(rows.shape(1));
  check(f.can_implement(vocab), "CompactFeatures.extract: rows of " + std::to_string(vocab) + " logits");
  const std::int64_t width = f.feature_count(vocab);
  std::vector<float> out(static_cast<std::size_t>(n * width)), workspace(f.workspace_size(vocab));
  const matrix_view<const float> view = as_view(rows);
  {
    nb::gil_scoped_release unlocked;  // touches no Python object: `rows` is the caller's, kept alive by the call
    for (std::int64_t r = 0; r < n; ++r)
      check(f.extract(view.row(r), workspace, {out.data() + r * width, static_cast<std::size_t>(width)}),
            "CompactFeatures.extract: row " + std::to_string(r));
  }
  return to_numpy(std::move(out), {static_cast<std::size_t>(n), static_cast<std::size_t>(width)});
}

nb::tuple choose(compact_predictor& p, const rows_array& rows) {
  const std::size_t n = rows.shape(0);
  std::vector<std::int32_t> sizes(n);
  std::vector<bool> fallback_flags(n);
  const matrix_view<const float> view = as_view(rows);
  for (std::size_t r = 0; r < n; ++r) {
    const block_size_choice c = p.choose({{}, view.row(static_cast<std::int64_t>(r))});
    sizes[r] = c.block_size;
    fallback_flags[r] = c.fallback;
  }
  return nb::make_tuple(to_numpy(std::move(sizes), {n}), to_numpy(fallback_flags));
}

}  // namespace

void bind_decision(nb::module_& m) {
  nb::class_<compact_features>(m, "CompactFeatures",
                               "The compact features of a logits row: the top_k largest probabilities of softmax(row / T) "
                               "in descending order, then the statistics named by CompactFeatures.statistics.")
      .def(nb::new_(&make_compact_features), "top_k"_a = 256, "temperature"_a = 1.0f)
      .def_ro("top_k", &compact_features::top_k)
      .def_ro("temperature", &compact_features::temperature)
      .def("feature_count", &compact_features::feature_count, "vocab"_a, "Features per row: top_k + len(statistics).")
      .def("extract", &extract, "rows"_a,
           "rows: float32 [n, vocab] logits (read in place when C-contiguous float32 on the CPU).\n"
           "Returns float32 [n, feature_count(vocab)]. Raises Error on a row with NaN or +inf.")
      .def_prop_ro_static("statistics", [](nb::handle) {
        std::vector<std::string> names;
        for (int s = 0; s < compact_statistic_count; ++s) names.emplace_back(to_string(static_cast<compact_statistic>(s)));
        return names;
      });

  nb::class_<compact_predictor>(m, "Predictor",
                                "A BlockPilot predictor on compact features: the MLP that picks one of the block sizes "
                                "B-k..B+k from the target's last prompt row.")
      .def_static(
          "load",
          [](const std::filesystem::path& file, std::int64_t target_vocab) {
            return load_blockpilot_policy<compact_features>(file, target_vocab);
          },
          "path"_a, "target_vocab"_a = 0,
          "Loads a predictor file (docs/predictor-files.md). With target_vocab > 0 the file must have been trained "
          "for a target of that vocabulary. Raises Error naming the file and the field.")
      .def("choose", &choose, "rows"_a,
           "rows: float32 [n, vocab], each request's last prompt row. Returns (block_sizes int32 [n], fallback bool [n]);\n"
           "fallback marks rows the model could not use (wrong vocabulary, non-finite features): they get B.")
      .def_prop_ro("block_sizes",
                   [](const compact_predictor& p) {
                     std::vector<int> sizes;
                     for (std::int64_t c = 0; c <= 2 * p.metadata().window_k; ++c)
                       sizes.push_back(static_cast<int>(p.metadata().block_size(c)));
                     return sizes;
                   })
      .def_prop_ro("training_block_size", [](const compact_predictor& p) { return p.metadata().training_block_size; })
      .def_prop_ro("window_k", [](const compact_predictor& p) { return p.metadata().window_k; })
      .def_prop_ro("vocab_size", [](const compact_predictor& p) { return p.metadata().vocab_size; })
      .def_prop_ro("temperature", [](const compact_predictor& p) { return p.metadata().temperature; },
                   "The decoding temperature its labels were measured at.")
      .def_prop_ro("max_block_size", &compact_predictor::max_block_size)
      .def_prop_ro("features", [](const compact_predictor& p) { return p.features(); });
}

}  // namespace blockpilot::python
