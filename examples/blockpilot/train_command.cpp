// `blockpilot train`: trains a block-size predictor on a sweep's dataset (cross-entropy on the
// best size, or expected tau over the whole window) and writes a predictor file.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"
#include "objective_options.hpp"
#include "options.hpp"

namespace blockpilot::cli {

/// Feature-extractor options shared by the commands that build one.
struct feature_options {
  std::string extractor = "compact", transform = "raw_logits";
  int top_k = 256;
  float temperature = 1.0f;
  prompt_features prompt{};

  CLI::Option_group* group = nullptr;  ///< the options add_to made

  void add_to(CLI::App* cmd) {
    group = cmd->add_option_group("Features", "The predictor's input");
    group->add_option("--features", extractor, "Feature extractor: compact or full_row (the prefill row), prompt (the "
                                               "prompt's tokens), prompt_compact (both)")
        ->capture_default_str()->check(CLI::IsMember({"compact", "full_row", "prompt", "prompt_compact"}));
    group->add_option("--top-k", top_k, "compact: number of top probabilities")->capture_default_str()->check(CLI::Range(1, compact_features::max_top_k));
    group->add_option("--transform", transform, "full_row: input transform")->capture_default_str()
        ->check(CLI::IsMember({"raw_logits", "probabilities", "log_probabilities"}));
    group->add_option("--feature-temperature", temperature, "Temperature of the softmax inside the features")->capture_default_str()
        ->check(CLI::Range(1e-30f, 1e30f));
    group->add_option("--prompt-ngram", prompt.max_ngram, "prompt: longest n-gram of the lookup replay")->capture_default_str()
        ->check(CLI::Range(1, prompt_features::max_max_ngram));
    group->add_option("--prompt-draft", prompt.draft_tokens, "prompt: drafts per block of the lookup replay")->capture_default_str()
        ->check(CLI::Range(1, prompt_features::max_draft_tokens));
  }
  /// The first of these options given on the command line, or null.
  [[nodiscard]] const CLI::Option* first_given() const {
    for (const CLI::Option* option : group->get_options())
      if (option->count() > 0) return option;
    return nullptr;
  }
  /// Calls fn(extractor) with the configured extractor.
  template <class Fn>
  void visit(Fn&& fn) const {
    if (extractor == "compact") fn(compact_features{top_k, temperature});
    else if (extractor == "prompt") fn(prompt);
    else if (extractor == "prompt_compact") fn(prompt_compact_features{prompt, compact_features{top_k, temperature}});
    else fn(full_row_features{*parse_input_transform(transform), temperature});
  }
};

void add_train_command(CLI::App& app) {
  struct options {
    std::string dataset, out, window = "14:18", loss = "expected-tau", input = "prefill";
    feature_options features;
    objective_options objective;
    std::vector<std::int64_t> hidden = {2048, 2048};
    nn::training_options training;
    double validation = 0.2;
    bool bf16 = false, quiet = false, json = false;
  };
  auto o = std::make_shared<options>();
  o->training.max_epochs = 200;
  o->training.patience = 30;
  o->training.cross_entropy_warmup = 30;
  CLI::App* cmd = app.add_subcommand("train", "Train a block-size predictor on a sweep dataset");
  cmd->add_option("--dataset", o->dataset, "Sweep folder (dataset.safetensors)")->required();
  cmd->add_option("--out", o->out, "Predictor file to write (.safetensors)")->required()->check(output_file);
  cmd->add_option("--window", o->window, "Classes B-k..B+k as LO:HI")->capture_default_str();
  cmd->add_option("--loss", o->loss, "cross-entropy on the best size, or expected-tau over the window")
      ->capture_default_str()->check(CLI::IsMember({"cross-entropy", "expected-tau"}));
  o->features.add_to(cmd);
  o->objective.add_to(cmd);
  cmd->add_option("--input", o->input, "prefill: features of the prefill row; pooled: the sweep's pooled features "
                                       "(a refining policy's second stage; extractor and rows as the sweep recorded)")
      ->capture_default_str()->check(CLI::IsMember({"prefill", "pooled"}));
  cmd->add_option("--hidden", o->hidden, "Hidden widths")->capture_default_str()->delimiter(',');
  cmd->add_option("--epochs", o->training.max_epochs, "Maximum epochs")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--patience", o->training.patience, "Stop after this many epochs without a better validation tau")->capture_default_str();
  cmd->add_option("--ce-warmup", o->training.cross_entropy_warmup, "expected-tau: epochs of cross-entropy first")->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--batch", o->training.batch_size, "Minibatch size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lr", o->training.optimizer.learning_rate, "AdamW learning rate")->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  cmd->add_option("--weight-decay", o->training.optimizer.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--dropout", o->training.dropout, "Dropout after each hidden ReLU")->capture_default_str()->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--validation", o->validation, "Share of prompts held out for early stopping")->capture_default_str()->check(CLI::Range(0.01, 0.9));
  cmd->add_option("--seed", o->training.seed, "Seed of the split, initialisation, shuffling and dropout")->capture_default_str();
  cmd->add_flag("--bf16", o->bf16, "Store bf16 weights");
  cmd->add_flag("--quiet", o->quiet, "No per-epoch lines");
  cmd->add_flag("--json", o->json, "Print the summary as JSON");
  cmd->callback([o] {
    try {
      const auto [lo, hi] = parse_window(o->window);
      if ((hi - lo) % 2)
        throw error(fmt::format("--window: {}:{} holds {} sizes; the window B-k..B+k holds an odd number", lo, hi, hi - lo + 1));
      const auto data = o->objective.apply(read_policy_dataset(o->dataset));
      double temperature = 0;  // checked before the training, which may take long
      if (const auto it = data.metadata.find("temperature"); it != data.metadata.end()) {
        const auto& text = it->second;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), temperature);
        if (ec != std::errc{} || end != text.data() + text.size())
          throw error("dataset '" + o->dataset + "' field 'temperature': \"" + text + "\" is not a number");
      }
      std::vector<std::size_t> order(data.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::mt19937_64 rng(o->training.seed);
      std::shuffle(order.begin(), order.end(), rng);
      const auto held = std::max<std::size_t>(1, static_cast<std::size_t>(o->validation * static_cast<double>(order.size())));
      if (held >= order.size()) throw error("--validation: leaves no training prompts");
      const std::span<const std::size_t> validation_rows(order.data(), held), train_rows(order.data() + held, order.size() - held);
      o->training.hidden = o->hidden;
      o->training.loss = o->loss == "cross-entropy" ? nn::loss_kind::cross_entropy : nn::loss_kind::expected_tau;
      if (!o->quiet)  // early stopping may end sooner: the ETA assumes every remaining epoch runs
        o->training.on_epoch = [start = std::chrono::steady_clock::now(), max = o->training.max_epochs](const nn::epoch_report& r) {
          const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          fmt::print(stderr, "epoch {:4d}/{}  train loss {:.4f}  validation loss {:.4f}  tau {:.4f}  accuracy {:.3f}  "
                             "elapsed {:.0f}s ETA <= {:.0f}s{}\n",
                     r.epoch, max, r.train_loss, r.validation_loss, r.validation_mean_tau, r.validation_accuracy, elapsed,
                     elapsed / static_cast<double>(r.epoch) * static_cast<double>(max - r.epoch), r.improved ? "  *" : "");
        };
      const auto fit = [&](const nn::training_set& train_set, const nn::training_set& validation_set, nn::predictor_metadata meta) {
        meta.training_block_size = (lo + hi) / 2;
        meta.window_k = (hi - lo) / 2;
        meta.vocab_size = data.vocab;
        meta.temperature = temperature;
        if (meta.feature_extractor == "full_row" && !meta.feature_parameters.contains("transform"))
          throw error("the full_row features' parameters name no 'transform'");
        meta.input_transform = meta.feature_extractor == "full_row" ? meta.feature_parameters.at("transform") : meta.feature_extractor;
        meta.loss = std::string(nn::to_string(o->training.loss));
        nn::check_predictor_metadata(meta, nn::mlp_shape{train_set.dim, o->hidden, train_set.classes});
        fmt::print(stderr, "training on {} prompts, validating on {}: {} features -> {} -> {} classes, {} loss\n", train_rows.size(),
                   validation_rows.size(), train_set.dim, fmt::join(o->hidden, " -> "), train_set.classes, o->loss);
        const auto result = nn::train(train_set, validation_set, o->training);
        if (o->bf16) nn::save_predictor(o->out, nn::mlp<Eigen::bfloat16>(result.model), meta);
        else nn::save_predictor(o->out, result.model, meta);
        if (o->json)
          fmt::print("{}\n", nlohmann::ordered_json{{"predictor", o->out},
                                                    {"best_epoch", result.best.epoch},
                                                    {"epochs", result.epochs_run},
                                                    {"validation_mean_tau", result.best.validation_mean_tau},
                                                    {"validation_accuracy", result.best.validation_accuracy},
                                                    {"validation_loss", result.best.validation_loss}}
                                  .dump(2));
        else
          fmt::print("{}: best epoch {} of {}, validation tau {:.4f}, accuracy {:.3f}\n", o->out, result.best.epoch,
                     result.epochs_run, result.best.validation_mean_tau, result.best.validation_accuracy);
      };
      if (o->input == "pooled") {
        if (!data.pooled) throw error("--input pooled: the dataset has no pooled features (sweep with --pooled-rows)");
        if (const auto* option = o->features.first_given())
          throw error("--input pooled: the features are those the sweep recorded: not with " + option->get_name());
        nn::predictor_metadata meta;
        meta.feature_extractor = data.pooled->extractor.at("name");
        meta.feature_parameters = data.pooled->extractor;
        meta.pooled_rows = data.pooled->rows;
        fit(make_pooled_training_set(data, lo, hi, train_rows), make_pooled_training_set(data, lo, hi, validation_rows), meta);
      } else {
        o->features.visit([&](const auto& extractor) {
          nn::predictor_metadata meta;
          meta.feature_extractor = std::string(std::decay_t<decltype(extractor)>::name);
          meta.feature_parameters = extractor.metadata();
          fit(make_training_set(data, extractor, lo, hi, train_rows), make_training_set(data, extractor, lo, hi, validation_rows), meta);
        });
      }
    } catch (const std::exception& e) {
      fail("train", e);
    }
  });
}

}  // namespace blockpilot::cli
