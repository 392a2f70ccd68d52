// Decode traces: each request's prompt and the target's continuation of it, with the workload that
// made them. `measure --trace-out` and llama_cpp_decode write them, replay-steps replays them, and the
// lookup drafter's corpora are traces (there the prompts' token ids may be left out).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
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
  /// cannot be read, is not a trace, holds no request, or a number its field cannot hold: token ids
  /// are integers in [0, vocab), never rounded or wrapped.
  [[nodiscard]] static decode_trace read(const std::filesystem::path& path, const std::string& what) {
    std::ifstream in(path);
    if (!in) throw error(what + ": cannot be read");
    decode_trace t;
    try {
      const auto j = nlohmann::json::parse(in);
      t.workload = j.value("workload", nlohmann::ordered_json::object());
      const auto number = [&](const nlohmann::json& v, const char* field, std::int64_t lo, std::int64_t hi) {
        if (const auto i = integer_in(v, lo, hi)) return *i;
        throw error(what + ": " + field + " " + v.dump() + " is not an integer in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
      };
      t.vocab = number(j.at("vocab"), "vocab", 1, std::int64_t{1} << 31);
      t.max_new_tokens = static_cast<int>(number(j.value("max_new_tokens", nlohmann::json(0)), "max_new_tokens", 0, 1 << 30));
      t.temperature = j.value("temperature", 0.0);
      for (const auto& r : j.at("requests")) {
        request q{r.at("prompt").get<std::string>(), {}, {}};
        const auto ids = [&](const nlohmann::json& list, std::vector<token_id>& out) {
          for (const auto& id : list) {
            const auto i = integer_in(id, 0, t.vocab - 1);
            if (!i)
              throw error(what + ": request " + q.prompt + " holds token " + id.dump() +
                          (id.is_number_integer() ? ", outside the vocabulary of " + std::to_string(t.vocab)
                                                  : ", not an integer"));
            out.push_back(static_cast<token_id>(*i));
          }
        };
        ids(r.value("prompt_ids", nlohmann::json::array()), q.prompt_ids);
        ids(r.at("tokens"), q.tokens);
        t.requests.push_back(std::move(q));
      }
    } catch (const nlohmann::json::exception& e) {
      throw error(what + ": not a trace of `measure --trace-out` (" + e.what() + ")");
    }
    if (!(t.temperature >= 0 && t.temperature <= std::numeric_limits<double>::max()))
      throw error(what + ": temperature " + std::to_string(t.temperature) + " is not finite and >= 0");
    if (t.requests.empty()) throw error(what + ": no requests");
    return t;
  }

 private:
  /// v when it is an integer in [lo, hi]: JSON's 1.9, 4294967301 (for a 32-bit id) and "5" are not.
  [[nodiscard]] static std::optional<std::int64_t> integer_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) return std::nullopt;
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) return std::nullopt;
    const auto i = v.get<std::int64_t>();
    return i >= lo && i <= hi ? std::optional(i) : std::nullopt;
  }
};

}  // namespace blockpilot
