// Offline sweeps: every prompt decoded at every candidate block size, tau recorded per pair —
// the raw material of the oracle, of replay evaluation and of predictor training labels.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/io/acceptance_json.hpp"
#include "blockpilot/io/policy_dataset.hpp"
#include "blockpilot/policy/fixed.hpp"

namespace blockpilot {

/// Called after each (prompt, size) run with the number of runs done and the total.
using sweep_progress = std::function<void(std::size_t done, std::size_t total)>;

/// Decodes every prompt at every size in `sizes` (ascending) with `config` and returns the
/// acceptance table (prompt keys "0", "1", ...). A request that ends before its first step (a stop
/// token first) records tau 1, the autoregressive value. Throws `error` naming the prompt and the
/// size when a request fails.
template <class Acceptance = greedy_match, class Drafter, class Verifier>
[[nodiscard]] acceptance_table sweep_block_sizes(Drafter& drafter, Verifier& verifier,
                                                 std::span<const std::vector<token_id>> prompts,
                                                 std::span<const int> sizes, const generation_config& config,
                                                 const sweep_progress& progress = {}) {
  acceptance_table table;
  table.sizes.assign(sizes.begin(), sizes.end());
  table.source = "sweep";
  table.tau.assign(prompts.size(), std::vector<double>(sizes.size()));
  for (std::size_t i = 0; i < prompts.size(); ++i) table.prompts.push_back(std::to_string(i));
  speculative_decoder<Drafter, Verifier, runtime_block_size, Acceptance> decoder(drafter, verifier);
  generation_result result;
  std::size_t done = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    decoder.policy().size = sizes[k];
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      if (const status s = decoder.generate(prompts[i], config, result); s != status::success)
        throw error("sweep: prompt " + std::to_string(i) + " at block size " + std::to_string(sizes[k]) + " failed in " +
                    std::string(result.failed_stage) + ": " + std::string(to_string(s)));
      table.tau[i][k] = result.stats.steps == 0 ? 1.0 : result.stats.tau();
      if (progress) progress(++done, prompts.size() * sizes.size());
    }
  }
  return table;
}

namespace sweep_detail {

/// Prompt key -> taus already in the journal (lines {"prompt", "sizes", "tau"}); a torn last line
/// from an interrupted run is ignored, a line for other sizes is an error.
inline std::map<std::string, std::vector<double>> read_journal(const std::filesystem::path& path,
                                                              std::span<const int> sizes) {
  std::map<std::string, std::vector<double>> done;
  std::ifstream in(path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.value("sizes", std::vector<int>{}) != std::vector<int>(sizes.begin(), sizes.end()))
      throw error("sweep journal '" + path.string() + "' line " + std::to_string(number) +
                  " field 'sizes': another sweep's block sizes; use a new --out folder");
    done[j.at("prompt").get<std::string>()] = j.at("tau").get<std::vector<double>>();
  }
  return done;
}

}  // namespace sweep_detail

/// The predictor's training data: every prompt at every size (as `sweep_block_sizes`) plus the
/// target's last prefill row. Resumable: each finished prompt is appended to `journal` (when not
/// empty), and prompts found there are not decoded again.
template <class Acceptance = greedy_match, class Drafter, class Verifier>
[[nodiscard]] policy_dataset sweep_policy_dataset(Drafter& drafter, Verifier& verifier,
                                                  std::span<const std::string> keys,
                                                  std::span<const std::vector<token_id>> prompts,
                                                  std::span<const int> sizes, const generation_config& config,
                                                  const std::filesystem::path& journal = {},
                                                  const sweep_progress& progress = {}) {
  auto done = journal.empty() ? std::map<std::string, std::vector<double>>{} : sweep_detail::read_journal(journal, sizes);
  std::ofstream log;
  if (!journal.empty()) {
    std::ifstream tail(journal, std::ios::binary | std::ios::ate);
    const bool torn = tail && tail.tellg() > 0 && tail.seekg(-1, std::ios::end) && tail.get() != '\n';
    log.open(journal, std::ios::app);
    if (torn) log << '\n';  // end a torn last line, or the next record joins it and is lost with it
  }
  policy_dataset d;
  d.sizes.assign(sizes.begin(), sizes.end());
  d.vocab = verifier.vocab_size();
  std::size_t finished = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto it = done.find(keys[i]);
    if (it == done.end()) {
      const auto table = sweep_block_sizes<Acceptance>(drafter, verifier, prompts.subspan(i, 1), sizes, config);
      it = done.emplace(keys[i], table.tau[0]).first;
      if (log) log << nlohmann::json{{"prompt", keys[i]}, {"sizes", d.sizes}, {"tau", it->second}}.dump() << std::endl;
    }
    matrix_view<const float> logits;
    if (const status s = verifier.prefill(prompts[i], logits); s != status::success)
      throw error("sweep: prefill of prompt " + keys[i] + " failed: " + std::string(to_string(s)));
    d.add(keys[i], logits.row(0), it->second);
    if (progress) progress(++finished, prompts.size());
  }
  return d;
}

}  // namespace blockpilot
