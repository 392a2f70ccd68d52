// Reader and writer of the safetensors format: u64 little-endian header length N, N bytes of JSON
// header, then the tensor bytes. Every malformed input is reported as `error` naming file and field.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "blockpilot_workbench/io/atomic_file.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot::io {

static_assert(std::endian::native == std::endian::little, "safetensors tensor data is little-endian");

/// Element types of the safetensors format (F8 types are not supported).
enum class dtype { boolean, u8, i8, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64 };

namespace safetensors_detail {
struct dtype_entry {
  dtype type;
  std::string_view name;
  std::size_t size;
};
inline constexpr std::array<dtype_entry, 13> dtypes = {{{dtype::boolean, "BOOL", 1},
                                                        {dtype::u8, "U8", 1},
                                                        {dtype::i8, "I8", 1},
                                                        {dtype::i16, "I16", 2},
                                                        {dtype::u16, "U16", 2},
                                                        {dtype::f16, "F16", 2},
                                                        {dtype::bf16, "BF16", 2},
                                                        {dtype::i32, "I32", 4},
                                                        {dtype::u32, "U32", 4},
                                                        {dtype::f32, "F32", 4},
                                                        {dtype::f64, "F64", 8},
                                                        {dtype::i64, "I64", 8},
                                                        {dtype::u64, "U64", 8}}};
static_assert(
    [] {
      for (std::size_t i = 0; i < dtypes.size(); ++i)
        if (dtypes[i].type != static_cast<dtype>(i)) return false;
      return true;
    }(),
    "dtypes must be listed in enum order");
inline const dtype_entry& entry(dtype t) { return dtypes[static_cast<std::size_t>(t)]; }

/// Header lengths above this are rejected before any allocation.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

/// The format nests three levels (header, tensor entry, shape). A deeper object or array is refused as the parser
/// meets it, before a header of nested brackets grows a tree far larger than its bytes.
inline constexpr int max_header_depth = 2;
struct header_too_deep {};
inline bool refuse_deep_nesting(int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
  using event_t = nlohmann::json::parse_event_t;
  if ((event == event_t::object_start || event == event_t::array_start) && depth > max_header_depth) throw header_too_deep{};
  return true;
}
}  // namespace safetensors_detail

/// The format's name for a dtype ("F32", "BF16", …).
[[nodiscard]] inline std::string_view to_string(dtype t) { return safetensors_detail::entry(t).name; }
/// Bytes per element.
[[nodiscard]] inline std::size_t dtype_size(dtype t) { return safetensors_detail::entry(t).size; }
/// The dtype named `name`, or nullopt.
[[nodiscard]] inline std::optional<dtype> parse_dtype(std::string_view name) {
  for (const auto& e : safetensors_detail::dtypes)
    if (e.name == name) return e.type;
  return std::nullopt;
}

/// The dtype of a C++ element type, for the typed writer and reader.
template <class T>
inline constexpr dtype dtype_of = [] {
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>) return dtype::bf16;
  else if constexpr (std::is_same_v<T, Eigen::half>) return dtype::f16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return dtype::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return dtype::i64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return dtype::u8;
  else static_assert(sizeof(T) == 0, "dtype_of: no safetensors dtype for this element type");
}();

/// One tensor entry of the header; `begin`/`end` are byte offsets into the data section.
struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;

  /// Product of the shape (bounded by the file size for a parsed file).
  [[nodiscard]] std::int64_t element_count() const {
    if (std::ranges::count(shape, 0)) return 0;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

/// A parsed safetensors file. `read` owns the bytes; `parse` views caller bytes, which must outlive
/// the object. Tensors are listed in data order.
class safetensors_file {
 public:
  /// Reads the whole file into memory and parses it; throws `error` naming the file (and field).
  [[nodiscard]] static safetensors_file read(const std::filesystem::path& path) {
    const std::string source = path.string();
    std::error_code ec;
    const bool regular = std::filesystem::is_regular_file(path, ec);
    const auto size = regular ? std::filesystem::file_size(path, ec) : 0;
    if (!regular || ec) throw error("safetensors file '" + source + "': not a readable regular file");
    std::shared_ptr<std::vector<std::byte>> bytes;
    try {
      bytes = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(size));
    } catch (const std::bad_alloc&) {
      throw error("safetensors file '" + source + "': " + std::to_string(size) + " bytes do not fit in memory");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in || !in.read(reinterpret_cast<char*>(bytes->data()), static_cast<std::streamsize>(size)))
      throw error("safetensors file '" + source + "': read failed");
    safetensors_file f = parse(*bytes, source);
    f.owned_ = std::move(bytes);
    return f;
  }

  /// Parses bytes in memory; `source` names them in error messages.
  [[nodiscard]] static safetensors_file parse(std::span<const std::byte> bytes, std::string source) {
    namespace sd = safetensors_detail;
    safetensors_file f;
    f.source_ = std::move(source);
    const auto fail = [&](const std::string& what) { return error("safetensors file '" + f.source_ + "': " + what); };
    if (bytes.size() < 8)
      throw fail("field 'header length': the file has " + std::to_string(bytes.size()) + " bytes, fewer than 8");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(bytes[static_cast<std::size_t>(i)]);
    if (n > sd::max_header_bytes)
      throw fail("field 'header length': " + std::to_string(n) + " bytes is larger than the limit of 100 MB");
    if (n > bytes.size() - 8)
      throw fail("field 'header length': " + std::to_string(n) + " bytes but only " + std::to_string(bytes.size() - 8) +
                 " bytes follow");
    const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text, text + n, sd::refuse_deep_nesting, false);
    } catch (const sd::header_too_deep&) {
      throw fail("field 'header': nested deeper than the format's " + std::to_string(sd::max_header_depth + 1) +
                 " levels");
    }
    if (header.is_discarded()) throw fail("field 'header': not valid JSON");
    if (!header.is_object()) throw fail("field 'header': not a JSON object");
    f.data_ = bytes.subspan(8 + static_cast<std::size_t>(n));
    const std::uint64_t data_size = f.data_.size();
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) throw fail("field '__metadata__': not a JSON object");
        for (const auto& [key, v] : value.items()) {
          if (!v.is_string()) throw fail("field '__metadata__." + key + "': value is not a string");
          f.metadata_.emplace(key, v.get<std::string>());
        }
        continue;
      }
      const std::string where = "tensor '" + name + "' field ";
      if (!value.is_object()) throw fail("tensor '" + name + "': the entry is not a JSON object");
      const auto dt = value.find("dtype");
      if (dt == value.end() || !dt->is_string()) throw fail(where + "'dtype': missing or not a string");
      const auto type = parse_dtype(dt->get<std::string>());
      if (!type) throw fail(where + "'dtype': unknown dtype \"" + dt->get<std::string>() + "\"");
      const auto sh = value.find("shape");
      if (sh == value.end() || !sh->is_array()) throw fail(where + "'shape': missing or not an array");
      tensor_info t{name, *type, {}, 0, 0};
      for (const auto& d : *sh) {
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t{1} << 62)
          throw fail(where + "'shape': an entry is not an integer in [0, 2^62]");
        t.shape.push_back(d.get<std::int64_t>());
      }
      std::uint64_t bytes_needed = std::ranges::count(t.shape, 0) ? 0 : dtype_size(*type);
      for (const auto d : t.shape) {
        if (bytes_needed > data_size / static_cast<std::uint64_t>(std::max<std::int64_t>(d, 1)))
          throw fail(where + "'shape': the tensor is larger than the " + std::to_string(data_size) +
                     "-byte data section");
        bytes_needed *= static_cast<std::uint64_t>(d);
      }
      const auto off = value.find("data_offsets");
      if (off == value.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
          !(*off)[1].is_number_unsigned())
        throw fail(where + "'data_offsets': missing or not two non-negative integers");
      t.begin = (*off)[0].get<std::uint64_t>();
      t.end = (*off)[1].get<std::uint64_t>();
      if (t.begin > t.end || t.end > data_size)
        throw fail(where + "'data_offsets': [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                   "] is not an ordered range inside the " + std::to_string(data_size) + "-byte data section");
      if (t.end - t.begin != bytes_needed)
        throw fail(where + "'data_offsets': " + std::to_string(t.end - t.begin) + " bytes, but shape and dtype need " +
                   std::to_string(bytes_needed));
      f.tensors_.push_back(std::move(t));
    }
    std::ranges::stable_sort(f.tensors_, [](const tensor_info& a, const tensor_info& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t at = 0;
    for (const auto& t : f.tensors_) {
      if (t.begin != at)
        throw fail("tensor '" + t.name + "' field 'data_offsets': starts at " + std::to_string(t.begin) +
                   ", expected " + std::to_string(at) +
                   (t.begin < at ? " (overlaps the previous tensor)" : " (gap before it)"));
      at = t.end;
    }
    if (at != data_size)
      throw fail("field 'data_offsets': tensors cover " + std::to_string(at) + " of " + std::to_string(data_size) +
                 " data bytes");
    return f;
  }

  /// Where the bytes came from (the path, or the name given to `parse`).
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }
  [[nodiscard]] const std::vector<tensor_info>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  [[nodiscard]] const tensor_info* find(std::string_view name) const {
    const auto it = std::ranges::find(tensors_, name, &tensor_info::name);
    return it == tensors_.end() ? nullptr : &*it;
  }
  /// Raw bytes of a tensor of this file (`error` for one whose bytes are not in it: another file's).
  [[nodiscard]] std::span<const std::byte> bytes(const tensor_info& t) const {
    if (t.begin > t.end || t.end > data_.size() || t.end - t.begin != static_cast<std::uint64_t>(t.element_count()) * dtype_size(t.type))
      throw error("safetensors file '" + source_ + "': tensor '" + t.name + "' is not one of this file's");
    return data_.subspan(static_cast<std::size_t>(t.begin), static_cast<std::size_t>(t.end - t.begin));
  }
  /// The elements of a tensor whose dtype is exactly `dtype_of<T>`; throws `error` otherwise.
  /// Copies (the data section carries no alignment guarantee).
  template <class T>
  [[nodiscard]] std::vector<T> values(const tensor_info& t) const {
    if (t.type != dtype_of<T>)
      throw error("safetensors file '" + source_ + "': tensor '" + t.name + "' field 'dtype': expected " +
                  std::string(to_string(dtype_of<T>)) + ", found " + std::string(to_string(t.type)));
    std::vector<T> out(static_cast<std::size_t>(t.element_count()));
    if (!out.empty()) std::memcpy(out.data(), bytes(t).data(), out.size() * sizeof(T));
    return out;
  }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<std::byte>> owned_;
  std::span<const std::byte> data_;
  std::map<std::string, std::string> metadata_;
  std::vector<tensor_info> tensors_;
};

/// Collects tensors and metadata and writes a safetensors file: tensors in insertion order, header
/// padded with spaces to a multiple of 8 bytes.
class safetensors_writer {
 public:
  /// Adds a tensor (copies the bytes); throws `error` when the name repeats or the byte count does
  /// not match shape × dtype size.
  void add(std::string name, dtype type, std::vector<std::int64_t> shape, std::span<const std::byte> data) {
    std::uint64_t n = dtype_size(type);
    for (auto d : shape) {
      if (d < 0) throw error("safetensors writer: tensor '" + name + "' field 'shape': negative dimension");
      if (d > 0 && n > data.size() / static_cast<std::uint64_t>(d))  // more than the bytes given, without overflow
        throw error("safetensors writer: tensor '" + name + "' field 'shape': needs more than the " +
                    std::to_string(data.size()) + " bytes given");
      n *= static_cast<std::uint64_t>(d);
    }
    if (n != data.size())
      throw error("safetensors writer: tensor '" + name + "' field 'shape': needs " + std::to_string(n) +
                  " bytes, got " + std::to_string(data.size()));
    if (header_.contains(name) || name == "__metadata__")
      throw error("safetensors writer: tensor '" + name + "' field 'name': already present or reserved");
    const std::uint64_t begin = data_.size();
    data_.insert(data_.end(), data.begin(), data.end());
    header_[name] = {
        {"dtype", std::string(to_string(type))}, {"shape", shape}, {"data_offsets", {begin, data_.size()}}};
  }
  /// Typed overload: the dtype follows from T.
  template <class T>
  void add(std::string name, std::vector<std::int64_t> shape, std::span<const T> values) {
    add(std::move(name), dtype_of<T>, std::move(shape), std::as_bytes(values));
  }
  void set_metadata(const std::string& key, std::string value) { header_["__metadata__"][key] = std::move(value); }

  /// The whole file as bytes.
  [[nodiscard]] std::vector<std::byte> serialize() const {
    std::string text = header_.empty() ? std::string("{}") : header_.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<std::byte> out(8 + text.size() + data_.size());
    for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xff);
    std::memcpy(out.data() + 8, text.data(), text.size());
    if (!data_.empty()) std::memcpy(out.data() + 8 + text.size(), data_.data(), data_.size());
    return out;
  }
  /// Writes `serialize()` to `path`; throws `error` naming the file when writing fails.
  void write(const std::filesystem::path& path) const {
    const auto bytes = serialize();
    write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

 private:
  nlohmann::ordered_json header_ = nlohmann::ordered_json::object();
  std::vector<std::byte> data_;
};

}  // namespace blockpilot::io
