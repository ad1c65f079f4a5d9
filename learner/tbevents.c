/* TensorBoard event files (see tbevents.h): TFRecord framing around protobuf-c encoded
 * tensorboard.Event messages. The CRC32C is the one the snapshot files use
 * (common/snapshot.h). */
#include "learner/tbevents.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"
#include "tensorboard.pb-c.h"

#define TB_MAX_VALUES 32

struct sac_tb {
  FILE *f;
  int failed; /* a write failed: logged once */
  char path[1200];
};

uint32_t sac_tb_masked_crc(const void *data, size_t len) {
  uint32_t crc = sac_crc32c(0, data, len);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* One TFRecord: length, its masked CRC, the data, its masked CRC; then a flush. */
static int write_record(sac_tb_t *tb, const unsigned char *data, size_t len) {
  unsigned char head[12], tail[4];
  put_le(head, (uint64_t)len, 8);
  put_le(head + 8, sac_tb_masked_crc(head, 8), 4);
  put_le(tail, sac_tb_masked_crc(data, len), 4);
  if (fwrite(head, 1, sizeof head, tb->f) != sizeof head || fwrite(data, 1, len, tb->f) != len ||
      fwrite(tail, 1, sizeof tail, tb->f) != sizeof tail || fflush(tb->f) != 0) {
    if (!tb->failed)
      SAC_ERROR("tensorboard", "cannot write %s: %s", tb->path, strerror(errno));
    tb->failed = 1;
    return SAC_EIO;
  }
  return 0;
}

static int write_event(sac_tb_t *tb, const Tensorboard__Event *ev) {
  size_t len = tensorboard__event__get_packed_size(ev);
  unsigned char small[1024];
  unsigned char *buf = len <= sizeof small ? small : malloc(len);
  if (!buf)
    return SAC_ENOMEM;
  tensorboard__event__pack(ev, buf);
  int rc = write_record(tb, buf, len);
  if (buf != small)
    free(buf);
  return rc;
}

int sac_tb_open(const char *dir, sac_tb_t **out) {
  *out = NULL;
  sac_tb_t *tb = calloc(1, sizeof *tb);
  if (!tb)
    return SAC_ENOMEM;
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s", dir, (long long)time(NULL), host);
  /* never over another file: a run resumed within the same second gets a ".PID" suffix
   * (TensorBoard reads every file whose name holds "tfevents") */
  tb->f = fopen(tb->path, "wbx");
  if (!tb->f && errno == EEXIST) {
    size_t n = strlen(tb->path);
    snprintf(tb->path + n, sizeof tb->path - n, ".%ld", (long)getpid());
    tb->f = fopen(tb->path, "wbx");
  }
  if (!tb->f) {
    SAC_ERROR("tensorboard", "cannot create %s: %s", tb->path, strerror(errno));
    free(tb);
    return SAC_EIO;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_now();
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  int rc = write_event(tb, &ev);
  if (rc) {
    sac_tb_close(&tb);
    return rc;
  }
  *out = tb;
  return 0;
}

int sac_tb_scalars(sac_tb_t *tb, int64_t step, size_t n, const char *const *tags, const float *values) {
  if (n > TB_MAX_VALUES)
    return SAC_EINVAL;
  Tensorboard__Summary__Value vals[TB_MAX_VALUES], *ptrs[TB_MAX_VALUES];
  for (size_t i = 0; i < n; i++) {
    tensorboard__summary__value__init(&vals[i]);
    vals[i].tag = (char *)tags[i]; /* protobuf-c's field is not const; pack only reads it */
    vals[i].simple_value = values[i];
    ptrs[i] = &vals[i];
  }
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = n;
  sum.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_now();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  return write_event(tb, &ev);
}

const char *sac_tb_path(const sac_tb_t *tb) { return tb->path; }

void sac_tb_close(sac_tb_t **tb) {
  if (!tb || !*tb)
    return;
  if ((*tb)->f)
    fclose((*tb)->f);
  free(*tb);
  *tb = NULL;
}
