/* feedsock.c: the feed socket's handshake on both sides, over a link. */
#include "core/feedsock.h"

#include "core/link.h"
#include "core/log.h"
#include "core/loop.h"
#include "platform/clock.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PENDING_MAX 16          /* producers in their handshake at once */
#define HANDSHAKE_MS 2000       /* a producer must finish its handshake this fast */

static void feed_addr(char *out, size_t len, const char *cluster_id, int executor_id)
{
    snprintf(out, len, "@tfos-feed-%s-%d", cluster_id, executor_id);
}

/* ---- the agent's side ---------------------------------------------------- */

struct tfos__feed_server {
    tfos__listener *ls;
    int in_fd, out_fd;
    char *secret, *node;
    char who[64];           /* "agent worker:0" */
    tfos__warn_limit warn;  /* refusals: a few per 10 s, the rest summed up */
};

/* A producer's first frame: FEED_OPEN with the cluster secret's mac; then
 * FEED_OK with the rings, and the link ends once that is written. */
static void on_open(tfos__link *k, const tfos__frame *f, void *user)
{
    tfos__feed_server *s = user;
    if (f->type != TFOS_MSG_FEED_OPEN) {
        tfos__warn_limited(&s->warn, "refused a feed producer: %s", "its first frame was not FEED_OPEN");
        tfos__link_close(k);
        return;
    }
    if (tfos__link_auth(k, f, s->secret, "cluster secret")) {
        tfos__warn_limited(&s->warn, "refused a feed producer: %s", "it does not know the cluster secret");
        return;
    }
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_FEED_OK);
    tfos__msg_add(&m, "node", "%s", s->node);
    int fds[2] = {s->in_fd, s->out_fd};
    int rc = tfos__msg_end(&m);
    if (rc == 0)
        rc = tfos__link_send_fds(k, &m, fds, 2);
    tfos__msg_fini(&m);
    if (rc) {
        tfos__warn_limited(&s->warn, "refused a feed producer: %s", "the rings could not be sent");
        tfos__link_close(k);
        return;
    }
    tfos__link_finish(k);
}

static void on_end(tfos__link *k, int rc, const char *why, void *user)
{
    (void)k;
    (void)rc;
    tfos__feed_server *s = user;
    if (why && !tfos__link_authed(k))
        tfos__warn_limited(&s->warn, "refused a feed producer: %s", why);
}

int tfos__feed_server_open(tfos__feed_server **out, tfos__loop *loop, const char *cluster_id, int executor_id,
                           const char *secret, const char *node, int in_fd, int out_fd)
{
    tfos__feed_server *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    s->in_fd = in_fd;
    s->out_fd = out_fd;
    s->secret = strdup(secret);
    s->node = strdup(node);
    snprintf(s->who, sizeof s->who, "agent %s", node);
    s->warn = (tfos__warn_limit){.who = s->who, .per_window = 3, .window_ms = 10000};
    int rc = TFOS_ENOMEM;
    if (s->secret && s->node) {
        char addr[160], err[256];
        feed_addr(addr, sizeof addr, cluster_id, executor_id);
        tfos__listen_opts o = {.addr = addr, .backlog = 64, .max_pending = PENDING_MAX, .auth_ms = HANDSHAKE_MS,
                               .same_user = 1, .cb = {on_open, on_end}, .user = s};
        rc = tfos__listener_open(&s->ls, loop, &o, err, sizeof err);
    }
    if (rc) {
        int e = errno;
        free(s->secret);
        free(s->node);
        free(s);
        errno = e;
        return rc;
    }
    *out = s;
    return 0;
}

void tfos__feed_server_close(tfos__feed_server *s)
{
    if (!s)
        return;
    tfos__warn_limit_flush(&s->warn, 1);
    tfos__listener_close(s->ls);
    free(s->secret);
    free(s->node);
    free(s);
}

/* ---- the producer's side ------------------------------------------------- */

int tfos__feed_connect(const char *cluster_id, int executor_id, const char *secret, int timeout_ms,
                       _Atomic int *stop, int *in_fd, int *out_fd, char *node, size_t nodelen, char *err,
                       size_t errlen)
{
    char addr[160], who[200];
    feed_addr(addr, sizeof addr, cluster_id, executor_id);
    snprintf(who, sizeof who, "the feed socket of executor %d", executor_id);
    int64_t deadline = tfos__now_ms() + timeout_ms;
    tfos__link *k = NULL;
    int rc;
    *in_fd = *out_fd = -1;
    for (;;) {
        rc = tfos__link_dial(&k, addr, who, deadline, 0, 1000, err, errlen);
        if (rc == 0)
            break;
        int e = errno;
        int refused = rc == TFOS_ESYS && (e == ECONNREFUSED || e == ENOENT);
        if (stop && *stop) /* the run is ending: its agents are going, not starting */
            return tfos__errf(err, errlen, TFOS_ESTOPPED, "the feed was stopped");
        if ((refused || rc == TFOS_ETIMEDOUT) && tfos__now_ms() < deadline) {
            struct timespec ts = {0, 50 * 1000 * 1000}; /* the agent may not listen yet */
            nanosleep(&ts, NULL);
            continue;
        }
        if (refused) {
            snprintf(err, errlen, "no feed socket for executor %d of cluster %s: %s (is the node running on this "
                     "machine?)", executor_id, cluster_id, strerror(e));
            return TFOS_ECLOSED;
        }
        return rc;
    }
    tfos__frame f;
    const char *why = NULL;
    tfos__msg m;
    int uid = tfos__link_peer_uid(k);
    if (uid < 0 || ((uid_t)uid != geteuid() && uid != 0)) {
        snprintf(err, errlen, "the feed socket of executor %d belongs to another user (uid %d)", executor_id, uid);
        rc = TFOS_EAUTH;
        goto out;
    }
    tfos__link_hello(k, &m, TFOS_MSG_FEED_OPEN, secret);
    rc = tfos__msg_end(&m);
    if (rc == 0)
        rc = tfos__link_send(k, &m, NULL, 0);
    tfos__msg_fini(&m);
    if (rc == 0)
        rc = tfos__link_flush_wait(k, 5000);
    if (rc) {
        snprintf(err, errlen, rc == TFOS_EINVAL ? "no cluster secret to authenticate with"
                                                : "feed socket of executor %d: %s", executor_id, tfos_strerror(rc));
        goto out;
    }
    rc = tfos__link_wait_frame(k, 5000, &f, &why);
    if (rc == 0 && f.type == TFOS_MSG_ERROR) {
        long long code = TFOS_EPROTO;
        tfos__kv_int(f.meta, f.meta_len, "code", -100, 0, &code);
        rc = code == TFOS_EAUTH ? TFOS_EAUTH : TFOS_EPROTO;
        char text[300] = "(no message)";
        tfos__kv_str(f.meta, f.meta_len, "message", text, sizeof text);
        if (rc == TFOS_EAUTH)
            snprintf(err, errlen, "executor %d refused the feed (wrong cluster secret?)", executor_id);
        else
            snprintf(err, errlen, "executor %d refused the feed: %s", executor_id, text);
        goto out;
    }
    if (rc || f.type != TFOS_MSG_FEED_OK) {
        snprintf(err, errlen, "feed socket of executor %d: %s", executor_id,
                 rc ? (why ? why : tfos_strerror(rc)) : "unexpected message");
        rc = rc ? rc : TFOS_EPROTO;
        goto out;
    }
    *in_fd = tfos__link_take_fd(k);
    *out_fd = tfos__link_take_fd(k);
    if (*in_fd < 0 || *out_fd < 0) {
        snprintf(err, errlen, "feed socket of executor %d: no ring fds came with its answer", executor_id);
        rc = TFOS_EPROTO;
        goto out;
    }
    if (node && tfos__kv_str(f.meta, f.meta_len, "node", node, nodelen))
        snprintf(node, nodelen, "executor %d", executor_id);
out:
    if (rc) {
        if (*in_fd >= 0)
            close(*in_fd);
        if (*out_fd >= 0)
            close(*out_fd);
        *in_fd = *out_fd = -1;
    }
    tfos__link_close(k);
    return rc;
}
