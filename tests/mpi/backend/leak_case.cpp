// Built under AddressSanitizer only (scripts/sanitize): a test that leaks on each of 2 MPI ranks,
// beside everything Open MPI keeps to exit. LeakSanitizer must still report this leak, with its
// frame in this file: tests/sanitizers/lsan.supp suppresses Open MPI's allocations only.
#include <catch2/catch_test_macros.hpp>

#include <memory>
#include <vector>

TEST_CASE("a vector leaked on purpose") {
  auto kept = std::make_unique<std::vector<int>>(64, 7);
  CHECK(kept->size() == 64);
  (void)kept.release();  // the leak LeakSanitizer must find
}
