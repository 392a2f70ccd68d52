// `blockpilot sweep`: decodes every prompt at every candidate size and writes the predictor's
// training data (dataset.safetensors + the reference <B>.json files), on the synthetic pair (the
// default) or on a real GGUF target with prompt files. Resumable, shardable, mergeable.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot_workbench/io/atomic_file.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "workload.hpp"

namespace blockpilot::cli {

namespace sweep_detail {

/// The sweep's own settings, next to the workload.
struct sweep_job {
  std::string rule, out, shard;
  bool quiet = false, json = false;
  bool replay_sizes = false;  ///< one plain decode per prompt, every size replayed through it (lookup, T = 0)
  std::vector<int> sizes{};
  std::map<std::string, std::string> metadata{};  ///< how the data is made, without the shard
  int pooled_rows = 0;                          ///< > 0: also record compact features pooled over this many rows
  compact_features pooled_features{};
  int pooled_block_size = 16;                   ///< block size of the decode that produces the pooled rows
};

/// An exclusive lock on a sweep folder (`out/.lock`, flock) for the life of the object: a second sweep
/// into the same folder stops at once instead of repeating the first one's work.
class folder_lock {
 public:
  explicit folder_lock(const std::filesystem::path& dir) {
    const auto path = dir / ".lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw error("sweep folder '" + dir.string() + "': cannot open its lock file " + path.string());
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw error("sweep folder '" + dir.string() + "' is in use by another sweep (it holds " + path.string() +
                  "); wait for it, or use another --out folder");
    }
  }
  ~folder_lock() { ::close(fd_); }
  folder_lock(const folder_lock&) = delete;
  folder_lock& operator=(const folder_lock&) = delete;

 private:
  int fd_ = -1;
};

/// The prompts as "N prompts, <hash>" of their keys and token ids: a resumed sweep must run the same
/// prompts.
inline std::string prompt_set_id(const workload& work) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a over each key and its ids, each ended by a newline
  const auto add = [&](const std::string& text) {
    for (const char c : text + '\n') h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  };
  for (std::size_t i = 0; i < work.keys.size(); ++i) {
    add(work.keys[i]);
    add(fmt::format("{}", fmt::join(work.prompts[i], " ")));
  }
  return fmt::format("{} prompts, {:016x}", work.keys.size(), h);
}

/// `out/sweep.json` holds the settings of the sweep that writes there (with its shard and prompt set);
/// a resumed sweep must match them, or its journal would mix two sweeps and its dataset replace the
/// other's.
inline void claim_folder(const sweep_job& job, const workload& work) {
  const auto path = std::filesystem::path(job.out) / "sweep.json";
  nlohmann::json settings = job.metadata;
  settings["shard"] = job.shard;
  settings["prompts"] = prompt_set_id(work);
  if (std::ifstream in(path); in) {
    auto found = nlohmann::json::parse(in, nullptr, false);
    for (const char* recorded_since : {"shard", "prompts", "threads"})  // an older sweep.json resumes
      if (found.is_object() && !found.contains(recorded_since) && settings.contains(recorded_since))
        found[recorded_since] = settings[recorded_since];
    if (found != settings) {
      nlohmann::json keys = settings;  // every key of either side
      if (found.is_object()) keys.update(found);
      for (const auto& [key, unused] : keys.items()) {
        const auto there = found.is_object() && found.contains(key) ? found[key].dump() : "absent";
        const auto now = settings.contains(key) ? settings[key].dump() : "absent";
        if (there != now)
          throw error("sweep folder '" + job.out + "' field '" + key + "': " + there + " there, " + now +
                      " now (another sweep's settings); use a new --out folder");
      }
      throw error("sweep folder '" + job.out + "': its sweep.json is not a sweep's settings; use a new --out folder");
    }
  }
  io::write_file_atomically(path, settings.dump(2) + '\n');
}

/// Sweeps, writes the dataset and prints the mean tau per size.
template <class Drafter, class Target>
void run(Drafter& drafter, Target& target, const workload& work, const sweep_job& job) {
  // Checked before the folder is claimed: a refused run leaves no settings behind. A folder with files
  // but no sweep.json (measured data, a merged sweep) is never written to.
  constexpr bool replayable = std::same_as<Drafter, lookup_drafter>;
  if (job.replay_sizes && !(replayable && job.rule == greedy_match::name))
    throw error("--replay-sizes: needs prompt lookup (--drafter lookup) and greedy decoding at T = 0");
  std::filesystem::create_directories(job.out);
  if (!std::filesystem::exists(std::filesystem::path(job.out) / "sweep.json"))
    for (const auto& entry : std::filesystem::directory_iterator(job.out))
      if (entry.path().filename() != ".lock")
        throw error("sweep folder '" + job.out + "' holds " + entry.path().filename().string() +
                    " but no sweep.json (not a sweep's folder, or a merged one); use a new --out folder");
  const folder_lock lock(job.out);
  claim_folder(job, work);
  progress_bar bar("sweep " + job.shard, !job.quiet);
  const auto progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
  const auto journal = std::filesystem::path(job.out) / "journal.jsonl";
  policy_dataset d;
  with_rule(job.rule, [&](auto rule) {
    if (!job.replay_sizes)
      d = sweep_policy_dataset<decltype(rule)>(drafter, target, work.keys, work.prompts, job.sizes, work.config, journal,
                                               progress);
    else if constexpr (replayable && std::same_as<decltype(rule), greedy_match>)
      d = replay_policy_dataset(drafter, target, work.keys, work.prompts, job.sizes, work.config, journal, progress);
    if (job.pooled_rows > 0) {
      progress_bar pooled_bar("pooled rows", !job.quiet);
      add_pooled_features<decltype(rule)>(d, drafter, target, work.prompts, job.pooled_features, job.pooled_rows,
                                          job.pooled_block_size, work.config,
                                          [&](std::size_t done, std::size_t total) { pooled_bar.update(done, total); });
    }
  });
  d.metadata = job.metadata;
  d.metadata["shard"] = job.shard;
  write_policy_dataset(d, job.out);
  nlohmann::ordered_json mean_tau = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < d.sizes.size(); ++k) {
    double sum = 0;
    for (std::size_t i = 0; i < d.size(); ++i) sum += d.taus(i)[k];
    mean_tau[std::to_string(d.sizes[k])] = d.size() ? sum / static_cast<double>(d.size()) : 0.0;
  }
  if (job.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"dataset", job.out}, {"prompts", d.size()}, {"mean_tau", mean_tau}}.dump(2));
    return;
  }
  fmt::print("{} prompts x {} sizes -> {}\nmean tau:", d.size(), d.sizes.size(), job.out);
  for (const auto& [b, tau] : mean_tau.items()) fmt::print(" b={} {:.3f}", b, tau.template get<double>());
  fmt::print("\n");
}

}  // namespace sweep_detail

void add_sweep_command(CLI::App& app) {
  struct options {
    workload_options work;
    std::string window = "14:18", shard = "0/1", out, rule;
    std::vector<std::string> merge;
    bool quiet = false, json = false, replay_sizes = false;
    int pooled_rows = 0, pooled_top_k = 64;
  };
  auto o = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Decode prompts at every candidate block size; write a predictor dataset (synthetic pair, or --model)");
  o->work.add_to(cmd);
  cmd->add_option("--window", o->window, "Candidate sizes LO:HI (B-k..B+k); required with --model")->capture_default_str();
  cmd->add_option("--rule", o->rule, "greedy, sample-match or rejection (default: greedy at T = 0, else sample-match)")->check(CLI::IsMember({"greedy", "sample-match", "rejection"}));
  cmd->add_option("--shard", o->shard, "Run only prompts i with i mod N == I (I/N); merge the parts with --merge")->capture_default_str();
  cmd->add_option("--merge", o->merge, "Merge these sweep folders into --out instead of sweeping");
  cmd->add_option("--out", o->out, "Output folder (a sweep interrupted there resumes)")->required();
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->add_flag("--json", o->json, "Print the summary as JSON");
  cmd->add_flag("--replay-sizes", o->replay_sizes,
                "Prompt lookup at T = 0: decode each prompt once and replay every size through its continuation "
                "(the same tau, one decode per prompt instead of one per size; no timings, so give the speed "
                "objective a --step-cost)");
  cmd->add_option("--pooled-rows", o->pooled_rows,
                  "Also record compact features averaged over the prefill row and the first N-1 committed rows at "
                  "the window's centre size (the training input of a refining policy; 0: none)")
      ->capture_default_str()->check(CLI::Range(0, 4096));
  cmd->add_option("--pooled-top-k", o->pooled_top_k, "k of the pooled compact features")->capture_default_str()
      ->check(CLI::Range(1, compact_features::max_top_k));
  cmd->callback([o, cmd] {
    try {
      if (!o->merge.empty()) {
        for (const CLI::Option* option : cmd->get_options()) {
          const auto name = option->get_name();
          if (option->count() == 0 || name == "--merge" || name == "--out" || name == "--quiet") continue;
          // A negated flag is named as it was given: --no-chat, not --chat.
          const bool negated = !option->get_fnames().empty() && option->results().back() == "false";
          throw error("--merge joins finished sweeps: not with " + (negated ? "--" + option->get_fnames().front() : name));
        }
        if (std::error_code ec; !std::filesystem::is_empty(o->out, ec) && !ec)
          throw error("--merge: --out " + o->out + " is not empty (the merged sweep goes to a new folder)");
        std::vector<policy_dataset> parts;
        for (const auto& dir : o->merge) parts.push_back(read_policy_dataset(dir));
        const auto merged = merge_policy_datasets(parts);
        write_policy_dataset(merged, o->out);
        fmt::print("merged {} folders: {} prompts -> {}\n", parts.size(), merged.size(), o->out);
        return;
      }
      const auto [lo, hi] = parse_window(o->window);
      const auto [shard, shards] = parse_shard(o->shard);
      sweep_detail::sweep_job job{.rule = o->rule, .out = o->out, .shard = fmt::format("{}/{}", shard, shards),
                                  .quiet = o->quiet, .json = o->json, .replay_sizes = o->replay_sizes};
      for (int b = lo; b <= hi; ++b) job.sizes.push_back(b);
      if (o->work.model.empty()) {
        if (std::find(job.sizes.begin(), job.sizes.end(), 16) == job.sizes.end())
          job.sizes.push_back(16), std::sort(job.sizes.begin(), job.sizes.end());
      } else if (cmd->count("--window") == 0) {
        throw error("--window: the real mode needs one (the default 14:18 is DFlash's; take a window around the "
                    "drafter's best fixed size)");
      }
      job.pooled_rows = o->pooled_rows;
      job.pooled_features = compact_features{o->pooled_top_k, 1.0f};
      job.pooled_block_size = (lo + hi) / 2;
      o->work.run(*cmd, job.sizes.back(), shard, shards, [&](auto& drafter, auto& target, const workload& work) {
        job.rule = rule_or_default(o->rule, work.config.temperature);
        job.metadata = work.metadata;
        job.metadata["rule"] = job.rule;
        job.metadata["temperature"] = std::to_string(work.config.temperature);
        job.metadata["max_new_tokens"] = std::to_string(work.config.max_new_tokens);
        if (job.replay_sizes) job.metadata["sizes"] = "replayed through one plain decode";
        else if (!o->work.model.empty()) job.metadata["threads"] = std::to_string(o->work.threads);  // the timings' setting
        if (job.pooled_rows > 0)
          job.metadata["pooled"] = fmt::format("compact top_k {}, {} rows at block size {}", o->pooled_top_k,
                                               job.pooled_rows, job.pooled_block_size);
        sweep_detail::run(drafter, target, work, job);
      });
    } catch (const std::exception& e) {
      fail("sweep", e);
    }
  });
}

}  // namespace blockpilot::cli
