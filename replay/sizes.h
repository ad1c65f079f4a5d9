/* Where a shard started without --obs_dim/--act_dim gets its sizes: from --env ID (the
 * environment is created once and its spec read) or from the first batch of transitions an
 * actor sends (the insert endpoint is bound by a plain socket until one arrives; the actor's
 * replay client resends that batch to the shard once it is up, so nothing is lost). Not for
 * a shard with a snapshot to restore: its sizes are in the snapshot and must be given. */
#ifndef SAC_REPLAY_SIZES_H
#define SAC_REPLAY_SIZES_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/net.h"

/* The sizes of environment id (anything sac_env_new takes). 0, or SAC_ENOTFOUND /
 * SAC_EPLUGIN / another sac_env_new error (logged). */
int sac_replay_sizes_from_env(const char *id, uint32_t *obs_dim, uint32_t *act_dim);

/* Binds endpoint on ctx (CurveZMQ as the context has it), waits for the first valid
 * transitions message of at most max_msg_bytes and returns its sizes; every other message
 * is dropped unanswered. The bound endpoint (a "*" port resolved) is written into
 * bound[cap], for the shard to bind the same. Returns 0, SAC_ENET (cannot bind, logged),
 * SAC_ENOMEM, or SAC_EINTR when *stop became non-zero first. */
int sac_replay_sizes_from_first_batch(sac_net_ctx_t *ctx, const char *endpoint, size_t max_msg_bytes,
                                      const volatile sig_atomic_t *stop, char *bound, size_t cap,
                                      uint32_t *obs_dim, uint32_t *act_dim);

#endif
