// Replay evaluation: the reference figures on the shipped gsm8k acceptance data, every malformed
// input of the acceptance format, the write/read round trip and tie-breaking; and the live
// measurements' speed ratio with its bootstrap interval.
#define BOOST_TEST_MODULE replay
#include <boost/test/unit_test.hpp>

#include "support/source_paths.hpp"
#include "support/check_error.hpp"
#include "support/temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "blockpilot_workbench/eval/measure.hpp"
#include "blockpilot_workbench/eval/replay.hpp"
#include "blockpilot_workbench/io/acceptance_json.hpp"

namespace fs = std::filesystem;
namespace bp = blockpilot;
namespace utf = boost::unit_test;

namespace {

/// The measured gsm8k acceptance folder in the repository's examples/data/.
fs::path gsm8k_folder() { return blockpilot::testing::project_data_dir() / "acceptance" / "gsm8k_T0"; }

using blockpilot::testing::temp_dir;

using blockpilot::testing::check_error;

/// A two-prompt folder with 16.json valid and `bad` as the text of `name`.
void check_folder_error(const std::string& name, const std::string& bad, std::initializer_list<std::string> fragments) {
  temp_dir d;
  d.write("16.json", R"({"0": 5.5, "1": 6.0})");
  d.write(name, bad);
  check_error([&] { (void)bp::read_acceptance_folder(d.path); }, fragments);
}

bp::acceptance_table small_table() {
  return {{8, 16, 17}, {"0", "1", "2"}, {{4.0, 6.0, 6.0}, {5.0, 5.0, 4.0}, {3.0, 7.5, 7.0}}, "small"};
}

}  // namespace

BOOST_AUTO_TEST_CASE(reference_figures_on_gsm8k) {
  const auto dir = gsm8k_folder();
  const auto table = bp::read_acceptance_folder(dir);
  BOOST_TEST(table.sizes == (std::vector<int>{4, 8, 13, 14, 15, 16, 17, 18, 19, 32}), boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(table.prompt_count() == 32u);
  BOOST_TEST(table.prompts.front() == "0");
  BOOST_TEST(table.prompts[2] == "2");
  BOOST_TEST(table.prompts.back() == "31");

  const auto selection = bp::read_selection(dir / "selected_by_reference_predictor.json", table);
  const auto r = bp::replay(table, 14, 18, &selection);
  const auto tol = boost::test_tools::tolerance(0.00005);
  BOOST_TEST(r.prompts == 32);
  BOOST_TEST(*r.fixed_tau(16) == 6.5087, tol);
  // The files give 6.5276 for b = 17 (examples/data/README.md).
  BOOST_TEST(*r.fixed_tau(17) == 6.5276, tol);
  BOOST_TEST(r.best_fixed_size == 17);
  BOOST_TEST(r.best_fixed_tau == 6.5276, tol);
  BOOST_TEST(r.oracle_window == 6.7354, tol);
  BOOST_TEST(r.oracle_all == 6.7401, tol);
  BOOST_TEST_REQUIRE(r.selection.has_value());
  BOOST_TEST(*r.selection == 6.7354, tol);
  BOOST_TEST(bp::mean_tau(table, bp::oracle_choice(table, std::vector<int>{15, 16, 17})) == 6.6787, tol);

  // The reference selector is the window oracle with ties to the smaller size, prompt for prompt.
  const auto oracle = bp::oracle_choice(table, bp::window_sizes(table, 14, 18));
  BOOST_TEST(oracle == bp::selection_choice(table, selection), boost::test_tools::per_element());

  const auto j = bp::to_json(r);
  BOOST_TEST(j["prompts"] == 32);
  BOOST_TEST(j["best_fixed"]["size"] == 17);
  BOOST_TEST(j["fixed"]["16"].get<double>() == 6.5087, tol);
  BOOST_TEST(j["window"] == nlohmann::ordered_json({14, 18}));
  BOOST_TEST(j.contains("selection"));
  BOOST_TEST(!bp::to_json(bp::replay(table, 14, 18, nullptr)).contains("selection"));
}

BOOST_AUTO_TEST_CASE(ties_go_to_the_smaller_size) {
  const auto t = small_table();
  // prompt 0: 16 and 17 tie; prompt 1: 8 and 16 tie; prompt 2: 16 wins outright.
  BOOST_TEST(bp::oracle_choice(t, t.sizes) == (std::vector<int>{16, 8, 16}), boost::test_tools::per_element());
  BOOST_TEST(bp::oracle_choice(t, std::vector<int>{17, 16}) == (std::vector<int>{16, 16, 16}), boost::test_tools::per_element());
  const auto r = bp::replay(t, 16, 17, nullptr);
  BOOST_TEST(r.oracle_all == (6.0 + 5.0 + 7.5) / 3.0);
  bp::acceptance_table tied{{15, 16, 17}, {"0"}, {{6.0, 6.5, 6.5}}, "tied"};
  const auto rt = bp::replay(tied, 15, 17, nullptr);
  BOOST_TEST(rt.best_fixed_size == 16);
  BOOST_TEST(rt.best_fixed_tau == 6.5);
}

BOOST_AUTO_TEST_CASE(round_trip) {
  temp_dir d;
  auto t = small_table();
  t.prompts = {"2", "10", "x1"};  // non-numeric keys: lexicographic order after reading
  t.tau[0][0] = 1.0 / 3.0 + 1.0;
  bp::write_acceptance_folder(t, d.path / "out");
  const auto back = bp::read_acceptance_folder(d.path / "out");
  BOOST_TEST(back.sizes == t.sizes, boost::test_tools::per_element());
  BOOST_TEST(back.prompts == (std::vector<std::string>{"10", "2", "x1"}), boost::test_tools::per_element());
  BOOST_TEST(back.tau[1] == t.tau[0], boost::test_tools::per_element());  // exact: round-trip precision
  BOOST_TEST(back.tau[0] == t.tau[1], boost::test_tools::per_element());

  auto numeric = small_table();
  numeric.prompts = {"10", "2", "1"};
  bp::write_acceptance_folder(numeric, d.path / "numeric");
  BOOST_TEST(bp::read_acceptance_folder(d.path / "numeric").prompts == (std::vector<std::string>{"1", "2", "10"}),
             boost::test_tools::per_element());

  auto ragged = small_table();
  ragged.tau[1].pop_back();
  check_error([&] { bp::write_acceptance_folder(ragged, d.path / "ragged"); }, {"ragged", "tau is not", "3 prompts", "3 sizes"});
}

BOOST_AUTO_TEST_CASE(folder_errors) {
  check_error([] { (void)bp::read_acceptance_folder("/nonexistent/blockpilot_acceptance"); },
              {"/nonexistent/blockpilot_acceptance", "not found"});
  temp_dir d;
  d.write("selected_by_reference_predictor.json", R"({"0": 16})");
  d.write("0.json", R"({"0": 1.0})");
  d.write("016.json", R"({"0": 1.0})");
  check_error([&] { (void)bp::read_acceptance_folder(d.path); }, {d.path.string(), "<B>.json"});
  // A link to itself is not a regular file: left out, as other entries are (the library's error, not the
  // standard library's).
  std::filesystem::create_symlink("8.json", d.path / "8.json");
  check_error([&] { (void)bp::read_acceptance_folder(d.path); }, {d.path.string(), "<B>.json"});
  const std::filesystem::path file = d.write("file", "x");
  check_error([&] { bp::io::create_folder(file / "sub"); }, {(file / "sub").string(), "cannot create"});
}

BOOST_AUTO_TEST_CASE(file_errors) {
  check_folder_error("17.json", R"({"0": 5.5,)", {"17.json", "not valid JSON"});
  check_folder_error("17.json", R"([5.5, 6.0])", {"17.json", "JSON object", "array"});
  check_folder_error("17.json", R"({})", {"17.json", "no prompts"});
  check_folder_error("17.json", R"({"0": 5.5, "1": "6.0"})", {"17.json", "field \"1\"", "must be a number"});
  check_folder_error("17.json", R"({"0": 5.5, "1": null})", {"17.json", "field \"1\"", "must be a number"});
  check_folder_error("17.json", R"({"0": NaN, "1": 6.0})", {"17.json", "field \"0\"", "not finite"});
  check_folder_error("17.json", R"({"0": 5.5, "1": -Infinity})", {"17.json", "field \"1\"", "not finite"});
  check_folder_error("17.json", R"({"0": 5.5, "1": 1e999})", {"17.json", "not valid JSON", "1e999"});
  check_folder_error("17.json", R"({"0": 0.5, "1": 6.0})", {"17.json", "field \"0\"", "outside [1, 17]"});
  check_folder_error("4.json", R"({"0": 3.0, "1": 4.5})", {"4.json", "field \"1\"", "outside [1, 4]"});
  check_folder_error("1.json", R"({"0": 16, "1": 17})", {"1.json", "field \"0\"", "selector as 1.json", "--selection"});
  check_folder_error("17.json", R"({"0": 5.5})", {"17.json", "16.json", "prompt \"1\""});
  check_folder_error("17.json", R"({"0": 5.5, "1": 6.0, "2": 6.5})", {"17.json", "16.json", "prompt \"2\""});
}

BOOST_AUTO_TEST_CASE(selection_errors) {
  temp_dir d;
  const auto t = small_table();
  const auto read = [&](const std::string& text) { return bp::read_selection(d.write("sel.json", text), t); };
  BOOST_TEST(read(R"({"0": 16, "1": 8, "2": 17})").at("1") == 8);
  check_error([&] { (void)read(R"({"0": 16,)"); }, {"sel.json", "not valid JSON"});
  check_error([&] { (void)read(R"([16, 8, 17])"); }, {"sel.json", "JSON object"});
  check_error([&] { (void)read(R"({"0": 16, "1": 8.5, "2": 17})"); }, {"sel.json", "field \"1\"", "integer"});
  check_error([&] { (void)read(R"({"0": 16, "1": "8", "2": 17})"); }, {"sel.json", "field \"1\"", "integer"});
  check_error([&] { (void)read(R"({"0": 16, "1": 4294967304, "2": 17})"); }, {"sel.json", "field \"1\"", "1..256"});
  check_error([&] { (void)read(R"({"0": 16, "1": 8, "2": 17, "3": 16})"); }, {"sel.json", "field \"3\"", "unknown prompt"});
  check_error([&] { (void)read(R"({"0": 16, "1": 9, "2": 17})"); }, {"sel.json", "field \"1\"", "block size 9"});
  check_error([&] { (void)read(R"({"0": 16, "2": 17})"); }, {"sel.json", "field \"1\"", "missing"});
  const bp::block_size_selection partial{{"0", 16}};
  check_error([&] { (void)bp::replay(t, 16, 17, &partial); }, {"selection", "field \"1\"", "missing"});
}

BOOST_AUTO_TEST_CASE(window_errors) {
  const auto t = small_table();
  check_error([&] { (void)bp::replay(t, 14, 18, nullptr); }, {"window 14:18", "14, 15, 18", "small"});
  check_error([&] { (void)bp::replay(t, 17, 16, nullptr); }, {"window 17:16", "LO <= HI"});
  BOOST_TEST(bp::replay(t, 16, 16, nullptr).oracle_window == bp::mean_fixed_tau(t, 16));
}

namespace {

/// A measurement of the requests' (tokens, decode seconds), in request order.
bp::policy_measurement measured(std::vector<std::pair<std::int64_t, double>> requests) {
  bp::policy_measurement m;
  for (const auto& [tokens, seconds] : requests) m.tokens.push_back(tokens), m.decode_seconds.push_back(seconds);
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(decode_speedup_pools_rounds_and_resamples_prompts) {
  // Two prompts, two rounds: requests 0 and 2 are prompt 0, 1 and 3 prompt 1. Tokens after the first
  // per decode second, summed per prompt: twice the base's speed on every prompt.
  const auto base = measured({{11, 1.0}, {21, 4.0}, {11, 1.0}, {21, 4.0}});
  const auto twice = measured({{11, 0.5}, {21, 2.0}, {11, 0.5}, {21, 2.0}});
  auto e = bp::decode_speedup(twice, base, 2);
  BOOST_TEST(e.ratio == 2.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(e.low == 2.0, boost::test_tools::tolerance(1e-12));  // every resample of prompts: the same ratio
  BOOST_TEST(e.high == 2.0, boost::test_tools::tolerance(1e-12));
  // Faster on prompt 0 only: the ratio pools tokens and seconds (not a mean of ratios); the interval
  // spans the prompts' own ratios, and the rounds of a prompt move together.
  const auto mixed = measured({{11, 0.25}, {21, 4.0}, {11, 0.25}, {21, 4.0}});
  e = bp::decode_speedup(mixed, base, 2);
  BOOST_TEST(e.ratio == (60.0 / 8.5) / (60.0 / 10.0), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(e.low == 1.0, boost::test_tools::tolerance(1e-12));   // a resample of prompt 1 twice
  BOOST_TEST(e.high == 4.0, boost::test_tools::tolerance(1e-12));  // of prompt 0 twice
  BOOST_TEST(bp::decode_speedup(base, base, 2).ratio == 1.0);
  check_error([&] { (void)bp::decode_speedup(twice, measured({{11, 1.0}}), 1); }, {"differ in shape"});
  check_error([&] { (void)bp::decode_speedup(twice, base, 3); }, {"differ in shape"});
  check_error([&] { (void)bp::decode_speedup(twice, base, 2, 0); }, {"resample"});
}
