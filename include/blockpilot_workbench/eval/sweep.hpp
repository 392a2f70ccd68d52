// Offline sweeps: every prompt decoded at every candidate block size, tau recorded per pair —
// the raw material of the oracle, of replay evaluation and of predictor training labels.
#pragma once

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/features/pooled.hpp"
#include "blockpilot_workbench/io/acceptance_json.hpp"
#include "blockpilot_workbench/eval/step_replay.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot/policy/fixed.hpp"

namespace blockpilot {

/// Called after each (prompt, size) run with the number of runs done and the total.
using sweep_progress = std::function<void(std::size_t done, std::size_t total)>;

namespace sweep_detail {

/// Decodes `prompt` at block size `size` into `result`; throws `error` naming the prompt and the size.
/// A request ended by `config.cancel` (the caller had what it needed) is no failure.
template <class Decoder>
void decode_at(Decoder& decoder, std::span<const token_id> prompt, const std::string& key, int size,
               const generation_config& config, generation_result& result) {
  decoder.policy().size = size;
  if (const status s = decoder.generate(prompt, config, result);
      s != status::success && !(s == status::cancelled && config.cancel.stop_requested()))
    throw error("sweep: prompt " + key + " at block size " + std::to_string(size) + " failed in " +
                std::string(result.failed_stage) + ": " + std::string(to_string(s)));
}

/// The request's tau; one that ends before its first step (a stop token first) counts as 1, the
/// autoregressive value.
[[nodiscard]] inline double sweep_tau(const generation_result& r) { return r.stats.steps == 0 ? 1.0 : r.stats.tau(); }

}  // namespace sweep_detail

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
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      sweep_detail::decode_at(decoder, prompts[i], table.prompts[i], sizes[k], config, result);
      table.tau[i][k] = sweep_detail::sweep_tau(result);
      if (progress) progress(++done, prompts.size() * sizes.size());
    }
  }
  return table;
}

namespace sweep_detail {

/// One prompt's record in a sweep journal: tau, wall seconds and generated tokens per size (the
/// timing is empty in journals written before it was recorded).
struct journal_record {
  std::vector<double> tau, seconds;
  std::vector<std::int64_t> tokens;
};

/// Ends the journal's last line: a torn one (an interrupted run's) is cut off, so that torn lines
/// never sit between records; a whole record that only lacks its newline (which `read_journal` has
/// used) gets one.
inline void end_last_line(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  if (text.empty() || text.back() == '\n') return;
  const auto end = text.find_last_of('\n');
  const auto start = end == std::string::npos ? 0 : end + 1;
  if (!nlohmann::json::parse(text.substr(start), nullptr, false).is_discarded()) {
    std::ofstream(path, std::ios::binary | std::ios::app) << '\n';
    return;
  }
  std::filesystem::resize_file(path, start);
}

/// Prompt key -> records already in the journal (lines {"prompt", "sizes", "tau", "seconds",
/// "tokens"}). A torn last line from an interrupted run is ignored; any other line that is not a
/// record of these sizes with tau in [1, b], finite seconds >= 0 and tokens >= 0 is an error naming
/// the file and the line.
inline std::map<std::string, journal_record> read_journal(const std::filesystem::path& path, std::span<const int> sizes) {
  std::map<std::string, journal_record> done;
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  const auto n = sizes.size();
  for (std::size_t number = 1; number <= lines.size(); ++number) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      return error("sweep journal '" + path.string() + "' line " + std::to_string(number) + " field '" + field + "': " + what);
    };
    if (lines[number - 1].empty()) continue;
    const auto j = nlohmann::json::parse(lines[number - 1], nullptr, false);
    if (j.is_discarded()) {
      if (number == lines.size()) continue;  // torn by an interrupted run
      throw fail("(line)", "not JSON");
    }
    if (!j.is_object()) throw fail("(line)", "not a JSON object");
    const auto numbers = [&](const char* field, bool required) {
      std::vector<double> v;
      if (!j.contains(field)) {
        if (required) throw fail(field, "missing");
        return v;
      }
      const auto& a = j[field];
      if (!a.is_array() || a.size() != n) throw fail(field, "not an array of " + std::to_string(n) + " numbers");
      for (const auto& x : a) {
        if (!x.is_number()) throw fail(field, "not an array of " + std::to_string(n) + " numbers");
        v.push_back(x.get<double>());
      }
      return v;
    };
    if (!j.contains("sizes") || !j["sizes"].is_array() || j["sizes"] != nlohmann::json(std::vector<int>(sizes.begin(), sizes.end())))
      throw fail("sizes", "another sweep's block sizes; use a new --out folder");
    if (!j.contains("prompt") || !j["prompt"].is_string()) throw fail("prompt", "missing or not a string");
    journal_record r{numbers("tau", true), numbers("seconds", false), {}};
    for (std::size_t k = 0; k < n; ++k)
      if (!(r.tau[k] >= 1.0 && r.tau[k] <= sizes[k]))
        throw fail("tau", std::to_string(r.tau[k]) + " at block size " + std::to_string(sizes[k]) + " is outside [1, " +
                              std::to_string(sizes[k]) + "]");
    for (const double x : r.seconds)
      if (!(x >= 0.0 && std::isfinite(x))) throw fail("seconds", "a value is negative or not finite");
    for (const double x : numbers("tokens", false)) {
      if (!(x >= 0.0 && x <= 1e12) || x != std::floor(x)) throw fail("tokens", "a value is not a count");
      r.tokens.push_back(static_cast<std::int64_t>(x));
    }
    done[j["prompt"].get<std::string>()] = std::move(r);
  }
  return done;
}

}  // namespace sweep_detail

namespace sweep_detail {

/// The dataset of `sweep_policy_dataset`, with `record_of(i)` giving prompt i's journal record (with
/// timings when `timed_records`). The dataset keeps the timing unless a record lacks it.
template <class Verifier, class RecordOf>
[[nodiscard]] policy_dataset build_dataset(Verifier& verifier, std::span<const std::string> keys,
                                           std::span<const std::vector<token_id>> prompts, std::span<const int> sizes,
                                           const std::filesystem::path& journal, const sweep_progress& progress,
                                           bool timed_records, RecordOf&& record_of) {
  auto done = journal.empty() ? std::map<std::string, journal_record>{} : read_journal(journal, sizes);
  const bool timed = timed_records && std::ranges::all_of(done, [](const auto& entry) { return !entry.second.seconds.empty(); });
  std::ofstream log;
  if (!journal.empty()) {
    end_last_line(journal);  // else the next record would join the torn line
    log.open(journal, std::ios::app);
  }
  policy_dataset d;
  d.sizes.assign(sizes.begin(), sizes.end());
  d.vocab = verifier.vocab_size();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto it = done.find(keys[i]);
    if (it == done.end()) {
      journal_record record = record_of(i);
      if (log) {
        nlohmann::json line{{"prompt", keys[i]}, {"sizes", d.sizes}, {"tau", record.tau}};
        if (!record.seconds.empty()) line["seconds"] = record.seconds;
        if (!record.tokens.empty()) line["tokens"] = record.tokens;
        log << line.dump() << std::endl;
      }
      it = done.emplace(keys[i], std::move(record)).first;
    }
    matrix_view<const float> logits;
    if (const status s = verifier.prefill(prompts[i], logits); s != status::success)
      throw error("sweep: prefill of prompt " + keys[i] + " failed: " + std::string(to_string(s)));
    const auto& record = it->second;
    if (timed) d.add(keys[i], logits.row(0), record.tau, record.seconds, record.tokens, prompts[i]);
    else d.add(keys[i], logits.row(0), record.tau, {}, {}, prompts[i]);
    if (progress) progress(i + 1, prompts.size());
  }
  return d;
}

}  // namespace sweep_detail

/// The predictor's training data: every prompt at every size (as `sweep_block_sizes`) plus the
/// target's last prefill row. Resumable: each finished prompt is appended to `journal` (when not
/// empty) with its tau, wall seconds and generated tokens per size, and prompts found there are not
/// decoded again. The dataset keeps the timing unless a journal line lacks it. Prompt i decodes the sizes
/// from its (i mod the count)-th on, so that drift during a run spreads over every size. `progress` counts prompts.
template <class Acceptance = greedy_match, class Drafter, class Verifier>
[[nodiscard]] policy_dataset sweep_policy_dataset(Drafter& drafter, Verifier& verifier,
                                                  std::span<const std::string> keys,
                                                  std::span<const std::vector<token_id>> prompts,
                                                  std::span<const int> sizes, const generation_config& config,
                                                  const std::filesystem::path& journal = {},
                                                  const sweep_progress& progress = {}) {
  speculative_decoder<Drafter, Verifier, runtime_block_size, Acceptance> decoder(drafter, verifier);
  generation_result result;
  return sweep_detail::build_dataset(verifier, keys, prompts, sizes, journal, progress, true, [&](std::size_t i) {
    const std::size_t n = sizes.size();
    sweep_detail::journal_record record;
    record.tau.resize(n);
    record.seconds.resize(n);
    record.tokens.resize(n);
    for (std::size_t j = 0; j < n; ++j) {  // the sizes' order rotates by prompt: drift is not confounded with b
      const std::size_t k = (i + j) % n;
      sweep_detail::decode_at(decoder, prompts[i], keys[i], sizes[k], config, result);
      record.tau[k] = sweep_detail::sweep_tau(result);
      record.seconds[k] = result.stats.seconds.total;
      record.tokens[k] = result.stats.generated;
    }
    return record;
  });
}

/// sweep_policy_dataset at T = 0 (greedy_match) for a drafter whose proposals depend on the context
/// only, not on the block size beyond their number (prompt lookup): each prompt is decoded once,
/// plainly, and every size's tau comes from replaying that size through the continuation
/// (`replay_steps`: the steps a decode at that size takes). One decode per prompt instead of one per
/// size; the records carry no timings, so the speed objective then needs a step cost curve.
template <class Drafter, class Verifier>
[[nodiscard]] policy_dataset replay_policy_dataset(Drafter& drafter, Verifier& verifier,
                                                   std::span<const std::string> keys,
                                                   std::span<const std::vector<token_id>> prompts,
                                                   std::span<const int> sizes, const generation_config& config,
                                                   const std::filesystem::path& journal = {},
                                                   const sweep_progress& progress = {}) {
  if (config.temperature != 0.0f) throw error("sweep: replayed sizes need greedy decoding (T = 0)");
  speculative_decoder<Drafter, Verifier, runtime_block_size, greedy_match> decoder(drafter, verifier);
  generation_result result;
  const int max_size = std::ranges::max(sizes);
  const std::vector<double> unit_costs(static_cast<std::size_t>(max_size), 1.0);
  // Decoded max_size - 1 tokens past the limit or the first stop token, no further: a decoder counts the
  // last step's drafts accepted there.
  const int past = max_size - 1;
  generation_config longer = config;
  longer.max_new_tokens = config.max_new_tokens > INT_MAX - past ? INT_MAX : config.max_new_tokens + past;
  longer.stop_tokens.clear();
  std::size_t written = 0, end = 0;  // tokens so far; the output's length once a stop token ends it
  std::stop_source enough;
  longer.on_tokens = [&](std::span<const token_id> step) {
    for (const token_id t : step) {
      ++written;
      if (end == 0 && written <= static_cast<std::size_t>(std::max(config.max_new_tokens, 0)) &&
          std::ranges::find(config.stop_tokens, t) != config.stop_tokens.end())
        end = written;
    }
    if (end > 0 && written >= end + static_cast<std::size_t>(past)) enough.request_stop();
  };
  return sweep_detail::build_dataset(verifier, keys, prompts, sizes, journal, progress, false, [&](std::size_t i) {
    written = end = 0;
    enough = std::stop_source();
    longer.cancel = enough.get_token();
    sweep_detail::decode_at(decoder, prompts[i], keys[i], 1, longer, result);
    const std::span<const token_id> tokens(result.tokens);
    auto n = std::min<std::size_t>(tokens.size(), static_cast<std::size_t>(std::max(config.max_new_tokens, 0)));
    const auto head = tokens.first(n);  // the request's output: up to the limit or its first stop token
    if (const auto stop = std::ranges::find_first_of(head, config.stop_tokens); stop != head.end())
      n = static_cast<std::size_t>(stop - head.begin()) + 1;
    sweep_detail::journal_record record;
    for (const int b : sizes) {
      runtime_block_size fixed{b};
      const step_replay_result r =
          replay_steps(fixed, drafter, prompts[i], tokens.first(n), unit_costs, 1e-3, 0, nullptr,
                       tokens.subspan(n, std::min<std::size_t>(tokens.size() - n, static_cast<std::size_t>(max_size - 1))));
      record.tau.push_back(r.decoder_tau());
    }
    return record;
  });
}

namespace sweep_detail {

/// A fixed block size that pools the features of every row it sees (the sweep's recorder of a
/// refining policy's second-stage input).
template <feature_extractor Features>
struct pooling_recorder {
  pooled_features<Features>& pool;
  int size;
  status failure = status::success;

  [[nodiscard]] int max_block_size() const { return size; }
  [[nodiscard]] block_size_choice choose(const request_features& r) {
    pool.reset(static_cast<std::int64_t>(r.prefill_logits.size()));
    failure = pool.add(r.prefill_logits);
    return {size, false};
  }
  [[nodiscard]] int next(const step_record& step) {
    for (std::int64_t j = 0; j < step.target_logits.rows && failure == status::success; ++j)
      failure = pool.add(step.target_logits.row(j));
    return size;
  }
};

}  // namespace sweep_detail

/// Records `d.pooled`: for every prompt, `features` averaged over the prefill row and the rows of
/// the first `rows - 1` committed positions of a request decoded at `block_size` (fewer when the
/// request stops earlier). `prompts` are d's prompts in order. Throws naming the prompt on failure.
template <class Acceptance = greedy_match, feature_extractor Features, class Drafter, class Verifier>
void add_pooled_features(policy_dataset& d, Drafter& drafter, Verifier& verifier,
                         std::span<const std::vector<token_id>> prompts, const Features& features, int rows,
                         int block_size, generation_config config, const sweep_progress& progress = {}) {
  if (prompts.size() != d.size()) throw error("pooled features: the prompts are not the dataset's");
  pooled_features<Features> pool(features, rows);
  speculative_decoder<Drafter, Verifier, sweep_detail::pooling_recorder<Features>, Acceptance> decoder(
      drafter, verifier, {pool, block_size});
  config.max_new_tokens = rows;  // the first token comes from the prefill row; each later one brings a row
  pooled_rows_features out{features.metadata(), rows, block_size, features.feature_count(d.vocab), {}};
  generation_result result;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const status s = decoder.generate(prompts[i], config, result);
    const status f = decoder.policy().failure;
    if (s != status::success || f != status::success)
      throw error("pooled features of prompt " + d.prompts[i] + ": " +
                  std::string(to_string(s != status::success ? s : f)));
    const auto mean = pool.mean();
    out.values.insert(out.values.end(), mean.begin(), mean.end());
    if (progress) progress(i + 1, prompts.size());
  }
  d.pooled = std::move(out);
}

}  // namespace blockpilot
