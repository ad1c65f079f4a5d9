/* The actor's ledger of acknowledged batches (see ledger.h). */
#include "actor/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"

struct sac_ledger {
  int fd;
  uint64_t lines, errors;
  char path[1024];
};

/* One write of the whole line: a short write (disk full) counts as an error, and what was
 * written of it is a torn last line, which the checker reports and skips. */
static int write_line(sac_ledger_t *l, const char *buf, size_t len) {
  ssize_t w;
  do {
    w = write(l->fd, buf, len);
  } while (w < 0 && errno == EINTR);
  if (w == (ssize_t)len)
    return 0;
  if (!l->errors)
    SAC_ERROR("ledger", "cannot append to %s: %s", l->path, w < 0 ? strerror(errno) : "short write");
  l->errors++;
  return SAC_EIO;
}

int sac_ledger_open(const char *path, uint32_t actor_id, sac_ledger_t **out) {
  *out = NULL;
  sac_ledger_t *l = calloc(1, sizeof *l);
  if (!l)
    return SAC_ENOMEM;
  snprintf(l->path, sizeof l->path, "%s", path);
  l->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (l->fd < 0) {
    SAC_ERROR("ledger", "cannot open %s: %s", path, strerror(errno));
    free(l);
    return SAC_EIO;
  }
  char head[96];
  int n = snprintf(head, sizeof head, "# sacfleet ledger v1 actor=%" PRIu32 " pid=%ld\n", actor_id,
                   (long)getpid());
  if (write_line(l, head, (size_t)n) != 0) {
    close(l->fd);
    free(l);
    return SAC_EIO;
  }
  *out = l;
  return 0;
}

int sac_ledger_append(sac_ledger_t *l, const sac_replay_acked_t *b) {
  char line[112];
  int n = snprintf(line, sizeof line, "%" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu32 "\n",
                   b->actor_id, b->shard_id, b->session, b->seq, b->rows);
  int rc = write_line(l, line, (size_t)n);
  if (rc == 0)
    l->lines++;
  return rc;
}

uint64_t sac_ledger_lines(const sac_ledger_t *l) { return l ? l->lines : 0; }
uint64_t sac_ledger_errors(const sac_ledger_t *l) { return l ? l->errors : 0; }

void sac_ledger_close(sac_ledger_t **lp) {
  if (!lp || !*lp)
    return;
  close((*lp)->fd);
  free(*lp);
  *lp = NULL;
}
