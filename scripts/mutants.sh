#!/usr/bin/env bash
# Mutation check of the CPU learner's math: plants each bug of a fixed list, one at a
# time, in a COPY of the source tree (never in the checkout it runs from), builds only
# the learner library and the tests that guard its math (test_backend_cpu, test_sac),
# runs them, and fails unless every planted bug makes a test fail. It prints one line
# per mutant: caught (and by how many test cases, naming a few; all of them are listed in
# WORK/caught/NAME) or SURVIVED.
#
# The list covers the column split (bias gradient, weight gradient), the row split
# (input gradient), the joined [obs | action] first layer (copied, or read in place from
# sac.c's joined input rows), the GEMM pieces (a transposed A's row pieces included), the
# fused ops (Adam + Polyak, actor + alpha loss, the two noise draws, the policy's output
# and its copies, a last layer's backward with the layer below's), the policy head and
# sac.c's use of its buffers; several of them are
# right on a first computation and wrong only once a buffer holds a previous update's
# values, which is what the tests' stale buffers and multi-update checks are for.
#
# Not part of CI (about 20 builds and test runs: ~15 min on 2 busy cores); run it after
# changing learner/backend_cpu.c, learner/sac.c or the tests that guard them. A mutant
# whose text no longer matches the source is an error (the list must follow the code).
#
# usage: scripts/mutants.sh [NAME...]   (default: every mutant; names as printed)
# env:   MUTANTS_DIR (work folder; default a new one under /tmp, removed at the end
#        unless MUTANTS_KEEP=1), MUTANTS_JOBS (build jobs, 2),
#        MUTANTS_TEST_TIMEOUT (seconds per test binary, 600)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MUTANTS_JOBS:-2}
tmo=${MUTANTS_TEST_TIMEOUT:-600}
work=${MUTANTS_DIR:-$(mktemp -d /tmp/sac-mutants.XXXXXX)}
src=$work/src
tests=(test_backend_cpu test_sac)
cleanup() { [[ ${MUTANTS_KEEP:-0} == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT
PREFIX=mutants
# shellcheck source=scripts/lib_mutants.sh
source "$root/scripts/lib_mutants.sh"

# ---------------------------------------------------------------- the mutants

B=learner/backend_cpu.c
S=learner/sac.c
mutant bias-grad-not-zeroed $B \
  '    memset(db, 0, sizeof(float) * (size_t)width);' \
  '    (void)0; /* the bias gradient accumulates */'
mutant split-piece-bias-grad-not-zeroed $B \
  '  act_bwd_colsum(j->dY + col, j->Y + col, j->ldy, L->B, w, L->act, j->db ? j->db + col : NULL);' \
  '  float keep[1024]; /* a column piece after the first keeps what its db held */
  const int nk = j->db && c0 > 0 && w <= 1024 ? w : 0;
  for (int q = 0; q < nk; q++)
    keep[q] = j->db[col + q];
  act_bwd_colsum(j->dY + col, j->Y + col, j->ldy, L->B, w, L->act, j->db ? j->db + col : NULL);
  for (int q = 0; q < nk; q++)
    j->db[col + q] += keep[q];'
mutant joined-input-grad-beta-1 $B \
  'L->n_out, k == 0 ? 0.0f : 1.0f, j->dX[s]' \
  'L->n_out, 1.0f, j->dX[s]'
mutant joined-input-grad-last-member-only $B \
  'L->n_out, k == 0 ? 0.0f : 1.0f, j->dX[s]' \
  'L->n_out, 0.0f, j->dX[s]'
mutant hidden-input-grad-beta-1 $B \
  'gemm(CblasNoTrans, CblasTrans, rows, L->n_in, L->n_out, dYk, j->ldy, Wk, L->n_out, 0.0f,' \
  'gemm(CblasNoTrans, CblasTrans, rows, L->n_in, L->n_out, dYk, j->ldy, Wk, L->n_out, 1.0f,'
mutant input-grad-ragged-rows-dropped $B \
  '  const int rows = (int)(hi - lo);' \
  '  const int rows = (int)(hi - lo) & ~15;'
mutant joined-weight-grad-beta-1 $B \
  '           0.0f, dWk + (size_t)row * L->n_out, L->n_out);' \
  '           1.0f, dWk + (size_t)row * L->n_out, L->n_out);'
mutant hidden-weight-grad-beta-1 $B \
  '         j->dY + col, j->ldy, 0.0f, dWk, L->n_out);' \
  '         j->dY + col, j->ldy, 1.0f, dWk, L->n_out);'
mutant forward-beta-1 $B \
  'L->seg[0].ld, Wk, L->n_out, 0.0f, Yk,' \
  'L->seg[0].ld, Wk, L->n_out, 1.0f, Yk,'
mutant gemm-transposed-row-piece-offset $B \
  'A + (size_t)r0 * lda : A + r0;' \
  'A + (size_t)r0 * lda : A;'
mutant gemm-row-piece-ldc-for-lda $B \
  'A + (size_t)r0 * lda : A + r0;' \
  'A + (size_t)r0 * ldc : A + r0;'
mutant gemm-column-piece-offset $B \
  'tb == CblasNoTrans ? B + c0 : B + (size_t)c0 * ldb;' \
  'tb == CblasNoTrans ? B : B + (size_t)c0 * ldb;'
mutant joined-block-copied-only-when-grown $B \
  '    impl->join = p, impl->join_n = need;
  }
  for (int r = 0; r < L->B; r++) {
    float *dst = impl->join + (size_t)r * n;
    memcpy(dst, L->seg[0].p + (size_t)r * L->seg[0].ld, sizeof(float) * (size_t)n0);
    memcpy(dst + n0, L->seg[1].p + (size_t)r * L->seg[1].ld, sizeof(float) * (size_t)n1);
  }' \
  '    impl->join = p, impl->join_n = need;
    for (int r = 0; r < L->B; r++) {
      float *dst = impl->join + (size_t)r * n;
      memcpy(dst, L->seg[0].p + (size_t)r * L->seg[0].ld, sizeof(float) * (size_t)n0);
      memcpy(dst + n0, L->seg[1].p + (size_t)r * L->seg[1].ld, sizeof(float) * (size_t)n1);
    }
  }'
mutant head-grad-accumulates $B \
  '      dmu[i] = du;' \
  '      dmu[i] += du;'
mutant fused-polyak-before-adam $B \
  '  for (int i = 0; i < n_groups; i++)
    be->ops->adam(be, g[i].p, g[i].g, g[i].m, g[i].v, g[i].n, &g[i].hp, g[i].t);
  if (n_polyak)
    be->ops->polyak(be, tgt, src, n_polyak, tau);' \
  '  if (n_polyak)
    be->ops->polyak(be, tgt, src, n_polyak, tau);
  for (int i = 0; i < n_groups; i++)
    be->ops->adam(be, g[i].p, g[i].g, g[i].m, g[i].v, g[i].n, &g[i].hp, g[i].t);'
mutant fused-alpha-loss-wrong-buffer $B \
  '  be->ops->alpha_loss(be, h, logp, grad_alpha, stats_alpha);' \
  '  be->ops->alpha_loss(be, h, dlogp, grad_alpha, stats_alpha);'
mutant fused-noise-same-tag $B \
  '  be->ops->normal(be, out + n, n, key, stream, tag1);' \
  '  be->ops->normal(be, out + n, n, key, stream, tag0);'
mutant sac-one-input-grad-buffer $S \
  '      float *next = s->dbuf[l & 1];' \
  '      float *next = s->dbuf[0];'
mutant sac-actor-loss-on-next-actions $S \
  '  critic_input(s, CIN_PI, cin);' \
  '  critic_input(s, CIN_NEXT, cin);'
mutant sac-joined-input-batch-action-not-copied $S \
  '                         .n_copy = 3};' \
  '                         .n_copy = 2};'
mutant sac-joined-input-critic-loss-on-next-obs $S \
  '  pf.copy[1] = (sac_copy_t){s->batch.obs, batch_rows, O, ld, B, O};' \
  '  pf.copy[1] = (sac_copy_t){s->batch.next_obs, batch_rows, O, ld, B, O};'
mutant sac-fused-below-bias-grad-dropped $S \
  '  t->below = (sac_below_t){d->hidden_act, grads ? grads + nl->b[last - 1] : NULL};' \
  '  t->below = (sac_below_t){d->hidden_act, NULL};'
mutant sac-layer-below-runs-its-activation-again $S \
  '      L.act = SAC_ACT_NONE, db = NULL;' \
  '      db = NULL; /* the activation kernel runs again: the same values, one launch more */'
mutant joined-adjacent-segments-read-as-segment-0 $B \
  '    tmp->seg[0] = (sac_seg_t){L->seg[0].p, L->seg[0].ld, n};' \
  '    tmp->seg[0] = (sac_seg_t){L->seg[0].p, L->seg[0].ld, n0};'
mutant fused-policy-copies-one-short $B \
  '  for (int i = 0; i < a->n_copy; i++)' \
  '  for (int i = 0; i + 1 < a->n_copy; i++)'
mutant fused-below-activation-skipped $B \
  '.K = L->K, .n_seg = 1, .act = below->act};' \
  '.K = L->K, .n_seg = 1, .act = SAC_ACT_NONE};'

# ---------------------------------------------------------------- the copy and its build
(($#)) && mutants_check_names "$@"
mutants_copy "$root"
echo "mutants: copy in $work/src; building ${tests[*]}"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" 2>&1 ||
  { tail -n 20 "$work/configure.log"; exit 2; }

build() { cmake --build "$work/build" -j"$jobs" --target "${tests[@]}" >"$work/build.log" 2>&1; }
# runs the tests; sets caught_by (failing cases, or a binary's exit) and returns 0 when all passed
run_tests() {
  caught_by=()
  local t out rc
  for t in "${tests[@]}"; do
    out="$work/$t.log"
    rc=0
    (cd "$work/build/tests" && timeout "$tmo" "./$t" --jobs 1 >"$out" 2>&1) || rc=$?
    if ((rc != 0)); then
      local cases
      cases=$(grep -oE '\[(FAIL|CRASH)\] [A-Za-z0-9_]+::[A-Za-z0-9_]+' "$out" | awk '{print $2}' | sort -u || true)
      # a crash in a test's body reports the case on a line of its own
      # shellcheck disable=SC2016
      [[ -n $cases ]] || cases=$(grep -oE 'test `[A-Za-z0-9_]+::[A-Za-z0-9_]+` crashed' "$out" | awk '{print $2}' | tr -d '`' || true)
      [[ -n $cases ]] || cases="$t(exit $rc)"
      mapfile -t -O "${#caught_by[@]}" caught_by <<<"$cases"
    fi
  done
  ((${#caught_by[@]} == 0))
}

t0=$SECONDS
build || { echo "mutants: the unmutated copy does not build (see $work/build.log)"; MUTANTS_KEEP=1; exit 2; }
if ! run_tests; then
  echo "mutants: the unmutated copy fails ${caught_by[*]}: fix that first"
  exit 2
fi
echo "mutants: unmutated copy builds and passes ($((SECONDS - t0)) s)"

# ---------------------------------------------------------------- one mutant at a time
T0=$t0
mutants_plant_each "$@"
