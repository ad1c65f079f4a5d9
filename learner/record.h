/* Video recording of evaluation episodes (sac-eval --record DIR): one MP4 per episode,
 * DIR/<env>-episode-<k>.mp4 (k from 0), holding the frame after the reset and one after
 * every step (an episode of T steps has T + 1 frames), at the environment's own frame
 * rate (Gymnasium's metadata render_fps; 30 where it has none).
 *
 * Where the frames come from:
 *  - gym:ID environments render themselves: the evaluation makes them with render=1
 *    (Gymnasium's render_mode="rgb_array", envs/gym_bridge);
 *  - the built-in C environments (Pendulum-v1, MountainCarContinuous-v0) and the MuJoCo
 *    plugin's tasks are drawn by their Gymnasium model, a mirror put in the evaluated
 *    environment's physical state at every frame (the returns are the C environment's
 *    own, the same as without --record);
 *  - a plugin:PATH environment renders itself when it exports the ABI's optional
 *    sac_env_plugin_render; otherwise recording is refused with the reason.
 * Frames are encoded by ffmpeg (Debian's `ffmpeg`, found on PATH; H.264 in MP4), fed raw
 * RGB frames through a pipe; without it --record is refused before any episode runs.
 * One recorder serves one evaluation on one thread. */
#ifndef SAC_LEARNER_RECORD_H
#define SAC_LEARNER_RECORD_H
#include <stddef.h>

#include "common/env.h"

typedef struct sac_recorder sac_recorder_t;

/* A recorder of the episodes of env_name into dir (created if missing). eval_env (cap
 * bytes) gets the name the evaluation must make its environment with (gym:ID gains
 * ",render=1"). Everything that could stop the recording is tried here, before any
 * episode: ffmpeg on PATH, the Gymnasium bridge and model of a mirror, one frame.
 * 0, or (logged, with what to do) SAC_EUNSUPPORTED (this environment cannot be
 * drawn), SAC_ENOTFOUND (no ffmpeg), SAC_EPLUGIN (no Gymnasium bridge), SAC_EIO. */
int sac_recorder_new(const char *dir, const char *env_name, char *eval_env, size_t cap, sac_recorder_t **out);
/* The evaluation's step callback (learner/evaluate.h sac_eval_step_fn) with user = the
 * recorder: a frame per call, a new file at step 0, the file finished when done. 0 or a
 * negative code (logged). */
int sac_recorder_on_step(void *user, sac_env_t *env, int episode, int step, int done);
/* The videos written so far: their count, and the path and frame count of video i. */
size_t sac_recorder_count(const sac_recorder_t *r);
const char *sac_recorder_path(const sac_recorder_t *r, size_t i, int *frames);
/* Finishes a video left open (an evaluation that failed) and frees the recorder.
 * Idempotent; nulls *r. */
void sac_recorder_destroy(sac_recorder_t **r);

#endif
