// The blockpilot program: a thin command-line layer over the headers.
#include <CLI/CLI.hpp>

#include "compare_command.hpp"
#include "eval_command.hpp"
#include "generate_command.hpp"
#include "measure_command.hpp"
#include "replay_command.hpp"
#include "sweep_command.hpp"
#include "train_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"blockpilot: block-drafting speculative decoding with instance-adaptive block sizes"};
  app.require_subcommand(1);
  blockpilot::cli::add_compare_command(app);
  blockpilot::cli::add_replay_command(app);
  blockpilot::cli::add_sweep_command(app);
  blockpilot::cli::add_train_command(app);
  blockpilot::cli::add_eval_command(app);
  blockpilot::cli::add_predict_command(app);
  blockpilot::cli::add_generate_command(app);
  blockpilot::cli::add_measure_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
