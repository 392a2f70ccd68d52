// libFuzzer target for the sweep journal reader (eval/sweep.hpp): any journal must read or throw
// blockpilot::error, and every record that reads holds tau in [1, b] for each of its sizes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "blockpilot_workbench/eval/sweep.hpp"
#include "scratch_folder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<int> sizes = {2, 3, 4};
  const auto path = blockpilot::fuzzing::write_input("journal.jsonl", data, size);
  try {
    for (const auto& [key, record] : blockpilot::sweep_detail::read_journal(path, sizes)) {
      if (record.tau.size() != sizes.size()) __builtin_trap();
      for (std::size_t k = 0; k < sizes.size(); ++k)
        if (!(record.tau[k] >= 1.0 && record.tau[k] <= sizes[k])) __builtin_trap();
    }
    blockpilot::sweep_detail::end_last_line(path);
  } catch (const blockpilot::error&) {
  }
  return 0;
}
