# shellcheck shell=bash
# shellcheck disable=SC2154 # work, src, PREFIX and caught_by are the caller's (below)
# What the mutation checks (scripts/mutants.sh, scripts/durability_mutants.sh) share: the
# list of mutants, the copy of the checkout they are planted in, and the loop that plants
# each one, rebuilds, runs the tests and restores the file. Sourced; it runs nothing.
#
# The caller sets `work` (its folder: orig/ and caught/ go there), `src` (the copy's root)
# and PREFIX (its name, for the lines it prints), registers mutants with `mutant`, and
# defines `build` (0 when the copy built) and `run_tests` (0 when every test passed; else
# it fills the array caught_by with what failed).

names=() files=() olds=() news=()
# mutant NAME FILE OLD NEW: OLD must occur exactly once in FILE.
mutant() { names+=("$1") files+=("$2") olds+=("$3") news+=("$4"); }

# mutants_check_names NAME...: exits 2 when a name is not a registered mutant.
mutants_check_names() {
  local want n found
  for want in "$@"; do
    found=0
    for n in "${names[@]}"; do [[ $n == "$want" ]] && found=1; done
    ((found)) || { echo "$PREFIX: no mutant named $want" >&2; exit 2; }
  done
}

# mutants_copy ROOT: the checkout's files as they are (tracked and untracked, not ignored:
# no build folders) into $src, with new mtimes (a reused build recompiles them), and the
# files the mutants change into $work/orig.
mutants_copy() {
  local f
  mkdir -p "$src" "$work/orig" "$work/caught"
  (cd "$1" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xmf - -C "$src"
  for f in "${files[@]}"; do mkdir -p "$work/orig/$(dirname "$f")" && cp "$src/$f" "$work/orig/$f"; done
}

# mutants_plant_each [NAME...]: each mutant (or those named) in turn: planted, built, tested,
# restored; one line each: caught (by how many, naming a few; all in $work/caught/NAME) or
# SURVIVED or BROKEN. Returns 0 when every one was caught; T0 (SECONDS at the start) for the
# total time.
mutants_plant_each() {
  local survived=0 ran=0 i name f sel want t1 line n more
  for i in "${!names[@]}"; do
    name=${names[$i]} f=${files[$i]}
    if (($#)); then
      sel=0
      for want in "$@"; do [[ $want == "$name" ]] && sel=1; done
      ((sel)) || continue
    fi
    ran=$((ran + 1))
    t1=$SECONDS
    if ! MUT_FILE="$src/$f" MUT_OLD="${olds[$i]}" MUT_NEW="${news[$i]}" python3 - <<'EOF'; then
import os, sys
p, old, new = os.environ["MUT_FILE"], os.environ["MUT_OLD"], os.environ["MUT_NEW"]
s = open(p).read()
if s.count(old) != 1:
    sys.exit(f"found {s.count(old)} times, not once")
open(p, "w").write(s.replace(old, new))
EOF
      echo "$PREFIX: $name: its text does not match $f once: the list must follow the code"
      exit 2
    fi
    if ! build; then
      line="BROKEN   (does not build: a mutant must compile; see the list)"
      survived=$((survived + 1))
    elif run_tests; then
      line="SURVIVED"
      survived=$((survived + 1))
    else
      n=${#caught_by[@]}
      printf '%s\n' "${caught_by[@]}" >"$work/caught/$name"
      more=""
      ((n <= 3)) || more="..."
      line="caught   by $n case(s): $(printf '%s ' "${caught_by[@]:0:3}")$more"
    fi
    cp "$work/orig/$f" "$src/$f" # a new mtime: the next build recompiles it
    printf '%-36s %s (%d s)\n' "$name" "$line" $((SECONDS - t1))
  done
  echo "$PREFIX: $((ran - survived)) of $ran caught, $survived survived or broken ($((SECONDS - T0)) s)"
  ((survived == 0))
}
