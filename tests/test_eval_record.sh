#!/usr/bin/env bash
# sac-eval --record (docs/EVALUATE.md): a video per episode with the frame after the reset
# and one per step (T steps: T + 1 frames, counted by ffprobe), for
#   - Pendulum-v1, the built-in C environment, drawn by its Gymnasium model in its state
#     (one whole episode: 201 frames); the recorded returns are those of a plain
#     evaluation (recording changes nothing);
#   - gym:Pendulum-v1 rendering itself (render_mode="rgb_array"), 2 episodes of 20 steps;
#   - HalfCheetah-v5, the MuJoCo plugin, drawn by its Gymnasium model (one episode of 5
#     steps), where the plugin is built;
# and a clear refusal, before any episode, for an environment that cannot render (the
# example C plugin), and for ffmpeg missing from PATH.
# usage: test_eval_record.sh SAC_LEARNER SAC_EVAL EXAMPLE_PLUGIN.so MUJOCO_BUILT(0|1)
# exit 77 without ffmpeg/ffprobe or Gymnasium with pygame (the test extras install them)
set -uo pipefail
learner=$1 eval=$2 example=$3 mujoco=$4
command -v ffprobe >/dev/null 2>&1 || { echo "SKIP: ffmpeg/ffprobe not installed (scripts/install-deps.sh --test)"; exit 77; }
python3 -c 'import gymnasium, pygame' 2>/dev/null || { echo "SKIP: gymnasium with pygame not installed (scripts/test.sh)"; exit 77; }
dir=$(mktemp -d /tmp/sac-eval-record-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 12 "$f"; }; done; exit 1; }
frames() { ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$1"; }
train() { # name env steps learning_starts: a tiny policy of that environment
  "$learner" --mode local --env "$2" --total_steps "$3" --learning_starts "$4" --hidden 16 --batch_size 16 \
    --eval_episodes 1 --log_every_steps 0 --metrics_port -1 --run_dir "$dir/runs" --run_name "$1" \
    >"$dir/train-$1.log" 2>&1 || fail "training $1"
}
# check_videos JSON N FRAMES: N videos listed, each of FRAMES frames by ffprobe and the JSON
check_videos() {
  python3 - "$1" "$2" "$3" <<'EOF' || fail "$1: the videos"
import json, subprocess, sys
r, n, want = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
v = r["videos"]
if len(v) != n:
    sys.exit("%d videos, expected %d" % (len(v), n))
for i, x in enumerate(v):
    got = int(subprocess.check_output(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                                       "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", x["path"]]))
    if got != want or x["frames"] != want or r["lengths"][i] + 1 != want:
        sys.exit("%s: %d frames in the file, %d written, episode of %d steps; expected %d" %
                 (x["path"], got, x["frames"], r["lengths"][i], want))
print("%s: %d video(s) of %d frames" % (r["env"], n, want))
EOF
}

train pend Pendulum-v1 400 200
"$eval" "$dir/runs/pend" --episodes 1 --record "$dir/v1" --json >"$dir/pend.json" 2>"$dir/pend.log" || fail "record Pendulum-v1"
check_videos "$dir/pend.json" 1 201
"$eval" "$dir/runs/pend" --episodes 1 --json >"$dir/plain.json" 2>>"$dir/pend.log" || fail "evaluate Pendulum-v1"
python3 -c 'import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); sys.exit(a["returns"] != b["returns"])' \
  "$dir/pend.json" "$dir/plain.json" || fail "recording changed the returns"

"$eval" "$dir/runs/pend" --env "gym:Pendulum-v1,max_steps=20" --episodes 2 --record "$dir/v2" --json \
  >"$dir/gym.json" 2>"$dir/gym.log" || fail "record gym:Pendulum-v1"
check_videos "$dir/gym.json" 2 21

if [ "$mujoco" = 1 ]; then
  train cheetah "HalfCheetah-v5,max_steps=20" 60 30
  "$eval" "$dir/runs/cheetah" --env "HalfCheetah-v5,max_steps=5" --episodes 1 --record "$dir/v3" --json \
    >"$dir/cheetah.json" 2>"$dir/cheetah.log" || fail "record HalfCheetah-v5"
  check_videos "$dir/cheetah.json" 1 6
fi

# an environment that cannot render: refused before any episode, with the reason
train point "plugin:$example" 300 100
"$eval" "$dir/runs/point" --record "$dir/v4" >"$dir/point.out" 2>"$dir/point.log"
rc=$?
[ $rc = 1 ] && grep -q "exports no sac_env_plugin_render" "$dir/point.log" && ! grep -q '^episode' "$dir/point.out" ||
  fail "an environment that cannot render: exit $rc, $(tail -n 1 "$dir/point.log")"
# no ffmpeg on PATH: refused, naming the package
PATH=/nonexistent "$eval" "$dir/runs/pend" --record "$dir/v5" >/dev/null 2>"$dir/noffmpeg.log"
rc=$?
[ $rc = 1 ] && grep -q "apt-get install ffmpeg" "$dir/noffmpeg.log" || fail "without ffmpeg: exit $rc"
echo "refused: an environment without rendering (exit 1, the reason), ffmpeg missing (exit 1, the package)"
echo "1 passed, 0 failed"
