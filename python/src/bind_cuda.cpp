// The CUDA half of the package, when it is built with CUDA: acceptance on device arrays and the compact
// predictor on the device (cuda_ops.cu); `cuda_built` says whether it is there.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string_view.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rules.hpp"

#if defined(BLOCKPILOT_PYTHON_CUDA)
#include "cuda_ops.hpp"
#include "errors.hpp"
#endif

namespace blockpilot::python {

using namespace nb::literals;

#if defined(BLOCKPILOT_PYTHON_CUDA)
namespace {

template <class T, class... Shape>
using device_array = nb::ndarray<const T, nb::c_contig, nb::device::cuda, Shape...>;

nb::tuple accept_cuda(std::string_view rule, const device_array<float, nb::ndim<2>>& target_logits,
                      const device_array<token_id, nb::ndim<1>>& blocks, const device_array<int, nb::ndim<1>>& draft_offsets,
                      const host_array<std::uint64_t, nb::ndim<1>>& seeds, const host_array<std::uint64_t, nb::ndim<1>>& offsets,
                      const host_array<float, nb::ndim<1>>& temperatures,
                      const std::optional<device_array<float, nb::ndim<2>>>& draft_probs, int top_k, float top_p, float min_p,
                      std::uintptr_t stream) {
  const std::size_t batch = seeds.shape(0);
  const int device = target_logits.device_id();
  if (blocks.device_id() != device || draft_offsets.device_id() != device || (draft_probs && draft_probs->device_id() != device))
    throw nb::value_error("accept: blocks, draft_offsets and draft_probs must be on target_logits' device");
  if (offsets.shape(0) != batch || temperatures.shape(0) != batch || draft_offsets.shape(0) != batch + 1 ||
      (draft_probs && draft_probs->shape(1) != target_logits.shape(1)))
    throw nb::value_error("accept: seeds, offsets, temperatures, draft_offsets or draft_probs do not fit the batch (see blockpilot.accept)");
  check_rule_limits(static_cast<std::int64_t>(batch), static_cast<std::int64_t>(target_logits.shape(1)));
  cuda_ops::acceptance_call c;
  c.rule = with_rule(rule, []<class Rule>(Rule) {
    using id = cuda_ops::rule_id;
    return std::is_same_v<Rule, greedy_match> ? id::greedy : std::is_same_v<Rule, sample_and_match> ? id::sample_match : id::rejection;
  });
  c.target_logits = target_logits.data();
  c.rows = static_cast<std::int64_t>(target_logits.shape(0));
  c.vocab = static_cast<std::int64_t>(target_logits.shape(1));
  c.blocks = blocks.data();
  c.block_rows = static_cast<std::int64_t>(blocks.shape(0));
  c.draft_offsets = draft_offsets.data();
  c.batch = static_cast<int>(batch);
  c.draft_probs = draft_probs ? draft_probs->data() : nullptr;
  c.draft_rows = draft_probs ? static_cast<std::int64_t>(draft_probs->shape(0)) : -1;
  c.seeds = as_span(seeds);
  c.offsets = as_span(offsets);
  c.temperatures = as_span(temperatures);
  c.sampling = {top_k, top_p, min_p};
  c.stream = stream;
  c.device = device;
  cuda_ops::acceptance_outcome out;
  {
    const nb::gil_scoped_release unlocked;
    out = cuda_ops::accept(c);
  }
  if (!out.refused.empty()) throw nb::value_error(("accept: " + out.refused).c_str());
  check(out.call, "accept on the device");
  out.results.resize(batch);
  out.statuses.resize(batch, status::success);
  return results_to_numpy(out.results, out.statuses);
}

void make_cuda_predictor(cuda_ops::predictor* self, const compact_predictor& p, std::uintptr_t stream) {
  const auto& network = p.predictor().network;
  const auto& shape = network.shape();
  cuda_ops::predictor::network n{network.parameters(), network.feature_mean(), network.feature_std(),
                                 static_cast<int>(shape.input), {}, static_cast<int>(shape.classes)};
  for (const auto h : shape.hidden) n.hidden.push_back(static_cast<int>(h));
  const auto& m = p.metadata();
  new (self) cuda_ops::predictor(n, p.features().top_k, p.features().temperature, m.training_block_size, m.window_k,
                                 m.vocab_size, stream);
}

nb::tuple choose_cuda(cuda_ops::predictor& p, const device_array<float, nb::ndim<2>>& rows, std::uintptr_t stream) {
  if (rows.device_id() != p.device())
    throw nb::value_error(("CudaPredictor: rows on cuda:" + std::to_string(rows.device_id()) + ", the predictor on cuda:" +
                           std::to_string(p.device())).c_str());
  const std::size_t n = rows.shape(0);
  const auto vocab = static_cast<std::int64_t>(rows.shape(1));
  std::vector<std::int32_t> sizes(n);
  std::vector<bool> fallback(n);
  {
    const nb::gil_scoped_release unlocked;
    for (std::size_t r = 0; r < n; ++r) {
      const block_size_choice c = p.choose(rows.data() + static_cast<std::int64_t>(r) * vocab, vocab, stream);
      sizes[r] = c.block_size;
      fallback[r] = c.fallback;
    }
  }
  return nb::make_tuple(to_numpy(std::move(sizes), {n}), to_numpy(fallback));
}

}  // namespace

void bind_cuda(nb::module_& m) {
  m.attr("cuda_built") = true;
  m.def("cuda_device_count", &cuda_ops::device_count, "CUDA devices present (0 without a driver or a device).");
  // Device arrays are read in place, never converted: a conversion would run on another stream than the call.
  m.def("_accept_cuda", &accept_cuda, "rule"_a, "target_logits"_a.noconvert(), "blocks"_a.noconvert(),
        "draft_offsets"_a.noconvert(), "seeds"_a, "offsets"_a, "temperatures"_a, "draft_probs"_a.noconvert().none(), "top_k"_a,
        "top_p"_a, "min_p"_a, "stream"_a,
        "blockpilot.accept on CUDA arrays (which documents it); returns (accepted, bonus, status codes) on the host.");
  nb::class_<cuda_ops::predictor>(m, "CudaPredictor",
                                  "A Predictor's decision on the device: compact features and the MLP of CUDA rows.")
      .def("__init__", &make_cuda_predictor, "predictor"_a, "stream"_a = 0,
           "Copies the predictor's network to the current device; `stream` is the cudaStream_t its decisions run on "
           "(0: the default stream).")
      .def("_choose", &choose_cuda, "rows"_a.noconvert(), "stream"_a,
           "The call behind CudaPredictor.choose (which documents it).");
}

#else

void bind_cuda(nb::module_& m) {
  m.attr("cuda_built") = false;
  m.def("cuda_device_count", [] { return 0; }, "CUDA devices present: 0, this build has no CUDA.");
}

#endif

}  // namespace blockpilot::python
