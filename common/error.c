/* sac_strerror: the one table of error messages (see error.h). */
#include "common/error.h"

const char *sac_strerror(int err) {
  switch (err) {
  case SAC_OK:
    return "success";
#define SAC__ERR_CASE(name, val, msg)                                                                        \
  case SAC_E##name:                                                                                          \
    return msg;
    SAC_ERRNO_MAP(SAC__ERR_CASE)
#undef SAC__ERR_CASE
  default:
    return "unknown error";
  }
}
