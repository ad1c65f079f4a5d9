/* The cpu backend's own GEMM for the layers' shapes, with the layer's bias and activation
 * applied while each block of the result is still in registers.
 *
 * OpenBLAS packs both operands on every call and zeroes C in a pass of its own before a
 * product with beta 0; at an update's sizes (256 x 256 x 256 and below) that overhead, and
 * the separate bias, activation and beta passes around it, took a third of a cheetah
 * update's time. This kernel reads A in place, packs one 32-column panel of B at a time,
 * and keeps every element's sum in one register over k in order, so its results do not
 * depend on how the rows are split over threads. It runs on CPUs with AVX-512, or AVX2 and
 * FMA (the same sums in the same order: the same results, bit for bit); elsewhere, or for
 * shapes it does not take, sac_gemm_own returns 0 and the caller uses OpenBLAS. */
#ifndef SAC_LEARNER_GEMM_OWN_H
#define SAC_LEARNER_GEMM_OWN_H

#include "common/mlp.h"

/* Row-major C = op(A) op(B), or C += op(A) op(B) when add is non-zero; then, where bias
 * is non-NULL, bias[j] added to column j; then act applied. op(A) is A (ta 0: A is m x k,
 * lda) or its transpose (ta 1: A is k x m); op(B) is B (tb 0: k x n, ldb) or its transpose
 * (tb 1: B is n x k). Returns 1 when it did this, 0 when it did nothing: neither AVX-512 nor
 * AVX2 with FMA on this CPU, turned off (sac_gemm_own_set_enabled), both transposed, or a shape it leaves to
 * OpenBLAS (fewer than 8 rows, fewer than 4 columns, or for the weight gradient's form (ta 1)
 * fewer than 32, where its column slabs cost more than they save). */
int sac_gemm_own(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                 int add, float *C, int ldc, const float *bias, sac_act_t act);

/* A layer's weight gradient with its activation's backward, as one pass over dY: dY =
 * dY * act'(Y) in place (Y the layer's output, with dY's leading dimension ldy; act NONE
 * leaves dY as it is), db (non-NULL) = the column sums of the result, and dW (m x n, ldw)
 * = X^T dY, for X k x m (ldx) and dY k x n. Returns 1 when it did this, 0 when it touched
 * nothing (as sac_gemm_own: the caller then makes them its own way). */
int sac_gemm_own_wgrad(int m, int n, int k, const float *X, int ldx, float *dY, const float *Y, int ldy,
                       sac_act_t act, float *db, float *dW, int ldw);

/* Whether this CPU runs the own GEMM (AVX-512F, or AVX2 and FMA), whatever
 * sac_gemm_own_set_enabled says. */
int sac_gemm_own_supported(void);

/* The vector width the own GEMM runs with: 512 (AVX-512F), 256 (AVX2 and FMA) or 0 (it does
 * not run on this CPU). */
int sac_gemm_own_bits(void);

/* Runs it no wider than bits (512 or 256: a CPU with AVX-512 then runs the AVX2 kernel, for
 * tests and comparisons). Returns the width it runs with now, or -1 for another value.
 * Process-wide, as sac_gemm_own_set_enabled. */
int sac_gemm_own_cap_bits(int bits);

/* On by default; tests turn it off to compare with the OpenBLAS path. Process-wide: call
 * it when no backend is running an update. */
void sac_gemm_own_set_enabled(int on);
int sac_gemm_own_enabled(void);

/* Products the own GEMM has made in this process (tests: that the backend's layers use it). */
unsigned long long sac_gemm_own_products(void);

#endif
