/* link.h: one authenticated connection, for every connection tfos makes.
 *
 * A link carries core/wire.h frames over a non-blocking stream socket: it
 * owns the buffering, partial reads and writes, the bound on unsent output,
 * the limits on what a peer may send, descriptors passed beside the bytes,
 * and the hello. The coordinator and the agents (roles/), the coordinator's
 * small clients (roles/client.c), the feed socket (core/feedsock.c), tfos
 * serve's model servers and local clients (src/serve/link.c) and Python
 * (tfos._tfos.Link) all speak through it (libuv's stream.c, in small).
 *
 * The hello, the one place core/auth.h's promise is kept:
 *   accepting side -> HELLO  nonce=<32 hex: 16 fresh random bytes>
 *                            protocol=<TFOS_PROTOCOL_VERSION>
 *   dialing side   -> its first frame: a control frame whose type names its
 *                     role (REGISTER, QUERY, ABORT, FEED_OPEN, SERVE_JOIN,
 *                     SERVE_CLIENT) and whose first line is
 *                     mac=<hex HMAC-SHA256(key, nonce)> (tfos__link_hello);
 *                     the key is the role's (the cluster secret; a local
 *                     serve client's HTTP token). A role without a key (a
 *                     local serve client when there is no token) sends no
 *                     mac: the Unix socket's peer uid is its check.
 * The accepting owner checks the first frame with tfos__link_auth. Until it
 * has, a peer may send exactly one control frame of at most
 * TFOS_LINK_PREAUTH_MAX bytes, within the listener's deadline
 * (TFOS_AUTH_TIMEOUT_MS): a larger frame is refused from its header, before
 * its payload is read; a data frame, silence past the deadline, or a first
 * frame the owner does not authenticate is dropped. A peer that has not
 * authenticated costs one buffer of at most TFOS_LINK_PREAUTH_MAX + 12 bytes,
 * one of a bounded number of slots and a few seconds. When every slot is
 * taken a newcomer evicts the oldest; a listener with a grace (the
 * coordinator's, TFOS_AUTH_GRACE_MS) evicts only once that one has had its
 * grace to answer: a peer in the middle of its handshake is never dropped
 * for another, so a cluster of any size forms (the rest wait in the
 * kernel's backlog), and a flood of silent connections delays a real peer
 * by one grace per slot-full of them. The secret never crosses the wire; the dialing side does not
 * authenticate the accepting one (it only ever sends a MAC).
 *
 * Transports sit behind an ops table (Redis's ConnectionType, nng's
 * transports): TCP ("host:port") and Unix abstract sockets ("@name"), where
 * the peer's uid is known (SO_PEERCRED) and descriptors travel with a
 * frame's first byte (SCM_RIGHTS). Nothing above this file knows which one
 * a link uses.
 *
 * Two ways to use a link:
 *   on a loop (tfos__listener_open on the accepting side; tfos__link_start
 *     for a dialed link): callbacks deliver frames and the link's end;
 *     nothing ever blocks;
 *   blocking, for small clients (tfos__link_dial, tfos__link_wait_frame,
 *     tfos__link_flush_wait): every wait has a bound.
 * A link and its callbacks belong to the thread that runs its loop. */
#ifndef TFOS_CORE_LINK_H
#define TFOS_CORE_LINK_H
#include "core/loop.h"
#include "core/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* What a peer may send before it has authenticated: one control frame of
 * at most this many payload bytes. */
#define TFOS_LINK_PREAUTH_MAX TFOS_WIRE_MAX_PAYLOAD
/* Default bound on a link's unsent output. */
#define TFOS_LINK_MAX_OUT (16u << 20)
/* Descriptors one frame may carry (Unix). */
#define TFOS_LINK_MAX_FDS 4

/* ---- transports ---------------------------------------------------------- */

typedef struct tfos__transport {
    const char *name; /* "tcp", "unix" */
    /* Listen at addr ("host:port", port 0: any free one; "@name"). *fd is
     * non-blocking and close-on-exec; `bound` gets what peers dial (the
     * port resolved). Does not block. TFOS_EINVAL (bad address), TFOS_ESYS. */
    int (*listen)(const char *addr, int backlog, int *fd, char *bound, size_t boundlen);
    /* Take one waiting connection off lfd without blocking: a non-blocking,
     * close-on-exec fd, a name for logs ("ip:port", "pid P uid U") and the
     * peer's uid (-1 where the transport cannot tell). TFOS_EAGAIN when
     * none waits, TFOS_ESYS. */
    int (*accept)(int lfd, int *fd, char *name, size_t namelen, int *uid);
    /* Connect to addr, blocking at most timeout_ms; the fd is non-blocking
     * and close-on-exec. TFOS_EINVAL (bad address), TFOS_ETIMEDOUT,
     * TFOS_ESYS (errno: ECONNREFUSED where nobody listens). */
    int (*dial)(const char *addr, int timeout_ms, int *fd);
    /* Read at most len bytes without blocking: the count (> 0), TFOS_EAGAIN,
     * TFOS_ECLOSED (end of stream, reset), TFOS_ESYS. Descriptors that came
     * with them are appended to fds[*nfds..maxfds); any beyond are closed. */
    ssize_t (*read)(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds);
    /* Write what the socket takes of iov without blocking, with nfds
     * descriptors riding on the first byte (only a transport that passes
     * them: else TFOS_EINVAL). The count (> 0), TFOS_EAGAIN, TFOS_ECLOSED,
     * TFOS_ESYS. */
    ssize_t (*write)(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds);
} tfos__transport;

extern const tfos__transport tfos__transport_tcp;
extern const tfos__transport tfos__transport_unix;

/* The transport of an address: "@name" is Unix, anything else TCP. */
const tfos__transport *tfos__transport_of(const char *addr);

/* ---- links ----------------------------------------------------------------- */

typedef struct tfos__link tfos__link;

/* The callbacks of links on a loop. Each may send on, finish or close this
 * link or any other, and open or close listeners. */
typedef struct tfos__link_cb {
    /* A whole frame, valid until the callback returns. On a link that has
     * not authenticated it is the peer's first frame: the callback calls
     * tfos__link_auth (or closes the link); a link still unauthenticated
     * when it returns is dropped. */
    void (*on_frame)(tfos__link *k, const tfos__frame *f, void *user);
    /* The link ended on its own: the peer hung up or broke the protocol,
     * its hello was late, refused or evicted, a write failed, or a link the
     * owner finished has written its last byte. rc: 0 (finished, or the
     * peer hung up between frames), TFOS_ECLOSED, TFOS_EPROTO, TFOS_ETOOBIG,
     * TFOS_ETIMEDOUT, TFOS_EFULL, TFOS_EAUTH, TFOS_ESYS; `why`: a phrase for
     * the owner's log, NULL where there is nothing to say. Not called for
     * tfos__link_close. The link is freed when this returns. */
    void (*on_close)(tfos__link *k, int rc, const char *why, void *user);
} tfos__link_cb;

/* The owner's pointer for this link (NULL until set). */
void tfos__link_set_data(tfos__link *k, void *data);
void *tfos__link_data(const tfos__link *k);
/* The peer as logs name it ("127.0.0.1:40022", "pid 123 uid 0"). */
const char *tfos__link_name(const tfos__link *k);
/* The socket (for getsockname and the like; never read or write it). */
int tfos__link_fd(const tfos__link *k);
/* The peer's uid where the transport tells (Unix), else -1. */
int tfos__link_peer_uid(const tfos__link *k);
int tfos__link_authed(const tfos__link *k);
/* Bytes queued and not yet written. */
size_t tfos__link_unsent(const tfos__link *k);
/* The input buffer's capacity: what this peer costs in memory now. */
size_t tfos__link_buffer_size(const tfos__link *k);
/* The largest data frame this link takes once authenticated (0: control
 * frames only, the default for dialed links), and the bound on its unsent
 * output. */
void tfos__link_set_limits(tfos__link *k, uint32_t max_data, size_t max_out);

/* The accepting side: check the peer's first frame f against `key`: its
 * mac line must be HMAC(key, nonce) (constant time). key NULL: no mac is
 * needed, and the peer must be on a transport that checked its uid (Unix:
 * our uid or root). 0: the link is authenticated (its limits are now the
 * listener's). TFOS_EAUTH: an ERROR frame (code TFOS_EAUTH, "authentication
 * failed: wrong <key_name>") is queued and the link ends once it is written;
 * the caller logs what it likes. TFOS_EINVAL: f is not this link's first
 * frame. */
int tfos__link_auth(tfos__link *k, const tfos__frame *f, const char *key, const char *key_name);

/* Queue a finished frame m (tfos__msg_end / tfos__msg_end_data) followed by
 * body[0..body_len) (a data frame's body; NULL, 0 for a control frame) and
 * write what the socket takes now. The body is copied only where the socket
 * does not take it at once. 0; TFOS_EFULL when the link's output bound is
 * already reached (nothing queued; the peer does not read); TFOS_ECLOSED,
 * TFOS_ESYS when the link is broken (on a loop it then ends: on_close);
 * TFOS_ENOMEM; m's own error. m stays the caller's. */
int tfos__link_send(tfos__link *k, const tfos__msg *m, const void *body, size_t body_len);
/* tfos__link_send of a control frame with descriptors riding on its first
 * byte (Unix only: TFOS_EINVAL elsewhere). The descriptors stay the
 * caller's (the kernel passes copies). One such frame waits at a time:
 * TFOS_EAGAIN while an earlier one's first byte is unwritten. */
int tfos__link_send_fds(tfos__link *k, const tfos__msg *m, const int *fds, int nfds);
/* The next descriptor that came with a frame, in order (the caller owns
 * it), or -1. */
int tfos__link_take_fd(tfos__link *k);

/* End the link once everything queued is written (then on_close, rc 0:
 * before this returns when nothing waits to be written and none of this
 * link's callbacks runs, so a caller outside one must expect its own
 * on_close); frames that arrive meanwhile are dropped unread. */
void tfos__link_finish(tfos__link *k);
/* Close now: unwatch, close the socket, free (after the callback that
 * calls it returns, when it is one of this link's). No on_close. NULL is a
 * no-op. */
void tfos__link_close(tfos__link *k);

/* ---- the accepting side on a loop -------------------------------------- */

typedef struct tfos__listener tfos__listener;

typedef struct tfos__listen_opts {
    const char *addr;     /* "host:port" (port 0: any), "@name" */
    int backlog;          /* 0: 128 */
    int max_pending;      /* links not yet authenticated at once; when all are taken, the oldest is
                           * evicted once its grace is over, and until then accepting pauses (0: 64) */
    int auth_ms;          /* each has this long to authenticate (0: TFOS_AUTH_TIMEOUT_MS) */
    int grace_ms;         /* nor is it evicted for a newcomer before this (0: at once, for listeners
                           * whose peers come one by one; the coordinator's: TFOS_AUTH_GRACE_MS) */
    int same_user;        /* Unix: refuse, at once, a peer of another uid than ours (root is let in) */
    uint32_t max_data;    /* the largest data frame an authenticated link takes (0: control frames only) */
    size_t max_out;       /* bound on a link's unsent output (0: TFOS_LINK_MAX_OUT) */
    int nodelay;          /* TCP: frames go out as they are made (TCP_NODELAY) */
    tfos__link_cb cb;     /* for every link accepted here */
    void *user;
} tfos__listen_opts;

/* Listen at o->addr and accept on `loop` (borrowed: it must outlive the
 * listener): each peer is greeted with a HELLO at once, its first frame goes
 * to cb.on_frame, and it ends (cb.on_close) if it is refused, evicted or
 * late. err gets a line on failure. */
int tfos__listener_open(tfos__listener **out, tfos__loop *loop, const tfos__listen_opts *o, char *err,
                        size_t errlen);
/* The address peers dial ("@name", "host:port" with the port resolved). */
const char *tfos__listener_address(const tfos__listener *ls);
/* Stop listening and close the links still waiting to authenticate (no
 * on_close). Authenticated links are their owner's and stay. NULL: no-op. */
void tfos__listener_close(tfos__listener *ls);

/* ---- the dialing side ------------------------------------------------------ */

/* Connect to addr and read its greeting, all before `deadline`
 * (tfos__now_ms() time) plus greet_extra_ms for the greeting. retry: a
 * failed connect is tried again until the deadline (the listener may not be
 * up yet); else the first failure is returned. The link is on no loop: use
 * the blocking helpers below, or tfos__link_start. err gets one line naming
 * `who` ("the coordinator at HOST:PORT"; NULL: addr); errno is kept for
 * TFOS_ESYS. TFOS_EINVAL (bad address), TFOS_ESYS, TFOS_ETIMEDOUT,
 * TFOS_ECLOSED (hung up before greeting), TFOS_EPROTO. The caller owns
 * *out (tfos__link_close). */
int tfos__link_dial(tfos__link **out, const char *addr, const char *who, int64_t deadline, int retry,
                    int greet_extra_ms, char *err, size_t errlen);
/* Begin the first frame of a dialed link: `type` (the role) with its mac
 * line for `key` (NULL: none). Add the role's lines and send it. */
int tfos__link_hello(tfos__link *k, tfos__msg *m, int type, const char *key);
/* Write what is queued, waiting up to timeout_ms. 0, TFOS_ETIMEDOUT,
 * TFOS_ECLOSED, TFOS_ESYS. */
int tfos__link_flush_wait(tfos__link *k, int timeout_ms);
/* The next frame, waiting up to timeout_ms (-1: no bound): 0 with *f valid
 * until tfos__link_consume or the next call; TFOS_ETIMEDOUT; TFOS_ECLOSED
 * when the peer hung up (after its last whole frame was returned);
 * TFOS_EPROTO / TFOS_ETOOBIG (`why` says what was wrong); TFOS_ESYS. */
int tfos__link_wait_frame(tfos__link *k, int timeout_ms, tfos__frame *f, const char **why);
void tfos__link_consume(tfos__link *k);
/* Put a dialed link on `loop`: its frames go to cb.on_frame, its end to
 * cb.on_close. A frame already buffered is delivered on the next
 * iteration. TFOS_ESYS, TFOS_ENOMEM. */
int tfos__link_start(tfos__link *k, tfos__loop *loop, const tfos__link_cb *cb, void *user);

/* A link over an fd already connected (a socketpair, in tests), neither
 * greeted nor authenticated, with the transport that fits fd; the link
 * owns fd from now on. Limits as a dialed link's. */
int tfos__link_wrap(tfos__link **out, int fd, const tfos__transport *tr);

#endif
