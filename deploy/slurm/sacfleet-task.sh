#!/bin/bash
# sacfleet-task.sh: what each Slurm task of deploy/slurm/sacfleet.sbatch runs (through
# srun) before it becomes one sacfleet process. It does two things a bare srun cannot:
#
#   1. srun hands the whole job environment to every task, so this keeps only the SAC_*
#      variables the binary lists in --help and drops the rest: a user sets SAC_TOTAL_STEPS or
#      SAC_ENVS_PER_ACTOR once for the job, and the learner or the actors, respectively, get
#      it. (The binaries would leave another program's SAC_<KEY> alone anyway; a learner with
#      --shards would still warn about a job-wide SAC_LEARNING_STARTS meant for the actors.)
#   2. Actors started as one step of many tasks need distinct ids: actor id =
#      SAC_SLURM_ACTOR_ID_BASE + SLURM_PROCID, and a metrics port from the same index.
#
# usage: sacfleet-task.sh ROLE BINARY [ARGS...]   (ROLE: learner, replay or actor)
set -euo pipefail
role=${1:?usage: sacfleet-task.sh ROLE BINARY [ARGS...]}
bin=${2:?usage: sacfleet-task.sh ROLE BINARY [ARGS...]}
shift 2
# read before the filter below drops every SAC_* the binary does not list
id_base=${SAC_SLURM_ACTOR_ID_BASE:-${SACFLEET_ACTOR_ID_BASE:-0}}
metrics_base=${SAC_SLURM_ACTOR_METRICS_BASE:-${SACFLEET_ACTOR_METRICS_BASE:-5644}}

own=$("$bin" --help 2>&1 | sed -n 's/.*\[env \(SAC_[A-Z0-9_]*\)\].*/\1/p')
[ -n "$own" ] || { echo "sacfleet-task: $bin --help lists no SAC_* variables" >&2; exit 2; }
while read -r v; do
  grep -qxF "$v" <<<"$own" || unset "$v"
done < <(compgen -e | grep '^SAC_' || true)

if [ "$role" = actor ]; then
  i=${SLURM_PROCID:-0}
  set -- --actor_id "$((id_base + i))" --metrics_port "$((metrics_base + i))" "$@"
fi
exec "$bin" "$@"
