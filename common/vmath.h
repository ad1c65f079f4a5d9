/* Elementwise float functions over arrays, for the cpu backend's noise and policy head and
 * the prioritised sampler's powers.
 *
 * Where the CPU has AVX2 and the C library has its vector math library (glibc's libmvec),
 * eight elements at a time through libmvec's AVX2 functions; else element by element
 * through libm. Either way every element of an array goes through the same code whatever
 * the array's length and wherever the element sits in it (a short tail is padded to a
 * whole vector), so a range split among threads gives the bits the whole range gives.
 * tests/test_vmath.c checks every function within 4 ulp of a double-precision reference.
 * y may equal x. */
#ifndef SAC_COMMON_VMATH_H
#define SAC_COMMON_VMATH_H

#include <stddef.h>

void sac_vexpf(const float *x, float *y, size_t n);
void sac_vlogf(const float *x, float *y, size_t n);
void sac_vlog1pf(const float *x, float *y, size_t n);
void sac_vtanhf(const float *x, float *y, size_t n);
void sac_vsinf(const float *x, float *y, size_t n);
void sac_vcosf(const float *x, float *y, size_t n);
/* y = x^e (powf) for every element, one exponent for all */
void sac_vpowf(const float *x, float e, float *y, size_t n);

/* 1 where the functions above run eight at a time (libmvec, AVX2), 0 where through libm. */
int sac_vmath_vectorised(void);

#endif
