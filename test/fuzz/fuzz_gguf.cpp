// libFuzzer target for io/gguf.hpp, parsing from memory: any input must either load or throw
// blockpilot::error, and every tensor of a file that loads must dequantise (or throw error for its type).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "blockpilot_workbench/io/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = blockpilot::io;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto file = io::gguf_file::parse(bytes, "fuzz");
    for (const auto& t : file.tensors()) {
      try {
        const auto values = file.dequantize(t);
        if (values.size() != t.element_count()) __builtin_trap();
      } catch (const blockpilot::error&) {
        if (io::is_dequantisable(t.type)) __builtin_trap();
      }
    }
    for (const auto& [key, value] : file.metadata()) {
      if (value.type() == io::gguf_value_type::string) (void)file.get_string(key);
      if (value.type() == io::gguf_value_type::array) {
        try {
          (void)file.get_int_array(key);
        } catch (const blockpilot::error&) {
        }
      }
    }
  } catch (const blockpilot::error&) {
  }
  return 0;
}
