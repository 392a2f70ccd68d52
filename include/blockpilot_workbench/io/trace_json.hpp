// Decode traces: each request's prompt and the target's continuation of it, with the workload that
// made them. `measure --trace-out` and llama_cpp_decode write them, replay-steps replays them, and the
// lookup drafter's corpora are traces (there the prompts' token ids may be left out).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// One trace file: its requests in order, and what made them.
struct decode_trace {
  struct request {
    std::string prompt;                ///< the prompt's key (FILE:LINE)
    std::vector<token_id> prompt_ids;  ///< empty where the trace left them out
    std::vector<token_id> tokens;      ///< the continuation
  };
  nlohmann::ordered_json workload = nlohmann::ordered_json::object();  ///< what made the trace
  std::int64_t vocab = 0;  ///< every token id lies in [0, vocab)
  double temperature = 0;
  int max_new_tokens = 0;
  std::vector<request> requests;

  [[nodiscard]] std::vector<std::string> prompt_keys() const {
    std::vector<std::string> keys;
    for (const request& r : requests) keys.push_back(r.prompt);
    return keys;
  }

  [[nodiscard]] nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j{{"workload", workload},       {"vocab", vocab},
                             {"temperature", temperature}, {"max_new_tokens", max_new_tokens},
                             {"requests", nlohmann::json::array()}};
    for (const request& r : requests) {
      nlohmann::ordered_json one{{"prompt", r.prompt}};
      if (!r.prompt_ids.empty()) one["prompt_ids"] = r.prompt_ids;
      one["tokens"] = r.tokens;
      j["requests"].push_back(std::move(one));
    }
    return j;
  }

  /// Reads a trace file; `what` names it in the errors ("--traces FILE"). Throws `error` when the file
  /// cannot be read, is not a trace, holds no request or a token id outside [0, vocab).
  [[nodiscard]] static decode_trace read(const std::filesystem::path& path, const std::string& what) {
    std::ifstream in(path);
    if (!in) throw error(what + ": cannot be read");
    decode_trace t;
    try {
      const auto j = nlohmann::json::parse(in);
      t.workload = j.value("workload", nlohmann::ordered_json::object());
      t.vocab = j.at("vocab").get<std::int64_t>();
      t.temperature = j.value("temperature", 0.0);
      t.max_new_tokens = j.value("max_new_tokens", 0);
      for (const auto& r : j.at("requests"))
        t.requests.push_back({r.at("prompt").get<std::string>(),
                              r.value("prompt_ids", std::vector<token_id>{}), r.at("tokens").get<std::vector<token_id>>()});
    } catch (const nlohmann::json::exception& e) {
      throw error(what + ": not a trace of `measure --trace-out` (" + e.what() + ")");
    }
    if (t.vocab < 1 || t.vocab > std::int64_t{1} << 31) throw error(what + ": vocab " + std::to_string(t.vocab) + " is not in [1, 2^31]");
    if (t.requests.empty()) throw error(what + ": no requests");
    for (const request& r : t.requests)
      for (const auto* ids : {&r.prompt_ids, &r.tokens})
        for (const token_id id : *ids)
          if (id < 0 || id >= t.vocab)
            throw error(what + ": request " + r.prompt + " holds token " + std::to_string(id) + ", outside the vocabulary of " +
                        std::to_string(t.vocab));
    return t;
  }
};

}  // namespace blockpilot
