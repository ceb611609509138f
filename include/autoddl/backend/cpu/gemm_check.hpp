#pragma once
// A start-up check of the BLAS the CPU device calls (trust no library blindly): a
// library whose GEMM computes a wrong value for one form on one CPU makes every plan train a
// wrong model, silently. check_cpu_gemm<T>() runs each form the executor's kernels call
// (runtime/kernels: alpha 1, beta 0, tight leading dimensions; A and B each plain or transposed)
// on a small case of each shape class a BLAS treats apart (tiny, a single row, a single column, an
// inner dimension of 1, a small block, an odd medium size, several cache blocks) and compares it
// with a loop that accumulates in a wider type and rounds once. A mismatch is one sentence naming
// the library, the form, the element and the workaround:
//   the BLAS library (OpenBLAS 0.3.21 ... SkylakeX ...) computes sgemm C = A^T B with m=67, n=45,
//   k=83 wrongly (element [3,7] is 12.5, a plain loop gives 10.25); set OPENBLAS_CORETYPE to
//   another kernel family (e.g. OPENBLAS_CORETYPE=Haswell) or link another BLAS, then rerun
// The whole check is 28 small products per element type, a few milliseconds on one core.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

/// One GEMM form checked: transposes and sizes (leading dimensions tight, alpha 1, beta 0).
struct gemm_form {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  constexpr gemm_desc desc() const {
    return gemm_desc{trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n};
  }
};

/// "C = A^T B with m=67, n=45, k=83"
inline std::string to_string(const gemm_form& f) {
  return std::string("C = A") + (f.trans_a ? "^T" : "") + " B" + (f.trans_b ? "^T" : "") + " with m=" + std::to_string(f.m) +
         ", n=" + std::to_string(f.n) + ", k=" + std::to_string(f.k);
}

/// The shape classes checked, each with all four transposes.
inline std::vector<gemm_form> checked_gemm_forms() {
  const std::int64_t shapes[][3] = {{3, 5, 7},   {1, 37, 29},  {37, 1, 29},   {23, 19, 1},
                                    {16, 24, 32}, {67, 45, 83}, {129, 97, 161}};
  std::vector<gemm_form> forms;
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) forms.push_back(gemm_form{ta, tb, s[0], s[1], s[2]});
  return forms;
}

/// A form a GEMM got wrong: where, and the two values.
struct gemm_mismatch {
  gemm_form form;
  std::int64_t row = 0, col = 0;
  double got = 0, want = 0;
};

namespace detail {

/// Deterministic operands in [-1, 1) with no structure a kernel could get right by accident.
template <class T>
std::vector<T> gemm_check_operand(std::int64_t n, std::uint64_t stream) {
  std::vector<T> v(static_cast<std::size_t>(n));
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * (stream + 1);
  for (auto& e : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e = T(double(x >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
  return v;
}

}  // namespace detail

/// The first form of checked_gemm_forms() on which `gemm` (called as cpu_gemm is: desc, alpha 1,
/// A, B, beta 0, C) differs from the widened loop by more than 2 k eps(T) sum_p |a_ip b_pj| plus
/// the least normal number, or nullopt. A dot product of length k summed in any order, with or
/// without fused multiply-adds, errs by at most gamma_k sum_p |a_ip b_pj|, gamma_k ~ k u, u =
/// eps / 2 (Higham, Accuracy and Stability of Numerical Algorithms, section 3.1): the bound is four
/// times that, so no correct order is refused, while a missing, doubled or garbled term (of order
/// |a_ip b_pj|, k times the bound) is caught.
template <class T, class Gemm>
std::optional<gemm_mismatch> first_wrong_gemm_form(Gemm&& gemm) {
  using wide = std::conditional_t<std::is_same_v<T, float>, double, long double>;
  std::uint64_t stream = 0;
  for (const gemm_form& f : checked_gemm_forms()) {
    const gemm_desc g = f.desc();
    const std::vector<T> a = detail::gemm_check_operand<T>(f.m * f.k, stream++);
    const std::vector<T> b = detail::gemm_check_operand<T>(f.k * f.n, stream++);
    std::vector<T> c(std::size_t(f.m * f.n), T(7));  // beta 0 must overwrite it
    gemm(g, T(1), std::span<const T>(a), std::span<const T>(b), T(0), std::span<T>(c));
    for (std::int64_t i = 0; i < f.m; ++i)
      for (std::int64_t j = 0; j < f.n; ++j) {
        wide sum = 0, magnitude = 0;
        for (std::int64_t p = 0; p < f.k; ++p) {
          const wide av = f.trans_a ? a[std::size_t(p * g.lda + i)] : a[std::size_t(i * g.lda + p)];
          const wide bv = f.trans_b ? b[std::size_t(j * g.ldb + p)] : b[std::size_t(p * g.ldb + j)];
          sum += av * bv;
          magnitude += std::abs(av * bv);
        }
        const double got = double(c[std::size_t(i * g.ldc + j)]), want = double(T(sum));
        const double bound = 2.0 * double(f.k) * double(std::numeric_limits<T>::epsilon()) * double(magnitude) +
                             double(std::numeric_limits<T>::min());
        if (!(std::abs(got - want) <= bound)) return gemm_mismatch{f, i, j, got, want};
      }
  }
  return std::nullopt;
}

/// The BLAS the CPU device calls, in words: OpenBLAS's own configuration text (version, build,
/// kernel family) where it is OpenBLAS, else a generic name.
inline std::string cpu_blas_name() {
#if AUTODDL_HAS_CBLAS && defined(OPENBLAS_VERSION)
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return config;
#elif AUTODDL_HAS_CBLAS
  return "the CBLAS library linked";
#else
  return "autoddl's loop GEMM (no BLAS linked)";
#endif
}

/// The sentence refusing a wrong GEMM: library, form, element and the workaround.
template <class T>
std::string gemm_mismatch_sentence(const gemm_mismatch& w) {
  char values[160];
  std::snprintf(values, sizeof values, "element [%lld,%lld] is %.9g, a plain loop gives %.9g",
                static_cast<long long>(w.row), static_cast<long long>(w.col), w.got, w.want);
  const char* routine = std::is_same_v<T, float> ? "sgemm" : "dgemm";
#if AUTODDL_HAS_CBLAS && defined(OPENBLAS_VERSION)
  const std::string fix = "set OPENBLAS_CORETYPE to another kernel family (e.g. OPENBLAS_CORETYPE=Haswell) or link another BLAS, then rerun";
#else
  const std::string fix = "link another BLAS, then rerun";
#endif
  return "the BLAS library (" + cpu_blas_name() + ") computes " + routine + " " + to_string(w.form) + " wrongly (" + values +
         "); " + fix;
}

/// Throws error with gemm_mismatch_sentence when the CPU device's GEMM in T gets a checked form
/// wrong; returns quietly otherwise.
template <class T>
void check_cpu_gemm() {
  const auto wrong = first_wrong_gemm_form<T>([](const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b,
                                                 T beta, std::span<T> c) { detail::cpu_gemm(g, alpha, a, b, beta, c); });
  if (wrong) detail::fail<error>(gemm_mismatch_sentence<T>(*wrong));
}

}  // namespace autoddl
