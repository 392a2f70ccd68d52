// What every CUDA test shares: skip (exit 77) without a device, unless BLOCKPILOT_REQUIRE_GPU=1 makes a
// missing device a failure; checked CUDA calls; device buffers; a failure counter with bounded output.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include <cuda_runtime.h>

namespace blockpilot::testing {

inline void require_device_or_skip(const char* test) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return;
  (void)cudaGetLastError();
  const char* require = std::getenv("BLOCKPILOT_REQUIRE_GPU");
  if (require != nullptr && std::strcmp(require, "1") == 0) {
    std::fprintf(stderr, "%s: no CUDA device, and BLOCKPILOT_REQUIRE_GPU=1\n", test);
    std::exit(1);
  }
  std::fprintf(stderr, "%s: no CUDA device, skipped\n", test);
  std::exit(77);
}

/// BLOCKPILOT_QUICK=1: the tests skip their largest cases (for runs under compute-sanitizer).
inline bool quick_mode() {
  const char* quick = std::getenv("BLOCKPILOT_QUICK");
  return quick != nullptr && std::strcmp(quick, "1") == 0;
}

/// Aborts the test with the call's location when a CUDA runtime call fails.
inline void cuda_ok(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, cudaGetErrorString(e));
  std::exit(1);
}
#define BLOCKPILOT_CUDA_OK(call) ::blockpilot::testing::cuda_ok((call), #call, __FILE__, __LINE__)

/// Counts failed checks; prints the first `print_limit` of them.
class checker {
 public:
  explicit checker(const char* test) : test_(test) {}
  /// Records a failure when !ok; returns ok.
  bool expect(bool ok, const char* format, ...) __attribute__((format(printf, 3, 4))) {
    ++checks_;
    if (ok) return true;
    if (failures_++ < print_limit) {
      std::va_list args;
      va_start(args, format);
      std::fprintf(stderr, "%s: FAIL: ", test_);
      std::vfprintf(stderr, format, args);
      std::fprintf(stderr, "\n");
      va_end(args);
    }
    return false;
  }
  [[nodiscard]] int failures() const { return failures_; }
  /// Prints the summary; the process exit code.
  [[nodiscard]] int finish() const {
    std::printf("%s: %d checks, %d failures\n", test_, checks_, failures_);
    return failures_ == 0 ? 0 : 1;
  }

 private:
  static constexpr int print_limit = 40;
  const char* test_;
  int checks_ = 0;
  int failures_ = 0;
};

/// An owning device allocation of `count` T (cudaMalloc: 256-byte aligned).
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count > 0) BLOCKPILOT_CUDA_OK(cudaMalloc(&data_, count * sizeof(T)));
  }
  explicit device_buffer(std::span<const T> host) : device_buffer(host.size()) { upload(host); }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(std::span<const T>(host)) {}
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept : data_(o.data_), count_(o.count_) { o.data_ = nullptr, o.count_ = 0; }
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~device_buffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] std::span<std::byte> bytes() const {
    return {reinterpret_cast<std::byte*>(data_), count_ * sizeof(T)};
  }
  /// Copies in and waits for the whole device: the tests' streams are non-blocking, so nothing else orders
  /// a legacy-stream copy with their work.
  void upload(std::span<const T> host) {
    if (host.empty()) return;
    BLOCKPILOT_CUDA_OK(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
  }
  /// Waits for the whole device, then copies out.
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(count_);
    BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
    if (count_ > 0) BLOCKPILOT_CUDA_OK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  /// Fills every byte with `byte` (poisoning outputs before a run).
  void fill_bytes(int byte) {
    if (count_ > 0) BLOCKPILOT_CUDA_OK(cudaMemset(data_, byte, count_ * sizeof(T)));
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// Waits for the device and fails the test on any error a kernel raised.
inline void sync_ok(const char* file, int line) {
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", file, line);
  cuda_ok(cudaGetLastError(), "cudaGetLastError", file, line);
}
#define BLOCKPILOT_SYNC_OK() ::blockpilot::testing::sync_ok(__FILE__, __LINE__)

}  // namespace blockpilot::testing
