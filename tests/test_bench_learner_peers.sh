#!/usr/bin/env bash
# The peer section of sac-bench-learner: it runs the peers of gpu_peers.py, parses their
# lines, and quotes sacfleet's ratio to the fastest one by name. Without torch or jax:
# tests/data/fake_gpu_peers.py prints gpu_peers.py's format with figures from $FAKE_PEERS,
# and a tiny run of ours (preset tiny, 30 updates on the null backend: its figure is not
# the point) must then name the fastest peer that produced a finite figure, with ratio =
# sacfleet / that peer. Controls: the fastest changes when the figures do (the choice is
# not fixed), a faster peer with non-finite weights or a failed one is listed and not
# quoted, and with no peer at all, or no peers' script, the bench says so. Where $SAC_PEER_PYTHON names an interpreter with jax (bench/requirements-peers.txt),
# a real jax-jit run must produce a figure too.
# Usage: test_bench_learner_peers.sh BENCH
set -euo pipefail
bench=${1:?usage: test_bench_learner_peers.sh BENCH}
fake=$(cd "$(dirname "$0")" && pwd)/data/fake_gpu_peers.py
py=$(command -v /usr/bin/python3 || command -v python3) # a plain interpreter: the fake needs no package
ours=(--preset tiny --backend null --updates 30 --warmup 2 --runs 1 --peer_runs 1 --profile false --threads 1)

run() { # FAKE_PEERS MODES: the bench's output with the fake peers
  FAKE_PEERS=$1 "$bench" "${ours[@]}" --peer_python "$py" --peer_script "$fake" --peer_modes "$2" 2>&1
}
# expect OUTPUT MODE: peer-best names MODE, and its ratio is sacfleet / MODE's figure
expect() {
  awk -v want="$2" '
    /^peer-best / {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      found = 1
      if (v["mode"] != want) { print "fastest: " v["mode"] ", expected " want; exit 1 }
      if (want == "none") exit 0
      r = v["sacfleet_updates_per_s"] / v["updates_per_s"]
      if (v["updates_per_s"] + 0 <= 0 || (r - v["ratio"]) ^ 2 > 1e-6) { print "bad ratio: " $0; exit 1 }
    }
    END { if (!found) { print "no peer-best line"; exit 1 } }' <<<"$1"
}

out=$(run "torch-eager:130,torch-compile:150,jax-jit:227,jax-scan:247" "torch-eager,torch-compile,jax-jit,jax-scan")
echo "$out" | grep -E "peer|ratio"
expect "$out" jax-scan || { echo "FAIL: jax-scan, the fastest, not quoted"; exit 1; }
grep -q "| fastest peer | jax-scan" <<<"$out" || { echo "FAIL: the table does not name the fastest peer"; exit 1; }

# control: other figures, another fastest
out=$(run "torch-eager:999,torch-compile:150,jax-jit:227,jax-scan:247" "torch-eager,torch-compile,jax-jit,jax-scan")
expect "$out" torch-eager || { echo "FAIL: the choice did not follow the figures"; exit 1; }

# control: the fastest has non-finite weights, another failed: neither is quoted
out=$(run "torch-eager:130,jax-jit:227,jax-scan:900:0" "torch-eager,torch-compile,jax-jit,jax-scan")
expect "$out" jax-jit || { echo "FAIL: a non-finite or failed peer was quoted"; exit 1; }
grep -q "| peer torch-compile | failed" <<<"$out" || { echo "FAIL: the failed peer is not listed"; exit 1; }
grep -q "| peer jax-scan | failed: its weights ended non-finite" <<<"$out" || {
  echo "FAIL: the non-finite peer is not listed as such"; exit 1; }

# control: no peer produced a figure
out=$(run "" "torch-eager,jax-jit")
expect "$out" none || { echo "FAIL: no peer, yet one was quoted"; exit 1; }

# control: no peers' script: one clear line, and ours still runs
out=$("$bench" "${ours[@]}" --peer_script /nonexistent/gpu_peers.py 2>&1)
grep -q "peers: none: the peers' script /nonexistent/gpu_peers.py is not there" <<<"$out" || {
  echo "FAIL: a missing peers' script is not said"; exit 1; }

if [[ -n "${SAC_PEER_PYTHON:-}" ]] && "$SAC_PEER_PYTHON" -c "import jax, optax" 2>/dev/null \
  && [[ -f "${SAC_PEER_SCRIPT:-}" ]]; then
  out=$("$bench" "${ours[@]}" --peer_python "$SAC_PEER_PYTHON" --peer_script "$SAC_PEER_SCRIPT" --peer_modes jax-jit 2>&1)
  echo "$out" | grep -E "peer"
  expect "$out" jax-jit || { echo "FAIL: the real jax-jit peer produced no figure"; exit 1; }
  echo "real peer: jax-jit under $SAC_PEER_PYTHON"
else
  echo "real peer: not run (set SAC_PEER_PYTHON to an interpreter with jax and optax and SAC_PEER_SCRIPT to gpu_peers.py)"
fi
echo "PASS: the fastest peer is quoted by name, with its ratio; failed and non-finite peers are not"
