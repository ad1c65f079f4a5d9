/* sac-keygen: writes a CurveZMQ key pair for sacfleet's ZeroMQ sockets (common/auth.h,
 * docs/RELIABILITY.md "Authentication and encryption"). It reads no config file and no
 * SAC_* environment variable: it is a tool, run by hand or by a deploy script.
 * Exit codes: 0 written (or --help/--version), 1 the files could not be written,
 * 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "common/auth.h"
#include "common/error.h"

static void usage(FILE *f) {
  fprintf(f, "usage: sac-keygen --out DIR/NAME [--force]\n"
             "\n"
             "Writes a new CurveZMQ key pair for sac-replay, sac-actor and sac-learner:\n"
             "  DIR/NAME.key  \"public = KEY\" and \"secret = KEY\" lines (Z85), mode 0600: the\n"
             "                identity of one process or group of processes (option curve_key);\n"
             "                keep it on their host and nowhere else\n"
             "  DIR/NAME.pub  the \"public = KEY\" line only: a server's goes to its clients\n"
             "                (curve_server_key), a client's into the servers' allow-list\n"
             "                (curve_allow; `cat clients/*.pub > allowed.txt` makes one)\n"
             "DIR must exist. The public key is printed on stdout.\n"
             "\n"
             "options:\n"
             "  --out DIR/NAME  where to write (the .key and .pub suffixes are added)\n"
             "  --force         overwrite existing NAME.key and NAME.pub (default: refuse)\n"
             "  --help          this text\n"
             "  --version       the version\n"
             "\n"
             "exit codes: 0 written, 1 cannot write the files, 2 bad usage\n");
}

int main(int argc, char **argv) {
  const char *out = NULL;
  int force = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--version")) {
      printf("sac-keygen %s\n", SAC_VERSION);
      return 0;
    }
  }
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--force")) {
      force = 1;
    } else if (!strncmp(argv[i], "--out=", 6)) {
      out = argv[i] + 6;
    } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else {
      fprintf(stderr, "sac-keygen: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!out || !*out) {
    fprintf(stderr, "sac-keygen: --out DIR/NAME is required\n");
    usage(stderr);
    return 2;
  }
  sac_auth_keypair_t kp;
  if (sac_auth_keypair_generate(&kp) != 0)
    return 1;
  int rc = sac_auth_keypair_write(out, &kp, force);
  memset(kp.secret_key, 0, sizeof kp.secret_key);
  if (rc)
    return 1;
  printf("%s\n", kp.public_key);
  fprintf(stderr, "sac-keygen: wrote %s.key (secret, mode 0600) and %s.pub\n", out, out);
  return 0;
}
