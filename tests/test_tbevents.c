/* Tests of learner/tbevents.c, the TensorBoard event-file writer, without TensorBoard:
 * the masked CRC32C against the CRC32C check value, and a written file read back here
 * record by record (u64 length, masked CRC of the length, data, masked CRC of the data),
 * each record decoded with protobuf-c as a tensorboard.Event: the version record first,
 * then the scalars with their tags, steps and values. A flipped byte must fail the CRC
 * (negative control of the reader below), and a folder that cannot be written is an
 * error, not a crash. tests/test_tensorboard.sh checks the same files with TensorBoard's
 * own reader. */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
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
