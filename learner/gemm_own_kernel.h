/* The own GEMM's kernel (gemm_own.c), written once for a vector width and included by
 * gemm_own.c once per instruction set, after it defines:
 *
 *   OWN_TARGET           the function attribute that enables the instruction set
 *   OWN(name)            name with the set's suffix (each copy's functions are its own)
 *   VW                   floats in a vector; a panel of B is NR = 2 VW columns
 *   MR, MR_TAIL          rows of the full tile and of the tail tile (MR_TAIL <= MR <= VW)
 *   VF, VMASK            the vector type and the type of a mask of its first w lanes
 *   VZERO() VSET1(x) VFMA(a, b, c) VADD VSUB VMUL VMAX       arithmetic
 *   VLOAD(p) VSTORE(p, v)                  aligned, whole vectors
 *   VLOADM(m, p) VSTOREM(p, m, v)          the lanes under mask m, zeros elsewhere
 *   VSTORE_SLAB(p, m, v)                   VSTOREM, or a whole unaligned store (pack_columns)
 *   VRELU_BWD(d, y)                        d where y > 0, else 0
 *   OWN(mask_of)(w) -> VMASK               the first w lanes (none for w <= 0, all for >= VW)
 *   OWN(transpose)(VF r[VW])               r[c] becomes what was column c
 *
 * and #undefs them all at its end. Every element of C is one running sum of fused
 * multiply-adds over k in order, started at zero in each k block, whatever the width: the
 * two copies give the same results, bit for bit. */

enum { OWN(NR) = 2 * VW };
#define NR OWN(NR)

/* The mr x NR tile at c (its first `rows` rows, columns under masks m0 and m1) from kc
 * steps of: A's mr values at step q (a[r * rs + q * ks]) times the packed panel's row q.
 * Inlined with mr and nv constants: nv mr accumulators, nv loads of the panel and mr
 * broadcasts a step, the steps four to a loop iteration. nv = 1 where the panel's second
 * vector is all past n (m1 empty: a layer of at most VW outputs, the policy's 2A), which
 * then costs neither multiply-adds nor stores. */
__attribute__((always_inline)) OWN_TARGET static inline void
OWN(tile_mr)(const int mr, const int nv, int kc, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *bp,
             float *c, int ldc, int rows, VMASK m0, VMASK m1, epilogue_t e) {
  VF acc[MR][2];
  for (int r = 0; r < mr; r++)
    acc[r][0] = acc[r][1] = VZERO();
#if !defined(__SANITIZE_ADDRESS__) /* four checked copies of the step overflow the code cache */
#pragma GCC unroll 4
#endif
  for (int q = 0; q < kc; q++) {
    const VF b0 = VLOAD(bp + (size_t)q * NR), b1 = nv > 1 ? VLOAD(bp + (size_t)q * NR + VW) : VZERO();
    const float *aq = a + q * ks;
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
      const VF x = VSET1(aq[r * rs]);
      acc[r][0] = VFMA(x, b0, acc[r][0]);
      if (nv > 1)
        acc[r][1] = VFMA(x, b1, acc[r][1]);
    }
  }
  const VF zero = VZERO();
  const VF bias0 = e.bias ? VLOADM(m0, e.bias) : zero;
  const VF bias1 = e.bias && nv > 1 ? VLOADM(m1, e.bias + VW) : zero;
  for (int r = 0; r < rows && r < mr; r++) {
    float *cr = c + (size_t)r * ldc;
    VF y0 = acc[r][0], y1 = acc[r][1];
    if (e.add) {
      y0 = VADD(VLOADM(m0, cr), y0);
      if (nv > 1)
        y1 = VADD(VLOADM(m1, cr + VW), y1);
    }
    if (e.bias) {
      y0 = VADD(y0, bias0);
      y1 = VADD(y1, bias1);
    }
    if (e.relu) {
      y0 = VMAX(y0, zero);
      y1 = VMAX(y1, zero);
    }
    VSTOREM(cr, m0, y0);
    if (nv > 1)
      VSTOREM(cr + VW, m1, y1);
  }
}

/* The row blocks: MR rows where that many are left, the last few in blocks of MR_TAIL;
 * each with the panel's nv = 2 vectors, or its first alone (nv = 1). */
OWN_TARGET static void OWN(tile)(int nv, int kc, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *bp,
                                 float *c, int ldc, int rows, VMASK m0, VMASK m1, epilogue_t e) {
  if (nv == 1)
    OWN(tile_mr)(MR, 1, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
  else
    OWN(tile_mr)(MR, 2, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
}

OWN_TARGET static void OWN(tile_tail)(int nv, int kc, const float *a, ptrdiff_t rs, ptrdiff_t ks,
                                      const float *bp, float *c, int ldc, int rows, VMASK m0, VMASK m1,
                                      epilogue_t e) {
  if (nv == 1)
    OWN(tile_mr)(MR_TAIL, 1, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
  else
    OWN(tile_mr)(MR_TAIL, 2, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
}

/* Columns [j0, j0 + NR) of rows [q0, q0 + kc) of B into bp (kc x NR), zeros past n. */
OWN_TARGET static void OWN(pack_panel)(const float *B, int ldb, int q0, int kc, int j0, VMASK m0, VMASK m1,
                                       float *bp) {
  for (int q = 0; q < kc; q++) {
    const float *b = B + (size_t)(q0 + q) * ldb + j0;
    VSTORE(bp + (size_t)q * NR, VLOADM(m0, b));
    VSTORE(bp + (size_t)q * NR + VW, VLOADM(m1, b + VW));
  }
}

/* The weight gradient's B is the layer's output gradient dY before its activation's
 * backward. Where the caller asks (sac_gemm_own_wgrad), the panel's pack applies it:
 * dY = dY * act'(Y) in place, and adds the result's column sums to db, in row order (the
 * sums the backend's separate pass made, bit for bit, for k within one block). */
OWN_TARGET static void OWN(pack_panel_act)(float *dY, int ldb, int q0, int kc, int j0, VMASK m0, VMASK m1,
                                           const act_bwd_t *g, float *bp) {
  const VF zero = VZERO(), one = VSET1(1.0f);
  VF s0 = zero, s1 = zero;
  for (int q = 0; q < kc; q++) {
    float *d = dY + (size_t)(q0 + q) * ldb + j0;
    const float *y = g->Y + (size_t)(q0 + q) * ldb + j0;
    VF d0 = VLOADM(m0, d), d1 = VLOADM(m1, d + VW);
    const VF y0 = VLOADM(m0, y), y1 = VLOADM(m1, y + VW);
    if (g->act == SAC_ACT_RELU) {
      d0 = VRELU_BWD(d0, y0);
      d1 = VRELU_BWD(d1, y1);
    } else if (g->act == SAC_ACT_TANH) {
      d0 = VMUL(d0, VSUB(one, VMUL(y0, y0)));
      d1 = VMUL(d1, VSUB(one, VMUL(y1, y1)));
    }
    VSTOREM(d, m0, d0);
    VSTOREM(d + VW, m1, d1);
    VSTORE(bp + (size_t)q * NR, d0);
    VSTORE(bp + (size_t)q * NR + VW, d1);
    s0 = VADD(s0, d0);
    s1 = VADD(s1, d1);
  }
  if (g->db) {
    float *db = g->db + j0;
    VSTOREM(db, m0, VADD(VLOADM(m0, db), s0));
    VSTOREM(db + VW, m1, VADD(VLOADM(m1, db + VW), s1));
  }
}

/* The same panel of B^T, for B stored n x k (ldb): bp[q][j] = B[j0 + j][q0 + q], moved
 * VW x VW at a time through registers; zeros past w columns. */
OWN_TARGET static void OWN(pack_panel_t)(const float *B, int ldb, int q0, int kc, int j0, int w, float *bp) {
  for (int jb = 0; jb < NR; jb += VW)
    for (int qb = 0; qb < kc; qb += VW) {
      const int nq = kc - qb < VW ? kc - qb : VW;
      const VMASK mq = OWN(mask_of)(nq);
      VF r[VW];
      for (int i = 0; i < VW; i++)
        r[i] = jb + i < w ? VLOADM(mq, B + (size_t)(j0 + jb + i) * ldb + q0 + qb) : VZERO();
      OWN(transpose)(r);
      for (int c = 0; c < nq; c++)
        VSTORE(bp + (size_t)(qb + c) * NR + jb, r[c]);
    }
}

/* The rows of C in blocks: MR where that many are left, else MR_TAIL (the last block
 * zero-padded where fewer are left). */
static int OWN(block_of)(int m, int i0) { return m - i0 >= MR ? MR : MR_TAIL; }

/* Columns [i0, i0 + w) of rows [q0, q0 + kc) of A (k x m, lda) into ap as kc steps of w
 * side by side, zeros past m. Each step is stored as VSTORE_SLAB does: a whole vector where
 * that is cheaper than a masked store (AVX2), its VW - w lanes past the step overwritten by
 * the next step, the next block's, or for the last block's last step the VW floats of
 * scratch past the slabs. */
OWN_TARGET static void OWN(pack_columns)(const float *A, int lda, int q0, int kc, int i0, int w, int m,
                                         float *ap) {
  const float *a = A + (size_t)q0 * lda + i0;
  const VMASK mk = OWN(mask_of)(m - i0 < w ? m - i0 : w), mw = OWN(mask_of)(w);
  (void)mw;
  for (int q = 0; q < kc; q++)
    VSTORE_SLAB(ap + q * w, mw, VLOADM(mk, a + (size_t)q * lda));
}

/* One k block [q0, q0 + kc) over all of C, panel by panel. Rows of A are read in place
 * (a last block of fewer rows than its tile's copied into zero-padded rows first). The
 * weight gradient's A is X^T, whose tile values at one k lie in one line of X, a line per
 * k: read in place, every panel fetched all of X's lines again and ran at 0.75 of the
 * forward's speed; so its k block is packed once into blocks of columns (slabs, in
 * scratch, each block's kc steps side by side) that the tiles then read as rows. */
OWN_TARGET static void OWN(k_block)(form_t f, int m, int n, int q0, int kc, const float *A, int lda,
                                    const float *B, int ldb, float *C, int ldc, epilogue_t e,
                                    const float *bias, float *slabs, const act_bwd_t *g) {
  float bp[KC * NR] __attribute__((aligned(64)));
  float ap[MR * KC] __attribute__((aligned(64)));
  if (f == FORM_TN)
    for (int i0 = 0; i0 < m; i0 += OWN(block_of)(m, i0))
      OWN(pack_columns)(A, lda, q0, kc, i0, OWN(block_of)(m, i0), m, slabs + (size_t)i0 * kc);
  for (int j0 = 0; j0 < n; j0 += NR) {
    const int w = n - j0 < NR ? n - j0 : NR;
    const VMASK m0 = OWN(mask_of)(w), m1 = OWN(mask_of)(w - VW);
    if (f == FORM_NT)
      OWN(pack_panel_t)(B, ldb, q0, kc, j0, w, bp);
    else if (g) /* B is the caller's dY (sac_gemm_own_wgrad), written in place */
      OWN(pack_panel_act)((float *)B, ldb, q0, kc, j0, m0, m1, g, bp);
    else
      OWN(pack_panel)(B, ldb, q0, kc, j0, m0, m1, bp);
    e.bias = bias ? bias + j0 : NULL;
    for (int i0 = 0; i0 < m;) {
      const int bw = OWN(block_of)(m, i0), rows = m - i0 < bw ? m - i0 : bw;
      const float *a = A + (size_t)i0 * lda + q0;
      ptrdiff_t rs = lda, ks = 1;
      if (f == FORM_TN) {
        a = slabs + (size_t)i0 * kc, rs = 1, ks = bw;
      } else if (rows < bw) {
        memset(ap, 0, sizeof(float) * (size_t)bw * (size_t)kc);
        for (int r = 0; r < rows; r++)
          memcpy(ap + r * kc, a + (size_t)r * lda, sizeof(float) * (size_t)kc);
        a = ap, rs = kc;
      }
      float *c = C + (size_t)i0 * ldc + j0;
      (bw == MR ? OWN(tile) : OWN(tile_tail))(w <= VW ? 1 : 2, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
      i0 += bw;
    }
  }
}

/* The product in k blocks. Returns 0 where it did nothing (no scratch for the weight
 * gradient's slabs). */
OWN_TARGET static int OWN(own_gemm)(const act_bwd_t *g, form_t f, int m, int n, int k, const float *A,
                                    int lda, const float *B, int ldb, int add, float *C, int ldc,
                                    const float *bias, sac_act_t act) {
  float *slabs = NULL;
  if (f == FORM_TN && !(slabs = scratch_of((size_t)(k < KC ? k : KC) * (size_t)(m + MR_TAIL) + VW)))
    return 0;
  if (g && g->db) /* the column sums start here: nothing was touched before this point */
    memset(g->db, 0, sizeof(float) * (size_t)n);
  for (int q0 = 0; q0 < k; q0 += KC) {
    const int kc = k - q0 < KC ? k - q0 : KC;
    const int last = q0 + kc >= k;
    /* later k blocks add to what the earlier ones stored; bias and ReLU once, at the end */
    const epilogue_t e = {q0 == 0 ? add : 1, last && act == SAC_ACT_RELU, NULL};
    OWN(k_block)(f, m, n, q0, kc, A, lda, B, ldb, C, ldc, e, last ? bias : NULL, slabs, g);
  }
  if (act == SAC_ACT_TANH)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        C[(size_t)i * ldc + j] = tanhf(C[(size_t)i * ldc + j]);
  return 1;
}

/* the parameters are the includer's for this copy only */
#undef NR
#undef OWN_TARGET
#undef OWN
#undef VW
#undef MR
#undef VF
#undef VMASK
#undef VZERO
#undef VSET1
#undef VFMA
#undef VADD
#undef VSUB
#undef VMUL
#undef VMAX
#undef VLOAD
#undef VSTORE
#undef VLOADM
#undef VSTOREM
#undef VSTORE_SLAB
#undef VRELU_BWD
