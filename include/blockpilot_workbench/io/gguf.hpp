// Reader of the GGUF model format (versions 2 and 3): header, typed metadata, tensor infos, and
// dequantisation of ggml tensor types to float. Every malformed input is an `error` naming file and field.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "blockpilot/status.hpp"

namespace blockpilot::io {

static_assert(std::endian::native == std::endian::little, "the GGUF reader expects a little-endian host");

/// Types of GGUF metadata values (the numbers are the format's).
enum class gguf_value_type : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// Tensor element types of ggml (the numbers are the format's); other values may appear in a file
/// and are rejected by the parser.
enum class ggml_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};

struct gguf_value;

/// A GGUF array: its element type and the elements (all of that type; arrays may nest).
struct gguf_array {
  gguf_value_type element_type = gguf_value_type::u8;
  std::vector<gguf_value> items;
};

/// One metadata value; the variant's alternatives follow `gguf_value_type`'s order.
struct gguf_value {
  std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t, float, bool,
               std::string, gguf_array, std::uint64_t, std::int64_t, double>
      value;
  /// The value's GGUF type.
  [[nodiscard]] gguf_value_type type() const { return static_cast<gguf_value_type>(value.index()); }
};

namespace gguf_detail {
struct type_entry {
  ggml_type type;
  std::string_view name;
  std::uint32_t block_elements;
  std::uint32_t block_bytes;
  bool dequantisable;
};
inline constexpr std::array<type_entry, 20> types = {{
    {ggml_type::f32, "F32", 1, 4, true},       {ggml_type::f16, "F16", 1, 2, true},
    {ggml_type::q4_0, "Q4_0", 32, 18, true},   {ggml_type::q4_1, "Q4_1", 32, 20, true},
    {ggml_type::q5_0, "Q5_0", 32, 22, true},   {ggml_type::q5_1, "Q5_1", 32, 24, true},
    {ggml_type::q8_0, "Q8_0", 32, 34, true},   {ggml_type::q8_1, "Q8_1", 32, 36, false},
    {ggml_type::q2_k, "Q2_K", 256, 84, false}, {ggml_type::q3_k, "Q3_K", 256, 110, false},
    {ggml_type::q4_k, "Q4_K", 256, 144, true}, {ggml_type::q5_k, "Q5_K", 256, 176, true},
    {ggml_type::q6_k, "Q6_K", 256, 210, true}, {ggml_type::q8_k, "Q8_K", 256, 292, false},
    {ggml_type::i8, "I8", 1, 1, false},        {ggml_type::i16, "I16", 1, 2, false},
    {ggml_type::i32, "I32", 1, 4, false},      {ggml_type::i64, "I64", 1, 8, false},
    {ggml_type::f64, "F64", 1, 8, false},      {ggml_type::bf16, "BF16", 1, 2, true},
}};
inline const type_entry* find(ggml_type t) {
  const auto it = std::ranges::find(types, t, &type_entry::type);
  return it == types.end() ? nullptr : &*it;
}
inline constexpr std::array<std::string_view, 13> value_type_names = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                                      "int32",  "float32", "bool",   "string", "array",
                                                                      "uint64", "int64",   "float64"};

inline constexpr std::uint32_t max_dims = 4;            ///< GGML_MAX_DIMS
inline constexpr std::uint64_t max_array = 1ull << 32;  ///< arrays longer than this are absurd
/// Array items in all the metadata together: each takes tens of bytes in memory for one or a few in the
/// file (a vocabulary of 262,144 tokens with its merges and types is under 2^20).
inline constexpr std::uint64_t max_metadata_items = 1ull << 24;
inline constexpr int max_nesting = 8;                   ///< nested arrays deeper than this are rejected
inline constexpr std::uint64_t default_alignment = 32;

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
inline std::uint16_t load_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
inline float load_half(const std::byte* p) { return half_to_float(load_u16(p)); }
/// IEEE binary16 of f, rounded to nearest even (overflow to infinity, NaN kept a quiet NaN).
inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and above round to infinity
  if (a < 0x38800000u)  // below 2^-14: a subnormal half, round(|f| 2^24) units of 2^-24 (exact scaling)
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(std::bit_cast<float>(a) * 16777216.0f)));
  return static_cast<std::uint16_t>(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
inline std::uint8_t u8(const std::byte* p) { return std::to_integer<std::uint8_t>(*p); }

// Block decoders: `b` points at one block, `y` receives block_elements floats. Every product that
// is followed by an addition is exact in float, so FMA contraction cannot change a result bit.
inline void q4_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 16; ++j) {
    const int q = u8(b + 2 + j);
    y[j] = static_cast<float>((q & 0xf) - 8) * d;
    y[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}
inline void q4_1(const std::byte* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int q = u8(b + 4 + j);
    y[j] = static_cast<float>(q & 0xf) * d + m;
    y[j + 16] = static_cast<float>(q >> 4) * d + m;
  }
}
inline std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
}
inline void q5_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  const std::uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int q = u8(b + 6 + j);
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>(((q & 0xf) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((q >> 4) | h1) - 16) * d;
  }
}
inline void q5_1(const std::byte* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  const std::uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int q = u8(b + 8 + j);
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>((q & 0xf) | h0) * d + m;
    y[j + 16] = static_cast<float>((q >> 4) | h1) * d + m;
  }
}
inline void q8_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(u8(b + 2 + j))) * d;
}
/// 6-bit scale and min number `j` (0..7) of a Q4_K / Q5_K block's 12 packed scale bytes.
inline std::pair<int, int> k_scale_min(int j, const std::byte* s) {
  if (j < 4) return {u8(s + j) & 63, u8(s + j + 4) & 63};
  return {(u8(s + j + 4) & 0xf) | ((u8(s + j - 4) >> 6) << 4), (u8(s + j + 4) >> 4) | ((u8(s + j) >> 6) << 4)};
}
inline void q4_k(const std::byte* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qs = b + 16;
  for (int g = 0; g < 4; ++g, qs += 32, y += 64) {
    const auto [s0, m0] = k_scale_min(2 * g, scales);
    const auto [s1, m1] = k_scale_min(2 * g + 1, scales);
    const float d0 = d * static_cast<float>(s0), d1 = d * static_cast<float>(s1);
    const float n0 = dmin * static_cast<float>(m0), n1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      y[l] = d0 * static_cast<float>(u8(qs + l) & 0xf) - n0;
      y[l + 32] = d1 * static_cast<float>(u8(qs + l) >> 4) - n1;
    }
  }
}
inline void q5_k(const std::byte* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* qs = b + 48;
  for (int g = 0; g < 4; ++g, qs += 32, y += 64) {
    const auto [s0, m0] = k_scale_min(2 * g, scales);
    const auto [s1, m1] = k_scale_min(2 * g + 1, scales);
    const float d0 = d * static_cast<float>(s0), d1 = d * static_cast<float>(s1);
    const float n0 = dmin * static_cast<float>(m0), n1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      const int h = u8(qh + l);
      y[l] = d0 * static_cast<float>((u8(qs + l) & 0xf) | (((h >> (2 * g)) & 1) << 4)) - n0;
      y[l + 32] = d1 * static_cast<float>((u8(qs + l) >> 4) | (((h >> (2 * g + 1)) & 1) << 4)) - n1;
    }
  }
}
inline void q6_k(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  const float d = load_half(b + 208);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16, h = u8(qh + l);
      const int q1 = ((u8(ql + l) & 0xf) | (((h >> 0) & 3) << 4)) - 32;
      const int q2 = ((u8(ql + l + 32) & 0xf) | (((h >> 2) & 3) << 4)) - 32;
      const int q3 = ((u8(ql + l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const int q4 = ((u8(ql + l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
      const auto scale = [&](int i) { return d * static_cast<float>(static_cast<std::int8_t>(u8(sc + i))); };
      y[l] = scale(is) * static_cast<float>(q1);
      y[l + 32] = scale(is + 2) * static_cast<float>(q2);
      y[l + 64] = scale(is + 4) * static_cast<float>(q3);
      y[l + 96] = scale(is + 6) * static_cast<float>(q4);
    }
  }
}

/// A read-only POSIX memory mapping of a whole file.
class mapping {
 public:
  mapping(const std::filesystem::path& path, const std::string& source) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO would block before the check
    if (fd < 0) throw error("gguf file '" + source + "': cannot open for reading");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw error("gguf file '" + source + "': not a readable regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw error("gguf file '" + source + "': mmap of " + std::to_string(size_) + " bytes failed");
      }
      data_ = p;
    }
    ::close(fd);
  }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (data_) ::munmap(data_, size_);
  }
  [[nodiscard]] std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};
}  // namespace gguf_detail

/// The format's name of a tensor type ("Q4_1", "F32", …), or "type N" for an unknown number.
[[nodiscard]] inline std::string to_string(ggml_type t) {
  const auto* e = gguf_detail::find(t);
  return e ? std::string(e->name) : "type " + std::to_string(static_cast<std::uint32_t>(t));
}
/// The format's name of a metadata value type ("uint32", "string", …).
[[nodiscard]] inline std::string to_string(gguf_value_type t) {
  const auto i = static_cast<std::uint32_t>(t);
  return i < gguf_detail::value_type_names.size() ? std::string(gguf_detail::value_type_names[i])
                                                  : "type " + std::to_string(i);
}
/// Writes `to_string(t)`.
inline std::ostream& operator<<(std::ostream& os, ggml_type t) { return os << to_string(t); }
/// Writes `to_string(t)`.
inline std::ostream& operator<<(std::ostream& os, gguf_value_type t) { return os << to_string(t); }

/// Whether `dequantize` handles this tensor type.
[[nodiscard]] inline bool is_dequantisable(ggml_type t) {
  const auto* e = gguf_detail::find(t);
  return e && e->dequantisable;
}
/// Elements per block of a known tensor type (1 for plain types, 32 or 256 for quantised ones).
[[nodiscard]] inline std::uint32_t block_elements(ggml_type t) {
  const auto* e = gguf_detail::find(t);
  if (!e) throw error("gguf: unknown tensor type " + std::to_string(static_cast<std::uint32_t>(t)));
  return e->block_elements;
}
/// Bytes per block of a known tensor type.
[[nodiscard]] inline std::uint32_t block_bytes(ggml_type t) {
  const auto* e = gguf_detail::find(t);
  if (!e) throw error("gguf: unknown tensor type " + std::to_string(static_cast<std::uint32_t>(t)));
  return e->block_bytes;
}

/// Dequantises `out.size()` elements of type `t` stored in `in` (which must hold exactly
/// out.size() / block_elements(t) blocks) to float, bit-exact with ggml's reference dequantisation.
/// Throws `error` for an unsupported type or mismatched sizes.
inline void dequantize(ggml_type t, std::span<const std::byte> in, std::span<float> out) {
  const auto* e = gguf_detail::find(t);
  if (!e || !e->dequantisable) throw error("gguf: dequantisation of tensor type " + to_string(t) + " is not supported");
  if (out.size() % e->block_elements != 0 || in.size() != out.size() / e->block_elements * e->block_bytes)
    throw error("gguf: dequantize " + to_string(t) + ": " + std::to_string(in.size()) + " bytes do not hold " +
                std::to_string(out.size()) + " elements");
  const std::size_t blocks = out.size() / e->block_elements;
  const std::byte* b = in.data();
  float* y = out.data();
  using decoder = void (*)(const std::byte*, float*);
  decoder decode = nullptr;
  switch (t) {
    case ggml_type::f32:
      if (!out.empty()) std::memcpy(y, b, in.size());
      return;
    case ggml_type::f16:
      for (std::size_t i = 0; i < blocks; ++i) y[i] = gguf_detail::load_half(b + 2 * i);
      return;
    case ggml_type::bf16:
      for (std::size_t i = 0; i < blocks; ++i)
        y[i] = std::bit_cast<float>(static_cast<std::uint32_t>(gguf_detail::load_u16(b + 2 * i)) << 16);
      return;
    case ggml_type::q4_0:
      decode = gguf_detail::q4_0;
      break;
    case ggml_type::q4_1:
      decode = gguf_detail::q4_1;
      break;
    case ggml_type::q5_0:
      decode = gguf_detail::q5_0;
      break;
    case ggml_type::q5_1:
      decode = gguf_detail::q5_1;
      break;
    case ggml_type::q8_0:
      decode = gguf_detail::q8_0;
      break;
    case ggml_type::q4_k:
      decode = gguf_detail::q4_k;
      break;
    case ggml_type::q5_k:
      decode = gguf_detail::q5_k;
      break;
    case ggml_type::q6_k:
      decode = gguf_detail::q6_k;
      break;
    default:
      throw error("gguf: dequantisation of tensor type " + to_string(t) + " is not supported");
  }
  for (std::size_t i = 0; i < blocks; ++i) decode(b + i * e->block_bytes, y + i * e->block_elements);
}

/// Quantises `x` (a multiple of 32 elements) to Q8_0 blocks in `out` (x.size() / 32 blocks of 34 bytes) as
/// ggml's reference quantiser does: per block d = max |x| / 127 (stored as a half), q = round(x / d)
/// (q = 0 when d = 0). Throws `error` for mismatched sizes or a non-finite element.
inline void quantize_q8_0(std::span<const float> x, std::span<std::byte> out) {
  if (x.size() % 32 != 0 || out.size() != x.size() / 32 * 34)
    throw error("gguf: quantize Q8_0: " + std::to_string(x.size()) + " elements do not fill " + std::to_string(out.size()) +
                " bytes of blocks");
  for (std::size_t k = 0; k < x.size() / 32; ++k) {
    const float* v = x.data() + 32 * k;
    std::byte* b = out.data() + 34 * k;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (!std::isfinite(v[j])) throw error("gguf: quantize Q8_0: element " + std::to_string(32 * k + j) + " is not finite");
      amax = std::max(amax, std::abs(v[j]));
    }
    const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    const std::uint16_t h = gguf_detail::float_to_half(d);
    b[0] = static_cast<std::byte>(h & 0xffu);
    b[1] = static_cast<std::byte>(h >> 8);
    for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(std::lround(v[j] * inv)));
  }
}

/// One tensor of a GGUF file. `dims` are in ggml order: dims[0] is the contiguous (row) dimension, so
/// a [rows x cols] matrix is stored as dims {cols, rows}. `offset` is relative to the data section.
struct gguf_tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;
  ggml_type type = ggml_type::f32;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;  ///< bytes

  /// Product of the dims (bounded by the file size for a parsed file).
  [[nodiscard]] std::uint64_t element_count() const {
    std::uint64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
};

/// A parsed GGUF file. `open` memory-maps the file and owns the mapping; `parse` views caller bytes,
/// which must outlive the object. Metadata is copied out; tensor bytes are views into the file.
class gguf_file {
 public:
  /// Memory-maps and parses `path`; throws `error` naming the file (and field).
  [[nodiscard]] static gguf_file open(const std::filesystem::path& path) {
    const std::string source = path.string();
    auto map = std::make_shared<const gguf_detail::mapping>(path, source);
    gguf_file f = parse(map->bytes(), source);
    f.owned_ = std::move(map);
    return f;
  }

  /// Parses bytes in memory; `source` names them in error messages.
  [[nodiscard]] static gguf_file parse(std::span<const std::byte> bytes, std::string source) {
    gguf_file f;
    f.source_ = std::move(source);
    reader r{bytes, 0, f.source_};
    if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0) throw r.fail("field 'magic'", "not \"GGUF\"");
    r.at = 4;
    f.version_ = r.u32("field 'version'");
    if (f.version_ != 2 && f.version_ != 3)
      throw r.fail("field 'version'", std::to_string(f.version_) + " is not supported (only 2 and 3)");
    const std::uint64_t tensor_count = r.u64("field 'tensor_count'");
    const std::uint64_t kv_count = r.u64("field 'metadata_kv_count'");
    // Each key/value needs at least 13 bytes and each tensor info at least 24: bounds before allocating.
    if (kv_count > r.left() / 13)
      throw r.fail("field 'metadata_kv_count'", std::to_string(kv_count) + " is more than the file can hold");
    if (tensor_count > r.left() / 24)
      throw r.fail("field 'tensor_count'", std::to_string(tensor_count) + " is more than the file can hold");
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      const std::string field = "metadata entry #" + std::to_string(i) + " field 'key'";
      std::string key = r.string(field);
      const std::string where = "metadata '" + key + "'";
      const auto type = r.u32(where + " field 'type'");
      gguf_value v = r.value(type, where + " field 'value'", 0);
      if (!f.metadata_.emplace(std::move(key), std::move(v)).second)
        throw r.fail(where + " field 'key'", "the key appears twice");
    }
    if (const auto* a = f.find_metadata("general.alignment")) {
      const auto* p = std::get_if<std::uint32_t>(&a->value);
      if (!p)
        throw r.fail("metadata 'general.alignment' field 'value'", "expected uint32, found " + to_string(a->type()));
      if (*p == 0 || !std::has_single_bit(*p))
        throw r.fail("metadata 'general.alignment' field 'value'", std::to_string(*p) + " is not a power of two");
      f.alignment_ = *p;
    }
    f.tensors_.reserve(static_cast<std::size_t>(tensor_count));
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
      gguf_tensor_info t;
      t.name = r.string("tensor #" + std::to_string(i) + " field 'name'");
      const std::string where = "tensor '" + t.name + "' field '";
      const auto n_dims = r.u32(where + "n_dims'");
      if (n_dims > gguf_detail::max_dims)
        throw r.fail(where + "n_dims'",
                     std::to_string(n_dims) + " is more than " + std::to_string(gguf_detail::max_dims));
      for (std::uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.u64(where + "dims'"));
      t.type = static_cast<ggml_type>(r.u32(where + "type'"));
      t.offset = r.u64(where + "offset'");
      f.tensors_.push_back(std::move(t));
    }
    const std::uint64_t header_end = r.at;
    f.data_offset_ = (header_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    const std::uint64_t data_size = f.data_offset_ <= bytes.size() ? bytes.size() - f.data_offset_ : 0;
    if (!f.tensors_.empty() && f.data_offset_ > bytes.size())
      throw r.fail("field 'data section'", "starts at " + std::to_string(f.data_offset_) + ", past the end of the " +
                                               std::to_string(bytes.size()) + "-byte file");
    f.data_ = bytes.subspan(static_cast<std::size_t>(std::min<std::uint64_t>(f.data_offset_, bytes.size())));
    for (auto& t : f.tensors_) {
      const std::string where = "tensor '" + t.name + "' field '";
      const auto* e = gguf_detail::find(t.type);
      if (!e)
        throw r.fail(where + "type'", "unknown tensor type " + std::to_string(static_cast<std::uint32_t>(t.type)));
      const std::uint64_t row = t.dims.empty() ? 1 : t.dims[0];
      if (row % e->block_elements != 0)
        throw r.fail(where + "dims'", "dims[0] = " + std::to_string(row) + " is not a multiple of the " +
                                          std::string(e->name) + " block size " + std::to_string(e->block_elements));
      const std::uint64_t row_blocks = row / e->block_elements;
      if (row_blocks > data_size / e->block_bytes)
        throw r.fail(where + "dims'",
                     "the tensor is larger than the " + std::to_string(data_size) + "-byte data section");
      std::uint64_t size = row_blocks * e->block_bytes;
      for (std::size_t d = 1; d < t.dims.size(); ++d) {
        if (t.dims[d] != 0 && size > data_size / t.dims[d])
          throw r.fail(where + "dims'",
                       "the tensor is larger than the " + std::to_string(data_size) + "-byte data section");
        size *= t.dims[d];
      }
      if (std::ranges::find(t.dims, 0) != t.dims.end()) size = 0;
      t.size = size;
      if (t.offset % f.alignment_ != 0)
        throw r.fail(where + "offset'",
                     std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(f.alignment_));
      if (t.offset > data_size || size > data_size - t.offset)
        throw r.fail(where + "offset'", "[" + std::to_string(t.offset) + ", +" + std::to_string(size) +
                                            ") is outside the " + std::to_string(data_size) + "-byte data section");
      if (!f.index_.emplace(t.name, static_cast<std::size_t>(&t - f.tensors_.data())).second)
        throw r.fail(where + "name'", "the name appears twice");
    }
    return f;
  }

  /// Where the bytes came from (the path, or the name given to `parse`).
  [[nodiscard]] const std::string& source() const { return source_; }
  /// The format version (2 or 3).
  [[nodiscard]] std::uint32_t version() const { return version_; }
  /// `general.alignment`, or 32 when absent.
  [[nodiscard]] std::uint64_t alignment() const { return alignment_; }
  /// Byte offset of the data section in the file.
  [[nodiscard]] std::uint64_t data_offset() const { return data_offset_; }
  /// All metadata, by key.
  [[nodiscard]] const std::map<std::string, gguf_value, std::less<>>& metadata() const { return metadata_; }
  /// Tensors in file order.
  [[nodiscard]] const std::vector<gguf_tensor_info>& tensors() const { return tensors_; }

  /// The metadata value under `key`, or nullptr.
  [[nodiscard]] const gguf_value* find_metadata(std::string_view key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  }
  /// Whether `key` is present.
  [[nodiscard]] bool contains(std::string_view key) const { return find_metadata(key) != nullptr; }
  /// The string under `key`; throws `error` naming the key when missing or of another type.
  [[nodiscard]] const std::string& get_string(std::string_view key) const {
    const auto& v = require(key);
    if (const auto* s = std::get_if<std::string>(&v.value)) return *s;
    throw wrong_type(key, "string", v);
  }
  /// The integer (any GGUF integer type) under `key`; throws `error` when missing, not an integer, or
  /// a uint64 above INT64_MAX.
  [[nodiscard]] std::int64_t get_int(std::string_view key) const {
    const auto& v = require(key);
    if (const auto i = as_int(v)) return *i;
    throw wrong_type(key, "an integer that fits in int64", v);
  }
  /// `get_int(key)`, or `fallback` when the key is absent.
  [[nodiscard]] std::int64_t get_int(std::string_view key, std::int64_t fallback) const {
    return contains(key) ? get_int(key) : fallback;
  }
  /// The float32 or float64 under `key`; throws `error` when missing or of another type.
  [[nodiscard]] double get_float(std::string_view key) const {
    const auto& v = require(key);
    if (const auto* x = std::get_if<float>(&v.value)) return *x;
    if (const auto* x = std::get_if<double>(&v.value)) return *x;
    throw wrong_type(key, "float32 or float64", v);
  }
  /// `get_float(key)`, or `fallback` when the key is absent.
  [[nodiscard]] double get_float(std::string_view key, double fallback) const {
    return contains(key) ? get_float(key) : fallback;
  }
  /// The bool under `key`; throws `error` when missing or of another type.
  [[nodiscard]] bool get_bool(std::string_view key) const {
    const auto& v = require(key);
    if (const auto* b = std::get_if<bool>(&v.value)) return *b;
    throw wrong_type(key, "bool", v);
  }
  /// The array under `key`; throws `error` when missing or of another type.
  [[nodiscard]] const gguf_array& get_array(std::string_view key) const {
    const auto& v = require(key);
    if (const auto* a = std::get_if<gguf_array>(&v.value)) return *a;
    throw wrong_type(key, "array", v);
  }
  /// The array of strings under `key` (copied); throws `error` naming the key otherwise.
  [[nodiscard]] std::vector<std::string> get_string_array(std::string_view key) const {
    const auto& a = get_array(key);
    if (a.element_type != gguf_value_type::string)
      throw error("gguf file '" + source_ + "': metadata '" + std::string(key) +
                  "': expected an array of string, found an array of " + to_string(a.element_type));
    std::vector<std::string> out;
    out.reserve(a.items.size());
    for (const auto& v : a.items) out.push_back(std::get<std::string>(v.value));
    return out;
  }
  /// The array of integers (any GGUF integer type) under `key`; throws `error` naming the key otherwise.
  [[nodiscard]] std::vector<std::int64_t> get_int_array(std::string_view key) const {
    const auto& a = get_array(key);
    std::vector<std::int64_t> out;
    out.reserve(a.items.size());
    for (const auto& v : a.items) {
      const auto i = as_int(v);
      if (!i)
        throw error("gguf file '" + source_ + "': metadata '" + std::string(key) +
                    "': expected an array of integers that fit in int64, found an array of " +
                    to_string(a.element_type));
      out.push_back(*i);
    }
    return out;
  }

  /// The tensor called `name`, or nullptr.
  [[nodiscard]] const gguf_tensor_info* find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  /// The tensor called `name`; throws `error` naming the file and tensor when absent.
  [[nodiscard]] const gguf_tensor_info& tensor(std::string_view name) const {
    if (const auto* t = find(name)) return *t;
    throw error("gguf file '" + source_ + "': tensor '" + std::string(name) + "' is not present");
  }
  /// Raw bytes of a tensor of this file (`error` for one whose bytes are not in it: another file's).
  [[nodiscard]] std::span<const std::byte> bytes(const gguf_tensor_info& t) const {
    if (t.offset > data_.size() || t.size > data_.size() - t.offset)
      throw error("gguf file '" + source_ + "': tensor '" + t.name + "' lies outside the file's data");
    return data_.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size));
  }
  /// The tensor's elements as floats, in storage order; throws `error` naming the file and tensor for
  /// a type that cannot be dequantised.
  [[nodiscard]] std::vector<float> dequantize(const gguf_tensor_info& t) const {
    if (!is_dequantisable(t.type))
      throw error("gguf file '" + source_ + "': tensor '" + t.name + "' field 'type': dequantisation of " +
                  to_string(t.type) + " is not supported");
    std::vector<float> out;
    try {
      out.resize(static_cast<std::size_t>(t.element_count()));
    } catch (const std::bad_alloc&) {
      throw error("gguf file '" + source_ + "': tensor '" + t.name + "': " + std::to_string(t.element_count()) +
                  " floats do not fit in memory");
    }
    io::dequantize(t.type, bytes(t), out);
    return out;
  }
  /// `dequantize(tensor(name))`.
  [[nodiscard]] std::vector<float> dequantize(std::string_view name) const { return dequantize(tensor(name)); }

 private:
  struct reader {
    std::span<const std::byte> bytes;
    std::uint64_t at;
    const std::string& source;
    std::uint64_t items = 0;  ///< metadata array items read so far

    [[nodiscard]] error fail(const std::string& field, const std::string& what) const {
      return error("gguf file '" + source + "': " + field + ": " + what);
    }
    [[nodiscard]] std::uint64_t left() const { return bytes.size() - at; }
    void need(std::uint64_t n, const std::string& field) const {
      if (n > left())
        throw fail(field, "truncated: needs " + std::to_string(n) + " bytes at offset " + std::to_string(at) + ", " +
                              std::to_string(left()) + " left");
    }
    template <class T>
    T scalar(const std::string& field) {
      need(sizeof(T), field);
      T v;
      std::memcpy(&v, bytes.data() + at, sizeof(T));
      at += sizeof(T);
      return v;
    }
    std::uint32_t u32(const std::string& field) { return scalar<std::uint32_t>(field); }
    std::uint64_t u64(const std::string& field) { return scalar<std::uint64_t>(field); }
    std::string string(const std::string& field) {
      const std::uint64_t n = u64(field + " (string length)");
      if (n > left())
        throw fail(field, "string length " + std::to_string(n) + " exceeds the " + std::to_string(left()) +
                              " bytes left in the file");
      std::string s(reinterpret_cast<const char*>(bytes.data() + at), static_cast<std::size_t>(n));
      at += n;
      return s;
    }
    gguf_value value(std::uint32_t type, const std::string& field, int depth) {
      gguf_value v;
      switch (static_cast<gguf_value_type>(type)) {
        case gguf_value_type::u8:
          v.value = scalar<std::uint8_t>(field);
          break;
        case gguf_value_type::i8:
          v.value = scalar<std::int8_t>(field);
          break;
        case gguf_value_type::u16:
          v.value = scalar<std::uint16_t>(field);
          break;
        case gguf_value_type::i16:
          v.value = scalar<std::int16_t>(field);
          break;
        case gguf_value_type::u32:
          v.value = scalar<std::uint32_t>(field);
          break;
        case gguf_value_type::i32:
          v.value = scalar<std::int32_t>(field);
          break;
        case gguf_value_type::f32:
          v.value = scalar<float>(field);
          break;
        case gguf_value_type::boolean:
          v.value = scalar<std::uint8_t>(field) != 0;
          break;
        case gguf_value_type::string:
          v.value = string(field);
          break;
        case gguf_value_type::array: {
          if (depth >= gguf_detail::max_nesting)
            throw fail(field, "arrays nested deeper than " + std::to_string(gguf_detail::max_nesting) + " levels");
          gguf_array a;
          const auto element_type = u32(field + " (array element type)");
          a.element_type = static_cast<gguf_value_type>(element_type);
          const std::uint64_t n = u64(field + " (array length)");
          if (n > gguf_detail::max_array) throw fail(field, "array length " + std::to_string(n) + " is more than 2^32");
          if (n > left() / min_size(element_type, field))
            throw fail(field, "array length " + std::to_string(n) + " of " + to_string(a.element_type) +
                                  " exceeds the " + std::to_string(left()) + " bytes left in the file");
          if ((items += n) > gguf_detail::max_metadata_items)
            throw fail(field, "more than " + std::to_string(gguf_detail::max_metadata_items) +
                                  " array items in the metadata");
          a.items.reserve(static_cast<std::size_t>(n));
          for (std::uint64_t i = 0; i < n; ++i) a.items.push_back(value(element_type, field, depth + 1));
          v.value = std::move(a);
          break;
        }
        case gguf_value_type::u64:
          v.value = scalar<std::uint64_t>(field);
          break;
        case gguf_value_type::i64:
          v.value = scalar<std::int64_t>(field);
          break;
        case gguf_value_type::f64:
          v.value = scalar<double>(field);
          break;
        default:
          throw fail(field, "unknown value type " + std::to_string(type));
      }
      return v;
    }
    /// Fewest bytes one value of `type` takes in the file.
    [[nodiscard]] std::uint64_t min_size(std::uint32_t type, const std::string& field) const {
      switch (static_cast<gguf_value_type>(type)) {
        case gguf_value_type::u8:
        case gguf_value_type::i8:
        case gguf_value_type::boolean:
          return 1;
        case gguf_value_type::u16:
        case gguf_value_type::i16:
          return 2;
        case gguf_value_type::u32:
        case gguf_value_type::i32:
        case gguf_value_type::f32:
          return 4;
        case gguf_value_type::u64:
        case gguf_value_type::i64:
        case gguf_value_type::f64:
        case gguf_value_type::string:
          return 8;
        case gguf_value_type::array:
          return 12;
      }
      throw fail(field, "unknown array element type " + std::to_string(type));
    }
  };

  [[nodiscard]] const gguf_value& require(std::string_view key) const {
    if (const auto* v = find_metadata(key)) return *v;
    throw error("gguf file '" + source_ + "': metadata '" + std::string(key) + "' is missing");
  }
  [[nodiscard]] error wrong_type(std::string_view key, std::string_view expected, const gguf_value& v) const {
    return error("gguf file '" + source_ + "': metadata '" + std::string(key) + "': expected " + std::string(expected) +
                 ", found " + to_string(v.type()));
  }
  [[nodiscard]] static std::optional<std::int64_t> as_int(const gguf_value& v) {
    return std::visit(
        [](const auto& x) -> std::optional<std::int64_t> {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::uint64_t>) {
            if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
            return static_cast<std::int64_t>(x);
          } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            return static_cast<std::int64_t>(x);
          } else {
            return std::nullopt;
          }
        },
        v.value);
  }

  std::string source_;
  std::shared_ptr<const gguf_detail::mapping> owned_;
  std::span<const std::byte> data_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = gguf_detail::default_alignment;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, gguf_value, std::less<>> metadata_;
  std::vector<gguf_tensor_info> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace blockpilot::io
