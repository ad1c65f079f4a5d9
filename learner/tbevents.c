/* TensorBoard event files (see tbevents.h): TFRecord framing around protobuf-c encoded
 * tensorboard.Event messages. The CRC32C is the one the snapshot files use
 * (common/snapshot.h). Each record is one buffer handed to write(2) (no stdio buffer that
 * could hold half a record back); a write that fails part-way is cut off again with
 * ftruncate, so a full disk never leaves a torn record for readers to trip over. */
#include "learner/tbevents.h"

#include <errno.h>
#include <fcntl.h>
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
  int fd;
  off_t end; /* the end of the last whole record: where the next one starts */
  int torn;  /* a partial record could not be cut off: nothing more goes to this file */
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

/* Writes all of buf at tb->end. On failure, cuts the file back to tb->end (a partial
 * write must not stay as a torn record) and returns SAC_EIO with errno of the failure. */
static int write_all(sac_tb_t *tb, const unsigned char *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(tb->fd, buf + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int err = w < 0 ? errno : EIO;
      if (done > 0 && (ftruncate(tb->fd, tb->end) != 0 || lseek(tb->fd, tb->end, SEEK_SET) != tb->end)) {
        tb->torn = 1;
        SAC_ERROR(
            "tensorboard",
            "%s: a partial record at byte %lld could not be removed (%s); no more events go to this file",
            tb->path, (long long)tb->end, strerror(errno));
      }
      errno = err;
      return SAC_EIO;
    }
    done += (size_t)w;
  }
  tb->end += (off_t)len;
  return 0;
}

/* One TFRecord (length, its masked CRC, the data, its masked CRC) from an event. */
static int write_event(sac_tb_t *tb, const Tensorboard__Event *ev) {
  if (tb->torn) {
    errno = EIO;
    return SAC_EIO;
  }
  size_t len = tensorboard__event__get_packed_size(ev);
  unsigned char small[1024];
  unsigned char *buf = len + 16 <= sizeof small ? small : malloc(len + 16);
  if (!buf)
    return SAC_ENOMEM;
  tensorboard__event__pack(ev, buf + 12);
  put_le(buf, (uint64_t)len, 8);
  put_le(buf + 8, sac_tb_masked_crc(buf, 8), 4);
  put_le(buf + 12 + len, sac_tb_masked_crc(buf + 12, len), 4);
  int rc = write_all(tb, buf, len + 16);
  if (buf != small) {
    int err = errno;
    free(buf);
    errno = err;
  }
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
  tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (tb->fd < 0 && errno == EEXIST) {
    size_t n = strlen(tb->path);
    snprintf(tb->path + n, sizeof tb->path - n, ".%ld", (long)getpid());
    tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (tb->fd < 0) {
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
    SAC_ERROR("tensorboard", "cannot write %s: %s", tb->path, strerror(errno));
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
  if ((*tb)->fd >= 0)
    close((*tb)->fd);
  free(*tb);
  *tb = NULL;
}
