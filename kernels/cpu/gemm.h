// Row-major GEMM through OpenBLAS (cblas_sgemm / cblas_dgemm): the CPU twin of cuBLAS.
#ifndef PARATUNE_KERNELS_CPU_GEMM_H_
#define PARATUNE_KERNELS_CPU_GEMM_H_

#include <cblas.h>

#include <cstdint>

namespace paratune::kernels::cpu {

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const double* a, int64_t lda, const double* b, int64_t ldb, float beta,
                 double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_GEMM_H_
