// The DFlash block-diffusion drafter on the CPU: `dflash_model` loads a checkpoint in the reference
// layout (config.json + model.safetensors of PyPI dflash 0.1.0's `DFlashDraftModel`), and
// `dflash_drafter` runs its forward (the target's kernels for the weights, in fp32 panels or as Q8_0
// blocks; Eigen for attention) with the target's embedding table and output head, or with the rows of
// that head for a smaller draft vocabulary.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/drafting.hpp"
#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot_workbench/io/safetensors.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// The reference's default target layers (`build_target_layer_ids`) for a target of N decoder layers
/// and a drafter of L layers: {N / 2} for L = 1, else round(1 + i (N - 4) / (L - 1)) for i < L, rounding
/// halves to even as Python's `round` does. A layer id j means the output of target decoder layer j
/// (HF's hidden_states[j + 1]), which is what `llama_verifier_options::feature_layers` lists: the ids
/// go there unchanged.
[[nodiscard]] inline std::vector<int> dflash_target_layer_ids(int target_layers, int draft_layers) {
  if (draft_layers == 1) return {target_layers / 2};
  std::vector<int> ids;
  const int span = target_layers - 4;
  for (int i = 0; i < draft_layers; ++i) {
    const double v = 1.0 + static_cast<double>(i * span) / (draft_layers - 1);
    const double low = std::floor(v), rest = v - low;
    const bool up = rest > 0.5 || (rest == 0.5 && std::fmod(low, 2.0) != 0.0);
    ids.push_back(static_cast<int>(low) + (up ? 1 : 0));
  }
  return ids;
}

/// A DFlash drafter's hyper-parameters, read from config.json. Entries the reference reads with
/// `_draft_value` are looked up in the `dflash_config` object first, then at the top level.
struct dflash_config {
  int hidden = 0;                     ///< hidden_size (the target's hidden size)
  int layers = 0;                     ///< num_hidden_layers
  int heads = 0;                      ///< num_attention_heads
  int kv_heads = 0;                   ///< num_key_value_heads
  int head_dim = 0;                   ///< head_dim (hidden_size / num_attention_heads when absent)
  int ffn = 0;                        ///< intermediate_size
  float rms_eps = 1e-6f;              ///< rms_norm_eps
  double rope_theta = 10000.0;        ///< rope_parameters.rope_theta (or rope_theta); default RoPE only
  bool attention_bias = false;        ///< attention_bias
  bool causal = false;                ///< is_causal; absent (the reference default): the block is bidirectional
  int block_size = 16;                ///< block_size: the training block size B
  token_id mask_token = 0;            ///< mask_token_id
  std::int64_t vocab = 0;             ///< vocab_size: the target's vocabulary (0 when absent)
  int target_layers = 0;              ///< num_target_layers (0 when absent)
  std::vector<int> target_layer_ids;  ///< target_layer_ids, else dflash_target_layer_ids(num_target_layers, layers)
  float input_embedding_scale = 1.0f;   ///< input_embedding_scale: factor on the block's embeddings
  float output_multiplier = 1.0f;       ///< output_multiplier: factor on the logits
  float final_logit_softcapping = 0.0f; ///< final_logit_softcapping: c tanh(logits / c) when > 0
};

/// One drafter layer's weights, each matrix [out][in] in the storage the model was loaded with (fp32:
/// panels of 16 rows, the target's fp32 kernels; quantised: Q8_0 blocks).
struct dflash_layer_weights {
  Eigen::VectorXf input_norm;           ///< [hidden] input_layernorm
  Eigen::VectorXf post_attention_norm;  ///< [hidden] post_attention_layernorm
  Eigen::VectorXf q_norm, k_norm;       ///< [head_dim] self_attn.q_norm / k_norm (per head)
  llama_weight q;                       ///< [heads head_dim][hidden] self_attn.q_proj
  llama_weight kv;                      ///< [2 kv_heads head_dim][hidden] self_attn.k_proj, then v_proj
  llama_weight o;                       ///< [hidden][heads head_dim] self_attn.o_proj
  Eigen::RowVectorXf q_bias, kv_bias, o_bias;  ///< the projections' biases; empty without attention_bias
  llama_weight gate_up;                 ///< [2 ffn][hidden] mlp.gate_proj, then mlp.up_proj
  llama_weight down;                    ///< [hidden][ffn] mlp.down_proj
};

/// The weights of a DFlash drafter (no embedding table, no output head: those are the target's).
/// Loaded once, read-only, shared by any number of `dflash_drafter`s.
class dflash_model {
 public:
  /// Loads `folder`/config.json and `folder`/model.safetensors (F32, BF16 or F16 tensors), the matrices
  /// held in `storage` (fp32, or quantised to Q8_0: llama_weight::from_matrix), norms and biases in fp32.
  /// Throws `error` naming the file and the field or tensor: a missing or out-of-range field, a
  /// configuration this forward does not implement (sliding-window layers, RoPE scaling, an activation
  /// other than SiLU, DFlash2's convolutions), a missing tensor, a shape that disagrees with
  /// config.json, or a tensor the forward would not use.
  static dflash_model load(const std::filesystem::path& folder, llama_storage storage = llama_storage::fp32) {
    dflash_model m;
    m.storage_ = storage;
    m.source_ = folder.string();
    m.config_ = read_config(folder / "config.json");
    const auto& c = m.config_;
    const auto file = io::safetensors_file::read(folder / "model.safetensors");
    std::set<std::string> unused;
    for (const auto& t : file.tensors()) unused.insert(t.name);
    const auto take = [&](const std::string& name, std::vector<std::int64_t> shape) {
      const auto* t = file.find(name);
      const std::string where = "dflash checkpoint '" + file.source() + "': tensor '" + name + "'";
      if (t == nullptr) throw error(where + ": missing");
      if (t->shape != shape)
        throw error(where + " field 'shape': " + shape_text(t->shape) + ", but config.json needs " + shape_text(shape));
      unused.erase(name);
      std::vector<float> v(static_cast<std::size_t>(t->element_count()));
      const auto bytes = file.bytes(*t);
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::uint16_t half;
        switch (t->type) {
          case io::dtype::f32: std::memcpy(&v[i], bytes.data() + 4 * i, 4); break;
          case io::dtype::bf16:
            std::memcpy(&half, bytes.data() + 2 * i, 2);
            v[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(half));
            break;
          case io::dtype::f16:
            std::memcpy(&half, bytes.data() + 2 * i, 2);
            v[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(half));
            break;
          default:
            throw error(where + " field 'dtype': " + std::string(io::to_string(t->type)) + " (F32, BF16 or F16 expected)");
        }
      }
      return v;
    };
    const auto stored = [&](const llama_matrix& x) { return llama_weight::from_matrix(x, storage); };
    const auto matrix = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
      const auto v = take(name, {rows, cols});
      return llama_matrix(Eigen::Map<const llama_matrix>(v.data(), rows, cols));
    };
    const auto vector = [&](const std::string& name, std::int64_t n) {
      const auto v = take(name, {n});
      return Eigen::VectorXf(Eigen::Map<const Eigen::VectorXf>(v.data(), n));
    };
    const auto row_vector = [&](const std::string& name, std::int64_t n) {
      return Eigen::RowVectorXf(vector(name, n).transpose());
    };
    const std::int64_t h = c.hidden, q_cols = std::int64_t{c.heads} * c.head_dim,
                       kv_cols = std::int64_t{c.kv_heads} * c.head_dim;
    m.fc_ = stored(matrix("fc.weight", h, static_cast<std::int64_t>(c.target_layer_ids.size()) * h));
    m.hidden_norm_ = vector("hidden_norm.weight", h);
    m.norm_ = vector("norm.weight", h);
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      dflash_layer_weights w;
      w.input_norm = vector(p + "input_layernorm.weight", h);
      w.post_attention_norm = vector(p + "post_attention_layernorm.weight", h);
      w.q_norm = vector(p + "self_attn.q_norm.weight", c.head_dim);
      w.k_norm = vector(p + "self_attn.k_norm.weight", c.head_dim);
      w.q = stored(matrix(p + "self_attn.q_proj.weight", q_cols, h));
      llama_matrix kv(2 * kv_cols, h);
      kv << matrix(p + "self_attn.k_proj.weight", kv_cols, h), matrix(p + "self_attn.v_proj.weight", kv_cols, h);
      w.kv = stored(kv);
      w.o = stored(matrix(p + "self_attn.o_proj.weight", h, q_cols));
      if (c.attention_bias) {
        w.q_bias = row_vector(p + "self_attn.q_proj.bias", q_cols);
        w.kv_bias.resize(2 * kv_cols);
        w.kv_bias << row_vector(p + "self_attn.k_proj.bias", kv_cols), row_vector(p + "self_attn.v_proj.bias", kv_cols);
        w.o_bias = row_vector(p + "self_attn.o_proj.bias", h);
      }
      llama_matrix gate_up(2 * c.ffn, h);
      gate_up << matrix(p + "mlp.gate_proj.weight", c.ffn, h), matrix(p + "mlp.up_proj.weight", c.ffn, h);
      w.gate_up = stored(gate_up);
      w.down = stored(matrix(p + "mlp.down_proj.weight", h, c.ffn));
      m.layers_.push_back(std::move(w));
    }
    if (!unused.empty())
      throw error("dflash checkpoint '" + file.source() + "': tensor '" + *unused.begin() +
                  "': not part of a DFlashDraftModel with this config.json (DFlash2 checkpoints are not supported)");
    return m;
  }

  /// The checkpoint folder.
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const dflash_config& config() const { return config_; }
  /// How the matrices are held.
  [[nodiscard]] llama_storage storage() const { return storage_; }
  /// [hidden][target_layer_ids.size() hidden] fc: the concatenated target hidden states to the context.
  [[nodiscard]] const llama_weight& fc() const { return fc_; }
  /// [hidden] hidden_norm: RMSNorm of the context after fc.
  [[nodiscard]] const Eigen::VectorXf& hidden_norm() const { return hidden_norm_; }
  /// [hidden] norm: the final RMSNorm before the target's output head.
  [[nodiscard]] const Eigen::VectorXf& norm() const { return norm_; }
  [[nodiscard]] const std::vector<dflash_layer_weights>& layers() const { return layers_; }
  /// Bytes of the matrices as held (what a draft step reads, beside the target's head).
  [[nodiscard]] std::size_t weight_bytes() const {
    std::size_t n = fc_.bytes();
    for (const auto& w : layers_) n += w.q.bytes() + w.kv.bytes() + w.o.bytes() + w.gate_up.bytes() + w.down.bytes();
    return n;
  }

 private:
  static std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  static dflash_config read_config(const std::filesystem::path& path) {
    using json = nlohmann::json;
    const std::string source = path.string();
    const auto fail = [&](const std::string& field, const std::string& what) {
      return error("dflash checkpoint '" + source + "': field '" + field + "': " + what);
    };
    std::ifstream in(path);
    if (!in) throw error("dflash checkpoint '" + source + "': cannot open the file");
    const json root = json::parse(in, nullptr, false);
    if (root.is_discarded() || !root.is_object()) throw error("dflash checkpoint '" + source + "': not a JSON object");
    const json* draft = root.contains("dflash_config") ? &root["dflash_config"] : nullptr;
    if (draft && !draft->is_object()) throw fail("dflash_config", "not a JSON object");
    // `_draft_value`: the dflash_config entry, else the top-level one; null counts as absent.
    const auto find = [&](const std::string& name, bool draft_value) -> const json* {
      if (draft_value && draft && draft->contains(name) && !(*draft)[name].is_null()) return &(*draft)[name];
      return root.contains(name) && !root[name].is_null() ? &root[name] : nullptr;
    };
    const auto integer = [&](const std::string& name, long long low, long long high, bool draft_value = false,
                             const long long* fallback = nullptr) -> long long {
      const json* v = find(name, draft_value);
      if (!v) {
        if (fallback) return *fallback;
        throw fail(name, "missing");
      }
      if (!v->is_number_integer()) throw fail(name, "not an integer");
      const auto x = v->get<long long>();
      if (x < low || x > high)
        throw fail(name, std::to_string(x) + " is outside [" + std::to_string(low) + ", " + std::to_string(high) + "]");
      return x;
    };
    const auto real = [&](const std::string& name, double low, double high, double fallback, bool draft_value,
                          const json* value = nullptr) -> double {
      const json* v = value ? value : find(name, draft_value);
      if (!v) return fallback;
      if (!v->is_number()) throw fail(name, "not a number");
      const auto x = v->get<double>();
      if (!(x >= low && x <= high)) throw fail(name, std::to_string(x) + " is outside [" + std::to_string(low) + ", " +
                                                         std::to_string(high) + "]");
      return x;
    };
    const auto boolean = [&](const std::string& name, bool fallback) {
      const json* v = find(name, false);
      if (!v) return fallback;
      if (!v->is_boolean()) throw fail(name, "not true or false");
      return v->get<bool>();
    };

    dflash_config c;
    if (const json* a = find("architectures", false))
      if (a->is_array() && std::ranges::any_of(*a, [](const json& x) { return x == "DFlash2DraftModel"; }))
        throw fail("architectures", "DFlash2DraftModel (convolutions and a candidate selector) is not supported");
    c.hidden = static_cast<int>(integer("hidden_size", 1, 1 << 16));
    c.layers = static_cast<int>(integer("num_hidden_layers", 1, 1024));
    c.heads = static_cast<int>(integer("num_attention_heads", 1, 4096));
    c.kv_heads = static_cast<int>(integer("num_key_value_heads", 1, c.heads));
    if (c.heads % c.kv_heads != 0)
      throw fail("num_key_value_heads", std::to_string(c.kv_heads) + " does not divide num_attention_heads " +
                                            std::to_string(c.heads));
    const long long default_head_dim = c.hidden / c.heads;
    c.head_dim = static_cast<int>(integer("head_dim", 2, 1 << 16, false, &default_head_dim));
    if (c.head_dim % 2 != 0) throw fail("head_dim", std::to_string(c.head_dim) + " is odd (RoPE rotates halves)");
    c.ffn = static_cast<int>(integer("intermediate_size", 1, 1 << 20));
    if (!find("rms_norm_eps", false)) throw fail("rms_norm_eps", "missing");
    c.rms_eps = static_cast<float>(real("rms_norm_eps", 0.0, 1.0, 0.0, false));
    if (const json* act = find("hidden_act", false); act && *act != "silu")
      throw fail("hidden_act", act->dump() + " (only silu, the SwiGLU MLP, is implemented)");
    c.attention_bias = boolean("attention_bias", false);
    c.causal = boolean("is_causal", false);
    if (const json* types = find("layer_types", false)) {
      if (!types->is_array() || types->size() != static_cast<std::size_t>(c.layers))
        throw fail("layer_types", "not an array of num_hidden_layers entries");
      for (std::size_t l = 0; l < types->size(); ++l)
        if ((*types)[l] != "full_attention")
          throw fail("layer_types", "layer " + std::to_string(l) + " is " + (*types)[l].dump() +
                                        " (only full_attention is implemented)");
    }
    // RoPE: transformers 5 writes rope_parameters {rope_type, rope_theta}; older files rope_theta and
    // rope_scaling at the top level.
    std::string rope_field = "rope_parameters";
    const json* rope = find(rope_field, false);
    if (!rope) rope = find(rope_field = "rope_scaling", false);
    const json* theta = find("rope_theta", false);
    if (rope) {
      if (!rope->is_object()) throw fail(rope_field, "not a JSON object");
      const auto type = rope->contains("rope_type") ? (*rope)["rope_type"] : rope->value("type", json("default"));
      if (type != "default") throw fail(rope_field + ".rope_type", type.dump() + " (only the default RoPE is implemented)");
      if (rope->contains("rope_theta")) theta = &(*rope)["rope_theta"];
    }
    if (!theta) throw fail("rope_theta", "missing (neither rope_parameters.rope_theta nor rope_theta)");
    c.rope_theta = real("rope_theta", 1.0, 1e12, 0.0, false, theta);

    const long long default_block = 16;
    c.block_size = static_cast<int>(integer("block_size", 1, 4096, true, &default_block));
    c.mask_token = static_cast<token_id>(integer("mask_token_id", 0, (1ll << 31) - 1, true));
    const long long unknown_vocab = 0;
    c.vocab = integer("vocab_size", 1, (1ll << 31) - 1, false, &unknown_vocab);
    const long long no_target = 0;
    c.target_layers = static_cast<int>(integer("num_target_layers", 1, 4096, false, &no_target));
    if (const json* ids = find("target_layer_ids", true)) {
      if (!ids->is_array() || ids->empty()) throw fail("target_layer_ids", "not a non-empty array");
      for (const auto& id : *ids) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > 4095)
          throw fail("target_layer_ids", "an entry is not an integer in [0, 4095]");
        c.target_layer_ids.push_back(id.get<int>());
      }
    } else {
      if (c.target_layers == 0) throw fail("num_target_layers", "missing (needed when target_layer_ids is absent)");
      c.target_layer_ids = dflash_target_layer_ids(c.target_layers, c.layers);
    }
    if (c.target_layers > 0)
      for (int id : c.target_layer_ids)
        if (id >= c.target_layers)
          throw fail("target_layer_ids", "layer " + std::to_string(id) + " is not below num_target_layers " +
                                             std::to_string(c.target_layers));
    c.input_embedding_scale = static_cast<float>(real("input_embedding_scale", -1e30, 1e30, 1.0, true));
    c.output_multiplier = static_cast<float>(real("output_multiplier", -1e30, 1e30, 1.0, true));
    c.final_logit_softcapping = static_cast<float>(real("final_logit_softcapping", -1e30, 1e30, 0.0, true));
    return c;
  }

  std::string source_;
  dflash_config config_;
  llama_storage storage_ = llama_storage::fp32;
  llama_weight fc_;
  Eigen::VectorXf hidden_norm_, norm_;
  std::vector<dflash_layer_weights> layers_;
};

/// Options of a `dflash_drafter`; checked at construction.
struct dflash_options {
  std::int64_t max_positions = 4096;  ///< context rows the draft cache holds: prompt plus every committed token
  int max_draft_rows = 63;            ///< largest b - 1 it drafts
  int threads = 2;                    ///< threads of each weight product (the caller counts as one)
  cpu_isa isa = cpu_isa::best;        ///< variant of the kernels (a loaded target's storages)
  /// The tokens it may draft (distinct, in the vocabulary; empty: all): its output head is those rows of
  /// the target's, and every other token gets the logit −infinity (a draft vocabulary as in FR-Spec: the
  /// head, a fifth of the target's weights, shrinks to the tokens that are drafted in practice).
  std::vector<token_id> draft_vocab;
};

/// The first n tokens of a draft vocabulary file (`{"tokens": [...]}`, most written first:
/// examples/dflash_train/make_draft_vocab.py), for dflash_options::draft_vocab. Throws `error` naming the
/// file when it cannot be read, is not such a file, or ranks fewer than n tokens.
inline std::vector<token_id> read_draft_vocab(const std::filesystem::path& path, std::int64_t n) {
  std::ifstream in(path);
  if (!in) throw error("draft vocabulary " + path.string() + ": cannot be read");
  std::vector<token_id> tokens;
  try {
    tokens = nlohmann::json::parse(in).at("tokens").get<std::vector<token_id>>();
  } catch (const nlohmann::json::exception& e) {
    throw error("draft vocabulary " + path.string() + ": not a ranking of tokens (" + e.what() + ")");
  }
  if (n < 0 || tokens.size() < static_cast<std::size_t>(n))
    throw error("draft vocabulary " + path.string() + ": " + std::to_string(n) + " tokens asked for, but it ranks " +
                std::to_string(tokens.size()) + " tokens");
  tokens.resize(static_cast<std::size_t>(n));
  return tokens;
}

/// A model of `drafter_with_probabilities` and `drafter_with_context`: the reference forward of
/// `DFlashDraftModel` (as `dflash_generate` calls it) in fp32.
///
/// Context: `append_context(rows)` takes [n][target_layer_ids.size() hidden] target hidden states (the
/// verifier's `context_features()` with `feature_layers` = config().target_layer_ids) of the next n
/// committed positions, computes ctx = hidden_norm(fc(rows)) and stores every layer's k_norm'd, RoPE'd
/// k_proj(ctx) and v_proj(ctx) in the draft cache (ctx skips input_layernorm, as in the reference).
/// Draft: the block [anchor, mask x (b-1)] at positions P .. P+b-1 (P = context rows = the anchor's
/// position) is embedded with the target's embedding table (times input_embedding_scale); each layer
/// attends, without a mask (or causally if config().causal), from every block row to the P cached
/// context keys and the b block keys; the final norm and the target's output head give logits for the
/// b-1 mask rows (row j predicts the token at position P+j), times output_multiplier and soft-capped.
/// The block's keys are never committed: the cache holds exactly the context, which is the reference's
/// crop to the committed length after each call.
///
/// Draft j (1-based) is the argmax (first maximum) of its row at T below `detail::greedy_temperature`
/// (q_j one-hot), else drawn from q_j = softmax(logits_j / T) with `rng.bits64(j, draft_sample)`.
/// Every buffer is allocated at construction (Eigen's products, and the int8 rows of weights held for
/// int8 activations, may still take space of their own). The output head, by far the largest product
/// (b-1 rows against [vocab][hidden], or the draft vocabulary's rows), runs with the target's kernels
/// for the head's storage, the layers with those of the model's storage, each product split over
/// `threads` threads of the drafter's own. Not thread-safe: one request at a time.
class dflash_drafter {
 public:
  /// With the target's [vocab][hidden] embedding table and output head (either storage; both must
  /// outlive the drafter, as must `draft`). Throws `error` naming the checkpoint and the field or
  /// option on a shape mismatch or an out-of-range option.
  dflash_drafter(const dflash_model& draft, const llama_weight& embedding, const llama_weight& head,
                 dflash_options options = {})
      : draft_(&draft), embedding_(&embedding), head_(&head), options_(options),
        team_(std::make_unique<llama_detail::worker_team>(std::clamp(options.threads, 1, 256))) {
    const auto& c = draft.config();
    const auto bad = [&](const std::string& what) { return error("dflash_drafter for '" + draft.source() + "': " + what); };
    if (options.max_positions < 1 || options.max_positions > (1 << 22)) throw bad("option 'max_positions' must be in [1, 2^22]");
    if (options.max_draft_rows < 0 || options.max_draft_rows > 4095) throw bad("option 'max_draft_rows' must be in [0, 4095]");
    if (options.threads < 1 || options.threads > 256) throw bad("option 'threads' must be in [1, 256]");
    try {
      options_.isa = resolve_cpu_isa(options.isa);  // a variant this CPU cannot run is an error, not a crash
    } catch (const error& e) {
      throw bad(std::string("option 'isa': ") + e.what());
    }
    if (embedding.cols() != c.hidden || head.cols() != c.hidden || head.rows() != embedding.rows() || embedding.rows() < 1)
      throw bad("field 'hidden_size': " + std::to_string(c.hidden) + ", but the target's embedding table is [" +
                std::to_string(embedding.rows()) + "][" + std::to_string(embedding.cols()) + "] and its output head [" +
                std::to_string(head.rows()) + "][" + std::to_string(head.cols()) + "]");
    if (head.values.rows() > 0 && !cpu_kernels::supports(io::ggml_type::f32, head.cols()))
      throw bad("the output head's fp32 rows have " + std::to_string(head.cols()) +
                " columns; its row kernels need a multiple of 32 (llama_weight::from_matrix takes any)");
    if (c.vocab != 0 && c.vocab != embedding.rows())
      throw bad("field 'vocab_size': " + std::to_string(c.vocab) + ", but the target's vocabulary has " +
                std::to_string(embedding.rows()) + " tokens (a drafter for another target)");
    if (c.mask_token >= embedding.rows())
      throw bad("field 'mask_token_id': " + std::to_string(c.mask_token) + " is not below the target's vocabulary size " +
                std::to_string(embedding.rows()));
    if (!options.draft_vocab.empty()) {
      std::vector<std::int64_t> rows(options.draft_vocab.begin(), options.draft_vocab.end());
      std::vector<bool> seen(static_cast<std::size_t>(embedding.rows()));
      for (const auto t : rows) {
        if (t < 0 || t >= embedding.rows())
          throw bad("option 'draft_vocab': token " + std::to_string(t) + " is outside the target's vocabulary of " +
                    std::to_string(embedding.rows()));
        if (seen[static_cast<std::size_t>(t)]) throw bad("option 'draft_vocab': token " + std::to_string(t) + " appears twice");
        seen[static_cast<std::size_t>(t)] = true;
      }
      draft_head_ = head.select_rows(rows);
      draft_logits_.resize(std::max(options.max_draft_rows, 1), static_cast<Eigen::Index>(rows.size()));
    }
    const int q_cols = c.heads * c.head_dim, kv_cols = c.kv_heads * c.head_dim;
    const Eigen::Index rows = std::max(options.max_draft_rows + 1, chunk_rows);
    const Eigen::Index positions = options.max_positions + options.max_draft_rows + 1;
    x_.resize(rows, c.hidden);
    h_.resize(rows, c.hidden);
    q_.resize(rows, q_cols);
    kv_.resize(rows, 2 * kv_cols);
    attn_.resize(rows, q_cols);
    gate_up_.resize(rows, 2 * c.ffn);
    act_.resize(rows, c.ffn);
    scores_.resize(options.max_draft_rows + 1, positions);
    logits_.resize(std::max(options.max_draft_rows, 1), embedding.rows());
    keys_.assign(static_cast<std::size_t>(c.layers), llama_matrix(positions, kv_cols));
    values_ = keys_;
    const int half = c.head_dim / 2;
    rope_cos_.resize(positions, half);
    rope_sin_.resize(positions, half);
    for (Eigen::Index pos = 0; pos < positions; ++pos)
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos) * std::pow(c.rope_theta, -2.0 * i / c.head_dim);
        rope_cos_(pos, i) = static_cast<float>(std::cos(angle));
        rope_sin_(pos, i) = static_cast<float>(std::sin(angle));
      }
    scratch_.weights.resize(static_cast<std::size_t>(embedding.rows()));
  }

  /// With a Llama target's embedding table and output head; also checks the target layer ids against
  /// the target's depth.
  dflash_drafter(const dflash_model& draft, const llama_model& target, dflash_options options = {})
      : dflash_drafter(draft, target.embedding(), target.output(), checked(draft, target, options)) {}

  [[nodiscard]] std::int64_t vocab_size() const { return embedding_->rows(); }
  [[nodiscard]] int max_draft_rows() const { return options_.max_draft_rows; }
  [[nodiscard]] const dflash_model& model() const { return *draft_; }
  [[nodiscard]] const dflash_options& options() const { return options_; }
  /// Context rows (committed positions) held by the draft cache.
  [[nodiscard]] std::int64_t context_rows() const { return cached_; }
  /// [b-1][vocab] logits of the last draft (row j-1 for draft j), host memory, valid until the next draft.
  [[nodiscard]] matrix_view<const float> logits() const { return {logits_.data(), drafted_rows_, logits_.cols()}; }

  /// Starts a request: empties the draft cache (the prompt's context rows come through append_context).
  [[nodiscard]] status begin(std::span<const token_id>) {
    cached_ = 0;
    drafted_rows_ = 0;
    confidence_.clear();
    return status::success;
  }

  /// The anchor and n-1 drafts were accepted. The cache holds only context rows, which arrive through
  /// `append_context`, so nothing is cropped here. invalid_argument for n < 1.
  [[nodiscard]] status commit(int n) { return n >= 1 ? status::success : status::invalid_argument; }

  /// Appends the context of the next rows.rows committed positions ([n][target_layer_ids.size() hidden],
  /// any row stride). invalid_argument for another width or beyond max_positions.
  [[nodiscard]] status append_context(matrix_view<const float> rows) {
    const auto& c = draft_->config();
    if (rows.cols != draft_->fc().cols() || rows.rows < 0 || (rows.rows > 0 && rows.data == nullptr))
      return status::invalid_argument;
    if (cached_ + rows.rows > options_.max_positions) return status::invalid_argument;
    for (std::int64_t at = 0; at < rows.rows; at += chunk_rows) {
      const auto n = static_cast<int>(std::min<std::int64_t>(chunk_rows, rows.rows - at));
      const const_map in(rows.data + at * rows.row_stride, n, rows.cols, Eigen::OuterStride<>(rows.row_stride));
      linear(in, draft_->fc(), Eigen::RowVectorXf(), x_.topRows(n));
      rms_norm(x_.topRows(n), draft_->hidden_norm(), c.rms_eps);
      for (int l = 0; l < c.layers; ++l) project_kv(l, n, cached_);
      cached_ += n;
    }
    return status::success;
  }

  /// Writes out[0..b-2] (b = r.block_size); r.context must end with the anchor and hold exactly one
  /// token more than the context rows appended so far. invalid_block_size for b outside
  /// [1, max_draft_rows + 1] or a short `out`; invalid_argument for a context of another length;
  /// invalid_token for an anchor outside the vocabulary; non_finite_logits for a non-finite row.
  [[nodiscard]] status draft(const draft_request& r, std::span<token_id> out) { return draft_rows(r, out, {}); }
  /// The same drafts with q `[b-1][vocab]` (row-major, caller-owned): each row the distribution its
  /// draft was drawn from. invalid_argument when q has fewer rows or another width.
  [[nodiscard]] status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    if (q.rows < r.block_size - 1 || q.cols != vocab_size()) return status::invalid_argument;
    return draft_rows(r, out, q);
  }
  /// Per position of the last draft: the top probability of the drafter's row (softmax at T = 1), a
  /// property of the row and not of the drawn token; computed on the first call after the draft.
  [[nodiscard]] std::span<const float> draft_confidence() {
    if (confidence_.size() != static_cast<std::size_t>(drafted_rows_)) {
      confidence_.resize(static_cast<std::size_t>(drafted_rows_));
      const auto& rows = options_.draft_vocab.empty() ? logits_ : draft_logits_;  // (−infinity adds nothing)
      for (std::size_t j = 0; j < confidence_.size(); ++j) {
        const auto row = rows.row(static_cast<Eigen::Index>(j));
        confidence_[j] = 1.0f / (row.array() - row.maxCoeff()).exp().sum();
      }
    }
    return confidence_;
  }

 private:
  static constexpr int chunk_rows = 64;   ///< context rows per pass of append_context
  using map = Eigen::Map<llama_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  using const_map = Eigen::Map<const llama_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

  static dflash_options checked(const dflash_model& draft, const llama_model& target, dflash_options options) {
    const auto& c = draft.config();
    for (int id : c.target_layer_ids)
      if (id >= target.config().layers)
        throw error("dflash_drafter for '" + draft.source() + "': field 'target_layer_ids': layer " + std::to_string(id) +
                    " is not below the " + std::to_string(target.config().layers) + " decoder layers of '" +
                    target.source() + "'");
    return options;
  }

  /// h_[0, rows) = RMSNorm(x) w (x: rows of any matrix expression of hidden columns).
  template <class X>
  void rms_norm(const X& x, const Eigen::VectorXf& weight, float eps) {
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const float scale = 1.0f / std::sqrt(x.row(i).squaredNorm() / static_cast<float>(x.cols()) + eps);
      h_.row(i) = (x.row(i).array() * scale * weight.transpose().array()).matrix();
    }
  }

  /// Per-head RMSNorm (q_norm / k_norm) then rotate-half RoPE at `pos`, in place on `heads` heads.
  void norm_rope(float* row, int heads, const Eigen::VectorXf& weight, std::int64_t pos) const {
    const auto& c = draft_->config();
    const int d = c.head_dim, half = d / 2;
    for (int h = 0; h < heads; ++h) {
      Eigen::Map<Eigen::RowVectorXf> v(row + h * d, d);
      const float scale = 1.0f / std::sqrt(v.squaredNorm() / static_cast<float>(d) + c.rms_eps);
      v = (v.array() * scale * weight.transpose().array()).matrix();
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], cs = rope_cos_(pos, i), sn = rope_sin_(pos, i);
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
      }
    }
  }

  /// y (+)= x w^T (+ bias), x and y row-major rows.
  template <class X, class Y>
  void linear(const X& x, const llama_weight& w, const Eigen::RowVectorXf& bias, Y&& y, bool accumulate = false) {
    llama_detail::linear(*team_, options_.isa, int8_, x, w, y, accumulate);
    if (bias.size() > 0) y.rowwise() += bias;
  }

  /// Layer l's keys and values of h_[0, rows) (k_proj, v_proj; k_norm and RoPE on the keys) into the
  /// cache rows start .. start + rows - 1.
  void project_kv(int l, int rows, std::int64_t start) {
    const auto& c = draft_->config();
    const auto& w = draft_->layers()[static_cast<std::size_t>(l)];
    const int kv_cols = c.kv_heads * c.head_dim;
    linear(h_.topRows(rows), w.kv, w.kv_bias, kv_.topRows(rows));
    auto& keys = keys_[static_cast<std::size_t>(l)];
    auto& values = values_[static_cast<std::size_t>(l)];
    for (int i = 0; i < rows; ++i) {
      norm_rope(kv_.row(i).data(), c.kv_heads, w.k_norm, start + i);
      keys.row(start + i) = kv_.row(i).head(kv_cols);
      values.row(start + i) = kv_.row(i).tail(kv_cols);
    }
  }

  /// attn_[0, b) = attention of the b block queries in q_ over cache rows [0, start + b): every row
  /// (or, if causal, rows up to start + i for query i), scaled by head_dim^-1/2, GQA groups.
  void attend(int l, int b, std::int64_t start) {
    const auto& c = draft_->config();
    const int d = c.head_dim, group = c.heads / c.kv_heads, q_cols = c.heads * d, kv_cols = c.kv_heads * d;
    const auto total = start + b;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int h = 0; h < c.heads; ++h) {
      const int g = h / group;
      const const_map q(q_.data() + h * d, b, d, Eigen::OuterStride<>(q_cols));
      const const_map k(keys_[static_cast<std::size_t>(l)].data() + g * d, total, d, Eigen::OuterStride<>(kv_cols));
      const const_map v(values_[static_cast<std::size_t>(l)].data() + g * d, total, d, Eigen::OuterStride<>(kv_cols));
      auto s = scores_.topLeftCorner(b, total);
      s.noalias() = (q * k.transpose()) * scale;
      for (int i = 0; i < b; ++i) {
        const auto visible = c.causal ? start + i + 1 : total;
        auto row = s.row(i);
        const float top = row.head(visible).maxCoeff();
        row.head(visible) = (row.head(visible).array() - top).exp().matrix();
        row.head(visible) /= row.head(visible).sum();
        row.tail(total - visible).setZero();
      }
      map o(attn_.data() + h * d, b, d, Eigen::OuterStride<>(q_cols));
      o.noalias() = s * v;
    }
  }

  /// The forward of the block [anchor, mask x (b-1)] at positions cached_ ..; logits_[0, b-1).
  void forward_block(token_id anchor, int b) {
    const auto& c = draft_->config();
    const std::int64_t start = cached_;
    embedding_->row(anchor, x_.row(0).data());
    if (b > 1) embedding_->row(c.mask_token, x_.row(1).data());
    for (int i = 2; i < b; ++i) x_.row(i) = x_.row(1);
    auto x = x_.topRows(b);
    if (c.input_embedding_scale != 1.0f) x *= c.input_embedding_scale;
    for (int l = 0; l < c.layers; ++l) {
      const auto& w = draft_->layers()[static_cast<std::size_t>(l)];
      rms_norm(x, w.input_norm, c.rms_eps);
      linear(h_.topRows(b), w.q, w.q_bias, q_.topRows(b));
      for (int i = 0; i < b; ++i) norm_rope(q_.row(i).data(), c.heads, w.q_norm, start + i);
      project_kv(l, b, start);  // rows past the context: overwritten by the next call, never committed
      attend(l, b, start);
      linear(attn_.topRows(b), w.o, w.o_bias, x, true);
      rms_norm(x, w.post_attention_norm, c.rms_eps);
      linear(h_.topRows(b), w.gate_up, Eigen::RowVectorXf(), gate_up_.topRows(b));
      for (int i = 0; i < b; ++i) {
        const auto g = gate_up_.row(i).head(c.ffn).array();
        act_.row(i) = (g / (1.0f + (-g).exp()) * gate_up_.row(i).tail(c.ffn).array()).matrix();
      }
      linear(act_.topRows(b), w.down, Eigen::RowVectorXf(), x, true);
    }
    const int n = b - 1;
    rms_norm(x_.middleRows(1, n), draft_->norm(), c.rms_eps);
    head_logits(n);
  }

  /// output_multiplier and the soft cap on the head's products.
  template <class M>
  void finish_logits(M&& logits) const {
    const auto& c = draft_->config();
    if (c.output_multiplier != 1.0f) logits *= c.output_multiplier;
    if (const float cap = c.final_logit_softcapping; cap > 0.0f) logits = ((logits.array() / cap).tanh() * cap).matrix();
  }

  /// logits_[0, n) = h_[0, n) head^T with the target's kernels for the head's storage (fp32 rows or
  /// panels, quantised blocks, or int8 activations against regrouped blocks); with a draft vocabulary,
  /// its rows' products scattered into rows of −infinity.
  void head_logits(int n) {
    auto logits = logits_.topRows(n);
    if (options_.draft_vocab.empty()) {
      llama_detail::linear(*team_, options_.isa, int8_, h_.topRows(n), *head_, logits, false);
      finish_logits(logits);
      return;
    }
    auto drafted = draft_logits_.topRows(n);
    llama_detail::linear(*team_, options_.isa, int8_, h_.topRows(n), draft_head_, drafted, false);
    finish_logits(drafted);
    logits.setConstant(-std::numeric_limits<float>::infinity());
    for (int i = 0; i < n; ++i)
      for (std::size_t v = 0; v < options_.draft_vocab.size(); ++v)
        logits(i, options_.draft_vocab[v]) = drafted(i, static_cast<Eigen::Index>(v));
  }

  status draft_rows(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    const int b = r.block_size;
    if (b < 1 || b - 1 > options_.max_draft_rows || out.size() < static_cast<std::size_t>(b - 1))
      return status::invalid_block_size;
    if (r.context.empty() || static_cast<std::int64_t>(r.context.size()) - 1 != cached_) return status::invalid_argument;
    const token_id anchor = r.context.back();
    if (b > 1 && (anchor < 0 || anchor >= vocab_size())) return status::invalid_token;
    drafted_rows_ = b - 1;
    confidence_.clear();
    if (b == 1) return status::success;
    forward_block(anchor, b);
    for (int j = 1; j < b; ++j) {
      const std::span<const float> row(logits_.row(j - 1).data(), static_cast<std::size_t>(logits_.cols()));
      const auto drafts = std::span<const token_id>(out.data(), static_cast<std::size_t>(j) - 1);
      if (const status s = draft_token(row, r, j, drafts, scratch_, q.empty() ? std::span<float>{} : q.row(j - 1),
                                                   out[static_cast<std::size_t>(j) - 1]);
          s != status::success)
        return s;
    }
    return status::success;
  }

  const dflash_model* draft_;
  const llama_weight* embedding_;
  const llama_weight* head_;
  dflash_options options_;
  std::unique_ptr<llama_detail::worker_team> team_;
  llama_matrix x_, h_, q_, kv_, attn_, gate_up_, act_, scores_, logits_;
  llama_weight draft_head_;    ///< the draft vocabulary's rows of the head (none without one)
  llama_matrix draft_logits_;  ///< [max_draft_rows][draft vocabulary] their logits
  std::vector<llama_matrix> keys_, values_;  ///< per layer [max_positions + max_draft_rows + 1][kv_heads head_dim]
  llama_matrix rope_cos_, rope_sin_;
  draft_scratch scratch_;   ///< one row's sampling buffers
  cpu_kernels::int8_activations int8_;  ///< the rows quantised for weights held for int8 activations
  std::int64_t cached_ = 0;             ///< context rows in the cache
  std::int64_t drafted_rows_ = 0;       ///< b - 1 of the last draft
  std::vector<float> confidence_;       ///< [b-1] top probabilities of the last draft, once asked for
};

static_assert(drafter_with_probabilities<dflash_drafter>);
static_assert(drafter_with_context<dflash_drafter>);

}  // namespace blockpilot
