/* Weights publisher and subscriber (see weights.h). The subscriber keeps two parameter
 * buffers and swaps them, so a poll never exposes half-written weights; both are sized
 * at the first message of a shape and reused after. */
#include "common/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/wire.h"

/* Distinct non-empty topics the publisher's socket may hold before it is renewed, and
 * subscription messages read per drain. Our subscribers send only the empty topic; any
 * other is kept by libzmq in its subscription trie (about 2 KiB each for 63-byte topics)
 * until its sender leaves, so past the budget the socket is closed (dropping every
 * connection and the trie) and bound again; real subscribers reconnect within their
 * reconnect interval and miss at most the versions published meanwhile. */
#define WEIGHTS_TOPIC_BUDGET 256
#define WEIGHTS_DRAIN_MAX 4096

struct sac_weights_pub {
  void *sock;
  sac_net_ctx_t *ctx; /* the caller's, or own */
  sac_net_ctx_t *own; /* the context made here when the caller passed none */
  sac_net_opts_t opts;
  char endpoint[256]; /* as bound ("tcp://0.0.0.0:5560"), to bind again on renewal */
  int renewable;      /* not inproc://: those peers are this process, and do not reconnect */
  long topics;        /* distinct non-empty topics in the socket's trie now */
  long budget;        /* renew past this many (<= 0: never) */
  uint64_t ignored, renewals;
  sac_mlp_desc_t desc;
  sac_wire_layer_t layers[SAC_MLP_MAX_LAYERS];
  size_t n_params;
  void *buf;
  size_t cap;
  sac_wire_dtype_t dtype;        /* of the broadcasts */
  uint64_t run_total, run_steps; /* the run's budget, carried by every broadcast */
  uint32_t run_actors;
  int run_over;
  uint16_t *half; /* half: (n_params) the bf16/fp16 copy sent, when dtype is one of those */
  uint64_t sent;
};

/* Makes the XPUB and binds it to endpoint; 0 or SAC_ENET (logged). */
static int pub_open(sac_weights_pub_t *p, const char *endpoint, char *bound, size_t bound_cap) {
  p->sock = sac_net_socket(p->ctx, SAC_NET_XPUB, &p->opts);
  if (!p->sock)
    return SAC_ENET;
  return sac_net_bind(p->sock, endpoint, bound, bound_cap);
}

sac_weights_pub_t *sac_weights_pub_new(sac_net_ctx_t *ctx, const char *endpoint, const sac_mlp_desc_t *desc,
                                       char *bound, size_t bound_cap) {
  sac_weights_pub_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->desc = *desc;
  p->n_params = sac_mlp_param_count(desc);
  for (int l = 0; l < desc->n_layers; l++)
    p->layers[l] = (sac_wire_layer_t){(uint32_t)desc->sizes[l], (uint32_t)desc->sizes[l + 1],
                                      l == desc->n_layers - 1 ? 0u : (uint32_t)desc->hidden_act};
  /* the encoded size of the largest version number, computed once on zero weights */
  float *zeros = calloc(p->n_params, sizeof(float));
  sac_wire_msg_t m = {.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){.version = UINT64_MAX,
                                     .dtype = SAC_WIRE_F32,
                                     .n_layers = (uint32_t)desc->n_layers,
                                     .layers = p->layers,
                                     .data = zeros,
                                     .data_len = p->n_params * sizeof(float),
                                     .run_total_steps = UINT64_MAX,
                                     .run_steps = UINT64_MAX,
                                     .run_actors = UINT32_MAX,
                                     .run_over = 1};
  p->cap = zeros ? sac_wire_encoded_size(&m) + 64 : 0;
  free(zeros);
  p->buf = p->cap ? malloc(p->cap) : NULL;
  sac_net_opts_t *o = &p->opts;
  sac_net_opts_default(o);
  o->sndhwm = 4;
  /* What a PUB receives is subscriptions, and a subscriber of weights sends one: the
   * empty topic. A bigger message can only be an attack on the subscription trie (a
   * 1 MiB topic cost the learner 100+ MB); its sender is disconnected. The cap applies
   * to the handshake commands too: READY takes 27 bytes, CURVE's INITIATE needs more
   * than 256 (issue 14, defect 5). Small topics are counted and bounded by the topic
   * budget (pub_drain). */
  o->max_msg_bytes = ctx && sac_net_ctx_curve(ctx) ? 512 : 64;
  o->rcvhwm = 16;
  p->budget = WEIGHTS_TOPIC_BUDGET;
  p->renewable = strncmp(endpoint, "inproc://", 9) != 0;
  if (!ctx)
    ctx = p->own = sac_net_ctx_new(1);
  p->ctx = ctx;
  char here[256];
  if (!p->buf || !ctx || pub_open(p, endpoint, here, sizeof here) != 0) {
    SAC_ERROR("weights", "cannot publish weights on %s", endpoint);
    sac_weights_pub_destroy(&p);
    return NULL;
  }
  snprintf(p->endpoint, sizeof p->endpoint, "%s", here);
  if (bound && bound_cap)
    snprintf(bound, bound_cap, "%s", here);
  return p;
}

/* Past the topic budget: a new socket on the same endpoint, so that the old one's trie
 * and connections go. The port is free again once libzmq's I/O thread has closed the old
 * listener, which takes a moment: bounded retries, 2 s in all. */
static int pub_renew(sac_weights_pub_t *p) {
  SAC_WARN("weights",
           "%ld distinct topics subscribed on %s (budget %ld, only the empty one is served): "
           "closing every connection and binding again",
           p->topics, p->endpoint, p->budget);
  zmq_unbind(p->sock, p->endpoint); /* may fail (already gone): the close below still frees the port */
  sac_net_close(&p->sock);
  p->topics = 0;
  p->renewals++;
  sac_sleep_ns(5 * 1000000ull); /* usually enough for the port to be free: fewer failed binds logged */
  const char *why = NULL;
  for (int i = 0; i < 200; i++) {
    p->sock = sac_net_socket(p->ctx, SAC_NET_XPUB, &p->opts);
    if (!p->sock)
      return SAC_ENET;
    if (sac_net_try_bind(p->sock, p->endpoint, NULL, 0, &why) == 0)
      return 0;
    sac_net_close(&p->sock);
    sac_sleep_ns(10 * 1000000ull);
  }
  SAC_ERROR("weights", "cannot bind %s again for 2 s (%s): weights are no longer published", p->endpoint,
            why ? why : "unknown reason");
  return SAC_ENET;
}

/* Reads the subscription messages waiting on the XPUB (at most WEIGHTS_DRAIN_MAX, never
 * blocking). libzmq passes a (un)subscription up only when it adds a topic to its trie
 * or removes one, so the count of non-empty topics read is what the trie holds beyond
 * the empty topic; a peer repeating a topic costs it no node. */
static int pub_drain(sac_weights_pub_t *p) {
  if (!p->sock)
    return SAC_ENET;
  unsigned char m[520]; /* the socket's max message size is 512 */
  for (int i = 0; i < WEIGHTS_DRAIN_MAX; i++) {
    size_t len;
    int more;
    int rc = sac_net_recv(p->sock, m, sizeof m, SAC_NET_DONTWAIT, &len, &more);
    if (rc == SAC_EAGAIN)
      break;
    if (rc)
      return rc;
    if (more)
      sac_net_drain_frames(p->sock);
    if (len < 2)
      continue; /* the empty topic: what a weights subscriber sends, served */
    if (m[0] == 1) {
      p->ignored++;
      p->topics++;
    } else if (m[0] == 0 && p->topics > 0) {
      p->topics--;
    }
    if (p->budget > 0 && p->renewable && p->topics > p->budget)
      return pub_renew(p);
  }
  return 0;
}

uint64_t sac_weights_pub_ignored_subscriptions(const sac_weights_pub_t *p) { return p->ignored; }
uint64_t sac_weights_pub_sent(const sac_weights_pub_t *p) { return p->sent; }

/* bf16: the top half of the fp32 bits, rounded to nearest even (the weights are finite:
 * checked by the learner before a broadcast, and again here after the conversion). */
static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

int sac_weights_dtype_parse(const char *name, sac_wire_dtype_t *out) {
  if (!strcmp(name, "fp32"))
    *out = SAC_WIRE_F32;
  else if (!strcmp(name, "bf16"))
    *out = SAC_WIRE_BF16;
  else if (!strcmp(name, "fp16"))
    *out = SAC_WIRE_F16;
  else
    return SAC_EINVAL;
  return 0;
}

int sac_weights_pub_set_dtype(sac_weights_pub_t *p, sac_wire_dtype_t dtype) {
  if (dtype != SAC_WIRE_F32 && dtype != SAC_WIRE_BF16 && dtype != SAC_WIRE_F16)
    return SAC_EINVAL;
  if (dtype != SAC_WIRE_F32 && !p->half && !(p->half = malloc(p->n_params * sizeof *p->half)))
    return SAC_ENOMEM;
  p->dtype = dtype;
  return 0;
}
uint64_t sac_weights_pub_renewals(const sac_weights_pub_t *p) { return p->renewals; }
void sac_weights_pub_set_run(sac_weights_pub_t *p, uint64_t total_steps, uint64_t steps, uint32_t actors,
                             int over) {
  p->run_total = total_steps, p->run_steps = steps, p->run_actors = actors, p->run_over = over != 0;
}
void sac_weights_pub_set_topic_budget(sac_weights_pub_t *p, long budget) { p->budget = budget; }

int sac_weights_publish(sac_weights_pub_t *p, uint64_t version, const float *params) {
  const void *data = params;
  size_t es = sizeof(float);
  if (p->dtype != SAC_WIRE_F32) { /* halved into the copy made by set_dtype */
    for (size_t i = 0; i < p->n_params; i++)
      p->half[i] = p->dtype == SAC_WIRE_BF16 ? f32_to_bf16(params[i]) : sac_wire_f32_to_f16(params[i], 1);
    data = p->half, es = sizeof *p->half;
  }
  sac_wire_msg_t m = {.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){.version = version,
                                     .dtype = p->dtype,
                                     .n_layers = (uint32_t)p->desc.n_layers,
                                     .layers = p->layers,
                                     .data = data,
                                     .data_len = p->n_params * es,
                                     .run_total_steps = p->run_total,
                                     .run_steps = p->run_steps,
                                     .run_actors = p->run_actors,
                                     .run_over = p->run_over};
  size_t len;
  int rc = pub_drain(p);
  if (rc == 0)
    rc = sac_wire_encode(&m, p->buf, p->cap, &len);
  if (rc)
    return rc;
  rc = sac_net_send(p->sock, p->buf, len, SAC_NET_DONTWAIT);
  if (rc == 0)
    p->sent++;
  return rc == SAC_EAGAIN ? 0 : rc;
}

void sac_weights_pub_destroy(sac_weights_pub_t **pp) {
  sac_weights_pub_t *p = *pp;
  if (!p)
    return;
  sac_net_close(&p->sock);
  sac_net_ctx_destroy(&p->own);
  free(p->buf);
  free(p->half);
  free(p);
  *pp = NULL;
}

struct sac_weights_sub {
  void *sock;
  sac_net_ctx_t *own; /* the context made here when the caller passed none */
  int obs_dim, act_dim;
  sac_wire_decoder_t *dec;
  void *buf;
  size_t cap;
  float *params[2];
  size_t params_cap;
  int cur; /* index of the buffer in use, -1 before the first weights */
  sac_mlp_desc_t desc;
  uint64_t version, received, rejected;
  uint64_t run_total, run_steps; /* the run's budget as the newest weights said */
  uint32_t run_actors;
  int run_over;
};

#define WEIGHTS_MAX_MSG (64u << 20)

sac_weights_sub_t *sac_weights_sub_new(sac_net_ctx_t *ctx, const char *endpoint, int obs_dim, int act_dim) {
  sac_weights_sub_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->obs_dim = obs_dim;
  s->act_dim = act_dim;
  s->cur = -1;
  s->cap = WEIGHTS_MAX_MSG;
  s->buf = malloc(s->cap);
  s->dec = sac_wire_decoder_new(WEIGHTS_MAX_MSG);
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.conflate = 1;
  o.max_msg_bytes = WEIGHTS_MAX_MSG;
  if (!ctx)
    ctx = s->own = sac_net_ctx_new(1);
  s->sock = s->buf && s->dec && ctx ? sac_net_socket(ctx, SAC_NET_SUB, &o) : NULL;
  if (!s->sock || SAC_ZCHK(zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, "", 0)) < 0 ||
      sac_net_connect(s->sock, endpoint) != 0) {
    SAC_ERROR("weights", "cannot subscribe to weights at %s", endpoint);
    sac_weights_sub_destroy(&s);
    return NULL;
  }
  return s;
}

/* The message describes the policy this subscriber runs. */
static int check_shape(const sac_weights_sub_t *s, const sac_wire_weights_t *w, sac_mlp_desc_t *d) {
  if ((w->dtype != SAC_WIRE_F32 && w->dtype != SAC_WIRE_BF16 && w->dtype != SAC_WIRE_F16) ||
      w->n_layers < 1 || w->n_layers > SAC_MLP_MAX_LAYERS)
    return SAC_EPROTO;
  memset(d, 0, sizeof *d);
  d->n_layers = (int)w->n_layers;
  d->ensemble = 1;
  d->hidden_act = SAC_ACT_RELU;
  for (uint32_t l = 0; l < w->n_layers; l++) {
    const sac_wire_layer_t *L = &w->layers[l];
    if (L->n_in < 1 || L->n_out < 1 || (l > 0 && L->n_in != w->layers[l - 1].n_out))
      return SAC_EPROTO;
    if (L->activation != (l + 1 == w->n_layers ? 0u : (uint32_t)SAC_ACT_RELU))
      return SAC_EPROTO;
    d->sizes[l] = (int)L->n_in;
    d->sizes[l + 1] = (int)L->n_out;
  }
  if (d->sizes[0] != s->obs_dim || d->sizes[d->n_layers] != 2 * s->act_dim)
    return SAC_EPROTO;
  if (w->data_len != sac_mlp_param_count(d) * (w->dtype == SAC_WIRE_F32 ? sizeof(float) : sizeof(uint16_t)))
    return SAC_EPROTO;
  return 0;
}

/* The message's n weights as fp32 into out (the wire's bytes may be unaligned). */
static void to_f32(const sac_wire_weights_t *w, float *out, size_t n) {
  const unsigned char *b = w->data;
  if (w->dtype == SAC_WIRE_F32) {
    memcpy(out, b, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    out[i] = w->dtype == SAC_WIRE_BF16 ? bf16_to_f32(h) : sac_wire_f16_to_f32(h);
  }
}

int sac_weights_poll(sac_weights_sub_t *s) {
  size_t len;
  int more;
  int rc = sac_net_recv(s->sock, s->buf, s->cap, SAC_NET_DONTWAIT, &len, &more);
  if (rc == SAC_EAGAIN)
    return 0;
  if (rc)
    return rc;
  s->received++;
  sac_wire_limits_t lim = {.max_msg_bytes = s->cap, .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_WEIGHTS)};
  sac_wire_msg_t m;
  sac_wire_reason_t why = SAC_WIRE_R_NONE;
  sac_mlp_desc_t d;
  if (more || len > s->cap) {
    if (more)
      sac_net_drain_frames(s->sock);
    s->rejected++;
    SAC_WARN("weights", "dropped a weights message: %s", more ? "more than one frame" : "too big");
    return 0;
  }
  rc = sac_wire_decode(s->dec, s->buf, len, &lim, &m, &why);
  if (rc == 0 && (rc = check_shape(s, &m.u.weights, &d)) != 0)
    why = SAC_WIRE_R_DIMS;
  if (rc) {
    s->rejected++;
    SAC_WARN("weights", "dropped a weights message: %s", sac_wire_reason_str(why));
    return 0;
  }
  size_t n = sac_mlp_param_count(&d);
  if (n > s->params_cap) {
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    if (!a || !b) {
      free(a), free(b);
      return SAC_ENOMEM;
    }
    free(s->params[0]), free(s->params[1]);
    s->params[0] = a, s->params[1] = b;
    s->params_cap = n;
    s->cur = -1;
  }
  int next = s->cur == 0 ? 1 : 0;
  to_f32(&m.u.weights, s->params[next], n);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(s->params[next][i])) {
      s->rejected++;
      SAC_WARN("weights", "dropped weights version %llu: non-finite value",
               (unsigned long long)m.u.weights.version);
      return 0;
    }
  s->cur = next;
  s->desc = d;
  s->version = m.u.weights.version;
  s->run_total = m.u.weights.run_total_steps;
  s->run_steps = m.u.weights.run_steps;
  s->run_over = m.u.weights.run_over;
  s->run_actors = m.u.weights.run_actors;
  return 1;
}

int sac_weights_wait(sac_weights_sub_t *s, long timeout_ms) {
  sac_net_pollitem_t it = {s->sock, SAC_NET_POLLIN, 0};
  int rc = sac_net_poll(&it, 1, timeout_ms);
  if (rc < 0)
    return rc;
  return sac_weights_poll(s);
}

const float *sac_weights_params(const sac_weights_sub_t *s) { return s->cur < 0 ? NULL : s->params[s->cur]; }
const sac_mlp_desc_t *sac_weights_desc(const sac_weights_sub_t *s) { return s->cur < 0 ? NULL : &s->desc; }
uint64_t sac_weights_version(const sac_weights_sub_t *s) { return s->version; }
uint64_t sac_weights_rejected(const sac_weights_sub_t *s) { return s->rejected; }
uint64_t sac_weights_received(const sac_weights_sub_t *s) { return s->received; }
int sac_weights_run(const sac_weights_sub_t *s, uint64_t *total_steps, uint64_t *steps, uint32_t *actors) {
  if (total_steps)
    *total_steps = s->run_total;
  if (steps)
    *steps = s->run_steps;
  if (actors)
    *actors = s->run_actors;
  return s->run_over;
}

void sac_weights_sub_destroy(sac_weights_sub_t **sp) {
  sac_weights_sub_t *s = *sp;
  if (!s)
    return;
  sac_net_close(&s->sock);
  sac_net_ctx_destroy(&s->own);
  sac_wire_decoder_destroy(&s->dec);
  free(s->buf);
  free(s->params[0]), free(s->params[1]);
  free(s);
  *sp = NULL;
}
