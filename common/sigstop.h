/* How every program stops on SIGINT and SIGTERM: the first signal asks for a graceful
 * stop (a flag the program's loop watches) and a callback says at once, on a thread of
 * its own (not in the signal handler), what the program does now; a second SIGINT or
 * SIGTERM while it stops exits at once with 128 + the signal (130 for Ctrl-C), after
 * one line on stderr. It is not for libraries: one installation per process, by main.
 *
 * Exit codes the programs derive from it: 130 for a run stopped by SIGINT (an
 * interrupted run), 0 for a stop asked with SIGTERM (how services are stopped:
 * containers, Slurm, init systems). */
#ifndef SAC_COMMON_SIGSTOP_H
#define SAC_COMMON_SIGSTOP_H
#include <stdatomic.h>

/* Installs the handlers. *flag becomes 1 at the first signal; on_stop(sig, ud) (may be
 * NULL) then runs once on the stop thread: log from there. prog names the program in
 * the forced-exit line. 0, or SAC_ENOMEM (no thread: signals then only set the flag). */
int sac_sigstop_install(const char *prog, atomic_int *flag, void (*on_stop)(int sig, void *ud), void *ud);
/* The first stop signal received (SIGINT or SIGTERM), 0 while none. */
int sac_sigstop_signal(void);
/* The exit code of a run that ended normally otherwise: 130 after SIGINT, else `code`.
 * After a stop signal it first waits (up to 2 s) for on_stop to have returned, so that
 * the line it logs is written before the program returns from main and the process ends. */
int sac_sigstop_exit_code(int code);
/* "SIGINT", "SIGTERM" or "signal". */
const char *sac_sigstop_name(int sig);

#endif
