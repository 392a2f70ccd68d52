// A GGUF Llama-family target on the CPU: `llama_model` (weights dequantised once to fp32 Eigen
// matrices, or kept in the file's quantised blocks) and `llama_verifier`, a model of
// `verifier_with_context_features` with a KV cache, batched block scoring (one request's block, or the
// blocks of several requests in one pass), and the residual stream of chosen decoder layers as context
// features.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot_workbench/models/kernels/cpu_isa.hpp"
#include "blockpilot_workbench/models/kernels/attention.hpp"
#include "blockpilot_workbench/models/kernels/int8_products.hpp"
#include "blockpilot_workbench/models/kernels/panel_products.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"
#include "blockpilot_workbench/models/quantized_matrix.hpp"
#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// Row-major fp32 matrix: activations, and the weights in fp32 storage.
using llama_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// How `llama_model::load` stores the weight matrices, and so what their products read.
enum class llama_storage {
  fp32,            ///< every matrix dequantised once to fp32 (4 bytes a weight)
  quantized,       ///< Q4_0 / Q4_1 / Q8_0 matrices kept in their blocks (products on the blocks, fp32
                   ///< activations: the reference of the quantised storages); matrices of other types are
                   ///< dequantised to fp32 as in `fp32`
  quantized_int8,  ///< the same blocks regrouped 16 rows at a time (kernels/int8_products.hpp), products
                   ///< with activations quantised to int8 per block of 32 (as llama.cpp's Q8_1): integer
                   ///< dot products on AVX-512 VNNI, 16-bit multiply-adds on AVX2, a portable kernel
                   ///< elsewhere, all with the same results; SmolLM2's logits (span about 30) move by up
                   ///< to about 1.6 against `quantized` (test_llama)
};

/// One weight matrix [rows][cols] in one of the storages.
struct llama_weight {
  llama_matrix values;                      ///< fp32 rows (matrices built by hand); empty otherwise
  cpu_kernels::f32_panels panels;           ///< fp32 storage of a loaded model, in panels of 16 rows; no rows otherwise
  cpu_detail::quantized_matrix blocks;      ///< quantised storage; no rows otherwise
  cpu_kernels::interleaved_blocks grouped;  ///< quantised storage for int8 activations; no rows otherwise

  /// Whether the matrix is held in quantised blocks (either order).
  [[nodiscard]] bool quantized() const { return blocks.rows() > 0 || grouped.rows() > 0; }
  [[nodiscard]] std::int64_t rows() const {
    return blocks.rows() > 0 ? blocks.rows() : grouped.rows() > 0 ? grouped.rows() : panels.rows() > 0 ? panels.rows() : values.rows();
  }
  [[nodiscard]] std::int64_t cols() const {
    return blocks.rows() > 0 ? blocks.cols() : grouped.rows() > 0 ? grouped.cols() : panels.rows() > 0 ? panels.cols() : values.cols();
  }
  /// Bytes of the storage in use.
  [[nodiscard]] std::size_t bytes() const {
    return blocks.rows() > 0    ? blocks.bytes()
           : grouped.rows() > 0 ? grouped.bytes()
           : panels.rows() > 0  ? panels.bytes()
                                : static_cast<std::size_t>(values.size()) * sizeof(float);
  }
  /// The rows for the fp32-activation row kernels (`values` or `blocks`).
  [[nodiscard]] cpu_kernels::weight_rows_view view() const {
    if (blocks.rows() > 0) return blocks.view();
    return {io::ggml_type::f32, reinterpret_cast<const std::byte*>(values.data()),
            static_cast<std::size_t>(values.cols()) * sizeof(float), values.cols()};
  }
  /// Rows [first, first + count) as fp32 into out [count][cols] (the file's values: quantised rows
  /// decode bit-exactly).
  void decode(std::int64_t first, std::int64_t count, float* out) const {
    if (blocks.rows() > 0)
      blocks.decode(first, count, out);
    else if (grouped.rows() > 0)
      for (std::int64_t r = 0; r < count; ++r) grouped.decode(first + r, out + r * grouped.cols());
    else if (panels.rows() > 0)
      for (std::int64_t r = 0; r < count; ++r) panels.decode(first + r, out + r * panels.cols());
    else
      std::copy_n(values.row(first).data(), count * values.cols(), out);
  }
  /// Row r as fp32 into out [cols].
  void row(std::int64_t r, float* out) const { decode(r, 1, out); }

  /// The fp32 matrix `m` in `storage`: fp32 panels, or Q8_0 blocks (io::quantize_q8_0) for the quantised
  /// storages, regrouped for int8 activations. Throws `error` when quantised and cols is not a multiple of
  /// 32 or an element is not finite.
  [[nodiscard]] static llama_weight from_matrix(const llama_matrix& m, llama_storage storage) {
    llama_weight w;
    if (storage == llama_storage::fp32) {
      w.panels = cpu_kernels::f32_panels(m.data(), m.cols(), m.rows(), m.cols());
      return w;
    }
    w.blocks = cpu_detail::quantized_matrix(io::ggml_type::q8_0, m.cols());
    std::vector<std::byte> bytes(static_cast<std::size_t>(m.size() / 32 * 34));
    io::quantize_q8_0(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())), bytes);
    w.blocks.append(bytes, m.rows());
    if (storage == llama_storage::quantized_int8) w.regroup_for_int8();
    return w;
  }

  /// The blocks regrouped for int8 activations (`grouped`), `blocks` emptied.
  void regroup_for_int8() {
    grouped = cpu_kernels::interleaved_blocks(blocks.view(), blocks.rows());
    blocks = {};
  }

  /// Rows `rows` of this matrix, in that order, in the same storage and with the same bytes (so each
  /// row's product is the same). Throws `error` for a row out of range.
  [[nodiscard]] llama_weight select_rows(std::span<const std::int64_t> rows) const {
    for (const auto r : rows)
      if (r < 0 || r >= this->rows())
        throw error("llama_weight: row " + std::to_string(r) + " of a matrix of " + std::to_string(this->rows()) + " rows");
    const auto n = static_cast<std::int64_t>(rows.size());
    llama_weight w;
    if (quantized()) {
      const io::ggml_type type = blocks.rows() > 0 ? blocks.type() : grouped.type();
      const std::size_t row_bytes = blocks.rows() > 0 ? blocks.view().row_bytes : grouped.row_bytes();
      std::vector<std::byte> bytes(static_cast<std::size_t>(n) * row_bytes);
      for (std::int64_t i = 0; i < n; ++i) {
        std::byte* out = bytes.data() + static_cast<std::size_t>(i) * row_bytes;
        if (blocks.rows() > 0)
          std::memcpy(out, blocks.view().data + static_cast<std::size_t>(rows[static_cast<std::size_t>(i)]) * row_bytes, row_bytes);
        else
          grouped.row_blocks(rows[static_cast<std::size_t>(i)], out);
      }
      w.blocks = cpu_detail::quantized_matrix(type, cols());
      w.blocks.append(bytes, n);
      if (grouped.rows() > 0) w.regroup_for_int8();
      return w;
    }
    llama_matrix values(n, cols());
    for (std::int64_t i = 0; i < n; ++i) row(rows[static_cast<std::size_t>(i)], values.row(i).data());
    if (panels.rows() > 0)
      w.panels = cpu_kernels::f32_panels(values.data(), values.cols(), n, values.cols());
    else
      w.values = std::move(values);
    return w;
  }
};

/// Shape and hyper-parameters, read from the GGUF metadata `llama.*`.
struct llama_config {
  int layers = 0;              ///< llama.block_count
  int hidden = 0;              ///< llama.embedding_length
  int heads = 0;               ///< llama.attention.head_count
  int kv_heads = 0;            ///< llama.attention.head_count_kv (grouped-query attention)
  int head_dim = 0;            ///< hidden / heads (llama.attention.key_length when present)
  int ffn = 0;                 ///< llama.feed_forward_length
  std::int64_t vocab = 0;      ///< rows of token_embd.weight
  std::int64_t context_length = 0;  ///< llama.context_length (0 when absent)
  float rms_eps = 1e-5f;       ///< llama.attention.layer_norm_rms_epsilon
  double rope_base = 10000.0;  ///< llama.rope.freq_base
};

/// One decoder layer's weights, each [out][in] row-major as in the file.
struct llama_layer_weights {
  Eigen::VectorXf attn_norm;  ///< [hidden]
  Eigen::VectorXf ffn_norm;   ///< [hidden]
  llama_weight qkv;           ///< [(heads + 2 kv_heads) head_dim][hidden]: attn_q, attn_k, attn_v stacked
  llama_weight attn_output;   ///< [hidden][heads head_dim]
  llama_weight gate_up;       ///< [2 ffn][hidden]: ffn_gate then ffn_up
  llama_weight down;          ///< [hidden][ffn]
};

/// A Llama-architecture model loaded from GGUF (llama.cpp tensor names), its matrices dequantised to
/// fp32 once or kept quantised (`llama_storage`); norms are fp32 in both.
/// The q/k rows stay in llama.cpp's permuted order, so RoPE rotates adjacent pairs (2i, 2i+1)
/// (llama.cpp's LLAMA_ROPE_TYPE_NORM); that equals HF's rotate-half on the un-permuted weights.
class llama_model {
 public:
  /// Opens and loads `path`; throws `error` naming the file and the tensor or metadata field.
  static llama_model load(const std::filesystem::path& path, llama_storage storage = llama_storage::fp32) {
    return load(io::gguf_file::open(path), storage);
  }

  /// Loads from an opened GGUF file (the model copies what it keeps); throws `error` naming the file
  /// and the field.
  static llama_model load(const io::gguf_file& f, llama_storage storage = llama_storage::fp32) {
    const auto started = std::chrono::steady_clock::now();
    llama_model m;
    m.source_ = f.source();
    m.storage_ = storage;
    if (const auto& arch = f.get_string("general.architecture"); arch != "llama")
      throw error("gguf file '" + f.source() + "': metadata 'general.architecture': expected llama, found " + arch);
    auto& c = m.config_;
    const auto positive = [&](std::string_view key) {
      const auto v = f.get_int(key);
      if (v <= 0 || v > (1 << 24))
        throw error("gguf file '" + f.source() + "': metadata '" + std::string(key) + "': " + std::to_string(v) +
                    " is out of range");
      return static_cast<int>(v);
    };
    c.layers = positive("llama.block_count");
    c.hidden = positive("llama.embedding_length");
    c.heads = positive("llama.attention.head_count");
    c.kv_heads = f.contains("llama.attention.head_count_kv") ? positive("llama.attention.head_count_kv") : c.heads;
    c.ffn = positive("llama.feed_forward_length");
    c.head_dim = f.contains("llama.attention.key_length") ? positive("llama.attention.key_length") : c.hidden / c.heads;
    c.context_length = f.get_int("llama.context_length", 0);
    c.rms_eps = static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon"));
    c.rope_base = f.get_float("llama.rope.freq_base", 10000.0);
    if (static_cast<std::int64_t>(c.heads) * c.head_dim > (1 << 24))  // (the products below are ints)
      throw error("gguf file '" + f.source() + "': metadata 'llama.attention.head_count': " + std::to_string(c.heads) +
                  " heads of " + std::to_string(c.head_dim) + " dimensions are out of range");
    if (c.heads % c.kv_heads != 0)
      throw error("gguf file '" + f.source() + "': metadata 'llama.attention.head_count_kv': " +
                  std::to_string(c.kv_heads) + " does not divide head_count " + std::to_string(c.heads));
    if (!cpu_kernels::attention_supports(c.head_dim))
      throw error("gguf file '" + f.source() + "': metadata 'llama.attention.key_length': heads of " +
                  std::to_string(c.head_dim) + " dimensions are not supported (a multiple of 16)");
    if (c.head_dim % 2 != 0 || f.get_int("llama.rope.dimension_count", c.head_dim) != c.head_dim)
      throw error("gguf file '" + f.source() +
                  "': metadata 'llama.rope.dimension_count': only full, even-sized rotary dimensions are supported");
    if (f.contains("llama.rope.scaling.type") && f.get_string("llama.rope.scaling.type") != "none")
      throw error("gguf file '" + f.source() + "': metadata 'llama.rope.scaling.type': RoPE scaling is not supported");

    const auto& embd = f.tensor("token_embd.weight");
    if (embd.dims.size() != 2 || embd.dims[0] != static_cast<std::uint64_t>(c.hidden))
      throw error("gguf file '" + f.source() + "': tensor 'token_embd.weight' field 'dims': expected [" +
                  std::to_string(c.hidden) + ", vocab]");
    c.vocab = static_cast<std::int64_t>(embd.dims[1]);
    m.embedding_ = load_weight(f, {"token_embd.weight"}, {c.vocab}, c.hidden, storage);
    m.tied_ = f.find("output.weight") == nullptr;
    if (!m.tied_) m.output_ = load_weight(f, {"output.weight"}, {c.vocab}, c.hidden, storage);
    m.output_norm_ = load_vector(f, "output_norm.weight", c.hidden);

    const int q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
    m.layers_.resize(static_cast<std::size_t>(c.layers));
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      auto& w = m.layers_[static_cast<std::size_t>(l)];
      w.attn_norm = load_vector(f, p + "attn_norm.weight", c.hidden);
      w.ffn_norm = load_vector(f, p + "ffn_norm.weight", c.hidden);
      w.qkv = load_weight(f, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                          {q_rows, kv_rows, kv_rows}, c.hidden, storage);
      w.attn_output = load_weight(f, {p + "attn_output.weight"}, {c.hidden}, q_rows, storage);
      w.gate_up = load_weight(f, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {c.ffn, c.ffn}, c.hidden, storage);
      w.down = load_weight(f, {p + "ffn_down.weight"}, {c.hidden}, c.ffn, storage);
    }
    if (f.contains("tokenizer.ggml.tokens")) {
      m.tokens_ = f.get_string_array("tokenizer.ggml.tokens");
      for (std::size_t i = 0; i < m.tokens_.size(); ++i) m.token_index_.emplace(m.tokens_[i], static_cast<token_id>(i));
    }
    m.load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return m;
  }

  /// The hyper-parameters.
  [[nodiscard]] const llama_config& config() const { return config_; }
  /// The file the model came from.
  [[nodiscard]] const std::string& source() const { return source_; }
  /// Wall time of `load` (parsing, dequantisation, copies), in seconds.
  [[nodiscard]] double load_seconds() const { return load_seconds_; }
  /// The storage asked of `load`.
  [[nodiscard]] llama_storage storage() const { return storage_; }
  /// [vocab][hidden] token embeddings.
  [[nodiscard]] const llama_weight& embedding() const { return embedding_; }
  /// [vocab][hidden] output head: output.weight, or the embeddings when the file ties them.
  [[nodiscard]] const llama_weight& output() const { return tied_ ? embedding_ : output_; }
  /// Whether the output head is the embedding matrix (no output.weight in the file).
  [[nodiscard]] bool tied_embeddings() const { return tied_; }
  /// [hidden] final RMSNorm weight.
  [[nodiscard]] const Eigen::VectorXf& output_norm() const { return output_norm_; }
  /// The decoder layers.
  [[nodiscard]] const std::vector<llama_layer_weights>& layers() const { return layers_; }
  /// Token strings (`tokenizer.ggml.tokens`; empty when the file has none).
  [[nodiscard]] const std::vector<std::string>& tokens() const { return tokens_; }
  /// The id of the token spelled exactly `text`, or -1.
  [[nodiscard]] token_id find_token(std::string_view text) const {
    const auto it = token_index_.find(std::string(text));
    return it == token_index_.end() ? -1 : it->second;
  }
  /// Number of weights (the tied head counted once).
  [[nodiscard]] std::int64_t parameter_count() const {
    const auto n = [](const llama_weight& w) { return w.rows() * w.cols(); };
    std::int64_t total = n(embedding_) + n(output_) + output_norm_.size();
    for (const auto& w : layers_)
      total += w.attn_norm.size() + w.ffn_norm.size() + n(w.qkv) + n(w.attn_output) + n(w.gate_up) + n(w.down);
    return total;
  }
  /// Bytes of all weights as stored (the tied head counted once): what one decode step reads.
  [[nodiscard]] std::size_t weight_bytes() const {
    std::size_t total = embedding_.bytes() + output_.bytes() + static_cast<std::size_t>(output_norm_.size()) * 4;
    for (const auto& w : layers_)
      total += static_cast<std::size_t>(w.attn_norm.size() + w.ffn_norm.size()) * 4 + w.qkv.bytes() +
               w.attn_output.bytes() + w.gate_up.bytes() + w.down.bytes();
    return total;
  }
  /// Whether any matrix is held in quantised blocks.
  [[nodiscard]] bool any_quantized() const {
    if (embedding_.quantized() || output_.quantized()) return true;
    return std::ranges::any_of(layers_, [](const llama_layer_weights& w) {
      return w.qkv.quantized() || w.attn_output.quantized() || w.gate_up.quantized() || w.down.quantized();
    });
  }

 private:
  /// The tensors `names` ([rows[i]][cols] each) stacked by rows. Quantised storage keeps them in blocks
  /// when all share a type that `quantized_matrix` holds at this width; otherwise fp32.
  static llama_weight load_weight(const io::gguf_file& f, const std::vector<std::string>& names,
                                  const std::vector<std::int64_t>& rows, std::int64_t cols, llama_storage storage) {
    std::vector<const io::gguf_tensor_info*> tensors;
    std::int64_t total = 0;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& t = f.tensor(names[i]);
      if (t.dims.size() != 2 || t.dims[0] != static_cast<std::uint64_t>(cols) ||
          t.dims[1] != static_cast<std::uint64_t>(rows[i]))
        throw error("gguf file '" + f.source() + "': tensor '" + names[i] + "' field 'dims': expected [" +
                    std::to_string(cols) + ", " + std::to_string(rows[i]) + "]");
      tensors.push_back(&t);
      total += rows[i];
    }
    llama_weight w;
    const auto type = tensors.front()->type;
    if (storage != llama_storage::fp32 && cpu_detail::quantized_matrix::supports(type, cols) &&
        std::ranges::all_of(tensors, [&](const io::gguf_tensor_info* t) { return t->type == type; })) {
      w.blocks = cpu_detail::quantized_matrix(type, cols);
      for (std::size_t i = 0; i < tensors.size(); ++i) w.blocks.append(f.bytes(*tensors[i]), rows[i]);
      if (storage == llama_storage::quantized_int8) w.regroup_for_int8();
      return w;
    }
    llama_matrix values(total, cols);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto part = f.dequantize(*tensors[i]);
      values.middleRows(at, rows[i]) = Eigen::Map<const llama_matrix>(part.data(), rows[i], cols);
      at += rows[i];
    }
    w.panels = cpu_kernels::f32_panels(values.data(), cols, total, cols);
    return w;
  }
  static Eigen::VectorXf load_vector(const io::gguf_file& f, const std::string& name, std::int64_t n) {
    const auto& t = f.tensor(name);
    if (t.dims.size() != 1 || t.dims[0] != static_cast<std::uint64_t>(n))
      throw error("gguf file '" + f.source() + "': tensor '" + name + "' field 'dims': expected [" +
                  std::to_string(n) + "]");
    const auto values = f.dequantize(t);
    return Eigen::Map<const Eigen::VectorXf>(values.data(), n);
  }

  std::string source_;
  llama_config config_;
  llama_storage storage_ = llama_storage::fp32;
  double load_seconds_ = 0;
  bool tied_ = true;
  llama_weight embedding_, output_;
  Eigen::VectorXf output_norm_;
  std::vector<llama_layer_weights> layers_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, token_id> token_index_;
};

namespace llama_detail {

/// A fixed team of `threads - 1` helper threads. `run(f, chunks)` calls f(chunk) once for every chunk
/// in [0, chunks) and returns when all are done; the caller and the helpers claim chunks from a shared
/// counter, so a helper that the OS has not scheduled in time costs nothing (the caller does its share).
/// Helpers spin for up to half a millisecond between runs (the calls of one forward pass come
/// microseconds apart), then sleep on a condition variable. `run` does not allocate.
class worker_team {
 public:
  /// Throws std::system_error when a helper cannot be started, after stopping those that were.
  explicit worker_team(int threads) : threads_(std::max(1, threads)) {
    try {
      for (int p = 1; p < threads_; ++p) helpers_.emplace_back([this] { helper(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  worker_team(const worker_team&) = delete;
  worker_team& operator=(const worker_team&) = delete;
  ~worker_team() { stop(); }

  /// Threads taking part, the caller included.
  [[nodiscard]] int threads() const { return threads_; }

  template <class F>
  void run(F& f, int chunks) {
    if (threads_ == 1 || chunks == 1 || chunks > max_chunks) {
      for (int c = 0; c < chunks; ++c) f(c);
      return;
    }
    // The previous run has completed every chunk, so no helper holds a claim: its context can go.
    context_ = &f;
    call_ = [](void* ctx, int chunk) { (*static_cast<F*>(ctx))(chunk); };
    done_.store(0, std::memory_order_relaxed);
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(mutex_);
      generation = (ticket_.load(std::memory_order_relaxed) >> 32) + 1;
      ticket_.store(generation << 32 | static_cast<std::uint64_t>(chunks) << 16, std::memory_order_release);
    }
    wake_.notify_all();
    work(generation);
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks; spins = std::min(spins + 1, 256)) relax(spins);
  }

 private:
  /// Stops and joins the helpers.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : helpers_) t.join();
  }

  static void relax(int spins) {
    if (spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
  /// Claims and runs chunks of run `generation` until none is left (or a newer run has started).
  /// The ticket holds generation, chunk count and next chunk in one word, so a claim can never
  /// pair one run's generation with another run's chunk count.
  void work(std::uint64_t generation) {
    for (;;) {
      auto t = ticket_.load(std::memory_order_acquire);
      if ((t >> 32) != generation) return;
      const auto chunk = static_cast<int>(t & 0xffffu), count = static_cast<int>((t >> 16) & 0xffffu);
      if (chunk >= count) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      call_(context_, chunk);
      done_.fetch_add(1, std::memory_order_release);
    }
  }
  void helper() {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g = 0;
      const auto since = std::chrono::steady_clock::now();
      for (int spins = 0; (g = ticket_.load(std::memory_order_acquire) >> 32) == seen && !stop_.load(); ++spins) {
        if (spins % 64 != 0 || std::chrono::steady_clock::now() - since < spin_time) {
          relax(0);
        } else {
          std::unique_lock lock(mutex_);
          wake_.wait(lock, [&] { return (ticket_.load() >> 32) != seen || stop_.load(); });
        }
      }
      if (stop_.load()) return;
      seen = g;
      work(g);
    }
  }

  /// How long a helper spins before it sleeps: a time, not a count, as a pause instruction costs 10 to 140
  /// cycles depending on the CPU.
  static constexpr std::chrono::microseconds spin_time{500};
  static constexpr int max_chunks = 0xffff;
  int threads_;
  std::vector<std::thread> helpers_;
  void* context_ = nullptr;
  void (*call_)(void*, int) = nullptr;
  std::atomic<std::uint64_t> ticket_{0};  ///< generation << 32 | chunk count << 16 | next unclaimed chunk
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

/// y[rows] (+)= x[rows] · w^T on `team`, the output columns cut into chunks of at least 64 (4 per
/// thread; multiples of 32, as the panel and int8 kernels take their groups of 16 in pairs), with the kernels of w's storage: fp32 panels, regrouped blocks (the activations quantised to
/// int8 once here, into `int8`), or rows (quantised blocks or fp32) for the row kernels. Each row's result
/// is the same whatever rows share the pass.
template <class X, class Y>
void linear(worker_team& team, cpu_isa isa, cpu_kernels::int8_activations& int8, const X& x, const llama_weight& w, Y& y,
            bool accumulate) {
  const auto out = w.rows(), rows = x.rows();
  const auto chunks = std::max<Eigen::Index>(1, std::min<Eigen::Index>(4 * team.threads(), out / 64));
  const auto size = ((out + chunks - 1) / chunks + 31) / 32 * 32;
  const bool int8_path = w.grouped.rows() > 0, panels = w.panels.rows() > 0;
  if (int8_path)
    cpu_kernels::quantize_activations(isa, w.grouped.type(), x.data(), x.outerStride(), static_cast<int>(rows), w.cols(), int8);
  auto part = [&](int p) {
    const auto first = std::min<Eigen::Index>(out, p * size), count = std::min<Eigen::Index>(out - first, size);
    if (count <= 0) return;
    if (int8_path)
      cpu_kernels::multiply_rows_int8(isa, w.grouped, int8, first, count, y.data(), y.outerStride(), accumulate);
    else if (panels)
      cpu_kernels::multiply_rows(isa, w.panels, x.data(), x.outerStride(), static_cast<int>(rows), first, count, y.data(),
                                 y.outerStride(), accumulate);
    else
      cpu_kernels::multiply_rows(isa, w.view(), x.data(), x.outerStride(), static_cast<int>(rows), first, count, y.data(),
                                 y.outerStride(), accumulate);
  };
  team.run(part, static_cast<int>(chunks));
}

}  // namespace llama_detail

/// Options of a `llama_verifier`; checked at construction.
struct llama_verifier_options {
  std::int64_t max_positions = 2048;      ///< most KV-cache rows: prompt plus every committed token
  std::int64_t initial_positions = 1024;  ///< KV-cache rows allocated at construction (at most max_positions);
                                          ///< the cache doubles as requests need, up to max_positions
  int max_block = 64;                 ///< most tokens of one `score` call; `prefill` runs in chunks this long
  std::vector<int> feature_layers;    ///< decoder layers j whose outputs `context_features` returns, in this order
  int threads = 2;                    ///< threads of the matrix products and attention (the caller counts as one)
  int layers = 0;                     ///< run only the first `layers` decoder layers, then the final norm and the
                                      ///< head (a self-speculative early-exit draft model); 0 = every layer
  cpu_isa isa = cpu_isa::best;        ///< variant of the weight-product kernels (`best`: the highest this CPU runs)
};

/// `verifier_with_context_features` over a `llama_model` (which must outlive it): fp32 activations,
/// a KV cache of up to `max_positions` positions per layer, KV head by KV head (K in blocks of 64
/// positions, each stored dimension by dimension; V [positions][head_dim]), so that each head's keys and
/// values are one stream, a batched forward of b rows (products over the rows, causal attention within
/// the block and over the cache). Work is split over `threads` threads of its own (output columns of each
/// product, the queries of each KV head in the attention; no OpenMP). The kernels
/// (kernels/) are those of the CPU's instruction set: fp32 panels (panel_products.hpp), quantised blocks
/// with fp32 activations (weight_products.hpp) or int8 activations (int8_products.hpp), attention
/// (attention.hpp). A scored
/// block's rows are the same bits as each row scored alone after the ones before it (every kernel's FMA
/// chains are fixed whatever rows share a pass), so that speculative decoding with any block size
/// reproduces plain decoding exactly. Every buffer but the cache is allocated at construction; the cache
/// starts at `initial_positions` positions and doubles when a prefill or score needs more (`reserve`
/// allocates ahead, so that decoding allocates nothing). Not thread-safe: one request at a time per
/// verifier.
class llama_verifier {
 public:
  /// Throws `error` naming the option for an out-of-range option.
  explicit llama_verifier(const llama_model& model, llama_verifier_options options = {})
      : model_(&model), options_(std::move(options)) {
    const auto& c = model.config();
    const auto bad = [&](const std::string& field, const std::string& what) {
      return error("llama_verifier for '" + model.source() + "': option '" + field + "': " + what);
    };
    if (options_.max_positions < 1 || options_.max_positions > (1 << 22))
      throw bad("max_positions", "must be in [1, 2^22]");
    if (options_.initial_positions < 0) throw bad("initial_positions", "must be >= 0");
    if (options_.max_block < 1 || options_.max_block > 4096) throw bad("max_block", "must be in [1, 4096]");
    if (options_.threads < 1 || options_.threads > 256) throw bad("threads", "must be in [1, 256]");
    if (options_.layers < 0 || options_.layers > c.layers)
      throw bad("layers", std::to_string(options_.layers) + " is outside [0, " + std::to_string(c.layers) +
                          "] (0 = every layer)");
    if (options_.layers == 0) options_.layers = c.layers;
    try {
      options_.isa = resolve_cpu_isa(options_.isa);
    } catch (const error& e) {
      throw bad("isa", e.what());
    }
    for (int j : options_.feature_layers)
      if (j < 0 || j >= options_.layers)
        throw bad("feature_layers", "layer " + std::to_string(j) + " is outside [0, " + std::to_string(options_.layers) + ")");
    team_ = std::make_unique<llama_detail::worker_team>(options_.threads);
    norm_copy_.resize(c.hidden);
    gate_copy_.resize(c.ffn);
    const auto rows = options_.max_block;
    reserve_rows(rows_, rows);
    gathered_.resize(static_cast<Eigen::Index>(c.heads) * rows, c.head_dim);
    visible_.resize(static_cast<std::size_t>(c.heads / c.kv_heads * rows));
    keys_.assign(static_cast<std::size_t>(options_.layers), llama_matrix(0, cpu_kernels::attention_block));
    values_.assign(static_cast<std::size_t>(options_.layers), llama_matrix(0, c.head_dim));
    feature_slot_.assign(static_cast<std::size_t>(c.layers), -1);
    for (std::size_t i = 0; i < options_.feature_layers.size(); ++i)
      if (feature_slot_[static_cast<std::size_t>(options_.feature_layers[i])] < 0)
        feature_slot_[static_cast<std::size_t>(options_.feature_layers[i])] = static_cast<int>(i);
    grow(std::clamp<std::int64_t>(options_.initial_positions, 1, options_.max_positions));
  }

  /// The vocabulary size.
  [[nodiscard]] std::int64_t vocab_size() const { return model_->config().vocab; }
  /// The model.
  [[nodiscard]] const llama_model& model() const { return *model_; }
  /// The options in force.
  [[nodiscard]] const llama_verifier_options& options() const { return options_; }
  /// Committed positions (rows of the KV cache in use).
  [[nodiscard]] std::int64_t committed() const { return committed_; }
  /// KV-cache rows allocated now (at most options().max_positions).
  [[nodiscard]] std::int64_t capacity() const { return capacity_; }

  /// Allocates the cache for `positions` rows now (a no-op when it has them), so that requests up to
  /// that length allocate nothing. invalid_argument beyond max_positions; out_of_memory when an
  /// allocation fails (the cache and everything in it stay as they were).
  [[nodiscard]] status reserve(std::int64_t positions) {
    if (positions > options_.max_positions) return status::invalid_argument;
    if (positions <= capacity_) return status::success;
    try {
      grow(positions);
    } catch (const std::bad_alloc&) {
      return status::out_of_memory;
    }
    return status::success;
  }
  /// Most tokens one `score` call accepts.
  [[nodiscard]] int max_block() const { return options_.max_block; }

  /// Starts a request: clears the cache, runs the prompt (in chunks of max_block rows) and commits all
  /// of it. `logits` becomes the last prompt row, [1][vocab], host memory, valid until the next call.
  /// empty_prompt, invalid_token, invalid_argument when the prompt exceeds max_positions, out_of_memory
  /// when the cache cannot grow to it.
  [[nodiscard]] status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    if (prompt.empty()) return status::empty_prompt;
    if (static_cast<std::int64_t>(prompt.size()) > options_.max_positions) return status::invalid_argument;
    if (!valid(prompt)) return status::invalid_token;
    if (const auto s = make_room(static_cast<std::int64_t>(prompt.size())); s != status::success) return s;
    committed_ = 0;
    scored_ = 0;
    const auto n = static_cast<std::int64_t>(prompt.size());
    for (std::int64_t at = 0; at < n; at += options_.max_block) {
      const auto rows = static_cast<int>(std::min<std::int64_t>(options_.max_block, n - at));
      const segment part{this, prompt.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(rows)), at, at, 0};
      forward({&part, 1}, rows_, at + rows == n ? output_rows::last : output_rows::none);
    }
    committed_ = n;
    feature_rows_ = n;
    logits = {rows_.logits.data(), 1, vocab_size()};
    return status::success;
  }

  /// Runs the b = block.size() tokens at positions committed() .. committed() + b - 1 in one batched
  /// pass; `logits` becomes [b][vocab] (row j predicts the token after block[j]), host memory, valid
  /// until the next call. Nothing is committed until `commit`; a second `score` replaces the first.
  /// invalid_block_size (b < 1 or b > max_block), invalid_token, invalid_argument (beyond max_positions),
  /// out_of_memory (the cache cannot grow; what is committed stays).
  [[nodiscard]] status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    if (const auto s = check_block(block); s != status::success) return s;
    const segment part{this, block, committed_, 0, 0};
    forward({&part, 1}, rows_, output_rows::all);
    return scored(block.size(), logits);
  }

  /// `batch_scoring_verifier`: scores blocks[i] on *verifiers[i] (distinct verifiers of one model, with
  /// the same layers and kernels) in one pass, so that each weight row read serves every request's rows;
  /// logits[i] becomes verifiers[i]'s [blocks[i].size()][vocab] rows, as its own `score` would give them
  /// (the same bits: a row's results do not depend on the rows beside it), valid until its next call. The
  /// first verifier's threads run the pass, and it keeps the batch's row buffers (allocated by the first
  /// batch of that many rows). A block that `score` would refuse fails the whole call with that status,
  /// before anything runs; invalid_argument for mismatched spans, a repeated verifier or another model.
  [[nodiscard]] static status score_batch(std::span<llama_verifier* const> verifiers,
                                          std::span<const std::span<const token_id>> blocks,
                                          std::span<matrix_view<const float>> logits) {
    if (blocks.size() != verifiers.size() || logits.size() != verifiers.size()) return status::invalid_argument;
    if (verifiers.empty()) return status::success;
    llama_verifier& lead = *verifiers.front();
    std::vector<segment> parts;
    parts.reserve(verifiers.size());
    int rows = 0;
    for (std::size_t i = 0; i < verifiers.size(); ++i) {
      llama_verifier* v = verifiers[i];
      if (v == nullptr || v->model_ != lead.model_ || v->options_.layers != lead.options_.layers ||
          v->options_.isa != lead.options_.isa || std::count(verifiers.begin(), verifiers.begin() + static_cast<std::ptrdiff_t>(i), v) > 0)
        return status::invalid_argument;
      if (const auto s = v->check_block(blocks[i]); s != status::success) return s;
      parts.push_back({v, blocks[i], v->committed_, 0, rows});
      rows += static_cast<int>(blocks[i].size());
    }
    try {
      if (!lead.batch_rows_) lead.batch_rows_ = std::make_unique<llama_rows>();
      if (lead.batch_rows_->capacity < rows) lead.reserve_rows(*lead.batch_rows_, rows);
    } catch (const std::bad_alloc&) {
      return status::out_of_memory;
    }
    lead.forward(parts, *lead.batch_rows_, output_rows::all);
    for (std::size_t i = 0; i < verifiers.size(); ++i) {
      llama_verifier& v = *verifiers[i];
      v.rows_.logits.topRows(static_cast<Eigen::Index>(blocks[i].size())) =
          lead.batch_rows_->logits.middleRows(parts[i].row0, static_cast<Eigen::Index>(blocks[i].size()));
      (void)v.scored(blocks[i].size(), logits[i]);
    }
    return status::success;
  }

  /// Keeps the first n positions of the last `score` (0 <= n <= b): the cache is cropped to
  /// committed() + n. invalid_argument outside that range.
  [[nodiscard]] status commit(int n) {
    if (n < 0 || n > scored_) return status::invalid_argument;
    committed_ += n;
    scored_ = 0;
    return status::success;
  }

  /// Crops the committed cache to its first `positions` rows (0 <= positions <= committed()), as a
  /// drafter does when the target rejects tokens it has already committed; drops an uncommitted score.
  /// invalid_argument outside that range.
  [[nodiscard]] status truncate(std::int64_t positions) {
    if (positions < 0 || positions > committed_) return status::invalid_argument;
    committed_ = positions;
    scored_ = 0;
    return status::success;
  }

  /// [positions][feature_layers.size() hidden] of the last prefill (every prompt position) or score
  /// (every block position): for each listed layer j, in order, the residual stream after decoder
  /// layer j (HF's hidden_states[j + 1], before any final norm). Host memory, valid until the next call.
  [[nodiscard]] matrix_view<const float> context_features() const {
    return {features_.data(), feature_rows_, features_.cols()};
  }

 private:
  enum class output_rows { none, last, all };

  /// The activations of one pass, [rows][...] for up to `capacity` rows.
  struct llama_rows {
    llama_matrix x, h, qkv, attn, gate_up, act, logits;
    int capacity = 0;
    void resize(const llama_config& c, int rows) {
      const int q_cols = c.heads * c.head_dim, kv_cols = c.kv_heads * c.head_dim;
      x.resize(rows, c.hidden);
      h.resize(rows, c.hidden);
      qkv.resize(rows, q_cols + 2 * kv_cols);
      attn.resize(rows, q_cols);
      gate_up.resize(rows, 2 * c.ffn);
      act.resize(rows, c.ffn);
      logits.resize(rows, c.vocab);
      capacity = rows;
    }
  };

  /// One request's rows of a pass: its tokens at positions start.., its features written from row
  /// `feature_row` of its features, its rows from row `row0` of the pass's buffers.
  struct segment {
    llama_verifier* verifier;
    std::span<const token_id> tokens;
    std::int64_t start, feature_row;
    int row0;
  };

  /// Sizes `buf` for passes of `rows` rows, and the int8 activations of this verifier's products with it.
  void reserve_rows(llama_rows& buf, int rows) {
    const auto& c = model_->config();
    buf.resize(c, rows);
    if (model_->storage() == llama_storage::quantized_int8) int8_.reserve(rows, std::max({c.hidden, c.heads * c.head_dim, c.ffn}));
  }

  /// What `score` refuses, and room in the cache for the block.
  [[nodiscard]] status check_block(std::span<const token_id> block) {
    const auto b = static_cast<std::int64_t>(block.size());
    if (b < 1 || b > options_.max_block) return status::invalid_block_size;
    if (committed_ + b > options_.max_positions) return status::invalid_argument;
    if (!valid(block)) return status::invalid_token;
    return make_room(committed_ + b);
  }

  /// Books a scored block of `size` tokens, its logits in the first rows of rows_.
  status scored(std::size_t size, matrix_view<const float>& logits) {
    const auto b = static_cast<std::int64_t>(size);
    scored_ = b;
    feature_rows_ = b;
    logits = {rows_.logits.data(), b, vocab_size()};
    return status::success;
  }
  /// Most gathered queries of one attention task: a few of the kernels' tiles, so that a block's queries
  /// make several tasks for the threads.
  static constexpr int queries_per_task = 12;

  /// Grows the cache to at least `positions` rows (<= max_positions), doubling its capacity.
  [[nodiscard]] status make_room(std::int64_t positions) {
    if (positions <= capacity_) return status::success;
    return reserve(std::min(options_.max_positions, std::max(positions, 2 * capacity_)));
  }

  /// Reallocates the cache, the attention scores, the feature rows and the rotary tables for
  /// `positions` rows, keeping the committed rows, an uncommitted score's rows (a commit may follow) and
  /// the feature rows; every buffer is built before any is replaced, so a failed allocation changes nothing.
  void grow(std::int64_t positions) {
    const auto& c = model_->config();
    const int half = c.head_dim / 2;
    // Keys in whole blocks, and score rows as long as the attention kernels' passes reach (a multiple of
    // 64 floats): score rows then start equally aligned at any capacity, so that the softmax's vectorised
    // reductions associate alike and the logits do not depend on the capacity.
    const auto columns = cpu_kernels::attention_columns(positions);
    const std::int64_t kept = committed_ + scored_;
    const auto head_keys = key_rows_per_head(positions), kept_keys = key_rows_per_head(kept);
    const auto old_head_keys = key_rows_per_head(capacity_);
    std::vector<llama_matrix> keys(keys_.size()), values(values_.size());
    for (std::size_t l = 0; l < keys_.size(); ++l) {
      keys[l].setZero(c.kv_heads * head_keys, cpu_kernels::attention_block);
      values[l].resize(c.kv_heads * positions, c.head_dim);
      for (int g = 0; g < c.kv_heads; ++g) {
        keys[l].middleRows(g * head_keys, kept_keys) = keys_[l].middleRows(g * old_head_keys, kept_keys);
        values[l].middleRows(g * positions, kept) = values_[l].middleRows(g * capacity_, kept);
      }
    }
    llama_matrix scores(static_cast<Eigen::Index>(c.heads) * options_.max_block, columns);
    llama_matrix features(std::max<std::int64_t>(positions, options_.max_block),
                          static_cast<Eigen::Index>(options_.feature_layers.size()) * c.hidden);
    if (feature_rows_ > 0) features.topRows(feature_rows_) = features_.topRows(feature_rows_);
    llama_matrix cos(positions, half), sin(positions, half);
    for (std::int64_t pos = 0; pos < positions; ++pos)
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos) * std::pow(c.rope_base, -2.0 * i / c.head_dim);
        cos(pos, i) = static_cast<float>(std::cos(angle));
        sin(pos, i) = static_cast<float>(std::sin(angle));
      }
    keys_.swap(keys);
    values_.swap(values);
    scores_.swap(scores);
    features_.swap(features);
    rope_cos_.swap(cos);
    rope_sin_.swap(sin);
    capacity_ = positions;
  }

  /// Rows of one KV head's keys in a cache of `positions` positions (head_dim rows per block of 64).
  [[nodiscard]] Eigen::Index key_rows_per_head(std::int64_t positions) const {
    return cpu_kernels::attention_columns(positions) / cpu_kernels::attention_block * model_->config().head_dim;
  }

  [[nodiscard]] bool valid(std::span<const token_id> tokens) const {
    return std::ranges::all_of(tokens, [&](token_id t) { return t >= 0 && t < vocab_size(); });
  }

  /// y (+)= x · w^T with the kernels of w's storage (llama_detail::linear).
  template <class X, class Y>
  void linear(const X& x, const llama_weight& w, Y& y, bool accumulate) {
    llama_detail::linear(*team_, options_.isa, int8_, x, w, y, accumulate);
  }

  /// out rows 0..rows-1 = x's, RMS-normalised and scaled by `weight`. The sum of squares runs on an
  /// aligned copy of the row: on the row in place, Eigen's vectorised sum starts with a scalar head as
  /// long as the row's address is misaligned, so rows of a width that is no multiple of the vector
  /// width would associate differently, and a block's rows would differ from the same rows alone.
  template <class M>
  void rms_norm(const M& x, const Eigen::VectorXf& weight, int rows, llama_matrix& out) {
    const auto eps = model_->config().rms_eps;
    for (int i = 0; i < rows; ++i) {
      norm_copy_ = x.row(i);
      const float scale = 1.0f / std::sqrt(norm_copy_.squaredNorm() / static_cast<float>(x.cols()) + eps);
      out.row(i) = (x.row(i).array() * scale * weight.transpose().array()).matrix();
    }
  }

  /// act row i = SiLU(gate) * up for gate_up row i = [gate up], rows 0..rows-1; the exp runs on an
  /// aligned copy of the gate, for the reason rms_norm gives (Eigen's scalar head uses std::exp, its
  /// vector body another exp).
  void silu_gate(llama_rows& buf, int rows) {
    const int ffn = model_->config().ffn;
    for (int i = 0; i < rows; ++i) {
      gate_copy_ = buf.gate_up.row(i).head(ffn);
      gate_copy_ = gate_copy_.array() / (1.0f + (-gate_copy_.array()).exp());
      buf.act.row(i) = (gate_copy_.array() * buf.gate_up.row(i).tail(ffn).array()).matrix();
    }
  }

  /// Rotates adjacent pairs (2i, 2i+1) of each head of `row` ([heads head_dim]) by position `pos`.
  void rope(float* row, int heads, std::int64_t pos) const {
    const int d = model_->config().head_dim, half = d / 2;
    const float* cs = &rope_cos_(pos, 0);
    const float* sn = &rope_sin_(pos, 0);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        float* p = row + h * d + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * cs[i] - b * sn[i];
        p[1] = a * sn[i] + b * cs[i];
      }
  }

  /// Causal attention of `rows` query rows at positions start.. over cache positions [0, start + rows). The
  /// queries of the heads that share a KV head are gathered (head by head, each head's rows in order), so
  /// that every key and value vector loaded serves all of them, and cut into tasks of at most
  /// `queries_per_task`; the attention kernels around the softmax of each query, whose results are the same
  /// whatever queries share the pass.
  /// The queries are rows row0.. of `buf.qkv`, the outputs go to the same rows of `buf.attn`, on `team`.
  void attention(int layer, int rows, std::int64_t start, llama_rows& buf, int row0, llama_detail::worker_team& team) {
    const auto& c = model_->config();
    const int d = c.head_dim, group = c.heads / c.kv_heads;
    const int queries = group * rows, per_task = std::min(queries, queries_per_task);
    const int tasks_per_kv_head = (queries + per_task - 1) / per_task;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const auto head_keys = key_rows_per_head(capacity_);
    const auto& keys = keys_[static_cast<std::size_t>(layer)];
    const auto& values = values_[static_cast<std::size_t>(layer)];
    for (int j = 0; j < queries; ++j) visible_[static_cast<std::size_t>(j)] = start + j % rows + 1;
    auto part = [&](int task) {
      const int g = task / tasks_per_kv_head, j0 = task % tasks_per_kv_head * per_task, n = std::min(per_task, queries - j0);
      const auto first = static_cast<Eigen::Index>(g) * group * options_.max_block + j0;  // rows of gathered_ and scores_
      const auto column = [&](int j) { return (g * group + (j0 + j) / rows) * d; };       // query j's head in buf.qkv, buf.attn
      for (int j = 0; j < n; ++j) gathered_.row(first + j) = buf.qkv.row(row0 + (j0 + j) % rows).segment(column(j), d);
      auto s = scores_.middleRows(first, n);
      cpu_kernels::attention_scores(options_.isa, {gathered_.row(first).data(), gathered_.outerStride(), n, d,
                                                   keys.data() + g * head_keys * keys.cols(),
                                                   d * keys.cols(), start + rows, scale, s.data(), s.outerStride()});
      for (int j = 0; j < n; ++j) {
        auto row = s.row(j).head(visible_[static_cast<std::size_t>(j0 + j)]);
        const float top = row.maxCoeff();
        row = (row.array() - top).exp().matrix();
        row /= row.sum();
      }
      // the outputs over the queries, which the scores have consumed
      cpu_kernels::attention_output(options_.isa, {s.data(), s.outerStride(), visible_.data() + j0, n, d,
                                                   values.data() + g * capacity_ * d, d, gathered_.row(first).data(),
                                                   gathered_.outerStride()});
      for (int j = 0; j < n; ++j) buf.attn.row(row0 + (j0 + j) % rows).segment(column(j), d) = gathered_.row(first + j);
    };
    team.run(part, c.kv_heads * tasks_per_kv_head);
  }

  /// One pass over the segments' tokens (each at its own positions, over its own verifier's cache) in the
  /// rows of `buf`, on this verifier's threads: the products over all rows at once, the attention segment
  /// by segment. K/V rows written to each cache; features to each verifier's rows from its feature_row;
  /// logits of the last row (to row 0; one segment) or of every row. A row's results do not depend on the
  /// rows beside it (the kernels'), so a scored block's logits are the same bits as its rows scored one at
  /// a time, alone or beside other requests' blocks, and speculative decoding reproduces plain decoding.
  void forward(std::span<const segment> parts, llama_rows& buf, output_rows out) {
    const auto& c = model_->config();
    int rows = 0;
    for (const segment& p : parts) rows += static_cast<int>(p.tokens.size());
    const int d = c.head_dim, q_cols = c.heads * d, kv_cols = c.kv_heads * d;
    for (const segment& p : parts)
      for (std::size_t i = 0; i < p.tokens.size(); ++i) model_->embedding().row(p.tokens[i], buf.x.row(p.row0 + static_cast<Eigen::Index>(i)).data());
    auto x = buf.x.topRows(rows);
    auto h = buf.h.topRows(rows);
    for (int l = 0; l < options_.layers; ++l) {
      const auto& w = model_->layers()[static_cast<std::size_t>(l)];
      rms_norm(buf.x, w.attn_norm, rows, buf.h);
      auto qkv = buf.qkv.topRows(rows);
      linear(h, w.qkv, qkv, false);
      for (const segment& p : parts) {
        llama_verifier& v = *p.verifier;
        auto& keys = v.keys_[static_cast<std::size_t>(l)];
        auto& values = v.values_[static_cast<std::size_t>(l)];
        const auto head_keys = v.key_rows_per_head(v.capacity_);
        const int n = static_cast<int>(p.tokens.size());
        for (int i = 0; i < n; ++i) {
          float* row = buf.qkv.row(p.row0 + i).data();
          v.rope(row, c.heads, p.start + i);
          v.rope(row + q_cols, c.kv_heads, p.start + i);
          const auto pos = p.start + i, key_row = pos / cpu_kernels::attention_block * d;
          for (int g = 0; g < c.kv_heads; ++g) {
            keys.col(pos % cpu_kernels::attention_block).segment(g * head_keys + key_row, d) =
                buf.qkv.row(p.row0 + i).segment(q_cols + g * d, d).transpose();
            values.row(g * v.capacity_ + pos) = buf.qkv.row(p.row0 + i).segment(q_cols + kv_cols + g * d, d);
          }
        }
        v.attention(l, n, p.start, buf, p.row0, *team_);
      }
      auto a = buf.attn.topRows(rows);
      linear(a, w.attn_output, x, true);
      rms_norm(buf.x, w.ffn_norm, rows, buf.h);
      auto gu = buf.gate_up.topRows(rows);
      linear(h, w.gate_up, gu, false);
      silu_gate(buf, rows);
      auto act = buf.act.topRows(rows);
      linear(act, w.down, x, true);
      for (const segment& p : parts) {
        llama_verifier& v = *p.verifier;
        if (v.feature_slot_[static_cast<std::size_t>(l)] < 0) continue;
        const auto n = static_cast<Eigen::Index>(p.tokens.size());
        for (std::size_t f = 0; f < v.options_.feature_layers.size(); ++f)
          if (v.options_.feature_layers[f] == l)
            v.features_.block(p.feature_row, static_cast<Eigen::Index>(f) * c.hidden, n, c.hidden) = buf.x.middleRows(p.row0, n);
      }
    }
    if (out == output_rows::none) return;
    const int first = out == output_rows::last ? rows - 1 : 0, n = rows - first;
    rms_norm(buf.x.middleRows(first, n), model_->output_norm(), n, buf.h);
    auto hn = buf.h.topRows(n);
    auto logits = buf.logits.topRows(n);
    linear(hn, model_->output(), logits, false);
  }

  const llama_model* model_;
  llama_verifier_options options_;
  std::unique_ptr<llama_detail::worker_team> team_;
  llama_rows rows_;                        ///< the rows of this verifier's own passes (max_block)
  std::unique_ptr<llama_rows> batch_rows_;  ///< the rows of the batches it leads (score_batch)
  llama_matrix scores_, features_;
  std::vector<llama_matrix> keys_, values_;
  llama_matrix rope_cos_, rope_sin_;
  std::vector<int> feature_slot_;
  llama_matrix gathered_;              ///< [kv_heads][heads / kv_heads max_block][head_dim]: one KV head's queries, then their outputs
  std::vector<std::int64_t> visible_;  ///< positions each of one KV head's gathered queries sees
  cpu_kernels::int8_activations int8_;  ///< the input rows of the current product (quantized_int8 storage)
  Eigen::RowVectorXf norm_copy_, gate_copy_;  ///< aligned copies of one row (rms_norm, silu_gate), sized at construction
  std::int64_t committed_ = 0, scored_ = 0, feature_rows_ = 0, capacity_ = 0;
};

static_assert(verifier_with_context_features<llama_verifier> && batch_scoring_verifier<llama_verifier>);

}  // namespace blockpilot
