// gemm<T>: C = alpha * op(A) op(B) + beta * C on row-major matrices, for T = float (sgemm) or
// double (dgemm) through OpenBLAS's CBLAS interface. op(X) is X or X^T. Sizes may be zero
// (m == 0 or n == 0 does nothing; k == 0 scales C by beta). Cost O(m n k) on the calling thread
// (the pool sets OpenBLAS to one thread; callers parallelise over tiles of C).
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace moewb::engine {

template <typename T>
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "gemm: float or double");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda),
                b, blasint(ldb), beta, c, blasint(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda),
                b, blasint(ldb), beta, c, blasint(ldc));
  }
}

}  // namespace moewb::engine
