// Replaces the global operator new of the test program that includes this header (include it in one
// translation unit only): every allocation lands `heap_shift` bytes past a 64-byte boundary. Running
// the same work at shifts 0, 16, 32 and 48 gives its buffers every alignment that a 16-byte-aligned
// malloc can produce relative to a 64-byte (AVX-512) vector, so results that depend on where the heap
// put a buffer show up as a difference on any x86-64 machine, not only on the one whose allocator
// happens to produce the bad layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace blockpilot::testing {

/// Bytes past a 64-byte boundary at which the next allocations start (a multiple of 16, below 64).
inline std::size_t heap_shift = 0;

/// Sets heap_shift for one scope.
struct scoped_heap_shift {
  std::size_t saved = heap_shift;
  explicit scoped_heap_shift(std::size_t bytes) { heap_shift = bytes; }
  ~scoped_heap_shift() { heap_shift = saved; }
  scoped_heap_shift(const scoped_heap_shift&) = delete;
  scoped_heap_shift& operator=(const scoped_heap_shift&) = delete;
};

}  // namespace blockpilot::testing

// The block from malloc is stored just before the returned pointer.
void* operator new(std::size_t n) {
  constexpr std::size_t slack = 64 + 64 + sizeof(void*);
  auto* base = static_cast<char*>(std::malloc(n + slack));
  if (!base) throw std::bad_alloc();
  const auto boundary = (reinterpret_cast<std::uintptr_t>(base) + sizeof(void*) + 63) & ~std::uintptr_t{63};
  char* p = reinterpret_cast<char*>(boundary) + blockpilot::testing::heap_shift % 64;
  std::memcpy(p - sizeof(void*), &base, sizeof(void*));
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  // Integer arithmetic: the word before the block is ours, not part of the object the caller freed.
  void* base = nullptr;
  std::memcpy(&base, reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) - sizeof(void*)), sizeof(void*));
  std::free(base);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
