#pragma once
// Row-major (batched, strided) GEMM on the CPU: CBLAS (OpenBLAS) for float and double when
// <cblas.h> is there, a plain triple loop otherwise and for other element types, so the core
// compiles without BLAS. The 16-bit types (half_types.hpp) multiply in float: each batch entry's
// operands are widened to float (exactly), multiplied and summed in float, and C rounded once. Link OpenBLAS (pkg-config `openblas`) when cblas.h is found.
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/device.hpp"

#if __has_include(<cblas.h>)
#include <cblas.h>
#define AUTODDL_HAS_CBLAS 1
#else
#define AUTODDL_HAS_CBLAS 0
#endif

namespace autoddl::detail {

/// C = alpha op(A) op(B) + beta C for one batch entry, by loops (the reference and fallback).
template <class T>
void gemm_loop(const gemm_desc& g, T alpha, const T* a, const T* b, T beta, T* c) {
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) {
      T acc{};
      for (std::int64_t p = 0; p < g.k; ++p) {
        T av = g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p];
        T bv = g.trans_b ? b[j * g.ldb + p] : b[p * g.ldb + j];
        acc += av * bv;
      }
      T& out = c[i * g.ldc + j];
      out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
    }
}

/// The elements of a stored operand of `rows` x `cols` (after op), `ld` apart: what to widen.
inline std::int64_t gemm_operand_span(bool trans, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return trans ? (cols - 1) * ld + rows : (rows - 1) * ld + cols;
}

template <class T>
void gemm_at(const gemm_desc& g, T alpha, const T* pa, const T* pb, T beta, T* pc);

/// A 16-bit batch entry in float: A, B and C widened, one float GEMM, C rounded back.
template <class T>
void gemm_widened(const gemm_desc& g, T alpha, const T* pa, const T* pb, T beta, T* pc) {
  const auto widen = [](const T* p, std::int64_t n) { return std::vector<float>(p, p + n); };
  const std::int64_t na = gemm_operand_span(g.trans_a, g.m, g.k, g.lda), nb = gemm_operand_span(g.trans_b, g.k, g.n, g.ldb);
  const std::int64_t nc = gemm_operand_span(false, g.m, g.n, g.ldc);
  std::vector<float> a = widen(pa, na), b = widen(pb, nb), c = widen(pc, nc);
  gemm_at<float>(g, float(alpha), a.data(), b.data(), float(beta), c.data());
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) pc[i * g.ldc + j] = T(c[std::size_t(i * g.ldc + j)]);
}

/// One batch entry of g at a, b, c (CBLAS for float and double where present).
template <class T>
void gemm_at(const gemm_desc& g, T alpha, const T* pa, const T* pb, T beta, T* pc) {
  if constexpr (is_half_float_v<T>) {
    return gemm_widened(g, alpha, pa, pb, beta, pc);
  }
#if AUTODDL_HAS_CBLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (g.k > 0) {
      const auto ta = g.trans_a ? CblasTrans : CblasNoTrans, tb = g.trans_b ? CblasTrans : CblasNoTrans;
      const int m = int(g.m), n = int(g.n), k = int(g.k);
      const int lda = int(g.lda), ldb = int(g.ldb), ldc = int(g.ldc);
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc);
      return;
    }
  }
#endif
  gemm_loop(g, alpha, pa, pb, beta, pc);
}

template <class T>
void cpu_gemm(const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b, T beta, std::span<T> c) {
  if (g.m <= 0 || g.n <= 0) return;
  for (std::int64_t s = 0; s < g.batch; ++s)
    gemm_at(g, alpha, a.data() + s * g.stride_a, b.data() + s * g.stride_b, beta, c.data() + s * g.stride_c);
}

}  // namespace autoddl::detail
