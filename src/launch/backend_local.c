/* backend_local.c: nodes as child processes on this machine (backend.h).
 *
 * Each agent is spawned with PR_SET_PDEATHSIG(SIGTERM), so when the launcher
 * dies, even by SIGKILL, every agent stops its program and exits; the
 * environment (the secret with it) is the launcher's to build. Its end is
 * noticed through a pidfd on the launcher's loop, or, on kernels without
 * pidfds, by a 100 ms timer that reaps what has ended. Only the pids started
 * here are reaped (waitpid on each, never on -1): the launcher has other
 * children (the Arrow feeder). */
#include "launch/backend.h"

#include "platform/clock.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct lnode {
    pid_t pid;
    int pidfd;   /* -1: none (not started, ended, or no pidfds here) */
    int state;   /* TFOS_NODE_* */
    int status;  /* once ENDED */
} lnode;

typedef struct local {
    tfos__loop *loop;
    int n;
    lnode *nodes;
    tfos__node_ended_fn ended;
    void *user;
    tfos__timer reap_timer;
    int new_pgroup; /* tfos__local_cfg */
} local;

static void unwatch(local *b, lnode *x)
{
    if (x->pidfd >= 0) {
        tfos__loop_unwatch(b->loop, x->pidfd);
        close(x->pidfd);
        x->pidfd = -1;
    }
}

/* Reap every node that has ended; tell the launcher of each. */
static void reap(local *b)
{
    for (int i = 0; i < b->n; i++) {
        lnode *x = &b->nodes[i];
        if (x->state != TFOS_NODE_RUNNING || waitpid(x->pid, &x->status, WNOHANG) != x->pid)
            continue;
        x->state = TFOS_NODE_ENDED;
        unwatch(b, x);
        b->ended(b->user, i, x->status); /* may call back into b: x is consistent */
    }
}

static void on_exit_fd(tfos__loop *loop, int fd, int events, void *user)
{
    (void)loop;
    (void)fd;
    (void)events;
    reap(user);
}

static void on_reap_timer(tfos__loop *loop, tfos__timer *t, void *user)
{
    reap(user);
    tfos__timer_arm(loop, t, tfos__now_ms() + 100, on_reap_timer, user);
}

static int local_open(void **out, tfos__loop *loop, const void *cfg, int n, tfos__node_ended_fn ended, void *user)
{
    local *b = calloc(1, sizeof *b);
    if (!b || !(b->nodes = calloc((size_t)(n > 0 ? n : 1), sizeof *b->nodes))) {
        free(b);
        return TFOS_ENOMEM;
    }
    if (cfg)
        b->new_pgroup = ((const tfos__local_cfg *)cfg)->new_pgroup;
    b->loop = loop;
    b->n = n;
    b->ended = ended;
    b->user = user;
    for (int i = 0; i < n; i++)
        b->nodes[i].pidfd = -1;
    *out = b;
    return 0;
}

static int local_start(void *state, const tfos__node_launch *spec)
{
    local *b = state;
    if (spec->id < 0 || spec->id >= b->n || b->nodes[spec->id].state != TFOS_NODE_IDLE)
        return TFOS_EINVAL;
    lnode *x = &b->nodes[spec->id];
    tfos__spawn_opts so = {.argv = spec->argv, .envp = spec->envp, .stdin_fd = -1, .stdout_fd = -1,
                           .stderr_fd = -1, .new_pgroup = b->new_pgroup, .pdeathsig = SIGTERM};
    int rc = tfos__spawn(&so, &x->pid);
    if (rc)
        return rc;
    x->state = TFOS_NODE_RUNNING;
    x->pidfd = tfos__pidfd_open(x->pid);
    if (x->pidfd < 0 || tfos__loop_watch(b->loop, x->pidfd, TFOS_EV_READ, on_exit_fd, b)) {
        if (x->pidfd >= 0)
            close(x->pidfd);
        x->pidfd = -1;
        if (!b->reap_timer.armed)
            tfos__timer_arm(b->loop, &b->reap_timer, tfos__now_ms() + 100, on_reap_timer, b);
    }
    return 0;
}

static void local_stop(void *state, int id, int force)
{
    local *b = state;
    if (id >= 0 && id < b->n && b->nodes[id].state == TFOS_NODE_RUNNING)
        kill(b->nodes[id].pid, force ? SIGKILL : SIGTERM);
}

static int local_observe(void *state, int id, int *status)
{
    local *b = state;
    if (id < 0 || id >= b->n)
        return TFOS_NODE_IDLE;
    if (b->nodes[id].state == TFOS_NODE_RUNNING)
        reap(b); /* a callback may not have come yet (old kernels: the timer) */
    if (status && b->nodes[id].state == TFOS_NODE_ENDED)
        *status = b->nodes[id].status;
    return b->nodes[id].state;
}

static void local_close(void *state)
{
    local *b = state;
    if (!b)
        return;
    for (int i = 0; i < b->n; i++) {
        lnode *x = &b->nodes[i];
        if (x->state == TFOS_NODE_RUNNING) {
            kill(x->pid, SIGKILL);
            while (waitpid(x->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        unwatch(b, x);
    }
    tfos__timer_disarm(b->loop, &b->reap_timer);
    free(b->nodes);
    free(b);
}

const tfos__backend_ops tfos__backend_local = {
    .name = "local",
    .agent_host = "127.0.0.1",
    .forward_logs = 0,
    .open = local_open,
    .start = local_start,
    .stop = local_stop,
    .observe = local_observe,
    .close = local_close,
};
