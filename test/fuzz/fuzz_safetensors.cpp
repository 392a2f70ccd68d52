// libFuzzer target for io/safetensors.hpp and nn/weight_file.hpp, parsing from memory: any input must
// either load or throw blockpilot::error; anything else (crash, other exception, leak) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "blockpilot_workbench/nn/weight_file.hpp"

namespace {

/// A file that loads must also run: one forward of a zero row succeeds (small shapes only).
template <class T>
void load_and_run(std::span<const std::byte> bytes) {
  try {
    const auto p = blockpilot::nn::load_predictor<T>(bytes, "fuzz");
    const auto& s = p.network.shape();
    if (s.parameter_count() > (1 << 20) || s.input > (1 << 16)) return;
    std::vector<float> x(static_cast<std::size_t>(s.input)), logits(static_cast<std::size_t>(s.classes));
    std::vector<float> ws(static_cast<std::size_t>(p.network.workspace_size(1)));
    if (p.network.forward(std::span<const float>(x), logits, ws) != blockpilot::status::success) __builtin_trap();
  } catch (const blockpilot::error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto file = blockpilot::io::safetensors_file::parse(bytes, "fuzz");
    for (const auto& t : file.tensors())
      if (t.type == blockpilot::io::dtype::f32) (void)file.values<float>(t);
  } catch (const blockpilot::error&) {
  }
  load_and_run<float>(bytes);
  load_and_run<Eigen::bfloat16>(bytes);
  return 0;
}
