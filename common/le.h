/* Little-endian integers in byte buffers: the record heads of the write-ahead log
 * (replay/wal.c) and the frames of the zmq collective (learner/collective_zmq.c), whose
 * bytes are the same on every host whatever its own byte order. */
#ifndef SAC_COMMON_LE_H
#define SAC_COMMON_LE_H

#include <stdint.h>

static inline void sac_le_put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static inline void sac_le_put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t sac_le_get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t sac_le_get64(const unsigned char *p) {
  return (uint64_t)sac_le_get32(p) | (uint64_t)sac_le_get32(p + 4) << 32;
}

#endif
