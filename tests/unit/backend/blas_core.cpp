// The OPENBLAS_CORETYPE note (backend/cpu/blas_core.hpp): OpenBLAS's kernel families by the
// vector instructions OpenBLAS's own kernel directories use for them (kernel/x86_64: the
// SkylakeX and Cooperlake kernels are AVX-512, Haswell's and Zen's AVX2, Prescott's SSE3), and the
// note said only where the family is narrower than the CPU and the user chose none.
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/backend/cpu/blas_core.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("OpenBLAS kernel families are ranked by their widest vectors, in any case", "[backend][blas]") {
  CHECK(blas_core_isa("SkylakeX") == vector_isa::avx512);
  CHECK(blas_core_isa("COOPERLAKE") == vector_isa::avx512);
  CHECK(blas_core_isa("Haswell") == vector_isa::avx2);
  CHECK(blas_core_isa("zen") == vector_isa::avx2);
  CHECK(blas_core_isa("Prescott") == vector_isa::older);
  CHECK(blas_core_isa("Sandybridge") == vector_isa::older);  // AVX without FMA
  CHECK(blas_core_isa("") == vector_isa::older);
}

TEST_CASE("the OPENBLAS_CORETYPE note names the family of the CPU's widest vectors, only where it would help",
          "[backend][blas]") {
  const auto prescott_on_avx512 = blas_core_advice("Prescott", vector_isa::avx512, false);
  REQUIRE(prescott_on_avx512);
  CHECK_THAT(*prescott_on_avx512, ContainsSubstring("runs its Prescott kernels") && ContainsSubstring("AVX-512") &&
                                      ContainsSubstring("OPENBLAS_CORETYPE=SkylakeX"));
  const auto haswell_on_avx512 = blas_core_advice("Haswell", vector_isa::avx512, false);
  REQUIRE(haswell_on_avx512);
  CHECK_THAT(*haswell_on_avx512, ContainsSubstring("OPENBLAS_CORETYPE=SkylakeX"));
  const auto prescott_on_avx2 = blas_core_advice("Prescott", vector_isa::avx2, false);
  REQUIRE(prescott_on_avx2);
  CHECK_THAT(*prescott_on_avx2, ContainsSubstring("OPENBLAS_CORETYPE=Haswell") && ContainsSubstring("AVX2"));
  CHECK_FALSE(blas_core_advice("SkylakeX", vector_isa::avx512, false));  // already the widest
  CHECK_FALSE(blas_core_advice("Haswell", vector_isa::avx2, false));
  CHECK_FALSE(blas_core_advice("SkylakeX", vector_isa::avx2, false));  // never a narrower family
  CHECK_FALSE(blas_core_advice("Prescott", vector_isa::older, false));  // nothing wider to run
  CHECK_FALSE(blas_core_advice("Prescott", vector_isa::avx512, true));  // the user chose a family
}

TEST_CASE("the note for this process is one line or none", "[backend][blas]") {
  const auto advice = cpu_blas_core_advice();
  if (advice) CHECK(advice->find('\n') == std::string::npos);
}
