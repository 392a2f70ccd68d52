// The blockpilot program: a thin command-line layer over the headers. Exit codes: 0 done, 2 a usage
// error (CLI11's message) or a failure the subcommand reported (its message on stderr).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"

namespace {

/// The subcommands' names, comma-separated.
std::string subcommand_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

/// The kinds of number an option takes (CLI11's type names).
enum class number_kind { integer, unsigned_integer, floating_point };

/// Empty when `text` is a number the option parser reads as written: decimal digits for an integer (it
/// would read "010" as octal 8, "0x40" as 64, and wrap "-1" to 2^64 - 1 for an unsigned one), a finite
/// decimal for a floating-point option (its range checks let "nan" through).
std::string decimal_number_error(const std::string& text, number_kind kind) {
  if (kind == number_kind::floating_point) {
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc{} && end == text.data() + text.size() && std::isfinite(value)) return {};
    return "'" + text + "' is not a decimal finite number";
  }
  const bool negative = kind == number_kind::integer && text.starts_with('-');
  const std::string_view digits = std::string_view(text).substr(negative ? 1 : 0);
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos &&
      (digits.size() == 1 || digits[0] != '0'))
    return {};
  return "'" + text + "' is not a decimal " + (kind == number_kind::integer ? "integer" : "integer >= 0");
}

/// Makes every integer and floating-point option of `app` and of its subcommands take plain decimals.
void require_decimal_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const std::string name = type.substr(0, type.find(':'));
    const auto kind = name == "INT"    ? number_kind::integer
                      : name == "UINT" ? number_kind::unsigned_integer
                                       : number_kind::floating_point;
    if (name == "INT" || name == "UINT" || name == "FLOAT")
      option->check([kind](const std::string& text) { return decimal_number_error(text, kind); });
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) require_decimal_numbers(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"blockpilot: block-drafting speculative decoding with instance-adaptive block sizes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("blockpilot ") + BLOCKPILOT_VERSION);
  blockpilot::cli::add_compare_command(app);
  blockpilot::cli::add_replay_command(app);
  blockpilot::cli::add_replay_steps_command(app);
  blockpilot::cli::add_sweep_command(app);
  blockpilot::cli::add_train_command(app);
  blockpilot::cli::add_eval_command(app);
  blockpilot::cli::add_predict_command(app);
  blockpilot::cli::add_generate_command(app);
  blockpilot::cli::add_measure_command(app);
  require_decimal_numbers(app);
  if (argc > 1 && argv[1][0] != '-') {
    const std::string_view name = argv[1];
    const auto subs = app.get_subcommands([](CLI::App*) { return true; });
    if (std::none_of(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->get_name() == name; })) {
      fmt::print(stderr, "blockpilot: unknown subcommand '{}'; the subcommands are {} (blockpilot --help)\n", name,
                 subcommand_names(app));
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a subcommand's failure, already reported
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, the version, or the usage error
    return code == 0 ? 0 : 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "blockpilot: out of memory (reduce the request's size: tokens, prompts or batch)\n");
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "blockpilot: {}\n", e.what());
    return 2;
  }
  return 0;
}
