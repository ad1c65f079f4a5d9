/* Offline inspection of a replay shard's files: its provenance index (replay/provenance.h)
 * as the snapshot and the write-ahead log hold it, for `sac-replay --print_provenance`.
 * The files are only read (a live shard's log may be read while it is appended to: a
 * record being written reads as a torn tail and is left out). */
#ifndef SAC_REPLAY_INSPECT_H
#define SAC_REPLAY_INSPECT_H
#include <stddef.h>

#include "replay/server.h"

/* Restores a scratch shard from the snapshot (its dimensions and capacity come from the
 * snapshot when it exists, else from cfg->shard), replays the log at wal_path (NULL or
 * "": none) on top, and renders the provenance with incarnation 0 into *text (free()
 * it). Logs "wal: ... records, ... bytes dropped" like a start would. 0; SAC_ENOTFOUND
 * (neither file exists); SAC_ECONFIG, SAC_EPROTO, SAC_EIO, SAC_ENOMEM. */
int sac_replay_provenance_from_files(const sac_replay_server_config_t *cfg, const char *snapshot_path,
                                     const char *wal_path, char **text, size_t *len);

#endif
