/* wire_test.c: frame headers, key=value payloads, connections, and a
 * deterministic mutation fuzz of the parser (no input may crash it). */
#include "check.h"
#include "core/wire.h"
#include "tfos/tfos.h"

#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

static void build_and_parse(void)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_REGISTER);
    tfos__msg_add(&m, "executor_id", "%d", 7);
    tfos__msg_add(&m, "host", "%s", "node-1.example");
    tfos__msg_add(&m, "note", "%s", "a\nb"); /* newline must not break framing */
    tfos__msg_add(&m, "tail", "%s", "x");
    tfos__msg_add(&m, "tail", "%s", "y");
    CHECK_EQ(tfos__msg_end(&m), 0);
    tfos__frame f;
    const char *why;
    CHECK_EQ(tfos__wire_header((uint8_t *)m.buf, m.len, TFOS_WIRE_MAX_PAYLOAD, &f, &why), 0);
    CHECK_EQ(f.type, TFOS_MSG_REGISTER);
    CHECK_EQ(f.len, m.len - TFOS_WIRE_HEADER);
    CHECK_EQ(tfos__kv_validate(f.payload, f.len, &why), 0);
    long long id;
    CHECK_EQ(tfos__kv_int(f.payload, f.len, "executor_id", 0, 100, &id), 0);
    CHECK_EQ(id, 7);
    CHECK_EQ(tfos__kv_int(f.payload, f.len, "executor_id", 0, 5, &id), TFOS_EINVAL); /* out of range */
    char host[64];
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "host", host, sizeof host), 0);
    CHECK_STR(host, "node-1.example");
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "host", host, 4), TFOS_ETOOBIG);
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "missing", host, sizeof host), TFOS_EINVAL);
    CHECK_EQ(tfos__kv_str(f.payload, f.len, "note", host, sizeof host), 0);
    CHECK_STR(host, "a b");
    size_t pos = 0, kl, vl;
    const char *k, *v;
    int tails = 0;
    while (tfos__kv_next(f.payload, f.len, &pos, &k, &kl, &v, &vl) == 0)
        if (kl == 4 && !memcmp(k, "tail", 4))
            tails++;
    CHECK_EQ(tails, 2);
    tfos__msg_fini(&m);
}

static void bad_headers(void)
{
    uint8_t h[12] = {'T', 'F', 'O', 'S', TFOS_PROTOCOL_VERSION, TFOS_MSG_HELLO, 0, 0, 0, 0, 0, 0};
    tfos__frame f;
    const char *why = NULL;
    CHECK_EQ(tfos__wire_header(h, 11, 100, &f, &why), TFOS_EAGAIN);
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), 0);
    h[0] = 'X';
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    CHECK(strstr(why, "magic"));
    h[0] = 'T';
    h[4] = 99;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    CHECK(strstr(why, "version"));
    h[4] = TFOS_PROTOCOL_VERSION;
    h[5] = 0;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    h[5] = 200;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    h[5] = TFOS_MSG_HELLO;
    h[7] = 1;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    h[7] = 0;
    h[8] = 0x7f; /* ~2 GB */
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_ETOOBIG);
}

static void bad_payloads(void)
{
    const char *why;
    CHECK_EQ(tfos__kv_validate("a=1\n", 4, &why), 0);
    CHECK_EQ(tfos__kv_validate("", 0, &why), 0);
    CHECK_EQ(tfos__kv_validate("a=1", 3, &why), TFOS_EPROTO);      /* unterminated */
    CHECK_EQ(tfos__kv_validate("=1\n", 3, &why), TFOS_EPROTO);     /* empty key */
    CHECK_EQ(tfos__kv_validate("A=1\n", 4, &why), TFOS_EPROTO);    /* bad key char */
    CHECK_EQ(tfos__kv_validate("a\n", 2, &why), TFOS_EPROTO);      /* no = */
    CHECK_EQ(tfos__kv_validate("a=\0\n", 4, &why), TFOS_EPROTO);   /* NUL */
}

/* A frame arriving one byte at a time is assembled; two frames in one read
 * are both returned. */
static void conn_partial(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    tfos__conn c;
    tfos__conn_init(&c, sv[0], 1024);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_HEARTBEAT);
    tfos__msg_add(&m, "seq", "%d", 1);
    CHECK_EQ(tfos__msg_end(&m), 0);
    tfos__frame f;
    const char *why;
    for (size_t i = 0; i < m.len; i++) {
        CHECK_EQ(tfos__conn_frame(&c, &f, &why), TFOS_EAGAIN);
        CHECK_EQ(write(sv[1], m.buf + i, 1), 1);
        CHECK_EQ(tfos__conn_read(&c), 0);
    }
    CHECK_EQ(tfos__conn_frame(&c, &f, &why), 0);
    CHECK_EQ(f.type, TFOS_MSG_HEARTBEAT);
    tfos__conn_consume(&c);
    CHECK_EQ(write(sv[1], m.buf, m.len), (long long)m.len);
    CHECK_EQ(write(sv[1], m.buf, m.len), (long long)m.len);
    CHECK_EQ(tfos__conn_read(&c), 0);
    CHECK_EQ(tfos__conn_frame(&c, &f, &why), 0);
    CHECK_EQ(tfos__conn_frame(&c, &f, &why), 0); /* auto-consumes the first */
    CHECK_EQ(tfos__conn_frame(&c, &f, &why), TFOS_EAGAIN);
    close(sv[1]);
    CHECK_EQ(tfos__conn_read(&c), TFOS_ECLOSED);
    tfos__msg_fini(&m);
    tfos__conn_fini(&c);
}

static void conn_oversized(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    tfos__conn c;
    tfos__conn_init(&c, sv[0], 64);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_EXITED);
    char big[200];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    tfos__msg_add(&m, "tail", "%s", big);
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(write(sv[1], m.buf, 12), 12); /* the header alone is enough to refuse */
    CHECK_EQ(tfos__conn_read(&c), 0);
    tfos__frame f;
    const char *why = NULL;
    CHECK_EQ(tfos__conn_frame(&c, &f, &why), TFOS_ETOOBIG);
    CHECK(why != NULL);
    tfos__msg_fini(&m);
    tfos__conn_fini(&c);
    close(sv[1]);
}

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
#define next_rand() check_rand(&rng)

static void fuzz_parser(void)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_SPEC);
    tfos__msg_add(&m, "self", "%d", 1);
    tfos__msg_add(&m, "node", "%s", "worker 0 0 127.0.0.1 4000");
    tfos__msg_add(&m, "node", "%s", "worker 1 1 127.0.0.1 4001");
    CHECK_EQ(tfos__msg_end(&m), 0);
    uint8_t buf[512];
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 200000; iter++) {
        size_t n = m.len;
        memcpy(buf, m.buf, n);
        int muts = 1 + (int)(next_rand() % 4);
        for (int j = 0; j < muts; j++) {
            size_t at = next_rand() % n;
            switch (next_rand() % 4) {
            case 0: buf[at] = (uint8_t)next_rand(); break;
            case 1: buf[at] ^= (uint8_t)(1u << (next_rand() % 8)); break;
            case 2: n = at + 1; break; /* truncate */
            default: buf[at] = (uint8_t)"=\n\0T"[next_rand() % 4]; break;
            }
        }
        tfos__frame f;
        const char *why;
        int rc = tfos__wire_header(buf, n, 256, &f, &why);
        if (rc == 0 && TFOS_WIRE_HEADER + (size_t)f.len <= n)
            rc = tfos__kv_validate(f.payload, f.len, &why);
        if (rc == 0) {
            accepted++;
            size_t pos = 0, kl, vl;
            const char *k, *v;
            while (tfos__kv_next(f.payload, f.len, &pos, &k, &kl, &v, &vl) == 0)
                CHECK(k + kl < v && v + vl <= f.payload + f.len);
            char out[64];
            long long x;
            tfos__kv_str(f.payload, f.len, "node", out, sizeof out);
            tfos__kv_int(f.payload, f.len, "self", 0, 10, &x);
        } else {
            rejected++;
        }
    }
    CHECK(accepted > 0 && rejected > 0);
    tfos__msg_fini(&m);
}

int main(void)
{
    RUN(build_and_parse);
    RUN(bad_headers);
    RUN(bad_payloads);
    RUN(conn_partial);
    RUN(conn_oversized);
    RUN(fuzz_parser);
    return 0;
}
