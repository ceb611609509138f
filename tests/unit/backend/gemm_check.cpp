// The BLAS start-up check (backend/cpu/gemm_check.hpp): the linked BLAS passes it in float and
// double; GEMMs wrong in one form are caught and named; a correct GEMM that sums in another order
// is not refused. The wrong GEMMs are written here, each wrong in one known way.
#include <span>
#include <string>
#include <vector>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/backend/cpu/gemm_check.hpp"

using namespace autoddl;

namespace gemm_check_cases {

/// C = op(A) op(B) by a loop in T that sums the inner dimension backwards: correct, in another
/// order than any BLAS or the checker.
template <class T>
void reversed_gemm(const gemm_desc& g, T, std::span<const T> a, std::span<const T> b, T, std::span<T> c) {
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) {
      T acc = 0;
      for (std::int64_t p = g.k - 1; p >= 0; --p)
        acc += (g.trans_a ? a[std::size_t(p * g.lda + i)] : a[std::size_t(i * g.lda + p)]) *
               (g.trans_b ? b[std::size_t(j * g.ldb + p)] : b[std::size_t(p * g.ldb + j)]);
      c[std::size_t(i * g.ldc + j)] = acc;
    }
}

TEMPLATE_TEST_CASE("the linked BLAS computes every GEMM form the CPU kernels call", "[backend][cpu][gemm_check]", float,
                   double) {
  INFO("BLAS: " << cpu_blas_name());
  const auto wrong = first_wrong_gemm_form<TestType>(
      [](const gemm_desc& g, TestType alpha, std::span<const TestType> a, std::span<const TestType> b, TestType beta,
         std::span<TestType> c) { detail::cpu_gemm(g, alpha, a, b, beta, c); });
  CHECK_FALSE(wrong.has_value());
  CHECK_NOTHROW(check_cpu_gemm<TestType>());
}

TEMPLATE_TEST_CASE("a GEMM correct up to summation order passes the check", "[backend][cpu][gemm_check]", float, double) {
  CHECK_FALSE(first_wrong_gemm_form<TestType>(reversed_gemm<TestType>).has_value());
}

TEST_CASE("a GEMM wrong for a transposed A with a long inner dimension is caught and named", "[backend][cpu][gemm_check]") {
  // one element off by one part in a hundred, only where A is transposed and k > 100
  auto wrong_gemm = [](const gemm_desc& g, float alpha, std::span<const float> a, std::span<const float> b, float beta,
                       std::span<float> c) {
    reversed_gemm<float>(g, alpha, a, b, beta, c);
    if (g.trans_a && g.k > 100) c[std::size_t(2 * g.ldc + 3)] *= 1.01f;
  };
  const auto wrong = first_wrong_gemm_form<float>(wrong_gemm);
  REQUIRE(wrong.has_value());
  // the first such form checked: shape 129 x 97 x 161, A transposed, B plain
  CHECK(to_string(wrong->form) == "C = A^T B with m=129, n=97, k=161");
  CHECK(wrong->row == 2);
  CHECK(wrong->col == 3);
  CHECK(wrong->got == Catch::Approx(wrong->want * 1.01).epsilon(1e-5));
  const std::string sentence = gemm_mismatch_sentence<float>(*wrong);
  CHECK_THAT(sentence, Catch::Matchers::StartsWith("the BLAS library ("));
  CHECK_THAT(sentence, Catch::Matchers::ContainsSubstring("computes sgemm C = A^T B with m=129, n=97, k=161 wrongly"));
  CHECK_THAT(sentence, Catch::Matchers::ContainsSubstring("element [2,3] is"));
  CHECK_THAT(sentence, Catch::Matchers::ContainsSubstring("link another BLAS, then rerun"));
}

TEST_CASE("a GEMM that adds into C instead of overwriting it (beta 0) is caught", "[backend][cpu][gemm_check]") {
  auto accumulating = [](const gemm_desc& g, double alpha, std::span<const double> a, std::span<const double> b, double,
                         std::span<double> c) {
    std::vector<double> fresh(c.size());
    reversed_gemm<double>(g, alpha, a, b, 0.0, std::span<double>(fresh));
    for (std::size_t i = 0; i < c.size(); ++i) c[i] += fresh[i];
  };
  const auto wrong = first_wrong_gemm_form<double>(accumulating);
  REQUIRE(wrong.has_value());
  CHECK(to_string(wrong->form) == "C = A B with m=3, n=5, k=7");  // the very first form
  CHECK(wrong->got - wrong->want == Catch::Approx(7.0));          // C held 7 before the call
}

TEST_CASE("a GEMM that leaves the last column of a single-row product untouched is caught", "[backend][cpu][gemm_check]") {
  auto short_row = [](const gemm_desc& g, float alpha, std::span<const float> a, std::span<const float> b, float beta,
                      std::span<float> c) {
    const float kept = c[std::size_t(g.n - 1)];
    reversed_gemm<float>(g, alpha, a, b, beta, c);
    if (g.m == 1) c[std::size_t(g.n - 1)] = kept;
  };
  const auto wrong = first_wrong_gemm_form<float>(short_row);
  REQUIRE(wrong.has_value());
  CHECK(to_string(wrong->form) == "C = A B with m=1, n=37, k=29");
  CHECK(wrong->col == 36);
}

}  // namespace gemm_check_cases
