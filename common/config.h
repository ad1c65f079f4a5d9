/* Configuration for every binary: defaults, then (sac-learner) the environment's preset,
 * then a config file (--config FILE or SAC_CONFIG), then environment variables (SAC_<KEY>,
 * key upper-cased with '.' and '-' as '_'), then command-line options (--key=value or
 * --key value); later sources win. Options are described by a table of sac_cfg_opt_t
 * pointing into a caller's struct. An unknown key in any source is an error that names the
 * key, where it came from and the closest option; a value that does not parse, or is out of
 * its range, is an error naming key and value. */
#ifndef SAC_COMMON_CONFIG_H
#define SAC_COMMON_CONFIG_H
#include <stddef.h>
#include <stdio.h>

typedef enum { SAC_CFG_INT, SAC_CFG_INT64, SAC_CFG_DOUBLE, SAC_CFG_BOOL, SAC_CFG_STRING } sac_cfg_type_t;

typedef struct {
  const char *key;     /* "batch_size", "replay.capacity" */
  sac_cfg_type_t type; /* INT: int, INT64: int64_t, DOUBLE: double, BOOL: int (0/1), STRING: char[size] */
  size_t offset;       /* offsetof(struct, field) */
  size_t size;         /* STRING only: capacity of the char array */
  const char *def;     /* default value as text */
  double min, max;     /* numeric range (inclusive); min > max means unbounded */
  const char *help;
} sac_cfg_opt_t;

#define SAC_CFG_UNBOUNDED 1.0, 0.0

/* Details of the sources (sac_config_load):
 * - File: "key = value" lines; blank lines and lines starting with '#' are skipped, and
 *   " # ..." after an unquoted value is a comment. A value may be double-quoted (escapes
 *   \" \\ \n \t) to keep blanks or '#'. "[learner]", "[actor]" and "[replay]" hold the keys
 *   of one program (sac-learner reads [learner] and skips the other two, by argv[0]'s base
 *   name), so one file serves every program of a run; any other "[section]" makes later
 *   keys "section.key".
 *   It must be a regular file of at most 1 MiB (a device, a FIFO or a bigger file is
 *   refused, never read); reading stops after its first 10 bad lines.
 * - Environment: SAC_<KEY> for every option. A SAC_<KEY> that is another sacfleet program's
 *   option (k_program_keys in config.c) is skipped, so one environment serves every program;
 *   the non-option variables (SAC_CONFIG, SAC_LOG_LEVEL, ...: k_env_other in config.c; extend
 *   it there when a module reads a new SAC_* variable) and the launchers' own (SAC_SLURM_*,
 *   compose's images and placements) are accepted; every other SAC_* variable is an error.
 * - Command line: --key=value, --key value (a value never starts with "--"); for BOOL
 *   options also bare --key (true), --key true|false and --no-key (false). Booleans are
 *   true/false, 1/0, yes/no, on/off. "--" ends the options; anything positional is an
 *   error. --help (or -h) and --version win over every other argument and read no other
 *   source. In every source '-' and '_' in a key are the same (--total-steps).
 * - Integers may be written as 1e6 or 2.5e3 where that is exactly an integer (below 2^53).
 * - Keys are lower-case letters, digits, '_', '.', '-'; "help", "version" and "config"
 *   are reserved. A bad table is a programmer error and asserts.
 * - Renamed options (the alias table k_aliases in config.c): an old name whose new name is
 *   in the table still works in every source, for one release, with a one-line warning
 *   (docker compose's old variable names as SAC_<OLD> only).
 * - --help lists the table, the other SAC_* variables this program reads (by argv[0]'s
 *   base name) and the old names; --help-markdown prints the same as the program's
 *   section of docs/CONFIG.md (cmake/config_md.sh).
 * On SAC_ECONFIG the target holds a mix of old and new values and must not be used; a
 * single failed sac_config_set leaves its field unchanged. Not thread-safe with respect
 * to setenv() in other threads (it reads the environment). */

/* Result of sac_config_load beyond success or failure. */
enum { SAC_CFG_RUN = 0, SAC_CFG_EXIT_OK = 1 };

/* Applies defaults, file, environment and argv (argv[0] is the program) to target.
 * --help prints usage (the table's keys, types, defaults, help) to stdout,
 * --help-markdown the same as Markdown, and --version prints the version; all set *action to SAC_CFG_EXIT_OK.
 * Positional arguments are an error. Returns 0 or SAC_ECONFIG (with a log line saying why). */
int sac_config_load(const sac_cfg_opt_t *opts, size_t n_opts, void *target, int argc, char **argv,
                    const char *summary, int *action);
/* Where an option's value came from, in the order of precedence (sac_config_load_ext). */
typedef enum {
  SAC_CFG_SRC_DEFAULT = 0,
  SAC_CFG_SRC_PRESET,
  SAC_CFG_SRC_FILE,
  SAC_CFG_SRC_ENV,
  SAC_CFG_SRC_CLI,
  /* or'ed in: set through an old name that sets several options at once (sac-learner's
   * log_interval), so one of them may well not apply to the mode the program runs in */
  SAC_CFG_SRC_SHARED = 0x80
} sac_cfg_src_t;
/* As sac_config_load, and when sources is not NULL it receives n_opts entries: the
 * sac_cfg_src_t each option's value came from (an option set through an old name counts
 * for its successor), so a program can tell an option the user gave from a default. */
int sac_config_load_ext(const sac_cfg_opt_t *opts, size_t n_opts, void *target, int argc, char **argv,
                        const char *summary, int *action, unsigned char *sources);
/* Reads the config file at path as a preset: each of its keys (top level, and the given
 * section, e.g. "learner") is set only where sources says the option holds its default, and
 * is then marked SAC_CFG_SRC_PRESET; whatever a file, a variable or a flag set stays. Errors
 * as for a config file. 0 or SAC_ECONFIG. */
int sac_config_apply_preset(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *path,
                            const char *section, unsigned char *sources);
/* Whether the option o of target holds its default value (a string equal to it, a number
 * bit for bit). */
int sac_config_is_default(const sac_cfg_opt_t *o, const void *target);
/* Sets one key from text (as a command-line override would). 0, or SAC_ECONFIG. */
int sac_config_set(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *key, const char *value,
                   const char *source);
/* Writes "key = value" lines, loadable as a config file. Returns 0 or SAC_EIO. */
int sac_config_dump(const sac_cfg_opt_t *opts, size_t n_opts, const void *target, FILE *f);

#endif
