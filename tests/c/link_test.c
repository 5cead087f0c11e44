/* link_test.c: core/link.h: the hello (right key, wrong key, no mac, no key
 * on Unix and on TCP), what a peer that has not authenticated may cost (an
 * oversized or data frame refused from its header, the deadline, the bound
 * on waiting peers), big frames through partial writes, the bound on unsent
 * output, the peer's uid on Unix (another user refused: as root only), and
 * descriptors passed with a frame. The accepting side runs on a loop in this
 * thread; a dialing client runs in a thread of its own, as it blocks. */
#include "check.h"
#include "core/link.h"
#include "core/auth.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *KEY = "6b6579206f66207468652074657374206b6579206f66207468652074657374";

/* ---- the accepting side: a listener whose owner checks the key ---------- */

typedef struct server {
    tfos__loop *loop;
    tfos__listener *ls;
    const char *key;       /* the key first frames are checked against; NULL: none (uid) */
    int auth_rc;           /* last tfos__link_auth result */
    int frames;            /* frames after the first */
    int closes, close_rc;  /* on_close calls, and the last one's rc */
    char close_why[256];
    size_t close_buffer;   /* the closed link's input buffer */
    int peer_uid;
    int first_has_key;     /* the first frame's payload held the key itself */
    uint64_t last_id;
    size_t last_body;
} server;

static void srv_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    server *s = user;
    if (!tfos__link_authed(k)) {
        s->first_has_key = memmem(f->payload, f->len, s->key ? s->key : "\1", s->key ? strlen(s->key) : 1) != NULL;
        s->peer_uid = tfos__link_peer_uid(k);
        s->auth_rc = tfos__link_auth(k, f, s->key, "cluster secret");
        if (s->auth_rc)
            return;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_STATUS);
        tfos__msg_add(&m, "json", "%s", "{\"ok\": 1}");
        CHECK_EQ(tfos__msg_end(&m), 0);
        CHECK_EQ(tfos__link_send(k, &m, NULL, 0), 0);
        tfos__msg_fini(&m);
        return;
    }
    s->frames++;
    s->last_id = f->id;
    s->last_body = f->body_len;
}

static void srv_close(tfos__link *k, int rc, const char *why, void *user)
{
    server *s = user;
    s->closes++;
    s->close_rc = rc;
    snprintf(s->close_why, sizeof s->close_why, "%s", why ? why : "");
    s->close_buffer = tfos__link_buffer_size(k);
}

static int next_grace_ms; /* the next srv_open's listener's grace (0: its default) */

static void srv_open(server *s, const char *addr, int auth_ms, int max_pending, int same_user)
{
    memset(s, 0, sizeof *s);
    s->key = KEY;
    CHECK_EQ(tfos__loop_open(&s->loop), 0);
    tfos__listen_opts o = {.addr = addr, .auth_ms = auth_ms, .max_pending = max_pending, .same_user = same_user,
                           .grace_ms = next_grace_ms, .max_data = 1 << 20, .cb = {srv_frame, srv_close},
                           .user = s};
    next_grace_ms = 0;
    char err[256];
    int rc = tfos__listener_open(&s->ls, s->loop, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
}

static void srv_close_all(server *s)
{
    tfos__listener_close(s->ls);
    tfos__loop_close(s->loop);
}

/* Run the loop until *flag is set or ms pass. */
static void run_until(server *s, atomic_int *flag, int ms)
{
    int64_t deadline = tfos__now_ms() + ms;
    while (!atomic_load(flag) && tfos__now_ms() < deadline)
        tfos__loop_run(s->loop, 5);
}

static void run_for(server *s, int ms)
{
    atomic_int never = 0;
    run_until(s, &never, ms);
}

/* ---- the dialing side, in a thread -------------------------------------- */

typedef struct client {
    const char *addr;
    const char *key;       /* the key the client uses; NULL: no mac line */
    int rc;                /* what the exchange ended with */
    int answer;            /* the answer's type */
    long long code;        /* an ERROR's code */
    char text[256];
    atomic_int done;
} client;

static void *client_run(void *arg)
{
    client *c = arg;
    tfos__link *k;
    char err[256];
    c->rc = tfos__link_dial(&k, c->addr, NULL, tfos__now_ms() + 3000, 0, 0, err, sizeof err);
    if (c->rc == 0) {
        tfos__msg m;
        tfos__link_hello(k, &m, TFOS_MSG_QUERY, c->key);
        tfos__msg_add(&m, "what", "%s", "status");
        CHECK_EQ(tfos__msg_end(&m), 0);
        c->rc = tfos__link_send(k, &m, NULL, 0);
        tfos__msg_fini(&m);
        if (c->rc == 0)
            c->rc = tfos__link_flush_wait(k, 3000);
        tfos__frame f;
        if (c->rc == 0)
            c->rc = tfos__link_wait_frame(k, 3000, &f, NULL);
        if (c->rc == 0) {
            c->answer = f.type;
            tfos__kv_int(f.meta, f.meta_len, "code", -100, 100, &c->code);
            tfos__kv_str(f.meta, f.meta_len, f.type == TFOS_MSG_ERROR ? "message" : "json", c->text, sizeof c->text);
            /* after an ERROR the other side hangs up */
            if (f.type == TFOS_MSG_ERROR)
                CHECK_EQ(tfos__link_wait_frame(k, 3000, &f, NULL), TFOS_ECLOSED);
        }
        tfos__link_close(k);
    }
    atomic_store(&c->done, 1);
    return NULL;
}

static void exchange(server *s, client *c, const char *addr, const char *key)
{
    memset(c, 0, sizeof *c);
    c->addr = addr;
    c->key = key;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, client_run, c), 0);
    run_until(s, &c->done, 5000);
    CHECK(atomic_load(&c->done));
    pthread_join(t, NULL);
    run_for(s, 20); /* the server's side of the end */
}

static void handshake(void)
{
    server s;
    srv_open(&s, "127.0.0.1:0", 0, 0, 0);
    const char *addr = tfos__listener_address(s.ls);
    CHECK(!strncmp(addr, "127.0.0.1:", 10) && strcmp(addr, "127.0.0.1:0"));
    client c;
    exchange(&s, &c, addr, KEY);
    CHECK_EQ(c.rc, 0);
    CHECK_EQ(c.answer, TFOS_MSG_STATUS);
    CHECK_STR(c.text, "{\"ok\": 1}");
    CHECK_EQ(s.auth_rc, 0);
    CHECK(!s.first_has_key); /* a MAC went over the wire, never the key */
    CHECK_EQ(s.peer_uid, -1); /* TCP cannot tell */
    /* the client hung up after its answer: an orderly end, nothing to log */
    CHECK_EQ(s.closes, 1);
    CHECK_EQ(s.close_rc, TFOS_ECLOSED);
    CHECK_STR(s.close_why, "");
    srv_close_all(&s);
}

static void wrong_key_and_no_mac(void)
{
    server s;
    srv_open(&s, "127.0.0.1:0", 0, 0, 0);
    client c;
    exchange(&s, &c, tfos__listener_address(s.ls), "not-the-key");
    CHECK_EQ(c.rc, 0);
    CHECK_EQ(c.answer, TFOS_MSG_ERROR);
    CHECK_EQ(c.code, TFOS_EAUTH);
    CHECK_STR(c.text, "authentication failed: wrong cluster secret");
    CHECK_EQ(s.auth_rc, TFOS_EAUTH);
    CHECK_EQ(s.frames, 0);
    /* a first frame without a mac line */
    exchange(&s, &c, tfos__listener_address(s.ls), NULL);
    CHECK_EQ(c.answer, TFOS_MSG_ERROR);
    CHECK_EQ(c.code, TFOS_EAUTH);
    CHECK_EQ(s.auth_rc, TFOS_EAUTH);
    /* no key at all is no way in over TCP (no peer uid to check) */
    s.key = NULL;
    exchange(&s, &c, tfos__listener_address(s.ls), NULL);
    CHECK_EQ(c.answer, TFOS_MSG_ERROR);
    CHECK_EQ(s.auth_rc, TFOS_EAUTH);
    srv_close_all(&s);
}

/* A raw TCP peer: connected, greeting read. */
static int raw_peer(server *s)
{
    char host[64];
    int port, fd;
    CHECK_EQ(tfos__parse_hostport(tfos__listener_address(s->ls), host, sizeof host, &port), 0);
    CHECK_EQ(tfos__tcp_connect(host, port, 2000, &fd), 0);
    run_for(s, 20);
    char buf[256];
    CHECK(recv(fd, buf, sizeof buf, 0) > 12); /* HELLO */
    return fd;
}

static void header(uint8_t *b, int type, uint32_t len)
{
    memcpy(b, "TFOS", 4);
    b[4] = TFOS_PROTOCOL_VERSION;
    b[5] = (uint8_t)type;
    b[6] = b[7] = 0;
    b[8] = (uint8_t)(len >> 24);
    b[9] = (uint8_t)(len >> 16);
    b[10] = (uint8_t)(len >> 8);
    b[11] = (uint8_t)len;
}

static void preauth_bounds(void)
{
    server s;
    srv_open(&s, "127.0.0.1:0", 0, 0, 0);
    /* a first frame claiming 100 MB, its bytes streaming after it: refused
     * from its header, having cost no more than a small buffer */
    int fd = raw_peer(&s);
    static uint8_t junk[1 << 20];
    header(junk, TFOS_MSG_QUERY, 100u << 20);
    memset(junk + 12, 'x', sizeof junk - 12);
    signal(SIGPIPE, SIG_IGN);
    size_t sent = 0;
    int64_t deadline = tfos__now_ms() + 3000;
    while (s.closes == 0 && tfos__now_ms() < deadline) {
        ssize_t w = send(fd, junk + (sent ? 12 : 0), sizeof junk - (sent ? 12 : 0), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            sent += (size_t)w;
        tfos__loop_run(s.loop, 2);
    }
    CHECK_EQ(s.closes, 1);
    CHECK_EQ(s.close_rc, TFOS_ETOOBIG);
    CHECK(strstr(s.close_why, "oversized frame") && strstr(s.close_why, "before authenticating"));
    CHECK(s.close_buffer <= TFOS_WIRE_HEADER + TFOS_LINK_PREAUTH_MAX);
    close(fd);

    /* a data frame first: refused */
    fd = raw_peer(&s);
    uint8_t b[12 + 10];
    header(b, TFOS_MSG_SERVE_INFER, 10);
    memset(b + 12, 0, 10);
    CHECK_EQ(send(fd, b, sizeof b, 0), (long long)sizeof b);
    run_for(&s, 50);
    CHECK_EQ(s.closes, 2);
    CHECK_EQ(s.close_rc, TFOS_EPROTO);
    CHECK(strstr(s.close_why, "data frame before authenticating"));
    close(fd);

    /* half a frame, then the peer hangs up */
    fd = raw_peer(&s);
    header(b, TFOS_MSG_QUERY, 100);
    CHECK_EQ(send(fd, b, 14, 0), 14);
    shutdown(fd, SHUT_WR);
    run_for(&s, 50);
    CHECK_EQ(s.closes, 3);
    CHECK(strstr(s.close_why, "truncated"));
    close(fd);
    srv_close_all(&s);
}

static void deadline_and_pending_bound(void)
{
    server s;
    srv_open(&s, "127.0.0.1:0", 300, 4, 0);
    /* silence past the deadline */
    int fd = raw_peer(&s);
    int64_t t0 = tfos__now_ms();
    while (s.closes == 0 && tfos__now_ms() - t0 < 3000)
        tfos__loop_run(s.loop, 10);
    int64_t took = tfos__now_ms() - t0;
    CHECK_EQ(s.close_rc, TFOS_ETIMEDOUT);
    CHECK_STR(s.close_why, "did not authenticate in time");
    CHECK(took >= 200 && took < 2000);
    close(fd);
    srv_close_all(&s);

    /* ten silent peers, four places, a grace of 200 ms: the first four are
     * greeted; the other six wait in the backlog, not greeted, and nobody
     * is evicted while the four are in their grace (they could be real
     * peers mid-handshake) */
    next_grace_ms = 200;
    srv_open(&s, "127.0.0.1:0", 5000, 4, 0);
    char host[64];
    int port;
    CHECK_EQ(tfos__parse_hostport(tfos__listener_address(s.ls), host, sizeof host, &port), 0);
    int silent[10];
    for (int i = 0; i < 4; i++)
        silent[i] = raw_peer(&s);
    for (int i = 4; i < 10; i++)
        CHECK_EQ(tfos__tcp_connect(host, port, 2000, &silent[i]), 0);
    run_for(&s, 50);
    CHECK_EQ(s.closes, 0);
    struct pollfd pf = {.fd = silent[4], .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 0), 0); /* not greeted yet */
    /* past the grace the oldest make room, a place-full per grace: six of
     * them, well before anyone's 5 s deadline */
    t0 = tfos__now_ms();
    while (s.closes < 6 && tfos__now_ms() - t0 < 3000)
        tfos__loop_run(s.loop, 10);
    CHECK_EQ(s.closes, 6);
    CHECK_EQ(s.close_rc, TFOS_EFULL);
    CHECK(strstr(s.close_why, "dropped the oldest"));
    run_for(&s, 50);
    pf.fd = silent[9];
    CHECK_EQ(poll(&pf, 1, 0), 1); /* and the last to wait was greeted */
    /* a real peer still gets in among them, a grace later at most */
    client c;
    exchange(&s, &c, tfos__listener_address(s.ls), KEY);
    CHECK_EQ(c.answer, TFOS_MSG_STATUS);
    for (int i = 0; i < 10; i++)
        close(silent[i]);
    srv_close_all(&s);

    /* four places taken in one accept, one more waits: past the grace the
     * oldest makes room for it, and only it: the other three, as old, keep
     * their places while nobody else waits (before, the accept loop dropped
     * the next oldest too, for no one) */
    next_grace_ms = 200;
    srv_open(&s, "127.0.0.1:0", 5000, 4, 0);
    CHECK_EQ(tfos__parse_hostport(tfos__listener_address(s.ls), host, sizeof host, &port), 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(tfos__tcp_connect(host, port, 2000, &silent[i]), 0);
    t0 = tfos__now_ms();
    while (s.closes < 1 && tfos__now_ms() - t0 < 3000)
        tfos__loop_run(s.loop, 10);
    run_for(&s, 100);
    CHECK_EQ(s.closes, 1);
    pf.fd = silent[4];
    CHECK_EQ(poll(&pf, 1, 0), 1); /* the one that waited was greeted */
    for (int i = 0; i < 5; i++)
        close(silent[i]);
    srv_close_all(&s);
}

/* ---- two wrapped ends of a socketpair on one loop ----------------------- */

typedef struct sink {
    int frames;
    uint64_t ids[16];
    size_t bodies[16];
    int body_ok;
    char meta[64];
    int closed;
} sink;

static void sink_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    (void)k;
    sink *s = user;
    if (s->frames < 16) {
        s->ids[s->frames] = f->id;
        s->bodies[s->frames] = f->body_len;
    }
    for (size_t i = 0; i < f->body_len; i += 4093)
        if ((uint8_t)f->body[i] != (uint8_t)(i * 7 + f->id))
            s->body_ok = 0;
    tfos__kv_str(f->meta, f->meta_len, "model", s->meta, sizeof s->meta);
    s->frames++;
}

static void sink_close(tfos__link *k, int rc, const char *why, void *user)
{
    (void)k;
    (void)rc;
    (void)why;
    ((sink *)user)->closed = 1;
}

static void none_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    (void)k;
    (void)f;
    (void)user;
}

static void big_frames(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int small = 4096; /* small socket buffers: every big frame goes out in pieces */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    tfos__link *a, *b;
    CHECK_EQ(tfos__link_wrap(&a, sv[0], &tfos__transport_unix), 0);
    CHECK_EQ(tfos__link_wrap(&b, sv[1], &tfos__transport_unix), 0);
    tfos__link_set_limits(a, 0, 64u << 20);
    tfos__link_set_limits(b, 32u << 20, 0);
    tfos__loop *loop;
    CHECK_EQ(tfos__loop_open(&loop), 0);
    sink got = {.body_ok = 1};
    tfos__link_cb acb = {none_frame, NULL}, bcb = {sink_frame, sink_close};
    CHECK_EQ(tfos__link_start(a, loop, &acb, NULL), 0);
    CHECK_EQ(tfos__link_start(b, loop, &bcb, &got), 0);
    size_t sizes[] = {3u << 20, 10, 9u << 20, 0, 70000};
    int n = (int)(sizeof sizes / sizeof *sizes);
    for (int i = 0; i < n; i++) {
        uint8_t *body = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++)
            body[j] = (uint8_t)(j * 7 + (uint64_t)(1000 + i));
        tfos__msg m;
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_BATCH, 1000 + (uint64_t)i);
        tfos__msg_add(&m, "model", "%s", "digits");
        CHECK_EQ(tfos__msg_end_data(&m, sizes[i]), 0);
        CHECK_EQ(tfos__link_send(a, &m, body, sizes[i]), 0);
        tfos__msg_fini(&m);
        free(body); /* what the socket did not take was copied */
    }
    CHECK(tfos__link_unsent(a) > 0);
    int64_t deadline = tfos__now_ms() + 10000;
    while (got.frames < n && tfos__now_ms() < deadline)
        tfos__loop_run(loop, 10);
    CHECK_EQ(got.frames, n);
    CHECK(got.body_ok);
    CHECK_STR(got.meta, "digits");
    for (int i = 0; i < n; i++) {
        CHECK_EQ(got.ids[i], 1000 + i);
        CHECK_EQ(got.bodies[i], sizes[i]);
    }
    CHECK_EQ(tfos__link_unsent(a), 0);
    /* a data frame over the receiver's limit ends the link from its header */
    tfos__msg m;
    tfos__msg_begin_data(&m, TFOS_MSG_SERVE_BATCH, 1);
    CHECK_EQ(tfos__msg_end_data(&m, 40u << 20), 0);
    CHECK_EQ(tfos__link_send(a, &m, NULL, 0), 0); /* the header alone: enough */
    tfos__msg_fini(&m);
    deadline = tfos__now_ms() + 3000;
    while (!got.closed && tfos__now_ms() < deadline)
        tfos__loop_run(loop, 10);
    CHECK(got.closed);
    tfos__link_close(a);
    tfos__loop_close(loop);
}

static void output_bound(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tfos__link *a;
    CHECK_EQ(tfos__link_wrap(&a, sv[0], &tfos__transport_unix), 0);
    tfos__link_set_limits(a, 0, 1u << 20);
    static char body[256 * 1024];
    int rc = 0, sent = 0;
    size_t before = 0;
    while (sent < 100) {
        tfos__msg m;
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_RESULT, (uint64_t)sent);
        CHECK_EQ(tfos__msg_end_data(&m, sizeof body), 0);
        before = tfos__link_unsent(a);
        rc = tfos__link_send(a, &m, body, sizeof body);
        tfos__msg_fini(&m);
        if (rc)
            break;
        sent++;
    }
    /* the peer reads nothing: refused once the bound is reached, not before;
     * the refused frame was not queued */
    CHECK_EQ(rc, TFOS_EFULL);
    CHECK(before >= (1u << 20) && before < (1u << 20) + sizeof body + 64);
    CHECK_EQ(tfos__link_unsent(a), before);
    /* one frame may pass the bound: never two */
    CHECK(sent > 4);
    tfos__link_close(a);
    close(sv[1]);
}

/* ---- Unix: peer uid, no-key roles, descriptors ------------------------------ */

static void unix_peer(void)
{
    char addr[64];
    snprintf(addr, sizeof addr, "@tfos-link-test-%d", (int)getpid());
    server s;
    srv_open(&s, addr, 0, 0, 1);
    CHECK_STR(tfos__listener_address(s.ls), addr);
    client c;
    exchange(&s, &c, addr, KEY);
    CHECK_EQ(c.answer, TFOS_MSG_STATUS);
    CHECK_EQ(s.peer_uid, (int)getuid());
    /* a role without a key: the peer's uid is the check */
    s.key = NULL;
    exchange(&s, &c, addr, NULL);
    CHECK_EQ(c.answer, TFOS_MSG_STATUS);
    CHECK_EQ(s.auth_rc, 0);
    if (geteuid() == 0) {
        /* another user is refused at once, before a word */
        s.closes = 0;
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            if (setgid(65534) || setuid(65534))
                _exit(3);
            tfos__link *k;
            char err[256];
            int rc = tfos__link_dial(&k, addr, NULL, tfos__now_ms() + 2000, 0, 0, err, sizeof err);
            _exit(rc == TFOS_ECLOSED ? 0 : 4);
        }
        int st = 0;
        int64_t deadline = tfos__now_ms() + 5000;
        while (waitpid(pid, &st, WNOHANG) == 0 && tfos__now_ms() < deadline)
            tfos__loop_run(s.loop, 5);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 0);
        CHECK_EQ(s.closes, 1);
        CHECK_EQ(s.close_rc, TFOS_EAUTH);
        CHECK_STR(s.close_why, "it runs as another user");
    } else {
        fprintf(stderr, "unix_peer: not root: another user's refusal not tested\n");
    }
    srv_close_all(&s);
}

static void fd_passing(void)
{
    int sv[2], p[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    CHECK_EQ(pipe(p), 0);
    tfos__link *a, *b;
    CHECK_EQ(tfos__link_wrap(&a, sv[0], &tfos__transport_unix), 0);
    CHECK_EQ(tfos__link_wrap(&b, sv[1], &tfos__transport_unix), 0);
    /* a frame before, the one with the descriptors, one after */
    for (int i = 0; i < 3; i++) {
        tfos__msg m;
        tfos__msg_begin(&m, i == 1 ? TFOS_MSG_FEED_OK : TFOS_MSG_HEARTBEAT);
        tfos__msg_add(&m, "n", "%d", i);
        CHECK_EQ(tfos__msg_end(&m), 0);
        int fds[2] = {p[0], p[1]};
        CHECK_EQ(i == 1 ? tfos__link_send_fds(a, &m, fds, 2) : tfos__link_send(a, &m, NULL, 0), 0);
        tfos__msg_fini(&m);
    }
    tfos__frame f;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(tfos__link_wait_frame(b, 2000, &f, NULL), 0);
        long long n;
        CHECK_EQ(tfos__kv_int(f.meta, f.meta_len, "n", 0, 9, &n), 0);
        CHECK_EQ(n, i);
    }
    int r = tfos__link_take_fd(b), w = tfos__link_take_fd(b);
    CHECK(r >= 0 && w >= 0 && r != p[0] && w != p[1]);
    CHECK_EQ(tfos__link_take_fd(b), -1);
    CHECK_EQ(write(w, "hi", 2), 2);
    char buf[4];
    CHECK_EQ(read(p[0], buf, 2), 2);
    CHECK(!memcmp(buf, "hi", 2));
    close(r);
    close(w);
    /* TCP carries none */
    int t[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, t), 0);
    tfos__link *tcp;
    CHECK_EQ(tfos__link_wrap(&tcp, t[0], &tfos__transport_tcp), 0);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_FEED_OK);
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__link_send_fds(tcp, &m, p, 1), TFOS_EINVAL);
    tfos__msg_fini(&m);
    tfos__link_close(tcp);
    close(t[1]);
    tfos__link_close(a);
    tfos__link_close(b);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(handshake);
    RUN(wrong_key_and_no_mac);
    RUN(preauth_bounds);
    RUN(deadline_and_pending_bound);
    RUN(big_frames);
    RUN(output_bound);
    RUN(unix_peer);
    RUN(fd_passing);
    return 0;
}
