/* Error codes for all of sacfleet. Functions return 0 or a negative SAC_E* code; the
 * code is returned, never stored in a global. sac_strerror() maps a code to a message
 * and never fails (unknown codes give "unknown error"). */
#ifndef SAC_COMMON_ERROR_H
#define SAC_COMMON_ERROR_H

#define SAC_ERRNO_MAP(X)                                                                                     \
  X(INVAL, -1, "invalid argument")                                                                           \
  X(NOMEM, -2, "out of memory")                                                                              \
  X(IO, -3, "input/output error")                                                                            \
  X(NOTFOUND, -4, "not found")                                                                               \
  X(CONFIG, -5, "configuration error")                                                                       \
  X(PROTO, -6, "malformed or unexpected message")                                                            \
  X(VERSION, -7, "protocol or format version mismatch")                                                      \
  X(TIMEOUT, -8, "timed out")                                                                                \
  X(AGAIN, -9, "resource temporarily unavailable")                                                           \
  X(NET, -10, "network error")                                                                               \
  X(PLUGIN, -11, "plugin error")                                                                             \
  X(NONFINITE, -12, "non-finite value")                                                                      \
  X(TOOBIG, -13, "too large")                                                                                \
  X(CHECKSUM, -14, "checksum mismatch")                                                                      \
  X(BACKEND, -15, "compute backend error")                                                                   \
  X(NODEV, -16, "no device")                                                                                 \
  X(INTR, -17, "interrupted")                                                                                \
  X(STATE, -18, "operation not valid in this state")                                                         \
  X(UNSUPPORTED, -19, "not supported in this build")

enum sac_errno {
  SAC_OK = 0,
#define SAC__ERR_ENUM(name, val, msg) SAC_E##name = (val),
  SAC_ERRNO_MAP(SAC__ERR_ENUM)
#undef SAC__ERR_ENUM
};

/* Message for an error code. Never NULL, thread-safe. */
const char *sac_strerror(int err);

#endif
