// src/support/heap.hpp: the heap range advised onto huge pages is what the kernel reports (the
// "hg" flag of its mapping in /proc/self/smaps), and the blocks allocated after it land there.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "support/heap.hpp"

namespace {

struct mapping {
  std::uintptr_t lo = 0, hi = 0;
  std::string flags;  // VmFlags
};

// The mapping of /proc/self/smaps that holds address a (hi == 0: none).
[[maybe_unused]] mapping mapping_of(std::uintptr_t a) {  // unused where the heap is left alone
  std::ifstream f("/proc/self/smaps");
  std::string line;
  mapping cur, found;
  bool inside = false;
  while (std::getline(f, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream s(line);
    if (s >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
      if (inside) found = {lo, hi, ""};
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      found.flags = line.substr(8);
    }
  }
  return found;
}

}  // namespace

TEST_CASE("the reserved heap is marked for huge pages and serves the blocks allocated after it") {
  const std::size_t advised = autoddl::tools::reserve_huge_page_heap();
#ifdef AUTODDL_HUGE_PAGE_HEAP
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!thp) SKIP("no transparent huge pages in this kernel");
  REQUIRE(advised >= (std::size_t(500) << 20));  // the 512 MiB reserve, from its first whole page
  // 64 blocks of 1 MiB (an edge's matrix in the DP is about that): each starts in a mapping the
  // kernel marks for huge pages, but the first, which may begin in the heap's old top
  int on_huge = 0;
  void* blocks[64];
  for (void*& b : blocks) b = std::malloc(std::size_t(1) << 20);
  for (void* b : blocks) {
    const mapping m = mapping_of(reinterpret_cast<std::uintptr_t>(b));
    on_huge += m.hi != 0 && m.flags.find(" hg") != std::string::npos;
  }
  for (void* b : blocks) std::free(b);
  REQUIRE(on_huge >= 63);
#else
  REQUIRE(advised == 0);  // off glibc or under AddressSanitizer: nothing done
#endif
}
