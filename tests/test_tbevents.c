/* Tests of learner/tbevents.c, the TensorBoard event-file writer, without TensorBoard:
 * the masked CRC32C against the CRC32C check value, and a written file read back here
 * record by record (u64 length, masked CRC of the length, data, masked CRC of the data),
 * each record decoded with protobuf-c as a tensorboard.Event: the version record first,
 * then the scalars with their tags, steps and values. A flipped byte must fail the CRC
 * (negative control of the reader below), and a folder that cannot be written is an
 * error, not a crash. tests/test_tensorboard.sh checks the same files with TensorBoard's
 * own reader.
 *
 * Failing writes (a full disk): RLIMIT_FSIZE makes the kernel refuse bytes past a size
 * (EFBIG, with SIGXFSZ ignored), part-way through a record if we like, the way a disk
 * filling up does. The event file must then hold only whole records, the run directory
 * must count each failed periodic write by file, and the same writes without the limit
 * (the control) must succeed and count nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <errno.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "learner/rundir.h"
#include "learner/tbevents.h"
#include "tensorboard.pb-c.h"

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* Splits buf into records; returns the count, or -1 at the first bad CRC or length. */
static int read_records(const unsigned char *buf, size_t len, Tensorboard__Event **out, int cap) {
  size_t off = 0;
  int n = 0;
  while (off < len) {
    if (len - off < 12)
      return -1;
    uint64_t dlen = get_le(buf + off, 8);
    if (get_le(buf + off + 8, 4) != sac_tb_masked_crc(buf + off, 8) || dlen > len - off - 16)
      return -1;
    const unsigned char *data = buf + off + 12;
    if (get_le(data + dlen, 4) != sac_tb_masked_crc(data, dlen))
      return -1;
    if (n < cap)
      out[n] = tensorboard__event__unpack(NULL, dlen, data);
    n++;
    off += 12 + dlen + 4;
  }
  return n;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*len + 1);
  cr_assert_eq(fread(b, 1, *len, f), *len);
  fclose(f);
  return b;
}

Test(tbevents, masked_crc_check_value) {
  /* CRC32C("123456789") = 0xE3069283; masked: rotate right 15, add 0xa282ead8 */
  cr_assert_eq(sac_tb_masked_crc("123456789", 9), 0xc78ab0e5u);
}

Test(tbevents, file_reads_back) {
  char dir[] = "/tmp/sac_test_tb_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  sac_tb_t *tb = NULL;
  cr_assert_eq(sac_tb_open(dir, &tb), 0);
  char host[256];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  cr_assert_not_null(strstr(sac_tb_path(tb), "/events.out.tfevents."));
  cr_assert_not_null(strstr(sac_tb_path(tb), host), "%s", sac_tb_path(tb));
  const char *tags[] = {"eval/return", "train/alpha"};
  float v1[] = {-123.25f, 0.5f}, v2[] = {7.0f, 0.25f};
  cr_assert_eq(sac_tb_scalars(tb, 1000, 2, tags, v1), 0);
  cr_assert_eq(sac_tb_scalars(tb, 2000, 1, tags + 1, v2 + 1), 0);
  /* flushed per event: the file is complete before close */
  size_t len;
  unsigned char *buf = slurp(sac_tb_path(tb), &len);
  Tensorboard__Event *ev[8] = {0};
  cr_assert_eq(read_records(buf, len, ev, 8), 3);
  cr_assert_eq(ev[0]->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
  cr_assert_str_eq(ev[0]->file_version, "brain.Event:2");
  cr_assert_gt(ev[0]->wall_time, 1.6e9);
  cr_assert_eq(ev[1]->step, 1000);
  cr_assert_eq(ev[1]->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
  cr_assert_eq(ev[1]->summary->n_value, 2);
  cr_assert_str_eq(ev[1]->summary->value[0]->tag, "eval/return");
  cr_assert_eq(ev[1]->summary->value[0]->simple_value, -123.25f);
  cr_assert_str_eq(ev[1]->summary->value[1]->tag, "train/alpha");
  cr_assert_eq(ev[1]->summary->value[1]->simple_value, 0.5f);
  cr_assert_eq(ev[2]->step, 2000);
  cr_assert_eq(ev[2]->summary->n_value, 1);
  cr_assert_str_eq(ev[2]->summary->value[0]->tag, "train/alpha");
  cr_assert_eq(ev[2]->summary->value[0]->simple_value, 0.25f);
  /* negative control: one flipped byte anywhere in a record is caught */
  buf[len - 6] ^= 0x10;
  cr_assert_eq(read_records(buf, len, ev + 3, 0), -1);
  for (int i = 0; i < 3; i++)
    tensorboard__event__free_unpacked(ev[i], NULL);
  free(buf);
  char path[1300];
  snprintf(path, sizeof path, "%s", sac_tb_path(tb));
  sac_tb_close(&tb);
  cr_assert_null(tb);
  sac_tb_close(&tb); /* idempotent */
  unlink(path);
  rmdir(dir);
}

/* Two writers opened in the same second in one folder (a quick --resume) get two files. */
Test(tbevents, second_file_in_the_same_second_is_a_new_file) {
  char dir[] = "/tmp/sac_test_tb_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  sac_tb_t *a = NULL, *b = NULL;
  cr_assert_eq(sac_tb_open(dir, &a), 0);
  cr_assert_eq(sac_tb_open(dir, &b), 0);
  cr_assert_str_neq(sac_tb_path(a), sac_tb_path(b));
  glob_t g;
  char pat[300];
  snprintf(pat, sizeof pat, "%s/events.out.tfevents.*", dir);
  cr_assert_eq(glob(pat, 0, NULL, &g), 0);
  cr_assert_eq(g.gl_pathc, 2);
  for (size_t i = 0; i < g.gl_pathc; i++)
    unlink(g.gl_pathv[i]);
  globfree(&g);
  sac_tb_close(&a);
  sac_tb_close(&b);
  rmdir(dir);
}

Test(tbevents, unwritable_folder_is_an_error) {
  sac_tb_t *tb = (sac_tb_t *)1;
  cr_assert_eq(sac_tb_open("/nonexistent/folder", &tb), SAC_EIO);
  cr_assert_null(tb);
}

static void limit_file_size(rlim_t bytes) {
  struct rlimit rl;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
  rl.rlim_cur = bytes;
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0, "%s", strerror(errno));
}
static off_t file_size(const char *path) {
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0, "%s", path);
  return sb.st_size;
}
static void rm_rf(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* A record cut off by the disk is removed again: the file keeps only whole records, and
 * writing goes on once there is room. */
Test(tbevents, failed_write_leaves_no_torn_record) {
  signal(SIGXFSZ, SIG_IGN);
  char dir[] = "/tmp/sac_test_tb_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  sac_tb_t *tb = NULL;
  cr_assert_eq(sac_tb_open(dir, &tb), 0);
  const char *tags[] = {"eval/return", "train/alpha"};
  float v[] = {1.5f, 0.25f};
  off_t before = file_size(sac_tb_path(tb));
  limit_file_size((rlim_t)before + 20); /* room for the head and a few bytes: a partial write */
  errno = 0;
  cr_assert_eq(sac_tb_scalars(tb, 100, 2, tags, v), SAC_EIO);
  cr_assert_eq(errno, EFBIG, "%s", strerror(errno));
  cr_assert_eq(file_size(sac_tb_path(tb)), before, "the partial record was not removed");
  limit_file_size(RLIM_INFINITY);
  cr_assert_eq(sac_tb_scalars(tb, 200, 2, tags, v), 0);
  size_t len;
  unsigned char *buf = slurp(sac_tb_path(tb), &len);
  Tensorboard__Event *ev[4] = {0};
  cr_assert_eq(read_records(buf, len, ev, 4), 2, "a torn record in the file");
  cr_assert_eq(ev[1]->step, 200);
  for (int i = 0; i < 2; i++)
    tensorboard__event__free_unpacked(ev[i], NULL);
  free(buf);
  sac_tb_close(&tb);
  rm_rf(dir);
}

/* Evaluation and training points into a run directory, with the file-size limit on or
 * off; returns what add_eval returned and fills errs with the write-error counts. */
static int run_dir_period(rlim_t limit, uint64_t errs[SAC_RUNDIR_FILES], char *dir_out) {
  signal(SIGXFSZ, SIG_IGN);
  char base[] = "/tmp/sac_test_rd_XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  strcpy(dir_out, base);
  static sac_rundir_t rd; /* large: not on the stack */
  int no_options = 0;     /* config.txt from an empty option table */
  cr_assert_eq(sac_rundir_open(&rd, base, "run", "Pendulum-v1", NULL, 0, &no_options), 0);
  cr_assert_not_null(rd.tb);
  limit_file_size(limit);
  sac_stats_t st = {.critic_loss = 1, .actor_loss = 2, .alpha = 0.5f, .entropy = 1, .mean_q = 3};
  sac_rundir_point_t pt = {1.0, 1000, 10, {1, -100.0, 0, -100.0, -100.0}, NAN, 0, st};
  int rc = sac_rundir_add_eval(&rd, &pt);
  sac_rundir_train_t t = {.episode_return = -50,
                          .updates_per_s = 10,
                          .env_steps_per_s = 100,
                          .replay_size = 1000,
                          .st = st,
                          .have_stats = 1};
  sac_rundir_add_train(&rd, 2000, &t);
  limit_file_size(RLIM_INFINITY);
  memcpy(errs, rd.write_errors, sizeof rd.write_errors);
  sac_rundir_close(&rd);
  return rc;
}

Test(rundir, full_disk_is_counted_by_file_and_training_goes_on) {
  uint64_t errs[SAC_RUNDIR_FILES];
  char dir[64];
  cr_assert_eq(run_dir_period(0, errs, dir), SAC_EIO); /* no byte more may be written */
  cr_assert_eq(errs[SAC_RUNDIR_FILE_TENSORBOARD], 2, "eval and train events: %llu",
               (unsigned long long)errs[SAC_RUNDIR_FILE_TENSORBOARD]);
  cr_assert_eq(errs[SAC_RUNDIR_FILE_METRICS_CSV], 1);
  char path[200];
  snprintf(path, sizeof path, "%s/run/metrics.csv.tmp", dir);
  cr_assert_neq(access(path, F_OK), 0, "the temporary file is left behind");
  cr_assert_str_eq(sac_rundir_file_name(SAC_RUNDIR_FILE_TENSORBOARD), "tensorboard");
  cr_assert_str_eq(sac_rundir_file_name(SAC_RUNDIR_FILE_METRICS_CSV), "metrics_csv");
  rm_rf(dir);
}

/* The control: the same writes with room succeed and count nothing. */
Test(rundir, writes_with_room_count_nothing) {
  uint64_t errs[SAC_RUNDIR_FILES];
  char dir[64];
  cr_assert_eq(run_dir_period(RLIM_INFINITY, errs, dir), 0);
  for (int k = 0; k < SAC_RUNDIR_FILES; k++)
    cr_assert_eq(errs[k], 0, "%s: %llu", sac_rundir_file_name((sac_rundir_file_t)k),
                 (unsigned long long)errs[k]);
  char path[200];
  snprintf(path, sizeof path, "%s/run/metrics.csv", dir);
  cr_assert_gt(file_size(path), 0);
  rm_rf(dir);
}

/* Runs named by the clock started in the same second each get a directory of their own
 * (the second, third ... with -2, -3): two learners of a seed sweep launched together
 * shared one, and the second stopped on the first's shard locks. A run the user names
 * reuses its directory, as before. */
Test(rundir, runs_started_in_the_same_second_get_their_own_directories) {
  char base[] = "/tmp/sac_test_rd_XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  static sac_rundir_t rd[3];
  int no_options = 0;
  for (int i = 0; i < 3; i++)
    cr_assert_eq(sac_rundir_open(&rd[i], base, "", "Pendulum-v1", NULL, 0, &no_options), 0);
  int same_second = 0;
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++) {
      cr_assert_str_neq(rd[i].path, rd[j].path, "runs %d and %d share %s", i, j, rd[i].path);
      size_t n = strlen(rd[i].path) < strlen(rd[j].path) ? strlen(rd[i].path) : strlen(rd[j].path);
      same_second += strncmp(rd[i].path, rd[j].path, n) == 0; /* one is the other's prefix */
    }
  cr_assert_gt(same_second, 0, "no two of the three opened in the same second (%s, %s, %s): rerun",
               rd[0].path, rd[1].path, rd[2].path);
  for (int i = 0; i < 3; i++)
    sac_rundir_close(&rd[i]);
  static sac_rundir_t named[2];
  cr_assert_eq(sac_rundir_open(&named[0], base, "mine", "Pendulum-v1", NULL, 0, &no_options), 0);
  sac_rundir_close(&named[0]);
  cr_assert_eq(sac_rundir_open(&named[1], base, "mine", "Pendulum-v1", NULL, 0, &no_options), 0);
  cr_assert(strstr(named[1].path, "/mine") && !strstr(named[1].path, "mine-2"), "a named run reuses %s",
            named[1].path);
  sac_rundir_close(&named[1]);
  rm_rf(base);
}
