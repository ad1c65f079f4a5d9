/* forgetfs: a FUSE file system for power-cut tests. It shows a backing directory and
 * keeps, in its own memory, everything a power cut could take away: file contents not yet
 * covered by an fsync/fdatasync of the file, and creates, renames and unlinks not yet
 * covered by an fsync of their directory. The backing directory always holds exactly what
 * a disk would after a power cut at this instant; writing "drop" to the control file
 * <mount>/.forgetfs discards the rest (answered when the write returns), and the mount then
 * shows the backing directory again.
 *
 * Model (write-back): every file is an inode with its content as the application sees it
 * (cur) and its content as of its last fsync (synced; for a file read from the backing
 * directory, what it holds there). fsync of a file copies cur to synced and writes synced
 * to every backing name the inode durably has. fsync of a directory makes the backing
 * directory's entries equal the directory's current ones: a name the directory no longer
 * has is removed from the backing directory, and each current name is written there with
 * its inode's synced content (a file created and never fsynced survives as an empty file,
 * as on ext4 with data=ordered after its directory was synced). Directories themselves
 * become durable with their parent's fsync (mkdir -p in the backing directory, slightly
 * kinder than a disk). Hard links, symlinks, xattrs and mmap are not supported (EPERM,
 * ENOSYS): the shard needs none of them.
 *
 * It is for tests, not a general file system: single-threaded (run with -s), every file
 * held in memory, no permission checks beyond the kernel's. Files open with direct_io and
 * the kernel caches no attributes, so what a process reads after a drop is the backing
 * directory's content, not a page cache's.
 *
 * Beyond all or nothing (what real disks do between a write and its fsync):
 *   partial on: a drop keeps a random part of each file's unsynced writes: the file's
 *     length anywhere between its synced and its current one, and each 4 KiB page that
 *     differs either its synced content (zeros past the synced length: a hole), its new
 *     content, or a prefix of 512-byte sectors of the new content over the old (a torn
 *     write); "seed N" makes the choices repeatable.
 *   cut_after N [PATTERN [M]]: the power is cut right after the Nth operation from now
 *     whose text "<op> <path>[ <path2>]" contains PATTERN (any operation when none is
 *     given), or M operations of any kind after it: that operation completes, then the
 *     drop happens before anything else does, and every later operation fails with EIO
 *     ("power off", as a process on a dead machine would see it) until "power_on".
 *     Operations: create write truncate fsync fsyncdir rename unlink mkdir rmdir.
 *   fail_fsync N [PATTERN]: the Nth next fsync of a file whose path contains PATTERN fails
 *     with EIO, as Linux's can: what it should have written is marked clean but never
 *     reaches the disk, and a later fsync succeeds without writing it (PostgreSQL's
 *     "fsyncgate"); only what the file is written after the failure goes to disk then.
 *
 * usage: forgetfs BACKING_DIR MOUNTPOINT [FUSE options, e.g. -f -s]
 * control: echo CMD > MOUNTPOINT/.forgetfs, CMD one of: drop | partial on | partial off |
 * seed N | cut_after N [PATTERN [M]] | power_on | fail_fsync N [PATTERN];
 * cat MOUNTPOINT/.forgetfs gives counters and the power state. */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define CONTROL "/.forgetfs"
#define MAX_NODES 65536

typedef struct {
  unsigned char *p;
  size_t len, cap;
} buf_t;

typedef struct {
  int used, is_dir;
  int parent; /* node index of the directory (-1: root) */
  char name[NAME_MAX + 1];
  /* files */
  buf_t cur, synced;
  int durable;   /* this name exists in the backing directory */
  int open_refs; /* open handles; an unlinked node stays until they close */
  int linked;    /* has a name in the current namespace */
  mode_t mode;
  struct timespec mtime;
  /* after an injected fsync failure: what the kernel took for written (clean) though the
   * disk (synced) never got it; a later fsync writes only what differs from it */
  buf_t clean;
  int has_clean;
} node_t;

static node_t *g_nodes;
static char g_backing[PATH_MAX];
static uint64_t g_drops, g_file_syncs, g_dir_syncs, g_generation;

/* ------------------------------------------------------------------ buffers */

static int buf_reserve(buf_t *b, size_t n) {
  if (n <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < n)
    cap *= 2;
  unsigned char *p = realloc(b->p, cap);
  if (!p)
    return -ENOMEM;
  b->p = p;
  b->cap = cap;
  return 0;
}

static int buf_set(buf_t *dst, const buf_t *src) {
  if (buf_reserve(dst, src->len) != 0)
    return -ENOMEM;
  if (src->len)
    memcpy(dst->p, src->p, src->len);
  dst->len = src->len;
  return 0;
}

static int buf_resize(buf_t *b, size_t n) {
  if (buf_reserve(b, n) != 0)
    return -ENOMEM;
  if (n > b->len)
    memset(b->p + b->len, 0, n - b->len);
  b->len = n;
  return 0;
}

/* ------------------------------------------------------------------ the node table */

static int node_new(int parent, const char *name, int is_dir) {
  for (int i = 1; i < MAX_NODES; i++)
    if (!g_nodes[i].used) {
      node_t *n = &g_nodes[i];
      memset(n, 0, sizeof *n);
      n->used = 1;
      n->is_dir = is_dir;
      n->parent = parent;
      n->linked = 1;
      n->mode = is_dir ? (S_IFDIR | 0755) : (S_IFREG | 0644);
      snprintf(n->name, sizeof n->name, "%s", name);
      clock_gettime(CLOCK_REALTIME, &n->mtime);
      return i;
    }
  return -ENOSPC;
}

static void node_free(int i) {
  free(g_nodes[i].cur.p);
  free(g_nodes[i].synced.p);
  free(g_nodes[i].clean.p);
  memset(&g_nodes[i], 0, sizeof g_nodes[i]);
}

/* The child of dir named name (linked), or -1. */
static int child(int dir, const char *name) {
  for (int i = 1; i < MAX_NODES; i++)
    if (g_nodes[i].used && g_nodes[i].linked && g_nodes[i].parent == dir && !strcmp(g_nodes[i].name, name))
      return i;
  return -1;
}

/* Node of an absolute path: 0 is the root. -ENOENT, -ENOTDIR. */
static void ensure_loaded(void);

static int lookup(const char *path) {
  ensure_loaded();
  int cur = 0;
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *save = NULL, *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (!g_nodes[cur].is_dir)
      return -ENOTDIR;
    cur = child(cur, c);
    if (cur < 0)
      return -ENOENT;
  }
  return cur;
}

/* The parent directory's node of path and the last component. */
static int lookup_parent(const char *path, const char **base) {
  const char *slash = strrchr(path, '/');
  *base = slash + 1;
  char dir[PATH_MAX];
  size_t n = (size_t)(slash - path);
  memcpy(dir, path, n);
  dir[n] = '\0';
  int d = lookup(n ? dir : "/");
  if (d >= 0 && !g_nodes[d].is_dir)
    return -ENOTDIR;
  return d;
}

/* The backing path of node i (its current name). */
static void backing_path(int i, char *out, size_t cap) {
  if (i == 0) {
    snprintf(out, cap, "%s", g_backing);
    return;
  }
  char parent[PATH_MAX];
  backing_path(g_nodes[i].parent, parent, sizeof parent);
  if (snprintf(out, cap, "%s/%s", parent, g_nodes[i].name) >= (int)cap)
    out[0] = '\0'; /* too long: no backing name (its writes fail) */
}

/* ------------------------------------------------------------------ load and drop */

static int read_file(const char *path, buf_t *b) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || buf_reserve(b, (size_t)sb.st_size) != 0) {
    close(fd);
    return -EIO;
  }
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t n = read(fd, b->p + got, (size_t)sb.st_size - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  b->len = got;
  close(fd);
  return 0;
}

static int load_dir(int dir, const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return -errno;
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p)
      continue;
    struct stat sb;
    if (lstat(p, &sb) != 0 || !(S_ISDIR(sb.st_mode) || S_ISREG(sb.st_mode)))
      continue;
    int n = node_new(dir, e->d_name, S_ISDIR(sb.st_mode));
    if (n < 0) {
      rc = n;
      break;
    }
    g_nodes[n].durable = 1;
    g_nodes[n].mode = sb.st_mode;
    g_nodes[n].mtime = sb.st_mtim;
    if (S_ISDIR(sb.st_mode))
      rc = load_dir(n, p);
    else if ((rc = read_file(p, &g_nodes[n].synced)) == 0)
      rc = buf_set(&g_nodes[n].cur, &g_nodes[n].synced);
  }
  closedir(d);
  return rc;
}

/* Forgets everything not durable. The backing directory already is what survives, so
 * the drop only discards memory (answered at once); the namespace and contents are read
 * back from the backing directory by the next operation. Open handles of the old state
 * become stale (EIO). */
static int g_unloaded;

static uint64_t g_last_drop_us; /* how long the last drop took inside forgetfs */

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* A zeroed node table, mapped (not calloc'ed: reusing the heap would zero 20+ MiB in the
 * drop, 25 ms and more on a busy machine). NULL when out of memory. */
static node_t *table_new(void) {
  void *p =
      mmap(NULL, MAX_NODES * sizeof(node_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Returns a large buffer's pages to the kernel in 4 MiB steps before freeing it: one
 * munmap of hundreds of MiB holds the process's memory map lock long enough to stall the
 * FUSE thread's next allocation (a drop measured 180 ms so). */
static void release(unsigned char *p, size_t cap) {
  const uintptr_t page = 4096, step = 4u << 20;
  if (p && cap > step) {
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + cap) & ~(page - 1);
    for (; a + step <= end; a += step)
      madvise((void *)a, step, MADV_DONTNEED);
  }
  free(p);
}

/* A spare zeroed table made ahead of the next drop (so the drop maps nothing). */
static node_t *_Atomic g_spare;

/* Frees a dropped node table (its buffers can be hundreds of MiB, whose release takes
 * longer than the drop may), on a thread of its own, then maps the next spare table. */
static void *free_table(void *arg) {
  node_t *t = arg;
  for (int i = 1; i < MAX_NODES; i++)
    if (t[i].used) {
      release(t[i].cur.p, t[i].cur.cap);
      release(t[i].synced.p, t[i].synced.cap);
    }
  munmap(t, MAX_NODES * sizeof *t);
  node_t *spare = table_new(), *none = NULL;
  if (spare && !atomic_compare_exchange_strong(&g_spare, &none, spare))
    munmap(spare, MAX_NODES * sizeof *spare);
  return NULL;
}

/* ------------------------------------------------------------------ partial drops, cuts */

static int write_backing(const char *path, const buf_t *b);

static int g_partial;          /* a drop keeps a random part of the unsynced writes */
static uint64_t g_rng = 1;     /* xorshift64 state ("seed N") */
static uint64_t g_partial_pages_new, g_partial_pages_torn, g_partial_pages_old, g_partial_files;
static int g_power_off;        /* after a cut: every operation fails until "power_on" */
static int g_cut_armed, g_cut_phase;
static uint64_t g_cut_left, g_cut_extra, g_cuts;
static char g_cut_pattern[256], g_cut_last_op[300];
static int g_fail_armed;
static uint64_t g_fail_left, g_fsync_failures;
static char g_fail_pattern[256];

static uint64_t rng_next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* The bytes of node n a power cut leaves on disk when a random part of its unsynced
 * writes made it there (see the header): into out. Pages the kernel holds as clean
 * (after a failed fsync) are not written back. 0 or -ENOMEM. */
static int partial_content(const node_t *n, buf_t *out) {
  const buf_t *old = &n->synced, *now = &n->cur, *base = n->has_clean ? &n->clean : &n->synced;
  size_t lo = old->len < now->len ? old->len : now->len, hi = old->len < now->len ? now->len : old->len;
  size_t len = lo + (hi > lo ? (size_t)(rng_next() % (hi - lo + 1)) : 0);
  if (buf_reserve(out, len) != 0)
    return -ENOMEM;
  out->len = len;
  for (size_t k = 0; k < len; k++)
    out->p[k] = k < old->len ? old->p[k] : 0;
  for (size_t pg = 0; pg < len; pg += 4096) {
    size_t end = pg + 4096 < len ? pg + 4096 : len;
    int dirty = 0;
    for (size_t k = pg; k < end && !dirty; k++)
      dirty = k >= now->len ? k < old->len : (k >= base->len || now->p[k] != base->p[k]);
    if (!dirty)
      continue;
    unsigned choice = (unsigned)(rng_next() % 3); /* 0 old, 1 new, 2 a prefix of sectors of the new */
    size_t upto = choice == 0 ? pg : choice == 1 ? end : pg + 512 * (size_t)(rng_next() % 8);
    if (upto > end)
      upto = end;
    for (size_t k = pg; k < upto && k < now->len; k++)
      out->p[k] = now->p[k];
    if (choice == 0)
      g_partial_pages_old++;
    else if (choice == 1)
      g_partial_pages_new++;
    else
      g_partial_pages_torn++;
  }
  return 0;
}

/* Before a partial drop: every file with a durable name gets on disk what partial_content
 * picks (the rest is dropped with the node table). */
static void partial_writeback(void) {
  buf_t b = {0};
  for (int i = 1; i < MAX_NODES; i++) {
    node_t *n = &g_nodes[i];
    if (!n->used || n->is_dir || !n->durable || !n->linked)
      continue;
    if (n->cur.len == n->synced.len && (!n->cur.len || !memcmp(n->cur.p, n->synced.p, n->cur.len)))
      continue;
    char p[PATH_MAX];
    backing_path(i, p, sizeof p);
    if (partial_content(n, &b) == 0 && write_backing(p, &b) == 0)
      g_partial_files++;
  }
  free(b.p);
}

static int drop_all(void);

/* The power goes: what is not on disk is gone (or, partial on, partly there), and the
 * file system answers nothing but EIO until power_on. */
static void cut_power(void) {
  g_cut_armed = 0;
  g_power_off = 1;
  g_cuts++;
  if (g_partial)
    partial_writeback();
  drop_all();
}

/* EIO while the power is off (the control file always answers). */
static int powered(const char *path) { return g_power_off && strcmp(path, CONTROL) != 0 ? -EIO : 0; }

/* After an operation took effect: counts it against cut_after. */
static void op_done(const char *op, const char *path, const char *path2) {
  if (!g_cut_armed)
    return;
  snprintf(g_cut_last_op, sizeof g_cut_last_op, "%s %s%s%s", op, path, path2 ? " " : "", path2 ? path2 : "");
  if (g_cut_phase == 0) {
    if (g_cut_pattern[0] && !strstr(g_cut_last_op, g_cut_pattern))
      return;
    if (--g_cut_left)
      return;
    g_cut_phase = 1;
    if (g_cut_extra == 0)
      cut_power();
  } else if (--g_cut_extra == 0) {
    cut_power();
  }
}

static int drop_all(void) {
  node_t *fresh = atomic_exchange(&g_spare, NULL), *old = g_nodes;
  if (!fresh)
    fresh = table_new();
  if (!fresh)
    return -ENOMEM;
  fresh[0] = old[0]; /* the root: it has no buffers */
  g_nodes = fresh;
  pthread_t th;
  if (pthread_create(&th, NULL, free_table, old) == 0)
    pthread_detach(th);
  else
    free_table(old);
  g_generation++;
  g_drops++;
  g_unloaded = 1;
  return 0;
}

static void ensure_loaded(void) {
  if (!g_unloaded)
    return;
  g_unloaded = 0;
  if (load_dir(0, g_backing) != 0)
    fprintf(stderr, "forgetfs: cannot read %s back after a drop\n", g_backing);
}

/* ------------------------------------------------------------------ durability */

static int write_backing(const char *path, const buf_t *b) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  size_t done = 0;
  while (done < b->len) {
    ssize_t n = write(fd, b->p + done, b->len - done);
    if (n <= 0) {
      close(fd);
      return -EIO;
    }
    done += (size_t)n;
  }
  close(fd);
  return 0;
}

/* fsync of a file: its current content becomes its synced content, written to its
 * backing name when it has a durable one. */
static int sync_file(int i) {
  node_t *n = &g_nodes[i];
  if (n->has_clean) {
    /* after a failed fsync: only what was written since reaches the disk; what the
     * kernel had marked clean without writing it stays lost */
    size_t old = n->synced.len;
    if (buf_resize(&n->synced, n->cur.len) != 0)
      return -ENOMEM;
    for (size_t k = 0; k < n->cur.len; k++)
      if (k >= n->clean.len || n->cur.p[k] != n->clean.p[k])
        n->synced.p[k] = n->cur.p[k];
      else if (k >= old)
        n->synced.p[k] = 0;
    n->has_clean = 0;
  } else if (buf_set(&n->synced, &n->cur) != 0) {
    return -ENOMEM;
  }
  g_file_syncs++;
  if (!n->durable || !n->linked)
    return 0;
  char p[PATH_MAX];
  backing_path(i, p, sizeof p);
  return write_backing(p, &n->synced);
}

static int remove_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return 0;
  if (!S_ISDIR(sb.st_mode))
    return unlink(path) == 0 ? 0 : -errno;
  DIR *d = opendir(path);
  if (!d)
    return -errno;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      char p[PATH_MAX];
      if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p)
        continue;
      remove_tree(p);
    }
  closedir(d);
  return rmdir(path) == 0 ? 0 : -errno;
}

/* fsync of a directory: the backing directory's entries become its current ones. */
static int sync_dir(int dir) {
  char bdir[PATH_MAX];
  backing_path(dir, bdir, sizeof bdir);
  if (mkdir(bdir, 0755) != 0 && errno != EEXIST) /* a directory never synced into its parent */
    return -errno;
  g_dir_syncs++;
  /* names the backing directory has that the directory no longer has */
  DIR *d = opendir(bdir);
  if (!d)
    return -errno;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    int c = child(dir, e->d_name);
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", bdir, e->d_name) >= (int)sizeof p)
      continue;
    struct stat sb;
    if (c < 0 || (lstat(p, &sb) == 0 && (S_ISDIR(sb.st_mode) ? 1 : 0) != g_nodes[c].is_dir))
      remove_tree(p);
  }
  closedir(d);
  /* the current names, each with its inode's synced content */
  for (int i = 1; i < MAX_NODES; i++) {
    node_t *n = &g_nodes[i];
    if (!n->used || !n->linked || n->parent != dir)
      continue;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", bdir, n->name) >= (int)sizeof p)
      return -ENAMETOOLONG;
    int rc = n->is_dir ? (mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -errno) : write_backing(p, &n->synced);
    if (rc)
      return rc;
    n->durable = 1;
  }
  /* an unlinked (or renamed-away) node's old backing name was removed above */
  for (int i = 1; i < MAX_NODES; i++)
    if (g_nodes[i].used && !g_nodes[i].linked && g_nodes[i].parent == dir) {
      g_nodes[i].durable = 0;
      if (!g_nodes[i].open_refs)
        node_free(i);
    }
  return 0;
}

/* ------------------------------------------------------------------ the control file */

static int control_write(const char *buf, size_t size) {
  char cmd[400];
  size_t n = size < sizeof cmd - 1 ? size : sizeof cmd - 1;
  memcpy(cmd, buf, n);
  cmd[n] = '\0';
  cmd[strcspn(cmd, "\n")] = '\0';
  unsigned long long a = 0, b = 0;
  int used = 0;
  if (!strcmp(cmd, "drop")) {
    uint64_t t0 = now_us();
    if (g_partial)
      partial_writeback();
    int rc = drop_all();
    g_last_drop_us = now_us() - t0;
    return rc ? rc : (int)size;
  }
  if (!strcmp(cmd, "partial on") || !strcmp(cmd, "partial off")) {
    g_partial = cmd[9] == 'n';
    return (int)size;
  }
  if (sscanf(cmd, "seed %llu", &a) == 1) {
    g_rng = a ? a : 1;
    return (int)size;
  }
  if (sscanf(cmd, "cut_after %llu %llu %n", &a, &b, &used) == 2 && a > 0) {
    g_cut_armed = 1;
    g_cut_phase = 0;
    g_cut_left = a;
    g_cut_extra = b;
    snprintf(g_cut_pattern, sizeof g_cut_pattern, "%s", used ? cmd + used : "");
    return (int)size;
  }
  if (!strcmp(cmd, "power_on")) {
    g_power_off = 0;
    g_cut_armed = 0;
    return (int)size;
  }
  if (sscanf(cmd, "fail_fsync %llu %n", &a, &used) == 1 && a > 0) {
    g_fail_armed = 1;
    g_fail_left = a;
    snprintf(g_fail_pattern, sizeof g_fail_pattern, "%s", used ? cmd + used : "");
    return (int)size;
  }
  return -EINVAL;
}

static int control_text(char *out, size_t cap) {
  ensure_loaded();
  int files = 0, dirty = 0;
  for (int i = 1; i < MAX_NODES; i++)
    if (g_nodes[i].used && !g_nodes[i].is_dir) {
      files++;
      dirty += g_nodes[i].cur.len != g_nodes[i].synced.len ||
               (g_nodes[i].cur.len && memcmp(g_nodes[i].cur.p, g_nodes[i].synced.p, g_nodes[i].cur.len));
    }
  return snprintf(out, cap,
                  "drops %llu\nlast_drop_us %llu\nfile_syncs %llu\ndir_syncs %llu\nfiles "
                  "%d\nfiles_with_unsynced_data %d\npower %s\ncuts %llu\ncut_armed %d\ncut_op %s\n"
                  "partial %d\npartial_files %llu\npartial_pages new %llu torn %llu old %llu\n"
                  "fsync_failures %llu\n",
                  (unsigned long long)g_drops, (unsigned long long)g_last_drop_us,
                  (unsigned long long)g_file_syncs, (unsigned long long)g_dir_syncs, files, dirty,
                  g_power_off ? "off" : "on", (unsigned long long)g_cuts, g_cut_armed,
                  g_cut_last_op[0] ? g_cut_last_op : "-", g_partial, (unsigned long long)g_partial_files,
                  (unsigned long long)g_partial_pages_new, (unsigned long long)g_partial_pages_torn,
                  (unsigned long long)g_partial_pages_old, (unsigned long long)g_fsync_failures);
}

/* ------------------------------------------------------------------ FUSE operations */

/* A handle: node index and the generation it was opened in (stale after a drop). */
static uint64_t fh_make(int i) { return ((uint64_t)g_generation << 32) | (uint32_t)i; }
static int fh_node(const struct fuse_file_info *fi) {
  if (!fi || (fi->fh >> 32) != g_generation)
    return -EIO;
  int i = (int)(uint32_t)fi->fh;
  return i > 0 && i < MAX_NODES && g_nodes[i].used ? i : -EIO;
}

static void *ff_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
  (void)conn;
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  cfg->use_ino = 0;
  return NULL;
}

static int ff_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
  memset(st, 0, sizeof *st);
  if (powered(path))
    return -EIO;
  if (!strcmp(path, CONTROL)) {
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    st->st_size = 4096;
    return 0;
  }
  int i = fi ? fh_node(fi) : lookup(path);
  if (fi && i < 0)
    i = lookup(path);
  if (i < 0)
    return i;
  node_t *n = &g_nodes[i];
  st->st_mode = i == 0 ? (S_IFDIR | 0755) : n->mode;
  st->st_nlink = n->is_dir || i == 0 ? 2 : 1;
  st->st_size = n->is_dir || i == 0 ? 4096 : (off_t)n->cur.len;
  st->st_blocks = (st->st_size + 511) / 512;
  st->st_blksize = 4096;
  st->st_mtim = st->st_ctim = st->st_atim = n->mtime;
  st->st_uid = getuid();
  st->st_gid = getgid();
  return 0;
}

static int ff_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
  (void)off, (void)fi, (void)flags;
  if (powered(path))
    return -EIO;
  int d = lookup(path);
  if (d < 0)
    return d;
  if (d != 0 && !g_nodes[d].is_dir)
    return -ENOTDIR;
  fill(buf, ".", NULL, 0, 0);
  fill(buf, "..", NULL, 0, 0);
  for (int i = 1; i < MAX_NODES; i++)
    if (g_nodes[i].used && g_nodes[i].linked && g_nodes[i].parent == d)
      fill(buf, g_nodes[i].name, NULL, 0, 0);
  return 0;
}

static int do_mkdir(const char *path, mode_t mode) {
  const char *base;
  int d = lookup_parent(path, &base);
  if (d < 0)
    return d;
  if (child(d, base) >= 0)
    return -EEXIST;
  int n = node_new(d, base, 1);
  if (n < 0)
    return n;
  g_nodes[n].mode = S_IFDIR | (mode & 07777);
  return 0;
}

static int do_rmdir(const char *path) {
  int i = lookup(path);
  if (i < 0)
    return i;
  if (i == 0 || !g_nodes[i].is_dir)
    return i == 0 ? -EBUSY : -ENOTDIR;
  for (int k = 1; k < MAX_NODES; k++)
    if (g_nodes[k].used && g_nodes[k].linked && g_nodes[k].parent == i)
      return -ENOTEMPTY;
  g_nodes[i].linked = 0; /* its backing directory goes with the parent's fsync */
  if (!g_nodes[i].durable)
    node_free(i);
  return 0;
}

/* An unlinked node stays while open; once closed it only remembers its old durable name
 * until the parent's fsync removes it from the backing directory. */
static void unlink_node(int i) {
  g_nodes[i].linked = 0;
  if (!g_nodes[i].open_refs && !g_nodes[i].durable)
    node_free(i);
}

static int do_unlink(const char *path) {
  if (!strcmp(path, CONTROL))
    return -EPERM;
  int i = lookup(path);
  if (i < 0)
    return i;
  if (g_nodes[i].is_dir)
    return -EISDIR;
  unlink_node(i);
  return 0;
}

/* rename: the node moves to the new name at once; in the backing directory the old name
 * stays (with the node's synced content) and the new one appears only with the
 * directories' fsyncs. The old name is remembered by a placeholder node, unlinked and
 * durable, which the source directory's fsync removes. */
static int do_rename(const char *from, const char *to, unsigned int flags) {
  if (flags)
    return -EINVAL;
  if (!strcmp(from, CONTROL) || !strcmp(to, CONTROL))
    return -EPERM;
  int i = lookup(from);
  if (i < 0)
    return i;
  const char *base;
  int d = lookup_parent(to, &base);
  if (d < 0)
    return d;
  int t = child(d, base);
  if (t == i)
    return 0;
  if (t >= 0) {
    if (g_nodes[t].is_dir != g_nodes[i].is_dir)
      return g_nodes[t].is_dir ? -EISDIR : -ENOTDIR;
    unlink_node(t);
  }
  if (g_nodes[i].durable && !g_nodes[i].is_dir) { /* the old backing name, until synced */
    int ph = node_new(g_nodes[i].parent, g_nodes[i].name, 0);
    if (ph < 0)
      return ph;
    g_nodes[ph].linked = 0;
    g_nodes[ph].durable = 1;
  }
  g_nodes[i].parent = d;
  snprintf(g_nodes[i].name, sizeof g_nodes[i].name, "%s", base);
  g_nodes[i].durable = 0; /* under its new name: not until the new directory's fsync */
  return 0;
}

static int do_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
  if (!strcmp(path, CONTROL))
    return -EEXIST;
  const char *base;
  int d = lookup_parent(path, &base);
  if (d < 0)
    return d;
  int i = child(d, base);
  if (i >= 0) {
    if (fi->flags & O_EXCL)
      return -EEXIST;
  } else {
    i = node_new(d, base, 0);
    if (i < 0)
      return i;
    g_nodes[i].mode = S_IFREG | (mode & 07777);
  }
  if (fi->flags & O_TRUNC)
    g_nodes[i].cur.len = 0;
  g_nodes[i].open_refs++;
  fi->fh = fh_make(i);
  fi->direct_io = 1;
  return 0;
}

static int ff_open(const char *path, struct fuse_file_info *fi) {
  if (powered(path))
    return -EIO;
  if (!strcmp(path, CONTROL)) {
    fi->fh = 0;
    fi->direct_io = 1;
    return 0;
  }
  int i = lookup(path);
  if (i < 0)
    return i;
  if (g_nodes[i].is_dir)
    return -EISDIR;
  if (fi->flags & O_TRUNC) {
    g_nodes[i].cur.len = 0;
    clock_gettime(CLOCK_REALTIME, &g_nodes[i].mtime);
  }
  g_nodes[i].open_refs++;
  fi->fh = fh_make(i);
  fi->direct_io = 1;
  return 0;
}

static int ff_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  if (powered(path))
    return -EIO;
  if (!strcmp(path, CONTROL)) {
    char text[1024];
    int n = control_text(text, sizeof text);
    if (off >= n)
      return 0;
    size_t k = (size_t)(n - off) < size ? (size_t)(n - off) : size;
    memcpy(buf, text + off, k);
    return (int)k;
  }
  int i = fh_node(fi);
  if (i < 0)
    return i;
  buf_t *b = &g_nodes[i].cur;
  if ((size_t)off >= b->len)
    return 0;
  size_t k = b->len - (size_t)off < size ? b->len - (size_t)off : size;
  memcpy(buf, b->p + off, k);
  return (int)k;
}

static int do_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  if (!strcmp(path, CONTROL))
    return control_write(buf, size);
  int i = fh_node(fi);
  if (i < 0)
    return i;
  buf_t *b = &g_nodes[i].cur;
  if ((size_t)off + size > b->len && buf_resize(b, (size_t)off + size) != 0)
    return -ENOSPC;
  memcpy(b->p + off, buf, size);
  clock_gettime(CLOCK_REALTIME, &g_nodes[i].mtime);
  return (int)size;
}

static int do_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
  if (!strcmp(path, CONTROL))
    return 0;
  int i = fi ? fh_node(fi) : lookup(path);
  if (i < 0)
    return i;
  if (g_nodes[i].is_dir)
    return -EISDIR;
  clock_gettime(CLOCK_REALTIME, &g_nodes[i].mtime);
  return buf_resize(&g_nodes[i].cur, (size_t)size);
}

static int do_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
  (void)datasync;
  if (!strcmp(path, CONTROL))
    return 0;
  int i = fh_node(fi);
  if (i < 0)
    return i;
  if (g_fail_armed && strstr(path, g_fail_pattern) && --g_fail_left == 0) {
    /* the kernel could not write it, marks it clean, and says so this once */
    g_fail_armed = 0;
    g_fsync_failures++;
    node_t *n = &g_nodes[i];
    if (buf_set(&n->clean, &n->cur) != 0)
      return -ENOMEM;
    n->has_clean = 1;
    return -EIO;
  }
  return sync_file(i);
}

static int do_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
  (void)datasync, (void)fi;
  int d = lookup(path);
  if (d < 0)
    return d;
  return sync_dir(d);
}

static int ff_opendir(const char *path, struct fuse_file_info *fi) {
  (void)fi;
  int d = lookup(path);
  return d < 0 ? d : (d == 0 || g_nodes[d].is_dir) ? 0 : -ENOTDIR;
}

static int ff_release(const char *path, struct fuse_file_info *fi) {
  if (!strcmp(path, CONTROL))
    return 0;
  int i = fh_node(fi);
  if (i < 0)
    return 0;
  if (g_nodes[i].open_refs > 0)
    g_nodes[i].open_refs--;
  if (!g_nodes[i].linked && !g_nodes[i].open_refs && !g_nodes[i].durable)
    node_free(i);
  return 0;
}

static int ff_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
  (void)tv, (void)fi;
  return lookup(path) < 0 && strcmp(path, CONTROL) ? -ENOENT : 0;
}

static int ff_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
  (void)fi;
  int i = lookup(path);
  if (i <= 0)
    return i < 0 ? i : 0;
  g_nodes[i].mode = (g_nodes[i].mode & S_IFMT) | (mode & 07777);
  return 0;
}

static int ff_statfs(const char *path, struct statvfs *st) {
  (void)path;
  return statvfs(g_backing, st) == 0 ? 0 : -errno;
}

static int ff_link(const char *from, const char *to) {
  (void)from, (void)to;
  return -EPERM;
}

/* The operations a cut counts (op_done), each refused while the power is off. */
static int ff_mkdir(const char *path, mode_t mode) {
  int rc = powered(path) ? -EIO : do_mkdir(path, mode);
  if (rc == 0)
    op_done("mkdir", path, NULL);
  return rc;
}
static int ff_rmdir(const char *path) {
  int rc = powered(path) ? -EIO : do_rmdir(path);
  if (rc == 0)
    op_done("rmdir", path, NULL);
  return rc;
}
static int ff_unlink(const char *path) {
  int rc = powered(path) ? -EIO : do_unlink(path);
  if (rc == 0)
    op_done("unlink", path, NULL);
  return rc;
}
static int ff_rename(const char *from, const char *to, unsigned int flags) {
  int rc = powered(from) ? -EIO : do_rename(from, to, flags);
  if (rc == 0)
    op_done("rename", from, to);
  return rc;
}
static int ff_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
  int rc = powered(path) ? -EIO : do_create(path, mode, fi);
  if (rc == 0)
    op_done("create", path, NULL);
  return rc;
}
static int ff_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  int rc = powered(path) ? -EIO : do_write(path, buf, size, off, fi);
  if (rc >= 0 && strcmp(path, CONTROL) != 0)
    op_done("write", path, NULL);
  return rc;
}
static int ff_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
  int rc = powered(path) ? -EIO : do_truncate(path, size, fi);
  if (rc == 0 && strcmp(path, CONTROL) != 0)
    op_done("truncate", path, NULL);
  return rc;
}
static int ff_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
  int rc = powered(path) ? -EIO : do_fsync(path, datasync, fi);
  if (rc == 0 && strcmp(path, CONTROL) != 0)
    op_done("fsync", path, NULL);
  return rc;
}
static int ff_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
  int rc = powered(path) ? -EIO : do_fsyncdir(path, datasync, fi);
  if (rc == 0)
    op_done("fsyncdir", path, NULL);
  return rc;
}

static const struct fuse_operations k_ops = {
    .init = ff_init,
    .getattr = ff_getattr,
    .readdir = ff_readdir,
    .mkdir = ff_mkdir,
    .rmdir = ff_rmdir,
    .unlink = ff_unlink,
    .rename = ff_rename,
    .link = ff_link,
    .create = ff_create,
    .open = ff_open,
    .read = ff_read,
    .write = ff_write,
    .truncate = ff_truncate,
    .fsync = ff_fsync,
    .fsyncdir = ff_fsyncdir,
    .opendir = ff_opendir,
    .release = ff_release,
    .utimens = ff_utimens,
    .chmod = ff_chmod,
    .statfs = ff_statfs,
};

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: forgetfs BACKING_DIR MOUNTPOINT [FUSE options: -f -s ...]\n");
    return 2;
  }
  if (!realpath(argv[1], g_backing)) {
    fprintf(stderr, "forgetfs: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  g_nodes = table_new();
  atomic_store(&g_spare, table_new());
  if (!g_nodes)
    return 1;
  g_nodes[0].used = 1;
  g_nodes[0].is_dir = 1;
  g_nodes[0].linked = 1;
  g_nodes[0].durable = 1;
  g_nodes[0].parent = -1;
  if (load_dir(0, g_backing) != 0) {
    fprintf(stderr, "forgetfs: cannot read %s\n", g_backing);
    return 1;
  }
  /* fuse_main gets argv without the backing directory */
  char **fargv = calloc((size_t)argc + 1, sizeof *fargv);
  int fargc = 0;
  fargv[fargc++] = argv[0];
  for (int i = 2; i < argc; i++)
    fargv[fargc++] = argv[i];
  int rc = fuse_main(fargc, fargv, &k_ops, NULL);
  free(fargv);
  return rc;
}
