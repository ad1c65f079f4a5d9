/* The wire codec (see wire.h). protobuf-c parses into a per-decoder bump arena (so a
 * decode allocates nothing from the heap and its views live until the next decode);
 * then every field is checked against the declared dimensions and the receiver's
 * limits before a view is handed out. Encoding builds protobuf-c structs on the stack
 * that point at the caller's arrays and packs them into the caller's buffer. Both ways
 * are one static function per message type (decode_<type>, build_<type>) behind a
 * dispatch on the type. */
#include "common/wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "proto/sac.pb-c.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sacfleet's wire codec assumes a little-endian host"
#endif

#define MAX_STRING 1024u

/* ---------------------------------------------------------------- reasons */

const char *sac_wire_reason_str(sac_wire_reason_t r) {
  switch (r) {
#define SAC__WIRE_REASON_STR(name, msg)                                                                      \
  case SAC_WIRE_R_##name:                                                                                    \
    return msg;
    SAC_WIRE_REASON_MAP(SAC__WIRE_REASON_STR)
#undef SAC__WIRE_REASON_STR
  default:
    return "unknown reason";
  }
}

const char *sac_wire_reason_name(sac_wire_reason_t r) {
  static const char *names[] = {"none",         "too_big", "malformed", "version",  "no_body", "unexpected",
                                "dims",         "length",  "nonfinite", "rows",     "flag",    "env_id",
                                "episode_ends", "tail",    "index",     "value",    "frames",  "window",
                                "session",      "busy",    "range",     "sequence", "actors"};
  _Static_assert(sizeof names / sizeof names[0] == SAC_WIRE_R_COUNT, "reason names");
  if ((unsigned)r >= SAC_WIRE_R_COUNT)
    return "unknown";
  return names[r];
}

/* ---------------------------------------------------------------- arena */

struct sac_wire_decoder {
  unsigned char *mem;
  size_t cap, used;
  size_t max_msg;
  ProtobufCAllocator alloc;
  Sac__Envelope *env; /* last unpacked envelope (arena memory) */
};

static void *arena_alloc(void *ud, size_t size) {
  sac_wire_decoder_t *d = ud;
  size_t at = (d->used + 15u) & ~(size_t)15u;
  if (size > d->cap || at > d->cap - size)
    return NULL;
  d->used = at + size;
  return d->mem + at;
}

static void arena_free(void *ud, void *p) {
  (void)ud;
  (void)p;
}

sac_wire_decoder_t *sac_wire_decoder_new(size_t max_msg_bytes) {
  if (max_msg_bytes == 0)
    max_msg_bytes = SAC_WIRE_DEFAULT_MAX_MSG;
  sac_wire_decoder_t *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  /* Parsed bytes fields take at most the message length; structs, the episode array
   * and the validation scratch (at most ~2.3x the message) fit in the rest. A message
   * that needs more (e.g. tens of thousands of empty sub-messages) is rejected. */
  d->cap = 4 * max_msg_bytes + 65536;
  d->mem = malloc(d->cap);
  if (!d->mem) {
    free(d);
    return NULL;
  }
  d->max_msg = max_msg_bytes;
  d->alloc.alloc = arena_alloc;
  d->alloc.free = arena_free;
  d->alloc.allocator_data = d;
  return d;
}

void sac_wire_decoder_destroy(sac_wire_decoder_t **dp) {
  if (!dp || !*dp)
    return;
  free((*dp)->mem);
  free(*dp);
  *dp = NULL;
}

/* ---------------------------------------------------------------- helpers */

static int all_finite(const float *p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, p + i, 4);
    bad |= (uint32_t)((x & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

/* 1 when every value is finite and |x| <= max (max > 0; 0: finite only). NaN fails
 * the comparison, so one pass checks both. */
static int all_within(const float *p, size_t n, float max) {
  if (max <= 0.0f)
    return 1;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint32_t) !(fabsf(p[i]) <= max);
  return bad == 0;
}

/* binary16: 1 when no value is Inf or NaN (exponent all ones). */
static int all_finite16(const uint16_t *p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint32_t)((p[i] & 0x7c00u) == 0x7c00u);
  return bad == 0;
}

/* binary16 as all_within (finite halves assumed: checked first). */
static int all_within16(const uint16_t *p, size_t n, float max) {
  if (max <= 0.0f)
    return 1;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint32_t) !(fabsf(sac_wire_f16_to_f32(p[i])) <= max);
  return bad == 0;
}

static int all_01(const uint8_t *p, size_t n) {
  uint8_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint8_t)(p[i] & 0xFEu);
  return bad == 0;
}

#define REJECT(code, why)                                                                                    \
  do {                                                                                                       \
    *reason = (why);                                                                                         \
    return (code);                                                                                           \
  } while (0)

static uint32_t lim_max_rows(const sac_wire_limits_t *l) { return l->max_rows ? l->max_rows : 65536u; }
static uint32_t lim_max_env(const sac_wire_limits_t *l) { return l->max_env_id ? l->max_env_id : (1u << 20); }

/* Checks that a bytes field holds exactly `count` elements of `esize` bytes. */
static int len_is(const ProtobufCBinaryData *b, uint64_t count, uint64_t esize) {
  return (uint64_t)b->len == count * esize;
}

static int string_ok(const char *s) { return s == NULL || strlen(s) <= MAX_STRING; }

/* Open-addressing map env_id -> (last row, has tail) over scratch memory; the
 * transitions check needs it to match tails to envs. */
typedef struct {
  uint32_t env;
  uint32_t row; /* last row of env + 1 (0: empty); bit 31: has a tail */
} env_slot_t;

static uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

static env_slot_t *env_find(env_slot_t *t, uint32_t mask, uint32_t env, int insert) {
  for (uint32_t h = hash32(env) & mask, probes = 0; probes <= mask; h = (h + 1) & mask, probes++) {
    if (t[h].row == 0) {
      if (!insert)
        return NULL;
      t[h].env = env;
      return &t[h];
    }
    if (t[h].env == env)
      return &t[h];
  }
  return NULL;
}

/* ---------------------------------------------------------------- validation of views */

static int check_transitions(sac_wire_decoder_t *d, const sac_wire_transitions_t *t,
                             const sac_wire_limits_t *lim, sac_wire_reason_t *reason) {
  if (t->n == 0 || t->n > lim_max_rows(lim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (t->obs_dim == 0 || t->act_dim == 0 || t->obs_dim > 65536 || t->act_dim > 65536)
    REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
  if ((lim->obs_dim && t->obs_dim != lim->obs_dim) || (lim->act_dim && t->act_dim != lim->act_dim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
  if (t->seq == 0)
    REJECT(SAC_EINVAL, SAC_WIRE_R_WINDOW);
  /* every seq <= acked_through was acknowledged to the sender, so the batch it sends
   * (not acknowledged yet) is above it */
  if (t->acked_through >= t->seq)
    REJECT(SAC_EINVAL, SAC_WIRE_R_SEQUENCE);
  if (t->n_next > t->n || t->n_tail > t->n || t->n_episodes > t->n)
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (!t->env_ids || !t->obs || !t->action || !t->reward || !t->terminated || !t->truncated ||
      (t->n_next && (!t->next_obs_rows || !t->next_obs)) ||
      (t->n_tail && (!t->tail_env_ids || !t->tail_obs)) || (t->n_episodes && !t->episodes))
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  const size_t n = t->n, od = t->obs_dim, ad = t->act_dim;
  uint32_t max_env = lim_max_env(lim);
  for (size_t i = 0; i < n; i++)
    if (t->env_ids[i] >= max_env)
      REJECT(SAC_EINVAL, SAC_WIRE_R_ENV_ID);
  if (!all_01(t->terminated, n) || !all_01(t->truncated, n))
    REJECT(SAC_EINVAL, SAC_WIRE_R_FLAG);
  if (!all_finite(t->obs, n * od) || !all_finite(t->action, n * ad) || !all_finite(t->reward, n) ||
      !all_finite(t->next_obs ? t->next_obs : t->obs, t->next_obs ? (size_t)t->n_next * od : 0) ||
      !all_finite(t->tail_obs ? t->tail_obs : t->obs, t->tail_obs ? (size_t)t->n_tail * od : 0))
    REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  const float mx = lim->max_abs_value;
  if (!all_within(t->obs, n * od, mx) || !all_within(t->action, n * ad, mx) ||
      !all_within(t->reward, n, mx) ||
      (t->next_obs && !all_within(t->next_obs, (size_t)t->n_next * od, mx)) ||
      (t->tail_obs && !all_within(t->tail_obs, (size_t)t->n_tail * od, mx)))
    REJECT(SAC_EINVAL, SAC_WIRE_R_RANGE);
  /* next_obs rows: strictly increasing, exactly the ended rows */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int ended = t->terminated[i] | t->truncated[i];
    int listed = k < t->n_next && t->next_obs_rows[k] == i;
    if (ended != listed)
      REJECT(SAC_EINVAL, SAC_WIRE_R_EPISODE_ENDS);
    k += (size_t)listed;
  }
  if (k != t->n_next)
    REJECT(SAC_EINVAL, SAC_WIRE_R_EPISODE_ENDS);
  for (size_t e = 0; e < t->n_episodes; e++) {
    if (t->episodes[e].env_id >= max_env)
      REJECT(SAC_EINVAL, SAC_WIRE_R_ENV_ID);
    if (!isfinite(t->episodes[e].episode_return))
      REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  }
  /* tails: each for an env of the batch, at most one per env, and one for every env
   * whose last row did not end an episode */
  uint32_t size = 16;
  while (size < 2 * n)
    size <<= 1;
  size_t saved = d->used;
  env_slot_t *tab = arena_alloc(d, (size_t)size * sizeof *tab);
  if (!tab)
    REJECT(SAC_ETOOBIG, SAC_WIRE_R_ROWS);
  memset(tab, 0, (size_t)size * sizeof *tab);
  int rc = 0;
  for (uint32_t i = 0; i < n; i++) {
    env_slot_t *s = env_find(tab, size - 1, t->env_ids[i], 1);
    s->row = i + 1;
  }
  for (uint32_t j = 0; j < t->n_tail && rc == 0; j++) {
    env_slot_t *s = env_find(tab, size - 1, t->tail_env_ids[j], 0);
    if (!s || (s->row & 0x80000000u)) {
      rc = SAC_EINVAL;
      break;
    }
    s->row |= 0x80000000u;
  }
  for (uint32_t h = 0; h < size && rc == 0; h++) {
    if (tab[h].row == 0 || (tab[h].row & 0x80000000u))
      continue;
    uint32_t last = tab[h].row - 1;
    if (!(t->terminated[last] | t->truncated[last]))
      rc = SAC_EINVAL;
  }
  d->used = saved;
  if (rc)
    REJECT(rc, SAC_WIRE_R_TAIL);
  return 0;
}

/* A sample batch's obs, action and next_obs in f32: present, finite, within range. */
static int check_sample_rows32(const sac_wire_sample_batch_t *b, const sac_wire_limits_t *lim,
                               sac_wire_reason_t *reason) {
  size_t no = (size_t)b->n * b->obs_dim, na = (size_t)b->n * b->act_dim;
  if (!b->obs || !b->action || !b->next_obs)
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  if (!all_finite(b->obs, no) || !all_finite(b->next_obs, no) || !all_finite(b->action, na))
    REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  if (!all_within(b->obs, no, lim->max_abs_value) || !all_within(b->next_obs, no, lim->max_abs_value) ||
      !all_within(b->action, na, lim->max_abs_value))
    REJECT(SAC_EINVAL, SAC_WIRE_R_RANGE);
  return 0;
}

/* The same in binary16: the f32 views must be NULL (one dtype per batch). */
static int check_sample_rows16(const sac_wire_sample_batch_t *b, const sac_wire_limits_t *lim,
                               sac_wire_reason_t *reason) {
  size_t no = (size_t)b->n * b->obs_dim, na = (size_t)b->n * b->act_dim;
  if (!b->obs16 || !b->action16 || !b->next_obs16 || b->obs || b->action || b->next_obs)
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  if (!all_finite16(b->obs16, no) || !all_finite16(b->next_obs16, no) || !all_finite16(b->action16, na))
    REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  if (!all_within16(b->obs16, no, lim->max_abs_value) ||
      !all_within16(b->next_obs16, no, lim->max_abs_value) ||
      !all_within16(b->action16, na, lim->max_abs_value))
    REJECT(SAC_EINVAL, SAC_WIRE_R_RANGE);
  return 0;
}

static int check_sample_batch(const sac_wire_sample_batch_t *b, const sac_wire_limits_t *lim,
                              sac_wire_reason_t *reason) {
  if (!string_ok(b->error))
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  if (b->shard_id >= SAC_WIRE_MAX_SHARDS)
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  if (b->n == 0) {
    if (b->error && b->error[0])
      return 0;
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  }
  if (b->n > lim_max_rows(lim) || (b->batches > 1 && b->n % b->batches != 0))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (b->obs_dim == 0 || b->act_dim == 0 || b->obs_dim > 65536 || b->act_dim > 65536 ||
      (lim->obs_dim && b->obs_dim != lim->obs_dim) || (lim->act_dim && b->act_dim != lim->act_dim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
  if (b->precision != SAC_WIRE_F32 && b->precision != SAC_WIRE_F16)
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  if (!b->reward || !b->terminated || !b->indices || !b->weights)
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  size_t n = b->n;
  int rc = b->precision == SAC_WIRE_F16 ? check_sample_rows16(b, lim, reason)
                                        : check_sample_rows32(b, lim, reason);
  if (rc)
    return rc;
  if (!all_finite(b->reward, n) || !all_finite(b->weights, n))
    REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  if (!all_within(b->reward, n, lim->max_abs_value))
    REJECT(SAC_EINVAL, SAC_WIRE_R_RANGE);
  for (size_t i = 0; i < n; i++) {
    if (b->terminated[i] != 0.0f && b->terminated[i] != 1.0f)
      REJECT(SAC_EINVAL, SAC_WIRE_R_FLAG);
    if (b->weights[i] < 0.0f)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    if (SAC_WIRE_INDEX_SHARD(b->indices[i]) != b->shard_id)
      REJECT(SAC_EINVAL, SAC_WIRE_R_INDEX);
  }
  return 0;
}

static int check_priority_update(const sac_wire_priority_update_t *p, const sac_wire_limits_t *lim,
                                 sac_wire_reason_t *reason) {
  if (p->n == 0 || p->n > lim_max_rows(lim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (!p->indices || !p->priorities)
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  if (!all_finite(p->priorities, p->n))
    REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  for (uint32_t i = 0; i < p->n; i++)
    if (p->priorities[i] < 0.0f)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  return 0;
}

static size_t dtype_size(sac_wire_dtype_t t) {
  switch (t) {
  case SAC_WIRE_F32:
    return 4;
  case SAC_WIRE_F16:
  case SAC_WIRE_BF16:
    return 2;
  case SAC_WIRE_I8:
    return 1;
  }
  return 0;
}

static int check_weights(const sac_wire_weights_t *w, const sac_wire_limits_t *lim,
                         sac_wire_reason_t *reason) {
  uint32_t max_layers = lim->max_layers ? lim->max_layers : 64u;
  uint32_t max_dim = lim->max_layer_dim ? lim->max_layer_dim : 65536u;
  size_t es = dtype_size(w->dtype);
  if (es == 0)
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  if (w->n_layers == 0 || w->n_layers > max_layers || !w->layers)
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  uint64_t elems = 0;
  for (uint32_t i = 0; i < w->n_layers; i++) {
    const sac_wire_layer_t *l = &w->layers[i];
    if (l->n_in == 0 || l->n_out == 0 || l->n_in > max_dim || l->n_out > max_dim)
      REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
    if (i > 0 && w->layers[i - 1].n_out != l->n_in)
      REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
    if (l->activation > 2)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    elems += (uint64_t)l->n_in * l->n_out + l->n_out;
  }
  if (elems * es != (uint64_t)w->data_len || (w->data_len && !w->data))
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  if (w->dtype == SAC_WIRE_F32) {
    if (!all_finite(w->data, (size_t)elems))
      REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
  } else if (w->dtype == SAC_WIRE_F16 || w->dtype == SAC_WIRE_BF16) {
    uint16_t mask = w->dtype == SAC_WIRE_F16 ? 0x7c00u : 0x7f80u;
    const unsigned char *p = w->data;
    for (size_t i = 0; i < elems; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      if ((h & mask) == mask)
        REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
    }
  } else if (!(isfinite(w->scale) && w->scale > 0.0f)) {
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  }
  return 0;
}

int sac_wire_validate(sac_wire_decoder_t *d, const sac_wire_msg_t *m, const sac_wire_limits_t *lim,
                      sac_wire_reason_t *reason) {
  sac_wire_reason_t dummy;
  static const sac_wire_limits_t no_limits;
  if (!reason)
    reason = &dummy;
  if (!lim)
    lim = &no_limits;
  *reason = SAC_WIRE_R_NONE;
  if (lim->accept_mask && !(lim->accept_mask & SAC_WIRE_ACCEPT(m->type)))
    REJECT(SAC_EPROTO, SAC_WIRE_R_UNEXPECTED);
  switch (m->type) {
  case SAC_WIRE_TRANSITIONS:
    if (!d)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return check_transitions(d, &m->u.transitions, lim, reason);
  case SAC_WIRE_ACK:
    if (!string_ok(m->u.ack.error))
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return 0;
  case SAC_WIRE_SAMPLE_REQUEST: {
    const sac_wire_sample_request_t *r = &m->u.sample_request;
    if (r->batch_size == 0 || r->batch_size > lim_max_rows(lim) ||
        (uint64_t)r->batch_size * (r->batches > 1 ? r->batches : 1) > lim_max_rows(lim))
      REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
    if (!isfinite(r->beta))
      REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
    if (r->beta < 0.0f || r->beta > 1.0f || r->timeout_ms > 600000u ||
        (r->precision != SAC_WIRE_F32 && r->precision != SAC_WIRE_F16))
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return 0;
  }
  case SAC_WIRE_SAMPLE_BATCH:
    return check_sample_batch(&m->u.sample_batch, lim, reason);
  case SAC_WIRE_PRIORITY_UPDATE:
    return check_priority_update(&m->u.priority_update, lim, reason);
  case SAC_WIRE_WEIGHTS:
    return check_weights(&m->u.weights, lim, reason);
  case SAC_WIRE_HELLO: {
    const sac_wire_hello_t *h = &m->u.hello;
    if (!string_ok(h->version) || !h->role ||
        (strcmp(h->role, "actor") && strcmp(h->role, "learner") && strcmp(h->role, "replay")))
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return 0;
  }
  case SAC_WIRE_HEARTBEAT:
  case SAC_WIRE_INFO_REQUEST:
    return 0;
  case SAC_WIRE_SHARD_INFO: {
    const sac_wire_shard_info_t *s = &m->u.shard_info;
    if (!isfinite(s->bytes_per_transition) || !isfinite(s->episode_return_sum))
      REJECT(SAC_ENONFINITE, SAC_WIRE_R_NONFINITE);
    if (s->shard_id >= SAC_WIRE_MAX_SHARDS || s->size > s->capacity || s->bytes_per_transition < 0)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return 0;
  }
  case SAC_WIRE_LEARNER_INFO:
    if (m->u.learner_info.world == 0 || m->u.learner_info.rank >= m->u.learner_info.world)
      REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
    return 0;
  case SAC_WIRE_NONE:
  default:
    REJECT(SAC_EPROTO, SAC_WIRE_R_NO_BODY);
  }
}

/* ---------------------------------------------------------------- decode */

/* One function per message type: the protobuf-c struct (arena memory) into the view,
 * checking the lengths the view's pointers will be read with; sac_wire_validate checks
 * the rest. Each returns 0 or a negative code with *reason set. */

static int decode_transitions(sac_wire_decoder_t *d, const Sac__TransitionBatch *p,
                              const sac_wire_limits_t *lim, sac_wire_transitions_t *t,
                              sac_wire_reason_t *reason) {
  t->actor_id = p->actor_id;
  t->seq = p->seq;
  t->session = p->session;
  t->acked_through = p->acked_through;
  t->policy_version = p->policy_version;
  t->n = p->n;
  t->obs_dim = p->obs_dim;
  t->act_dim = p->act_dim;
  uint64_t n = p->n, od = p->obs_dim, ad = p->act_dim;
  if (n == 0 || n > lim_max_rows(lim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (od == 0 || ad == 0 || od > 65536 || ad > 65536 || (lim->obs_dim && od != lim->obs_dim) ||
      (lim->act_dim && ad != lim->act_dim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
  if (!len_is(&p->env_ids, n, 4) || !len_is(&p->obs, n * od, 4) || !len_is(&p->action, n * ad, 4) ||
      !len_is(&p->reward, n, 4) || !len_is(&p->terminated, n, 1) || !len_is(&p->truncated, n, 1) ||
      p->next_obs_rows.len % 4 || p->tail_env_ids.len % 4)
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  uint64_t k = p->next_obs_rows.len / 4, m = p->tail_env_ids.len / 4;
  if (k > n || m > n || p->n_episodes > n)
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (!len_is(&p->next_obs, k * od, 4) || !len_is(&p->tail_obs, m * od, 4))
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  t->env_ids = (const uint32_t *)p->env_ids.data;
  t->obs = (const float *)p->obs.data;
  t->action = (const float *)p->action.data;
  t->reward = (const float *)p->reward.data;
  t->terminated = p->terminated.data;
  t->truncated = p->truncated.data;
  t->n_next = (uint32_t)k;
  t->next_obs_rows = k ? (const uint32_t *)p->next_obs_rows.data : NULL;
  t->next_obs = k ? (const float *)p->next_obs.data : NULL;
  t->n_tail = (uint32_t)m;
  t->tail_env_ids = m ? (const uint32_t *)p->tail_env_ids.data : NULL;
  t->tail_obs = m ? (const float *)p->tail_obs.data : NULL;
  t->n_episodes = (uint32_t)p->n_episodes;
  if (p->n_episodes) {
    sac_wire_episode_t *ep = arena_alloc(d, p->n_episodes * sizeof *ep);
    if (!ep)
      REJECT(SAC_ETOOBIG, SAC_WIRE_R_ROWS);
    for (size_t i = 0; i < p->n_episodes; i++) {
      ep[i].env_id = p->episodes[i]->env_id;
      ep[i].episode_return = p->episodes[i]->episode_return;
      ep[i].length = p->episodes[i]->length;
      ep[i].truncated = p->episodes[i]->truncated != 0;
    }
    t->episodes = ep;
  }
  return 0;
}

static int decode_ack(const Sac__InsertAck *p, sac_wire_ack_t *a) {
  *a = (sac_wire_ack_t){.acked_seq = p->acked_seq,
                        .seq = p->seq,
                        .credit = p->credit,
                        .stored = p->stored,
                        .shard_id = p->shard_id,
                        .duplicate = p->duplicate != 0,
                        .error = p->error ? p->error : "",
                        .status = p->status,
                        .retry_after_ms = p->retry_after_ms};
  return 0;
}

static int decode_sample_request(const Sac__SampleRequest *p, sac_wire_sample_request_t *r) {
  *r = (sac_wire_sample_request_t){p->request_id, p->batch_size, p->beta,
                                   p->timeout_ms, p->precision,  p->batches};
  return 0;
}

static int decode_sample_batch(const Sac__SampleBatch *p, const sac_wire_limits_t *lim,
                               sac_wire_sample_batch_t *b, sac_wire_reason_t *reason) {
  b->request_id = p->request_id;
  b->n = p->n;
  b->obs_dim = p->obs_dim;
  b->act_dim = p->act_dim;
  b->shard_id = p->shard_id;
  b->error = p->error ? p->error : "";
  b->precision = p->precision;
  b->batches = p->batches;
  uint64_t n = p->n, od = p->obs_dim, ad = p->act_dim;
  if (n > lim_max_rows(lim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (n && (od == 0 || ad == 0 || od > 65536 || ad > 65536 || (lim->obs_dim && od != lim->obs_dim) ||
            (lim->act_dim && ad != lim->act_dim)))
    REJECT(SAC_EINVAL, SAC_WIRE_R_DIMS);
  if (p->precision != SAC_WIRE_F32 && p->precision != SAC_WIRE_F16)
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  size_t es = p->precision == SAC_WIRE_F16 ? 2 : 4; /* bytes per obs/action element */
  if (!len_is(&p->obs, n * od, es) || !len_is(&p->next_obs, n * od, es) || !len_is(&p->action, n * ad, es) ||
      !len_is(&p->reward, n, 4) || !len_is(&p->terminated, n, 4) || !len_is(&p->indices, n, 8) ||
      !len_is(&p->weights, n, 4))
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  if (es == 2) {
    b->obs16 = (const uint16_t *)p->obs.data;
    b->action16 = (const uint16_t *)p->action.data;
    b->next_obs16 = (const uint16_t *)p->next_obs.data;
  } else {
    b->obs = (const float *)p->obs.data;
    b->action = (const float *)p->action.data;
    b->next_obs = (const float *)p->next_obs.data;
  }
  b->reward = (const float *)p->reward.data;
  b->terminated = (const float *)p->terminated.data;
  b->indices = (const uint64_t *)p->indices.data;
  b->weights = (const float *)p->weights.data;
  return 0;
}

static int decode_priority_update(const Sac__PriorityUpdate *p, const sac_wire_limits_t *lim,
                                  sac_wire_priority_update_t *u, sac_wire_reason_t *reason) {
  if (p->n > lim_max_rows(lim))
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  if (!len_is(&p->indices, p->n, 8) || !len_is(&p->priorities, p->n, 4))
    REJECT(SAC_EINVAL, SAC_WIRE_R_LENGTH);
  *u = (sac_wire_priority_update_t){p->n, (const uint64_t *)p->indices.data,
                                    (const float *)p->priorities.data};
  return 0;
}

static int decode_weights(sac_wire_decoder_t *d, const Sac__Weights *p, const sac_wire_limits_t *lim,
                          sac_wire_weights_t *w, sac_wire_reason_t *reason) {
  uint32_t max_layers = lim->max_layers ? lim->max_layers : 64u;
  if (p->n_layers == 0 || p->n_layers > max_layers)
    REJECT(SAC_EINVAL, SAC_WIRE_R_ROWS);
  sac_wire_layer_t *ls = arena_alloc(d, p->n_layers * sizeof *ls);
  if (!ls)
    REJECT(SAC_ETOOBIG, SAC_WIRE_R_ROWS);
  for (size_t i = 0; i < p->n_layers; i++)
    ls[i] = (sac_wire_layer_t){p->layers[i]->n_in, p->layers[i]->n_out, p->layers[i]->activation};
  w->version = p->version;
  w->dtype = (sac_wire_dtype_t)p->dtype;
  if ((unsigned)p->dtype > 3u)
    REJECT(SAC_EINVAL, SAC_WIRE_R_VALUE);
  w->n_layers = (uint32_t)p->n_layers;
  w->layers = ls;
  w->data = p->data.data;
  w->data_len = p->data.len;
  w->scale = p->scale;
  w->run_total_steps = p->run_total_steps;
  w->run_steps = p->run_steps;
  w->run_over = p->run_over != 0;
  w->run_actors = p->run_actors;
  return 0;
}

static int decode_hello(const Sac__Hello *p, sac_wire_hello_t *h) {
  *h = (sac_wire_hello_t){p->role ? p->role : "", p->id, p->pid, p->version ? p->version : ""};
  return 0;
}

static int decode_shard_info(const Sac__ShardInfo *p, sac_wire_shard_info_t *s) {
  *s = (sac_wire_shard_info_t){.shard_id = p->shard_id,
                               .size = p->size,
                               .capacity = p->capacity,
                               .inserted_total = p->inserted_total,
                               .sampled_total = p->sampled_total,
                               .obs_dim = p->obs_dim,
                               .act_dim = p->act_dim,
                               .can_sample = p->can_sample != 0,
                               .snapshot_inserted_total = p->snapshot_inserted_total,
                               .snapshots_total = p->snapshots_total,
                               .bytes_per_transition = p->bytes_per_transition,
                               .rejected_total = p->rejected_total,
                               .duplicates_total = p->duplicates_total,
                               .episodes_total = p->episodes_total,
                               .episode_return_sum = p->episode_return_sum,
                               .incarnation = p->incarnation,
                               .min_size = p->min_size,
                               .actors = p->actors};
  return 0;
}

static int decode_learner_info(const Sac__LearnerInfo *p, sac_wire_learner_info_t *l) {
  *l = (sac_wire_learner_info_t){p->rank, p->world, p->policy_version, p->updates};
  return 0;
}

/* The envelope's body into out's view, by its type. */
static int decode_body(sac_wire_decoder_t *d, const Sac__Envelope *env, const sac_wire_limits_t *lim,
                       sac_wire_msg_t *out, sac_wire_reason_t *reason) {
  switch (env->body_case) {
  case SAC__ENVELOPE__BODY_TRANSITIONS:
    return decode_transitions(d, env->transitions, lim, &out->u.transitions, reason);
  case SAC__ENVELOPE__BODY_ACK:
    return decode_ack(env->ack, &out->u.ack);
  case SAC__ENVELOPE__BODY_SAMPLE_REQUEST:
    return decode_sample_request(env->sample_request, &out->u.sample_request);
  case SAC__ENVELOPE__BODY_SAMPLE_BATCH:
    return decode_sample_batch(env->sample_batch, lim, &out->u.sample_batch, reason);
  case SAC__ENVELOPE__BODY_PRIORITY_UPDATE:
    return decode_priority_update(env->priority_update, lim, &out->u.priority_update, reason);
  case SAC__ENVELOPE__BODY_WEIGHTS:
    return decode_weights(d, env->weights, lim, &out->u.weights, reason);
  case SAC__ENVELOPE__BODY_HELLO:
    return decode_hello(env->hello, &out->u.hello);
  case SAC__ENVELOPE__BODY_HEARTBEAT:
    out->u.heartbeat_time_ns = env->heartbeat->time_ns;
    return 0;
  case SAC__ENVELOPE__BODY_SHARD_INFO:
    return decode_shard_info(env->shard_info, &out->u.shard_info);
  case SAC__ENVELOPE__BODY_LEARNER_INFO:
    return decode_learner_info(env->learner_info, &out->u.learner_info);
  case SAC__ENVELOPE__BODY_INFO_REQUEST:
    return 0;
  case SAC__ENVELOPE__BODY__NOT_SET:
  default:
    REJECT(SAC_EPROTO, SAC_WIRE_R_NO_BODY);
  }
}

int sac_wire_decode(sac_wire_decoder_t *d, const void *buf, size_t len, const sac_wire_limits_t *lim,
                    sac_wire_msg_t *out, sac_wire_reason_t *reason) {
  static const sac_wire_limits_t no_limits;
  sac_wire_reason_t dummy;
  if (!reason)
    reason = &dummy;
  if (!lim)
    lim = &no_limits;
  *reason = SAC_WIRE_R_NONE;
  memset(out, 0, sizeof *out);
  size_t max = lim->max_msg_bytes ? lim->max_msg_bytes : SAC_WIRE_DEFAULT_MAX_MSG;
  if (max > d->max_msg)
    max = d->max_msg;
  if (len > max)
    REJECT(SAC_ETOOBIG, SAC_WIRE_R_TOO_BIG);
  d->used = 0;
  Sac__Envelope *env = sac__envelope__unpack(&d->alloc, len, buf);
  d->env = env;
  if (!env)
    REJECT(SAC_EPROTO, SAC_WIRE_R_MALFORMED);
  if (env->protocol != SAC_PROTOCOL_VERSION)
    REJECT(SAC_EVERSION, SAC_WIRE_R_VERSION);
  out->type = (sac_wire_type_t)env->body_case;
  int rc = decode_body(d, env, lim, out, reason);
  return rc ? rc : sac_wire_validate(d, out, lim, reason);
}

/* ---------------------------------------------------------------- encode */

typedef struct {
  Sac__Envelope env;
  union {
    Sac__TransitionBatch tb;
    Sac__InsertAck ack;
    Sac__SampleRequest sreq;
    Sac__SampleBatch sb;
    Sac__PriorityUpdate pu;
    Sac__Weights w;
    Sac__Hello hello;
    Sac__Heartbeat hb;
    Sac__ShardInfo si;
    Sac__LearnerInfo li;
    Sac__InfoRequest ir;
  } b;
  Sac__EpisodeEnd ep_stack[SAC_WIRE_STACK_REPEATED];
  Sac__EpisodeEnd *ep_ptr_stack[SAC_WIRE_STACK_REPEATED];
  Sac__Layer layer_stack[SAC_WIRE_STACK_REPEATED];
  Sac__Layer *layer_ptr_stack[SAC_WIRE_STACK_REPEATED];
  void *heap; /* one block when a repeated field is longer than the stack arrays */
} proto_build_t;

static ProtobufCBinaryData bin(const void *p, size_t len) {
  ProtobufCBinaryData b = {len, len ? (uint8_t *)(uintptr_t)p : NULL};
  return b;
}

static char *str(const char *s) { return (char *)(uintptr_t)(s ? s : ""); }

/* One function per message type: the protobuf-c struct of m's body, pointing at the
 * caller's arrays (a repeated field longer than the stack arrays goes in pb->heap). Each
 * returns 0, SAC_EINVAL (a count without its array) or SAC_ENOMEM. */

static int build_transitions(const sac_wire_transitions_t *t, proto_build_t *pb) {
  Sac__TransitionBatch *p = &pb->b.tb;
  sac__transition_batch__init(p);
  size_t n = t->n, od = t->obs_dim, ad = t->act_dim;
  if ((n && (!t->env_ids || !t->obs || !t->action || !t->reward || !t->terminated || !t->truncated)) ||
      (t->n_next && (!t->next_obs_rows || !t->next_obs)) ||
      (t->n_tail && (!t->tail_env_ids || !t->tail_obs)) || (t->n_episodes && !t->episodes))
    return SAC_EINVAL;
  p->actor_id = t->actor_id;
  p->seq = t->seq;
  p->session = t->session;
  p->acked_through = t->acked_through;
  p->policy_version = t->policy_version;
  p->n = t->n;
  p->obs_dim = t->obs_dim;
  p->act_dim = t->act_dim;
  p->env_ids = bin(t->env_ids, n * 4);
  p->obs = bin(t->obs, n * od * 4);
  p->action = bin(t->action, n * ad * 4);
  p->reward = bin(t->reward, n * 4);
  p->terminated = bin(t->terminated, n);
  p->truncated = bin(t->truncated, n);
  p->next_obs_rows = bin(t->next_obs_rows, (size_t)t->n_next * 4);
  p->next_obs = bin(t->next_obs, (size_t)t->n_next * od * 4);
  p->tail_env_ids = bin(t->tail_env_ids, (size_t)t->n_tail * 4);
  p->tail_obs = bin(t->tail_obs, (size_t)t->n_tail * od * 4);
  if (t->n_episodes) {
    Sac__EpisodeEnd *eps = pb->ep_stack;
    Sac__EpisodeEnd **ptrs = pb->ep_ptr_stack;
    if (t->n_episodes > SAC_WIRE_STACK_REPEATED) {
      pb->heap = malloc((size_t)t->n_episodes * (sizeof *eps + sizeof *ptrs));
      if (!pb->heap)
        return SAC_ENOMEM;
      eps = pb->heap;
      ptrs = (Sac__EpisodeEnd **)(eps + t->n_episodes);
    }
    for (uint32_t i = 0; i < t->n_episodes; i++) {
      sac__episode_end__init(&eps[i]);
      eps[i].env_id = t->episodes[i].env_id;
      eps[i].episode_return = t->episodes[i].episode_return;
      eps[i].length = t->episodes[i].length;
      eps[i].truncated = t->episodes[i].truncated != 0;
      ptrs[i] = &eps[i];
    }
    p->n_episodes = t->n_episodes;
    p->episodes = ptrs;
  }
  pb->env.body_case = SAC__ENVELOPE__BODY_TRANSITIONS;
  pb->env.transitions = p;
  return 0;
}

static int build_ack(const sac_wire_ack_t *a, proto_build_t *pb) {
  Sac__InsertAck *p = &pb->b.ack;
  sac__insert_ack__init(p);
  p->acked_seq = a->acked_seq;
  p->seq = a->seq;
  p->credit = a->credit;
  p->stored = a->stored;
  p->shard_id = a->shard_id;
  p->duplicate = a->duplicate != 0;
  p->error = str(a->error);
  p->status = a->status;
  p->retry_after_ms = a->retry_after_ms;
  pb->env.body_case = SAC__ENVELOPE__BODY_ACK;
  pb->env.ack = p;
  return 0;
}

static int build_sample_request(const sac_wire_sample_request_t *r, proto_build_t *pb) {
  Sac__SampleRequest *p = &pb->b.sreq;
  sac__sample_request__init(p);
  p->request_id = r->request_id;
  p->batch_size = r->batch_size;
  p->beta = r->beta;
  p->timeout_ms = r->timeout_ms;
  p->precision = r->precision;
  p->batches = r->batches;
  pb->env.body_case = SAC__ENVELOPE__BODY_SAMPLE_REQUEST;
  pb->env.sample_request = p;
  return 0;
}

static int build_sample_batch(const sac_wire_sample_batch_t *b, proto_build_t *pb) {
  Sac__SampleBatch *p = &pb->b.sb;
  sac__sample_batch__init(p);
  size_t n = b->n, od = b->obs_dim, ad = b->act_dim;
  const int h = b->precision == SAC_WIRE_F16;
  if (b->precision != SAC_WIRE_F32 && !h)
    return SAC_EINVAL;
  const void *obs = h ? (const void *)b->obs16 : (const void *)b->obs;
  const void *act = h ? (const void *)b->action16 : (const void *)b->action;
  const void *next = h ? (const void *)b->next_obs16 : (const void *)b->next_obs;
  size_t es = h ? 2 : 4;
  if (n && (!obs || !act || !b->reward || !b->terminated || !next || !b->indices || !b->weights))
    return SAC_EINVAL;
  p->request_id = b->request_id;
  p->n = b->n;
  p->obs_dim = b->obs_dim;
  p->act_dim = b->act_dim;
  p->shard_id = b->shard_id;
  p->precision = b->precision;
  p->batches = b->batches;
  p->obs = bin(obs, n * od * es);
  p->action = bin(act, n * ad * es);
  p->reward = bin(b->reward, n * 4);
  p->terminated = bin(b->terminated, n * 4);
  p->next_obs = bin(next, n * od * es);
  p->indices = bin(b->indices, n * 8);
  p->weights = bin(b->weights, n * 4);
  p->error = str(b->error);
  pb->env.body_case = SAC__ENVELOPE__BODY_SAMPLE_BATCH;
  pb->env.sample_batch = p;
  return 0;
}

static int build_priority_update(const sac_wire_priority_update_t *u, proto_build_t *pb) {
  Sac__PriorityUpdate *p = &pb->b.pu;
  sac__priority_update__init(p);
  if (u->n && (!u->indices || !u->priorities))
    return SAC_EINVAL;
  p->n = u->n;
  p->indices = bin(u->indices, (size_t)u->n * 8);
  p->priorities = bin(u->priorities, (size_t)u->n * 4);
  pb->env.body_case = SAC__ENVELOPE__BODY_PRIORITY_UPDATE;
  pb->env.priority_update = p;
  return 0;
}

static int build_weights(const sac_wire_weights_t *w, proto_build_t *pb) {
  Sac__Weights *p = &pb->b.w;
  sac__weights__init(p);
  if ((w->n_layers && !w->layers) || (w->data_len && !w->data))
    return SAC_EINVAL;
  p->version = w->version;
  p->dtype = (Sac__DType)w->dtype;
  p->data = bin(w->data, w->data_len);
  p->scale = w->scale;
  p->run_total_steps = w->run_total_steps;
  p->run_steps = w->run_steps;
  p->run_over = w->run_over != 0;
  p->run_actors = w->run_actors;
  if (w->n_layers) {
    Sac__Layer *ls = pb->layer_stack;
    Sac__Layer **ptrs = pb->layer_ptr_stack;
    if (w->n_layers > SAC_WIRE_STACK_REPEATED) {
      pb->heap = malloc((size_t)w->n_layers * (sizeof *ls + sizeof *ptrs));
      if (!pb->heap)
        return SAC_ENOMEM;
      ls = pb->heap;
      ptrs = (Sac__Layer **)(ls + w->n_layers);
    }
    for (uint32_t i = 0; i < w->n_layers; i++) {
      sac__layer__init(&ls[i]);
      ls[i].n_in = w->layers[i].n_in;
      ls[i].n_out = w->layers[i].n_out;
      ls[i].activation = w->layers[i].activation;
      ptrs[i] = &ls[i];
    }
    p->n_layers = w->n_layers;
    p->layers = ptrs;
  }
  pb->env.body_case = SAC__ENVELOPE__BODY_WEIGHTS;
  pb->env.weights = p;
  return 0;
}

static int build_hello(const sac_wire_hello_t *h, proto_build_t *pb) {
  Sac__Hello *p = &pb->b.hello;
  sac__hello__init(p);
  p->role = str(h->role);
  p->id = h->id;
  p->pid = h->pid;
  p->version = str(h->version);
  pb->env.body_case = SAC__ENVELOPE__BODY_HELLO;
  pb->env.hello = p;
  return 0;
}

static int build_heartbeat(uint64_t time_ns, proto_build_t *pb) {
  Sac__Heartbeat *p = &pb->b.hb;
  sac__heartbeat__init(p);
  p->time_ns = time_ns;
  pb->env.body_case = SAC__ENVELOPE__BODY_HEARTBEAT;
  pb->env.heartbeat = p;
  return 0;
}

static int build_shard_info(const sac_wire_shard_info_t *s, proto_build_t *pb) {
  Sac__ShardInfo *p = &pb->b.si;
  sac__shard_info__init(p);
  p->shard_id = s->shard_id;
  p->size = s->size;
  p->capacity = s->capacity;
  p->inserted_total = s->inserted_total;
  p->sampled_total = s->sampled_total;
  p->obs_dim = s->obs_dim;
  p->act_dim = s->act_dim;
  p->can_sample = s->can_sample != 0;
  p->snapshot_inserted_total = s->snapshot_inserted_total;
  p->snapshots_total = s->snapshots_total;
  p->bytes_per_transition = s->bytes_per_transition;
  p->rejected_total = s->rejected_total;
  p->duplicates_total = s->duplicates_total;
  p->episodes_total = s->episodes_total;
  p->episode_return_sum = s->episode_return_sum;
  p->incarnation = s->incarnation;
  p->min_size = s->min_size;
  p->actors = s->actors;
  pb->env.body_case = SAC__ENVELOPE__BODY_SHARD_INFO;
  pb->env.shard_info = p;
  return 0;
}

static int build_learner_info(const sac_wire_learner_info_t *l, proto_build_t *pb) {
  Sac__LearnerInfo *p = &pb->b.li;
  sac__learner_info__init(p);
  p->rank = l->rank;
  p->world = l->world;
  p->policy_version = l->policy_version;
  p->updates = l->updates;
  pb->env.body_case = SAC__ENVELOPE__BODY_LEARNER_INFO;
  pb->env.learner_info = p;
  return 0;
}

static int build_info_request(proto_build_t *pb) {
  Sac__InfoRequest *p = &pb->b.ir;
  sac__info_request__init(p);
  pb->env.body_case = SAC__ENVELOPE__BODY_INFO_REQUEST;
  pb->env.info_request = p;
  return 0;
}

/* Fills pb from m, by its type; pb->heap must be freed by the caller. */
static int build(const sac_wire_msg_t *m, proto_build_t *pb) {
  sac__envelope__init(&pb->env);
  pb->env.protocol = SAC_PROTOCOL_VERSION;
  pb->heap = NULL;
  switch (m->type) {
  case SAC_WIRE_TRANSITIONS:
    return build_transitions(&m->u.transitions, pb);
  case SAC_WIRE_ACK:
    return build_ack(&m->u.ack, pb);
  case SAC_WIRE_SAMPLE_REQUEST:
    return build_sample_request(&m->u.sample_request, pb);
  case SAC_WIRE_SAMPLE_BATCH:
    return build_sample_batch(&m->u.sample_batch, pb);
  case SAC_WIRE_PRIORITY_UPDATE:
    return build_priority_update(&m->u.priority_update, pb);
  case SAC_WIRE_WEIGHTS:
    return build_weights(&m->u.weights, pb);
  case SAC_WIRE_HELLO:
    return build_hello(&m->u.hello, pb);
  case SAC_WIRE_HEARTBEAT:
    return build_heartbeat(m->u.heartbeat_time_ns, pb);
  case SAC_WIRE_SHARD_INFO:
    return build_shard_info(&m->u.shard_info, pb);
  case SAC_WIRE_LEARNER_INFO:
    return build_learner_info(&m->u.learner_info, pb);
  case SAC_WIRE_INFO_REQUEST:
    return build_info_request(pb);
  case SAC_WIRE_NONE:
  default:
    return SAC_EINVAL;
  }
}

size_t sac_wire_encoded_size(const sac_wire_msg_t *m) {
  proto_build_t pb;
  if (build(m, &pb) != 0) {
    free(pb.heap);
    return 0;
  }
  size_t n = sac__envelope__get_packed_size(&pb.env);
  free(pb.heap);
  return n;
}

int sac_wire_encode(const sac_wire_msg_t *m, void *buf, size_t cap, size_t *len) {
  proto_build_t pb;
  int rc = build(m, &pb);
  if (rc == 0) {
    size_t need = sac__envelope__get_packed_size(&pb.env);
    if (need > cap) {
      rc = SAC_ETOOBIG;
    } else {
      size_t wrote = sac__envelope__pack(&pb.env, buf);
      if (len)
        *len = wrote;
    }
  }
  free(pb.heap);
  return rc;
}

/* ---------------------------------------------------------------- float16 */

uint16_t sac_wire_f32_to_f16(float f, int saturate) {
  /* Round-to-nearest-even conversion after F. Giesen's float_to_half_fast3_rtne. */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t o;
  if (x >= (uint32_t)(127 + 16) << 23) {
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < (uint32_t)113 << 23) {
    const uint32_t magic_u = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
    float fx, magic;
    memcpy(&fx, &x, 4);
    memcpy(&magic, &magic_u, 4);
    fx += magic;
    uint32_t r;
    memcpy(&r, &fx, 4);
    o = (uint16_t)(r - magic_u);
  } else {
    uint32_t mant_odd = (x >> 13) & 1u;
    x += ((uint32_t)(15 - 127) << 23) + 0xfffu;
    x += mant_odd;
    o = (uint16_t)(x >> 13);
  }
  if (saturate && o == 0x7c00u)
    o = 0x7bffu;
  return (uint16_t)(o | (sign >> 16));
}

float sac_wire_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float f = (float)mant * 5.9604644775390625e-8f;
    memcpy(&out, &f, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float r;
  memcpy(&r, &out, 4);
  return r;
}

/* Arrays: F16C (8 values an instruction) when the CPU has it, else the scalar code. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SAC_WIRE_F16C 1
/* Eight values, |x| > 65504 clamped (and counted); NaN kept (ordered compares are false
 * for it, and max/min with it second return it). */
__attribute__((target("avx,f16c"))) static inline size_t to_f16_8(const float *in, uint16_t *out) {
  const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  __m256 v = _mm256_loadu_ps(in);
  int over =
      _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(v, hi, _CMP_GT_OQ), _mm256_cmp_ps(v, lo, _CMP_LT_OQ)));
  v = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
  _mm_storeu_si128((__m128i *)(void *)out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  return (size_t)__builtin_popcount((unsigned)over);
}

/* Tails go through an 8-value buffer too: mixing scalar SSE code with the 256-bit code
 * cost ~9 ns a value (measured on rows of 6 actions). */
__attribute__((target("avx,f16c"))) static size_t to_f16_f16c(const float *in, size_t n, uint16_t *out) {
  size_t i = 0, clamped = 0;
  for (; i + 8 <= n; i += 8)
    clamped += to_f16_8(in + i, out + i);
  if (i < n) {
    float t[8] = {0};
    uint16_t h[8];
    memcpy(t, in + i, (n - i) * sizeof *t);
    clamped += to_f16_8(t, h);
    memcpy(out + i, h, (n - i) * sizeof *h);
  }
  return clamped;
}

__attribute__((target("avx,f16c"))) static void to_f32_f16c(const uint16_t *in, size_t n, float *out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + i))));
  if (i < n) {
    uint16_t h[8] = {0};
    float t[8];
    memcpy(h, in + i, (n - i) * sizeof *h);
    _mm256_storeu_ps(t, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(void *)h)));
    memcpy(out + i, t, (n - i) * sizeof *t);
  }
}

/* CPUID leaf 1 (F16C, AVX, OSXSAVE) and XCR0 (the OS saves the YMM state), read directly:
 * clang 14's __builtin_cpu_supports does not know "f16c". The answer is cached; two threads
 * racing on the first call compute the same value. */
static int have_f16c(void) {
  static _Atomic int have = -1;
  int h = have;
  if (h < 0) {
    unsigned a, b, c, d;
    h = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) && (c & bit_OSXSAVE)) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      h = (lo & 6u) == 6u; /* XMM and YMM state enabled */
    }
    have = h;
  }
  return h;
}
#endif

size_t sac_wire_f32_to_f16_n(const float *in, size_t n, uint16_t *out) {
#ifdef SAC_WIRE_F16C
  if (have_f16c())
    return to_f16_f16c(in, n, out);
#endif
  size_t clamped = 0;
  for (size_t i = 0; i < n; i++) {
    float x = in[i];
    if (fabsf(x) > 65504.0f)
      x = copysignf(65504.0f, x), clamped++;
    out[i] = sac_wire_f32_to_f16(x, 0);
  }
  return clamped;
}

void sac_wire_f16_to_f32_n(const uint16_t *in, size_t n, float *out) {
#ifdef SAC_WIRE_F16C
  if (have_f16c()) {
    to_f32_f16c(in, n, out);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    out[i] = sac_wire_f16_to_f32(in[i]);
}
