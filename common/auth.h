/* CurveZMQ keys, client allow-lists and the ZAP handler: the optional authentication and
 * encryption of sacfleet's ZeroMQ traffic (docs/RELIABILITY.md, "Authentication and
 * encryption"). A process reads its own key pair and its servers' public key from key
 * files (written by sac-keygen); a process that binds TCP sockets checks each connecting
 * client's public key against an allow-list in a ZAP handler (ZAP 1.0, RFC 27): a thread
 * serving inproc://zeromq.zap.01 in one ZeroMQ context, started by sac_net_ctx_set_curve
 * (common/net.h). This module sets no socket options (net.c does) and encrypts nothing
 * itself: libzmq's CURVE mechanism does.
 *
 * Key files are text: blank lines, comment lines starting with '#', and "name = value" lines,
 *   public = <40 Z85 characters>    (in NAME.pub and NAME.key)
 *   secret = <40 Z85 characters>    (in NAME.key only; that file is mode 0600)
 * An allow-list file holds client public keys, one per line, bare or as "public = KEY"
 * (so `cat actor-*.pub > allowed.txt` makes one), with blank lines and '#' comment lines
 * (Z85 keys contain '#' and '=', though never start with '#': a comment is a whole line).
 * Every error names the file and, where there is one, the line; a bad file is an error
 * returned (SAC_ECONFIG), never a crash. */
#ifndef SAC_COMMON_AUTH_H
#define SAC_COMMON_AUTH_H
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "common/net.h"

#define SAC_AUTH_Z85_LEN 40 /* characters of a 32-byte CURVE key in Z85 */

typedef struct {
  char public_key[SAC_AUTH_Z85_LEN + 1];
  char secret_key[SAC_AUTH_Z85_LEN + 1];
} sac_auth_keypair_t;

/* A new random key pair (zmq_curve_keypair). 0, or SAC_EUNSUPPORTED (libzmq built
 * without CURVE), logged. */
int sac_auth_keypair_generate(sac_auth_keypair_t *out);
/* Writes base.key (public and secret, mode 0600) and base.pub (public, mode 0644). An
 * existing file is an error (SAC_EIO, logged) unless overwrite; nothing is left half
 * written: on failure both files are removed. */
int sac_auth_keypair_write(const char *base, const sac_auth_keypair_t *kp, int overwrite);
/* Reads a .key file: both lines present, valid Z85, and the secret key's public half
 * equal to the public line. 0 or SAC_ECONFIG (logged with file and line). Logs a
 * warning when the file can be read by group or others. */
int sac_auth_key_load(const char *path, sac_auth_keypair_t *out);
/* Reads the public line of a .pub (or .key) file into out. 0 or SAC_ECONFIG (logged). */
int sac_auth_pub_load(const char *path, char out[SAC_AUTH_Z85_LEN + 1]);

/* The client keys a binding process accepts. */
typedef struct sac_auth_allow sac_auth_allow_t;
/* Reads an allow-list file; at least one key. 0 or SAC_ECONFIG (logged), SAC_ENOMEM. */
int sac_auth_allow_load(const char *path, sac_auth_allow_t **out);
/* From n Z85 keys in memory (for tests and tools). 0, SAC_EINVAL (a bad key), SAC_ENOMEM. */
int sac_auth_allow_from_keys(const char *const *z85, size_t n, sac_auth_allow_t **out);
size_t sac_auth_allow_count(const sac_auth_allow_t *a);
/* 1 when the 32-byte key is in the list. */
int sac_auth_allow_has(const sac_auth_allow_t *a, const uint8_t key[32]);
void sac_auth_allow_destroy(sac_auth_allow_t **a);

/* The ZAP handler of one ZeroMQ context (what sac_net_ctx_set_curve starts). It copies
 * allow, binds inproc://zeromq.zap.01 before returning (so no handshake can slip past
 * it) and answers every request on its own thread: 200 for a CURVE client whose key is
 * in the list, 400 otherwise. A denial is counted and logged at WARN with the first 8
 * characters of the client key and its address, at most a few lines a minute (clients
 * retry every reconnect interval); the lines say how many denials went unlogged.
 * NULL on failure (logged): e.g. a handler already serving this context. */
typedef struct sac_auth sac_auth_t;
sac_auth_t *sac_auth_start(void *zctx, const sac_auth_allow_t *allow);
/* Stops the thread and closes its sockets (before zmq_ctx_term); idempotent, nulls *a. */
void sac_auth_stop(sac_auth_t **a);
/* This handler's counts (thread-safe). */
void sac_auth_counts(const sac_auth_t *a, uint64_t *accepted, uint64_t *denied);
/* The counts of every handler the process ran (thread-safe). */
void sac_auth_totals(uint64_t *accepted, uint64_t *denied);
/* Registers sac_auth_accepted_total and sac_auth_denied_total (the process totals).
 * 0 or SAC_ENOMEM. */
int sac_auth_metrics_register(sac_metrics_t *r);

/* What a process does with its three options curve_key, curve_server_key and
 * curve_allow (file paths; "" unset). roles: SAC_AUTH_BINDS when the process binds TCP
 * sockets, SAC_AUTH_CONNECTS when it connects over TCP. All three empty: CURVE off (out
 * zeroed), 0. Otherwise curve_key is required, curve_server_key is required to connect
 * and curve_allow to bind; an option this process has no use for is a warning. Fills
 * out (out->allow owned by out: sac_net_curve_clear frees it). 0, SAC_ECONFIG naming the
 * option or the file and line, SAC_EUNSUPPORTED (no CURVE in libzmq), SAC_ENOMEM. */
#define SAC_AUTH_BINDS 1u
#define SAC_AUTH_CONNECTS 2u
int sac_auth_configure(const char *curve_key, const char *curve_server_key, const char *curve_allow,
                       unsigned roles, sac_net_curve_t *out);

#endif
