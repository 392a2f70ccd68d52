// Tests of io/safetensors.hpp and nn/weight_file.hpp: round trips in fp32 and bf16, and malformed
// files, each rejected with an error naming the file and the field.
#define BOOST_TEST_MODULE weight_file
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "blockpilot_workbench/nn/weight_file.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"
#include "support/check_error.hpp"

using blockpilot::testing::check_error;

namespace bp = blockpilot;
namespace nn = blockpilot::nn;
namespace io = blockpilot::io;
using bf16 = Eigen::bfloat16;
using bytes = std::vector<std::byte>;

namespace {

const std::string source = "model.safetensors";

nn::mlp<float> model() {
  nn::mlp<float> m(nn::mlp_shape{6, {8, 8}, 5});
  blockpilot::nn::initialize(m, 3);
  for (std::size_t l = 0; l < 3; ++l)
    for (std::size_t i = 0; i < m.bias(l).size(); ++i) m.bias(l)[i] = 0.01f * float(i + l);
  const std::vector<float> mean = {1, 2, 3, 4, 5, 6}, sd = {1, 0.5f, 2, 1, 1, 3};
  m.set_standardization(mean, sd);
  return m;
}

nn::predictor_metadata metadata() {
  nn::predictor_metadata md;
  md.vocab_size = 6;
  md.feature_extractor = "full_distribution";
  md.feature_parameters = {{"top_k", "64"}, {"dtype", "bf16"}};
  md.temperature = 0.7;
  md.input_transform = "softmax";
  md.loss = "expected_tau";
  return md;
}

template <class T>
bytes serialized(const nn::mlp<T>& m, const nn::predictor_metadata& md = metadata()) {
  return nn::predictor_writer(m, md).serialize();
}

/// Rewrites the JSON header of a file, keeping its data bytes.
bytes edit_header(const bytes& file, const std::function<void(nlohmann::ordered_json&)>& edit) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(file[std::size_t(i)]);
  auto header = nlohmann::ordered_json::parse(reinterpret_cast<const char*>(file.data()) + 8,
                                              reinterpret_cast<const char*>(file.data()) + 8 + n);
  edit(header);
  const std::string text = header.dump();
  bytes out(8);
  for (std::size_t i = 0; i < 8; ++i) out[i] = std::byte((text.size() >> (8 * i)) & 0xff);
  for (char c : text) out.push_back(std::byte(c));
  out.insert(out.end(), file.begin() + 8 + std::ptrdiff_t(n), file.end());
  return out;
}

/// Loading must throw bp::error whose message names the source and every given fragment.
void expect_error(const bytes& file, std::initializer_list<std::string> fragments) {
  for (int as_bf16 = 0; as_bf16 < 2; ++as_bf16) {
    try {
      if (as_bf16) (void)nn::load_predictor<bf16>(file, source);
      else (void)nn::load_predictor<float>(file, source);
      BOOST_ERROR("no error for a malformed file");
    } catch (const bp::error& e) {
      const std::string msg = e.what();
      BOOST_TEST_INFO("message: " << msg);
      BOOST_TEST(msg.find(source) != std::string::npos);
      for (const auto& f : fragments) BOOST_TEST(msg.find(f) != std::string::npos, "fragment '" << f << "'");
    }
  }
}

template <class A, class B>
bool same_bits(A a, B b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_fp32_via_file) {
  const auto m = model();
  const auto path = std::filesystem::temp_directory_path() / "blockpilot_test_predictor.safetensors";
  nn::save_predictor(path, m, metadata());
  const auto p = nn::load_predictor<float>(path);
  std::filesystem::remove(path);
  BOOST_TEST((p.network.shape() == m.shape()));
  BOOST_TEST(same_bits(p.network.parameters(), m.parameters()));
  BOOST_TEST(same_bits(p.network.feature_mean(), m.feature_mean()));
  BOOST_TEST(same_bits(p.network.feature_std(), m.feature_std()));
  const auto md = metadata();
  BOOST_TEST(p.metadata.training_block_size == 16);
  BOOST_TEST(p.metadata.window_k == 2);
  BOOST_TEST(p.metadata.vocab_size == 6);
  BOOST_TEST(p.metadata.feature_extractor == md.feature_extractor);
  BOOST_TEST((p.metadata.feature_parameters == md.feature_parameters));
  BOOST_TEST(p.metadata.temperature == 0.7);
  BOOST_TEST(p.metadata.input_transform == "softmax");
  BOOST_TEST(p.metadata.loss == "expected_tau");
  BOOST_TEST(p.metadata.block_size(0) == 14);
  BOOST_TEST(p.metadata.block_size(4) == 18);
}

BOOST_AUTO_TEST_CASE(round_trip_bf16_and_conversions) {
  const auto m = model();
  const nn::mlp<bf16> h(m);
  const auto from_f32 = nn::load_predictor<bf16>(serialized(m), source);  // F32 file → bf16 (RTNE)
  BOOST_TEST(same_bits(from_f32.network.parameters(), h.parameters()));
  const auto file = serialized(h);
  const auto st = io::safetensors_file::parse(file, source);
  BOOST_TEST((st.find("layers.0.weight")->type == io::dtype::bf16));
  BOOST_TEST((st.find("out.bias")->type == io::dtype::bf16));
  BOOST_TEST((st.find("feature_std")->type == io::dtype::f32));
  const auto same = nn::load_predictor<bf16>(file, source);
  BOOST_TEST(same_bits(same.network.parameters(), h.parameters()));
  const auto widened = nn::load_predictor<float>(file, source);
  BOOST_TEST(same_bits(widened.network.parameters(), nn::mlp<float>(h).parameters()));
  BOOST_TEST(same_bits(widened.network.feature_std(), m.feature_std()));
}

BOOST_AUTO_TEST_CASE(safetensors_reader_writer) {
  io::safetensors_writer w;
  const std::vector<std::int32_t> a = {1, -2, 3};
  const std::vector<std::int64_t> b = {std::int64_t{1} << 40};
  w.add<std::int32_t>("a", {3}, a);
  w.add<std::int64_t>("b", {1, 1}, b);
  w.add("empty", io::dtype::f32, {0, 4}, {});
  w.set_metadata("k", "v");
  const auto file = w.serialize();
  BOOST_TEST((file.size() - 8 - 12 - 8) % 8 == 0);  // header padded to 8 bytes
  const auto st = io::safetensors_file::parse(file, source);
  BOOST_TEST(st.metadata().at("k") == "v");
  BOOST_TEST(st.tensors().size() == 3u);
  BOOST_TEST((st.values<std::int32_t>(*st.find("a")) == a));
  BOOST_TEST((st.values<std::int64_t>(*st.find("b")) == b));
  BOOST_TEST(st.find("empty")->element_count() == 0);
  BOOST_CHECK_THROW((void)st.values<float>(*st.find("a")), bp::error);
  BOOST_CHECK_THROW(w.add<std::int32_t>("a", {3}, a), bp::error);
  BOOST_CHECK_THROW(w.add<std::int32_t>("c", {4}, a), bp::error);
  BOOST_CHECK_THROW(w.add("c", io::dtype::f32, {std::int64_t{1} << 62, 4}, {}), bp::error);  // 2^66 bytes wrap to 0
  // A tensor of another file is refused, not read past this file's data.
  io::safetensors_writer larger;
  larger.add<std::int32_t>("a", {3}, std::vector<std::int32_t>{1, 2, 3});
  larger.add<std::int32_t>("big", {1000}, std::vector<std::int32_t>(1000));
  const auto other = io::safetensors_file::parse(larger.serialize(), "other.safetensors");
  check_error([&] { (void)st.values<std::int32_t>(*other.find("big")); }, {source, "'big' is not one of this file's"});
}

BOOST_AUTO_TEST_CASE(truncated_and_short_files) {
  const auto good = serialized(model());
  expect_error(bytes(good.begin(), good.begin() + 5), {"header length"});
  expect_error(bytes(good.begin(), good.begin() + 40), {"header length"});
  expect_error(bytes(good.begin(), good.end() - 3), {"data_offsets"});
  bytes longer = good;
  longer.push_back(std::byte{0});
  expect_error(longer, {"data_offsets"});
  BOOST_CHECK_THROW((void)nn::load_predictor<float>(std::filesystem::path("/nonexistent/p.safetensors")), bp::error);
  BOOST_CHECK_THROW((void)nn::load_predictor<float>(std::filesystem::temp_directory_path()), bp::error);
}

BOOST_AUTO_TEST_CASE(bad_header_length_and_json) {
  auto file = serialized(model());
  auto huge = file;
  for (std::size_t i = 0; i < 8; ++i) huge[i] = std::byte(i == 5 ? 1 : 0);  // 2^40
  expect_error(huge, {"header length", "100 MB"});
  auto garbage = file;
  for (std::size_t i = 8; i < 20; ++i) garbage[i] = std::byte{'#'};
  expect_error(garbage, {"header", "JSON"});
  expect_error(edit_header(file, [](auto& h) { h = nlohmann::ordered_json::array({1, 2}); }), {"not a JSON object"});
  // Nested brackets are refused as they are read: a tree of them takes ~40 times its bytes in memory.
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["shape"] = {{7}}; }), {"nested deeper", "3 levels"});
  expect_error(edit_header(file, [](auto& h) { h["extra"] = nlohmann::ordered_json::parse(std::string(1000, '[') +
                                                                                           std::string(1000, ']')); }),
               {"nested deeper"});
}

BOOST_AUTO_TEST_CASE(bad_tensor_entries) {
  const auto file = serialized(model());
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["dtype"] = "I32"; }),
               {"feature_mean", "dtype", "I32"});
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["dtype"] = "F99"; }),
               {"feature_mean", "dtype", "F99"});
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["dtype"] = 4; }), {"feature_mean", "dtype"});
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"].erase("shape"); }), {"feature_mean", "shape"});
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["shape"] = {-6}; }), {"feature_mean", "shape"});
  expect_error(edit_header(file, [](auto& h) { h["feature_mean"]["shape"] = {7}; }), {"feature_mean", "data_offsets"});
  expect_error(edit_header(file, [](auto& h) { h["out.bias"]["data_offsets"] = {0, 20}; }), {"data_offsets"});
  expect_error(edit_header(file,
                           [](auto& h) {
                             h["out.bias"]["data_offsets"] = {30, 10};
                           }),
               {"out.bias", "data_offsets"});
  expect_error(edit_header(file,
                           [](auto& h) {
                             h["out.bias"]["data_offsets"] = {1u << 30, (1u << 30) + 20};
                           }),
               {"out.bias", "data_offsets"});
  expect_error(edit_header(file, [](auto& h) { h["out.bias"]["data_offsets"] = "x"; }), {"out.bias", "data_offsets"});
  expect_error(edit_header(file, [](auto& h) { h["out.bias"] = 3; }), {"out.bias"});
  // A consistent file whose shapes disagree with the metadata.
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["input_dim"] = "7"; }), {"layers.0.weight", "shape"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["hidden_dims"] = "8,9"; }),
               {"layers.1.weight", "shape"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["hidden_dims"] = "8,"; }), {"hidden_dims"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["hidden_dims"] = "8,8,8"; }), {"layers.2", "missing"});
}

BOOST_AUTO_TEST_CASE(bad_metadata) {
  const auto file = serialized(model());
  for (const char* key : {"format", "version", "training_block_size", "window_k", "vocab_size", "feature_extractor",
                          "temperature", "input_transform", "loss", "input_dim", "hidden_dims", "num_classes"})
    expect_error(edit_header(file, [&](auto& h) { h["__metadata__"].erase(key); }), {key, "missing"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["window_k"] = 2; }),
               {"__metadata__.window_k", "string"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"] = 1; }), {"__metadata__"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["format"] = "gguf"; }), {"format"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["version"] = "2"; }), {"version"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["window_k"] = "two"; }), {"window_k", "integer"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["window_k"] = "1"; }), {"num_classes"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["temperature"] = "-1"; }), {"temperature"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["temperature"] = "warm"; }), {"temperature"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["vocab_size"] = "0"; }), {"vocab_size"});
  // Every integer field is bounded: no block size beyond block_size_limit, no vocabulary beyond token_id.
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["training_block_size"] = "2147483647"; }),
               {"training_block_size", "256"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["training_block_size"] = "255"; }), {"window_k", "B + k"});
  expect_error(edit_header(file, [](auto& h) { h["__metadata__"]["vocab_size"] = "2147483648"; }), {"vocab_size"});
  // A network of terabytes named by a small file: refused by its tensors' shapes before anything is allocated.
  expect_error(edit_header(file,
                           [](auto& h) {
                             h["__metadata__"]["input_dim"] = "2147483648";
                             h["__metadata__"]["hidden_dims"] = "400,8";
                           }),
               {"layers.0.weight", "shape"});
}

BOOST_AUTO_TEST_CASE(bad_values_and_extra_tensors) {
  auto m = model();
  m.parameters()[5] = std::numeric_limits<float>::infinity();
  // The writer refuses a non-finite parameter (no file that every loader rejects is written) ...
  check_error([&] { (void)serialized(m); }, {"parameter 5", "not finite", "nothing written"});
  // ... and a file that holds one all the same is refused at load.
  auto with_inf = serialized(model());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(with_inf[std::size_t(i)]);
  const auto header = nlohmann::json::parse(reinterpret_cast<const char*>(with_inf.data()) + 8,
                                            reinterpret_cast<const char*>(with_inf.data()) + 8 + n);
  const auto at = 8 + n + header["layers.0.weight"]["data_offsets"][0].get<std::uint64_t>() + 5 * sizeof(float);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(with_inf.data() + at, &inf, sizeof inf);
  expect_error(with_inf, {"layers.0.weight", "non-finite"});
  auto file = serialized(model());
  const auto st = io::safetensors_file::parse(file, source);
  const auto& sd = *st.find("feature_std");
  std::memset(file.data() + (file.size() - st.bytes(sd).size()) + 0, 0, 4);  // feature_std is last: entry 0 = 0
  expect_error(file, {"feature_std", "entry 0"});
  io::safetensors_writer w = nn::predictor_writer(model(), metadata());
  const std::vector<float> x = {1};
  w.add<float>("extra", {1}, x);
  expect_error(w.serialize(), {"extra", "unexpected"});
  BOOST_CHECK_THROW((void)serialized(model(),
                                     [] {
                                       auto md = metadata();
                                       md.window_k = 1;  // 3 classes, but the model has 5
                                       return md;
                                     }()),
                    bp::error);
}
