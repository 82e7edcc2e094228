// Tables probed at random (hot pieces, the vocabulary index, the merge table) span megabytes:
// in 4 KB pages every probe is also a likely TLB miss, and a page walk under virtualization
// costs as much as the cache miss. Allocations of at least kMinBytes are rounded up to whole
// 2 MB pages, aligned to them and marked for transparent huge pages, so a table takes a few
// TLB entries (the kernel may decline; then they are ordinary pages). They are mapped afresh,
// not taken from the heap: memory the heap hands back was often touched before, so it is
// already backed by small pages that marking it does not replace (a tokenizer built after
// another library had encoded a large text got 2 MB of huge pages instead of 12).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace zllm {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(1) << 21, kMinBytes = size_t(1) << 19;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMinBytes) return static_cast<T*>(::operator new(bytes, std::align_val_t(alignof(T))));
    const size_t rounded = round_up(bytes);
    // One page more than needed, so that an aligned span fits; the rest is unmapped.
    void* raw = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    char* const start = static_cast<char*>(raw);
    char* const p = start + (kHugePage - reinterpret_cast<uintptr_t>(start) % kHugePage) % kHugePage;
    if (p > start) munmap(start, size_t(p - start));
    munmap(p + rounded, size_t(start + kHugePage - p));
#ifdef MADV_HUGEPAGE  // Linux
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return reinterpret_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kMinBytes) {
      ::operator delete(p, std::align_val_t(alignof(T)));
    } else {
      munmap(p, round_up(n * sizeof(T)));
    }
  }
  static size_t round_up(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

template <class T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace zllm
