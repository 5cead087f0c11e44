/* coord_test.c: the coordinator against raw peers on 127.0.0.1: the happy
 * path, wrong secrets, malformed/truncated/oversized frames, duplicate and
 * out-of-range executors, reservation timeout, node failure, heartbeats,
 * END_FEED, TensorBoard ports, ABORT reports, a node failing while the rest
 * stops, which of several failures is reported, the start kinds agents report, and the C clients
 * (tfos_report_abort, tfos_query_status) run in a forked child.
 * The coordinator runs in this thread; helpers step it while they wait. */
#include "check.h"
#include "core/auth.h"
#include "core/link.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "roles/coord.h"
#include "tfos/tfos.h"

#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

/* A raw peer: a link over a plain TCP connection (no dialing helper: the
 * coordinator runs in this thread and must be stepped while we wait). */
static void raw_connect(tfos_coord *c, tfos__link **conn)
{
    char host[64];
    int port, fd;
    CHECK_EQ(tfos__parse_hostport(tfos_coord_address(c), host, sizeof host, &port), 0);
    CHECK_EQ(tfos__tcp_connect(host, port, 2000, &fd), 0);
    CHECK_EQ(tfos__link_wrap(conn, fd, &tfos__transport_tcp), 0);
}

/* Step the coordinator until `conn` has a frame (or closes). */
static int wait_frame(tfos_coord *c, tfos__link *conn, tfos__frame *f, int timeout_ms)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    for (;;) {
        const char *why;
        int rc = tfos__link_wait_frame(conn, 0, f, &why);
        if (rc != TFOS_ETIMEDOUT)
            return rc;
        if (tfos__now_ms() > deadline)
            return TFOS_ETIMEDOUT;
        tfos_coord_step(c, 5);
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

static void send_kv(tfos__link *conn, int type, int nkv, ...)
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
    CHECK_EQ(tfos__link_send(conn, &m, NULL, 0), 0);
    tfos__msg_fini(&m);
}

/* Connect and answer the greeting: mac gets HMAC(secret, nonce). */
static void greet(tfos_coord *c, tfos__link **conn, const char *secret, char mac[TFOS_MAC_HEX_LEN + 1])
{
    raw_connect(c, conn);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, *conn, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_HELLO);
    char nonce[64];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce), 0);
    tfos__link_consume(*conn);
    CHECK_EQ(tfos__auth_mac(secret, nonce, mac), 0);
}

/* Connect, read the nonce, register as executor `id` with `secret` (and a
 * tb_port line when tb is not NULL). */
static void do_register_tb(tfos_coord *c, tfos__link **conn, int id, const char *secret, int port, const char *tb)
{
    char mac[TFOS_MAC_HEX_LEN + 1], idbuf[16], portbuf[16];
    greet(c, conn, secret, mac);
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    if (tb)
        send_kv(*conn, TFOS_MSG_REGISTER, 6, "mac", mac, "executor_id", idbuf, "host", "127.0.0.1", "port", portbuf,
                "pid", "4242", "tb_port", tb);
    else
        send_kv(*conn, TFOS_MSG_REGISTER, 5, "mac", mac, "executor_id", idbuf, "host", "127.0.0.1", "port",
                portbuf, "pid", "4242");
}

static void do_register(tfos_coord *c, tfos__link **conn, int id, const char *secret, int port)
{
    do_register_tb(c, conn, id, secret, port, NULL);
}

static void expect_error(tfos_coord *c, tfos__link *conn, const char *needle)
{
    tfos__frame f;
    CHECK_EQ(wait_frame(c, conn, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_ERROR);
    char text[8192];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "message", text, sizeof text), 0);
    if (!strstr(text, needle)) {
        fprintf(stderr, "error text '%s' lacks '%s'\n", text, needle);
        exit(1);
    }
    tfos__link_consume(conn);
}

static void happy_path(void)
{
    tfos_coord *c = open_coord(2, 1, 10, 30);
    tfos__link *a[3];
    for (int i = 0; i < 3; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    for (int i = 0; i < 3; i++) {
        tfos__frame f;
        CHECK_EQ(wait_frame(c, a[i], &f, 2000), 0);
        CHECK_EQ(f.type, TFOS_MSG_SPEC);
        long long self;
        CHECK_EQ(tfos__kv_int(f.payload, f.len, "self", 0, 10, &self), 0);
        CHECK_EQ(self, i);
        tfos__link_consume(a[i]);
        send_kv(a[i], TFOS_MSG_STARTED, 1, "pid", "999");
    }
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
    send_kv(a[1], TFOS_MSG_EXITED, 2, "code", "0", "desc", "exit code 0");
    steps(c, 50);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING); /* worker:1 still runs */
    send_kv(a[2], TFOS_MSG_EXITED, 2, "code", "0", "desc", "exit code 0");
    /* workers done: the ps is told to stop */
    tfos__frame f;
    CHECK_EQ(wait_frame(c, a[0], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    tfos__link_consume(a[0]);
    send_kv(a[0], TFOS_MSG_EXITED, 2, "code", "143", "desc", "signal 15 (Terminated)");
    CHECK(wait_state(c, TFOS_COORD_DONE, 2000));
    CHECK_STR(tfos_coord_failure(c), "");
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"state\": \"done\""));
    CHECK(strstr(js, "\"failure_record\": null"));
    CHECK(strstr(js, "\"job\": \"ps\""));
    free(js);
    for (int i = 0; i < 3; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);
}

static void wrong_secret(void)
{
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__link *bad;
    do_register(c, &bad, 0, "not-the-secret", 5000);
    expect_error(c, bad, "authentication failed");
    steps(c, 30);
    CHECK(strstr(logbuf, "does not know the cluster secret"));
    tfos__link_close(bad);
    /* the slot is still free for the real node */
    tfos__link *good;
    do_register(c, &good, 0, SECRET, 5000);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, good, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos__link_close(good);
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
        {"TFOS\x04\x02\x00\x00\x7f\xff\xff\xff", 12, "oversized frame"},
        {"TFOS\x04\x02\x00\x00\x00\x00\x00\x10" "abc", 15, "truncated"},
        {"TFOS\x04\x06\x00\x00\x00\x00\x00\x04" "x=1\n", 16, "not an authenticated REGISTER"},
        {"TFOS\x04\x02\x00\x00\x00\x00\x00\x03" "x\0\n", 15, "malformed frame"},
        {"TFOS\x09\x02\x00\x00\x00\x00\x00\x00", 12, "protocol version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loglen = 0;
        logbuf[0] = 0;
        tfos__link *conn;
        raw_connect(c, &conn);
        CHECK_EQ(write(tfos__link_fd(conn), cases[i].bytes, cases[i].len), (long long)cases[i].len);
        if (strstr(cases[i].log, "truncated")) {
            steps(c, 30);
            shutdown(tfos__link_fd(conn), SHUT_WR);
        }
        int64_t deadline = tfos__now_ms() + 2000;
        while (!strstr(logbuf, cases[i].log) && tfos__now_ms() < deadline)
            tfos_coord_step(c, 5);
        if (!strstr(logbuf, cases[i].log)) {
            fprintf(stderr, "case %zu: log lacks '%s':\n%s\n", i, cases[i].log, logbuf);
            exit(1);
        }
        CHECK(strstr(logbuf, "dropped peer 127.0.0.1:"));
        tfos__link_close(conn);
    }
    /* still serving */
    tfos__link *good;
    do_register(c, &good, 0, SECRET, 5000);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, good, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos__link_close(good);
    tfos_coord_close(c);
}

static void bad_registrations(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a, *dup, *range;
    do_register(c, &a, 0, SECRET, 5000);
    steps(c, 30);
    do_register(c, &dup, 0, SECRET, 5001);
    expect_error(c, dup, "already registered");
    do_register(c, &range, 7, SECRET, 5002);
    expect_error(c, range, "out of range");
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RESERVING);
    tfos__link_close(dup);
    tfos__link_close(range);
    tfos__link_close(a);
    tfos_coord_close(c);
}

static void reservation_timeout(void)
{
    tfos_coord *c = open_coord(3, 1, 0.5, 30);
    tfos__link *a;
    do_register(c, &a, 1, SECRET, 5000);
    expect_error(c, a, "reservation timed out");
    CHECK(wait_state(c, TFOS_COORD_FAILED, 7000));
    const char *fail = tfos_coord_failure(c);
    CHECK(strstr(fail, "1 of 4 nodes registered"));
    CHECK(strstr(fail, "executor 0 (ps:0)"));
    CHECK(strstr(fail, "executor 2 (worker:1)"));
    CHECK(strstr(fail, "executor 3 (worker:2)"));
    CHECK(!strstr(fail, "executor 1 "));
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_ETIMEDOUT);
    tfos__link_close(a);
    tfos_coord_close(c);
}

static void node_failure(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a[2];
    tfos__frame f;
    for (int i = 0; i < 2; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(wait_frame(c, a[i], &f, 2000), 0);
        tfos__link_consume(a[i]);
        send_kv(a[i], TFOS_MSG_STARTED, 1, "pid", "77");
    }
    steps(c, 20);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_EXITED);
    tfos__msg_add(&m, "code", "%d", 137);
    tfos__msg_add(&m, "desc", "%s", "signal 9 (Killed)");
    tfos__msg_add(&m, "tail", "%s", "step 10 loss 0.5");
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__link_send(a[1], &m, NULL, 0), 0);
    tfos__msg_fini(&m);
    CHECK_EQ(wait_frame(c, a[0], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    tfos__link_consume(a[0]);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_STOPPING);
    tfos__link_close(a[0]); /* the stopped agent goes away */
    CHECK(wait_state(c, TFOS_COORD_FAILED, 2000));
    const char *fail = tfos_coord_failure(c);
    CHECK(strstr(fail, "worker:1 (executor 1, host 127.0.0.1, pid 77) failed: signal 9 (Killed)"));
    CHECK(strstr(fail, "step 10 loss 0.5"));
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_EFAILED);
    /* the record a client's own restart policy takes (tfos.spark.Cluster) */
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"cause\": \"signal\", \"decision\": \"raise\", \"failure_record\": {\"node\": \"worker:1\", "
                     "\"job\": \"worker\", \"executor_id\": 1, \"exit_code\": -1, \"signal\": 9, \"exception\": \"\""));
    free(js);
    tfos__link_close(a[1]);
    tfos_coord_close(c);
}

static void lost_agent_and_heartbeat(void)
{
    /* an agent whose connection drops while running fails the cluster */
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__link *a;
    tfos__frame f;
    do_register(c, &a, 0, SECRET, 5000);
    CHECK_EQ(wait_frame(c, a, &f, 2000), 0);
    tfos__link_close(a);
    CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
    CHECK(strstr(tfos_coord_failure(c), "lost contact"));
    tfos_coord_close(c);

    /* an agent that stops sending heartbeats is declared failed */
    c = open_coord(1, 0, 10, 0.3);
    do_register(c, &a, 0, SECRET, 5000);
    CHECK_EQ(wait_frame(c, a, &f, 2000), 0);
    tfos__link_consume(a);
    int64_t t0 = tfos__now_ms();
    CHECK_EQ(wait_frame(c, a, &f, 5000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    CHECK(tfos__now_ms() - t0 >= 250);
    CHECK(strstr(tfos_coord_failure(c), "no heartbeat"));
    tfos__link_close(a);
    tfos_coord_close(c);
}

static void status_query(void)
{
    tfos_coord *c = open_coord(1, 0, 10, 30);
    tfos__link *q;
    raw_connect(c, &q);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, q, &f, 2000), 0);
    char nonce[64], mac[TFOS_MAC_HEX_LEN + 1];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce), 0);
    tfos__link_consume(q);
    CHECK_EQ(tfos__auth_mac(SECRET, nonce, mac), 0);
    send_kv(q, TFOS_MSG_QUERY, 1, "mac", mac);
    CHECK_EQ(wait_frame(c, q, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STATUS);
    char json[4096];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "json", json, sizeof json), 0);
    CHECK(strstr(json, "\"state\": \"reserving\""));
    CHECK(strstr(json, "\"state\": \"waiting\""));
    tfos__link_close(q);
    tfos_coord_close(c);
}

/* Register every node of `c` on a[] and have them report STARTED (all when
 * nstarted < 0, else the first nstarted). */
static void form_cluster(tfos_coord *c, tfos__link **a, int n, int nstarted)
{
    for (int i = 0; i < n; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    for (int i = 0; i < n; i++) {
        tfos__frame f;
        CHECK_EQ(wait_frame(c, a[i], &f, 2000), 0);
        CHECK_EQ(f.type, TFOS_MSG_SPEC);
        tfos__link_consume(a[i]);
        if (nstarted < 0 || i < nstarted)
            send_kv(a[i], TFOS_MSG_STARTED, 1, "pid", "999");
    }
    steps(c, 30);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
}

static void end_feed(void)
{
    /* ps:0, worker:0 (running), worker:1 (registered, not started yet) */
    tfos_coord *c = open_coord(2, 1, 10, 30);
    tfos__link *a[3];
    tfos__frame f;
    form_cluster(c, a, 3, 2);
    tfos_coord_end_feed(c);
    CHECK_EQ(wait_frame(c, a[1], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_END_FEED);
    CHECK_EQ(f.len, 0);
    tfos__link_consume(a[1]);
    CHECK_EQ(wait_frame(c, a[0], &f, 200), TFOS_ETIMEDOUT); /* ps nodes have no feed */
    CHECK_EQ(wait_frame(c, a[2], &f, 50), TFOS_ETIMEDOUT);  /* its program has not started */
    /* once it runs, a second call reaches it too (agents ignore repeats) */
    send_kv(a[2], TFOS_MSG_STARTED, 1, "pid", "1000");
    steps(c, 30);
    tfos_coord_end_feed(c);
    CHECK_EQ(wait_frame(c, a[2], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_END_FEED);
    tfos__link_consume(a[2]);
    CHECK_EQ(wait_frame(c, a[1], &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_END_FEED);
    tfos__link_consume(a[1]);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
    for (int i = 0; i < 3; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);
}

/* Connect and register as executor `id` with an executor_key line. */
static void do_register_key(tfos_coord *c, tfos__link **conn, int id, int port, const char *key)
{
    char mac[TFOS_MAC_HEX_LEN + 1], idbuf[16], portbuf[16];
    greet(c, conn, SECRET, mac);
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    send_kv(*conn, TFOS_MSG_REGISTER, 6, "mac", mac, "executor_id", idbuf, "host", "127.0.0.1", "port", portbuf,
            "pid", "4242", "executor_key", key);
}

/* A Spark node's agent registers its executor's key; the status JSON
 * gives it (a feed task on an executor without a node asks whether its
 * own node ended, not any node of its host); an agent without one shows
 * "", and a key that is not a plain name is refused. */
static void executor_key_in_status(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a, *b, *bad;
    do_register_key(c, &bad, 0, 5000, "12 34\"");
    expect_error(c, bad, "executor_key");
    tfos__link_close(bad);
    do_register_key(c, &a, 0, 5000, "31337");
    do_register(c, &b, 1, SECRET, 5001);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, a, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"executor_id\": 0, \"job\": \"worker\", \"index\": 0, \"host\": \"127.0.0.1\", "
                     "\"executor_key\": \"31337\", "));
    CHECK(strstr(js, "\"index\": 1, \"host\": \"127.0.0.1\", \"executor_key\": \"\", "));
    free(js);
    tfos__link_close(a);
    tfos__link_close(b);
    tfos_coord_close(c);
}

static void tensorboard_port(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a, *b, *bad;
    do_register_tb(c, &bad, 0, SECRET, 5000, "http");
    expect_error(c, bad, "tb_port");
    tfos__link_close(bad);
    do_register_tb(c, &a, 0, SECRET, 5000, "6006");
    do_register(c, &b, 1, SECRET, 5001); /* an agent that does not know tb_port */
    tfos__frame f;
    CHECK_EQ(wait_frame(c, a, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos_node_info ni;
    CHECK_EQ(tfos_coord_node(c, 0, &ni), 0);
    CHECK_EQ(ni.tb_port, 6006);
    CHECK_EQ(tfos_coord_node(c, 1, &ni), 0);
    CHECK_EQ(ni.tb_port, 0);
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"pid\": 0, \"exit_code\": -1, \"exit\": \"\", \"tensorboard_port\": 6006, \"feed\": null, "
                     "\"report\": null, \"report_age_s\": null, \"start\": {"));
    CHECK(strstr(js, "\"tensorboard_port\": 0, \"feed\": null"));
    free(js);
    /* heartbeats carry the node's ring counters and its program's report;
     * a report that does not check is dropped, the last good one stays */
    send_kv(a, TFOS_MSG_HEARTBEAT, 9, "ring_cap", "4096", "ring_used", "1024", "rows_in", "500", "rows_out", "120",
            "wait_data_ns", "0", "wait_room_ns", "0", "feed_ended", "0", "report", "step=3 loss=0.5",
            "report_age_ms", "200");
    steps(c, 50);
    send_kv(a, TFOS_MSG_HEARTBEAT, 4, "rows_in", "600", "rows_out", "130", "report", "step=4 \"}],\"x\":{\"=1",
            "report_age_ms", "0");
    steps(c, 50);
    CHECK_EQ(tfos_coord_node(c, 0, &ni), 0);
    CHECK(ni.has_feed && ni.rows_in == 600 && ni.rows_out == 130);
    js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"feed\": {\"rows_written\": 600, \"rows_consumed\": 130, \"rows_buffered\": 470, "
                     "\"ring_bytes\": 4096, \"ring_used\": 1024, \"ring_fill\": 0.250, \"wait_data\": 0.000, "));
    CHECK(strstr(js, "\"report\": {\"step\": 3, \"loss\": 0.5}, \"report_age_s\": 0."));
    CHECK(!strstr(js, "\"x\""));
    free(js);
    tfos__link_close(a);
    tfos__link_close(b);
    tfos_coord_close(c);
}

/* An ABORT from a raw client; returns its answer's type (STATUS or ERROR). */
static int send_abort(tfos_coord *c, const char *secret, const char *id, const char *msg1, const char *msg2)
{
    tfos__link *q;
    char mac[TFOS_MAC_HEX_LEN + 1];
    greet(c, &q, secret, mac);
    if (msg2)
        send_kv(q, TFOS_MSG_ABORT, 4, "mac", mac, "executor_id", id, "message", msg1, "message", msg2);
    else
        send_kv(q, TFOS_MSG_ABORT, 3, "mac", mac, "executor_id", id, "message", msg1);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, q, &f, 2000), 0);
    int type = f.type;
    if (type == TFOS_MSG_STATUS) {
        static char json[8192];
        CHECK_EQ(tfos__kv_str(f.payload, f.len, "json", json, sizeof json), 0);
        CHECK(strstr(json, "\"failure\": "));
    }
    tfos__link_consume(q);
    CHECK_EQ(wait_frame(c, q, &f, 2000), TFOS_ECLOSED); /* then the coordinator hangs up */
    tfos__link_close(q);
    return type;
}

static void abort_report(void)
{
    /* while reserving: the registered agents are told, the cluster fails */
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a;
    do_register(c, &a, 0, SECRET, 5000);
    steps(c, 20);
    CHECK_EQ(send_abort(c, "not-the-secret", "1", "boom", NULL), TFOS_MSG_ERROR);
    CHECK(strstr(logbuf, "rejected abort report"));
    CHECK_EQ(send_abort(c, SECRET, "2", "boom", NULL), TFOS_MSG_ERROR); /* out of range */
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RESERVING);
    CHECK_STR(tfos_coord_failure(c), "");
    CHECK_EQ(send_abort(c, SECRET, "1", "ImportError: no module named tensorflow", "  at line 3"),
             TFOS_MSG_STATUS);
    expect_error(c, a, "worker:1 (executor 1) could not start: ImportError");
    CHECK_STR(tfos_coord_failure(c), "worker:1 (executor 1) could not start: ImportError: no module named "
              "tensorflow\n  at line 3");
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_EFAILED);
    CHECK(strstr(logbuf, "could not start: ImportError: no module named tensorflow; stopping the cluster"));
    tfos__link_close(a);
    CHECK(wait_state(c, TFOS_COORD_FAILED, 7000));
    tfos_coord_close(c);

    /* while running: every agent is asked to stop */
    c = open_coord(1, 1, 10, 30);
    tfos__link *b[2];
    form_cluster(c, b, 2, -1);
    CHECK_EQ(send_abort(c, SECRET, "1", "late", NULL), TFOS_MSG_STATUS);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_STOPPING);
    for (int i = 0; i < 2; i++) {
        tfos__frame f;
        CHECK_EQ(wait_frame(c, b[i], &f, 2000), 0);
        CHECK_EQ(f.type, TFOS_MSG_STOP);
        tfos__link_consume(b[i]);
        send_kv(b[i], TFOS_MSG_EXITED, 2, "code", "143", "desc", "signal 15 (Terminated)");
    }
    CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
    CHECK_STR(tfos_coord_failure(c), "worker:0 (executor 1) could not start: late");
    tfos_failure fi;
    CHECK_EQ(tfos_coord_failure_info(c, &fi), 0);
    CHECK_EQ(fi.cause, TFOS_CAUSE_SETUP); /* a node task's abort: the node, not its program */
    for (int i = 0; i < 2; i++)
        tfos__link_close(b[i]);
    tfos_coord_close(c);
}

/* A node that fails by itself is a failure whatever the timing (issue 35:
 * with a ps that could not start, `tfos run` ended 0 or 1 as the workers
 * finished before or after it): also once the trainers finished and the
 * rest is being stopped. One that ends because it was stopped is not. */
static void failure_while_stopping(void)
{
    for (int stopped = 0; stopped <= 1; stopped++) {
        tfos_policy *pol;
        CHECK_EQ(tfos_policy_open(&pol, 3), 0);
        tfos_coord_opts o = {.layout = {.num_ps = 1, .num_workers = 1}, .secret = SECRET, .reservation_timeout = 10,
                             .stop_grace = 1, .heartbeat_timeout = 30, .policy = pol};
        tfos_coord *c;
        CHECK_EQ(tfos_coord_open(&c, &o), 0);
        tfos__link *a[2];
        form_cluster(c, a, 2, -1);
        send_kv(a[1], TFOS_MSG_EXITED, 4, "code", "0", "kind", "exit", "desc", "exit code 0", "stopped", "0");
        tfos__frame f;
        CHECK_EQ(wait_frame(c, a[0], &f, 2000), 0);
        CHECK_EQ(f.type, TFOS_MSG_STOP); /* the worker finished: the ps is told to stop */
        tfos__link_consume(a[0]);
        CHECK_EQ(tfos_coord_state(c), TFOS_COORD_STOPPING);
        /* ... and its report comes: it could not start (exit 127, no output
         * of its own), or it was stopped */
        send_kv(a[0], TFOS_MSG_EXITED, 4, "code", stopped ? "143" : "127", "kind", stopped ? "signal" : "start",
                "desc", stopped ? "signal 15 (Terminated)" : "could not start 'python9': No such file or directory",
                "stopped", stopped ? "1" : "0");
        int end = 0;
        int64_t deadline = tfos__now_ms() + 3000;
        while (end < TFOS_COORD_DONE && tfos__now_ms() < deadline)
            end = tfos_coord_step(c, 5);
        if (stopped) {
            CHECK_EQ(end, TFOS_COORD_DONE);
            CHECK_STR(tfos_coord_failure(c), "");
            CHECK_EQ(tfos_policy_count(pol), 0);
        } else {
            CHECK_EQ(end, TFOS_COORD_FAILED);
            /* said once, without a "last lines" block it does not have */
            CHECK_STR(tfos_coord_failure(c), "ps:0 (executor 0, host 127.0.0.1) failed: could not start 'python9': "
                                             "No such file or directory");
            tfos_failure fi;
            CHECK_EQ(tfos_coord_failure_info(c, &fi), 0);
            CHECK_EQ(fi.cause, TFOS_CAUSE_START);
            CHECK_EQ(fi.exit_code, 127);
            CHECK_EQ(tfos_coord_decision(c), TFOS_RAISE); /* never retried */
            CHECK(strstr(tfos_policy_verdict(pol), "a program that cannot start is not retried"));
        }
        for (int i = 0; i < 2; i++)
            tfos__link_close(a[i]);
        tfos_coord_close(c);
        tfos_policy_close(pol);
    }
}

/* Several nodes fail at once: the failure reported is the one that
 * happened first by its agent's dates (the time the program caught it, else
 * the end its agent saw), not the one whose report came first; the policy
 * decides on it once. A node stopped by the cluster, or one that failed
 * after, does not take its place. */
static void first_failure_is_reported(void)
{
    tfos_policy *pol;
    CHECK_EQ(tfos_policy_open(&pol, 3), 0);
    tfos_coord_opts o = {.layout = {.num_workers = 4}, .secret = SECRET, .reservation_timeout = 10,
                         .stop_grace = 1, .heartbeat_timeout = 30, .policy = pol};
    tfos_coord *c;
    CHECK_EQ(tfos_coord_open(&c, &o), 0);
    loglen = 0;
    tfos__link *a[4];
    form_cluster(c, a, 4, -1);
    /* worker:0's collective broke when worker:1 ended: its report comes first */
    send_kv(a[0], TFOS_MSG_EXITED, 9, "code", "1", "kind", "exit", "desc", "exit code 1", "stopped", "0",
            "ended_at", "1000.500000", "raised_at", "1000.450000", "tail", "Traceback (most recent call last):",
            "tail", "  File \"t.py\", line 9, in <module>", "tail", "RuntimeError: Connection closed by peer");
    steps(c, 30);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_STOPPING);
    CHECK(strstr(tfos_coord_failure(c), "worker:0"));
    CHECK_EQ(tfos_policy_count(pol), 1);
    CHECK_EQ(tfos_policy_attempt(pol), 2);
    /* worker:3 was stopped by the cluster: its earlier end date is not a failure of its own */
    send_kv(a[3], TFOS_MSG_EXITED, 5, "code", "137", "kind", "signal", "desc", "signal 9 (Killed)", "stopped", "1",
            "ended_at", "1000.100000");
    /* worker:2 failed by itself, but after worker:0 */
    send_kv(a[2], TFOS_MSG_EXITED, 6, "code", "1", "kind", "exit", "desc", "exit code 1", "stopped", "0",
            "ended_at", "1000.700000", "tail", "OSError: later");
    steps(c, 30);
    CHECK(strstr(tfos_coord_failure(c), "worker:0 (executor 0"));
    /* worker:1 raised first; its agent was asked to stop the program it ran
     * by then, which its catch time before worker:0's shows was failing */
    send_kv(a[1], TFOS_MSG_EXITED, 9, "code", "1", "kind", "exit", "desc", "exit code 1", "stopped", "1",
            "raised_at", "1000.200000", "ended_at", "1000.520000", "tail", "Traceback (most recent call last):",
            "tail", "  File \"t.py\", line 5, in <module>", "tail", "ValueError: rank one cannot go on");
    int end = 0;
    int64_t deadline = tfos__now_ms() + 3000;
    while (end < TFOS_COORD_DONE && tfos__now_ms() < deadline)
        end = tfos_coord_step(c, 5);
    CHECK_EQ(end, TFOS_COORD_FAILED);
    const char *fail = tfos_coord_failure(c);
    CHECK(!strncmp(fail, "worker:1 (executor 1, host 127.0.0.1, pid 999) failed: exit code 1", 66));
    CHECK(strstr(fail, "ValueError: rank one cannot go on"));
    tfos_failure fi;
    CHECK_EQ(tfos_coord_failure_info(c, &fi), 0);
    CHECK_STR(fi.node, "worker:1");
    CHECK_STR(fi.exc_type, "ValueError");
    CHECK(fi.time > 1000.19 && fi.time < 1000.21); /* dated when it failed */
    /* one decision, on worker:1's failure: the first retracted */
    CHECK_EQ(tfos_policy_count(pol), 1);
    CHECK_STR(tfos_policy_record(pol, 0)->failure.node, "worker:1");
    CHECK_EQ(tfos_policy_attempt(pol), 2);
    CHECK_EQ(tfos_coord_decision(c), TFOS_RESTART);
    CHECK(strstr(logbuf, "worker:1 (executor 1, host 127.0.0.1, pid 999) failed: exit code 1, 0.250 s before "
                         "worker:0's failure, which was reported first"));
    for (int i = 0; i < 4; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);
    tfos_policy_close(pol);
}

/* A node killed by a signal (SIGKILL, the OOM killer) writes no catch time;
 * its peer catches the broken collective a moment after the kill, which can
 * be before the killed node's agent saw its end. Ends are compared with
 * ends: the kill stays the failure reported. */
static void a_kill_stays_first(void)
{
    tfos_coord *c = open_coord(2, 0, 10, 30);
    tfos__link *a[2];
    form_cluster(c, a, 2, -1);
    send_kv(a[1], TFOS_MSG_EXITED, 5, "code", "137", "kind", "signal", "desc", "signal 9 (Killed)", "stopped", "0",
            "ended_at", "1000.300000");
    steps(c, 30);
    send_kv(a[0], TFOS_MSG_EXITED, 7, "code", "1", "kind", "exit", "desc", "exit code 1", "stopped", "0",
            "raised_at", "1000.280000", "ended_at", "1000.350000", "tail", "RuntimeError: Connection closed by peer");
    int end = 0;
    int64_t deadline = tfos__now_ms() + 3000;
    while (end < TFOS_COORD_DONE && tfos__now_ms() < deadline)
        end = tfos_coord_step(c, 5);
    CHECK_EQ(end, TFOS_COORD_FAILED);
    CHECK(!strncmp(tfos_coord_failure(c), "worker:1 (executor 1, host 127.0.0.1, pid 999) failed: signal 9", 63));
    CHECK(!strstr(logbuf, "reported first"));
    for (int i = 0; i < 2; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);
}

/* The kinds an agent reports map to the causes the policy decides on: a
 * program that cannot start (never retried) apart from a node that could
 * not be set up (an abort from a Spark node task, a failed fork: retried). */
static void start_kinds(void)
{
    static const struct {
        const char *kind, *code;
        int cause, decision;
    } cases[] = {
        {"start", "127", TFOS_CAUSE_START, TFOS_RAISE},
        {"setup", "1", TFOS_CAUSE_SETUP, TFOS_RESTART},
        {"exit", "2", TFOS_CAUSE_EXIT, TFOS_RESTART},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfos_policy *pol;
        CHECK_EQ(tfos_policy_open(&pol, 3), 0);
        tfos_coord_opts o = {.layout = {.num_workers = 1}, .secret = SECRET, .reservation_timeout = 10,
                             .stop_grace = 1, .heartbeat_timeout = 30, .policy = pol};
        tfos_coord *c;
        CHECK_EQ(tfos_coord_open(&c, &o), 0);
        tfos__link *a;
        form_cluster(c, &a, 1, -1);
        send_kv(a, TFOS_MSG_EXITED, 4, "code", cases[i].code, "kind", cases[i].kind, "desc", "why", "stopped", "0");
        CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
        tfos_failure fi;
        CHECK_EQ(tfos_coord_failure_info(c, &fi), 0);
        CHECK_EQ(fi.cause, cases[i].cause);
        CHECK_EQ(tfos_coord_decision(c), cases[i].decision);
        char *js = tfos_coord_status_json(c);
        char want[64];
        snprintf(want, sizeof want, "\"cause\": \"%s\"", tfos_cause_name(cases[i].cause));
        CHECK(strstr(js, want));
        free(js);
        tfos__link_close(a);
        tfos_coord_close(c);
        tfos_policy_close(pol);
    }
}

/* Run fn(addr) in a child while this process steps the coordinator (when c
 * is not NULL); the child's exit status is -rc of its call, and what it
 * writes to its pipe lands in out. */
static int in_child(tfos_coord *c, const char *addr, int (*fn)(const char *addr, int wfd), char *out,
                    size_t outlen)
{
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(30);
        close(pfd[0]);
        _exit(-fn(addr, pfd[1]));
    }
    close(pfd[1]);
    int st = 0;
    int64_t deadline = tfos__now_ms() + 20000;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        CHECK(tfos__now_ms() < deadline);
        if (c)
            tfos_coord_step(c, 5);
        else
            usleep(5000);
    }
    size_t got = 0;
    ssize_t r;
    while (got + 1 < outlen && (r = read(pfd[0], out + got, outlen - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(pfd[0]);
    CHECK(WIFEXITED(st));
    return -WEXITSTATUS(st);
}

static int child_query(const char *addr, int wfd)
{
    char *json = NULL;
    int rc = tfos_query_status(addr, SECRET, 5000, &json);
    if (rc == 0) {
        CHECK(write(wfd, json, strlen(json)) == (ssize_t)strlen(json));
        free(json);
    }
    return rc;
}

static int child_query_wrong_secret(const char *addr, int wfd)
{
    (void)wfd;
    char *json = (char *)"untouched";
    int rc = tfos_query_status(addr, "not-the-secret", 5000, &json);
    CHECK(json == NULL);
    return rc;
}

static int child_abort_long(const char *addr, int wfd)
{
    (void)wfd;
    /* 200 KB over three lines, ending inside a 2-byte UTF-8 character at
     * every possible cut: more than a frame holds */
    size_t n = 200000;
    char *msg = malloc(n + 1);
    CHECK(msg);
    memcpy(msg, "Traceback (most recent call last):\n  File x\n", 44);
    for (size_t i = 44; i + 1 < n; i += 2)
        memcpy(msg + i, "\xc3\xa9", 2); /* e-acute */
    msg[n - 1] = 'Z';
    msg[n] = '\0';
    int rc = tfos_report_abort(addr, SECRET, 0, msg, 5000);
    free(msg);
    return rc;
}

static int child_abort_timeout(const char *addr, int wfd)
{
    (void)wfd;
    int64_t t0 = tfos__now_ms();
    int rc = tfos_report_abort(addr, SECRET, 0, "x", 300);
    CHECK(tfos__now_ms() - t0 < 3000);
    return rc;
}

static int child_bad_addr(const char *addr, int wfd)
{
    (void)addr;
    (void)wfd;
    char *json;
    CHECK_EQ(tfos_query_status("no-port-here", SECRET, 1000, &json), TFOS_EINVAL);
    return tfos_report_abort("127.0.0.1:notaport", SECRET, 0, "x", 1000);
}

/* Feed turns through the coordinator (core/turns.h): chief:0 (node 0)
 * asks for its second partition before worker:0 (node 1), which has read
 * nothing yet (no heartbeat said so), has begun as many. */
static int child_turns(const char *addr, int wfd)
{
    static const int nodes[] = {0, 1};
    int go = -1;
    char *json = NULL;
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, nodes, 2, 0, 0, 5000, &go, NULL), 0);
    CHECK_EQ(go, 1); /* a first partition always goes */
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, nodes, 2, 1, 1, 5000, &go, NULL), 0);
    CHECK_EQ(go, 1);
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, nodes, 2, 2, 0, 5000, &go, &json), 0);
    CHECK_EQ(go, 0);
    CHECK(strstr(json, "\"behind\": 1, \"behind_begun\": 1, \"behind_reads\": false, \"unbegun\": 1"));
    free(json);
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, nodes, 2, 3, 1, 5000, &go, NULL), 0);
    CHECK_EQ(go, 1);
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, nodes, 2, 2, 0, 5000, &go, NULL), 0);
    CHECK_EQ(go, 1); /* 2 : 2 */
    /* a node id the cluster does not have is refused, naming what */
    static const int stranger[] = {0, 9};
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-7", 4, 4, stranger, 2, 0, 0, 5000, &go, NULL), TFOS_EINVAL);
    CHECK_EQ(tfos_feed_turn(addr, "not-the-secret", "stage-7", 4, 4, nodes, 2, 0, 0, 5000, &go, NULL), TFOS_EAUTH);
    CHECK(write(wfd, "ok", 2) == 2);
    return 0;
}

/* The coordinator hears from heartbeats that a node's program reads no
 * more (reader_gone: terminate(), close, or its end): it is not waited
 * for. Both nodes have begun a partition and read it whole; node 0 asks
 * for two more. */
static int child_turn_first(const char *addr, int wfd)
{
    static const int nodes[] = {0, 1};
    int go = -1, go2 = -1;
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 0, 0, 5000, &go, NULL), 0);
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 1, 1, 5000, &go2, NULL), 0);
    CHECK(write(wfd, go && go2 ? "both" : "held", 4) == 4);
    return 0;
}

static int child_turn_two_more(const char *addr, int wfd)
{
    static const int nodes[] = {0, 1};
    int go = -1;
    char *json = NULL;
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 2, 0, 5000, &go, NULL), 0);
    CHECK_EQ(go, 1); /* one ahead of a node that reads */
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 3, 0, 5000, &go, &json), 0);
    CHECK(strstr(json, "\"behind_reads\": true"));
    free(json);
    CHECK(write(wfd, go == 1 ? "goes" : "held", 4) == 4);
    return 0;
}

static int child_turn_again(const char *addr, int wfd)
{
    static const int nodes[] = {0, 1};
    int go = -1;
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 3, 0, 5000, &go, NULL), 0);
    CHECK(write(wfd, go == 1 ? "goes" : "held", 4) == 4);
    return 0;
}

/* A coordinator of two registered nodes (their agents: *a, *b) whose
 * heartbeats said they have read nothing, and a job's first two asks:
 * node 0's partition 0 and node 1's partition 1 (both go). */
static tfos_coord *two_nodes_first_asks(tfos__link **a, tfos__link **b)
{
    static char out[256];
    tfos_coord *c = open_coord(2, 0, 10, 30);
    do_register(c, a, 0, SECRET, 5000);
    do_register(c, b, 1, SECRET, 5001);
    send_kv(*a, TFOS_MSG_HEARTBEAT, 2, "rows_in", "0", "rows_out", "0");
    send_kv(*b, TFOS_MSG_HEARTBEAT, 2, "rows_in", "0", "rows_out", "0");
    steps(c, 50);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turn_first, out, sizeof out), 0);
    CHECK_STR(out, "both"); /* the job's first asks take the counts above as its start */
    return c;
}

static void a_node_whose_reader_is_gone_is_not_waited_for(void)
{
    static char out[256];
    tfos__link *a, *b;
    tfos_coord *c = two_nodes_first_asks(&a, &b);
    send_kv(a, TFOS_MSG_HEARTBEAT, 2, "rows_in", "100", "rows_out", "100");
    send_kv(b, TFOS_MSG_HEARTBEAT, 3, "rows_in", "100", "rows_out", "100", "reader_gone", "0");
    steps(c, 50);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turn_two_more, out, sizeof out), 0);
    CHECK_STR(out, "held"); /* node 1 reads, nothing unread: it will ask for its next */
    send_kv(b, TFOS_MSG_HEARTBEAT, 3, "rows_in", "100", "rows_out", "100", "reader_gone", "1");
    steps(c, 50);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turn_again, out, sizeof out), 0);
    CHECK_STR(out, "goes"); /* its program reads no more: its executor's tasks may never ask again */
    tfos__link_close(a);
    tfos__link_close(b);
    tfos_coord_close(c);
}

/* Frames on conn until one of `type` (1) or none within timeout_ms (0). */
static int saw_frame(tfos_coord *c, tfos__link *conn, int type, int timeout_ms)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    for (;;) {
        tfos__frame f;
        int left = (int)(deadline - tfos__now_ms());
        if (left <= 0 || wait_frame(c, conn, &f, left) != 0)
            return 0;
        int t = f.type;
        tfos__link_consume(conn);
        if (t == type)
            return 1;
    }
}

static int child_turn_held(const char *addr, int wfd)
{
    static const int nodes[] = {0, 1};
    int go = -1;
    char *json = NULL;
    CHECK_EQ(tfos_feed_turn(addr, SECRET, "stage-9", 10, 10, nodes, 2, 3, 0, 5000, &go, &json), 0);
    CHECK_EQ(go, 0);
    CHECK(strstr(json, "\"behind\": 1, \"behind_begun\": 1, \"behind_reads\": false, \"unbegun\": 7, "
                       "\"asked\": true"));
    free(json);
    CHECK(write(wfd, "held", 4) == 4);
    return 0;
}

/* A node held for one that no heartbeat has said reads this job (they come
 * once a second; a job may be over sooner) has that node's agent sent
 * PROGRESS: its heartbeat, sent at once, says it reads, and the asking
 * node goes one ahead of it. The asking node's agent is sent nothing. */
static void a_node_not_heard_to_read_is_asked(void)
{
    static char out[256];
    tfos__link *a, *b;
    tfos_coord *c = two_nodes_first_asks(&a, &b);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turn_held, out, sizeof out), 0);
    CHECK_STR(out, "held");
    CHECK(saw_frame(c, b, TFOS_MSG_PROGRESS, 2000));
    CHECK(!saw_frame(c, a, TFOS_MSG_PROGRESS, 100));
    send_kv(b, TFOS_MSG_HEARTBEAT, 2, "rows_in", "300", "rows_out", "100"); /* the agent's answer */
    steps(c, 50);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turn_again, out, sizeof out), 0);
    CHECK_STR(out, "goes");
    tfos__link_close(a);
    tfos__link_close(b);
    tfos_coord_close(c);
}

static void feed_turns(void)
{
    static char out[256];
    tfos_coord *c = open_coord(2, 0, 10, 30);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_turns, out, sizeof out), 0);
    CHECK_STR(out, "ok");
    CHECK(strstr(logbuf, "invalid feed turn request: nodes is not a list of this cluster's node ids"));
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RESERVING); /* asking is not the client's lease, nor a failure */
    tfos_coord_close(c);
}

static void clients(void)
{
    static char out[1 << 16];
    tfos_coord *c = open_coord(1, 0, 10, 30);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_query, out, sizeof out), 0);
    CHECK(strstr(out, "\"state\": \"reserving\""));
    CHECK(strstr(out, "\"failure\": \"\""));
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_query_wrong_secret, out, sizeof out), TFOS_EAUTH);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_abort_long, out, sizeof out), 0);
    const char *fail = tfos_coord_failure(c);
    const char *want = "worker:0 (executor 0) could not start: Traceback (most recent call last):\n  File x\n"
                       "\xc3\xa9\xc3\xa9";
    CHECK(!strncmp(fail, want, strlen(want)));
    size_t fl = strlen(fail);
    CHECK(fl > 4000 && fl < 8192);
    CHECK(!strchr(fail, 'Z'));
    /* cut between characters, never inside one */
    CHECK((unsigned char)fail[fl - 2] == 0xc3 && (unsigned char)fail[fl - 1] == 0xa9);
    CHECK(wait_state(c, TFOS_COORD_FAILED, 7000));
    tfos_coord_close(c);

    c = open_coord(2, 0, 10, 30);
    tfos__link *a;
    do_register(c, &a, 1, SECRET, 5001);
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_abort_long, out, sizeof out), 0);
    expect_error(c, a, "could not start");
    tfos__link_close(a);
    CHECK(wait_state(c, TFOS_COORD_FAILED, 7000));
    /* over, the coordinator still tells node tasks why */
    CHECK_EQ(in_child(c, tfos_coord_address(c), child_query, out, sizeof out), 0);
    CHECK(strstr(out, "\"failure\": \"worker:0 (executor 0) could not start: Traceback (most recent call "
                      "last):\\u000a"));
    CHECK(strstr(out, "\"state\": \"failed\""));
    tfos_coord_close(c);

    /* a listener that never greets: the wait is bounded */
    int lfd, port;
    CHECK_EQ(tfos__tcp_listen("127.0.0.1", 0, 8, &lfd, &port), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    CHECK_EQ(in_child(NULL, addr, child_abort_timeout, out, sizeof out), TFOS_ETIMEDOUT);
    close(lfd);
    /* nobody listens there any more: refused at once */
    CHECK_EQ(in_child(NULL, addr, child_abort_timeout, out, sizeof out), TFOS_ESYS);
    CHECK_EQ(in_child(NULL, addr, child_bad_addr, out, sizeof out), TFOS_EINVAL);
}


/* Expect a DRAIN frame on conn within timeout_ms, or the drain's probe
 * (PROGRESS); its step (LLONG_MIN for the probe). */
static long long expect_drain(tfos_coord *c, tfos__link *conn, int timeout_ms)
{
    tfos__frame f;
    CHECK_EQ(wait_frame(c, conn, &f, timeout_ms), 0);
    CHECK(f.type == TFOS_MSG_DRAIN || f.type == TFOS_MSG_PROGRESS);
    long long step = LLONG_MIN;
    if (f.type == TFOS_MSG_DRAIN)
        CHECK_EQ(tfos__kv_int(f.payload, f.len, "step", -1, LLONG_MAX, &step), 0);
    tfos__link_consume(conn);
    return step;
}

static void report(tfos__link *conn, const char *text, const char *age_ms)
{
    send_kv(conn, TFOS_MSG_HEARTBEAT, 3, "rows_in", "0", "report", text, "report_age_ms", age_ms);
}

static void drain(void)
{
    /* ps:0, worker:0, worker:1; worker:0 climbs 100 steps/s (200 now),
     * worker:1 10 steps/s (195 now): the drain step is past worker:0's
     * estimate by 1 s of its steps (the probe, unanswered, adds 0.5 s) */
    tfos_coord *c = open_coord(2, 1, 10, 30);
    tfos__link *a[3];
    form_cluster(c, a, 3, 3);
    CHECK_EQ(tfos_coord_drain_step(c), -2);
    report(a[1], "step=100 loss=1", "1000");
    report(a[1], "loss=0.5 step=200", "0");
    report(a[2], "step=190", "500");
    report(a[2], "step=195", "0");
    steps(c, 30);
    CHECK_EQ(tfos_coord_drain(c, "test notice", 1, 0), 0);
    CHECK_EQ(tfos_coord_drain(c, "again", 1, 0), TFOS_EINVAL); /* one at a time */
    CHECK_EQ(expect_drain(c, a[1], 2000), LLONG_MIN);             /* the probe first */
    CHECK_EQ(expect_drain(c, a[2], 2000), LLONG_MIN);
    long long step = expect_drain(c, a[1], 2000);
    CHECK(step >= 200 + 150 + 1 && step <= 200 + 250 + 1);
    CHECK_EQ(expect_drain(c, a[2], 2000), step);                 /* the same step for every rank */
    CHECK_EQ(tfos_coord_drain_step(c), step);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, a[0], &f, 50), TFOS_ETIMEDOUT);       /* ps nodes are not drained */
    CHECK(strstr(logbuf, "checkpoint at step"));
    /* worker:0 checkpoints and ends; worker:1 ignores it: the grace (1 s) ends */
    send_kv(a[1], TFOS_MSG_EXITED, 3, "code", "0", "kind", "exit", "stopped", "0");
    for (int i = 0; i < 3; i += 2) { /* the stop, answered */
        CHECK_EQ(wait_frame(c, a[i], &f, 3000), 0);
        CHECK_EQ(f.type, TFOS_MSG_STOP);
        tfos__link_consume(a[i]);
        send_kv(a[i], TFOS_MSG_EXITED, 3, "code", "143", "kind", "signal", "stopped", "1");
    }
    CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
    CHECK(!tfos_coord_drained(c));
    CHECK(strstr(tfos_coord_failure(c), "the grace of 1 s ended with worker:1 still running"));
    for (int i = 0; i < 3; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);

    /* every rank ends after its checkpoint: DONE and drained; ps stopped */
    c = open_coord(2, 1, 10, 30);
    form_cluster(c, a, 3, 3);
    report(a[1], "step=7", "1000");
    report(a[2], "step=7", "1000");
    steps(c, 30);
    CHECK_EQ(tfos_coord_drain(c, "test notice", 30, 0), 0);
    for (int i = 1; i < 3; i++) {
        CHECK_EQ(expect_drain(c, a[i], 2000), LLONG_MIN);
        report(a[i], "step=8", "0"); /* the probe's answer: no wait for its deadline */
    }
    long long first = 0;
    for (int i = 1; i < 3; i++) {
        long long d = expect_drain(c, a[i], 2000); /* 8, 1 step/s: + 1 s of steps + 1 */
        CHECK(d >= 10 && d <= 11);
        CHECK(i == 1 || d == first);
        first = d;
        send_kv(a[i], TFOS_MSG_EXITED, 3, "code", "0", "kind", "exit", "stopped", "0");
    }
    CHECK_EQ(wait_frame(c, a[0], &f, 3000), 0);
    CHECK_EQ(f.type, TFOS_MSG_STOP);
    tfos__link_consume(a[0]);
    send_kv(a[0], TFOS_MSG_EXITED, 3, "code", "143", "kind", "signal", "stopped", "1");
    CHECK(wait_state(c, TFOS_COORD_DONE, 3000));
    CHECK(tfos_coord_drained(c));
    for (int i = 0; i < 3; i++)
        tfos__link_close(a[i]);
    tfos_coord_close(c);

    /* no program reported a step: stopped as before, unless forced (step -1) */
    for (int force = 0; force < 2; force++) {
        c = open_coord(1, 0, 10, 30);
        form_cluster(c, a, 1, 1);
        CHECK_EQ(tfos_coord_drain(c, "interrupted by signal 15", 30, force), 0);
        CHECK_EQ(expect_drain(c, a[0], 2000), LLONG_MIN); /* the probe (no report to wait for) */
        if (force) {
            CHECK_EQ(expect_drain(c, a[0], 2000), -1);
            CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
        } else {
            CHECK_EQ(wait_frame(c, a[0], &f, 2000), 0);
            CHECK_EQ(f.type, TFOS_MSG_STOP);
            CHECK_EQ(tfos_coord_drain_step(c), -2);
            CHECK(strstr(tfos_coord_failure(c), "interrupted by signal 15"));
        }
        tfos__link_close(a[0]);
        tfos_coord_close(c);
    }

    /* every program ends (exit 0) while the drain still probes: the notice's
     * signal reached them too; no step was sent, so nothing drained: stopped */
    c = open_coord(1, 0, 10, 30);
    form_cluster(c, a, 1, 1);
    report(a[0], "step=7", "1000");
    steps(c, 30);
    CHECK_EQ(tfos_coord_drain(c, "interrupted by signal 15", 30, 0), 0);
    CHECK_EQ(expect_drain(c, a[0], 2000), LLONG_MIN); /* the probe */
    send_kv(a[0], TFOS_MSG_EXITED, 3, "code", "0", "kind", "exit", "stopped", "0");
    CHECK(wait_state(c, TFOS_COORD_FAILED, 3000));
    CHECK(!tfos_coord_drained(c));
    CHECK_EQ(tfos_coord_drain_step(c), -2);
    CHECK_EQ(tfos_coord_failure_code(c), TFOS_ESTOPPED);
    CHECK(strstr(tfos_coord_failure(c), "interrupted by signal 15"));
    tfos__link_close(a[0]);
    tfos_coord_close(c);
}

/* The spec's bytes at N = 256: the ranks form (torch, JAX) costs each node
 * a constant, the full form (TF) grows with N. */
static unsigned long long spec_bytes_at(int form, int n, int *max_frame)
{
    tfos_coord_opts o = {.layout = {.num_workers = n}, .secret = SECRET, .reservation_timeout = 30,
                         .stop_grace = 1, .heartbeat_timeout = 30, .spec_form = form};
    tfos_coord *c;
    CHECK_EQ(tfos_coord_open(&c, &o), 0);
    tfos__link **a = calloc((size_t)n, sizeof *a);
    for (int i = 0; i < n; i++)
        do_register(c, &a[i], i, SECRET, 5000 + i);
    *max_frame = 0;
    for (int i = 0; i < n; i++) {
        tfos__frame f;
        CHECK_EQ(wait_frame(c, a[i], &f, 5000), 0);
        CHECK_EQ(f.type, TFOS_MSG_SPEC);
        if ((int)f.len > *max_frame)
            *max_frame = (int)f.len;
        if (form == TFOS_SPEC_RANKS) {
            long long rank, world;
            CHECK_EQ(tfos__kv_int(f.payload, f.len, "rank", 0, n, &rank), 0);
            CHECK_EQ(tfos__kv_int(f.payload, f.len, "world", 0, n, &world), 0);
            CHECK_EQ(rank, i);
            CHECK_EQ(world, n);
        }
        tfos__link_consume(a[i]);
    }
    char *js = tfos_coord_status_json(c);
    unsigned long long total = 0;
    const char *p = strstr(js, "\"spec_bytes\": ");
    CHECK(p);
    total = strtoull(p + 14, NULL, 10);
    CHECK(strstr(js, form == TFOS_SPEC_RANKS ? "\"spec_form\": \"ranks\"" : "\"spec_form\": \"full\""));
    free(js);
    for (int i = 0; i < n; i++)
        tfos__link_close(a[i]);
    free(a);
    tfos_coord_close(c);
    return total;
}

static void spec_bytes(void)
{
    int n = 256, max_ranks, max_full;
    unsigned long long ranks = spec_bytes_at(TFOS_SPEC_RANKS, n, &max_ranks);
    unsigned long long full = spec_bytes_at(TFOS_SPEC_FULL, n, &max_full);
    fprintf(stderr, "spec bytes at N=%d: ranks %llu (%llu/node, frame <= %d), full %llu (%llu/node)\n", n, ranks,
            ranks / (unsigned)n, max_ranks, full, full / (unsigned)n);
    CHECK(max_ranks < 256);                       /* O(1) per node */
    CHECK(ranks < 256ULL * (unsigned)n);
    CHECK(max_full > 20 * n);                    /* O(N) per node: every address */
    CHECK(full > 20ULL * (unsigned)n * (unsigned)n);
}

/* Standby nodes (an elastic run's capacity come back): counted while
 * connected, at most opts.standby of them, never part of the cluster; what
 * one sends after its registration is a protocol error; released on ask. */
static void standby(void)
{
    tfos_coord_opts o = {.layout = {.num_workers = 1}, .secret = SECRET, .reservation_timeout = 10,
                         .stop_grace = 1, .heartbeat_timeout = 30, .standby = 2};
    tfos_coord *c;
    CHECK_EQ(tfos_coord_open(&c, &o), 0);
    tfos__link *w, *sb[3];
    char mac[TFOS_MAC_HEX_LEN + 1];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "%d", 1 + i);
        greet(c, &sb[i], SECRET, mac);
        send_kv(sb[i], TFOS_MSG_REGISTER, 3, "mac", mac, "executor_id", id, "standby", "1");
        steps(c, 30);
    }
    CHECK_EQ(tfos__coord_standbys(c), 2);
    CHECK(tfos__coord_standby_seen(c, 1) && tfos__coord_standby_seen(c, 2) && !tfos__coord_standby_seen(c, 3));
    expect_error(c, sb[2], "a standby node is not wanted");
    /* they are not the cluster: it still waits for its one worker */
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RESERVING);
    do_register(c, &w, 0, SECRET, 5000);
    tfos__frame f;
    CHECK_EQ(wait_frame(c, w, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    tfos__link_consume(w);
    CHECK_EQ(tfos_coord_node_count(c), 1);
    /* a standby that says more is dropped; the other one is released */
    send_kv(sb[0], TFOS_MSG_HEARTBEAT, 0);
    steps(c, 50);
    CHECK_EQ(tfos__coord_standbys(c), 1);
    CHECK_EQ(wait_frame(c, sb[0], &f, 2000), TFOS_ECLOSED);
    tfos__coord_release_standbys(c);
    CHECK_EQ(tfos__coord_standbys(c), 0);
    CHECK_EQ(wait_frame(c, sb[1], &f, 2000), TFOS_ECLOSED);
    /* a coordinator that takes none refuses them */
    tfos_coord *c0 = open_coord(1, 0, 10, 30);
    tfos__link *x;
    greet(c0, &x, SECRET, mac);
    send_kv(x, TFOS_MSG_REGISTER, 3, "mac", mac, "executor_id", "1", "standby", "1");
    expect_error(c0, x, "a standby node is not wanted");
    tfos__link_close(x);
    tfos_coord_close(c0);
    for (int i = 0; i < 3; i++)
        tfos__link_close(sb[i]);
    tfos__link_close(w);
    tfos_coord_close(c);
}

static void send_exited(tfos__link *conn, int code, const char *desc)
{
    char cbuf[16];
    snprintf(cbuf, sizeof cbuf, "%d", code);
    send_kv(conn, TFOS_MSG_EXITED, 3, "code", cbuf, "desc", desc, "stopped", "0");
}

/* A frame of `type` on conn: its key's integer value (-1: no such key). */
static long long expect_kv(tfos_coord *c, tfos__link *conn, int type, const char *key)
{
    tfos__frame f;
    CHECK_EQ(wait_frame(c, conn, &f, 2000), 0);
    CHECK_EQ(f.type, type);
    long long v = -1;
    tfos__kv_int(f.payload, f.len, key, -1, 1 << 30, &v);
    tfos__link_consume(conn);
    return v;
}

static void register_join(tfos_coord *c, tfos__link **conn, const char *id)
{
    char mac[TFOS_MAC_HEX_LEN + 1];
    greet(c, conn, SECRET, mac);
    send_kv(*conn, TFOS_MSG_REGISTER, 6, "mac", mac, "executor_id", id, "host", "127.0.0.1", "port", "6000", "pid",
            "4343", "join", "1");
}

/* --grow-in-place at the coordinator: a worker registers with "join" into
 * the slot of one that left a running in-place cluster. It gets its spec
 * at the next generation; the members get their RESIZE only once it says
 * its program is ready (join_ready). Joins anywhere else are refused,
 * naming why; a joiner that ends after the others finished is no failure. */
static void join_in_place(void)
{
    tfos_coord_opts o = {.layout = {.num_workers = 3}, .secret = SECRET, .reservation_timeout = 10,
                         .stop_grace = 1, .heartbeat_timeout = 30, .spec_form = TFOS_SPEC_RANKS, .inplace_min = 2};
    tfos_coord *c;
    CHECK_EQ(tfos_coord_open(&c, &o), 0);
    tfos__link *a[3], *j, *x;
    form_cluster(c, a, 3, -1);
    register_join(c, &x, "0");
    expect_error(c, x, "executor 0 (worker:0) cannot join in place: that node has not left the cluster");
    tfos__link_close(x);
    send_exited(a[0], 137, "signal 9 (Killed)");
    for (int i = 1; i < 3; i++)
        CHECK_EQ(expect_kv(c, a[i], TFOS_MSG_RESIZE, "world"), 2);
    register_join(c, &x, "7");
    expect_error(c, x, "executor 7 cannot join: this cluster has 3 nodes");
    tfos__link_close(x);
    register_join(c, &j, "0");
    tfos__frame f;
    CHECK_EQ(wait_frame(c, j, &f, 2000), 0);
    CHECK_EQ(f.type, TFOS_MSG_SPEC);
    long long gen = 0, world = 0, rank = -1;
    CHECK_EQ(tfos__kv_int(f.payload, f.len, "generation", 1, 100, &gen), 0);
    CHECK_EQ(tfos__kv_int(f.payload, f.len, "world", 1, 100, &world), 0);
    CHECK_EQ(tfos__kv_int(f.payload, f.len, "rank", 0, 100, &rank), 0);
    CHECK(gen == 2 && world == 3 && rank == 1); /* executor 1 stays rank 0; executor order after it */
    tfos__link_consume(j);
    send_kv(j, TFOS_MSG_STARTED, 1, "pid", "999");
    /* the members go on untold until the joiner's program is ready */
    CHECK_EQ(wait_frame(c, a[1], &f, 150), TFOS_ETIMEDOUT);
    send_kv(j, TFOS_MSG_HEARTBEAT, 1, "join_ready", "1");
    CHECK_EQ(expect_kv(c, a[1], TFOS_MSG_RESIZE, "rank"), 0);
    CHECK_EQ(expect_kv(c, a[2], TFOS_MSG_RESIZE, "rank"), 2);
    char *js = tfos_coord_status_json(c);
    CHECK(strstr(js, "\"size\": 3"));
    free(js);
    /* the members finish; the joiner then fails: it came too late, no failure */
    send_exited(a[1], 0, "exit code 0");
    send_exited(a[2], 0, "exit code 0");
    steps(c, 30);
    CHECK_EQ(tfos_coord_state(c), TFOS_COORD_RUNNING);
    send_exited(j, 1, "exit code 1");
    for (int i = 0; i < 3; i++)
        tfos__link_close(a[i]);
    tfos__link_close(j);
    CHECK(wait_state(c, TFOS_COORD_DONE, 3000));
    CHECK(strstr(logbuf, "which joined in place, ended (exit code 1) after the others finished"));
    tfos_coord_close(c);
    /* a cluster that does not resize in place takes no joiner */
    tfos_coord *c0 = open_coord(1, 0, 10, 30);
    register_join(c0, &x, "0");
    expect_error(c0, x, "cannot join in place: this cluster does not resize in place");
    tfos__link_close(x);
    tfos_coord_close(c0);
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
    RUN(end_feed);
    RUN(tensorboard_port);
    RUN(executor_key_in_status);
    RUN(abort_report);
    RUN(failure_while_stopping);
    RUN(first_failure_is_reported);
    RUN(a_kill_stays_first);
    RUN(start_kinds);
    RUN(clients);
    RUN(feed_turns);
    RUN(a_node_whose_reader_is_gone_is_not_waited_for);
    RUN(a_node_not_heard_to_read_is_asked);
    RUN(drain);
    RUN(spec_bytes);
    RUN(standby);
    RUN(join_in_place);
    return 0;
}
