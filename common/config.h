/* Configuration for every binary: defaults, then a config file (--config FILE or
 * SAC_CONFIG), then environment variables (SAC_<KEY>, key upper-cased with '.' and '-'
 * as '_'), then command-line options (--key=value or --key value); later sources win.
 * Options are described by a table of sac_cfg_opt_t pointing into a caller's struct.
 * An unknown key in any source is an error that names the key and where it came from;
 * a value that does not parse, or is out of its range, is an error naming key and value. */
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
 *   \" \\ \n \t) to keep blanks or '#'. "[section]" makes later keys "section.key".
 *   It must be a regular file of at most 1 MiB (a device, a FIFO or a bigger file is
 *   refused, never read); reading stops after its first 10 bad lines.
 * - Environment: SAC_<KEY> for every option. Every other SAC_* variable is an error,
 *   except the non-option variables SAC_CONFIG, SAC_LOG_LEVEL and SAC_LOG_JSON (the list
 *   k_env_allow in config.c; extend it there when a module reads a new SAC_* variable).
 * - Command line: --key=value, --key value (a value never starts with "--"); for BOOL
 *   options also bare --key (true), --key true|false and --no-key (false). Booleans are
 *   true/false, 1/0, yes/no, on/off. "--" ends the options; anything positional is an
 *   error. --help and --version win over every other argument and read no other source.
 * - Keys are lower-case letters, digits, '_', '.', '-'; "help", "version" and "config"
 *   are reserved. A bad table is a programmer error and asserts.
 * - Renamed options (the alias table k_aliases in config.c): an old name whose new name is
 *   in the table still works in every source, for one release, with a one-line warning.
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
/* Sets one key from text (as a command-line override would). 0, or SAC_ECONFIG. */
int sac_config_set(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *key, const char *value,
                   const char *source);
/* Writes "key = value" lines, loadable as a config file. Returns 0 or SAC_EIO. */
int sac_config_dump(const sac_cfg_opt_t *opts, size_t n_opts, const void *target, FILE *f);

#endif
