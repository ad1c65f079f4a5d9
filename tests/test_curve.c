/* CurveZMQ authentication and encryption (common/auth.h, common/net.h): on
 * tcp://127.0.0.1 with ports picked by the kernel, a client without a key, with a key not
 * in the server's allow-list, or with the wrong server key can neither insert into a
 * replay server (replay/server.h through replay/client.h), nor sample from it, nor
 * receive weights from a publisher (common/weights.h), while an allowed client does all
 * three; the ZAP handler counts what it accepted and denied. inproc:// sockets of a
 * context with CURVE work as before (the learner's embedded default). Key files and
 * allow-lists: every malformed file is an error naming the file and line; sac-keygen's
 * files round-trip. Every wait is bounded (2-3 s for what must not arrive). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/auth.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/weights.h"
#include "replay/client.h"
#include "replay/server.h"
#include "tests/replay_testgen.h"

#define KEYGEN SAC_BUILD_DIR "/common/sac-keygen"

static char g_dir[128];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-curve-test-%ld-XXXXXX", (long)getpid());
  cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", g_dir);
}

/* ---- helpers ---- */

static const char *path_in(const char *name) {
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

static const char *write_text(const char *name, const char *text) {
  const char *p = path_in(name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  return p;
}

/* stderr into a file while a call runs, to check what the log names */
typedef struct {
  int saved;
  char path[256];
} capture_t;

static void cap_begin(capture_t *c) {
  snprintf(c->path, sizeof c->path, "%s/stderr.XXXXXX", g_dir);
  int fd = mkstemp(c->path);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  c->saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
}

static char *cap_end(capture_t *c) {
  fflush(stderr);
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  static char buf[8192];
  FILE *f = fopen(c->path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = '\0';
  if (f)
    fclose(f);
  unlink(c->path);
  return buf;
}

static void must_mention(const char *log, const char *what) {
  cr_assert_not_null(strstr(log, what), "the log does not mention '%s':\n%s", what, log);
}

static sac_auth_keypair_t keypair(void) {
  sac_auth_keypair_t kp;
  cr_assert_eq(sac_auth_keypair_generate(&kp), 0);
  return kp;
}

/* A context with CURVE: kp (NULL: no CURVE at all), the server key, and the allowed
 * client keys (n_allow 0: no ZAP handler). */
static sac_net_ctx_t *ctx_with(const sac_auth_keypair_t *kp, const char *server_key, const char *const *allow,
                               size_t n_allow) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  cr_assert_not_null(ctx);
  if (!kp)
    return ctx;
  sac_net_curve_t c;
  memset(&c, 0, sizeof c);
  memcpy(c.public_key, kp->public_key, 41);
  memcpy(c.secret_key, kp->secret_key, 41);
  if (server_key)
    memcpy(c.server_key, server_key, 41);
  if (n_allow)
    cr_assert_eq(sac_auth_allow_from_keys(allow, n_allow, &c.allow), 0);
  cr_assert_eq(sac_net_ctx_set_curve(ctx, &c), 0);
  sac_net_curve_clear(&c);
  return ctx;
}

/* ---- key files ---- */

Test(keyfile, write_and_load_round_trip, .init = setup, .fini = teardown) {
  sac_auth_keypair_t kp = keypair(), back;
  char base[256];
  snprintf(base, sizeof base, "%s", path_in("node"));
  cr_assert_eq(sac_auth_keypair_write(base, &kp, 0), 0);
  struct stat st;
  cr_assert_eq(stat(path_in("node.key"), &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600, "the secret key file is mode 0600, not %o", st.st_mode & 0777);
  cr_assert_eq(stat(path_in("node.pub"), &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0644);
  cr_assert_eq(sac_auth_key_load(path_in("node.key"), &back), 0);
  cr_expect_str_eq(back.public_key, kp.public_key);
  cr_expect_str_eq(back.secret_key, kp.secret_key);
  char pub[41];
  cr_assert_eq(sac_auth_pub_load(path_in("node.pub"), pub), 0);
  cr_expect_str_eq(pub, kp.public_key);
  /* the .pub file is a valid allow-list too */
  sac_auth_allow_t *a = NULL;
  cr_assert_eq(sac_auth_allow_load(path_in("node.pub"), &a), 0);
  cr_expect_eq(sac_auth_allow_count(a), 1u);
  sac_auth_allow_destroy(&a);
  /* no silent overwrite; --force semantics replace both files */
  sac_auth_keypair_t kp2 = keypair();
  capture_t cap;
  cap_begin(&cap);
  int rc = sac_auth_keypair_write(base, &kp2, 0);
  const char *log = cap_end(&cap);
  cr_expect_eq(rc, SAC_EIO);
  must_mention(log, "node.key");
  cr_assert_eq(sac_auth_key_load(path_in("node.key"), &back), 0);
  cr_expect_str_eq(back.public_key, kp.public_key, "the old key is still there");
  cr_assert_eq(sac_auth_keypair_write(base, &kp2, 1), 0);
  cr_assert_eq(sac_auth_key_load(path_in("node.key"), &back), 0);
  cr_expect_str_eq(back.public_key, kp2.public_key);
}

Test(keyfile, every_defect_is_an_error_naming_file_and_line, .init = setup, .fini = teardown) {
  sac_auth_keypair_t a = keypair(), b = keypair();
  char t[1024];
  struct {
    const char *name;
    char text[1024];
    const char *mentions[2];
  } cases[9];
  int n = 0;
#define CASE(nm, m1, m2, ...)                                                                                \
  do {                                                                                                       \
    cases[n].name = nm;                                                                                      \
    snprintf(cases[n].text, sizeof cases[n].text, __VA_ARGS__);                                              \
    cases[n].mentions[0] = m1;                                                                               \
    cases[n].mentions[1] = m2;                                                                               \
    n++;                                                                                                     \
  } while (0)
  CASE("short.key", "short.key:2:", "not 40 Z85", "# a comment\npublic = abc\nsecret = %s\n", a.secret_key);
  CASE("name.key", "name.key:3:", "expected", "public = %s\nsecret = %s\nprivate = x\n", a.public_key,
       a.secret_key);
  CASE("nosecret.key", "nosecret.key", "no secret key line", "public = %s\n", a.public_key);
  CASE("nopublic.key", "nopublic.key", "no public key line", "\n# nothing\nsecret = %s\n", a.secret_key);
  CASE("twice.key", "twice.key:3:", "a second public", "public = %s\nsecret = %s\npublic = %s\n",
       a.public_key, a.secret_key, b.public_key);
  CASE("mixed.key", "mixed.key", "does not belong", "public = %s\nsecret = %s\n", a.public_key, b.secret_key);
  memset(t, 'x', 400);
  t[400] = '\0';
  CASE("long.key", "long.key:1:", "too long", "public = %.400s\n", t);
  CASE("empty.key", "empty.key", "no public key line", "%s", "");
  CASE("badchar.key", "badchar.key:1:", "not 40 Z85", "public = %.39s\"\nsecret = %s\n", a.public_key,
       a.secret_key);
#undef CASE
  for (int i = 0; i < n; i++) {
    const char *p = write_text(cases[i].name, cases[i].text);
    sac_auth_keypair_t out;
    capture_t cap;
    cap_begin(&cap);
    int rc = sac_auth_key_load(p, &out);
    const char *log = cap_end(&cap);
    cr_expect_eq(rc, SAC_ECONFIG, "%s: %d", cases[i].name, rc);
    must_mention(log, cases[i].mentions[0]);
    must_mention(log, cases[i].mentions[1]);
  }
  sac_auth_keypair_t out;
  capture_t cap;
  cap_begin(&cap);
  int rc = sac_auth_key_load(path_in("missing.key"), &out);
  const char *log = cap_end(&cap);
  cr_expect_eq(rc, SAC_ECONFIG);
  must_mention(log, "missing.key");
  /* allow-lists */
  const char *bad_allow[][3] = {
      {"secret.allow", "secret.allow:2:", "a secret key does not belong"},
      {"junk.allow", "junk.allow:3:", "not a public key"},
      {"none.allow", "none.allow", "no client public key"},
  };
  snprintf(t, sizeof t, "%s\nsecret = %s\n", a.public_key, a.secret_key);
  write_text("secret.allow", t);
  snprintf(t, sizeof t, "# actors\npublic = %s\nnot-a-key\n", a.public_key);
  write_text("junk.allow", t);
  write_text("none.allow", "# nobody yet\n\n");
  for (int i = 0; i < 3; i++) {
    sac_auth_allow_t *al = NULL;
    cap_begin(&cap);
    rc = sac_auth_allow_load(path_in(bad_allow[i][0]), &al);
    log = cap_end(&cap);
    cr_expect_eq(rc, SAC_ECONFIG, "%s", bad_allow[i][0]);
    cr_expect_null(al);
    must_mention(log, bad_allow[i][1]);
    must_mention(log, bad_allow[i][2]);
  }
}

Test(keyfile, allow_list_forms, .init = setup, .fini = teardown) {
  /* Z85 uses '#' and '=' (never as the first character of a key): keys that contain
   * them must still parse, bare or as "public = KEY" */
  sac_auth_keypair_t hash, eq, plain = keypair();
  int found_hash = 0, found_eq = 0;
  for (int i = 0; i < 20000 && !(found_hash && found_eq); i++) {
    sac_auth_keypair_t k = keypair();
    if (!found_hash && strchr(k.public_key, '#'))
      hash = k, found_hash = 1;
    else if (!found_eq && strchr(k.public_key, '='))
      eq = k, found_eq = 1;
  }
  cr_assert(found_hash && found_eq, "20000 random keys: one with '#', one with '='");
  char t[1024];
  snprintf(t, sizeof t, "# allowed actors\n\n  %s  \npublic = %s\npublic=%s\r\n# commented out: %s\n%s\n",
           hash.public_key, eq.public_key, plain.public_key, plain.public_key,
           eq.public_key /* a duplicate: once */);
  sac_auth_allow_t *a = NULL;
  cr_assert_eq(sac_auth_allow_load(write_text("ok.allow", t), &a), 0);
  cr_expect_eq(sac_auth_allow_count(a), 3u);
  uint8_t bin[32];
  cr_assert_not_null(zmq_z85_decode(bin, hash.public_key));
  cr_expect(sac_auth_allow_has(a, bin));
  cr_assert_not_null(zmq_z85_decode(bin, eq.public_key));
  cr_expect(sac_auth_allow_has(a, bin));
  sac_auth_allow_destroy(&a);
  /* and a key file whose public key has a '#' */
  snprintf(t, sizeof t, "public = %s\nsecret = %s\n", hash.public_key, hash.secret_key);
  sac_auth_keypair_t back;
  cr_assert_eq(sac_auth_key_load(write_text("hash.key", t), &back), 0);
  cr_expect_str_eq(back.public_key, hash.public_key);
}

/* ---- a binary's options ---- */

Test(config, half_configured_sets_name_the_missing_option, .init = setup, .fini = teardown) {
  sac_auth_keypair_t srv = keypair(), cli = keypair();
  cr_assert_eq(sac_auth_keypair_write(path_in("srv"), &srv, 0), 0);
  cr_assert_eq(sac_auth_keypair_write(path_in("cli"), &cli, 0), 0);
  const char *key = path_in("srv.key"), *pub = path_in("srv.pub"), *allow = path_in("cli.pub");
  sac_net_curve_t c;
  cr_assert_eq(sac_auth_configure("", "", "", SAC_AUTH_BINDS | SAC_AUTH_CONNECTS, &c), 0);
  cr_expect_eq(c.public_key[0], '\0', "all empty: CURVE off");
  struct {
    const char *k, *s, *a;
    unsigned roles;
    const char *mention;
  } bad[] = {
      {key, "", "", SAC_AUTH_BINDS, "curve_allow"},
      {key, "", allow, SAC_AUTH_CONNECTS, "curve_server_key"},
      {"", pub, "", SAC_AUTH_CONNECTS, "curve_key"},
      {"", "", allow, SAC_AUTH_BINDS, "curve_key"},
      {pub, pub, "", SAC_AUTH_CONNECTS, "no secret key line"}, /* a .pub given as curve_key */
      {key, key, path_in("nothere"), SAC_AUTH_BINDS | SAC_AUTH_CONNECTS, "nothere"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    capture_t cap;
    cap_begin(&cap);
    int rc = sac_auth_configure(bad[i].k, bad[i].s, bad[i].a, bad[i].roles, &c);
    const char *log = cap_end(&cap);
    cr_expect_eq(rc, SAC_ECONFIG, "case %zu: %d", i, rc);
    must_mention(log, bad[i].mention);
  }
  cr_assert_eq(sac_auth_configure(key, pub, allow, SAC_AUTH_BINDS | SAC_AUTH_CONNECTS, &c), 0);
  cr_expect_str_eq(c.public_key, srv.public_key);
  cr_expect_str_eq(c.server_key, srv.public_key);
  cr_expect_eq(sac_auth_allow_count(c.allow), 1u);
  sac_net_curve_clear(&c);
  cr_expect_null(c.allow);
  /* a CURVE context without a server key cannot connect over tcp: a clear error, no socket */
  sac_net_ctx_t *ctx = ctx_with(&cli, NULL, NULL, 0);
  capture_t cap;
  cap_begin(&cap);
  sac_weights_sub_t *sub = sac_weights_sub_new(ctx, "tcp://127.0.0.1:9", 3, 1);
  const char *log = cap_end(&cap);
  cr_expect_null(sub);
  must_mention(log, "curve_server_key");
  sac_net_ctx_destroy(&ctx);
}

Test(keygen, binary_writes_a_usable_pair, .init = setup, .fini = teardown) {
  char cmd[512], out[128] = "";
  snprintf(cmd, sizeof cmd, "'%s' --out '%s' 2>/dev/null", KEYGEN, path_in("k"));
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  cr_assert_not_null(fgets(out, sizeof out, p));
  cr_assert_eq(pclose(p), 0);
  out[strcspn(out, "\n")] = '\0';
  sac_auth_keypair_t kp;
  cr_assert_eq(sac_auth_key_load(path_in("k.key"), &kp), 0, "the secret matches the public key");
  char pub[41];
  cr_assert_eq(sac_auth_pub_load(path_in("k.pub"), pub), 0);
  cr_expect_str_eq(pub, kp.public_key);
  cr_expect_str_eq(out, kp.public_key, "stdout is the public key");
  struct stat st;
  cr_assert_eq(stat(path_in("k.key"), &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  snprintf(cmd, sizeof cmd, "'%s' --out '%s' >/dev/null 2>&1", KEYGEN, path_in("k"));
  cr_expect_eq(WEXITSTATUS(system(cmd)), 1, "an existing key is not overwritten");
  sac_auth_keypair_t again;
  cr_assert_eq(sac_auth_key_load(path_in("k.key"), &again), 0);
  cr_expect_str_eq(again.secret_key, kp.secret_key);
  snprintf(cmd, sizeof cmd, "'%s' --out '%s' --force >/dev/null 2>&1", KEYGEN, path_in("k"));
  cr_expect_eq(WEXITSTATUS(system(cmd)), 0);
  cr_assert_eq(sac_auth_key_load(path_in("k.key"), &again), 0);
  cr_expect_str_neq(again.public_key, kp.public_key, "--force writes a new pair");
  snprintf(cmd, sizeof cmd, "'%s' >/dev/null 2>&1", KEYGEN);
  cr_expect_eq(WEXITSTATUS(system(cmd)), 2, "no --out: usage error");
  snprintf(cmd, sizeof cmd, "'%s' --help", KEYGEN);
  p = popen(cmd, "r");
  char help[4096];
  size_t n = fread(help, 1, sizeof help - 1, p);
  help[n] = '\0';
  cr_expect_eq(pclose(p), 0);
  must_mention(help, "--out DIR/NAME");
  must_mention(help, "NAME.key");
  must_mention(help, "0600");
  must_mention(help, "curve_allow");
}

/* ---- CURVE on the wire ---- */

#define OBS 5
#define ACT 2

static sac_replay_server_t *server_on(sac_net_ctx_t *ctx, const char *ins_ep, const char *smp_ep) {
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.durability = SAC_REPLAY_DURABILITY_NONE; /* memory only: not what this test is about */
  c.shard.capacity = 4096;
  c.shard.obs_dim = OBS;
  c.shard.act_dim = ACT;
  c.shard.min_size = 8;
  c.shard.max_batch_rows = 64;
  c.shard.max_sample_batch = 64;
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "%s", ins_ep);
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "%s", smp_ep);
  c.snapshot_interval_s = 0;
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_not_null(s, "server: %s", sac_strerror(err));
  cr_assert_eq(sac_replay_server_start(s), 0);
  return s;
}

/* Inserts 4 batches through a client of ctx and flushes; returns the first failure
 * (SAC_ETIMEOUT: a send found no room, the shard never acknowledged the first batch,
 * since a client keeps one batch in flight until the first ack) or the flush's result. */
static int try_insert(sac_net_ctx_t *ctx, const char *ep, uint32_t actor, int flush_ms) {
  sac_replay_client_config_t c;
  sac_replay_client_config_default(&c);
  c.n_shards = 1;
  c.insert_endpoints = (const char *const[]){ep};
  c.ctx = ctx;
  c.actor_id = actor;
  sac_replay_client_t *cl = sac_replay_client_new(&c);
  cr_assert_not_null(cl);
  tg_t g;
  tg_init(&g, actor, 2, OBS, ACT, 20, 4); /* 8 rows per batch */
  int rc = 0;
  for (int b = 0; b < 4 && rc == 0; b++)
    rc = sac_replay_client_insert(cl, 0, tg_next(&g), b == 0 ? 1000 : flush_ms / 2);
  if (rc == 0)
    rc = sac_replay_client_flush(cl, flush_ms);
  sac_replay_client_destroy(&cl);
  tg_free(&g);
  return rc;
}

/* Asks for one batch through a client of ctx; returns the sample's result. */
static int try_sample(sac_net_ctx_t *ctx, const char *ep, int timeout_ms) {
  sac_replay_client_config_t c;
  sac_replay_client_config_default(&c);
  c.n_shards = 1;
  c.sample_endpoints = (const char *const[]){ep};
  c.ctx = ctx;
  c.batch_size = 8;
  c.obs_dim = OBS;
  c.act_dim = ACT;
  sac_replay_client_t *cl = sac_replay_client_new(&c);
  cr_assert_not_null(cl);
  sac_replay_batch_t b;
  int rc = sac_replay_client_sample(cl, timeout_ms, &b);
  if (rc == 0) {
    cr_expect_eq(b.n, 8u);
    for (uint32_t i = 0; i < b.n; i++) {
      const char *why;
      cr_expect(tg_check(OBS, ACT, b.obs + i * OBS, b.action + i * ACT, b.reward[i], b.terminated[i],
                         b.next_obs + i * OBS, &why),
                "a sampled transition is one that was inserted: %s", why);
    }
  }
  sac_replay_client_destroy(&cl);
  return rc;
}

/* The server's stored rows once they equal want, or after 1 s (its published stats
 * trail the acks by up to one loop turn, 50 ms). */
static uint64_t inserted_rows(sac_replay_server_t *s, uint64_t want) {
  sac_replay_stats_t st;
  uint64_t end = sac_clock_ns() + 1000000000ull;
  do {
    sac_replay_server_stats(s, &st);
    if (st.shard.inserted_rows_total == want)
      break;
    sac_sleep_ns(10000000ull);
  } while (sac_clock_ns() < end);
  return st.shard.inserted_rows_total;
}

Test(wire, replay_insert_and_sample_need_an_allowed_key, .timeout = 90) {
  sac_auth_keypair_t srv = keypair(), good = keypair(), stranger = keypair();
  sac_net_ctx_t *sctx = ctx_with(&srv, NULL, (const char *const[]){good.public_key}, 1);
  sac_replay_server_t *s = server_on(sctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  char ins[256], smp[256];
  snprintf(ins, sizeof ins, "%s", sac_replay_server_insert_endpoint(s));
  snprintf(smp, sizeof smp, "%s", sac_replay_server_sample_endpoint(s));
  cr_assert_eq(strncmp(ins, "tcp://127.0.0.1:", 16), 0);

  /* 1. no CURVE at all: the handshake fails on the mechanism */
  sac_net_ctx_t *plain = ctx_with(NULL, NULL, NULL, 0);
  cr_expect_eq(try_insert(plain, ins, 1, 2000), SAC_ETIMEOUT, "a client without a key inserts nothing");
  cr_expect_eq(try_sample(plain, smp, 2000), SAC_ETIMEOUT, "a client without a key samples nothing");
  sac_net_ctx_destroy(&plain);
  uint64_t acc, den;
  sac_net_ctx_auth_counts(sctx, &acc, &den);
  cr_expect_eq(acc, 0u);

  /* 2. a key the server does not allow: ZAP says 400 */
  sac_net_ctx_t *strange = ctx_with(&stranger, srv.public_key, NULL, 0);
  cr_expect_eq(try_insert(strange, ins, 2, 2000), SAC_ETIMEOUT, "an unlisted key inserts nothing");
  cr_expect_eq(try_sample(strange, smp, 2000), SAC_ETIMEOUT, "an unlisted key samples nothing");
  sac_net_ctx_destroy(&strange);
  sac_net_ctx_auth_counts(sctx, &acc, &den);
  cr_expect_eq(acc, 0u);
  cr_expect_geq(den, 2u, "the ZAP handler denied the unlisted key on both endpoints (%llu)",
                (unsigned long long)den);

  /* 3. an allowed key pinned to the wrong server key: the handshake fails */
  sac_net_ctx_t *wrong = ctx_with(&good, stranger.public_key, NULL, 0);
  cr_expect_eq(try_insert(wrong, ins, 3, 2000), SAC_ETIMEOUT,
               "a client that does not trust the server's key");
  sac_net_ctx_destroy(&wrong);
  cr_expect_eq(inserted_rows(s, 0), 0u, "nothing stored from any refused client");

  /* 4. the allowed key: inserts are acknowledged, samples served */
  sac_net_ctx_t *ok = ctx_with(&good, srv.public_key, NULL, 0);
  cr_expect_eq(try_insert(ok, ins, 4, 3000), 0, "the allowed client's batches are acknowledged");
  cr_expect_eq(inserted_rows(s, 32), 32u);
  cr_expect_eq(try_sample(ok, smp, 3000), 0, "the allowed client samples");
  sac_net_ctx_destroy(&ok);
  sac_net_ctx_auth_counts(sctx, &acc, &den);
  cr_expect_geq(acc, 2u, "accepted on both endpoints (%llu)", (unsigned long long)acc);

  /* the process totals are what /metrics shows */
  uint64_t tacc, tden;
  sac_auth_totals(&tacc, &tden);
  cr_expect_geq(tacc, acc);
  cr_expect_geq(tden, den);
  sac_metrics_t *r = sac_metrics_new();
  cr_assert_eq(sac_auth_metrics_register(r), 0);
  char *text = NULL, want[96];
  cr_assert_eq(sac_metrics_render(r, &text, NULL), 0);
  snprintf(want, sizeof want, "sac_auth_denied_total %llu", (unsigned long long)tden);
  cr_expect_not_null(strstr(text, want), "%s in:\n%s", want, text);
  cr_expect_not_null(strstr(text, "# TYPE sac_auth_accepted_total counter"));
  free(text);
  sac_metrics_destroy(&r);

  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&sctx);
}

/* Publishes version v every 20 ms for ms milliseconds while polling every subscriber. */
static void publish_for(sac_weights_pub_t *pub, const float *p, sac_weights_sub_t **subs, int n, int ms) {
  uint64_t end = sac_clock_ns() + (uint64_t)ms * 1000000u;
  uint64_t v = 1;
  while (sac_clock_ns() < end) {
    cr_assert_eq(sac_weights_publish(pub, v++, p), 0);
    for (int i = 0; i < n; i++)
      cr_assert_geq(sac_weights_wait(subs[i], 20 / n + 1), 0);
  }
}

Test(wire, weights_reach_only_allowed_subscribers, .timeout = 60) {
  sac_auth_keypair_t srv = keypair(), good = keypair(), stranger = keypair();
  sac_net_ctx_t *pctx = ctx_with(&srv, NULL, (const char *const[]){good.public_key}, 1);
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 3, 16, 2, 2, SAC_ACT_RELU, 1);
  size_t n = sac_mlp_param_count(&d);
  float *p = calloc(n, sizeof(float));
  sac_rng_t rng;
  sac_rng_init(&rng, 1, 1);
  sac_mlp_init_params(&d, p, &rng);
  char ep[256];
  sac_weights_pub_t *pub = sac_weights_pub_new(pctx, "tcp://127.0.0.1:*", &d, ep, sizeof ep);
  cr_assert_not_null(pub);
  sac_net_ctx_t *cx[3] = {ctx_with(NULL, NULL, NULL, 0), ctx_with(&stranger, srv.public_key, NULL, 0),
                          ctx_with(&good, srv.public_key, NULL, 0)};
  sac_weights_sub_t *subs[3];
  for (int i = 0; i < 3; i++) {
    subs[i] = sac_weights_sub_new(cx[i], ep, 3, 1);
    cr_assert_not_null(subs[i]);
  }
  publish_for(pub, p, subs, 3, 2500);
  cr_expect_eq(sac_weights_received(subs[0]), 0u, "a SUB without a key receives nothing");
  cr_expect_eq(sac_weights_received(subs[1]), 0u, "a SUB with an unlisted key receives nothing");
  cr_expect_gt(sac_weights_received(subs[2]), 0u, "the allowed SUB receives the weights");
  cr_expect_null(sac_weights_params(subs[0]));
  cr_expect_null(sac_weights_params(subs[1]));
  cr_assert_not_null(sac_weights_params(subs[2]));
  cr_expect_eq(memcmp(sac_weights_params(subs[2]), p, n * sizeof(float)), 0);
  uint64_t acc, den;
  sac_net_ctx_auth_counts(pctx, &acc, &den);
  cr_expect_geq(den, 1u);
  cr_expect_geq(acc, 1u);
  for (int i = 0; i < 3; i++) {
    sac_weights_sub_destroy(&subs[i]);
    sac_net_ctx_destroy(&cx[i]);
  }
  sac_weights_pub_destroy(&pub);
  sac_net_ctx_destroy(&pctx);
  free(p);
}

Test(wire, inproc_in_a_curve_context_is_unaffected, .timeout = 60) {
  /* the learner's embedded default: shards, actors and learner share one context over
   * inproc://; CURVE on that context must change nothing there */
  sac_auth_keypair_t kp = keypair(), other = keypair();
  sac_net_ctx_t *ctx = ctx_with(&kp, kp.public_key, (const char *const[]){other.public_key}, 1);
  sac_replay_server_t *s = server_on(ctx, "inproc://curve-ins", "inproc://curve-smp");
  cr_expect_eq(try_insert(ctx, "inproc://curve-ins", 1, 3000), 0);
  cr_expect_eq(try_sample(ctx, "inproc://curve-smp", 3000), 0);
  uint64_t acc, den;
  sac_net_ctx_auth_counts(ctx, &acc, &den);
  cr_expect_eq(acc + den, 0u, "inproc runs no handshake, so ZAP is never asked");
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}
