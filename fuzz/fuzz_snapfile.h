/* Files for the fuzz targets that read snapshot containers (fuzz_snapshot,
 * fuzz_checkpoint): raw bytes, or a payload wrapped in a valid container (header with its
 * CRC32C, payload, trailer with the payload's CRC32C; layout in common/snapshot.h) so that
 * the fuzzer's bytes reach the content checks behind the container's. Header-only. */
#ifndef SAC_FUZZ_SNAPFILE_H
#define SAC_FUZZ_SNAPFILE_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/snapshot.h"

/* Writes a, b and c (each may be empty) one after the other to path. 0 or -1. */
static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb, const void *c,
                      size_t nc) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  int ok = (na == 0 || fwrite(a, 1, na, f) == na) && (nb == 0 || fwrite(b, 1, nb, f) == nb) &&
           (nc == 0 || fwrite(c, 1, nc, f) == nc);
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes payload inside a valid snapshot container of the given kind. 0 or -1. */
static int write_wrapped(const char *path, const uint8_t *payload, size_t len, uint32_t kind) {
  unsigned char h[64], t[16];
  memset(h, 0, sizeof h);
  memcpy(h, "SACSNAP", 8);
  uint32_t fmt = SAC_SNAP_FORMAT, hb = 64;
  uint64_t pl = len, created = 1;
  memcpy(h + 8, &fmt, 4);
  memcpy(h + 12, &hb, 4);
  memcpy(h + 16, &pl, 8);
  memcpy(h + 24, &created, 8);
  memcpy(h + 32, &kind, 4);
  uint32_t hc = sac_crc32c(0, h, 60);
  memcpy(h + 60, &hc, 4);
  uint32_t pc = sac_crc32c(0, payload, len), zero = 0;
  memcpy(t, &pc, 4);
  memcpy(t + 4, &zero, 4);
  memcpy(t + 8, "SNAPEND", 8);
  return write_file(path, h, sizeof h, payload, len, t, sizeof t);
}

#endif
