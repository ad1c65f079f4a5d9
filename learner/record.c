/* Episode videos (see record.h): frames from the environment itself or from a Gymnasium
 * mirror of it, piped raw into an ffmpeg child process per episode. */
#include "learner/record.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

#define DEFAULT_FPS 30

struct sac_recorder {
  char dir[1024];
  char stem[128];    /* the environment's name, made safe for a file name */
  sac_env_t *mirror; /* the Gymnasium model drawn in the evaluated env's state (NULL: the env draws) */
  double *state;     /* (state_n) */
  int state_n;
  unsigned char *rgb; /* one frame */
  size_t cap;
  int w, h, fps;
  pid_t pid; /* the ffmpeg of the episode being written (0: none) */
  int fd;    /* its stdin */
  int frames;
  char **paths; /* the videos written */
  int *counts;
  size_t n;
};

/* ffmpeg on PATH (the child execs it by name). */
static int have_ffmpeg(void) {
  const char *path = getenv("PATH");
  char buf[4096], file[4200];
  snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(file, sizeof file, "%s/ffmpeg", *d ? d : ".");
    if (access(file, X_OK) == 0)
      return 1;
  }
  return 0;
}

/* One frame of env (or of the mirror put in env's state) into r->rgb, growing it. */
static int grab(sac_recorder_t *r, sac_env_t *env) {
  int rc;
  float obs[SAC_ENV_MAX_OBS];
  sac_env_t *src = env;
  if (r->mirror) {
    if ((rc = sac_env_get_state(env, r->state, r->state_n)) != 0 ||
        (rc = sac_env_set_state(r->mirror, r->state, r->state_n, obs)) != 0) {
      SAC_ERROR("record", "cannot put the Gymnasium model in the environment's state: %s", sac_strerror(rc));
      return rc;
    }
    src = r->mirror;
  }
  int w = 0, h = 0, fps = 0;
  rc = sac_env_render(src, r->rgb, r->cap, &w, &h, &fps);
  if (rc == SAC_ETOOBIG) {
    unsigned char *p = realloc(r->rgb, (size_t)w * (size_t)h * 3);
    if (!p)
      return SAC_ENOMEM;
    r->rgb = p, r->cap = (size_t)w * (size_t)h * 3;
    rc = sac_env_render(src, r->rgb, r->cap, &w, &h, &fps);
  }
  if (rc) {
    SAC_ERROR("record", "%s could not render a frame: %s", r->stem, sac_strerror(rc));
    return rc;
  }
  if (r->pid && (w != r->w || h != r->h)) {
    SAC_ERROR("record", "%s changed its frame size from %dx%d to %dx%d within an episode", r->stem, r->w,
              r->h, w, h);
    return SAC_EPROTO;
  }
  r->w = w, r->h = h, r->fps = fps > 0 ? fps : DEFAULT_FPS;
  return 0;
}

/* The ffmpeg child for one video: raw RGB frames of w x h on its stdin, H.264 in MP4 at
 * path (odd sizes padded by a pixel: yuv420p needs even ones). */
static int video_open(sac_recorder_t *r, const char *path) {
  char size[32], fps[16];
  snprintf(size, sizeof size, "%dx%d", r->w, r->h);
  snprintf(fps, sizeof fps, "%d", r->fps);
  int fds[2];
  if (pipe(fds) != 0)
    return SAC_EIO;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return SAC_EIO;
  }
  if (pid == 0) {
    dup2(fds[0], STDIN_FILENO);
    close(fds[0]), close(fds[1]);
    execlp("ffmpeg", "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", size, "-r", fps, "-i", "pipe:0", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", "-movflags", "+faststart", path, (char *)NULL);
    _exit(127);
  }
  close(fds[0]);
  r->pid = pid, r->fd = fds[1], r->frames = 0;
  return 0;
}

static int video_write(sac_recorder_t *r) {
  const size_t n = (size_t)r->w * (size_t)r->h * 3;
  for (size_t off = 0; off < n;) {
    ssize_t k = write(r->fd, r->rgb + off, n - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      SAC_ERROR("record", "ffmpeg stopped taking frames: %s", strerror(errno));
      return SAC_EIO;
    }
    off += (size_t)k;
  }
  r->frames++;
  return 0;
}

/* Closes the pipe and waits for ffmpeg; keeps the video when it succeeded. */
static int video_close(sac_recorder_t *r, const char *path) {
  if (!r->pid)
    return 0;
  close(r->fd);
  int status = 0;
  while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
    ;
  r->pid = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    SAC_ERROR("record", "ffmpeg failed on %s (exit status %d; its messages are above)", path,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return SAC_EIO;
  }
  char **p = realloc(r->paths, sizeof *p * (r->n + 1));
  int *c = realloc(r->counts, sizeof *c * (r->n + 1));
  if (p)
    r->paths = p;
  if (c)
    r->counts = c;
  if (!p || !c || !(r->paths[r->n] = strdup(path)))
    return SAC_ENOMEM;
  r->counts[r->n++] = r->frames;
  return 0;
}

static void video_path(const sac_recorder_t *r, int episode, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s-episode-%d.mp4", r->dir, r->stem, episode);
}

int sac_recorder_on_step(void *user, sac_env_t *env, int episode, int step, int done) {
  sac_recorder_t *r = user;
  char path[1300];
  video_path(r, episode, path, sizeof path);
  int rc = grab(r, env);
  if (rc == 0 && step == 0 && (rc = video_open(r, path)) != 0)
    SAC_ERROR("record", "cannot start ffmpeg for %s", path);
  if (rc == 0)
    rc = video_write(r);
  if (rc == 0 && done)
    rc = video_close(r, path);
  return rc;
}

/* The mirror: the Gymnasium model of the environment's ID, made to render, reset once
 * (set_state needs a started environment) and tried once. */
static int open_mirror(sac_recorder_t *r, const char *env_name) {
  char id[300], name[400];
  const size_t n = strcspn(env_name, ",");
  snprintf(id, sizeof id, "%.*s", (int)n, env_name);
  snprintf(name, sizeof name, "gym:%s,render=1", id);
  float obs[SAC_ENV_MAX_OBS];
  int rc = sac_env_new(name, 0, SAC_STREAM_EVAL, &r->mirror);
  if (rc) {
    SAC_ERROR(
        "record",
        "--record draws %s with its Gymnasium model, through the Gymnasium bridge (libsac_env_gym.so, built "
        "where python3-dev and gymnasium are installed; see docs/EVALUATE.md): %s",
        id, sac_strerror(rc));
    return rc;
  }
  if ((rc = sac_env_reset(r->mirror, obs)) != 0)
    return rc;
  return 0;
}

/* Where frames come from: the environment itself, or a mirror of it; and a first frame. */
static int pick_source(sac_recorder_t *r, const char *env_name, char *eval_env, size_t cap) {
  const int gym = strncmp(env_name, "gym:", 4) == 0, plugin = strncmp(env_name, "plugin:", 7) == 0;
  if (snprintf(eval_env, cap, gym ? "%s,render=1" : "%s", env_name) >= (int)cap)
    return SAC_EINVAL;
  sac_env_t *probe = NULL;
  int rc = sac_env_new(eval_env, 0, SAC_STREAM_EVAL, &probe);
  float obs[SAC_ENV_MAX_OBS];
  if (rc == 0)
    rc = sac_env_reset(probe, obs);
  if (rc == 0 && !gym && !plugin) { /* a built-in or MuJoCo task: its Gymnasium model draws it */
    if ((rc = sac_env_state_size(probe)) < 0) {
      SAC_ERROR("record", "%s does not expose its state: it cannot be recorded", env_name);
    } else {
      r->state_n = rc;
      r->state = malloc(sizeof(double) * (size_t)r->state_n);
      rc = r->state ? open_mirror(r, env_name) : SAC_ENOMEM;
    }
  }
  if (rc == 0 && (rc = grab(r, probe)) == SAC_EUNSUPPORTED && plugin)
    SAC_ERROR("record",
              "%s exports no sac_env_plugin_render (common/env_plugin.h): it cannot be recorded; evaluate it "
              "without --record",
              env_name);
  else if (rc && r->mirror)
    SAC_ERROR("record",
              "the Gymnasium model of %s cannot render (classic-control models need pygame: pip install "
              "\"gymnasium[classic-control]\"; MuJoCo models an EGL or OSMesa OpenGL, MUJOCO_GL): %s",
              env_name, sac_strerror(rc));
  sac_env_destroy(&probe);
  return rc;
}

int sac_recorder_new(const char *dir, const char *env_name, char *eval_env, size_t cap,
                     sac_recorder_t **out) {
  *out = NULL;
  if (!have_ffmpeg()) {
    SAC_ERROR("record",
              "--record encodes with ffmpeg, which is not on PATH (Debian: apt-get install ffmpeg)");
    return SAC_ENOTFOUND;
  }
  sac_recorder_t *r = calloc(1, sizeof *r);
  if (!r)
    return SAC_ENOMEM;
  snprintf(r->dir, sizeof r->dir, "%s", dir);
  size_t j = 0;
  const char *id = strrchr(env_name, ':') ? strrchr(env_name, ':') + 1 : env_name;
  for (const char *p = id; *p && *p != ',' && j < sizeof r->stem - 1; p++)
    r->stem[j++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                  *p == '-' || *p == '_'
                              ? *p
                              : '_');
  int rc = 0;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    SAC_ERROR("record", "cannot create %s: %s", dir, strerror(errno));
    rc = SAC_EIO;
  }
  if (rc == 0)
    rc = pick_source(r, env_name, eval_env, cap);
  if (rc) {
    sac_recorder_destroy(&r);
    return rc;
  }
  signal(SIGPIPE, SIG_IGN); /* a dead ffmpeg is a write error, not the end of the process */
  *out = r;
  return 0;
}

size_t sac_recorder_count(const sac_recorder_t *r) { return r->n; }

const char *sac_recorder_path(const sac_recorder_t *r, size_t i, int *frames) {
  if (i >= r->n)
    return NULL;
  if (frames)
    *frames = r->counts[i];
  return r->paths[i];
}

void sac_recorder_destroy(sac_recorder_t **rp) {
  sac_recorder_t *r = rp ? *rp : NULL;
  if (!r)
    return;
  if (r->pid) {
    close(r->fd);
    waitpid(r->pid, NULL, 0);
  }
  sac_env_destroy(&r->mirror);
  for (size_t i = 0; i < r->n; i++)
    free(r->paths[i]);
  free(r->paths), free(r->counts), free(r->state), free(r->rgb);
  free(r);
  *rp = NULL;
}
