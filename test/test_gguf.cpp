// Tests of io/gguf.hpp: hand-built files covering every metadata type, alignment and each supported
// tensor type with exactly known values; malformed files; and the real SmolLM2-135M GGUF when fetched.
#define BOOST_TEST_MODULE gguf
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "support/gguf_writer.hpp"
#include "support/smollm2.hpp"
#include "blockpilot_workbench/io/gguf.hpp"

namespace bp = blockpilot;
namespace io = blockpilot::io;
using io::ggml_type;
using vt = io::gguf_value_type;
using blockpilot::testing::bytes;
using writer = blockpilot::testing::gguf_writer;
using bytes = std::vector<std::byte>;

namespace {
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;

void put_u16(bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::byte>(v & 0xff);
  b[at + 1] = static_cast<std::byte>(v >> 8);
}
void set_bits(bytes& b, std::size_t at, unsigned value, int shift) {
  b[at] |= static_cast<std::byte>((value << shift) & 0xff);
}

// fp16 bit patterns of exactly representable scales.
constexpr std::uint16_t h_one = 0x3c00, h_half = 0x3800, h_quarter = 0x3400, h_two = 0x4000, h_eighth = 0x3000,
                        h_minus_one = 0xbc00;

/// A known test tensor: its encoding and its exact values.
struct known {
  std::string name;
  ggml_type type;
  std::uint64_t elements;
  bytes data;
  std::vector<float> values;
};

// Each encoder places quant q[i] of element i where the format's definition puts element i, and
// records the value the definition gives. Two blocks per type, with different quants.

known q4_0_tensor() {
  known k{"q4_0", ggml_type::q4_0, 64, bytes(36), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = 18 * static_cast<std::size_t>(blk);
    put_u16(k.data, base, h_half);
    for (int i = 0; i < 32; ++i) {
      const unsigned q = static_cast<unsigned>(i * 7 + blk * 3) % 16;
      set_bits(k.data, base + 2 + static_cast<std::size_t>(i % 16), q, i < 16 ? 0 : 4);
      k.values.push_back(0.5f * static_cast<float>(static_cast<int>(q) - 8));
    }
  }
  return k;
}

known q4_1_tensor() {
  known k{"q4_1", ggml_type::q4_1, 64, bytes(40), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = 20 * static_cast<std::size_t>(blk);
    put_u16(k.data, base, h_quarter);
    put_u16(k.data, base + 2, h_minus_one);
    for (int i = 0; i < 32; ++i) {
      const unsigned q = static_cast<unsigned>(i * 5 + blk) % 16;
      set_bits(k.data, base + 4 + static_cast<std::size_t>(i % 16), q, i < 16 ? 0 : 4);
      k.values.push_back(0.25f * static_cast<float>(q) - 1.0f);
    }
  }
  return k;
}

known q5_tensor(bool with_min) {
  const std::size_t block = with_min ? 24 : 22, qh_at = with_min ? 4 : 2;
  known k{with_min ? "q5_1" : "q5_0", with_min ? ggml_type::q5_1 : ggml_type::q5_0, 64, bytes(2 * block), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = block * static_cast<std::size_t>(blk);
    put_u16(k.data, base, h_two);
    if (with_min) put_u16(k.data, base + 2, h_half);
    for (int i = 0; i < 32; ++i) {
      const unsigned q = static_cast<unsigned>(i * 11 + blk * 7) % 32;
      set_bits(k.data, base + qh_at + 4 + static_cast<std::size_t>(i % 16), q & 15, i < 16 ? 0 : 4);
      set_bits(k.data, base + qh_at + static_cast<std::size_t>(i / 8), q >> 4, i % 8);  // bit i of u32 qh
      k.values.push_back(with_min ? 2.0f * static_cast<float>(q) + 0.5f
                                  : 2.0f * static_cast<float>(static_cast<int>(q) - 16));
    }
  }
  return k;
}

known q8_0_tensor() {
  known k{"q8_0", ggml_type::q8_0, 64, bytes(68), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = 34 * static_cast<std::size_t>(blk);
    put_u16(k.data, base, h_eighth);
    for (int i = 0; i < 32; ++i) {
      const int q = i * 7 - 100 + blk * 5;
      k.data[base + 2 + static_cast<std::size_t>(i)] = static_cast<std::byte>(static_cast<std::int8_t>(q));
      k.values.push_back(0.125f * static_cast<float>(q));
    }
  }
  return k;
}

/// Q4_K (5 = false) or Q5_K (true): 8 sub-blocks of 32 with 6-bit scales and mins.
known k_quant_tensor(bool five) {
  const std::size_t block = five ? 176 : 144, qs_at = five ? 48 : 16;
  known k{five ? "q5_k" : "q4_k", five ? ggml_type::q5_k : ggml_type::q4_k, 512, bytes(2 * block), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = block * static_cast<std::size_t>(blk);
    put_u16(k.data, base, h_quarter);
    put_u16(k.data, base + 2, h_half);
    std::array<unsigned, 8> sc{}, mn{};
    for (unsigned s = 0; s < 8; ++s) {
      sc[s] = (5 + 7 * s + static_cast<unsigned>(blk)) % 64;
      mn[s] = (63 - 5 * s - static_cast<unsigned>(blk)) % 64;
      const std::size_t scales = base + 4;
      if (s < 4) {
        set_bits(k.data, scales + s, sc[s], 0);
        set_bits(k.data, scales + s + 4, mn[s], 0);
      } else {
        set_bits(k.data, scales + s + 4, sc[s] & 15, 0);
        set_bits(k.data, scales + s + 4, mn[s] & 15, 4);
        set_bits(k.data, scales + s - 4, sc[s] >> 4, 6);
        set_bits(k.data, scales + s, mn[s] >> 4, 6);
      }
    }
    for (int i = 0; i < 256; ++i) {
      const int group = i / 64, sub = (i % 64) / 32, l = i % 32, s = 2 * group + sub;
      const unsigned q = static_cast<unsigned>(i * 13 + blk * 5) % (five ? 32 : 16);
      set_bits(k.data, base + qs_at + static_cast<std::size_t>(32 * group + l), q & 15, sub * 4);
      if (five) set_bits(k.data, base + 16 + static_cast<std::size_t>(l), q >> 4, s);
      k.values.push_back(0.25f * static_cast<float>(sc[static_cast<std::size_t>(s)]) * static_cast<float>(q) -
                         0.5f * static_cast<float>(mn[static_cast<std::size_t>(s)]));
    }
  }
  return k;
}

/// The Q6_K scale of element (half, quarter, l) as set by q6_k_tensor: scale s is s * 9 - 70 + blk.
int s_of(int half, int quarter, int l, int blk) { return (8 * half + l / 16 + 2 * quarter) * 9 - 70 + blk; }

/// Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high bits in qh, offset 32.
known q6_k_tensor() {
  known k{"q6_k", ggml_type::q6_k, 512, bytes(420), {}};
  for (int blk = 0; blk < 2; ++blk) {
    const std::size_t base = 210 * static_cast<std::size_t>(blk);
    put_u16(k.data, base + 208, h_half);
    for (int s = 0; s < 16; ++s)
      k.data[base + 192 + static_cast<std::size_t>(s)] =
          static_cast<std::byte>(static_cast<std::int8_t>(s * 9 - 70 + blk));
    for (int i = 0; i < 256; ++i) {
      const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
      const unsigned q = static_cast<unsigned>(i * 37 + blk * 11) % 64;
      const std::size_t ql = base + static_cast<std::size_t>(64 * half + l + 32 * (quarter & 1));
      set_bits(k.data, ql, q & 15, (quarter >> 1) * 4);
      set_bits(k.data, base + 128 + static_cast<std::size_t>(32 * half + l), q >> 4, 2 * quarter);
      const int scale = s_of(half, quarter, l, blk);
      k.values.push_back(0.5f * static_cast<float>(scale) * static_cast<float>(static_cast<int>(q) - 32));
    }
  }
  return k;
}

known float_tensors(ggml_type type) {
  known k{"", type, 6, {}, {}};
  if (type == ggml_type::f32) {
    k.name = "f32";
    k.values = {1.0f, -2.5f, 0.1f, 1e-30f, -0.0f, std::numeric_limits<float>::infinity()};
    for (float v : k.values) writer::put(k.data, v);
  } else if (type == ggml_type::f16) {
    k.name = "f16";
    for (std::uint16_t h : {h_one, std::uint16_t{0xc000}, std::uint16_t{0x0001}, std::uint16_t{0x83ff},
                            std::uint16_t{0x7bff}, std::uint16_t{0xfc00}})
      writer::put(k.data, h);
    k.values = {1.0f,
                -2.0f,
                std::ldexp(1.0f, -24),
                -std::ldexp(1023.0f, -24),
                65504.0f,
                -std::numeric_limits<float>::infinity()};
  } else {
    k.name = "bf16";
    for (std::uint16_t h : {std::uint16_t{0x3f80}, std::uint16_t{0xc040}, std::uint16_t{0x0001}, std::uint16_t{0x7f7f},
                            std::uint16_t{0x8000}, std::uint16_t{0x4049}})
      writer::put(k.data, h);
    k.values = {1.0f,
                -3.0f,
                std::bit_cast<float>(0x00010000u),
                std::bit_cast<float>(0x7f7f0000u),
                -0.0f,
                std::bit_cast<float>(0x40490000u)};
  }
  return k;
}

std::vector<known> all_known() {
  return {float_tensors(ggml_type::f32),
          float_tensors(ggml_type::f16),
          float_tensors(ggml_type::bf16),
          q4_0_tensor(),
          q4_1_tensor(),
          q5_tensor(false),
          q5_tensor(true),
          q8_0_tensor(),
          k_quant_tensor(false),
          k_quant_tensor(true),
          q6_k_tensor()};
}

/// A file with a few metadata entries and one tensor of each known type (as [block, n/block] matrices).
writer tensors_file() {
  writer w;
  w.kv_string("general.architecture", "test");
  w.kv<std::uint32_t>("test.block_count", vt::u32, 2);
  for (auto& k : all_known()) {
    const std::uint64_t row = k.elements % 256 == 0 ? 256 : k.elements % 32 == 0 ? 32 : k.elements;
    w.tensor(k.name, {row, k.elements / row}, k.type, k.data);
  }
  return w;
}

std::span<const std::byte> span_of(const bytes& b) { return {b.data(), b.size()}; }

/// Runs `parse` on `b` and checks it throws `error` whose message names the source and contains `what`.
void expect_error(const bytes& b, std::string_view what) {
  try {
    const auto f = io::gguf_file::parse(span_of(b), "bad.gguf");
    BOOST_ERROR("no error; expected one containing \"" << what << "\"");
  } catch (const bp::error& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find("gguf file 'bad.gguf'") != std::string::npos, "message: " << msg);
    BOOST_TEST(msg.find(what) != std::string::npos, "message: " << msg << "; expected: " << what);
  }
}

bytes header(std::uint32_t version, std::uint64_t tensors, std::uint64_t kvs) {
  bytes b;
  for (char c : std::string_view("GGUF")) b.push_back(static_cast<std::byte>(c));
  writer::put(b, version);
  writer::put(b, tensors);
  writer::put(b, kvs);
  return b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_metadata_type) {
  writer w;
  w.version = 2;
  w.kv<std::uint8_t>("u8", vt::u8, 200);
  w.kv<std::int8_t>("i8", vt::i8, -5);
  w.kv<std::uint16_t>("u16", vt::u16, 60000);
  w.kv<std::int16_t>("i16", vt::i16, -30000);
  w.kv<std::uint32_t>("u32", vt::u32, 4'000'000'000u);
  w.kv<std::int32_t>("i32", vt::i32, -2'000'000'000);
  w.kv<float>("f32", vt::f32, 1.5f);
  w.kv<std::uint8_t>("bool", vt::boolean, 1);
  w.kv_string("string", "hello, gguf");
  w.kv<std::uint64_t>("u64", vt::u64, 1ull << 40);
  w.kv<std::uint64_t>("u64_big", vt::u64, (1ull << 63) + 5);
  w.kv<std::int64_t>("i64", vt::i64, -(1ll << 40));
  w.kv<double>("f64", vt::f64, 0.1);
  w.kv_array<std::string>("strings", vt::string, {"a", "", "ccc"});
  w.kv_array<std::int32_t>("ints", vt::i32, {-1, 2, 3});
  w.kv_array<std::uint8_t>("empty", vt::u8, {});
  w.kv_array<float>("floats", vt::f32, {0.5f, 2.0f});
  bytes nested;  // [[1, 2], [], [3]] as uint16
  writer::put<std::uint32_t>(nested, static_cast<std::uint32_t>(vt::array));
  writer::put<std::uint64_t>(nested, 3);
  for (const auto& inner : std::vector<std::vector<std::uint16_t>>{{1, 2}, {}, {3}}) {
    writer::put<std::uint32_t>(nested, static_cast<std::uint32_t>(vt::u16));
    writer::put<std::uint64_t>(nested, inner.size());
    for (auto x : inner) writer::put(nested, x);
  }
  w.kv_raw("nested", vt::array, nested);
  const auto b = w.serialize();
  const auto f = io::gguf_file::parse(span_of(b), "meta.gguf");

  BOOST_TEST(f.version() == 2u);
  BOOST_TEST(f.metadata().size() == 18u);
  BOOST_TEST(f.tensors().empty());
  BOOST_TEST(f.get_int("u8") == 200);
  BOOST_TEST(f.get_int("i8") == -5);
  BOOST_TEST(f.get_int("u16") == 60000);
  BOOST_TEST(f.get_int("i16") == -30000);
  BOOST_TEST(f.get_int("u32") == 4'000'000'000ll);
  BOOST_TEST(f.get_int("i32") == -2'000'000'000ll);
  BOOST_TEST(f.get_float("f32") == 1.5);
  BOOST_TEST(f.get_bool("bool"));
  BOOST_TEST(f.get_string("string") == "hello, gguf");
  BOOST_TEST(f.get_int("u64") == (1ll << 40));
  BOOST_TEST(std::get<std::uint64_t>(f.find_metadata("u64_big")->value) == (1ull << 63) + 5);
  BOOST_TEST(f.get_int("i64") == -(1ll << 40));
  BOOST_TEST(f.get_float("f64") == 0.1);
  BOOST_TEST(f.get_string_array("strings") == (std::vector<std::string>{"a", "", "ccc"}));
  BOOST_TEST(f.get_int_array("ints") == (std::vector<std::int64_t>{-1, 2, 3}));
  BOOST_TEST(f.get_int_array("empty").empty());
  BOOST_TEST(f.get_array("empty").element_type == vt::u8);
  const auto& floats = f.get_array("floats");
  BOOST_TEST(std::get<float>(floats.items.at(1).value) == 2.0f);
  const auto& outer = f.get_array("nested");
  BOOST_TEST(outer.element_type == vt::array);
  BOOST_REQUIRE(outer.items.size() == 3u);
  const auto& first = std::get<io::gguf_array>(outer.items[0].value);
  BOOST_TEST(first.element_type == vt::u16);
  BOOST_TEST(std::get<std::uint16_t>(first.items.at(1).value) == 2);
  BOOST_TEST(std::get<io::gguf_array>(outer.items[1].value).items.empty());
  BOOST_TEST(std::get<std::uint16_t>(std::get<io::gguf_array>(outer.items[2].value).items.at(0).value) == 3);
  const std::vector<std::pair<std::string, vt>> types = {
      {"u8", vt::u8},   {"i8", vt::i8},   {"u16", vt::u16},      {"i16", vt::i16},       {"u32", vt::u32},
      {"i32", vt::i32}, {"f32", vt::f32}, {"bool", vt::boolean}, {"string", vt::string}, {"u64", vt::u64},
      {"i64", vt::i64}, {"f64", vt::f64}, {"strings", vt::array}};
  for (const auto& [key, type] : types) BOOST_TEST((f.find_metadata(key)->type() == type), key);
  BOOST_TEST(f.get_int("absent", 7) == 7);
  BOOST_TEST(f.get_float("absent", 0.25) == 0.25);
  BOOST_TEST(!f.contains("absent"));

  // Accessor errors name the file and the key.
  const auto check = [](const std::function<void()>& call, std::string_view what) {
    try {
      call();
      BOOST_ERROR("no error; expected \"" << what << "\"");
    } catch (const bp::error& e) {
      const std::string msg = e.what();
      BOOST_TEST(msg.find("gguf file 'meta.gguf'") != std::string::npos, "message: " << msg);
      BOOST_TEST(msg.find(what) != std::string::npos, "message: " << msg << "; expected: " << what);
    }
  };
  check([&] { (void)f.get_string("missing.key"); }, "metadata 'missing.key' is missing");
  check([&] { (void)f.get_int("string"); }, "metadata 'string': expected an integer");
  check([&] { (void)f.get_int("u64_big"); }, "metadata 'u64_big'");
  check([&] { (void)f.get_string("u32"); }, "metadata 'u32': expected string, found uint32");
  check([&] { (void)f.get_float("i32"); }, "metadata 'i32': expected float32 or float64, found int32");
  check([&] { (void)f.get_bool("u8"); }, "metadata 'u8': expected bool");
  check([&] { (void)f.get_array("f64"); }, "metadata 'f64': expected array, found float64");
  check([&] { (void)f.get_string_array("ints"); },
        "metadata 'ints': expected an array of string, found an array of int32");
  check([&] { (void)f.get_int_array("strings"); }, "metadata 'strings': expected an array of integers");
  check([&] { (void)f.tensor("nope"); }, "tensor 'nope' is not present");
}

BOOST_AUTO_TEST_CASE(each_tensor_type_dequantises_exactly) {
  const auto b = tensors_file().serialize();
  const auto f = io::gguf_file::parse(span_of(b), "tensors.gguf");
  BOOST_TEST(f.version() == 3u);
  BOOST_TEST(f.alignment() == 32u);
  BOOST_TEST(f.data_offset() % 32 == 0u);
  BOOST_TEST(f.get_string("general.architecture") == "test");
  const auto known_tensors = all_known();
  BOOST_REQUIRE(f.tensors().size() == known_tensors.size());
  for (const auto& k : known_tensors) {
    BOOST_TEST_CONTEXT("tensor " << k.name) {
      const auto& t = f.tensor(k.name);
      BOOST_TEST((t.type == k.type));
      BOOST_TEST(io::to_string(t.type) == io::to_string(k.type));
      BOOST_TEST(t.element_count() == k.elements);
      BOOST_TEST(t.size == k.data.size());
      BOOST_TEST(t.offset % 32 == 0u);
      BOOST_TEST(io::is_dequantisable(t.type));
      const auto bytes_of = f.bytes(t);
      BOOST_TEST(std::equal(bytes_of.begin(), bytes_of.end(), k.data.begin(), k.data.end()));
      const auto values = f.dequantize(t);
      BOOST_REQUIRE(values.size() == k.values.size());
      for (std::size_t i = 0; i < values.size(); ++i)
        BOOST_TEST(std::bit_cast<std::uint32_t>(values[i]) == std::bit_cast<std::uint32_t>(k.values[i]),
                   "element " << i << ": " << values[i] << " != " << k.values[i]);
    }
  }
  BOOST_TEST(f.dequantize("q4_1").size() == 64u);
}

// float_to_half inverts half_to_float on every finite half and rounds halfway cases to even;
// quantize_q8_0 follows ggml's rule (d = max |x| / 127, q = round(x / d)) and its blocks decode to
// within half a step of the input.
BOOST_AUTO_TEST_CASE(q8_0_quantisation_and_halves) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = io::gguf_detail::half_to_float(static_cast<std::uint16_t>(h));
    if (std::isfinite(f) && io::gguf_detail::float_to_half(f) != h)
      BOOST_ERROR("half 0x" << std::hex << h << " does not round-trip");
  }
  BOOST_TEST(io::gguf_detail::float_to_half(1.0f + 0x1p-11f) == 0x3c00u);  // halfway, to even (down)
  BOOST_TEST(io::gguf_detail::float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02u);  // halfway, to even (up)
  BOOST_TEST(io::gguf_detail::float_to_half(0x1p-25f) == 0x0000u);  // half of the smallest subnormal: to even
  BOOST_TEST(io::gguf_detail::float_to_half(3 * 0x1p-25f) == 0x0002u);
  BOOST_TEST(io::gguf_detail::float_to_half(65519.0f) == 0x7bffu);
  BOOST_TEST(io::gguf_detail::float_to_half(65520.0f) == 0x7c00u);
  BOOST_TEST(io::gguf_detail::float_to_half(-1e9f) == 0xfc00u);

  std::vector<float> x(96);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i) * (i < 32 ? 0.01 : i < 64 ? 3.0 : 0.0));
  std::vector<std::byte> blocks(3 * 34);
  io::quantize_q8_0(x, blocks);
  std::vector<float> y(x.size());
  io::dequantize(io::ggml_type::q8_0, blocks, y);
  for (std::size_t k = 0; k < 3; ++k) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[32 * k + j]));
    const float d = io::gguf_detail::load_half(blocks.data() + 34 * k);
    BOOST_TEST(d == io::gguf_detail::half_to_float(io::gguf_detail::float_to_half(amax / 127.0f)));
    int top = 0;
    for (std::size_t j = 0; j < 32; ++j) {
      top = std::max(top, std::abs(static_cast<int>(static_cast<std::int8_t>(blocks[34 * k + 2 + j]))));
      BOOST_TEST(std::abs(y[32 * k + j] - x[32 * k + j]) <= 0.57f * d, "element " << 32 * k + j);  // half a step, and 127 times the half d's rounding (2^-11 d)
    }
    BOOST_TEST(top == (amax > 0 ? 127 : 0));
  }
  std::vector<std::byte> short_out(2 * 34);
  BOOST_CHECK_THROW(io::quantize_q8_0(x, short_out), std::exception);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_THROW(io::quantize_q8_0(x, blocks), std::exception);
}

BOOST_AUTO_TEST_CASE(alignment_is_read_and_applied) {
  for (std::uint32_t alignment : {1u, 8u, 64u, 256u}) {
    writer w = tensors_file();
    w.alignment = alignment;
    w.kv<std::uint32_t>("general.alignment", vt::u32, alignment);
    const auto b = w.serialize();
    const auto f = io::gguf_file::parse(span_of(b), "aligned.gguf");
    BOOST_TEST(f.alignment() == alignment);
    BOOST_TEST(f.data_offset() % alignment == 0u);
    BOOST_TEST(f.data_offset() < f.data_offset() + alignment);
    for (const auto& k : all_known()) BOOST_TEST(f.dequantize(k.name) == k.values, k.name);
  }
  writer w = tensors_file();
  w.kv<std::uint32_t>("general.alignment", vt::u32, 48);
  expect_error(w.serialize(), "metadata 'general.alignment' field 'value': 48 is not a power of two");
  writer w2 = tensors_file();
  w2.kv<std::uint64_t>("general.alignment", vt::u64, 64);
  expect_error(w2.serialize(), "expected uint32, found uint64");
}

BOOST_AUTO_TEST_CASE(file_is_memory_mapped) {
  const auto dir = std::filesystem::temp_directory_path() / ("blockpilot_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "tensors.gguf";
  const auto b = tensors_file().serialize();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  {
    const auto f = io::gguf_file::open(path);
    BOOST_TEST(f.source() == path.string());
    BOOST_TEST(f.dequantize("q6_k") == q6_k_tensor().values);
  }
  BOOST_CHECK_EXCEPTION((void)io::gguf_file::open(dir / "absent.gguf"), bp::error, [&](const bp::error& e) {
    return std::string(e.what()).find("absent.gguf") != std::string::npos;
  });
  BOOST_CHECK_THROW((void)io::gguf_file::open(dir), bp::error);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(truncated_files_are_rejected) {
  writer w = tensors_file();
  w.kv_array<std::string>("tokens", vt::string, {"x", "yy"});
  const auto full = w.serialize();
  BOOST_REQUIRE_NO_THROW((void)io::gguf_file::parse(span_of(full), "bad.gguf"));
  for (std::size_t n = 0; n < full.size(); ++n) {
    const bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    BOOST_CHECK_THROW((void)io::gguf_file::parse(span_of(cut), "bad.gguf"), bp::error);
  }
  expect_error(bytes(full.begin(), full.begin() + 6), "field 'version': truncated");
  writer small;
  small.kv_string("k", "hello");
  const auto s = small.serialize();
  BOOST_REQUIRE(s.size() == 64u);  // 50 bytes, padded to the alignment
  expect_error(bytes(s.begin(), s.begin() + 40), "metadata 'k' field 'value' (string length): truncated");
  expect_error(bytes(s.begin(), s.begin() + 47),
               "metadata 'k' field 'value': string length 5 exceeds the 2 bytes left");
  expect_error(bytes(full.begin(), full.end() - 1), "tensor 'q6_k' field 'offset'");
}

BOOST_AUTO_TEST_CASE(malformed_headers_are_rejected) {
  auto bad_magic = tensors_file().serialize();
  bad_magic[0] = std::byte{'X'};
  expect_error(bad_magic, "field 'magic'");
  expect_error({}, "field 'magic'");
  for (std::uint32_t version : {0u, 1u, 4u}) {
    writer w = tensors_file();
    w.version = version;
    expect_error(w.serialize(), "field 'version': " + std::to_string(version) + " is not supported");
  }
  expect_error(header(3, 0, 1ull << 40), "field 'metadata_kv_count': 1099511627776 is more than the file can hold");
  expect_error(header(3, ~0ull, 0), "field 'tensor_count'");

  const auto with_value = [](vt type, const bytes& value) {
    writer w;
    w.kv_raw("key", type, value);
    return w.serialize();
  };
  bytes absurd_array, long_array, long_string, unknown_element, deep;
  writer::put<std::uint32_t>(absurd_array, static_cast<std::uint32_t>(vt::u8));
  writer::put<std::uint64_t>(absurd_array, (1ull << 32) + 1);
  expect_error(with_value(vt::array, absurd_array), "array length 4294967297 is more than 2^32");
  writer::put<std::uint32_t>(long_array, static_cast<std::uint32_t>(vt::u32));
  writer::put<std::uint64_t>(long_array, 1'000'000);
  expect_error(with_value(vt::array, long_array),
               "metadata 'key' field 'value': array length 1000000 of uint32 exceeds");
  writer::put<std::uint64_t>(long_string, 1ull << 63);
  expect_error(with_value(vt::string, long_string), "string length 9223372036854775808 exceeds");
  writer::put<std::uint32_t>(unknown_element, 13);
  writer::put<std::uint64_t>(unknown_element, 1);
  expect_error(with_value(vt::array, unknown_element), "unknown array element type 13");
  expect_error(with_value(static_cast<vt>(77), bytes(8)), "metadata 'key' field 'value': unknown value type 77");
  for (int i = 0; i < 10; ++i) {
    writer::put<std::uint32_t>(deep, static_cast<std::uint32_t>(vt::array));
    writer::put<std::uint64_t>(deep, 1);
  }
  expect_error(with_value(vt::array, deep), "nested deeper than 8");
  // Arrays that each fit the file but together would take tens of times its size in memory.
  writer many;
  many.kv_array<std::uint8_t>("a", vt::u8, std::vector<std::uint8_t>(1u << 23));
  many.kv_array<std::uint8_t>("b", vt::u8, std::vector<std::uint8_t>((1u << 23) + 1));
  expect_error(many.serialize(), "metadata 'b' field 'value': more than 16777216 array items in the metadata");

  writer dup;
  dup.kv<std::uint32_t>("a", vt::u32, 1);
  dup.kv<std::uint32_t>("a", vt::u32, 2);
  expect_error(dup.serialize(), "metadata 'a' field 'key': the key appears twice");
}

BOOST_AUTO_TEST_CASE(malformed_tensor_infos_are_rejected) {
  const bytes block(20);
  {
    writer w;
    w.tensor("t", {32}, ggml_type::q4_1, block);
    w.override_offset(0, 1u << 20);
    expect_error(w.serialize(), "tensor 't' field 'offset': [1048576, +20) is outside the 20-byte data section");
  }
  {
    writer w;
    w.tensor("t", {32}, ggml_type::q4_1, block);
    w.override_offset(0, ~0ull & ~31ull);
    expect_error(w.serialize(), "tensor 't' field 'offset'");
  }
  {
    writer w;
    w.tensor("t", {32}, ggml_type::q4_1, bytes(64));
    w.override_offset(0, 4);
    expect_error(w.serialize(), "tensor 't' field 'offset': 4 is not a multiple of the alignment 32");
  }
  {
    writer w;
    w.tensor("t", {32}, static_cast<ggml_type>(99), block);
    expect_error(w.serialize(), "tensor 't' field 'type': unknown tensor type 99");
  }
  {
    writer w;
    w.tensor("t", {16}, ggml_type::q4_1, block);
    expect_error(w.serialize(), "tensor 't' field 'dims': dims[0] = 16 is not a multiple of the Q4_1 block size 32");
  }
  {
    writer w;
    w.tensor("t", {32, 1ull << 40, 1ull << 40}, ggml_type::q4_1, block);
    expect_error(w.serialize(), "tensor 't' field 'dims': the tensor is larger than");
  }
  {
    // Found by fuzz_gguf: dims[0] x 4 bytes overflowed 64 bits and looked small.
    writer w;
    w.tensor("t", {(1ull << 63) + 6, 1}, ggml_type::f32, bytes(24));
    expect_error(w.serialize(), "tensor 't' field 'dims': the tensor is larger than the 24-byte data section");
  }
  {
    writer w;
    w.tensor("t", {1, 1, 1, 1, 1}, ggml_type::f32, bytes(4));
    expect_error(w.serialize(), "tensor 't' field 'n_dims': 5 is more than 4");
  }
  {
    writer w;
    w.tensor("t", {32}, ggml_type::q4_1, block);
    w.tensor("t", {32}, ggml_type::q4_1, block);
    expect_error(w.serialize(), "tensor 't' field 'name': the name appears twice");
  }
  {
    // A known but unsupported type parses; dequantising it is a clear error.
    writer w;
    w.tensor("k2", {256}, ggml_type::q2_k, bytes(84));
    w.tensor("empty", {0, 3}, ggml_type::f32, {});
    const auto b = w.serialize();
    const auto f = io::gguf_file::parse(span_of(b), "q2.gguf");
    BOOST_TEST(!io::is_dequantisable(ggml_type::q2_k));
    BOOST_TEST(f.dequantize("empty").empty());
    BOOST_CHECK_EXCEPTION((void)f.dequantize("k2"), bp::error, [](const bp::error& e) {
      return std::string(e.what()) ==
             "gguf file 'q2.gguf': tensor 'k2' field 'type': dequantisation of Q2_K is not supported";
    });
  }
  std::vector<float> out(32);
  BOOST_CHECK_THROW(io::dequantize(ggml_type::q8_0, bytes(33), out), bp::error);
}

// Seed inputs for test/fuzz/fuzz_gguf.cpp: both parse here; written when BLOCKPILOT_GGUF_SEED_DIR names a folder.
BOOST_AUTO_TEST_CASE(fuzz_seeds) {
  writer w;
  w.version = 2;
  w.alignment = 8;
  w.kv<std::uint32_t>("general.alignment", vt::u32, 8);
  w.kv<std::int64_t>("i64", vt::i64, -3);
  w.kv<std::uint8_t>("flag", vt::boolean, 0);
  w.kv<double>("f64", vt::f64, 2.5);
  w.kv_array<std::string>("tokenizer.ggml.tokens", vt::string, {"a", "b", "ab"});
  w.kv_array<std::int32_t>("types", vt::i32, {1, 1, 3});
  w.tensor("embd", {32, 2}, ggml_type::q8_0, q8_0_tensor().data);
  w.tensor("norm", {6}, ggml_type::f16, float_tensors(ggml_type::f16).data);
  const std::vector<std::pair<std::string, bytes>> seeds = {{"tensors.gguf", tensors_file().serialize()},
                                                            {"metadata_v2.gguf", w.serialize()}};
  const char* dir = std::getenv("BLOCKPILOT_GGUF_SEED_DIR");
  for (const auto& [name, b] : seeds) {
    BOOST_CHECK_NO_THROW((void)io::gguf_file::parse(span_of(b), name));
    if (!dir) continue;
    std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    BOOST_TEST(out.good(), "writing " << name);
  }
}

namespace {
}  // namespace

BOOST_AUTO_TEST_CASE(smollm2_135m, *boost::unit_test::precondition(smollm2_present)) {
  const auto f = io::gguf_file::open(smollm2_path());
  BOOST_TEST(f.version() == 3u);
  BOOST_TEST(f.alignment() == 32u);
  BOOST_TEST(f.get_string("general.architecture") == "llama");
  BOOST_TEST(f.get_int("llama.block_count") == 30);
  BOOST_TEST(f.get_int("llama.embedding_length") == 576);
  BOOST_TEST(f.get_int("llama.feed_forward_length") == 1536);
  BOOST_TEST(f.get_int("llama.attention.head_count") == 9);
  BOOST_TEST(f.get_int("llama.attention.head_count_kv") == 3);
  BOOST_TEST(f.get_float("llama.rope.freq_base") == 100000.0);
  BOOST_TEST(std::abs(f.get_float("llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-9);
  BOOST_TEST(f.get_string("tokenizer.ggml.model") == "gpt2");
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  BOOST_TEST(tokens.size() == 49152u);
  BOOST_TEST(tokens.at(0) == "<|endoftext|>");
  BOOST_TEST(tokens.at(static_cast<std::size_t>(f.get_int("tokenizer.ggml.eos_token_id"))) == "<|im_end|>");
  BOOST_TEST(f.get_int_array("tokenizer.ggml.token_type").size() == 49152u);
  const auto merges = f.get_string_array("tokenizer.ggml.merges");
  BOOST_TEST(merges.size() > 40000u);
  BOOST_TEST(f.tensors().size() == 272u);  // 30 blocks x 9 + token_embd + output_norm

  const auto& embd = f.tensor("token_embd.weight");
  BOOST_TEST(embd.dims == (std::vector<std::uint64_t>{576, 49152}));
  BOOST_TEST((embd.type == ggml_type::q8_0));
  BOOST_TEST((f.tensor("blk.0.attn_q.weight").type == ggml_type::q4_1));
  BOOST_TEST(f.tensor("blk.0.attn_k.weight").dims == (std::vector<std::uint64_t>{576, 192}));
  BOOST_TEST((f.tensor("output_norm.weight").type == ggml_type::f32));
  for (const auto& t : f.tensors()) BOOST_TEST(io::is_dequantisable(t.type), t.name);

  for (const char* name :
       {"token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"}) {
    BOOST_TEST_CONTEXT("tensor " << name) {
      const auto values = f.dequantize(name);
      BOOST_TEST(values.size() == f.tensor(name).element_count());
      double sum_sq = 0, max_abs = 0;
      bool finite = true;
      for (float v : values) {
        finite = finite && std::isfinite(v);
        sum_sq += double(v) * v;
        max_abs = std::max(max_abs, double(std::abs(v)));
      }
      const double rms = std::sqrt(sum_sq / double(values.size()));
      BOOST_TEST(finite);
      BOOST_TEST(rms > 1e-3);
      BOOST_TEST(rms < 10.0);
      BOOST_TEST(max_abs < 100.0);
      BOOST_TEST_MESSAGE(name << ": rms " << rms << ", max |x| " << max_abs);
    }
  }
}
