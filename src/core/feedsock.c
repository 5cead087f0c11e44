/* feedsock.c: the feed socket handshake on both sides. */
#include "core/feedsock.h"
#include <stdlib.h>
#include "core/log.h"
#include "core/loop.h"

#include "core/auth.h"
#include "core/ring.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static socklen_t feed_addr(const char *cluster_id, int executor_id, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] == 0, name not NUL-terminated */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "tfos-feed-%s-%d", cluster_id, executor_id);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1)
        n = (int)sizeof sa->sun_path - 2;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int tfos__feed_listen(const char *cluster_id, int executor_id, int *fd_out)
{
    struct sockaddr_un sa;
    socklen_t sl = feed_addr(cluster_id, executor_id, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return TFOS_ESYS;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return TFOS_ESYS;
    }
    *fd_out = fd;
    return 0;
}

/* ---- the agent's side: a handshake per producer, on the agent's loop ---- */

#define PENDING_MAX 16          /* producers in their handshake at once */
#define HANDSHAKE_MS 2000       /* a producer must finish its handshake this fast */

typedef struct pending {
    tfos__conn conn; /* fd -1: free slot */
    char nonce[33];
    int64_t since;
} pending;

struct tfos__feed_server {
    tfos__loop *loop;
    int lfd, in_fd, out_fd;
    char *secret, *node;
    pending p[PENDING_MAX];
    tfos__timer timer;
    char who[64];           /* "agent worker:0" */
    tfos__warn_limit warn;  /* refusals: a few per 10 s, the rest summed up */
};

static void drop_pending(tfos__feed_server *s, pending *p, const char *why)
{
    if (why)
        tfos__warn_limited(&s->warn, "refused a feed producer: %s", why);
    tfos__loop_unwatch(s->loop, p->conn.fd);
    tfos__conn_fini(&p->conn);
    p->conn.fd = -1;
}

/* Frames here are a few dozen bytes on a fresh unix socket: they go out at
 * once or the producer is not worth waiting for. */
static int send_now(pending *p, tfos__msg *m)
{
    int rc = tfos__msg_end(m);
    if (rc == 0)
        rc = tfos__conn_send(&p->conn, m);
    if (rc == 0 && p->conn.out_len)
        rc = tfos__conn_flush(&p->conn);
    if (rc == 0 && p->conn.out_len)
        rc = TFOS_EAGAIN;
    tfos__msg_fini(m);
    return rc;
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user);

static void schedule(tfos__feed_server *s)
{
    int64_t at = INT64_MAX;
    for (int i = 0; i < PENDING_MAX; i++)
        if (s->p[i].conn.fd >= 0 && s->p[i].since + HANDSHAKE_MS < at)
            at = s->p[i].since + HANDSHAKE_MS;
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->timer);
    else
        tfos__timer_arm(s->loop, &s->timer, at, on_timer, s);
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos__feed_server *s = user;
    int64_t now = tfos__now_ms();
    for (int i = 0; i < PENDING_MAX; i++)
        if (s->p[i].conn.fd >= 0 && now - s->p[i].since >= HANDSHAKE_MS)
            drop_pending(s, &s->p[i], "no handshake in time");
    schedule(s);
}

static void on_producer(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    (void)events;
    tfos__feed_server *s = user;
    pending *p = NULL;
    for (int i = 0; i < PENDING_MAX && !p; i++)
        if (s->p[i].conn.fd == fd)
            p = &s->p[i];
    if (!p)
        return;
    int rc = tfos__conn_read(&p->conn);
    tfos__frame f;
    const char *why = NULL;
    int fr = tfos__conn_frame(&p->conn, &f, &why);
    if (fr == TFOS_EAGAIN) {
        if (rc)
            drop_pending(s, p, "hung up in its handshake");
        return;
    }
    if (fr) {
        drop_pending(s, p, why ? why : "malformed frame");
        return;
    }
    char mac[TFOS_MAC_HEX_LEN + 2] = "";
    tfos__kv_str(f.payload, f.len, "mac", mac, sizeof mac);
    tfos__msg m;
    if (f.type != TFOS_MSG_FEED_OPEN || tfos__auth_check(s->secret, p->nonce, mac)) {
        tfos__conn_consume(&p->conn);
        tfos__msg_begin(&m, TFOS_MSG_ERROR);
        tfos__msg_add(&m, "code", "%d", TFOS_EAUTH);
        tfos__msg_add(&m, "message", "%s", "authentication failed: wrong cluster secret");
        send_now(p, &m);
        drop_pending(s, p, "it does not know the cluster secret");
        return;
    }
    tfos__conn_consume(&p->conn);
    /* fds first, then FEED_OK: the producer reads them with recvmsg before
     * it buffers anything else, so no ancillary data is lost to a plain read */
    rc = tfos__ring_send_fd(fd, s->in_fd);
    if (rc == 0)
        rc = tfos__ring_send_fd(fd, s->out_fd);
    if (rc == 0) {
        tfos__msg_begin(&m, TFOS_MSG_FEED_OK);
        tfos__msg_add(&m, "node", "%s", s->node);
        rc = send_now(p, &m);
    }
    drop_pending(s, p, rc ? "the rings could not be sent" : NULL);
    schedule(s);
}

static void on_accept(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__feed_server *s = user;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
            close(fd);
            tfos__warn_limited(&s->warn, "refused a feed producer: %s", "it runs as another user");
            continue;
        }
        /* a free slot, or the oldest handshake makes room: a flood of silent
         * connections can delay a real producer by one handshake at most,
         * never block the agent */
        pending *p = NULL, *oldest = NULL;
        for (int i = 0; i < PENDING_MAX && !p; i++) {
            if (s->p[i].conn.fd < 0)
                p = &s->p[i];
            else if (!oldest || s->p[i].since < oldest->since)
                oldest = &s->p[i];
        }
        if (!p) {
            drop_pending(s, oldest, "too many producers in their handshake; dropped the oldest");
            p = oldest;
        }
        tfos__conn_init(&p->conn, fd, 4096);
        p->since = tfos__now_ms();
        tfos__msg m;
        if (tfos__random_hex(p->nonce, 16) || tfos__loop_watch(l, fd, TFOS_EV_READ, on_producer, s)) {
            tfos__conn_fini(&p->conn);
            p->conn.fd = -1;
            continue;
        }
        tfos__msg_begin(&m, TFOS_MSG_HELLO);
        tfos__msg_add(&m, "nonce", "%s", p->nonce);
        if (send_now(p, &m))
            drop_pending(s, p, "it does not read its greeting");
    }
    schedule(s);
}

int tfos__feed_server_open(tfos__feed_server **out, tfos__loop *loop, int lfd, const char *secret, const char *node,
                           int in_fd, int out_fd)
{
    tfos__feed_server *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    for (int i = 0; i < PENDING_MAX; i++)
        s->p[i].conn.fd = -1;
    s->loop = loop;
    s->lfd = lfd;
    s->in_fd = in_fd;
    s->out_fd = out_fd;
    s->secret = strdup(secret);
    s->node = strdup(node);
    snprintf(s->who, sizeof s->who, "agent %s", node);
    s->warn = (tfos__warn_limit){.who = s->who, .per_window = 3, .window_ms = 10000};
    int rc = s->secret && s->node ? tfos__loop_watch(loop, lfd, TFOS_EV_READ, on_accept, s) : TFOS_ENOMEM;
    if (rc) {
        free(s->secret);
        free(s->node);
        free(s);
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
    for (int i = 0; i < PENDING_MAX; i++)
        if (s->p[i].conn.fd >= 0)
            drop_pending(s, &s->p[i], NULL);
    tfos__timer_disarm(s->loop, &s->timer);
    tfos__loop_unwatch(s->loop, s->lfd);
    free(s->secret);
    free(s->node);
    free(s);
}

/* A frame written out with a bound (the producer's blocking side). */
static int send_frame(tfos__conn *c, tfos__msg *m, int timeout_ms)
{
    int rc = tfos__msg_end(m);
    if (rc == 0)
        rc = tfos__conn_send(c, m);
    if (rc == 0)
        rc = tfos__conn_flush_wait(c, timeout_ms);
    tfos__msg_fini(m);
    return rc;
}

int tfos__feed_connect(const char *cluster_id, int executor_id, const char *secret, int timeout_ms,
                       int *in_fd, int *out_fd, char *node, size_t nodelen, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    socklen_t sl = feed_addr(cluster_id, executor_id, &sa);
    int64_t deadline = tfos__now_ms() + timeout_ms;
    int fd = -1, rc;
    *in_fd = *out_fd = -1;
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            return TFOS_ESYS;
        }
        if (connect(fd, (struct sockaddr *)&sa, sl) == 0)
            break;
        int e = errno;
        close(fd);
        fd = -1;
        if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN) || tfos__now_ms() >= deadline) {
            snprintf(err, errlen, "no feed socket for executor %d of cluster %s: %s (is the node running on this "
                     "machine?)", executor_id, cluster_id, strerror(e));
            return e == ECONNREFUSED || e == ENOENT ? TFOS_ECLOSED : TFOS_ESYS;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    tfos__set_nonblock(fd);
    tfos__conn c;
    tfos__conn_init(&c, fd, 4096);
    tfos__frame f;
    const char *why = NULL;
    char nonce[80], mac[TFOS_MAC_HEX_LEN + 1];
    tfos__msg m;
    rc = tfos__conn_wait_frame(&c, tfos__ms_left(deadline, -1) + 1000, &f, &why);
    if (rc || f.type != TFOS_MSG_HELLO || tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce)) {
        snprintf(err, errlen, "no greeting on the feed socket of executor %d: %s", executor_id,
                 rc ? (why ? why : tfos_strerror(rc)) : "unexpected message");
        rc = rc ? rc : TFOS_EPROTO;
        goto out;
    }
    tfos__conn_consume(&c);
    if ((rc = tfos__auth_mac(secret, nonce, mac))) {
        snprintf(err, errlen, "no cluster secret to authenticate with");
        goto out;
    }
    tfos__msg_begin(&m, TFOS_MSG_FEED_OPEN);
    tfos__msg_add(&m, "mac", "%s", mac);
    if ((rc = send_frame(&c, &m, 5000))) {
        snprintf(err, errlen, "feed socket of executor %d: %s", executor_id, tfos_strerror(rc));
        goto out;
    }
    if ((rc = tfos__ring_recv_fd(fd, in_fd, 5000)) || (rc = tfos__ring_recv_fd(fd, out_fd, 5000))) {
        if (rc == TFOS_EPROTO || rc == TFOS_ECLOSED)
            snprintf(err, errlen, "executor %d refused the feed (wrong cluster secret?)", executor_id);
        else
            snprintf(err, errlen, "feed socket of executor %d: no ring fds: %s", executor_id, tfos_strerror(rc));
        goto out;
    }
    rc = tfos__conn_wait_frame(&c, 5000, &f, &why);
    if (rc || f.type != TFOS_MSG_FEED_OK) {
        snprintf(err, errlen, "feed socket of executor %d: %s", executor_id,
                 rc ? (why ? why : tfos_strerror(rc)) : "unexpected message");
        rc = rc ? rc : TFOS_EPROTO;
        goto out;
    }
    if (node && tfos__kv_str(f.payload, f.len, "node", node, nodelen))
        snprintf(node, nodelen, "executor %d", executor_id);
out:
    if (rc) {
        if (*in_fd >= 0)
            close(*in_fd);
        if (*out_fd >= 0)
            close(*out_fd);
        *in_fd = *out_fd = -1;
    }
    tfos__conn_fini(&c);
    return rc;
}
