// Owning device memory for the objects that keep buffers across calls (decode stage, device policy,
// device-resident models). Allocated at configuration time or when a request outgrows it, never in an op.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/device_memory.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>

#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/status.hpp"

namespace blockpilot::cuda_detail {

/// One cudaMalloc'd block (256-byte aligned), freed on destruction. Move-only.
class device_allocation {
 public:
  device_allocation() = default;
  device_allocation(const device_allocation&) = delete;
  device_allocation& operator=(const device_allocation&) = delete;
  device_allocation(device_allocation&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_allocation& operator=(device_allocation&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~device_allocation() { release(); }

  /// At least `bytes` bytes: keeps the block when it is large enough, else frees it and allocates anew
  /// (the contents are not kept). out_of_memory, no_device or cuda_error when the allocation fails (the block
  /// is then empty; a later reserve allocates again).
  [[nodiscard]] status reserve(std::size_t bytes) {
    if (bytes <= size_ && (bytes == 0 || data_ != nullptr)) return status::success;
    release();
    void* p = nullptr;
    if (const status s = check(cudaMalloc(&p, bytes)); s != status::success) return s;
    data_ = static_cast<std::byte*>(p);
    size_ = bytes;
    return status::success;
  }

  [[nodiscard]] std::byte* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::span<std::byte> bytes() const { return {data_, size_}; }

 private:
  void release() {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace blockpilot::cuda_detail
