// libFuzzer target for io/acceptance_json.hpp: the input is one <B>.json file of an acceptance
// folder (beside a fixed valid one) and also a selection file; each must read or throw
// blockpilot::error, and a table that reads must replay.
#include <cstddef>
#include <cstdint>
#include <fstream>

#include "blockpilot_workbench/eval/replay.hpp"
#include "blockpilot_workbench/io/acceptance_json.hpp"
#include "scratch_folder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = blockpilot::fuzzing;
  const auto dir = fz::scratch_folder() / "acceptance";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "8.json", std::ios::trunc) << R"({"0": 3.5, "1": 2.0})";
  const auto input = fz::write_input("acceptance/16.json", data, size);
  try {
    const auto table = blockpilot::read_acceptance_folder(dir);
    (void)blockpilot::replay(table, table.sizes.front(), table.sizes.front(), nullptr);
    const auto selection = blockpilot::read_selection(input, table);
    (void)blockpilot::replay(table, table.sizes.front(), table.sizes.front(), &selection);
  } catch (const blockpilot::error&) {
  }
  return 0;
}
