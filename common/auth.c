/* CURVE key files, allow-lists and the ZAP handler (see auth.h). The handler is one
 * thread per context with two sockets of its own: the REP socket on
 * inproc://zeromq.zap.01 that libzmq sends its requests to, and one end of a PAIR pipe
 * whose message tells it to stop (the other end stays with sac_auth_stop). */
#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

static atomic_uint_fast64_t g_accepted, g_denied; /* over every handler of the process */

/* ---- keys and key files ---- */

int sac_auth_keypair_generate(sac_auth_keypair_t *out) {
  memset(out, 0, sizeof *out);
  if (!zmq_has("curve") || zmq_curve_keypair(out->public_key, out->secret_key) != 0) {
    SAC_ERROR("auth", "cannot make a CURVE key pair: this libzmq was built without CURVE support");
    return SAC_EUNSUPPORTED;
  }
  return 0;
}

static int write_file(const char *path, const char *text, mode_t mode, int overwrite) {
  if (overwrite && unlink(path) != 0 && errno != ENOENT) {
    SAC_ERROR("auth", "cannot replace %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  /* O_EXCL: a new file, so the mode below is the mode it gets, whatever was there */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    SAC_ERROR("auth", "cannot create %s: %s%s", path, strerror(errno),
              errno == EEXIST ? " (use --force to overwrite)" : "");
    return SAC_EIO;
  }
  size_t len = strlen(text), off = 0;
  int ok = fchmod(fd, mode) == 0;
  while (ok && off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    off += n > 0 ? (size_t)n : 0;
  }
  ok = ok && fsync(fd) == 0;
  if (close(fd) != 0)
    ok = 0;
  if (!ok) {
    SAC_ERROR("auth", "cannot write %s: %s", path, strerror(errno));
    unlink(path);
    return SAC_EIO;
  }
  return 0;
}

int sac_auth_keypair_write(const char *base, const sac_auth_keypair_t *kp, int overwrite) {
  char key_path[4096], pub_path[4096], text[512];
  if (snprintf(key_path, sizeof key_path, "%s.key", base) >= (int)sizeof key_path ||
      snprintf(pub_path, sizeof pub_path, "%s.pub", base) >= (int)sizeof pub_path) {
    SAC_ERROR("auth", "key file name too long: %s", base);
    return SAC_EINVAL;
  }
  snprintf(text, sizeof text,
           "# sacfleet CurveZMQ key pair (sac-keygen). SECRET: keep this file, mode 0600, on the host\n"
           "# of the process it identifies (curve_key). Its public half is in the .pub file.\n"
           "public = %s\n"
           "secret = %s\n",
           kp->public_key, kp->secret_key);
  int rc = write_file(key_path, text, 0600, overwrite);
  memset(text, 0, sizeof text);
  if (rc)
    return rc;
  snprintf(text, sizeof text,
           "# sacfleet CurveZMQ public key (sac-keygen). A server's: the clients' curve_server_key.\n"
           "# A client's: a line for the servers' allow-list (curve_allow).\n"
           "public = %s\n",
           kp->public_key);
  if ((rc = write_file(pub_path, text, 0644, overwrite)) != 0) {
    unlink(key_path);
    return rc;
  }
  return 0;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
    e--;
  *e = '\0';
  return s;
}

/* 40 Z85 characters decoding to 32 bytes (bin may be NULL). */
static int z85_key(const char *s, uint8_t *bin) {
  uint8_t tmp[32];
  return strlen(s) == SAC_AUTH_Z85_LEN && zmq_z85_decode(bin ? bin : tmp, s) != NULL;
}

/* One meaningful line of a key or allow-list file: *name ("public", "secret", or "" for a
 * bare value) and *value, both trimmed. Comments are whole lines that start with '#'. Returns 1 for such a
 * line, 0 at the end of the file, SAC_ECONFIG (logged) for a line too long. *line counts lines. */
static int next_entry(FILE *f, const char *path, int *line, char *buf, size_t cap, char **name,
                      char **value) {
  while (fgets(buf, (int)cap, f)) {
    (*line)++;
    size_t len = strlen(buf);
    if (len == cap - 1 && buf[len - 1] != '\n' && !feof(f)) {
      SAC_ERROR("auth", "%s:%d: line too long", path, *line);
      return SAC_ECONFIG;
    }
    char *s = trim(buf);
    /* '#' and '=' are Z85 characters (never a key's first one): a line that is exactly
     * one key is a bare key */
    int bare = z85_key(s, NULL);
    if (!*s || (*s == '#' && !bare))
      continue;
    char *eq = bare ? NULL : strchr(s, '=');
    if (eq) {
      *eq = '\0';
      *name = trim(s);
      *value = trim(eq + 1);
    } else {
      *name = s + strlen(s); /* "" */
      *value = s;
    }
    return 1;
  }
  return 0;
}

/* Reads a key file: the public line always, the secret line when secret != NULL. */
static int load_key_file(const char *path, char *pub, char *secret) {
  FILE *f = fopen(path, "r");
  if (!f) {
    SAC_ERROR("auth", "cannot read key file %s: %s", path, strerror(errno));
    return SAC_ECONFIG;
  }
  char buf[256], *name, *value;
  int line = 0, rc, have_pub = 0, have_sec = 0;
  while ((rc = next_entry(f, path, &line, buf, sizeof buf, &name, &value)) == 1) {
    int is_pub = strcmp(name, "public") == 0, is_sec = strcmp(name, "secret") == 0;
    if (!is_pub && !is_sec) {
      SAC_ERROR("auth", "%s:%d: expected \"public = KEY\" or \"secret = KEY\"", path, line);
      rc = SAC_ECONFIG;
      break;
    }
    if ((is_pub && have_pub) || (is_sec && have_sec)) {
      SAC_ERROR("auth", "%s:%d: a second %s key", path, line, name);
      rc = SAC_ECONFIG;
      break;
    }
    if (!z85_key(value, NULL)) {
      SAC_ERROR("auth", "%s:%d: the %s key is not 40 Z85 characters", path, line, name);
      rc = SAC_ECONFIG;
      break;
    }
    if (is_pub) {
      memcpy(pub, value, SAC_AUTH_Z85_LEN + 1);
      have_pub = 1;
    } else {
      if (secret)
        memcpy(secret, value, SAC_AUTH_Z85_LEN + 1);
      have_sec = 1;
    }
  }
  memset(buf, 0, sizeof buf);
  fclose(f);
  if (rc < 0)
    return rc;
  if (!have_pub || (secret && !have_sec)) {
    SAC_ERROR("auth", "%s: no %s key line (\"%s = KEY\"); sac-keygen writes NAME.key and NAME.pub", path,
              !have_pub ? "public" : "secret", !have_pub ? "public" : "secret");
    return SAC_ECONFIG;
  }
  return 0;
}

int sac_auth_key_load(const char *path, sac_auth_keypair_t *out) {
  memset(out, 0, sizeof *out);
  int rc = load_key_file(path, out->public_key, out->secret_key);
  if (rc)
    return rc;
  char derived[SAC_AUTH_Z85_LEN + 1];
  if (zmq_curve_public(derived, out->secret_key) != 0 || strcmp(derived, out->public_key) != 0) {
    SAC_ERROR("auth", "%s: the secret key does not belong to the public key", path);
    memset(out, 0, sizeof *out);
    return SAC_ECONFIG;
  }
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & 077))
    SAC_WARN("auth", "secret key file %s can be read by others (mode %03o): chmod 600 it", path,
             (unsigned)(st.st_mode & 0777));
  return 0;
}

int sac_auth_pub_load(const char *path, char out[SAC_AUTH_Z85_LEN + 1]) {
  memset(out, 0, SAC_AUTH_Z85_LEN + 1);
  return load_key_file(path, out, NULL);
}

/* ---- allow-lists ---- */

struct sac_auth_allow {
  size_t n, cap;
  uint8_t (*keys)[32];
};

static int allow_add(sac_auth_allow_t *a, const uint8_t key[32]) {
  if (sac_auth_allow_has(a, key))
    return 0;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    void *k = realloc(a->keys, cap * 32);
    if (!k)
      return SAC_ENOMEM;
    a->keys = k;
    a->cap = cap;
  }
  memcpy(a->keys[a->n++], key, 32);
  return 0;
}

int sac_auth_allow_load(const char *path, sac_auth_allow_t **out) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) {
    SAC_ERROR("auth", "cannot read allow-list %s: %s", path, strerror(errno));
    return SAC_ECONFIG;
  }
  sac_auth_allow_t *a = calloc(1, sizeof *a);
  char buf[256], *name, *value;
  int line = 0, rc = a ? 0 : SAC_ENOMEM;
  while (!rc && (rc = next_entry(f, path, &line, buf, sizeof buf, &name, &value)) == 1) {
    uint8_t key[32];
    rc = 0;
    if (*name && strcmp(name, "public") != 0) {
      SAC_ERROR("auth", "%s:%d: expected a client public key (KEY or \"public = KEY\")%s", path, line,
                strcmp(name, "secret") == 0 ? "; a secret key does not belong in an allow-list" : "");
      rc = SAC_ECONFIG;
    } else if (!z85_key(value, key)) {
      SAC_ERROR("auth", "%s:%d: not a public key (40 Z85 characters)", path, line);
      rc = SAC_ECONFIG;
    } else {
      rc = allow_add(a, key);
    }
  }
  fclose(f);
  if (!rc && a->n == 0) {
    SAC_ERROR("auth", "%s: no client public key in the allow-list", path);
    rc = SAC_ECONFIG;
  }
  if (rc) {
    sac_auth_allow_destroy(&a);
    return rc;
  }
  *out = a;
  return 0;
}

int sac_auth_allow_from_keys(const char *const *z85, size_t n, sac_auth_allow_t **out) {
  *out = NULL;
  sac_auth_allow_t *a = calloc(1, sizeof *a);
  if (!a)
    return SAC_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    uint8_t key[32];
    int rc = z85_key(z85[i], key) ? allow_add(a, key) : SAC_EINVAL;
    if (rc) {
      sac_auth_allow_destroy(&a);
      return rc;
    }
  }
  *out = a;
  return 0;
}

static sac_auth_allow_t *allow_copy(const sac_auth_allow_t *a) {
  sac_auth_allow_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  if (a->n && !(c->keys = malloc(a->n * 32))) {
    free(c);
    return NULL;
  }
  if (a->n)
    memcpy(c->keys, a->keys, a->n * 32);
  c->n = c->cap = a->n;
  return c;
}

size_t sac_auth_allow_count(const sac_auth_allow_t *a) { return a ? a->n : 0; }

int sac_auth_allow_has(const sac_auth_allow_t *a, const uint8_t key[32]) {
  for (size_t i = 0; a && i < a->n; i++)
    if (memcmp(a->keys[i], key, 32) == 0)
      return 1;
  return 0;
}

void sac_auth_allow_destroy(sac_auth_allow_t **ap) {
  if (!ap || !*ap)
    return;
  free((*ap)->keys);
  free(*ap);
  *ap = NULL;
}

/* ---- the ZAP handler ---- */

#define LOG_BURST 5.0     /* denial lines logged at once at most... */
#define LOG_REFILL_S 12.0 /* ...then one per this many seconds */
#define ZAP_MAX_FRAMES 8

struct sac_auth {
  void *rep;                     /* inproc://zeromq.zap.01; the thread's once started */
  void *pipe_main, *pipe_thread; /* PAIR: one message stops the thread */
  pthread_t thread;
  sac_auth_allow_t *allow;
  atomic_uint_fast64_t accepted, denied;
  double tokens, tokens_t; /* denial log rate limit (thread only) */
  uint64_t unlogged;
};

static int send_frame(void *s, const void *buf, size_t len, int more) {
  int rc;
  do {
    rc = zmq_send(s, buf, len, more ? ZMQ_SNDMORE : 0);
  } while (rc < 0 && zmq_errno() == EINTR);
  return rc < 0 ? SAC_ZCHK(rc) : 0;
}

static void log_denial(sac_auth_t *a, const char *key_prefix, const char *address, const char *why) {
  double now = sac_clock_s();
  a->tokens += (now - a->tokens_t) / LOG_REFILL_S;
  if (a->tokens > LOG_BURST)
    a->tokens = LOG_BURST;
  a->tokens_t = now;
  if (a->tokens < 1.0) {
    a->unlogged++;
    return;
  }
  a->tokens -= 1.0;
  SAC_WARN("auth",
           "denied a connection from %s, client key %s...: %s (%llu more denials not logged before this)",
           address[0] ? address : "?", key_prefix, why, (unsigned long long)a->unlogged);
  a->unlogged = 0;
}

/* Receives one ZAP request and answers it. */
static void zap_serve_one(sac_auth_t *a) {
  zmq_msg_t f[ZAP_MAX_FRAMES];
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t extra, *m = n < ZAP_MAX_FRAMES ? &f[n] : &extra; /* frames past the last dropped */
    zmq_msg_init(m);
    if (zmq_msg_recv(m, a->rep, 0) < 0) {
      zmq_msg_close(m);
      break;
    }
    more = zmq_msg_more(m);
    if (m == &extra)
      zmq_msg_close(m);
    else
      n++;
  }
  /* frames: version, request id, domain, address, routing id, mechanism, credentials... */
  char address[64] = "", mech[16] = "", prefix[16] = "none";
  const char *why = NULL;
  const char *req_id = n > 1 ? zmq_msg_data(&f[1]) : "";
  size_t req_id_len = n > 1 ? zmq_msg_size(&f[1]) : 0;
  if (n < 6 || zmq_msg_size(&f[0]) != 3 || memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
    why = "malformed ZAP request";
  } else {
    size_t len = zmq_msg_size(&f[3]) < sizeof address - 1 ? zmq_msg_size(&f[3]) : sizeof address - 1;
    memcpy(address, zmq_msg_data(&f[3]), len);
    address[len] = '\0';
    len = zmq_msg_size(&f[5]) < sizeof mech - 1 ? zmq_msg_size(&f[5]) : sizeof mech - 1;
    memcpy(mech, zmq_msg_data(&f[5]), len);
    mech[len] = '\0';
    if (strcmp(mech, "CURVE") != 0 || n != 7 || zmq_msg_size(&f[6]) != 32) {
      why = "not a CURVE client";
    } else {
      char z85[SAC_AUTH_Z85_LEN + 1];
      if (zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32)) {
        memcpy(prefix, z85, 8);
        prefix[8] = '\0';
      }
      if (!sac_auth_allow_has(a->allow, zmq_msg_data(&f[6])))
        why = "key not in the allow-list";
    }
  }
  int ok = why == NULL;
  if (ok) {
    atomic_fetch_add(&a->accepted, 1);
    atomic_fetch_add(&g_accepted, 1);
    SAC_DEBUG("auth", "accepted client key %s... from %s", prefix, address);
  } else {
    atomic_fetch_add(&a->denied, 1);
    atomic_fetch_add(&g_denied, 1);
    log_denial(a, prefix, address, why);
  }
  /* the reply: version, request id, status code, status text, user id, metadata */
  const char *text = ok ? "OK" : why;
  if (send_frame(a->rep, "1.0", 3, 1) == 0 && send_frame(a->rep, req_id, req_id_len, 1) == 0 &&
      send_frame(a->rep, ok ? "200" : "400", 3, 1) == 0 && send_frame(a->rep, text, strlen(text), 1) == 0 &&
      send_frame(a->rep, ok ? prefix : "", ok ? strlen(prefix) : 0, 1) == 0)
    send_frame(a->rep, "", 0, 0);
  for (int i = 0; i < n; i++)
    zmq_msg_close(&f[i]);
}

static void *zap_thread(void *arg) {
  sac_auth_t *a = arg;
  for (;;) {
    zmq_pollitem_t it[2] = {{a->rep, 0, ZMQ_POLLIN, 0}, {a->pipe_thread, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(it, 2, -1);
    if (rc < 0) {
      if (zmq_errno() == EINTR)
        continue;
      SAC_ZCHK(rc);
      break;
    }
    if (it[1].revents & ZMQ_POLLIN)
      break;
    if (it[0].revents & ZMQ_POLLIN)
      zap_serve_one(a);
  }
  zmq_close(a->rep);
  zmq_close(a->pipe_thread);
  return NULL;
}

sac_auth_t *sac_auth_start(void *zctx, const sac_auth_allow_t *allow) {
  static atomic_uint counter;
  sac_auth_t *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  a->tokens = LOG_BURST;
  a->tokens_t = sac_clock_s();
  char pipe_ep[96];
  snprintf(pipe_ep, sizeof pipe_ep, "inproc://sac-auth-pipe-%p-%u", (void *)a, atomic_fetch_add(&counter, 1));
  int zero = 0;
  a->allow = allow_copy(allow);
  a->rep = zmq_socket(zctx, ZMQ_REP);
  a->pipe_main = zmq_socket(zctx, ZMQ_PAIR);
  a->pipe_thread = zmq_socket(zctx, ZMQ_PAIR);
  if (!a->allow || !a->rep || !a->pipe_main || !a->pipe_thread ||
      SAC_ZCHK(zmq_setsockopt(a->rep, ZMQ_LINGER, &zero, sizeof zero)) < 0 ||
      SAC_ZCHK(zmq_setsockopt(a->pipe_main, ZMQ_LINGER, &zero, sizeof zero)) < 0 ||
      SAC_ZCHK(zmq_setsockopt(a->pipe_thread, ZMQ_LINGER, &zero, sizeof zero)) < 0 ||
      SAC_ZCHK(zmq_bind(a->pipe_thread, pipe_ep)) < 0 || SAC_ZCHK(zmq_connect(a->pipe_main, pipe_ep)) < 0)
    goto err;
  if (zmq_bind(a->rep, "inproc://zeromq.zap.01") != 0) {
    SAC_ERROR("auth", "cannot start the ZAP handler: %s (one handler per context)",
              zmq_strerror(zmq_errno()));
    goto err;
  }
  if (pthread_create(&a->thread, NULL, zap_thread, a) != 0) {
    SAC_ERROR("auth", "cannot start the ZAP handler thread");
    goto err;
  }
  SAC_DEBUG("auth", "ZAP handler serving: %zu allowed client key(s)", a->allow->n);
  return a;
err:
  if (a->rep)
    zmq_close(a->rep);
  if (a->pipe_main)
    zmq_close(a->pipe_main);
  if (a->pipe_thread)
    zmq_close(a->pipe_thread);
  sac_auth_allow_destroy(&a->allow);
  free(a);
  return NULL;
}

void sac_auth_stop(sac_auth_t **ap) {
  if (!ap || !*ap)
    return;
  sac_auth_t *a = *ap;
  /* a PAIR with LINGER 0 to a connected peer: the one byte is queued, never blocks */
  if (send_frame(a->pipe_main, "x", 1, 0) != 0)
    SAC_ERROR("auth", "cannot stop the ZAP handler thread cleanly");
  pthread_join(a->thread, NULL);
  zmq_close(a->pipe_main);
  sac_auth_allow_destroy(&a->allow);
  free(a);
  *ap = NULL;
}

void sac_auth_counts(const sac_auth_t *a, uint64_t *accepted, uint64_t *denied) {
  *accepted = atomic_load(&((sac_auth_t *)a)->accepted);
  *denied = atomic_load(&((sac_auth_t *)a)->denied);
}

void sac_auth_totals(uint64_t *accepted, uint64_t *denied) {
  *accepted = atomic_load(&g_accepted);
  *denied = atomic_load(&g_denied);
}

int sac_auth_metrics_register(sac_metrics_t *r) {
  if (!sac_metrics_counter_read(r, "sac_auth_accepted_total",
                                "CURVE client connections the ZAP handler accepted (key in curve_allow)",
                                NULL, sac_metric_read_atomic_u64, &g_accepted, 1.0, NULL) ||
      !sac_metrics_counter_read(r, "sac_auth_denied_total",
                                "CURVE client connections the ZAP handler denied (key not in curve_allow); "
                                "a client without CURVE fails the handshake before and is not counted",
                                NULL, sac_metric_read_atomic_u64, &g_denied, 1.0, NULL))
    return SAC_ENOMEM;
  return 0;
}

/* ---- a binary's three options ---- */

int sac_auth_configure(const char *curve_key, const char *curve_server_key, const char *curve_allow,
                       unsigned roles, sac_net_curve_t *out) {
  memset(out, 0, sizeof *out);
  if (!curve_key[0] && !curve_server_key[0] && !curve_allow[0])
    return 0;
  if (!curve_key[0]) {
    SAC_ERROR("auth",
              "%s is set but curve_key is empty: CURVE needs this process's own key pair "
              "(a NAME.key file from sac-keygen)",
              curve_server_key[0] ? "curve_server_key" : "curve_allow");
    return SAC_ECONFIG;
  }
  if ((roles & SAC_AUTH_CONNECTS) && !curve_server_key[0]) {
    SAC_ERROR("auth", "curve_key is set but curve_server_key is empty: this process connects to servers "
                      "and needs their public key (the servers' NAME.pub)");
    return SAC_ECONFIG;
  }
  if ((roles & SAC_AUTH_BINDS) && !curve_allow[0]) {
    SAC_ERROR("auth", "curve_key is set but curve_allow is empty: this process binds sockets and needs the "
                      "file of client public keys it accepts (otherwise any client would be accepted)");
    return SAC_ECONFIG;
  }
  if (!zmq_has("curve")) {
    SAC_ERROR("auth", "curve_key is set but this libzmq was built without CURVE support");
    return SAC_EUNSUPPORTED;
  }
  sac_auth_keypair_t kp;
  int rc = sac_auth_key_load(curve_key, &kp);
  if (rc) {
    SAC_ERROR("auth", "curve_key: cannot use %s", curve_key);
    return rc;
  }
  memcpy(out->public_key, kp.public_key, sizeof out->public_key);
  memcpy(out->secret_key, kp.secret_key, sizeof out->secret_key);
  memset(&kp, 0, sizeof kp);
  if (curve_server_key[0] && !(roles & SAC_AUTH_CONNECTS)) {
    SAC_WARN("auth", "curve_server_key is not used: this process connects to no server over tcp");
  } else if (curve_server_key[0] && (rc = sac_auth_pub_load(curve_server_key, out->server_key)) != 0) {
    SAC_ERROR("auth", "curve_server_key: cannot use %s", curve_server_key);
    sac_net_curve_clear(out);
    return rc;
  }
  if (curve_allow[0] && !(roles & SAC_AUTH_BINDS)) {
    SAC_WARN("auth", "curve_allow is not used: this process binds no socket over tcp");
  } else if (curve_allow[0] && (rc = sac_auth_allow_load(curve_allow, &out->allow)) != 0) {
    SAC_ERROR("auth", "curve_allow: cannot use %s", curve_allow);
    sac_net_curve_clear(out);
    return rc;
  }
  return 0;
}
