/* A small metrics registry rendered in the Prometheus text exposition format (version
 * 0.0.4): counters, gauges and histograms with fixed buckets, each series with up to
 * SAC_METRICS_MAX_LABELS labels. It is what every binary's /metrics (common/http.h)
 * serves; docs/METRICS.md lists the series. It is not a client for a push gateway, keeps
 * no history and computes no rates: Prometheus does that.
 *
 * Values come from three places:
 *  - owned series, updated with sac_metric_add / _set / _observe: lock-free atomics,
 *    no allocation, safe from any thread (the learner's update loop uses these);
 *  - read series (sac_metrics_*_read): a function reads an existing stats field (an
 *    atomic in a stats struct, say) at scrape time, so nothing is counted twice;
 *  - collectors: a function run at the start of each scrape that copies a whole stats
 *    struct once (under its owner's lock) and sets owned series from it.
 * Read functions and collectors run on the scraping thread with the registry's lock
 * held; they must not call back into the registry except sac_metric_* updates.
 *
 * Naming is checked at registration: names match [a-zA-Z_:][a-zA-Z0-9_:]*, counters end
 * in "_total", label names match [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__",
 * histograms use no "le" label. Label values are free text (escaped when rendered).
 * Registering the same name and labels again returns the existing series (a read
 * series takes the new function); the same name with another type is an error.
 *
 * Series carry an owner (any pointer, or NULL): sac_metrics_forget(owner) removes every
 * series and collector of that owner, so a component that registers read series over
 * its own memory forgets them before freeing it. A removed series must not be updated.
 *
 * Thread-safety: everything here is thread-safe. Registration, forget and render take
 * the registry's mutex; updates of owned series take no lock. Every sac_metric_* update
 * accepts NULL (and then does nothing), so callers need not test whether metrics are on. */
#ifndef SAC_COMMON_METRICS_H
#define SAC_COMMON_METRICS_H
#include <stddef.h>
#include <stdint.h>

#define SAC_METRICS_MAX_LABELS 4
#define SAC_METRICS_MAX_BUCKETS 32

typedef enum { SAC_METRIC_COUNTER, SAC_METRIC_GAUGE, SAC_METRIC_HISTOGRAM } sac_metric_type_t;

typedef struct sac_metrics sac_metrics_t; /* a registry */
typedef struct sac_metric sac_metric_t;   /* one series */

/* Reads a value at scrape time; arg is what was registered with it. */
typedef double (*sac_metric_read_fn)(const void *arg);
/* Runs at the start of each scrape (render). */
typedef void (*sac_metrics_collect_fn)(void *user);

/* A new, empty registry. NULL when out of memory. */
sac_metrics_t *sac_metrics_new(void);
/* Frees the registry, its series and its collectors (calling their free functions).
 * No other thread may use it any more (stop the HTTP server first). Idempotent, nulls *r. */
void sac_metrics_destroy(sac_metrics_t **r);

/* labels: NULL, or a NULL-terminated list of name, value pairs, e.g.
 * (const char *[]){"reason", "too_big", NULL}; copied. Each returns the series, or NULL
 * (logged) for a bad name or label, a type clash, too many labels or no memory; r may be
 * NULL (then NULL, silently). */
sac_metric_t *sac_metrics_counter(sac_metrics_t *r, const char *name, const char *help,
                                  const char *const *labels, const void *owner);
sac_metric_t *sac_metrics_gauge(sac_metrics_t *r, const char *name, const char *help,
                                const char *const *labels, const void *owner);
/* bounds: n (1..SAC_METRICS_MAX_BUCKETS) finite upper bounds, strictly increasing; the
 * +Inf bucket is implicit. Copied. */
sac_metric_t *sac_metrics_histogram(sac_metrics_t *r, const char *name, const char *help,
                                    const char *const *labels, const double *bounds, size_t n,
                                    const void *owner);
/* Series whose value is fn(arg) * scale at scrape time (arg is borrowed: it must stay
 * valid until the owner is forgotten or the registry destroyed). */
sac_metric_t *sac_metrics_counter_read(sac_metrics_t *r, const char *name, const char *help,
                                       const char *const *labels, sac_metric_read_fn fn, const void *arg,
                                       double scale, const void *owner);
sac_metric_t *sac_metrics_gauge_read(sac_metrics_t *r, const char *name, const char *help,
                                     const char *const *labels, sac_metric_read_fn fn, const void *arg,
                                     double scale, const void *owner);
/* Read functions for the common cases: arg points to an atomic_uint_fast64_t, an
 * _Atomic double, or a plain (not atomic) double / uint64_t that only the scraping
 * thread's collector writes. */
double sac_metric_read_atomic_u64(const void *arg);
double sac_metric_read_atomic_double(const void *arg);
double sac_metric_read_double(const void *arg);
double sac_metric_read_u64(const void *arg);

/* Adds a collector. free_user (may be NULL) is called on user when the collector is
 * forgotten or the registry destroyed. 0, SAC_EINVAL (r or fn NULL) or SAC_ENOMEM (then
 * free_user was called). */
int sac_metrics_collector(sac_metrics_t *r, sac_metrics_collect_fn fn, void *user, void (*free_user)(void *),
                          const void *owner);

/* Removes every series and collector registered with this owner (not NULL). When it
 * returns, no read function or collector of that owner is running or will run. */
void sac_metrics_forget(sac_metrics_t *r, const void *owner);

/* Registers the standard process series (from /proc/self): process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_start_time_seconds,
 * process_open_fds, process_max_fds, process_threads. 0 or SAC_ENOMEM. On a system
 * without /proc the values stay 0. */
int sac_metrics_add_process(sac_metrics_t *r);

/* Registers sac_build_info{binary="...",version="..."} 1: which program and version
 * serves the endpoint. 0 or SAC_ENOMEM. */
int sac_metrics_add_build_info(sac_metrics_t *r, const char *binary, const char *version);

/* Updates of owned series; all take NULL. add: counters (v >= 0) and gauges; set:
 * gauges, and counters mirrored from a monotonic source; observe: histograms. A call
 * of the wrong kind (add to a histogram, observe on a gauge) is ignored. Lock-free. */
void sac_metric_add(sac_metric_t *m, double v);
void sac_metric_inc(sac_metric_t *m);
void sac_metric_set(sac_metric_t *m, double v);
void sac_metric_observe(sac_metric_t *m, double v);
/* The current value (owned counters and gauges; a histogram's count). 0 for NULL. */
double sac_metric_value(const sac_metric_t *m);

/* Renders every series (running the collectors first) into a new NUL-terminated buffer
 * that the caller frees; *len (may be NULL) gets its length without the NUL. 0 or
 * SAC_ENOMEM (*out NULL). Families appear in registration order, series too. */
int sac_metrics_render(sac_metrics_t *r, char **out, size_t *len);

/* Latency buckets used across sacfleet, in seconds: 10 us .. 10 s, roughly x2.5 apart
 * (n in *n). */
const double *sac_metrics_latency_buckets(size_t *n);

/* Content-Type of the rendered text. */
#define SAC_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
