// libFuzzer target for the DFlash checkpoint's config.json reader (models/dflash_drafter.hpp): the
// input is config.json of a folder without weights, so a config that reads fails on the missing
// model.safetensors; either way the load must throw blockpilot::error and nothing else.
#include <cstddef>
#include <cstdint>

#include "blockpilot_workbench/models/dflash_drafter.hpp"
#include "scratch_folder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = blockpilot::fuzzing::write_input("config.json", data, size);
  try {
    (void)blockpilot::dflash_model::load(path.parent_path());
    __builtin_trap();  // there are no weights: loading cannot succeed
  } catch (const blockpilot::error&) {
  }
  return 0;
}
