#!/usr/bin/env bash
# Per-environment presets (presets/, common/preset.c): sac-learner applies the environment's
# own file under every source the user sets (defaults < preset < --config < SAC_* < flags),
# logs it and records it in the run's config.txt; --preset none and --preset FILE; the
# folders of SAC_PRESET_PATH come first. Negative controls: --preset none leaves the default,
# and a preset with a bad key is refused, naming the file.
# usage: test_presets.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
learner=$build/learner/sac-learner
T=$(mktemp -d /tmp/sac-presets-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SAC_' || true)
n=0
# run NAME [options...]: a short embedded run; its log in $T/NAME.log, its config in $T/NAME.cfg
run() {
  local name=$1
  shift
  "$learner" --env Pendulum-v1 --total_steps 200 --learning_starts 100 --hidden 8 --batch_size 32 \
    --embedded_actors 1 --embedded_shards 1 --eval_episodes 1 --metrics_port -1 --threads 1 \
    --run_dir "$T/runs" --run_name "$name" "$@" >"$T/$name.log" 2>&1 || { cat "$T/$name.log"; fail "$name: exit $?"; }
  cp "$T/runs/$name/config.txt" "$T/$name.cfg"
}
val() { sed -n "s/^$2 = \"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\}\$/\\1/p" "$T/$1.cfg"; }
check() { # NAME KEY WANT WHY
  local got
  got=$(val "$1" "$2")
  [ "$got" = "$3" ] || { grep -i preset "$T/$1.log"; fail "$1: $2 = '$got', want '$3' ($4)"; }
  n=$((n + 1))
}

run plain
check plain lr 0.001 "Pendulum-v1's preset"
check plain preset "$src/presets/Pendulum-v1.conf" "the file applied is recorded"
grep -qF "preset $src/presets/Pendulum-v1.conf: sets lr" "$T/plain.log" || fail "the preset is not logged at start"

run flag --lr 5e-4
check flag lr 0.00050000000000000001 "a flag wins over the preset"
grep -q "sets nothing the other sources left" "$T/flag.log" || fail "the log does not say that the preset set nothing"

SAC_LR=2e-4 run env
check env lr 0.00020000000000000001 "SAC_LR wins over the preset"

printf 'lr = 4e-4\n' >"$T/file.conf"
run file --config "$T/file.conf"
check file lr 0.00040000000000000002 "a config file wins over the preset"

run none --preset none
check none lr 0.00029999999999999997 "the negative control: --preset none keeps the default"
check none preset none "--preset none is recorded"

printf '[learner]\nlr = 7e-4\n' >"$T/mine.conf"
run mine --preset "$T/mine.conf"
check mine lr 0.00069999999999999999 "--preset FILE"

mkdir "$T/path"
printf '[learner]\nlr = 6e-4\n' >"$T/path/Pendulum-v1.conf"
SAC_PRESET_PATH=$T/path run pathed
check pathed lr 0.00059999999999999995 "SAC_PRESET_PATH comes first"

printf '[learner]\nlrr = 1\n' >"$T/bad.conf"
if "$learner" --preset "$T/bad.conf" --total_steps 10 --metrics_port -1 >"$T/bad.log" 2>&1; then
  fail "a preset with an unknown key was accepted"
fi
grep -qF "$T/bad.conf" "$T/bad.log" && grep -q "did you mean lr" "$T/bad.log" || { cat "$T/bad.log"; fail "the bad preset's error does not name the file and the key"; }
n=$((n + 1))

# every shipped preset loads (its keys are options) and names its task
for f in "$src"/presets/*.conf; do
  id=$(basename "$f" .conf)
  # a refused --run_name stops it after the preset is applied, before anything starts
  "$learner" --preset "$f" --run_name stop/here --metrics_port -1 >"$T/load.log" 2>&1 || true
  grep -qF "preset $f: sets" "$T/load.log" && ! grep -q "ERROR config" "$T/load.log" ||
    { cat "$T/load.log"; fail "presets/$id.conf does not load"; }
  grep -q "^# $id " "$f" || fail "presets/$id.conf does not start with '# $id '"
  n=$((n + 1))
done
echo "$n checks passed"
