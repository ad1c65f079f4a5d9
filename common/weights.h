/* Policy weights over the wire: the learner publishes the actor's parameters (PUB) with
 * a version; actors subscribe (SUB with ZMQ_CONFLATE: only the latest matters) and take
 * them between steps. A received message is decoded and validated (common/wire.h) and
 * must describe the policy the subscriber runs: layer chain consistent, input obs_dim,
 * output 2 * act_dim, ReLU hidden layers, finite values. Anything else is dropped with
 * a log line and counted. Publisher and subscriber are each used by one thread.
 *
 * The publisher faces the network: a peer that sends a message bigger than an empty
 * subscription and a handshake need (64 bytes, 512 with CURVE) is disconnected, and so
 * is anything that is not ZMTP 3 (common/net.h). libzmq keeps every distinct topic a
 * connected peer subscribes to until that peer leaves; the publisher is an XPUB that
 * reads those subscriptions, counts the non-empty ones (ignored: only the empty topic
 * carries weights) and, past 256 distinct topics held, closes the socket and binds it
 * again (tcp:// only), which drops every connection and the topics with them; real
 * subscribers reconnect. On networks with untrusted hosts, CURVE with an allow-list
 * still keeps strangers from even that. */
#ifndef SAC_COMMON_WEIGHTS_H
#define SAC_COMMON_WEIGHTS_H
#include <stddef.h>
#include <stdint.h>

#include "common/mlp.h"
#include "common/net.h"
#include "common/wire.h"

typedef struct sac_weights_pub sac_weights_pub_t;
typedef struct sac_weights_sub sac_weights_sub_t;

/* ctx may be NULL: the publisher or subscriber then makes (and later ends) its own.
 * Binds an XPUB socket on endpoint (e.g. "tcp://0.0.0.0:5560", "inproc://weights").
 * bound (may be NULL) receives the endpoint actually bound. NULL on failure (logged). */
sac_weights_pub_t *sac_weights_pub_new(sac_net_ctx_t *ctx, const char *endpoint, const sac_mlp_desc_t *desc,
                                       char *bound, size_t bound_cap);
/* Publishes params (the desc's layout) as `version`. Never blocks: a slow subscriber
 * misses versions, which is what it wants. 0 or a negative code. */
int sac_weights_publish(sac_weights_pub_t *p, uint64_t version, const float *params);
/* Sends the later broadcasts as dtype: SAC_WIRE_F32 (the default), SAC_WIRE_BF16 or
 * SAC_WIRE_F16 (half the bytes, rounded to nearest even; fp16 saturates at +-65504).
 * Subscribers convert back to fp32 and act on that. 0, SAC_EINVAL (another dtype) or
 * SAC_ENOMEM (the halved copy, allocated here once, not per broadcast). */
int sac_weights_pub_set_dtype(sac_weights_pub_t *p, sac_wire_dtype_t dtype);
/* "fp32", "bf16" or "fp16" to its dtype; SAC_EINVAL for anything else. */
int sac_weights_dtype_parse(const char *name, sac_wire_dtype_t *out);
/* Broadcasts sent (each version once; the keep-alive resends of a version too). */
uint64_t sac_weights_pub_sent(const sac_weights_pub_t *p);
/* Non-empty subscriptions received (each ignored: none is ever served on its own). */
uint64_t sac_weights_pub_ignored_subscriptions(const sac_weights_pub_t *p);
/* Times the socket was closed and bound again for holding too many topics. */
uint64_t sac_weights_pub_renewals(const sac_weights_pub_t *p);
/* Distinct non-empty topics held before a renewal (default 256; <= 0: never renew,
 * which lets the topics grow: for tests that show the bound is needed). */
void sac_weights_pub_set_topic_budget(sac_weights_pub_t *p, long budget);
/* The run's step budget the later broadcasts carry (remote actors read it with
 * sac_weights_run): the environment steps the run trains for (0: not said), the steps
 * the shards hold by the learner's last count, the actors the shards know (each takes
 * its share of the steps left), and over (non-zero) once the learner has stopped
 * sampling: the actors then stop. */
void sac_weights_pub_set_run(sac_weights_pub_t *p, uint64_t total_steps, uint64_t steps, uint32_t actors,
                             int over);
void sac_weights_pub_destroy(sac_weights_pub_t **p);

/* Connects a conflating SUB socket to endpoint; expects a policy for obs_dim/act_dim,
 * sent in fp32, bf16 or fp16 (converted to fp32 here). ZMQ_CONFLATE keeps only the
 * newest message in the socket (a weights message is one frame, which conflation
 * needs): an older version still queued when a newer one arrives is dropped unread.
 * NULL on failure (logged). */
sac_weights_sub_t *sac_weights_sub_new(sac_net_ctx_t *ctx, const char *endpoint, int obs_dim, int act_dim);
/* Takes the newest weights if any arrived (never blocks). Returns 1 when new weights
 * were taken, 0 when none, a negative code on a socket error. A malformed or mismatched
 * message is dropped (logged, counted) and 0 returned. */
int sac_weights_poll(sac_weights_sub_t *s);
/* Waits up to timeout_ms for a message, then polls. */
int sac_weights_wait(sac_weights_sub_t *s, long timeout_ms);
/* The weights in use (valid until the next successful poll); NULL before the first. */
const float *sac_weights_params(const sac_weights_sub_t *s);
const sac_mlp_desc_t *sac_weights_desc(const sac_weights_sub_t *s);
uint64_t sac_weights_version(const sac_weights_sub_t *s);
uint64_t sac_weights_rejected(const sac_weights_sub_t *s);
uint64_t sac_weights_received(const sac_weights_sub_t *s);
/* The run's budget as the newest weights taken said (sac_weights_pub_set_run; zeros
 * before the first, or from a learner that says nothing; any pointer may be NULL):
 * non-zero when the run is over. */
int sac_weights_run(const sac_weights_sub_t *s, uint64_t *total_steps, uint64_t *steps, uint32_t *actors);
void sac_weights_sub_destroy(sac_weights_sub_t **s);

#endif
