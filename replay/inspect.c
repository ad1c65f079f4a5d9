/* Offline provenance of a shard's snapshot and log (see inspect.h). */
#include "replay/inspect.h"

#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "replay/shard.h"
#include "replay/wal.h"

typedef struct {
  sac_replay_shard_t *sh;
  sac_wire_decoder_t *dec;
  sac_wire_limits_t lim;
  unsigned long long skipped;
} replay_t;

static int apply(void *user, const sac_replay_wal_rec_t *rec, const unsigned char *payload, size_t len) {
  replay_t *r = user;
  if (rec->kind == SAC_REPLAY_WAL_FORGET) { /* the running shard forgot an idle actor here */
    sac_replay_shard_forget_actor(r->sh, rec->actor);
    return 0;
  }
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  sac_replay_insert_result_t res;
  if (sac_wire_decode(r->dec, payload, len, &r->lim, &m, &why) != 0 || m.type != SAC_WIRE_TRANSITIONS ||
      sac_replay_shard_insert(r->sh, &m.u.transitions, &res) != 0)
    r->skipped++; /* like a start: skipped, not a torn tail */
  return 0;
}

int sac_replay_provenance_from_files(const sac_replay_server_config_t *cfg, const char *snapshot_path,
                                     const char *wal_path, char **text, size_t *len) {
  int have_snap = snapshot_path && snapshot_path[0] && access(snapshot_path, F_OK) == 0;
  int have_wal = wal_path && wal_path[0] && access(wal_path, F_OK) == 0;
  if (!have_snap && !have_wal) {
    SAC_ERROR("replay", "neither %s nor %s exists", snapshot_path ? snapshot_path : "",
              wal_path ? wal_path : "");
    return SAC_ENOTFOUND;
  }
  sac_replay_shard_config_t sc = cfg->shard;
  int rc = have_snap ? sac_replay_shard_snapshot_config(snapshot_path, &sc) : 0;
  if (rc) {
    SAC_ERROR("replay", "cannot read the snapshot %s: %s", snapshot_path, sac_strerror(rc));
    return rc;
  }
  replay_t r = {0};
  r.sh = sac_replay_shard_new(&sc, &rc);
  r.dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  if (!r.sh || !r.dec) {
    rc = r.sh ? SAC_ENOMEM : rc;
    goto out;
  }
  r.lim = (sac_wire_limits_t){.max_msg_bytes = cfg->max_msg_bytes,
                              .obs_dim = sc.obs_dim,
                              .act_dim = sc.act_dim,
                              .max_rows = sc.max_batch_rows,
                              .max_env_id = cfg->max_env_id,
                              .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS)};
  if (have_snap && (rc = sac_replay_shard_load(r.sh, snapshot_path)) != 0)
    goto out;
  if (have_wal) {
    sac_replay_wal_scan_t scan;
    rc = sac_replay_wal_scan(wal_path, cfg->max_msg_bytes, apply, &r, &scan);
    if (rc)
      goto out;
    SAC_INFO("replay", "wal: applied %llu records, dropped %llu bytes%s%s (%s; %llu records skipped)",
             (unsigned long long)scan.records, (unsigned long long)scan.dropped_bytes,
             scan.dropped_bytes ? ": " : "", scan.why, wal_path, r.skipped);
  }
  rc = sac_replay_prov_format(sac_replay_shard_provenance(r.sh), sc.shard_id, 0, text, len);
out:
  sac_wire_decoder_destroy(&r.dec);
  sac_replay_shard_destroy(&r.sh);
  return rc;
}
