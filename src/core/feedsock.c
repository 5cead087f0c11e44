/* feedsock.c: the feed socket handshake on both sides. */
#include "core/feedsock.h"

#include "core/auth.h"
#include "core/ring.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
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

int tfos__feed_serve_one(int lfd, const char *secret, const char *node, int in_fd, int out_fd, int timeout_ms)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : TFOS_ESYS;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
        close(fd);
        return TFOS_EAUTH;
    }
    tfos__conn c;
    tfos__conn_init(&c, fd, 4096);
    int rc;
    char nonce[33];
    tfos__msg m;
    if ((rc = tfos__random_hex(nonce, 16)))
        goto out;
    tfos__msg_begin(&m, TFOS_MSG_HELLO);
    tfos__msg_add(&m, "nonce", "%s", nonce);
    if ((rc = send_frame(&c, &m, timeout_ms)))
        goto out;
    tfos__frame f;
    const char *why;
    if ((rc = tfos__conn_wait_frame(&c, timeout_ms, &f, &why)))
        goto out;
    char mac[TFOS_MAC_HEX_LEN + 2] = "";
    tfos__kv_str(f.payload, f.len, "mac", mac, sizeof mac);
    if (f.type != TFOS_MSG_FEED_OPEN || tfos__auth_check(secret, nonce, mac)) {
        rc = TFOS_EAUTH;
        tfos__msg_begin(&m, TFOS_MSG_ERROR);
        tfos__msg_add(&m, "message", "%s", "authentication failed: wrong cluster secret");
        send_frame(&c, &m, timeout_ms);
        goto out;
    }
    /* fds first, then FEED_OK: the producer reads them with recvmsg before
     * it buffers anything else, so no ancillary data is lost to a plain read */
    if ((rc = tfos__ring_send_fd(fd, in_fd)) || (rc = tfos__ring_send_fd(fd, out_fd)))
        goto out;
    tfos__msg_begin(&m, TFOS_MSG_FEED_OK);
    tfos__msg_add(&m, "node", "%s", node);
    rc = send_frame(&c, &m, timeout_ms);
out:
    tfos__conn_fini(&c);
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
