/* coord_test.c: the coordinator against raw peers on 127.0.0.1: the happy
 * path, wrong secrets, malformed/truncated/oversized frames, duplicate and
 * out-of-range executors, reservation timeout, node failure, heartbeats.
 * The coordinator runs in this thread; helpers step it while they wait. */
#include "check.h"
#include "core/auth.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <stdarg.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *SECRET = "0123456789abcdef0123456789abcdef";
static char logbuf[1 << 16];
static size_t loglen;

static void capture(int level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s\n", msg);
    if (n > 0 && (size_t)n < sizeof logbuf - loglen)
        loglen += (size_t)n;
}

static tfos_coord *open_coord(int workers, int ps, double reserve_s, double hb_s)
{
    tfos_coord_opts o = {.layout = {.num_ps = ps, .num_workers = workers}, .secret = SECRET,
                         .reservation_timeout = reserve_s, .stop_grace = 1, .heartbeat_timeout = hb_s};
    tfos_coord *c;
    CHECK_EQ(tfos_coord_open(&c, &o), 0);
    loglen = 0;
    logbuf[0] = 0;
    return c;
}

static void raw_connect(tfos_coord *c, tfos__conn *conn)
{
    char host[64];
    int port, fd;
    CHECK_EQ(tfos__parse_hostport(tfos_coord_address(c), host, sizeof host, &port), 0);
    CHECK_EQ(tfos__tcp_connect(host, port, 2000, &fd), 0);
    tfos__conn_init(conn, fd, TFOS_WIRE_MAX_PAYLOAD);
}

/* Step the coordinator until `conn` has a frame (or closes). */
static int wait_frame(tfos_coord *c, tfos__conn *conn, tfos__frame *f, int timeout_ms)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    for (;;) {
        const char *why;
        int rc = tfos__conn_frame(conn, f, &why);
        if (rc != TFOS_EAGAIN)
            return rc;
        if (tfos__now_ms() > deadline)
            return TFOS_ETIMEDOUT;
        tfos_coord_step(c, 5);
        rc = tfos__conn_read(conn);
        if (rc == TFOS_ECLOSED) {
            rc = tfos__conn_frame(conn, f, &why);
            return rc == TFOS_EAGAIN ? TFOS_ECLOSED : rc;
        }
    }
}

static void steps(tfos_coord *c, int ms)
{
    int64_t deadline = tfos__now_ms() + ms;
    while (tfos__now_ms() < deadline)
        tfos_coord_step(c, 5);
}

static int wait_state(tfos_coord *c, int state, int timeout_ms)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    while (tfos__now_ms() < deadline)
        if (tfos_coord_step(c, 5) == state)
            return 1;
    return 0;
}

static void send_kv(tfos__conn *conn, int type, int nkv, ...)
{
    tfos__msg m;
    tfos__msg_begin(&m, type);
    va_list ap;
    va_start(ap, nkv);
    for (int i = 0; i < nkv; i++) {
        const char *k = va_arg(ap, const char *);
        const char *v = va_arg(ap, const char *);
        tfos__msg_add(&m, k, "%s", v);
    }
    va_end(ap);
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__conn_send(conn, &m), 0);
    tfos__msg_fini(&m);
}

/* Connect, read the nonce, register as executor `id` with `secret`. Returns
 * the first reply frame type after registering, or 0 if none came yet. */
static void do_register(tfos_coord *c, tfos__conn *conn, int id, const char *secret, int port)
{
    raw_connect(c, conn);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, conn, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_HELLO);
    char nonce[64], mac[TFOS_MAC_HEX_LEN + 1], idbuf[16], portbuf[16];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce), 0);
    tfos__conn_consume(conn);
    CHECK_EQ(tfos__auth_mac(secret, nonce, mac), 0);
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    send_kv(conn, TFOS_MSG_REGISTER, 5, "mac", mac, "executor_id", idbuf, "host", "127.0.0.1", "port", portbuf,
            "pid", "4242");
}

static void expect_error(tfos_coord *c, tfos__conn *conn, const char *needle)
{
    tfos__frame f;
    CHECK_EQ(wait_frame(c, conn, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_ERROR);
    char text[1024];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "message", text, sizeof text), 0);
    if (!strstr(text, needle)) {
        fprintf(stderr, "error text '%s' lacks '%s'\n", text, needle);
        exit(1);
    }
    tfos__conn_consume(conn);
}

static void happy_path(void)
{
    tfos_coord *c = open_coord(2, 1, 10, 30);
    tfos__conn a[3];
    for (int i = 0; i < 3; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    for (int i = 0; i < 3; i++) {
        tfos__frame f;
        CHECK_EQ(wait_frame(c, &a[i], &f, 2000), 0);
        CHECK_EQ(f.type, TFOS_MSG_SPEC);
        long long self;
        CHECK_EQ(tfos__kv_int(f.payload, f.len, "self", 0, 10, &self), 0);
        CHECK_EQ(self, i);
        tfos__conn_consume(&a[i]);
        send_kv(&a[i], TFOS_MSG_STARTED, 1, "pid", "999");
    }
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
    send_kv(&a[1], TFOS_MSG_EXITED, 2, "code", "0", "desc", "exit code 0");
    steps(c, 50);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING); /* worker:1 still runs */
    send_kv(&a[2], TFOS_MSG_EXITED, 2, "code", "0", "desc", "exit code 0");
    /* workers done: the ps is told to stop */
    tfos__frame f;
    CHECK_EQ(wait_frame(c, &a[0], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    tfos__conn_consume(&a[0]);
    send_kv(&a[0], TFOS_MSG_EXITED, 2, "code", "143", "desc", "signal 15 (Terminated)");
    CHECK(wait_state(c, TFOS_COORD_DONE, 2000));
    CHECK_STR(tfos_coord_failure(c), "");
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"state\": \"done\""));
    CHECK(strstr(js, "\"job\": \"ps\""));
    free(js);
    for (int i = 0; i < 3; i++)
        tfos__conn_fini(&a[i]);
    tfos_coord_close(c);
}

static void wrong_secret(void)
{
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__conn bad;
    do_register(c, &bad, 0, "not-the-secret", 5000);
    expect_error(c, &bad, "authentication failed");
    steps(c, 30);
    CHECK(strstr(logbuf, "does not know the cluster secret"));
    tfos__conn_fini(&bad);
    /* the slot is still free for the real node */
    tfos__conn good;
    do_register(c, &good, 0, SECRET, 5000);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, &good, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos__conn_fini(&good);
    tfos_coord_close(c);
}

static void hostile_bytes(void)
{
    tfos_coord *c = open_coord(1, 0, 10, 30);
    static const struct {
        const char *bytes;
        size_t len;
        const char *log;
    } cases[] = {
        {"GET / HTTP/1.1\r\n\r\n", 18, "bad magic"},
        {"TFOS\x01\x02\x00\x00\x7f\xff\xff\xff", 12, "oversized frame"},
        {"TFOS\x01\x02\x00\x00\x00\x00\x00\x10" "abc", 15, "truncated"},
        {"TFOS\x01\x06\x00\x00\x00\x00\x00\x04" "x=1\n", 16, "not an authenticated REGISTER"},
        {"TFOS\x01\x02\x00\x00\x00\x00\x00\x03" "x\0\n", 15, "malformed frame"},
        {"TFOS\x09\x02\x00\x00\x00\x00\x00\x00", 12, "protocol version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loglen = 0;
        logbuf[0] = 0;
        tfos__conn conn;
        raw_connect(c, &conn);
        CHECK_EQ(write(conn.fd, cases[i].bytes, cases[i].len), (long long)cases[i].len);
        if (strstr(cases[i].log, "truncated")) {
            steps(c, 30);
            shutdown(conn.fd, SHUT_WR);
        }
        int64_t deadline = tfos__now_ms() + 2000;
        while (!strstr(logbuf, cases[i].log) && tfos__now_ms() < deadline)
            tfos_coord_step(c, 5);
        if (!strstr(logbuf, cases[i].log)) {
            fprintf(stderr, "case %zu: log lacks '%s':\n%s\n", i, cases[i].log, logbuf);
            exit(1);
        }
        CHECK(strstr(logbuf, "dropped peer 127.0.0.1:"));
        tfos__conn_fini(&conn);
    }
    /* still serving */
    tfos__conn good;
    do_register(c, &good, 0, SECRET, 5000);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, &good, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos__conn_fini(&good);
    tfos_coord_close(c);
}

static void bad_registrations(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__conn a, dup, range;
    do_register(c, &a, 0, SECRET, 5000);
    steps(c, 30);
    do_register(c, &dup, 0, SECRET, 5001);
    expect_error(c, &dup, "already registered");
    do_register(c, &range, 7, SECRET, 5002);
    expect_error(c, &range, "out of range");
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RESERVING);
    tfos__conn_fini(&dup);
    tfos__conn_fini(&range);
    tfos__conn_fini(&a);
    tfos_coord_close(c);
}

static void reservation_timeout(void)
{
    tfos_coord *c = open_coord(3, 1, 0.5, 30);
    tfos__conn a;
    do_register(c, &a, 1, SECRET, 5000);
    expect_error(c, &a, "reservation timed out");
    CHECK(wait_state(c, TFOS_COORD_FAILED, 7000));
    const char *fail = tfos_coord_failure(c);
    CHECK(strstr(fail, "1 of 4 nodes registered"));
    CHECK(strstr(fail, "executor 0 (ps:0)"));
    CHECK(strstr(fail, "executor 2 (worker:1)"));
    CHECK(strstr(fail, "executor 3 (worker:2)"));
    CHECK(!strstr(fail, "executor 1 "));
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_ETIMEDOUT);
    tfos__conn_fini(&a);
    tfos_coord_close(c);
}

static void node_failure(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__conn a[2];
    tfos__frame f;
    for (int i = 0; i < 2; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(wait_frame(c, &a[i], &f, 2000), 0);
        tfos__conn_consume(&a[i]);
        send_kv(&a[i], TFOS_MSG_STARTED, 1, "pid", "77");
    }
    steps(c, 20);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_EXITED);
    tfos__msg_add(&m, "code", "%d", 137);
    tfos__msg_add(&m, "desc", "%s", "signal 9 (Killed)");
    tfos__msg_add(&m, "tail", "%s", "step 10 loss 0.5");
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__conn_send(&a[1], &m), 0);
    tfos__msg_fini(&m);
    CHECK_EQ(wait_frame(c, &a[0], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    tfos__conn_consume(&a[0]);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_STOPPING);
    tfos__conn_fini(&a[0]); /* the stopped agent goes away */
    CHECK(wait_state(c, TFOS_COORD_FAILED, 2000));
    const char *fail = tfos_coord_failure(c);
    CHECK(strstr(fail, "worker:1 (executor 1, host 127.0.0.1, pid 77) failed: signal 9 (Killed)"));
    CHECK(strstr(fail, "step 10 loss 0.5"));
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_EFAILED);
    tfos__conn_fini(&a[1]);
    tfos_coord_close(c);
}

static void lost_agent_and_heartbeat(void)
{
    /* an agent whose connection drops while running fails the cluster */
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__conn a;
    tfos__frame f;
    do_register(c, &a, 0, SECRET, 5000);
    CHECK_EQ(wait_frame(c, &a, &f, 2000), 0);
    tfos__conn_fini(&a);
    CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
    CHECK(strstr(tfos_coord_failure(c), "lost contact"));
    tfos_coord_close(c);

    /* an agent that stops sending heartbeats is declared failed */
    c = open_coord(1, 0, 10, 0.3);
    do_register(c, &a, 0, SECRET, 5000);
    CHECK_EQ(wait_frame(c, &a, &f, 2000), 0);
    tfos__conn_consume(&a);
    int64_t t0 = tfos__now_ms();
    CHECK_EQ(wait_frame(c, &a, &f, 5000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    CHECK(tfos__now_ms() - t0 >= 250);
    CHECK(strstr(tfos_coord_failure(c), "no heartbeat"));
    tfos__conn_fini(&a);
    tfos_coord_close(c);
}

static void status_query(void)
{
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__conn q;
    raw_connect(c, &q);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, &q, &f, 2000), 0);
    char nonce[64], mac[TFOS_MAC_HEX_LEN + 1];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce), 0);
    tfos__conn_consume(&q);
    CHECK_EQ(tfos__auth_mac(SECRET, nonce, mac), 0);
    send_kv(&q, TFOS_MSG_QUERY, 1, "mac", mac);
    CHECK_EQ(wait_frame(c, &q, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STATUS);
    char json[4096];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "json", json, sizeof json), 0);
    CHECK(strstr(json, "\"state\": \"reserving\""));
    CHECK(strstr(json, "\"state\": \"waiting\""));
    tfos__conn_fini(&q);
    tfos_coord_close(c);
}

int main(void)
{
    tfos_set_logger(capture, NULL);
    RUN(happy_path);
    RUN(wrong_secret);
    RUN(hostile_bytes);
    RUN(bad_registrations);
    RUN(reservation_timeout);
    RUN(node_failure);
    RUN(lost_agent_and_heartbeat);
    RUN(status_query);
    return 0;
}
