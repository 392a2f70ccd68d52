// The workspace convention on the device: a size query that is arithmetic on the shape and a run that
// carves the same arrays, in the same order, out of one caller-owned device buffer.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/workspace.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cstddef>
#include <cstdint>
#include <span>

#include "blockpilot/status.hpp"

namespace blockpilot::cuda_detail {

/// Every array carved from a workspace starts at a multiple of this many bytes from its base.
inline constexpr std::size_t workspace_alignment = 256;
/// The base of a caller's workspace must be aligned to this (cudaMalloc gives 256).
inline constexpr std::size_t workspace_base_alignment = 16;

[[nodiscard]] constexpr std::size_t align_up(std::size_t n, std::size_t a = workspace_alignment) {
  return (n + a - 1) / a * a;
}

/// Lays typed arrays out one after another, each aligned to workspace_alignment. With a null base it
/// only counts (the size query); with the caller's buffer it hands out pointers into it (the run). Both
/// call the same layout function, so the two cannot disagree.
class workspace_carver {
 public:
  constexpr explicit workspace_carver(std::byte* base = nullptr) : base_(base) {}

  template <class T>
  T* take(std::size_t count) {
    used_ = align_up(used_);
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + used_);
    used_ += count * sizeof(T);
    return p;
  }
  /// Bytes taken so far, rounded up to the alignment.
  [[nodiscard]] constexpr std::size_t size() const { return align_up(used_); }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

/// workspace_too_small when `workspace` holds fewer than `needed` bytes, invalid_argument when its base is
/// not aligned to workspace_base_alignment, else success. An empty workspace is fine when nothing is needed.
[[nodiscard]] inline status check_workspace(std::span<std::byte> workspace, std::size_t needed) {
  if (needed == 0) return status::success;
  if (workspace.data() == nullptr || workspace.size() < needed) return status::workspace_too_small;
  if (reinterpret_cast<std::uintptr_t>(workspace.data()) % workspace_base_alignment != 0) return status::invalid_argument;
  return status::success;
}

}  // namespace blockpilot::cuda_detail
