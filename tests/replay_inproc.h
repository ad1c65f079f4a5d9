/* One in-process replay shard for tests, on inproc://NAME-ins and inproc://NAME-smp:
 * memory only (durability none), obs 4 and act 1 (the sizes the tests' replay_testgen.h
 * transitions use), capacity 65536, 256 rows a batch either way. inproc_shard_init fills the
 * server config for the test to adjust before sac_replay_server_new; inproc_client_init
 * points a client config at it (actor 1, both endpoints; a test clears the one a client
 * does not use). The struct holds the client's endpoint lists: keep it where it was
 * initialised while clients use it. */
#ifndef SAC_TESTS_REPLAY_INPROC_H
#define SAC_TESTS_REPLAY_INPROC_H

#include <stdio.h>

#include "common/net.h"
#include "replay/client.h"
#include "replay/server.h"

typedef struct {
  sac_replay_server_config_t c;
  const char *ins[1], *smp[1]; /* the client's lists: c's endpoints */
} inproc_shard_t;

static inline void inproc_shard_init(inproc_shard_t *s, const char *name) {
  sac_replay_server_config_default(&s->c);
  s->c.durability = SAC_REPLAY_DURABILITY_NONE; /* memory only: not what these tests are about */
  s->c.shard.capacity = 65536;
  s->c.shard.obs_dim = 4;
  s->c.shard.act_dim = 1;
  s->c.shard.max_batch_rows = 256;
  s->c.shard.max_sample_batch = 256;
  snprintf(s->c.insert_endpoint, sizeof s->c.insert_endpoint, "inproc://%s-ins", name);
  snprintf(s->c.sample_endpoint, sizeof s->c.sample_endpoint, "inproc://%s-smp", name);
  s->ins[0] = s->c.insert_endpoint;
  s->smp[0] = s->c.sample_endpoint;
}

static inline void inproc_client_init(const inproc_shard_t *s, sac_net_ctx_t *ctx,
                                      sac_replay_client_config_t *cc) {
  sac_replay_client_config_default(cc);
  cc->n_shards = 1;
  cc->insert_endpoints = s->ins;
  cc->sample_endpoints = s->smp;
  cc->ctx = ctx;
  cc->actor_id = 1;
}

#endif
