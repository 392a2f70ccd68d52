// The blockpilot program's subcommands, one translation unit each: each registers itself on the app.
#pragma once

namespace CLI {
class App;
}

namespace blockpilot::cli {

void add_compare_command(CLI::App& app);
void add_replay_command(CLI::App& app);
void add_replay_steps_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_measure_command(CLI::App& app);

}  // namespace blockpilot::cli
