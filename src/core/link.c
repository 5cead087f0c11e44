/* link.c: one authenticated connection (see link.h): the two transports,
 * buffering, the hello, listeners with their bound on peers that have not
 * authenticated, and the blocking helpers of small clients.
 *
 * Input: one buffer per link holding [in_off, in_len) unread bytes. It
 * grows to what the frame being read needs (its header says), at most the
 * link's limit for that frame's kind, so a header over the limit is refused
 * before its payload is read; before authentication that limit is
 * TFOS_LINK_PREAUTH_MAX. Frames are parsed in place and handed out as views
 * of the buffer.
 *
 * Output: frames go straight to the socket while nothing waits before them;
 * what it does not take is copied to the output buffer and written when
 * the loop says the socket has room. Descriptors ride on one byte of the
 * output (out_fds_at), written by a sendmsg of their own.
 *
 * Freeing: a link closed while one of its own callbacks runs (depth > 0) is
 * freed when that callback returns, so callbacks may close anything. */
#include "core/link.h"

#include "core/auth.h"
#include "core/log.h"
#include "core/spec.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64 * 1024)          /* what one read asks for at least */
#define READ_BUDGET (4u << 20)     /* bytes read per event before others get a turn */
#define MAX_IN_FDS 16

/* ---- transports ------------------------------------------------------------ */

static ssize_t sys_read(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds, int with_fds)
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(sizeof(int) * TFOS_LINK_MAX_FDS)];
    } ctl;
    struct iovec iov = {buf, len};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (with_fds) {
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
    }
    ssize_t r;
    do
        r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (with_fds && r >= 0) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < n; i++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
                if (*nfds < maxfds)
                    fds[(*nfds)++] = got;
                else
                    close(got);
            }
        }
    }
    if (r > 0)
        return r;
    if (r == 0)
        return TFOS_ECLOSED;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return TFOS_EAGAIN;
    if (errno == ECONNRESET || errno == EPIPE)
        return TFOS_ECLOSED;
    return TFOS_ESYS;
}

static ssize_t sys_write(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds)
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(sizeof(int) * TFOS_LINK_MAX_FDS)];
    } ctl;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = (struct iovec *)iov;
    m.msg_iovlen = (size_t)iovcnt;
    if (nfds > 0) {
        memset(&ctl, 0, sizeof ctl);
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t w;
    do
        w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w > 0)
        return w;
    if (w == 0 || errno == EAGAIN || errno == EWOULDBLOCK)
        return TFOS_EAGAIN;
    if (errno == EPIPE || errno == ECONNRESET)
        return TFOS_ECLOSED;
    return TFOS_ESYS;
}

static int tcp_listen(const char *addr, int backlog, int *fd, char *bound, size_t boundlen)
{
    char host[TFOS_HOST_MAX];
    int port, got;
    if (tfos__parse_hostport(addr, host, sizeof host, &port))
        return TFOS_EINVAL;
    int rc = tfos__tcp_listen(host, port, backlog, fd, &got);
    if (rc == 0)
        tfos__format_hostport(bound, boundlen, host, got);
    return rc;
}

static int tcp_accept(int lfd, int *fd, char *name, size_t namelen, int *uid)
{
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ? TFOS_EAGAIN
                                                                                                : TFOS_ESYS;
    tfos__peer_name(s, name, namelen);
    *fd = s;
    *uid = -1;
    return 0;
}

static int tcp_dial(const char *addr, int timeout_ms, int *fd)
{
    char host[TFOS_HOST_MAX];
    int port;
    if (tfos__parse_hostport(addr, host, sizeof host, &port))
        return TFOS_EINVAL;
    return tfos__tcp_connect(host, port, timeout_ms, fd);
}

static ssize_t tcp_read(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds)
{
    return sys_read(fd, buf, len, fds, nfds, maxfds, 0);
}

static ssize_t tcp_write(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds)
{
    (void)fds;
    if (nfds > 0)
        return TFOS_EINVAL;
    return sys_write(fd, iov, iovcnt, NULL, 0);
}

const tfos__transport tfos__transport_tcp = {"tcp", tcp_listen, tcp_accept, tcp_dial, tcp_read, tcp_write};

/* "@name" as an abstract socket address: sun_path[0] = 0, then the name
 * (not NUL-terminated; no file, no path length to outgrow). */
static int unix_addr(const char *addr, struct sockaddr_un *sa, socklen_t *len)
{
    size_t n = addr && addr[0] == '@' ? strlen(addr + 1) : 0;
    if (!n || n > sizeof sa->sun_path - 1)
        return TFOS_EINVAL;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, addr + 1, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return 0;
}

static int unix_listen(const char *addr, int backlog, int *fd_out, char *bound, size_t boundlen)
{
    struct sockaddr_un sa;
    socklen_t sl;
    if (unix_addr(addr, &sa, &sl))
        return TFOS_EINVAL;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return TFOS_ESYS;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return TFOS_ESYS;
    }
    snprintf(bound, boundlen, "%s", addr);
    *fd_out = fd;
    return 0;
}

static int unix_accept(int lfd, int *fd, char *name, size_t namelen, int *uid)
{
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ? TFOS_EAGAIN
                                                                                                : TFOS_ESYS;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
        *uid = (int)cred.uid;
        snprintf(name, namelen, "pid %d uid %d", (int)cred.pid, (int)cred.uid);
    } else {
        *uid = -1;
        snprintf(name, namelen, "a local peer");
    }
    *fd = s;
    return 0;
}

static int unix_dial(const char *addr, int timeout_ms, int *fd_out)
{
    struct sockaddr_un sa;
    socklen_t sl;
    if (unix_addr(addr, &sa, &sl))
        return TFOS_EINVAL;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return TFOS_ESYS;
    /* a local connect is taken or refused at once, but for a full backlog
     * (EAGAIN): then it is tried again, within the bound */
    int64_t deadline = tfos__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sl) == 0) {
            *fd_out = fd;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN || tfos__now_ms() >= deadline)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int e = errno;
    close(fd);
    errno = e;
    return e == EAGAIN ? TFOS_ETIMEDOUT : TFOS_ESYS;
}

static ssize_t unix_read(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds)
{
    return sys_read(fd, buf, len, fds, nfds, maxfds, 1);
}

const tfos__transport tfos__transport_unix = {"unix", unix_listen, unix_accept, unix_dial, unix_read, sys_write};

const tfos__transport *tfos__transport_of(const char *addr)
{
    return addr && addr[0] == '@' ? &tfos__transport_unix : &tfos__transport_tcp;
}

/* ---- links ----------------------------------------------------------------- */

struct tfos__link {
    const tfos__transport *tr;
    int fd;
    int uid;                  /* the peer's, -1: unknown */
    char name[64];
    int accepted;             /* we greeted it (the accepting side) */
    int authed;               /* accepted: its first frame passed tfos__link_auth; else always */
    int finishing;            /* close once the output is written */
    int closed;               /* socket closed, off the loop; freed at depth 0 */
    int owner_closed;         /* tfos__link_close was called */
    int depth;                /* this link's callbacks running */
    char nonce[40];           /* the hello's: sent (accepted) or received (dialed) */
    uint32_t max_data;        /* data frames taken (0: none) */
    size_t max_out;
    uint32_t auth_max_data;   /* accepted: the limits once authenticated */
    size_t auth_max_out;
    /* input */
    uint8_t *in;
    size_t in_off, in_len, in_cap;
    size_t frame_used;        /* blocking use: the frame handed out, consumed on the next call */
    int in_fds[MAX_IN_FDS];
    int in_nfds;
    /* output */
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    int out_fds[TFOS_LINK_MAX_FDS];
    int out_nfds;
    size_t out_fds_at;        /* the byte of out they ride on */
    /* on a loop */
    tfos__loop *loop;
    tfos__link_cb cb;
    void *user;
    void *data;
    int events;               /* as watched; 0: not watched */
    /* waiting to authenticate on a listener */
    tfos__listener *ls;
    tfos__link *prev, *next;
    int64_t since;
    char why[200];
};

struct tfos__listener {
    tfos__loop *loop;
    const tfos__transport *tr;
    int fd;
    char address[TFOS_HOST_MAX + 16];
    tfos__listen_opts o;
    tfos__link *head, *tail; /* waiting to authenticate, oldest first (= earliest deadline) */
    int npending;
    int paused;               /* not accepting: every place is held by a peer still in its grace */
    int closing;
    tfos__timer timer;
};

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static tfos__link *link_new(int fd, const tfos__transport *tr, const char *name, int uid)
{
    tfos__link *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->fd = fd;
    k->tr = tr;
    k->uid = uid;
    k->authed = 1;
    k->max_out = TFOS_LINK_MAX_OUT;
    snprintf(k->name, sizeof k->name, "%s", name);
    return k;
}

static void link_free(tfos__link *k)
{
    for (int i = 0; i < k->in_nfds; i++)
        close(k->in_fds[i]);
    free(k->in);
    free(k->out);
    free(k);
}

static void unlist(tfos__link *k);
static void ls_schedule(tfos__listener *ls);

/* Off the loop, off the listener, socket closed. */
static void shut(tfos__link *k)
{
    if (k->closed)
        return;
    k->closed = 1;
    if (k->loop && k->events)
        tfos__loop_unwatch(k->loop, k->fd);
    k->events = 0;
    tfos__listener *ls = k->ls;
    unlist(k);
    if (ls)
        ls_schedule(ls);
    close(k->fd);
    k->fd = -1;
}

/* The link ends on its own: tell the owner, then free it (now, or when its
 * running callback returns). */
static void end(tfos__link *k, int rc, const char *why)
{
    if (k->closed)
        return;
    shut(k);
    if (!k->owner_closed && k->cb.on_close) {
        k->depth++;
        k->cb.on_close(k, rc, why, k->user);
        k->depth--;
    }
    if (k->depth == 0)
        link_free(k);
}

void tfos__link_close(tfos__link *k)
{
    if (!k || k->owner_closed)
        return;
    k->owner_closed = 1;
    if (k->closed) /* ended already: being told so right now (on_close) */
        return;
    shut(k);
    if (k->depth == 0)
        link_free(k);
}

void tfos__link_set_data(tfos__link *k, void *data)
{
    k->data = data;
}

void *tfos__link_data(const tfos__link *k)
{
    return k->data;
}

const char *tfos__link_name(const tfos__link *k)
{
    return k->name;
}

int tfos__link_fd(const tfos__link *k)
{
    return k->fd;
}

int tfos__link_peer_uid(const tfos__link *k)
{
    return k->uid;
}

int tfos__link_authed(const tfos__link *k)
{
    return k->authed;
}

size_t tfos__link_unsent(const tfos__link *k)
{
    return k->out_len - k->out_off;
}

size_t tfos__link_buffer_size(const tfos__link *k)
{
    return k->in_cap;
}

void tfos__link_set_limits(tfos__link *k, uint32_t max_data, size_t max_out)
{
    k->max_data = max_data;
    k->max_out = max_out ? max_out : TFOS_LINK_MAX_OUT;
}

/* Watch for what the link waits on: input always (a hang-up shows there
 * too), room to write while output waits. */
static void sync_events(tfos__link *k)
{
    if (!k->loop || k->closed)
        return;
    int ev = TFOS_EV_READ | (k->out_len > k->out_off ? TFOS_EV_WRITE : 0);
    if (ev != k->events && tfos__loop_events(k->loop, k->fd, ev) == 0)
        k->events = ev;
}

/* ---- reading ------------------------------------------------------------------ */

static const char *set_why(tfos__link *k, const char *fmt, const char *detail)
{
    snprintf(k->why, sizeof k->why, fmt, detail);
    return k->why;
}

/* The next whole frame in the input buffer, parsed in place: 0 (its size
 * in *used), TFOS_EAGAIN (not whole yet), or the peer's error (k->why says
 * what). Refuses a header over the limit for its kind before its payload
 * has arrived. */
static int parse(tfos__link *k, tfos__frame *f, size_t *used)
{
    const uint8_t *b = k->in + k->in_off;
    size_t have = k->in_len - k->in_off;
    const char *w = NULL;
    int rc = tfos__wire_header(b, have, UINT32_MAX, f, &w);
    if (rc == TFOS_EAGAIN)
        return rc;
    if (rc) {
        set_why(k, "malformed frame: %s", w ? w : "bad header");
        return rc;
    }
    int data = tfos__wire_is_data(f->type);
    uint32_t limit = !k->authed ? TFOS_LINK_PREAUTH_MAX : data ? k->max_data : TFOS_WIRE_MAX_PAYLOAD;
    if (data && (!k->authed || !k->max_data)) {
        set_why(k, "malformed frame: %s", !k->authed ? "a data frame before authenticating"
                                                      : "a data frame where only control frames go");
        return TFOS_EPROTO;
    }
    if (f->len > limit) {
        snprintf(k->why, sizeof k->why, "oversized frame: frame larger than the limit (%u bytes, at most %u%s)",
                 f->len, limit, k->authed ? "" : " before authenticating");
        return TFOS_ETOOBIG;
    }
    if (have < TFOS_WIRE_HEADER + (size_t)f->len)
        return TFOS_EAGAIN;
    if ((rc = tfos__wire_payload(f, &w))) {
        set_why(k, "malformed frame: %s", w ? w : "bad payload");
        return rc;
    }
    *used = TFOS_WIRE_HEADER + (size_t)f->len;
    return 0;
}

/* One read into the input buffer, grown to what the frame being read needs
 * (a header's worth while none is known). The bytes read (> 0),
 * TFOS_EAGAIN, TFOS_ECLOSED, TFOS_ESYS, TFOS_ENOMEM. The buffered header,
 * if any, has been parsed (and so is within the limits). */
static ssize_t fill(tfos__link *k)
{
    size_t have = k->in_len - k->in_off;
    size_t need = TFOS_WIRE_HEADER;
    if (have >= TFOS_WIRE_HEADER)
        need += be32(k->in + k->in_off + 8);
    size_t want = need > CHUNK ? need : CHUNK;
    if (!k->authed && want > TFOS_WIRE_HEADER + TFOS_LINK_PREAUTH_MAX)
        want = TFOS_WIRE_HEADER + TFOS_LINK_PREAUTH_MAX;
    if (k->in_off && (k->in_cap - k->in_off < want || k->in_len == k->in_cap)) {
        memmove(k->in, k->in + k->in_off, have);
        k->in_off = 0;
        k->in_len = have;
    }
    if (k->in_cap - k->in_off < want) {
        uint8_t *b = realloc(k->in, k->in_off + want);
        if (!b)
            return TFOS_ENOMEM;
        k->in = b;
        k->in_cap = k->in_off + want;
    }
    if (k->in_len == k->in_cap)
        return TFOS_EAGAIN; /* a whole frame waits: parse it first */
    int nfds = k->in_nfds;
    ssize_t r = k->tr->read(k->fd, k->in + k->in_len, k->in_cap - k->in_len, k->in_fds, &nfds, MAX_IN_FDS);
    k->in_nfds = nfds;
    if (r > 0)
        k->in_len += (size_t)r;
    return r;
}

int tfos__link_take_fd(tfos__link *k)
{
    if (!k->in_nfds)
        return -1;
    int fd = k->in_fds[0];
    memmove(k->in_fds, k->in_fds + 1, sizeof(int) * (size_t)--k->in_nfds);
    return fd;
}

/* Hand the whole frames buffered to the owner, in order. */
static void dispatch(tfos__link *k)
{
    while (!k->closed) {
        if (k->finishing) { /* frames after the last word are not read */
            k->in_off = k->in_len = 0;
            return;
        }
        tfos__frame f;
        size_t used;
        int rc = parse(k, &f, &used);
        if (rc == TFOS_EAGAIN)
            return;
        if (rc) {
            end(k, rc, k->why);
            return;
        }
        int first = !k->authed;
        k->cb.on_frame(k, &f, k->user);
        if (k->closed)
            return;
        k->in_off += used;
        if (k->in_off == k->in_len || k->finishing)
            k->in_off = k->in_len = 0;
        if (first && !k->authed && !k->finishing) {
            end(k, TFOS_EAUTH, "its first frame was not an accepted hello");
            return;
        }
    }
}

/* ---- writing ---------------------------------------------------------------- */

/* Write what the socket takes of the output. 0 (bytes may be left),
 * TFOS_ECLOSED, TFOS_ESYS. */
static int flush(tfos__link *k)
{
    while (k->out_off < k->out_len) {
        size_t stop = k->out_len;
        const int *fds = NULL;
        int nfds = 0;
        if (k->out_nfds) {
            if (k->out_off < k->out_fds_at)
                stop = k->out_fds_at; /* up to the byte the descriptors ride on */
            else {
                fds = k->out_fds;
                nfds = k->out_nfds;
            }
        }
        struct iovec iov = {k->out + k->out_off, stop - k->out_off};
        ssize_t w = k->tr->write(k->fd, &iov, 1, fds, nfds);
        if (w == TFOS_EAGAIN)
            break;
        if (w < 0)
            return (int)w;
        if (nfds)
            k->out_nfds = 0;
        k->out_off += (size_t)w;
    }
    if (k->out_off == k->out_len)
        k->out_off = k->out_len = 0;
    return 0;
}

/* Copy bytes to the end of the output buffer. */
static int out_append(tfos__link *k, const void *p, size_t n)
{
    if (!n)
        return 0;
    if (k->out_len + n > k->out_cap && k->out_off) { /* room at the front: compact */
        memmove(k->out, k->out + k->out_off, k->out_len - k->out_off);
        if (k->out_nfds)
            k->out_fds_at -= k->out_off;
        k->out_len -= k->out_off;
        k->out_off = 0;
    }
    if (k->out_len + n > k->out_cap) {
        size_t cap = k->out_cap ? k->out_cap : 4096;
        while (cap < k->out_len + n)
            cap *= 2;
        uint8_t *b = realloc(k->out, cap);
        if (!b)
            return TFOS_ENOMEM;
        k->out = b;
        k->out_cap = cap;
    }
    memcpy(k->out + k->out_len, p, n);
    k->out_len += n;
    return 0;
}

static int send_frame(tfos__link *k, const tfos__msg *m, const void *body, size_t body_len, const int *fds,
                      int nfds)
{
    if (k->closed)
        return TFOS_ECLOSED;
    if (m->err)
        return m->err;
    if (m->len < TFOS_WIRE_HEADER)
        return TFOS_EINVAL;
    if (nfds && k->out_nfds)
        return TFOS_EAGAIN;
    if (tfos__link_unsent(k) >= k->max_out)
        return TFOS_EFULL;
    size_t total = m->len + body_len, done = 0;
    if (k->out_len == k->out_off) { /* nothing waits before it: straight to the socket */
        struct iovec iov[2] = {{m->buf, m->len}, {(void *)body, body_len}};
        ssize_t w = k->tr->write(k->fd, iov, body_len ? 2 : 1, fds, nfds);
        if (w > 0) {
            done = (size_t)w;
            nfds = 0;
        } else if (w != TFOS_EAGAIN) {
            return (int)w; /* broken: on a loop the hang-up ends it */
        }
    }
    if (nfds) {
        memcpy(k->out_fds, fds, sizeof(int) * (size_t)nfds);
        k->out_nfds = nfds;
        k->out_fds_at = k->out_len;
    }
    int rc = 0;
    if (done < m->len)
        rc = out_append(k, m->buf + done, m->len - done);
    if (rc == 0 && done < total) {
        size_t from = done > m->len ? done - m->len : 0;
        rc = out_append(k, (const char *)body + from, body_len - from);
    }
    sync_events(k);
    return rc;
}

int tfos__link_send(tfos__link *k, const tfos__msg *m, const void *body, size_t body_len)
{
    return send_frame(k, m, body, body_len, NULL, 0);
}

int tfos__link_send_fds(tfos__link *k, const tfos__msg *m, const int *fds, int nfds)
{
    if (nfds < 1 || nfds > TFOS_LINK_MAX_FDS || k->tr != &tfos__transport_unix)
        return TFOS_EINVAL;
    return send_frame(k, m, NULL, 0, fds, nfds);
}

void tfos__link_finish(tfos__link *k)
{
    if (k->closed || k->finishing)
        return;
    k->finishing = 1;
    if (k->depth == 0)
        k->in_off = k->in_len = 0; /* else dispatch drops it once the frame in hand is done */
    if (k->loop && tfos__link_unsent(k) == 0 && k->depth == 0) {
        end(k, 0, NULL);
        return;
    }
    sync_events(k);
}

/* ---- on a loop ---------------------------------------------------------------- */

static void on_io(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    (void)fd;
    tfos__link *k = user;
    k->depth++;
    if (events & TFOS_EV_WRITE) {
        int rc = flush(k);
        if (rc)
            end(k, rc, rc == TFOS_ECLOSED ? NULL : "its connection broke");
    }
    if (!k->closed)
        dispatch(k); /* frames buffered before the link came on the loop */
    if (!k->closed && (events & TFOS_EV_READ)) {
        size_t got = 0;
        for (;;) {
            dispatch(k);
            if (k->closed)
                break;
            ssize_t r = fill(k);
            if (r > 0) {
                got += (size_t)r;
                if (got < READ_BUDGET)
                    continue;
                dispatch(k); /* enough for now: the loop calls again while more waits */
                break;
            }
            if (r == TFOS_EAGAIN) {
                if (k->in_len - k->in_off >= TFOS_WIRE_HEADER && k->in_len == k->in_cap)
                    continue; /* a frame just became whole */
                break;
            }
            dispatch(k); /* what came with the hang-up */
            if (k->closed)
                break;
            if (r != TFOS_ECLOSED)
                end(k, (int)r, r == TFOS_ENOMEM ? "out of memory" : "its connection broke");
            else if (k->in_len > k->in_off)
                end(k, TFOS_ECLOSED, "closed in the middle of a frame (truncated)");
            else
                end(k, TFOS_ECLOSED, k->authed ? NULL : "closed before authenticating");
            break;
        }
    }
    if (!k->closed && k->finishing && tfos__link_unsent(k) == 0)
        end(k, 0, NULL);
    sync_events(k);
    k->depth--;
    if (k->closed && k->depth == 0)
        link_free(k);
}

/* On the loop; a frame already buffered is handed out by the next
 * iteration (the loop reports the socket as readable only if bytes wait
 * there, so the first callback is forced with WRITE interest). */
static int link_watch(tfos__link *k, tfos__loop *loop)
{
    k->loop = loop;
    int ev = TFOS_EV_READ | (k->out_len > k->out_off || k->in_len > k->in_off ? TFOS_EV_WRITE : 0);
    int rc = tfos__loop_watch(loop, k->fd, ev, on_io, k);
    if (rc == 0)
        k->events = ev;
    return rc;
}

int tfos__link_start(tfos__link *k, tfos__loop *loop, const tfos__link_cb *cb, void *user)
{
    k->cb = *cb;
    k->user = user;
    return link_watch(k, loop);
}

/* ---- the hello ----------------------------------------------------------------- */

int tfos__link_auth(tfos__link *k, const tfos__frame *f, const char *key, const char *key_name)
{
    if (!k->accepted || k->authed || k->closed || k->finishing)
        return TFOS_EINVAL;
    int ok;
    if (key) {
        char mac[TFOS_MAC_HEX_LEN + 2] = "";
        tfos__kv_str(f->meta, f->meta_len, "mac", mac, sizeof mac);
        ok = *key && tfos__auth_check(key, k->nonce, mac) == 0;
    } else {
        /* no key for this role: the Unix transport's peer check alone */
        ok = k->tr == &tfos__transport_unix && k->uid >= 0 && ((uid_t)k->uid == geteuid() || k->uid == 0);
    }
    if (!ok) {
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_ERROR);
        tfos__msg_add(&m, "code", "%d", TFOS_EAUTH);
        if (key)
            tfos__msg_add(&m, "message", "authentication failed: wrong %s", key_name ? key_name : "key");
        else
            tfos__msg_add(&m, "message", "%s", "authentication failed: a peer of this machine's user only");
        if (tfos__msg_end(&m) == 0)
            tfos__link_send(k, &m, NULL, 0);
        tfos__msg_fini(&m);
        tfos__link_finish(k);
        return TFOS_EAUTH;
    }
    k->authed = 1;
    k->max_data = k->auth_max_data;
    k->max_out = k->auth_max_out;
    tfos__listener *ls = k->ls;
    unlist(k);
    if (ls)
        ls_schedule(ls);
    return 0;
}

int tfos__link_hello(tfos__link *k, tfos__msg *m, int type, const char *key)
{
    tfos__msg_begin(m, type);
    if (!key)
        return m->err;
    char mac[TFOS_MAC_HEX_LEN + 1];
    int rc = tfos__auth_mac(key, k->nonce, mac);
    if (rc) {
        m->err = rc;
        return rc;
    }
    tfos__msg_add(m, "mac", "%s", mac);
    return m->err;
}

/* ---- listeners ------------------------------------------------------------------- */

static void unlist(tfos__link *k)
{
    tfos__listener *ls = k->ls;
    if (!ls)
        return;
    if (k->prev)
        k->prev->next = k->next;
    else
        ls->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        ls->tail = k->prev;
    k->prev = k->next = NULL;
    k->ls = NULL;
    ls->npending--;
}

static void on_accept(tfos__loop *l, int lfd, int events, void *user);

static void on_deadline(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos__listener *ls = user;
    int64_t now = tfos__now_ms();
    while (ls->head && now - ls->head->since >= ls->o.auth_ms)
        end(ls->head, TFOS_ETIMEDOUT, "did not authenticate in time");
    ls_schedule(ls);
}

/* One timer per listener: its oldest peer's deadline is the earliest, and
 * while accepting is paused, the end of that peer's grace (it may then be
 * evicted to make room). Accepting resumes once a place is free or can be
 * made. */
static void ls_schedule(tfos__listener *ls)
{
    if (ls->closing)
        return;
    int64_t now = tfos__now_ms();
    if (ls->paused && (ls->npending < ls->o.max_pending || !ls->head || now - ls->head->since >= ls->o.grace_ms)) {
        if (tfos__loop_watch(ls->loop, ls->fd, TFOS_EV_READ, on_accept, ls) == 0)
            ls->paused = 0;
    }
    if (!ls->head) {
        tfos__timer_disarm(ls->loop, &ls->timer);
        return;
    }
    int64_t at = ls->head->since + ls->o.auth_ms;
    if (ls->paused && ls->head->since + ls->o.grace_ms < at)
        at = ls->head->since + ls->o.grace_ms;
    tfos__timer_arm(ls->loop, &ls->timer, at, on_deadline, ls);
}

static int greet(tfos__link *k)
{
    int rc = tfos__random_hex(k->nonce, 16);
    if (rc)
        return rc;
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_HELLO);
    tfos__msg_add(&m, "nonce", "%s", k->nonce);
    tfos__msg_add(&m, "protocol", "%d", TFOS_PROTOCOL_VERSION);
    rc = tfos__msg_end(&m);
    if (rc == 0)
        rc = tfos__link_send(k, &m, NULL, 0);
    tfos__msg_fini(&m);
    return rc;
}

static void on_accept(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__listener *ls = user;
    for (int n = 0; n < 256; n++) { /* then the loop's other work; it calls again */
        /* Every place taken: the oldest makes room once its grace is over (a
         * flood of silent connections delays a real peer by a grace per
         * max_pending of them at most); while all are younger, they may be
         * peers in the middle of their handshake (a cluster of hundreds
         * dialing at once), so the next wait in the kernel's backlog and
         * accepting pauses until a place is free or the oldest's grace ends. */
        if (ls->npending >= ls->o.max_pending) {
            if (tfos__now_ms() - ls->head->since < ls->o.grace_ms) {
                tfos__loop_unwatch(l, lfd);
                ls->paused = 1;
                break;
            }
            /* room is made only for a connection that waits: with nobody
             * in the backlog the oldest keeps its place (it may be a real
             * peer whose handshake is slow) */
            struct pollfd waiting = {.fd = lfd, .events = POLLIN};
            if (poll(&waiting, 1, 0) != 1)
                break;
            end(ls->head, TFOS_EFULL, "too many connections waiting to authenticate; dropped the oldest");
        }
        int fd, uid;
        char name[64];
        if (ls->tr->accept(lfd, &fd, name, sizeof name, &uid))
            break;
        tfos__link *k = link_new(fd, ls->tr, name, uid);
        if (!k) {
            close(fd);
            continue;
        }
        k->accepted = 1;
        k->authed = 0;
        k->max_data = 0;
        k->auth_max_data = ls->o.max_data;
        k->auth_max_out = ls->o.max_out;
        k->cb = ls->o.cb;
        k->user = ls->o.user;
        k->loop = l;
        if (ls->o.same_user && !(uid >= 0 && ((uid_t)uid == geteuid() || uid == 0))) {
            end(k, TFOS_EAUTH, "it runs as another user");
            continue;
        }
        if (ls->o.nodelay && ls->tr == &tfos__transport_tcp) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        k->ls = ls;
        k->since = tfos__now_ms();
        k->prev = ls->tail;
        if (ls->tail)
            ls->tail->next = k;
        else
            ls->head = k;
        ls->tail = k;
        ls->npending++;
        if (link_watch(k, l) || greet(k))
            end(k, TFOS_ESYS, "it could not be greeted");
    }
    ls_schedule(ls);
}

int tfos__listener_open(tfos__listener **out, tfos__loop *loop, const tfos__listen_opts *o, char *err, size_t errlen)
{
    tfos__listener *ls = calloc(1, sizeof *ls);
    if (!ls)
        return tfos__errf(err, errlen, TFOS_ENOMEM, "out of memory");
    ls->loop = loop;
    ls->o = *o;
    ls->o.addr = NULL;
    if (ls->o.backlog <= 0)
        ls->o.backlog = 128;
    if (ls->o.max_pending <= 0)
        ls->o.max_pending = 64;
    if (ls->o.auth_ms <= 0)
        ls->o.auth_ms = TFOS_AUTH_TIMEOUT_MS;
    if (ls->o.grace_ms < 0)
        ls->o.grace_ms = 0;
    if (ls->o.grace_ms > ls->o.auth_ms)
        ls->o.grace_ms = ls->o.auth_ms;
    if (!ls->o.max_out)
        ls->o.max_out = TFOS_LINK_MAX_OUT;
    ls->tr = tfos__transport_of(o->addr);
    int rc = ls->tr->listen(o->addr, ls->o.backlog, &ls->fd, ls->address, sizeof ls->address);
    if (rc) {
        int e = errno;
        free(ls);
        return tfos__errf(err, errlen, rc, "cannot listen on %s: %s", o->addr ? o->addr : "(none)",
                          rc == TFOS_ESYS ? strerror(e) : rc == TFOS_EINVAL ? "not @NAME or HOST:PORT"
                                                                             : tfos_strerror(rc));
    }
    if ((rc = tfos__loop_watch(loop, ls->fd, TFOS_EV_READ, on_accept, ls))) {
        close(ls->fd);
        free(ls);
        return tfos__errf(err, errlen, rc, "cannot watch the listener: %s", tfos_strerror(rc));
    }
    *out = ls;
    return 0;
}

const char *tfos__listener_address(const tfos__listener *ls)
{
    return ls->address;
}

void tfos__listener_close(tfos__listener *ls)
{
    if (!ls)
        return;
    ls->closing = 1;
    while (ls->head)
        tfos__link_close(ls->head);
    tfos__timer_disarm(ls->loop, &ls->timer);
    tfos__loop_unwatch(ls->loop, ls->fd);
    close(ls->fd);
    free(ls);
}

/* ---- the dialing side and the blocking helpers ----------------------------------- */

int tfos__link_wrap(tfos__link **out, int fd, const tfos__transport *tr)
{
    if (fd < 0 || !tr)
        return TFOS_EINVAL;
    tfos__set_nonblock(fd);
    char name[64];
    if (tr == &tfos__transport_tcp)
        tfos__peer_name(fd, name, sizeof name);
    else
        snprintf(name, sizeof name, "fd %d", fd);
    int uid = -1;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (tr == &tfos__transport_unix && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
        uid = (int)cred.uid;
    tfos__link *k = link_new(fd, tr, name, uid);
    if (!k)
        return TFOS_ENOMEM;
    *out = k;
    return 0;
}

void tfos__link_consume(tfos__link *k)
{
    if (!k->frame_used)
        return;
    k->in_off += k->frame_used;
    k->frame_used = 0;
    if (k->in_off == k->in_len)
        k->in_off = k->in_len = 0;
}

int tfos__link_wait_frame(tfos__link *k, int timeout_ms, tfos__frame *f, const char **why)
{
    tfos__link_consume(k);
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : tfos__now_ms() + timeout_ms;
    int eof = 0;
    for (;;) {
        size_t used;
        int rc = parse(k, f, &used);
        if (rc == 0) {
            k->frame_used = used;
            return 0;
        }
        if (rc != TFOS_EAGAIN) {
            if (why)
                *why = k->why;
            return rc;
        }
        if (eof)
            return TFOS_ECLOSED;
        ssize_t r = fill(k);
        if (r > 0)
            continue;
        if (r == TFOS_ECLOSED) {
            eof = 1; /* a last frame may have come with the hang-up */
            continue;
        }
        if (r != TFOS_EAGAIN)
            return (int)r;
        if (k->in_len == k->in_cap && k->in_len > k->in_off)
            continue;
        int left = timeout_ms < 0 ? -1 : tfos__ms_left(deadline, -1);
        if (left == 0)
            return TFOS_ETIMEDOUT;
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        if (poll(&p, 1, left) < 0 && errno != EINTR)
            return TFOS_ESYS;
    }
}

int tfos__link_flush_wait(tfos__link *k, int timeout_ms)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    for (;;) {
        int rc = flush(k);
        if (rc || tfos__link_unsent(k) == 0)
            return rc;
        int left = tfos__ms_left(deadline, -1);
        if (left == 0)
            return TFOS_ETIMEDOUT;
        struct pollfd p = {.fd = k->fd, .events = POLLOUT};
        if (poll(&p, 1, left) < 0 && errno != EINTR)
            return TFOS_ESYS;
    }
}

int tfos__link_dial(tfos__link **out, const char *addr, const char *who, int64_t deadline, int retry,
                    int greet_extra_ms, char *err, size_t errlen)
{
    *out = NULL;
    if (!addr || !*addr)
        return tfos__errf(err, errlen, TFOS_EINVAL, "no address to connect to");
    if (!who)
        who = addr;
    const tfos__transport *tr = tfos__transport_of(addr);
    int fd = -1, rc;
    for (;;) {
        rc = tr->dial(addr, tfos__ms_left(deadline, retry ? 5000 : -1), &fd);
        if (rc == 0)
            break;
        if (rc == TFOS_EINVAL)
            return tfos__errf(err, errlen, rc, "bad address '%s' (want HOST:PORT or @NAME)", addr);
        if (!retry || tfos__now_ms() >= deadline) {
            int e = errno;
            tfos__errf(err, errlen, rc, "cannot reach %s: %s", who, rc == TFOS_ESYS ? strerror(e) : tfos_strerror(rc));
            errno = e;
            return rc;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    tfos__link *k;
    if ((rc = tfos__link_wrap(&k, fd, tr))) {
        close(fd);
        return tfos__errf(err, errlen, rc, "out of memory");
    }
    snprintf(k->name, sizeof k->name, "%s", addr);
    tfos__frame f;
    const char *why = NULL;
    rc = tfos__link_wait_frame(k, tfos__ms_left(deadline, -1) + greet_extra_ms, &f, &why);
    if (rc || f.type != TFOS_MSG_HELLO || tfos__kv_str(f.meta, f.meta_len, "nonce", k->nonce, sizeof k->nonce)) {
        if (rc == 0)
            rc = TFOS_EPROTO;
        tfos__errf(err, errlen, rc, "no greeting from %s: %s", who,
                   why ? why : rc != TFOS_EPROTO ? tfos_strerror(rc) : "unexpected message");
        tfos__link_close(k);
        return rc;
    }
    tfos__link_consume(k);
    *out = k;
    return 0;
}
