#!/usr/bin/env bash
# The old names of every program, through the real binaries: each old name its --help lists
# (`--OLD -> --NEW`, and docker compose's `SAC_OLD -> SAC_NEW`) reaches its successor, with one
# deprecation warning. A value that does not parse shows it: the error names the successor,
# so nothing runs. Compose's names work as variables only: on the command line they are
# unknown (the control). Then: sac-learner --log_interval 100000 (beyond the seconds' range of
# one successor) runs; and common/config_keys.inc, the keys one program leaves to the others,
# is the programs' own option list.
# usage: test_config_aliases.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
T=$(mktemp -d /tmp/sac-aliases-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SAC_' || true)
n=0
for prog in learner/sac-learner actor/sac-actor replay/sac-replay; do
  bin=$build/$prog
  "$bin" --help | sed -n '/^Old names/,$p' | tail -n +2 >"$T/old"
  [ -s "$T/old" ] || fail "$prog --help lists no old names"
  while read -r old _ new rest; do
    if [[ $old == --* ]]; then
      k=${old#--} succ=${new#--}
      rc=0
      "$bin" "--$k=not-a-value" --metrics_port -1 >"$T/out" 2>&1 || rc=$?
    else
      k=$(tr 'A-Z' 'a-z' <<<"${old#SAC_}") succ=$(tr 'A-Z' 'a-z' <<<"${new#SAC_}")
      rc=0
      env "$old=not-a-value" "$bin" --metrics_port -1 >"$T/out" 2>&1 || rc=$?
      # the control: compose's name is no option
      "$bin" "--$k=1" --metrics_port -1 >"$T/cli" 2>&1 && fail "$prog: --$k (compose's variable name) accepted as an option"
      grep -q "unknown key '$k'" "$T/cli" || { cat "$T/cli"; fail "$prog --$k: not refused as unknown"; }
    fi
    [ "$rc" = 2 ] || { cat "$T/out"; fail "$prog $old=not-a-value: exit $rc, not 2"; }
    grep -q "'$k' is deprecated and goes in the next release; use .*'$succ'" "$T/out" ||
      { cat "$T/out"; fail "$prog $old: no deprecation warning naming $succ"; }
    [ "$(grep -c "deprecated" "$T/out")" = 1 ] || { cat "$T/out"; fail "$prog $old: not exactly one warning"; }
    grep -Eq "$succ = 'not-a-value'|'$k' = 'not-a-value'|$k = 'not-a-value': not a boolean" "$T/out" ||
      { cat "$T/out"; fail "$prog $old: the value did not reach $succ"; }
    n=$((n + 1))
  done <"$T/old"
done
echo "old names: $n, each reaching its successor with one warning"

# the steps' and the seconds' old name: 100000 is steps (local mode), beyond 86400 s
"$build/learner/sac-learner" --mode local --log_interval 100000 --total_steps 200 --learning_starts 100 \
  --batch_size 32 --hidden 8 --eval_episodes 1 --metrics_port -1 >"$T/li" 2>&1 || { cat "$T/li"; fail "--log_interval 100000 failed"; }
grep -q "ERROR" "$T/li" && { cat "$T/li"; fail "--log_interval 100000 logged an error"; }
grep -q "^result:" "$T/li" || { cat "$T/li"; fail "--log_interval 100000: no result"; }
[ "$(grep -c deprecated "$T/li")" = 1 ] || { cat "$T/li"; fail "--log_interval 100000: not one warning"; }
echo "sac-learner --mode local --log_interval 100000: runs, one warning"

# common/config_keys.inc is the union of the three programs' options
for prog in learner/sac-learner actor/sac-actor replay/sac-replay; do
  "$build/$prog" --help-markdown
done | sed -n 's/^| `--\([a-z0-9_.-]*\)` | \(int\|int64\|float\|bool\|string\) |.*/\1/p' | sort -u >"$T/keys"
sed -n 's/^"\(.*\)",$/\1/p' "$src/common/config_keys.inc" | sort -u >"$T/inc"
diff "$T/keys" "$T/inc" >"$T/diff" || { cat "$T/diff"; fail "common/config_keys.inc differs from the programs' options (< programs, > the file)"; }
echo "common/config_keys.inc: the $(wc -l <"$T/keys") option keys of sac-learner, sac-actor and sac-replay"
