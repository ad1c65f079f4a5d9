/* Graceful stop on the first SIGINT/SIGTERM, forced exit on the second (see sigstop.h).
 * The handler only stores, posts a semaphore and, the second time, writes and _exits:
 * everything else (the log line saying what the program does) runs on the stop thread. */
#include "common/sigstop.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

static atomic_int *g_flag;
static atomic_int g_sig;
static sem_t g_sem, g_said; /* g_said: posted once on_stop has returned */
static int g_thread_ok;
static void (*g_on_stop)(int, void *);
static void *g_ud;
static char g_forced[160];
static size_t g_forced_len;

static void on_signal(int sig) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&g_sig, &expected, sig)) {
    /* a second signal while stopping: at once, nothing but async-signal-safe calls */
    ssize_t w = write(STDERR_FILENO, g_forced, g_forced_len);
    (void)w;
    _exit(128 + sig);
  }
  if (g_flag)
    atomic_store(g_flag, 1);
  if (g_thread_ok)
    sem_post(&g_sem);
}

static void *stop_thread(void *arg) {
  (void)arg;
  while (sem_wait(&g_sem) != 0)
    ;
  if (g_on_stop)
    g_on_stop(atomic_load(&g_sig), g_ud);
  sem_post(&g_said);
  return NULL;
}

int sac_sigstop_install(const char *prog, atomic_int *flag, void (*on_stop)(int sig, void *ud), void *ud) {
  g_flag = flag;
  g_on_stop = on_stop;
  g_ud = ud;
  int n = snprintf(g_forced, sizeof g_forced, "\n%s: second stop signal: exiting at once\n", prog);
  g_forced_len = n > 0 && (size_t)n < sizeof g_forced ? (size_t)n : 0;
  int rc = 0;
  if (sem_init(&g_sem, 0, 0) == 0 && sem_init(&g_said, 0, 0) == 0) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    /* the stop thread takes no signal: they go to the threads that act on the flag */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    g_thread_ok = pthread_create(&t, &a, stop_thread, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
  }
  if (!g_thread_ok)
    rc = SAC_ENOMEM;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  return rc;
}

int sac_sigstop_signal(void) { return atomic_load(&g_sig); }

/* After a stop signal, the stop thread's line is waited for (up to SAID_WAIT_S): a program
 * whose loop stops quickly would otherwise return from main, and end the process, before
 * the line that says what it does on that signal was written. */
#define SAID_WAIT_S 2

static void wait_said(void) {
  static atomic_int waited;
  if (!atomic_load(&g_sig) || !g_thread_ok || atomic_exchange(&waited, 1))
    return;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += SAID_WAIT_S;
  while (sem_timedwait(&g_said, &until) != 0 && errno == EINTR)
    ;
}

int sac_sigstop_exit_code(int code) {
  wait_said();
  return atomic_load(&g_sig) == SIGINT ? 130 : code;
}

const char *sac_sigstop_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal";
}
