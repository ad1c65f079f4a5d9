/* Sizes of a shard started without them (see sizes.h). The wait for the first batch runs
 * before the shard exists, on its own socket, so the server itself is unchanged: it starts
 * with the sizes found here and refuses any later batch of other sizes ("dims"). */
#include "replay/sizes.h"

#include <stdlib.h>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/wire.h"

int sac_replay_sizes_from_env(const char *id, uint32_t *obs_dim, uint32_t *act_dim) {
  sac_env_t *env = NULL;
  int rc = sac_env_new(id, 1, 0, &env);
  if (rc) {
    SAC_ERROR("replay", "--env %s: cannot create the environment to read its sizes (%s)", id,
              sac_strerror(rc));
    return rc;
  }
  const sac_env_spec_t *spec = sac_env_spec(env);
  *obs_dim = (uint32_t)spec->obs_dim;
  *act_dim = (uint32_t)spec->act_dim;
  sac_env_destroy(&env);
  return 0;
}

/* Receives one routed message (identity frame, then the message) into buf[cap]; 1 when
 * a whole message is in buf (*len bytes), 0 when none was waiting or it was malformed. */
static int recv_one(void *sock, unsigned char *buf, size_t cap, size_t *len) {
  unsigned char id[256];
  size_t id_len;
  int more = 0;
  if (sac_net_recv(sock, id, sizeof id, SAC_NET_DONTWAIT, &id_len, &more) != 0)
    return 0;
  if (!more || sac_net_recv(sock, buf, cap, 0, len, &more) != 0)
    return 0;
  if (more) {
    sac_net_drain_frames(sock);
    return 0;
  }
  return *len < cap;
}

int sac_replay_sizes_from_first_batch(sac_net_ctx_t *ctx, const char *endpoint, size_t max_msg_bytes,
                                      const volatile sig_atomic_t *stop, char *bound, size_t cap,
                                      uint32_t *obs_dim, uint32_t *act_dim) {
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.max_msg_bytes = (int64_t)max_msg_bytes;
  void *sock = sac_net_socket(ctx, SAC_NET_ROUTER, &o);
  unsigned char *buf = malloc(max_msg_bytes + 1);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(max_msg_bytes);
  int rc = !sock || !buf || !dec ? SAC_ENOMEM : sac_net_bind(sock, endpoint, bound, cap);
  if (rc == 0)
    SAC_INFO("replay",
             "no --obs_dim/--act_dim or --env: waiting on %s for the first actor's batch to size the shard",
             bound);
  sac_wire_limits_t lim = {.max_msg_bytes = max_msg_bytes,
                           .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS)};
  while (rc == 0) {
    if (*stop) {
      rc = SAC_EINTR;
      break;
    }
    sac_net_pollitem_t it = {sock, SAC_NET_POLLIN, 0};
    if (sac_net_poll(&it, 1, 100) <= 0)
      continue;
    size_t len = 0;
    sac_wire_msg_t m;
    sac_wire_reason_t why;
    while (recv_one(sock, buf, max_msg_bytes + 1, &len)) {
      if (sac_wire_decode(dec, buf, len, &lim, &m, &why) == 0 && m.u.transitions.obs_dim > 0 &&
          m.u.transitions.act_dim > 0) {
        *obs_dim = m.u.transitions.obs_dim;
        *act_dim = m.u.transitions.act_dim;
        SAC_INFO("replay", "sized from the first batch (actor %u): obs_dim %u, act_dim %u",
                 m.u.transitions.actor_id, *obs_dim, *act_dim);
        goto done;
      }
    }
  }
done:
  sac_wire_decoder_destroy(&dec);
  free(buf);
  sac_net_close(&sock);
  return rc;
}
