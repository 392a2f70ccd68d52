// Status codes for hot paths and the exception type for configuration-time errors.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace blockpilot {

/// Result of every operation on a hot path (decode step, acceptance, feature pass, kernels).
enum class status {
  success = 0,
  invalid_block_size,     ///< b < 1 or b > the policy's / drafter's maximum
  empty_prompt,           ///< a request needs at least one prompt token
  vocab_mismatch,         ///< drafter and verifier disagree on the vocabulary size
  non_finite_logits,      ///< NaN or +inf in a logits row that was read, or a row without a finite value
  invalid_temperature,    ///< a temperature that is negative or not finite (or 0, for a softmax inside features)
  invalid_token,          ///< a token id outside [0, vocab_size)
  invalid_argument,       ///< any other precondition on an argument
  workspace_too_small,    ///< the caller-owned workspace is smaller than the size query says
  model_error,            ///< the drafter or verifier reported a failure of its own
  cuda_error,             ///< a CUDA runtime call failed (the error is cleared)
  no_device,              ///< no CUDA device is present
  out_of_memory,          ///< an allocation the call needed failed; the callee's state is as before the call
  cancelled,              ///< the request's cancellation was requested (generation_config::cancel)
};

/// A sentence describing a status, for messages and logs.
[[nodiscard]] constexpr std::string_view to_string(status s) {
  switch (s) {
    case status::success: return "success";
    case status::invalid_block_size: return "invalid block size: it must be at least 1 and at most the policy's max_block_size() and the drafter's max_draft_rows() + 1";
    case status::empty_prompt: return "empty prompt: a request needs at least one prompt token";
    case status::vocab_mismatch: return "vocabulary mismatch: the drafter and the verifier report different vocab_size()";
    case status::non_finite_logits: return "non-finite logits: a logits row holds NaN or +inf, or no finite value at all";
    case status::invalid_temperature: return "invalid temperature: it must be finite and >= 0 (> 0 for the softmax inside features)";
    case status::invalid_token: return "invalid token: a token id is outside [0, vocab_size)";
    case status::invalid_argument: return "invalid argument";
    case status::workspace_too_small: return "workspace too small: allocate at least the size the size query returns";
    case status::model_error: return "the drafter or verifier reported an error";
    case status::cuda_error: return "a CUDA runtime call failed";
    case status::no_device: return "no CUDA device found";
    case status::out_of_memory: return "out of memory: an allocation the call needed failed; nothing was changed";
    case status::cancelled: return "cancelled: the request was stopped on request; the tokens committed before are kept";
  }
  return "unknown status";
}

inline std::ostream& operator<<(std::ostream& os, status s) { return os << to_string(s); }

/// Thrown only at configuration time (bad options, malformed weight or data files); the message
/// names the file and the field.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace blockpilot
