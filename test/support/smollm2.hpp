// Where the tests find SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh), and the precondition that
// skips a test with a message when it is absent.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>

#include <boost/test/unit_test.hpp>

#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/llama.hpp"

namespace blockpilot::testing {

/// $BLOCKPILOT_SMOLLM2_GGUF, else the fetch script's cache ($BLOCKPILOT_CACHE or ~/.cache/blockpilot).
inline std::filesystem::path smollm2_path() {
  if (const char* p = std::getenv("BLOCKPILOT_SMOLLM2_GGUF")) return p;
  const char* cache = std::getenv("BLOCKPILOT_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base =
      cache ? std::filesystem::path(cache) : std::filesystem::path(home ? home : "") / ".cache" / "blockpilot";
  return base / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline boost::test_tools::assertion_result smollm2_present(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(std::filesystem::is_regular_file(smollm2_path()));
  r.message() << smollm2_path().string() << " is absent (run scripts/fetch-smollm2.sh or set BLOCKPILOT_SMOLLM2_GGUF)";
  return r;
}

/// SmolLM2's tokenizer and fp32 model, loaded once per test program (only when smollm2_present).
struct smollm2_model {
  bpe_tokenizer tokenizer;
  llama_model model;
};

inline const smollm2_model& smollm2() {
  static const auto m = [] {
    const auto file = io::gguf_file::open(smollm2_path());
    return std::make_unique<smollm2_model>(smollm2_model{bpe_tokenizer::from_gguf(file), llama_model::load(file)});
  }();
  return *m;
}

}  // namespace blockpilot::testing
