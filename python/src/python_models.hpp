// A verifier and a drafter written in Python, as the decoder's Verifier and Drafter: each call goes to
// the object's method of the same name. What a callback raised, or why its answer was refused, is kept
// for the caller; the decoder itself sees status::model_error and stops the request, keeping its tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "blockpilot/concepts.hpp"

namespace blockpilot::python {

/// What went wrong in a callback, beyond the status the decoder reports.
struct callback_errors {
  std::string detail;    ///< first failure, in words
  nb::object exception;  ///< the exception a callback raised, if one did

  status refuse(std::string what) {
    if (detail.empty()) detail = std::move(what);
    return status::model_error;
  }
  status raised(const nb::python_error& e, const std::string& method) {
    if (!exception.is_valid()) exception = nb::borrow(e.value());
    const nb::handle value = e.value();
    return refuse(method + "() raised " + nb::type_name(value.type()).c_str() + ": " + nb::str(value).c_str());
  }
};

/// An int attribute of a Python model, with a clear message when it is missing.
inline std::int64_t int_attribute(const nb::handle& model, const char* name, const char* role) {
  if (!nb::hasattr(model, name)) throw nb::type_error((std::string(role) + " has no attribute '" + name + "'").c_str());
  const nb::object value = model.attr(name);
  std::int64_t n = 0;
  if (nb::isinstance<nb::bool_>(value) || !PyIndex_Check(value.ptr()) || !nb::try_cast(value, n))
    throw nb::type_error((std::string(role) + "'s " + name + " must be an int, not " + nb::type_name(value.type()).c_str()).c_str());
  return n;
}

/// model.vocab_size, an int of at least 1.
inline std::int64_t vocab_attribute(const nb::handle& model, const char* role) {
  const std::int64_t n = int_attribute(model, "vocab_size", role);
  if (n < 1) throw nb::value_error((std::string(role) + "'s vocab_size must be at least 1, not " + std::to_string(n)).c_str());
  return n;
}

/// verifier.prefill(prompt) -> [1, vocab] (or [vocab]); verifier.score(block) -> [b, vocab]; verifier.commit(n).
/// Token arguments are int32 NumPy arrays; the rows are read in place (float32, C-contiguous, CPU) and
/// kept alive until the next call.
class python_verifier {
 public:
  python_verifier(nb::object model, callback_errors& errors)
      : model_(std::move(model)), errors_(errors), vocab_(vocab_attribute(model_, "the verifier")) {}

  [[nodiscard]] std::int64_t vocab_size() const { return vocab_; }
  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) { return call("prefill", prompt, 1, logits); }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    return call("score", block, static_cast<std::int64_t>(block.size()), logits);
  }
  status commit(int n) {
    try {
      model_.attr("commit")(n);
      return status::success;
    } catch (const nb::python_error& e) {
      return errors_.raised(e, "verifier.commit");
    }
  }

 private:
  status call(const char* method, std::span<const token_id> tokens, std::int64_t rows, matrix_view<const float>& logits) {
    const std::string name = std::string("verifier.") + method;
    try {
      const nb::object out = model_.attr(method)(to_numpy(tokens));
      if (!nb::try_cast(out, held_))
        return errors_.refuse(name + "() returned " + nb::type_name(out.type()).c_str() +
                              ", not an array of numbers in host memory (float32 is read in place)");
    } catch (const nb::python_error& e) {
      return errors_.raised(e, name);
    }
    const bool vector_row = held_.ndim() == 1 && rows == 1;
    const bool matrix = held_.ndim() == 2 && held_.shape(0) == static_cast<std::size_t>(rows);
    if (!(vector_row || matrix) || held_.shape(held_.ndim() - 1) != static_cast<std::size_t>(vocab_))
      return errors_.refuse(name + "() returned shape " + shape_text(held_) + ", expected (" + std::to_string(rows) +
                            ", " + std::to_string(vocab_) + ")");
    logits = {held_.data(), rows, vocab_};
    return status::success;
  }

  nb::object model_;
  callback_errors& errors_;
  std::int64_t vocab_;
  host_array<float> held_;
};

/// drafter.draft(context, n, temperature, seed, step) -> n int tokens, or (tokens, q) with q float32 [n, vocab]
/// (rejection sampling needs q, and the tokens must be samples of it); optional drafter.begin(prompt),
/// drafter.commit(n) and drafter.max_draft_rows (default 255). `context` is every committed token, the
/// anchor last; (seed, step) name the step's random stream, for drafters that sample.
class python_drafter {
 public:
  python_drafter(nb::object model, callback_errors& errors)
      : model_(std::move(model)),
        errors_(errors),
        vocab_(vocab_attribute(model_, "the drafter")),
        max_rows_(draft_rows(model_)) {
    if (!nb::hasattr(model_, "draft")) throw nb::type_error("the drafter has no method 'draft'");
  }

  [[nodiscard]] std::int64_t vocab_size() const { return vocab_; }
  [[nodiscard]] int max_draft_rows() const { return max_rows_; }
  status begin(std::span<const token_id> prompt) { return optional_call("begin", to_numpy(prompt)); }
  status commit(int n) { return optional_call("commit", n); }
  status draft(const draft_request& r, std::span<token_id> out) { return draft_into(r, out, nullptr); }
  status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> q) { return draft_into(r, out, &q); }

 private:
  status draft_into(const draft_request& r, std::span<token_id> out, const matrix_view<float>* q) {
    const auto n = static_cast<std::size_t>(r.block_size - 1);
    std::optional<int32_values> tokens;
    rows_array probs;
    try {
      const nb::object answer =
          model_.attr("draft")(to_numpy(r.context), n, r.temperature, r.rng.seed, r.rng.offset);
      // (tokens, q), unless the tuple is itself the two tokens of a block of 3
      const bool pair = nb::isinstance<nb::tuple>(answer) && nb::len(answer) == 2 && nb::hasattr(answer[0], "__len__");
      const nb::handle drafted = pair ? answer[0] : answer;
      try {
        tokens.emplace(drafted, "drafter.draft() returned " + std::string(nb::type_name(answer.type()).c_str()) +
                                    " (int tokens, or (tokens, q))");
      } catch (const nb::builtin_exception& e) {
        return errors_.refuse(e.what());
      }
      if (q != nullptr && !(pair && nb::try_cast(answer[1], probs)))
        return errors_.refuse("drafter.draft(): rejection sampling needs the draft distribution: return (tokens, q), q float32 [n, vocab]");
    } catch (const nb::python_error& e) {
      return errors_.raised(e, "drafter.draft");
    }
    const std::span<const token_id> drafted = tokens->span();
    if (drafted.size() != n)
      return errors_.refuse("drafter.draft() returned " + std::to_string(drafted.size()) + " tokens, asked for " + std::to_string(n));
    if (std::any_of(drafted.begin(), drafted.end(), [&](token_id t) { return t < 0 || t >= vocab_; }))
      return errors_.refuse("drafter.draft() returned a token outside [0, vocab_size)");
    std::copy(drafted.begin(), drafted.end(), out.begin());
    if (q == nullptr) return status::success;
    if (probs.shape(0) != n || probs.shape(1) != static_cast<std::size_t>(vocab_))
      return errors_.refuse("drafter.draft() returned q of shape " + shape_text(probs) + ", expected (" + std::to_string(n) +
                            ", " + std::to_string(vocab_) + ")");
    for (std::size_t j = 0; j < n; ++j) {
      const float* row = probs.data() + j * static_cast<std::size_t>(vocab_);
      std::copy(row, row + vocab_, q->row(static_cast<std::int64_t>(j)).begin());
    }
    return status::success;
  }

  /// drafter.max_draft_rows (>= 0; more than a block holds counts as a block's worth), else a block's worth.
  static int draft_rows(const nb::handle& model) {
    if (!nb::hasattr(model, "max_draft_rows")) return block_size_limit - 1;
    const std::int64_t rows = int_attribute(model, "max_draft_rows", "the drafter");
    if (rows < 0) throw nb::value_error(("the drafter's max_draft_rows is " + std::to_string(rows) + ": needs >= 0").c_str());
    return static_cast<int>(std::min<std::int64_t>(rows, block_size_limit - 1));
  }

  template <class Argument>
  status optional_call(const char* method, const Argument& argument) {
    if (!nb::hasattr(model_, method)) return status::success;
    try {
      model_.attr(method)(argument);
      return status::success;
    } catch (const nb::python_error& e) {
      return errors_.raised(e, std::string("drafter.") + method);
    }
  }

  nb::object model_;
  callback_errors& errors_;
  std::int64_t vocab_;
  int max_rows_;
};

static_assert(verifier<python_verifier>);
static_assert(drafter_with_probabilities<python_drafter>);

}  // namespace blockpilot::python
