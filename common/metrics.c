/* The metrics registry and its Prometheus text rendering (see metrics.h). Families and
 * series are linked lists built at registration time under one mutex; a series' value
 * is an atomic holding a double's bits, so updates from hot loops are one relaxed
 * atomic store or a short compare-and-swap loop, and never allocate. Rendering happens
 * under the mutex (on the HTTP thread) into a growable buffer. */
#include "common/metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"

typedef struct family family_t;

struct sac_metric {
  family_t *fam;
  sac_metric_t *next;
  char *labels; /* rendered and escaped: k="v",k2="v2"; "" without labels */
  const void *owner;
  _Atomic uint64_t bits; /* counter / gauge value, a double's bits */
  sac_metric_read_fn fn; /* read series: value = fn(arg) * scale */
  const void *arg;
  double scale;
  size_t nb; /* histogram: bounds; buckets[nb] is the +Inf bucket (not cumulative) */
  double bounds[SAC_METRICS_MAX_BUCKETS];
  _Atomic uint64_t buckets[SAC_METRICS_MAX_BUCKETS + 1];
  _Atomic uint64_t sum_bits;
};

struct family {
  char *name, *help;
  sac_metric_type_t type;
  sac_metric_t *head, *tail;
  family_t *next;
};

typedef struct collector {
  sac_metrics_collect_fn fn;
  void *user;
  void (*free_user)(void *);
  const void *owner;
  struct collector *next;
} collector_t;

struct sac_metrics {
  pthread_mutex_t mu;
  family_t *head, *tail;
  collector_t *collectors;
};

static uint64_t d2u(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

static double u2d(uint64_t u) {
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* ---- registry ---------------------------------------------------------------------- */

sac_metrics_t *sac_metrics_new(void) {
  sac_metrics_t *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  if (pthread_mutex_init(&r->mu, NULL) != 0) {
    free(r);
    return NULL;
  }
  return r;
}

static void free_series(sac_metric_t *m) {
  free(m->labels);
  free(m);
}

void sac_metrics_destroy(sac_metrics_t **rp) {
  sac_metrics_t *r = *rp;
  if (!r)
    return;
  for (family_t *f = r->head, *fn; f; f = fn) {
    fn = f->next;
    for (sac_metric_t *m = f->head, *mn; m; m = mn) {
      mn = m->next;
      free_series(m);
    }
    free(f->name);
    free(f->help);
    free(f);
  }
  for (collector_t *c = r->collectors, *cn; c; c = cn) {
    cn = c->next;
    if (c->free_user)
      c->free_user(c->user);
    free(c);
  }
  pthread_mutex_destroy(&r->mu);
  free(r);
  *rp = NULL;
}

static int valid_name(const char *s, int colon) {
  if (!s || !*s)
    return 0;
  for (const char *p = s; *p; p++) {
    int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || (colon && *p == ':');
    if (!alpha && !(p > s && *p >= '0' && *p <= '9'))
      return 0;
  }
  return 1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Growable text buffer; a failed allocation sets oom and later appends do nothing. */
typedef struct {
  char *p;
  size_t n, cap;
  int oom;
} buf_t;

static int buf_reserve(buf_t *b, size_t more) {
  if (b->oom)
    return -1;
  if (b->n + more + 1 <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->n + more + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

static void buf_put(buf_t *b, const char *s, size_t n) {
  if (buf_reserve(b, n) != 0)
    return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void buf_str(buf_t *b, const char *s) { buf_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void buf_fmt(buf_t *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof tmp) {
    buf_put(b, tmp, (size_t)n);
    return;
  }
  if (buf_reserve(b, (size_t)n) != 0)
    return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)n;
}

/* Label values: backslash, double quote and newline escaped (the exposition format). */
static void buf_label_value(buf_t *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\')
      buf_put(b, "\\\\", 2);
    else if (*s == '"')
      buf_put(b, "\\\"", 2);
    else if (*s == '\n')
      buf_put(b, "\\n", 2);
    else
      buf_put(b, s, 1);
  }
}

/* HELP text: backslash and newline escaped. */
static void buf_help(buf_t *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\')
      buf_put(b, "\\\\", 2);
    else if (*s == '\n')
      buf_put(b, "\\n", 2);
    else
      buf_put(b, s, 1);
  }
}

/* A value as Prometheus reads it: NaN, +Inf, -Inf, integers without exponent where
 * exact, otherwise the shortest %g that reads back to the same double. */
static void fmt_value(char *out, size_t cap, double v) {
  if (isnan(v)) {
    snprintf(out, cap, "NaN");
  } else if (isinf(v)) {
    snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
  } else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    snprintf(out, cap, "%.0f", v);
  } else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(out, cap, "%.*g", prec, v);
      if (strtod(out, NULL) == v)
        break;
    }
  }
}

static void buf_value(buf_t *b, double v) {
  char tmp[64];
  fmt_value(tmp, sizeof tmp, v);
  buf_str(b, tmp);
}

/* Renders a label list into a new string ("" for none). NULL on a bad label or no memory. */
static char *render_labels(const char *const *labels, int histogram, const char *metric) {
  buf_t b = {0};
  buf_reserve(&b, 0);
  if (b.oom)
    return NULL;
  b.p[0] = '\0';
  int n = 0;
  for (const char *const *l = labels; l && l[0]; l += 2, n++) {
    if (!l[1] || n >= SAC_METRICS_MAX_LABELS || !valid_name(l[0], 0) || strncmp(l[0], "__", 2) == 0 ||
        (histogram && strcmp(l[0], "le") == 0)) {
      SAC_ERROR("metrics",
                "%s: bad label %s (name [a-zA-Z_][a-zA-Z0-9_]*, no __ prefix, at most %d, a value each)",
                metric, l[0], SAC_METRICS_MAX_LABELS);
      free(b.p);
      return NULL;
    }
    if (n)
      buf_put(&b, ",", 1);
    buf_str(&b, l[0]);
    buf_put(&b, "=\"", 2);
    buf_label_value(&b, l[1]);
    buf_put(&b, "\"", 1);
  }
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

/* Finds or adds the series; r->mu held. NULL on error (logged). */
static sac_metric_t *series_locked(sac_metrics_t *r, sac_metric_type_t type, const char *name,
                                   const char *help, const char *const *labels, const double *bounds,
                                   size_t nb, const void *owner, int *existed) {
  *existed = 0;
  if (!valid_name(name, 1) || (type == SAC_METRIC_COUNTER && !ends_with(name, "_total"))) {
    SAC_ERROR("metrics", "bad metric name \"%s\"%s", name ? name : "(null)",
              type == SAC_METRIC_COUNTER ? " (a counter's name ends in _total)" : "");
    return NULL;
  }
  if (type == SAC_METRIC_HISTOGRAM) {
    int ok = nb >= 1 && nb <= SAC_METRICS_MAX_BUCKETS && bounds;
    for (size_t i = 0; ok && i < nb; i++)
      ok = isfinite(bounds[i]) && (i == 0 || bounds[i] > bounds[i - 1]);
    if (!ok) {
      SAC_ERROR("metrics", "%s: histogram bounds must be 1..%d finite, increasing values", name,
                SAC_METRICS_MAX_BUCKETS);
      return NULL;
    }
  }
  char *lab = render_labels(labels, type == SAC_METRIC_HISTOGRAM, name);
  if (!lab)
    return NULL;
  family_t *f = r->head;
  while (f && strcmp(f->name, name) != 0)
    f = f->next;
  if (f && f->type != type) {
    SAC_ERROR("metrics", "%s registered again with another type", name);
    free(lab);
    return NULL;
  }
  if (f) {
    for (sac_metric_t *m = f->head; m; m = m->next)
      if (strcmp(m->labels, lab) == 0) {
        free(lab);
        if (type == SAC_METRIC_HISTOGRAM &&
            (m->nb != nb || memcmp(m->bounds, bounds, nb * sizeof *bounds) != 0)) {
          SAC_ERROR("metrics", "%s registered again with other buckets", name);
          return NULL;
        }
        *existed = 1;
        m->owner = owner;
        return m;
      }
  } else {
    f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name)) || !(f->help = strdup(help ? help : ""))) {
      if (f)
        free(f->name);
      free(f);
      free(lab);
      return NULL;
    }
    f->type = type;
    if (r->tail)
      r->tail->next = f;
    else
      r->head = f;
    r->tail = f;
  }
  sac_metric_t *m = calloc(1, sizeof *m);
  if (!m) {
    free(lab);
    return NULL; /* an empty family stays; it renders nothing */
  }
  m->fam = f;
  m->labels = lab;
  m->owner = owner;
  m->scale = 1.0;
  atomic_init(&m->bits, d2u(0.0));
  atomic_init(&m->sum_bits, d2u(0.0));
  m->nb = nb;
  for (size_t i = 0; i < nb; i++)
    m->bounds[i] = bounds[i];
  for (size_t i = 0; i <= SAC_METRICS_MAX_BUCKETS; i++)
    atomic_init(&m->buckets[i], 0);
  if (f->tail)
    f->tail->next = m;
  else
    f->head = m;
  f->tail = m;
  return m;
}

static sac_metric_t *add(sac_metrics_t *r, sac_metric_type_t type, const char *name, const char *help,
                         const char *const *labels, const double *bounds, size_t nb, sac_metric_read_fn fn,
                         const void *arg, double scale, const void *owner) {
  if (!r)
    return NULL;
  pthread_mutex_lock(&r->mu);
  int existed;
  sac_metric_t *m = series_locked(r, type, name, help, labels, bounds, nb, owner, &existed);
  if (m) {
    m->fn = fn;
    m->arg = arg;
    m->scale = scale;
  }
  pthread_mutex_unlock(&r->mu);
  return m;
}

sac_metric_t *sac_metrics_counter(sac_metrics_t *r, const char *name, const char *help,
                                  const char *const *labels, const void *owner) {
  return add(r, SAC_METRIC_COUNTER, name, help, labels, NULL, 0, NULL, NULL, 1.0, owner);
}

sac_metric_t *sac_metrics_gauge(sac_metrics_t *r, const char *name, const char *help,
                                const char *const *labels, const void *owner) {
  return add(r, SAC_METRIC_GAUGE, name, help, labels, NULL, 0, NULL, NULL, 1.0, owner);
}

sac_metric_t *sac_metrics_histogram(sac_metrics_t *r, const char *name, const char *help,
                                    const char *const *labels, const double *bounds, size_t n,
                                    const void *owner) {
  return add(r, SAC_METRIC_HISTOGRAM, name, help, labels, bounds, n, NULL, NULL, 1.0, owner);
}

sac_metric_t *sac_metrics_counter_read(sac_metrics_t *r, const char *name, const char *help,
                                       const char *const *labels, sac_metric_read_fn fn, const void *arg,
                                       double scale, const void *owner) {
  if (!fn)
    return NULL;
  return add(r, SAC_METRIC_COUNTER, name, help, labels, NULL, 0, fn, arg, scale, owner);
}

sac_metric_t *sac_metrics_gauge_read(sac_metrics_t *r, const char *name, const char *help,
                                     const char *const *labels, sac_metric_read_fn fn, const void *arg,
                                     double scale, const void *owner) {
  if (!fn)
    return NULL;
  return add(r, SAC_METRIC_GAUGE, name, help, labels, NULL, 0, fn, arg, scale, owner);
}

double sac_metric_read_atomic_u64(const void *arg) {
  return (double)atomic_load_explicit((const atomic_uint_fast64_t *)arg, memory_order_relaxed);
}

double sac_metric_read_atomic_double(const void *arg) {
  return atomic_load_explicit((_Atomic double *)arg, memory_order_relaxed);
}

double sac_metric_read_double(const void *arg) { return *(const double *)arg; }

double sac_metric_read_u64(const void *arg) { return (double)*(const uint64_t *)arg; }

int sac_metrics_collector(sac_metrics_t *r, sac_metrics_collect_fn fn, void *user, void (*free_user)(void *),
                          const void *owner) {
  if (!r || !fn) {
    if (free_user)
      free_user(user);
    return SAC_EINVAL;
  }
  collector_t *c = calloc(1, sizeof *c);
  if (!c) {
    if (free_user)
      free_user(user);
    return SAC_ENOMEM;
  }
  c->fn = fn;
  c->user = user;
  c->free_user = free_user;
  c->owner = owner;
  pthread_mutex_lock(&r->mu);
  collector_t **pp = &r->collectors;
  while (*pp)
    pp = &(*pp)->next;
  *pp = c;
  pthread_mutex_unlock(&r->mu);
  return 0;
}

void sac_metrics_forget(sac_metrics_t *r, const void *owner) {
  if (!r || !owner)
    return;
  collector_t *dead = NULL;
  pthread_mutex_lock(&r->mu);
  for (family_t *f = r->head; f; f = f->next) {
    sac_metric_t *prev = NULL;
    for (sac_metric_t *m = f->head, *mn; m; m = mn) {
      mn = m->next;
      if (m->owner != owner) {
        prev = m;
        continue;
      }
      if (prev)
        prev->next = mn;
      else
        f->head = mn;
      if (f->tail == m)
        f->tail = prev;
      free_series(m);
    }
  }
  for (collector_t **pp = &r->collectors; *pp;) {
    collector_t *c = *pp;
    if (c->owner == owner) {
      *pp = c->next;
      c->next = dead;
      dead = c;
    } else {
      pp = &c->next;
    }
  }
  pthread_mutex_unlock(&r->mu);
  /* free functions run unlocked: they may take their owner's locks */
  for (collector_t *c = dead, *cn; c; c = cn) {
    cn = c->next;
    if (c->free_user)
      c->free_user(c->user);
    free(c);
  }
}

/* ---- updates ----------------------------------------------------------------------- */

static void atomic_add_double(_Atomic uint64_t *bits, double v) {
  uint64_t old = atomic_load_explicit(bits, memory_order_relaxed);
  /* bounded in practice: it only repeats when another thread updated the same series */
  while (!atomic_compare_exchange_weak_explicit(bits, &old, d2u(u2d(old) + v), memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

void sac_metric_add(sac_metric_t *m, double v) {
  if (!m || m->fn || m->fam->type == SAC_METRIC_HISTOGRAM || isnan(v) ||
      (m->fam->type == SAC_METRIC_COUNTER && v < 0))
    return;
  atomic_add_double(&m->bits, v);
}

void sac_metric_inc(sac_metric_t *m) { sac_metric_add(m, 1.0); }

void sac_metric_set(sac_metric_t *m, double v) {
  if (!m || m->fn || m->fam->type == SAC_METRIC_HISTOGRAM)
    return;
  atomic_store_explicit(&m->bits, d2u(v), memory_order_relaxed);
}

void sac_metric_observe(sac_metric_t *m, double v) {
  if (!m || m->fam->type != SAC_METRIC_HISTOGRAM || isnan(v))
    return;
  size_t i = 0;
  while (i < m->nb && v > m->bounds[i])
    i++;
  atomic_fetch_add_explicit(&m->buckets[i], 1, memory_order_relaxed);
  atomic_add_double(&m->sum_bits, v);
}

double sac_metric_value(const sac_metric_t *m) {
  if (!m)
    return 0.0;
  if (m->fam->type == SAC_METRIC_HISTOGRAM) {
    uint64_t n = 0;
    for (size_t i = 0; i <= m->nb; i++)
      n += atomic_load_explicit(&((sac_metric_t *)m)->buckets[i], memory_order_relaxed);
    return (double)n;
  }
  if (m->fn)
    return m->fn(m->arg) * m->scale;
  return u2d(atomic_load_explicit(&((sac_metric_t *)m)->bits, memory_order_relaxed));
}

/* ---- rendering --------------------------------------------------------------------- */

static void render_sample(buf_t *b, const char *name, const char *suffix, const char *labels,
                          const char *extra, double v) {
  buf_str(b, name);
  buf_str(b, suffix);
  if (labels[0] || extra) {
    buf_put(b, "{", 1);
    buf_str(b, labels);
    if (extra) {
      if (labels[0])
        buf_put(b, ",", 1);
      buf_str(b, extra);
    }
    buf_put(b, "}", 1);
  }
  buf_put(b, " ", 1);
  buf_value(b, v);
  buf_put(b, "\n", 1);
}

static void render_histogram(buf_t *b, const family_t *f, sac_metric_t *m) {
  /* count is the +Inf bucket, so buckets and count always agree within one scrape */
  uint64_t cum = 0;
  char le[96], v[64];
  for (size_t i = 0; i <= m->nb; i++) {
    cum += atomic_load_explicit(&m->buckets[i], memory_order_relaxed);
    if (i < m->nb)
      fmt_value(v, sizeof v, m->bounds[i]);
    snprintf(le, sizeof le, "le=\"%s\"", i < m->nb ? v : "+Inf");
    render_sample(b, f->name, "_bucket", m->labels, le, (double)cum);
  }
  render_sample(b, f->name, "_sum", m->labels, NULL,
                u2d(atomic_load_explicit(&m->sum_bits, memory_order_relaxed)));
  render_sample(b, f->name, "_count", m->labels, NULL, (double)cum);
}

int sac_metrics_render(sac_metrics_t *r, char **out, size_t *len) {
  static const char *k_types[] = {"counter", "gauge", "histogram"};
  *out = NULL;
  if (len)
    *len = 0;
  buf_t b = {0};
  if (buf_reserve(&b, 0) != 0)
    return SAC_ENOMEM;
  b.p[0] = '\0';
  pthread_mutex_lock(&r->mu);
  for (collector_t *c = r->collectors; c; c = c->next)
    c->fn(c->user);
  for (family_t *f = r->head; f; f = f->next) {
    if (!f->head)
      continue;
    buf_fmt(&b, "# HELP %s ", f->name);
    buf_help(&b, f->help);
    buf_fmt(&b, "\n# TYPE %s %s\n", f->name, k_types[f->type]);
    for (sac_metric_t *m = f->head; m; m = m->next) {
      if (f->type == SAC_METRIC_HISTOGRAM)
        render_histogram(&b, f, m);
      else
        render_sample(&b, f->name, "", m->labels, NULL, sac_metric_value(m));
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (b.oom) {
    free(b.p);
    return SAC_ENOMEM;
  }
  *out = b.p;
  if (len)
    *len = b.n;
  return 0;
}

const double *sac_metrics_latency_buckets(size_t *n) {
  static const double k[] = {1e-5,  2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01,
                             0.025, 0.05,   0.1,  0.25, 0.5,    1,    2.5,  5,      10};
  *n = sizeof k / sizeof k[0];
  return k;
}

/* ---- process metrics --------------------------------------------------------------- */

typedef struct {
  sac_metric_t *cpu, *rss, *vsz, *start, *fds, *max_fds, *threads;
  double btime, clk_tck, page;
} proc_t;

/* Seconds since the epoch at boot, from /proc/stat's btime line; 0 when unknown. */
static double read_btime(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f)
    return 0;
  char line[512];
  double bt = 0;
  for (int i = 0; i < 100000 && fgets(line, sizeof line, f); i++) {
    unsigned long long v;
    if (sscanf(line, "btime %llu", &v) == 1) {
      bt = (double)v;
      break;
    }
  }
  fclose(f);
  return bt;
}

static void proc_collect(void *user) {
  proc_t *p = user;
  FILE *f = fopen("/proc/self/stat", "r");
  if (f) {
    char line[1024];
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *rp = strrchr(line, ')'); /* the command name may hold spaces and parentheses */
    unsigned long long ut, st, start, vsize;
    long threads, rss;
    /* fields 3.. after the name: state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime(15) cutime cstime priority nice num_threads(20)
     * itrealvalue starttime(22) vsize(23) rss(24) */
    if (rp &&
        sscanf(rp + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld %*d %llu %llu %ld",
               &ut, &st, &threads, &start, &vsize, &rss) == 6) {
      sac_metric_set(p->cpu, (double)(ut + st) / p->clk_tck);
      sac_metric_set(p->rss, (double)rss * p->page);
      sac_metric_set(p->vsz, (double)vsize);
      sac_metric_set(p->threads, (double)threads);
      if (p->btime > 0)
        sac_metric_set(p->start, p->btime + (double)start / p->clk_tck);
    }
  }
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    long n = 0;
    for (struct dirent *e; n < (1L << 24) && (e = readdir(d)) != NULL;)
      if (e->d_name[0] != '.')
        n++;
    closedir(d);
    sac_metric_set(p->fds, (double)(n > 0 ? n - 1 : 0)); /* less the directory's own descriptor */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    sac_metric_set(p->max_fds, rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
}

int sac_metrics_add_process(sac_metrics_t *r) {
  proc_t *p = calloc(1, sizeof *p);
  if (!p)
    return SAC_ENOMEM;
  long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  p->clk_tck = tck > 0 ? (double)tck : 100.0;
  p->page = page > 0 ? (double)page : 4096.0;
  p->btime = read_btime();
  p->cpu = sac_metrics_counter(r, "process_cpu_seconds_total",
                               "Total user and system CPU time spent in seconds.", NULL, NULL);
  p->rss =
      sac_metrics_gauge(r, "process_resident_memory_bytes", "Resident memory size in bytes.", NULL, NULL);
  p->vsz = sac_metrics_gauge(r, "process_virtual_memory_bytes", "Virtual memory size in bytes.", NULL, NULL);
  p->start = sac_metrics_gauge(r, "process_start_time_seconds",
                               "Start time of the process since unix epoch in seconds.", NULL, NULL);
  p->fds = sac_metrics_gauge(r, "process_open_fds", "Number of open file descriptors.", NULL, NULL);
  p->max_fds =
      sac_metrics_gauge(r, "process_max_fds", "Maximum number of open file descriptors.", NULL, NULL);
  p->threads = sac_metrics_gauge(r, "process_threads", "Number of OS threads in the process.", NULL, NULL);
  if (!p->cpu || !p->rss || !p->vsz || !p->start || !p->fds || !p->max_fds || !p->threads) {
    free(p);
    return SAC_ENOMEM;
  }
  return sac_metrics_collector(r, proc_collect, p, free, NULL);
}

int sac_metrics_add_build_info(sac_metrics_t *r, const char *binary, const char *version) {
  sac_metric_t *m =
      sac_metrics_gauge(r, "sac_build_info", "Which sacfleet program and version serves these metrics.",
                        (const char *const[]){"binary", binary, "version", version, NULL}, NULL);
  if (!m)
    return SAC_ENOMEM;
  sac_metric_set(m, 1.0);
  return 0;
}
