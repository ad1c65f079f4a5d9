/* A SampleBatch read in place and copied out once, checked as it is copied (see
 * common/wire_view.h). The reader walks the protobuf encoding of the Envelope and its
 * SampleBatch by hand, keeping pointers into the message for the bytes fields; the copy
 * is one pass per array that stores each float and folds its check into the same loop. */
#include "common/wire_view.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "common/error.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- the protobuf reader ---- */

typedef struct {
  const unsigned char *p, *end;
} rd_t;

/* A varint of at most 10 bytes into *v; 0 or -1 (truncated, over-long, over 64 bits). */
static int rd_varint(rd_t *r, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 10; i++) {
    if (r->p >= r->end)
      return -1;
    unsigned char b = *r->p++;
    if (i == 9 && b > 1)
      return -1;
    x |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* A length-delimited field's bytes; 0 or -1. */
static int rd_bytes(rd_t *r, const unsigned char **p, size_t *len) {
  uint64_t n;
  if (rd_varint(r, &n) || n > (uint64_t)(r->end - r->p))
    return -1;
  *p = r->p;
  *len = (size_t)n;
  r->p += n;
  return 0;
}

/* Skips a field of wire type wt (not a group); 0 or -1. */
static int rd_skip(rd_t *r, unsigned wt) {
  uint64_t v;
  const unsigned char *p;
  size_t n;
  switch (wt) {
  case 0:
    return rd_varint(r, &v);
  case 1:
  case 5:
    n = wt == 1 ? 8 : 4;
    if ((size_t)(r->end - r->p) < n)
      return -1;
    r->p += n;
    return 0;
  case 2:
    return rd_bytes(r, &p, &n);
  default:
    return -1;
  }
}

/* SampleBatch field numbers (proto/sac.proto) */
enum {
  F_REQUEST_ID = 1,
  F_N,
  F_OBS_DIM,
  F_ACT_DIM,
  F_OBS,
  F_ACTION,
  F_REWARD,
  F_TERMINATED,
  F_NEXT_OBS,
  F_INDICES,
  F_WEIGHTS,
  F_SHARD_ID,
  F_ERROR,
  F_PRECISION,
  F_BATCHES,
  F_LAST = F_BATCHES
};

/* The SampleBatch's fields into v and the bytes fields' lengths into blen; -1 on
 * anything the view does not take (a field twice, a wrong wire type, an error string). */
static int read_batch(rd_t *r, sac_wire_sample_view_t *v, size_t blen[F_LAST + 1]) {
  uint32_t seen = 0;
  while (r->p < r->end) {
    uint64_t key, x;
    if (rd_varint(r, &key) || key >> 32)
      return -1;
    unsigned f = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
    if (f == 0)
      return -1;
    if (f > F_LAST) { /* a field of a newer schema: skipped, as protobuf-c does */
      if (rd_skip(r, wt))
        return -1;
      continue;
    }
    if (seen & (1u << f))
      return -1;
    seen |= 1u << f;
    int is_bytes = f >= F_OBS && f <= F_WEIGHTS;
    if (is_bytes || f == F_ERROR) {
      const unsigned char *p;
      if (wt != 2 || rd_bytes(r, &p, &blen[f]))
        return -1;
      const unsigned char **dst[] = {&v->obs,      &v->action,  &v->reward, &v->terminated,
                                     &v->next_obs, &v->indices, &v->weights};
      if (is_bytes)
        *dst[f - F_OBS] = p;
      else if (blen[f] != 0)
        return -1;
      continue;
    }
    if (wt != 0 || rd_varint(r, &x))
      return -1;
    if (f == F_REQUEST_ID) {
      v->request_id = x;
      continue;
    }
    if (x > UINT32_MAX || (f == F_PRECISION && x != 0)) /* fp16 rows: the decoder converts them */
      return -1;
    if (f == F_PRECISION)
      continue;
    uint32_t *u32[] = {&v->n, &v->obs_dim, &v->act_dim};
    if (f == F_SHARD_ID)
      v->shard_id = (uint32_t)x;
    else if (f == F_BATCHES)
      v->batches = (uint32_t)x;
    else
      *u32[f - F_N] = (uint32_t)x;
  }
  return 0;
}

/* The header and the lengths, as sac_wire_decode checks them. */
static int header_ok(const sac_wire_sample_view_t *v, const sac_wire_limits_t *lim,
                     const size_t blen[F_LAST + 1]) {
  const uint64_t n = v->n, od = v->obs_dim, ad = v->act_dim;
  const uint32_t max_rows = lim->max_rows ? lim->max_rows : 65536u;
  if (n == 0 || n > max_rows || v->shard_id >= SAC_WIRE_MAX_SHARDS || (v->batches > 1 && n % v->batches))
    return 0;
  if (od == 0 || ad == 0 || od > 65536 || ad > 65536 || (lim->obs_dim && od != lim->obs_dim) ||
      (lim->act_dim && ad != lim->act_dim))
    return 0;
  return blen[F_OBS] == n * od * 4 && blen[F_NEXT_OBS] == n * od * 4 && blen[F_ACTION] == n * ad * 4 &&
         blen[F_REWARD] == n * 4 && blen[F_TERMINATED] == n * 4 && blen[F_INDICES] == n * 8 &&
         blen[F_WEIGHTS] == n * 4;
}

int sac_wire_sample_view(const void *buf, size_t len, const sac_wire_limits_t *lim,
                         sac_wire_sample_view_t *out) {
  static const sac_wire_limits_t no_limits;
  if (!lim)
    lim = &no_limits;
  memset(out, 0, sizeof *out);
  size_t max = lim->max_msg_bytes ? lim->max_msg_bytes : SAC_WIRE_DEFAULT_MAX_MSG;
  if (!buf || len > max)
    return SAC_EAGAIN;
  rd_t r = {buf, (const unsigned char *)buf + len};
  const unsigned char *body = NULL;
  size_t body_len = 0;
  int have_protocol = 0;
  while (r.p < r.end) {
    uint64_t key, x;
    if (rd_varint(&r, &key) || key >> 32)
      return SAC_EAGAIN;
    unsigned f = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
    if (f == 1 && wt == 0 && !have_protocol) {
      if (rd_varint(&r, &x) || x != SAC_PROTOCOL_VERSION)
        return SAC_EAGAIN;
      have_protocol = 1;
    } else if (f == 13 && wt == 2 && !body) {
      if (rd_bytes(&r, &body, &body_len))
        return SAC_EAGAIN;
    } else if (f == 0 || f == 1 || (f >= 10 && f <= 20)) { /* another body, or a field twice */
      return SAC_EAGAIN;
    } else if (rd_skip(&r, wt)) {
      return SAC_EAGAIN;
    }
  }
  if (!have_protocol || !body)
    return SAC_EAGAIN;
  size_t blen[F_LAST + 1] = {0};
  rd_t b = {body, body + body_len};
  if (read_batch(&b, out, blen) || !header_ok(out, lim, blen))
    return SAC_EAGAIN;
  return 0;
}

/* ---- the copy that checks ---- */

/* Which of the n f32 at src (unaligned bytes) are not finite (exponent all ones), OR-ed
 * into the return value, copying them to dst on the way (dst NULL: not stored). With SSE2
 * four at a time: the learner takes in 11,000 floats a batch this way, and the scalar loop
 * (about 6 instructions a float) was most of its CPU per update. */
static uint32_t copy_check(float *restrict dst, const unsigned char *restrict src, size_t n) {
  uint32_t bad = 0;
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i expo = _mm_set1_epi32(0x7f800000);
  __m128i acc = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * i));
    if (dst)
      _mm_storeu_si128((__m128i *)(void *)(dst + i), x);
    acc = _mm_or_si128(acc, _mm_cmpeq_epi32(_mm_and_si128(x, expo), expo));
  }
  bad = (uint32_t)_mm_movemask_epi8(acc);
#endif
  for (; i < n; i++) {
    uint32_t x;
    memcpy(&x, src + 4 * i, 4);
    if (dst)
      memcpy(dst + i, &x, 4);
    bad |= (uint32_t)((x & 0x7f800000u) == 0x7f800000u);
  }
  return bad;
}

/* dst = src (n f32, unaligned bytes; dst NULL: not stored); returns 1 when one is not
 * finite, and sets *far when max > 0 and one is over max in magnitude. */
static int copy_finite(float *restrict dst, const unsigned char *restrict src, size_t n, float max,
                       int *far) {
  const uint32_t bad = copy_check(dst, src, n);
  if (max > 0.0f && !bad) { /* rare (a shard with a configured range): a second look */
    for (size_t i = 0; i < n; i++) {
      float f;
      memcpy(&f, src + 4 * i, 4);
      *far |= !(fabsf(f) <= max);
    }
  }
  return bad != 0;
}

/* terminated, weights and indices, row by row, into dst; the reason of the first bad row
 * (as sac_wire_decode's row loop), or SAC_WIRE_R_NONE. */
static sac_wire_reason_t copy_rows(const sac_wire_sample_view_t *v, const sac_wire_sample_dst_t *dst) {
  const size_t n = v->n;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float t;
    uint64_t idx;
    memcpy(&t, v->terminated + 4 * i, 4);
    memcpy(&idx, v->indices + 8 * i, 8);
    if (dst->terminated)
      dst->terminated[i] = t;
    if (dst->indices)
      dst->indices[i] = idx;
    bad |= (uint32_t)(t != 0.0f && t != 1.0f) | (uint32_t)(SAC_WIRE_INDEX_SHARD(idx) != v->shard_id);
  }
  for (size_t i = 0; i < n; i++) { /* weights: stored by copy_finite; read here for their sign */
    float w;
    memcpy(&w, v->weights + 4 * i, 4);
    bad |= (uint32_t)(w < 0.0f);
  }
  if (!bad)
    return SAC_WIRE_R_NONE;
  for (size_t i = 0; i < n; i++) { /* which row, and why, in decode's order */
    float t, w;
    uint64_t idx;
    memcpy(&t, v->terminated + 4 * i, 4);
    memcpy(&w, v->weights + 4 * i, 4);
    memcpy(&idx, v->indices + 8 * i, 8);
    if (t != 0.0f && t != 1.0f)
      return SAC_WIRE_R_FLAG;
    if (w < 0.0f)
      return SAC_WIRE_R_VALUE;
    if (SAC_WIRE_INDEX_SHARD(idx) != v->shard_id)
      return SAC_WIRE_R_INDEX;
  }
  return SAC_WIRE_R_NONE;
}

int sac_wire_sample_copy(const sac_wire_sample_view_t *v, const sac_wire_limits_t *lim,
                         const sac_wire_sample_dst_t *dst, sac_wire_reason_t *reason) {
  static const sac_wire_limits_t no_limits;
  sac_wire_reason_t dummy;
  if (!reason)
    reason = &dummy;
  if (!lim)
    lim = &no_limits;
  const size_t n = v->n, no = n * v->obs_dim, na = n * v->act_dim;
  const float max = lim->max_abs_value;
  /* in sac_wire_decode's order: the rows' obs, next_obs, action (finite, then in range),
   * then reward and weights (finite, then the reward in range), then row by row */
  int far = 0, nonfinite = 0, far_r = 0, nonfinite_r = 0, no_range = 0;
  nonfinite |= copy_finite(dst->obs, v->obs, no, max, &far);
  nonfinite |= copy_finite(dst->next_obs, v->next_obs, no, max, &far);
  nonfinite |= copy_finite(dst->action, v->action, na, max, &far);
  nonfinite_r |= copy_finite(dst->reward, v->reward, n, max, &far_r);
  nonfinite_r |= copy_finite(dst->weights, v->weights, n, 0.0f, &no_range); /* weights: finite only */
  *reason = SAC_WIRE_R_NONE;
  if (nonfinite || (!far && nonfinite_r)) {
    *reason = SAC_WIRE_R_NONFINITE;
    return SAC_ENONFINITE;
  }
  if (far || far_r) {
    *reason = SAC_WIRE_R_RANGE;
    return SAC_EINVAL;
  }
  sac_wire_reason_t why = copy_rows(v, dst);
  if (why != SAC_WIRE_R_NONE) {
    *reason = why;
    return SAC_EINVAL;
  }
  return 0;
}

/* ---- the writer ---- */

/* Writes (w->p not NULL) or only counts (w->p NULL) the encoding, field by field in the
 * order protobuf-c packs them: by field number, zero scalars and empty bytes left out
 * (proto3). */
typedef struct {
  unsigned char *p; /* NULL: count only */
  size_t at;
} wr_t;

static void wr_varint(wr_t *w, uint64_t v) {
  do {
    unsigned char b = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (v)
      b |= 0x80;
    if (w->p)
      w->p[w->at] = b;
    w->at++;
  } while (v);
}

static void wr_uint(wr_t *w, unsigned field, uint64_t v) {
  if (!v)
    return;
  wr_varint(w, (uint64_t)field << 3);
  wr_varint(w, v);
}

/* A bytes field's key and length; returns where its len bytes go (the caller's). */
static size_t wr_bytes(wr_t *w, unsigned field, size_t len) {
  wr_varint(w, (uint64_t)field << 3 | 2);
  wr_varint(w, len);
  size_t at = w->at;
  w->at += len;
  return at;
}

static void wr_batch(wr_t *w, const sac_wire_sample_batch_t *h, sac_wire_sample_layout_t *l) {
  const size_t n = h->n, es = h->precision == SAC_WIRE_F16 ? 2 : 4;
  wr_uint(w, F_REQUEST_ID, h->request_id);
  wr_uint(w, F_N, h->n);
  wr_uint(w, F_OBS_DIM, h->obs_dim);
  wr_uint(w, F_ACT_DIM, h->act_dim);
  l->obs = wr_bytes(w, F_OBS, n * h->obs_dim * es);
  l->action = wr_bytes(w, F_ACTION, n * h->act_dim * es);
  l->reward = wr_bytes(w, F_REWARD, n * 4);
  l->terminated = wr_bytes(w, F_TERMINATED, n * 4);
  l->next_obs = wr_bytes(w, F_NEXT_OBS, n * h->obs_dim * es);
  l->indices = wr_bytes(w, F_INDICES, n * 8);
  l->weights = wr_bytes(w, F_WEIGHTS, n * 4);
  wr_uint(w, F_SHARD_ID, h->shard_id);
  wr_uint(w, F_PRECISION, h->precision);
  wr_uint(w, F_BATCHES, h->batches);
}

/* The Envelope: its protocol, then the SampleBatch (field 13) of body_len bytes; the
 * arrays' offsets in l count from the Envelope's first byte. */
static void wr_envelope(wr_t *w, const sac_wire_sample_batch_t *h, size_t body_len,
                        sac_wire_sample_layout_t *l) {
  wr_uint(w, 1, SAC_PROTOCOL_VERSION);
  wr_varint(w, 13u << 3 | 2);
  wr_varint(w, body_len);
  wr_batch(w, h, l);
}

/* The body's length: the SampleBatch alone, counted. */
static size_t body_length(const sac_wire_sample_batch_t *h) {
  sac_wire_sample_layout_t scratch;
  wr_t body = {NULL, 0};
  wr_batch(&body, h, &scratch);
  return body.at;
}

int sac_wire_sample_layout(const sac_wire_sample_batch_t *hdr, sac_wire_sample_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (hdr->n == 0 || hdr->obs_dim == 0 || hdr->act_dim == 0 ||
      (hdr->precision != SAC_WIRE_F32 && hdr->precision != SAC_WIRE_F16))
    return SAC_EINVAL;
  wr_t all = {NULL, 0};
  wr_envelope(&all, hdr, body_length(hdr), out);
  out->len = all.at;
  return 0;
}

void sac_wire_sample_put_header(void *buf, const sac_wire_sample_batch_t *hdr,
                                const sac_wire_sample_layout_t *l) {
  sac_wire_sample_layout_t again;
  wr_t w = {buf, 0};
  wr_envelope(&w, hdr, body_length(hdr), &again);
  assert(w.at == l->len && again.obs == l->obs && again.weights == l->weights);
  (void)l;
}
