// The synthetic testbed pair with its logits in device memory, for the decoder on cuda_backend: the
// target's rows are built on the device (bit for bit synthetic_target's); the drafter drafts on the host,
// as synthetic_drafter does, and copies q to the device.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot_workbench/cuda/synthetic.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/device_memory.cuh"
#include "blockpilot_workbench/cuda/kernels/synthetic.cuh"
#include "blockpilot/cuda/workspace.cuh"
#include "blockpilot_workbench/models/synthetic.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// synthetic_target as a `verifier` whose logits `[b][vocab]` live in device memory. A row is the shared
/// Zipf background plus a per-row shift, with the candidates' entries replaced: the host computes each row's
/// shift and candidate values (synthetic_world::sparse_logits, a few numbers), uploads them in one copy, and
/// two launches on `backend.stream` write the rows. The background is uploaded once, at construction.
class cuda_synthetic_target {
  static constexpr int threads = 256;

 public:
  /// `max_rows`: the largest block a score call may ask for (the decoder's largest block size). Device
  /// memory for the background and max_rows rows is allocated here; throws blockpilot::error when that fails.
  cuda_synthetic_target(const synthetic_world& world, cuda_backend backend, int max_rows = 64)
      : world_(world), cursor_(world), backend_(backend), max_rows_(max_rows) {
    if (max_rows < 1) throw error("cuda_synthetic_target: max_rows must be >= 1");
    const std::size_t bytes = carve(nullptr);
    if (memory_.reserve(bytes) != status::success)
      throw error("cuda_synthetic_target: allocating " + std::to_string(bytes) + " bytes of device memory failed");
    carve(memory_.data());
    const std::span<const float> background = world.log_background();
    if (cudaMemcpyAsync(background_, background.data(), background.size_bytes(), cudaMemcpyHostToDevice, backend.stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(backend.stream) != cudaSuccess) {
      (void)cudaGetLastError();
      throw error("cuda_synthetic_target: uploading the background failed");
    }
    host_spec_.resize(spec_bytes_);
  }

  [[nodiscard]] std::int64_t vocab_size() const { return world_.vocab_size(); }
  [[nodiscard]] int max_rows() const { return max_rows_; }
  [[nodiscard]] const synthetic_prompt& prompt_profile() const { return cursor_.prompt_profile(); }

  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    if (prompt.empty()) return status::empty_prompt;
    sparse_row(0, cursor_.begin(prompt));
    return write_rows(1, logits);
  }

  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    const auto b = static_cast<std::int64_t>(block.size());
    if (b < 1 || b > max_rows_) return status::invalid_block_size;
    cursor_.score(block, [&](std::int64_t j, std::uint64_t s) { sparse_row(j, s); });
    return write_rows(b, logits);
  }

  status commit(int n) { return cursor_.commit(n); }

 private:
  [[nodiscard]] int candidates() const { return world_.params().candidates; }

  /// The layout of the one allocation: background, rows, then the per-row spec the host uploads (shifts,
  /// candidate tokens, candidate values). Its size; with a base, also points the buffers into it.
  std::size_t carve(std::byte* base) {
    const auto vocab = static_cast<std::size_t>(vocab_size());
    const auto rows = static_cast<std::size_t>(max_rows_);
    const auto sparse = rows * static_cast<std::size_t>(candidates());
    cuda_detail::workspace_carver c(base);
    float* background = c.take<float>(vocab);
    float* dense = c.take<float>(rows * vocab);
    const std::size_t spec_at = c.size();
    c.take<float>(rows);
    tokens_at_ = c.size() - spec_at;
    c.take<token_id>(sparse);
    values_at_ = c.size() - spec_at;
    c.take<float>(sparse);
    spec_bytes_ = c.size() - spec_at;
    if (base != nullptr) {
      background_ = background;
      rows_ = dense;
      spec_ = base + spec_at;
    }
    return c.size();
  }

  void sparse_row(std::int64_t j, std::uint64_t s) {
    const auto n = static_cast<std::size_t>(candidates());
    const auto at = static_cast<std::size_t>(j) * n;
    std::span<token_id> tokens(reinterpret_cast<token_id*>(host_spec_.data() + tokens_at_) + at, n);
    std::span<float> values(reinterpret_cast<float*>(host_spec_.data() + values_at_) + at, n);
    reinterpret_cast<float*>(host_spec_.data())[j] = world_.sparse_logits(cursor_.prompt_profile(), s, 1.0, tokens, values);
  }

  /// Uploads the spec and expands rows [0, b).
  status write_rows(std::int64_t b, matrix_view<const float>& logits) {
    if (const status s = cuda_detail::check(
            cudaMemcpyAsync(spec_, host_spec_.data(), spec_bytes_, cudaMemcpyHostToDevice, backend_.stream));
        s != status::success)
      return s;
    const std::int64_t vocab = vocab_size();
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((vocab + threads - 1) / threads, 1024));
    cuda_detail::synthetic_background_kernel<threads><<<dim3(blocks, static_cast<unsigned>(b)), threads, 0, backend_.stream>>>(
        background_, reinterpret_cast<const float*>(spec_), rows_, vocab);
    cuda_detail::synthetic_candidates_kernel<32><<<static_cast<unsigned>(b), 32, 0, backend_.stream>>>(
        reinterpret_cast<const token_id*>(spec_ + tokens_at_), reinterpret_cast<const float*>(spec_ + values_at_),
        candidates(), rows_, vocab);
    if (const status s = cuda_detail::check(cudaGetLastError()); s != status::success) return s;
    logits = {rows_, b, vocab};
    return status::success;
  }

  const synthetic_world& world_;
  synthetic_cursor cursor_;
  cuda_backend backend_;
  int max_rows_;
  cuda_detail::device_allocation memory_;
  float* background_ = nullptr;
  float* rows_ = nullptr;
  std::byte* spec_ = nullptr;
  std::size_t tokens_at_ = 0, values_at_ = 0, spec_bytes_ = 0;
  std::vector<std::byte> host_spec_;
};

/// synthetic_drafter as a `drafter_with_probabilities` whose q `[b-1][vocab]` is device memory: it drafts
/// on the host (the same tokens and q as synthetic_drafter) and copies q to the device on `backend.stream`.
class cuda_synthetic_drafter {
 public:
  cuda_synthetic_drafter(const synthetic_world& world, cuda_backend backend, int max_draft_rows = 63)
      : host_(world, max_draft_rows), backend_(backend) {}

  [[nodiscard]] std::int64_t vocab_size() const { return host_.vocab_size(); }
  [[nodiscard]] int max_draft_rows() const { return host_.max_draft_rows(); }

  status begin(std::span<const token_id> prompt) { return host_.begin(prompt); }
  status commit(int n) { return host_.commit(n); }

  status draft(const draft_request& r, std::span<token_id> out) { return host_.draft(r, out); }
  /// `q`: device memory.
  status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    const std::int64_t rows = r.block_size - 1;
    const std::int64_t vocab = vocab_size();
    if (q.rows < rows || q.cols != vocab) return status::invalid_argument;
    if (rows < 1) return host_.draft(r, out);
    if (static_cast<std::int64_t>(q_.size()) < rows * vocab) q_.resize(static_cast<std::size_t>(rows * vocab));
    if (const status s = host_.draft(r, out, matrix_view<float>(q_.data(), rows, vocab)); s != status::success) return s;
    const auto row_bytes = static_cast<std::size_t>(vocab) * sizeof(float);
    return cuda_detail::check(cudaMemcpy2DAsync(q.data, static_cast<std::size_t>(q.row_stride) * sizeof(float), q_.data(),
                                                row_bytes, row_bytes, static_cast<std::size_t>(rows),
                                                cudaMemcpyHostToDevice, backend_.stream));
  }

 private:
  synthetic_drafter host_;
  cuda_backend backend_;
  std::vector<float> q_;
};

}  // namespace blockpilot
