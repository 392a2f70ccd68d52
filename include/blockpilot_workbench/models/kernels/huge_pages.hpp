// Memory for the weights the kernels stream through, on huge pages where the system gives them: a
// step reads every weight once, and with 4 KiB pages each 4 KiB costs a TLB miss, which here delays
// the kernels' requests for the next tiles (docs/performance.md). Weights are pieces of 2 MiB-aligned
// chunks advised for huge pages before their first touch (Linux: madvise(MADV_HUGEPAGE)), so that a
// layer's small matrices share huge pages rather than each holding one; a chunk goes back when its last
// piece does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace blockpilot::cpu_kernels {

class huge_page_pool {
 public:
  static constexpr std::size_t huge_page = std::size_t{1} << 21;
  static constexpr std::size_t chunk_bytes = 16 * huge_page;  ///< a chunk that several pieces share
  static constexpr std::size_t alignment = 64;                ///< of every piece

  /// The process's pool (never destroyed, so that weights held by static objects can go back at any time).
  static huge_page_pool& instance() {
    static auto* pool = new huge_page_pool;
    return *pool;
  }

  /// `bytes` bytes, 64-byte aligned; throws std::bad_alloc.
  void* allocate(std::size_t bytes) {
    bytes = std::max<std::size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
    const std::lock_guard lock(mutex_);
    if (bytes > chunk_bytes / 2) return take(new_chunk(bytes), bytes);  // a chunk of its own
    if (current_ == nullptr || current_->used + bytes > current_->size) current_ = &new_chunk(chunk_bytes);
    return take(*current_, bytes);
  }

  /// Chunks held now.
  [[nodiscard]] std::size_t chunks() {
    const std::lock_guard lock(mutex_);
    return chunks_.size();
  }

  /// Gives back a piece of `allocate`; the chunk goes back with its last piece.
  void deallocate(void* p) noexcept {
    const std::lock_guard lock(mutex_);
    const auto at = std::ranges::find_if(chunks_, [&](const chunk& c) {
      return static_cast<std::byte*>(p) >= c.base && static_cast<std::byte*>(p) < c.base + c.size;
    });
    if (at == chunks_.end() || --at->pieces > 0) return;
    if (current_ == &*at) current_ = nullptr;
    std::free(at->base);
    chunks_.erase(at);
  }

 private:
  struct chunk {
    std::byte* base = nullptr;
    std::size_t size = 0, used = 0;
    int pieces = 0;
  };

  huge_page_pool() = default;

  chunk& new_chunk(std::size_t bytes) {
    bytes = (bytes + huge_page - 1) / huge_page * huge_page;
    auto* base = static_cast<std::byte*>(std::aligned_alloc(huge_page, bytes));
    if (base == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(base, bytes, MADV_HUGEPAGE);  // a hint: where it is refused, the memory works as it is
#endif
    return chunks_.emplace_back(chunk{base, bytes, 0, 0});
  }

  static void* take(chunk& c, std::size_t bytes) {
    void* p = c.base + c.used;
    c.used += bytes;
    ++c.pieces;
    return p;
  }

  std::mutex mutex_;
  std::list<chunk> chunks_;   ///< (a list: current_ stays valid as others go)
  chunk* current_ = nullptr;  ///< the chunk that small pieces come from
};

/// A standard allocator over huge_page_pool, for the vectors that hold weights.
template <class T>
struct huge_page_allocator {
  using value_type = T;

  huge_page_allocator() = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) { return static_cast<T*>(huge_page_pool::instance().allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { huge_page_pool::instance().deallocate(p); }

  template <class U>
  bool operator==(const huge_page_allocator<U>&) const noexcept { return true; }
};

}  // namespace blockpilot::cpu_kernels
