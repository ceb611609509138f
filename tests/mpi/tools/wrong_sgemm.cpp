// A defective cblas_sgemm for LD_PRELOAD: right everywhere (a plain loop) except where A is
// transposed and the inner dimension exceeds 100, where it drops the last term of every dot
// product: the kind of kernel defect autoddl-train's start-up check (backend/cpu/gemm_check.hpp)
// must refuse before training.
#include <cblas.h>

extern "C" void cblas_sgemm(const CBLAS_ORDER order, const CBLAS_TRANSPOSE ta, const CBLAS_TRANSPOSE tb, const blasint m,
                            const blasint n, const blasint k, const float alpha, const float* a, const blasint lda,
                            const float* b, const blasint ldb, const float beta, float* c, const blasint ldc) {
  const bool row_major = order == CblasRowMajor, trans_a = ta == CblasTrans, trans_b = tb == CblasTrans;
  const blasint terms = trans_a && k > 100 ? k - 1 : k;
  for (blasint i = 0; i < m; ++i)
    for (blasint j = 0; j < n; ++j) {
      // element (i, j) of op(A) op(B) in the caller's order
      auto a_at = [&](blasint r, blasint s) { return row_major ? a[r * lda + s] : a[s * lda + r]; };
      auto b_at = [&](blasint r, blasint s) { return row_major ? b[r * ldb + s] : b[s * ldb + r]; };
      float acc = 0;
      for (blasint p = 0; p < terms; ++p) acc += (trans_a ? a_at(p, i) : a_at(i, p)) * (trans_b ? b_at(j, p) : b_at(p, j));
      float& out = row_major ? c[i * ldc + j] : c[j * ldc + i];
      out = beta == 0 ? alpha * acc : alpha * acc + beta * out;
    }
}
