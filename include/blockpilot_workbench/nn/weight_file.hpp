// BlockPilot predictor files: an mlp (PyTorch state-dict names), its feature standardisation and
// the metadata that ties it to a drafter, in safetensors. Layout: docs/predictor-files.md.
#pragma once

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "blockpilot_workbench/io/safetensors.hpp"
#include "blockpilot/nn/mlp.hpp"
#include "blockpilot/nn/predictor.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::nn {

/// Value of the `format` metadata field.
inline constexpr std::string_view predictor_format = "blockpilot-predictor";
/// Value of the `version` metadata field this code writes and reads.
inline constexpr std::int64_t predictor_format_version = 1;

namespace weight_file_detail {

inline std::string tensor_name(std::size_t l, const mlp_shape& s, std::string_view what) {
  return (l < s.hidden.size() ? "layers." + std::to_string(l) : std::string("out")) + "." + std::string(what);
}

inline std::string join(const std::vector<std::int64_t>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

inline std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return {buf, r.ptr};
}

/// Checks the metadata on its own and against a shape; `fail` builds the error for a field.
template <class Fail>
void check(const predictor_metadata& m, const mlp_shape& s, Fail&& fail) {
  if (m.training_block_size < 1 || m.training_block_size > block_size_limit)
    throw fail("training_block_size", "must be in [1, " + std::to_string(block_size_limit) + "]");
  if (m.window_k < 0 || m.window_k >= m.training_block_size)
    throw fail("window_k", "must be in [0, training_block_size)");
  if (m.training_block_size + m.window_k > block_size_limit)
    throw fail("window_k", "B + k must be <= " + std::to_string(block_size_limit));
  if (m.vocab_size < 1 || m.vocab_size > std::numeric_limits<token_id>::max())
    throw fail("vocab_size", "must be in [1, 2^31 - 1]");
  if (m.feature_extractor.empty()) throw fail("feature_extractor", "must not be empty");
  if (!std::isfinite(m.temperature) || m.temperature < 0) throw fail("temperature", "must be finite and >= 0");
  if (m.input_transform.empty()) throw fail("input_transform", "must not be empty");
  if (m.loss.empty()) throw fail("loss", "must not be empty");
  if (m.pooled_rows < 1 || m.pooled_rows > 4096) throw fail("pooled_rows", "must be in [1, 4096]");
  if (s.classes != 2 * m.window_k + 1)
    throw fail("num_classes", std::to_string(s.classes) + " classes, but window_k " + std::to_string(m.window_k) +
                                  " needs 2k+1 = " + std::to_string(2 * m.window_k + 1));
}

/// Strict decimal integer (the whole string).
inline std::optional<std::int64_t> parse_int(std::string_view t) {
  std::int64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc{} || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

/// Copies a F32/BF16/F16 tensor into dst (same element count), converting to T; false when an
/// element is not finite.
template <mlp_storage T>
bool convert(std::span<const std::byte> src, io::dtype type, std::span<T> dst) {
  const auto read = [&](std::size_t i) -> float {
    if (type == io::dtype::f32) {
      float v;
      std::memcpy(&v, src.data() + 4 * i, 4);
      return v;
    }
    std::uint16_t bits;
    std::memcpy(&bits, src.data() + 2 * i, 2);
    return type == io::dtype::bf16 ? to_float(std::bit_cast<Eigen::bfloat16>(bits))
                                   : static_cast<float>(std::bit_cast<Eigen::half>(bits));
  };
  bool finite = true;
  for (std::size_t i = 0; i < dst.size(); ++i) {
    const float v = read(i);
    finite = finite && std::isfinite(v);
    dst[i] = from_float<T>(v);
  }
  return finite;
}

}  // namespace weight_file_detail

/// Throws `error` naming the field when `meta` does not fit a network of shape `s` (a predictor no
/// loader would read): what `predictor_writer` checks, for callers that check before they train.
inline void check_predictor_metadata(const predictor_metadata& meta, const mlp_shape& s) {
  weight_file_detail::check(meta, s, [](std::string_view field, const std::string& what) {
    return error("predictor_metadata field '" + std::string(field) + "': " + what);
  });
}

/// Builds the safetensors writer of a predictor: MLP tensors in T's dtype, `feature_mean` and
/// `feature_std` in F32, all metadata as strings. Throws `error` naming the field when the metadata
/// is inconsistent (for example classes != 2k+1) or a parameter is not finite (a file that every
/// loader would refuse is never written).
template <mlp_storage T>
[[nodiscard]] io::safetensors_writer predictor_writer(const mlp<T>& net, const predictor_metadata& meta) {
  namespace wd = weight_file_detail;
  const mlp_shape& s = net.shape();
  check_predictor_metadata(meta, s);
  const auto params = net.parameters();
  if (const auto bad = std::find_if(params.begin(), params.end(), [](T v) { return !std::isfinite(to_float(v)); });
      bad != params.end())
    throw error("predictor: parameter " + std::to_string(bad - params.begin()) + " of " + std::to_string(params.size()) +
                " is not finite (training diverged; a smaller learning rate may help); nothing written");
  io::safetensors_writer w;
  w.set_metadata("format", std::string(predictor_format));
  w.set_metadata("version", std::to_string(predictor_format_version));
  w.set_metadata("training_block_size", std::to_string(meta.training_block_size));
  w.set_metadata("window_k", std::to_string(meta.window_k));
  w.set_metadata("vocab_size", std::to_string(meta.vocab_size));
  w.set_metadata("feature_extractor", meta.feature_extractor);
  for (const auto& [k, v] : meta.feature_parameters) {
    if (k.empty()) throw error("predictor_metadata field 'feature_parameters': empty key");
    w.set_metadata("feature." + k, v);
  }
  w.set_metadata("temperature", wd::format_double(meta.temperature));
  w.set_metadata("input_transform", meta.input_transform);
  w.set_metadata("loss", meta.loss);
  w.set_metadata("pooled_rows", std::to_string(meta.pooled_rows));
  w.set_metadata("input_dim", std::to_string(s.input));
  w.set_metadata("hidden_dims", wd::join(s.hidden, ","));
  w.set_metadata("num_classes", std::to_string(s.classes));
  for (std::size_t l = 0; l < s.linear_count(); ++l) {
    const auto wt = net.weight(l);
    w.add<T>(wd::tensor_name(l, s, "weight"), {wt.rows, wt.cols},
             std::span<const T>(wt.data, static_cast<std::size_t>(wt.rows * wt.cols)));
    w.add<T>(wd::tensor_name(l, s, "bias"), {wt.rows}, net.bias(l));
  }
  w.add<float>("feature_mean", {s.input}, net.feature_mean());
  w.add<float>("feature_std", {s.input}, net.feature_std());
  return w;
}

/// Writes a predictor file; throws `error` naming the file or the metadata field.
template <mlp_storage T>
void save_predictor(const std::filesystem::path& path, const mlp<T>& net, const predictor_metadata& meta) {
  predictor_writer(net, meta).write(path);
}

/// Reads a predictor from a parsed safetensors file, converting F32/BF16/F16 tensors to T. Checks the
/// format, version, every metadata field, the exact tensor set, every shape against the metadata,
/// finiteness and feature_std > 0; throws `error` naming the file and the field.
template <mlp_storage T>
[[nodiscard]] predictor<T> load_predictor(const io::safetensors_file& file) {
  namespace wd = weight_file_detail;
  const auto fail = [&](std::string_view field, const std::string& what) {
    return error("predictor file '" + file.source() + "' field '" + std::string(field) + "': " + what);
  };
  const auto& md = file.metadata();
  const auto text = [&](const std::string& key) -> const std::string& {
    const auto it = md.find(key);
    if (it == md.end()) throw fail(key, "missing from __metadata__");
    return it->second;
  };
  const auto integer = [&](const std::string& key) {
    const auto v = wd::parse_int(text(key));
    if (!v) throw fail(key, "\"" + text(key) + "\" is not an integer");
    return *v;
  };
  if (text("format") != predictor_format)
    throw fail("format", "\"" + text("format") + "\", expected \"" + std::string(predictor_format) + "\"");
  if (integer("version") != predictor_format_version)
    throw fail("version", text("version") + " is not supported (this build reads " +
                              std::to_string(predictor_format_version) + ")");
  predictor_metadata meta;
  meta.training_block_size = integer("training_block_size");
  meta.window_k = integer("window_k");
  meta.vocab_size = integer("vocab_size");
  meta.feature_extractor = text("feature_extractor");
  const std::string& temp = text("temperature");
  const auto r = std::from_chars(temp.data(), temp.data() + temp.size(), meta.temperature);
  if (temp.empty() || r.ec != std::errc{} || r.ptr != temp.data() + temp.size())
    throw fail("temperature", "\"" + temp + "\" is not a number");
  meta.input_transform = text("input_transform");
  meta.loss = text("loss");
  if (md.contains("pooled_rows")) meta.pooled_rows = integer("pooled_rows");
  for (const auto& [k, v] : md)
    if (k.starts_with("feature.")) meta.feature_parameters.emplace(k.substr(8), v);

  mlp_shape shape{integer("input_dim"), {}, integer("num_classes")};
  const std::string& hidden = text("hidden_dims");
  for (std::size_t pos = 0; !hidden.empty() && pos <= hidden.size();) {
    const auto comma = std::min(hidden.find(',', pos), hidden.size());
    const auto v = wd::parse_int(std::string_view(hidden).substr(pos, comma - pos));
    if (!v) throw fail("hidden_dims", "\"" + hidden + "\" is not a comma-separated list of integers");
    shape.hidden.push_back(*v);
    pos = comma + 1;
  }
  try {
    shape.validate();
  } catch (const error& e) {
    throw fail("input_dim/hidden_dims/num_classes", e.what());
  }
  wd::check(meta, shape, fail);

  std::map<std::string, std::vector<std::int64_t>> expected;
  for (std::size_t l = 0; l < shape.linear_count(); ++l) {
    expected[wd::tensor_name(l, shape, "weight")] = {shape.out_features(l), shape.in_features(l)};
    expected[wd::tensor_name(l, shape, "bias")] = {shape.out_features(l)};
  }
  expected["feature_mean"] = expected["feature_std"] = {shape.input};
  for (const auto& t : file.tensors())
    if (!expected.contains(t.name)) throw fail(t.name, "unexpected tensor");
  const auto tensor = [&](const std::string& name) -> const io::tensor_info& {
    const io::tensor_info* t = file.find(name);
    if (!t) throw fail(name, "tensor missing");
    if (t->type != io::dtype::f32 && t->type != io::dtype::bf16 && t->type != io::dtype::f16)
      throw fail(name, "dtype " + std::string(io::to_string(t->type)) + ", expected F32, BF16 or F16");
    if (t->shape != expected[name])
      throw fail(name, "shape [" + wd::join(t->shape, ", ") + "], expected [" + wd::join(expected[name], ", ") +
                           "] from input_dim, hidden_dims and num_classes");
    return *t;
  };
  const auto load = [&]<class U>(const std::string& name, std::span<U> dst) {
    const auto& t = tensor(name);
    if (!wd::convert(file.bytes(t), t.type, dst)) throw fail(name, "holds a non-finite value");
  };
  // Every tensor checked in load order before the network is allocated: the file's size bounds its size.
  for (std::size_t l = 0; l < shape.linear_count(); ++l)
    for (const char* part : {"weight", "bias"}) (void)tensor(wd::tensor_name(l, shape, part));
  for (const char* name : {"feature_mean", "feature_std"}) (void)tensor(name);
  predictor<T> p{std::move(meta), mlp<T>(shape)};
  for (std::size_t l = 0; l < shape.linear_count(); ++l) {
    const auto w = p.network.weight(l);
    load(wd::tensor_name(l, shape, "weight"), std::span<T>(w.data, static_cast<std::size_t>(w.rows * w.cols)));
    load(wd::tensor_name(l, shape, "bias"), p.network.bias(l));
  }
  std::vector<float> mean(static_cast<std::size_t>(shape.input)), sd(mean.size());
  load("feature_mean", std::span<float>(mean));
  load("feature_std", std::span<float>(sd));
  if (const auto bad = std::ranges::find_if(sd, [](float v) { return !(v > 0.0f); }); bad != sd.end())
    throw fail("feature_std", "entry " + std::to_string(bad - sd.begin()) + " is not > 0");
  p.network.set_standardization(mean, sd);
  return p;
}

/// Reads a predictor file from disk (see the overload above).
template <mlp_storage T>
[[nodiscard]] predictor<T> load_predictor(const std::filesystem::path& path) {
  return load_predictor<T>(io::safetensors_file::read(path));
}

/// Reads a predictor from bytes in memory; `source` names them in errors.
template <mlp_storage T>
[[nodiscard]] predictor<T> load_predictor(std::span<const std::byte> bytes, std::string source) {
  return load_predictor<T>(io::safetensors_file::parse(bytes, std::move(source)));
}

}  // namespace blockpilot::nn
