/* Leveled, structured log lines on stderr: "2026-12-02T09:30:00.123Z INFO  replay: text",
 * or one JSON object per line in JSON mode. Thread-safe (one write(2) per line); never
 * fails visibly (a line that cannot be written is dropped). The level comes from
 * sac_log_set_level() or the SAC_LOG_LEVEL environment variable (error, warn, info, debug). */
#ifndef SAC_COMMON_LOG_H
#define SAC_COMMON_LOG_H

typedef enum { SAC_LOG_ERROR = 0, SAC_LOG_WARN = 1, SAC_LOG_INFO = 2, SAC_LOG_DEBUG = 3 } sac_log_level_t;

void sac_log_set_level(sac_log_level_t level);
sac_log_level_t sac_log_get_level(void);
/* Parses "error|warn|info|debug"; returns 0 or SAC_EINVAL. */
int sac_log_parse_level(const char *s, sac_log_level_t *out);
/* JSON-lines mode on (1) or off (0). */
void sac_log_set_json(int on);
/* What every binary does with its log_level and log_json options: sets both, or logs
 * (as `module`) why the level is not one of error, warn, info, debug and returns
 * SAC_ECONFIG. */
int sac_log_configure(const char *level, int json, const char *module);
int sac_log_json_enabled(void);

void sac_log(sac_log_level_t level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SAC_ERROR(mod, ...) sac_log(SAC_LOG_ERROR, mod, __VA_ARGS__)
#define SAC_WARN(mod, ...) sac_log(SAC_LOG_WARN, mod, __VA_ARGS__)
#define SAC_INFO(mod, ...) sac_log(SAC_LOG_INFO, mod, __VA_ARGS__)
#define SAC_DEBUG(mod, ...)                                                                                  \
  do {                                                                                                       \
    if (sac_log_get_level() >= SAC_LOG_DEBUG)                                                                \
      sac_log(SAC_LOG_DEBUG, mod, __VA_ARGS__);                                                              \
  } while (0)

/* Rate-limited log lines, keyed by call site: the first line from a site is written,
 * then at most one per `every_s` seconds; the next line written says how many were
 * suppressed since the previous one ("... (K similar lines suppressed)"). For lines an
 * input can repeat at will (a peer sending bad messages, an actor starting sessions),
 * so that an attacker or a bug cannot flood the log. Thread-safe and lock-free.
 *
 *   SAC_WARN_EVERY(10.0, "replay", "refused batch from actor %u: %s", id, why);
 *
 * sac_log_limited() is the function behind the macros, for a limiter kept elsewhere
 * (e.g. one per peer or per reason): a zero-initialised sac_log_limit_t is ready.
 * C only (CUDA sources include this header but have no _Atomic). */
#ifndef __cplusplus
typedef struct {
  _Atomic unsigned long long next_ns;    /* monotonic time the next line may be written */
  _Atomic unsigned long long suppressed; /* lines skipped since the last one written */
} sac_log_limit_t;

/* Logs like sac_log() when l lets a line through now (see above); returns 1 when the
 * line was written, 0 when it was suppressed or below the level. */
int sac_log_limited(sac_log_limit_t *l, double every_s, sac_log_level_t level, const char *module,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define SAC__LOG_EVERY(level, every_s, mod, ...)                                                             \
  do {                                                                                                       \
    static sac_log_limit_t sac__log_limit_;                                                                  \
    sac_log_limited(&sac__log_limit_, (every_s), (level), mod, __VA_ARGS__);                                 \
  } while (0)
#define SAC_ERROR_EVERY(every_s, mod, ...) SAC__LOG_EVERY(SAC_LOG_ERROR, every_s, mod, __VA_ARGS__)
#define SAC_WARN_EVERY(every_s, mod, ...) SAC__LOG_EVERY(SAC_LOG_WARN, every_s, mod, __VA_ARGS__)
#define SAC_INFO_EVERY(every_s, mod, ...) SAC__LOG_EVERY(SAC_LOG_INFO, every_s, mod, __VA_ARGS__)
#endif

#endif
