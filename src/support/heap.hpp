#pragma once
// The planner's heap on transparent huge pages, for the programs that plan (autoddl-plan,
// bench_search).
//
// Planning GPT-3 on 16x8x8 touches about 120 MiB of small allocations (priced pairs, boxing
// summaries, the DP's matrices): 31,000 page faults on 4 KiB pages, and as many TLB entries for
// scattered reads. reserve_huge_page_heap() grows glibc's main heap by 512 MiB at once (address
// space only; nothing is touched) and asks the kernel to back that range with 2 MiB pages
// (madvise MADV_HUGEPAGE, honoured where /sys/kernel/mm/transparent_hugepage/enabled is
// "madvise" or "always"); blocks up to 32 MiB come from the heap and it is never trimmed, so
// the planner's allocations land there. The same run then takes about 700 faults and 10 % less
// time here (docs/reference/search.md, "The heap on huge pages"). glibc's own switch,
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1, does the same for a program that embeds the planner.
//
// Nothing changes but where memory comes from: plans are byte-for-byte the same. A no-op off
// Linux and glibc, under AddressSanitizer or MemorySanitizer (their allocator is not glibc's
// heap), and where the heap cannot grow (sbrk fails: malloc then maps memory as before). Heap
// growth past the reserve is glibc's default again (4 KiB pages).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)  // g++
#define AUTODDL_HEAP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)  // clang
#define AUTODDL_HEAP_SANITIZED 1
#endif
#endif

#if defined(__linux__) && defined(__GLIBC__) && !defined(AUTODDL_HEAP_SANITIZED)
#define AUTODDL_HUGE_PAGE_HEAP 1
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace autoddl::tools {

/// Call first thing in main, before the planner allocates (see the file comment).
/// Returns the bytes of heap advised onto huge pages (0 where nothing was done).
inline std::size_t reserve_huge_page_heap() {
#ifdef AUTODDL_HUGE_PAGE_HEAP
  constexpr std::size_t mib = std::size_t(1) << 20, reserve = 512 * mib;
  mallopt(M_MMAP_THRESHOLD, int(32 * mib));  // glibc's largest: bigger blocks are still mapped
  mallopt(M_TRIM_THRESHOLD, int(2 * reserve));
  mallopt(M_TOP_PAD, int(reserve));
  const auto brk_now = [] { return reinterpret_cast<std::uintptr_t>(sbrk(0)); };
  const std::uintptr_t before = brk_now();
  void* volatile grow = std::malloc(mib);  // volatile: the pair is not optimised away
  const std::uintptr_t after = brk_now();
  std::free(grow);
  mallopt(M_TOP_PAD, int(128 * 1024));  // glibc's default for later growth
  // from the first whole page of the growth (the kernel backs each 2 MiB-aligned stretch inside)
  const std::uintptr_t page = std::uintptr_t(sysconf(_SC_PAGESIZE));
  const std::uintptr_t from = (before + page - 1) / page * page;
  if (after <= from) return 0;
  const std::size_t len = after - from;
  if (madvise(reinterpret_cast<void*>(from), len, MADV_HUGEPAGE) != 0) return 0;
  return len;
#else
  return 0;
#endif
}

}  // namespace autoddl::tools
