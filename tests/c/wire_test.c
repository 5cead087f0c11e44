/* wire_test.c: frame headers, key=value payloads, data frames, links'
 * buffering, and a deterministic mutation fuzz of the parsers (no input may
 * crash them). */
#include "check.h"
#include "core/link.h"
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
    /* DRAIN and RESIZE are control frames; 22-31 are no frame's yet; data frames from 32 */
    h[5] = TFOS_MSG_DRAIN;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), 0);
    CHECK(!tfos__wire_is_data(TFOS_MSG_DRAIN));
    h[5] = TFOS_MSG_RESIZE;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), 0);
    CHECK(!tfos__wire_is_data(TFOS_MSG_RESIZE));
    h[5] = TFOS_MSG_PROGRESS;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), 0);
    CHECK(!tfos__wire_is_data(TFOS_MSG_PROGRESS));
    h[5] = TFOS_MSG_PROGRESS + 1;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    h[5] = TFOS_MSG_DATA_FIRST_ - 1;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), TFOS_EPROTO);
    h[5] = TFOS_MSG_SERVE_MODELS;
    CHECK_EQ(tfos__wire_header(h, 12, 100, &f, &why), 0);
    CHECK(tfos__wire_is_data(TFOS_MSG_SERVE_MODELS));
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
 * are both returned (core/link.h buffers them). */
/* Values a peer may send as plain names (hosts, a Spark executor's key):
 * the coordinator refuses a registration with any other. */
static void plain_names(void)
{
    CHECK(tfos__plain_name("127.0.0.1"));
    CHECK(tfos__plain_name("node-1.example_x:2"));
    CHECK(tfos__plain_name("31337"));
    CHECK(!tfos__plain_name(""));
    CHECK(!tfos__plain_name("a b"));
    CHECK(!tfos__plain_name("x\""));
    CHECK(!tfos__plain_name("a\nb"));
    CHECK(!tfos__plain_name("caf\xc3\xa9"));
}

static void conn_partial(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    tfos__link *c;
    CHECK_EQ(tfos__link_wrap(&c, sv[0], &tfos__transport_unix), 0);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_HEARTBEAT);
    tfos__msg_add(&m, "seq", "%d", 1);
    CHECK_EQ(tfos__msg_end(&m), 0);
    tfos__frame f;
    const char *why;
    for (size_t i = 0; i < m.len; i++) {
        CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), TFOS_ETIMEDOUT); /* not whole yet */
        CHECK_EQ(write(sv[1], m.buf + i, 1), 1);
    }
    CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), 0);
    CHECK_EQ(f.type, TFOS_MSG_HEARTBEAT);
    tfos__link_consume(c);
    CHECK_EQ(write(sv[1], m.buf, m.len), (long long)m.len);
    CHECK_EQ(write(sv[1], m.buf, m.len), (long long)m.len);
    CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), 0);
    CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), 0); /* auto-consumes the first */
    CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), TFOS_ETIMEDOUT);
    close(sv[1]);
    CHECK_EQ(tfos__link_wait_frame(c, 0, &f, &why), TFOS_ECLOSED);
    tfos__msg_fini(&m);
    tfos__link_close(c);
}

static void conn_oversized(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    tfos__link *c;
    CHECK_EQ(tfos__link_wrap(&c, sv[0], &tfos__transport_unix), 0);
    /* a control frame's header announcing more than a control frame holds */
    uint32_t len = TFOS_WIRE_MAX_PAYLOAD + 1;
    uint8_t h[12] = {'T', 'F', 'O', 'S', TFOS_PROTOCOL_VERSION, TFOS_MSG_EXITED, 0, 0,
                     (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    CHECK_EQ(write(sv[1], h, 12), 12); /* the header alone is enough to refuse */
    tfos__frame f;
    const char *why = NULL;
    CHECK_EQ(tfos__link_wait_frame(c, 1000, &f, &why), TFOS_ETOOBIG);
    CHECK(why != NULL);
    tfos__link_close(c);
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

/* A data frame: id, meta lines, binary body; every cut or bit flip of its
 * payload is parsed without reading past it. */
static void data_frames(void)
{
    static const char body[] = "\x00\x01binary\n\x00=";
    tfos__msg m;
    tfos__msg_begin_data(&m, TFOS_MSG_SERVE_BATCH, 0x0102030405060708ull);
    tfos__msg_add(&m, "model", "%s", "digits");
    tfos__msg_add(&m, "version", "%s", "");
    CHECK_EQ(tfos__msg_end_data(&m, sizeof body), 0);
    size_t n = m.len + sizeof body;
    uint8_t *buf = malloc(n);
    memcpy(buf, m.buf, m.len);
    memcpy(buf + m.len, body, sizeof body);
    CHECK(!memcmp(buf + TFOS_WIRE_HEADER, "\x01\x02\x03\x04\x05\x06\x07\x08", 8)); /* big-endian */
    tfos__frame f;
    const char *why;
    CHECK_EQ(tfos__wire_header(buf, n, 1 << 20, &f, &why), 0);
    CHECK_EQ(f.len, n - TFOS_WIRE_HEADER);
    CHECK_EQ(tfos__wire_payload(&f, &why), 0);
    CHECK_EQ(f.id, 0x0102030405060708ull);
    char v[32] = "x";
    CHECK_EQ(tfos__kv_str(f.meta, f.meta_len, "model", v, sizeof v), 0);
    CHECK_STR(v, "digits");
    CHECK_EQ(tfos__kv_str(f.meta, f.meta_len, "version", v, sizeof v), 0);
    CHECK_STR(v, "");
    CHECK_EQ(f.body_len, sizeof body);
    CHECK(!memcmp(f.body, body, sizeof body));
    /* a control frame: meta is the payload, no body */
    tfos__msg c;
    tfos__msg_begin(&c, TFOS_MSG_HEARTBEAT);
    tfos__msg_add(&c, "a", "%d", 1);
    CHECK_EQ(tfos__msg_end(&c), 0);
    CHECK_EQ(tfos__wire_header((uint8_t *)c.buf, c.len, 100, &f, &why), 0);
    CHECK_EQ(tfos__wire_payload(&f, &why), 0);
    CHECK(f.meta == f.payload && f.meta_len == f.len && f.body_len == 0 && f.id == 0);
    tfos__msg_fini(&c);
    /* shorter than its id and meta length; meta longer than the payload */
    f.type = TFOS_MSG_SERVE_RESULT;
    f.payload = (const char *)buf + TFOS_WIRE_HEADER;
    f.len = 9;
    CHECK_EQ(tfos__wire_payload(&f, &why), TFOS_EPROTO);
    uint8_t bad[10] = {0, 0, 0, 0, 0, 0, 0, 1, 0, 5};
    f.payload = (const char *)bad;
    f.len = sizeof bad;
    CHECK_EQ(tfos__wire_payload(&f, &why), TFOS_EPROTO);
    /* mutations: a parse that succeeds stays inside the payload */
    uint8_t *mut = malloc(n);
    unsigned long long st = 0x1234567ull;
    for (int iter = 0; iter < 100000; iter++) {
        memcpy(mut, buf, n);
        size_t len = n;
        for (int j = 0; j < 3; j++) {
            size_t at = check_rand(&st) % len;
            if (check_rand(&st) % 3 == 0)
                len = at + 1;
            else
                mut[at] ^= (uint8_t)(1u << (check_rand(&st) % 8));
        }
        if (tfos__wire_header(mut, len, 1 << 20, &f, &why) || TFOS_WIRE_HEADER + (size_t)f.len > len)
            continue;
        if (tfos__wire_payload(&f, &why) == 0 && tfos__wire_is_data(f.type))
            CHECK(f.meta >= f.payload && f.body + f.body_len == f.payload + f.len);
    }
    free(mut);
    free(buf);
    tfos__msg_fini(&m);
}

int main(void)
{
    RUN(build_and_parse);
    RUN(data_frames);
    RUN(bad_headers);
    RUN(bad_payloads);
    RUN(plain_names);
    RUN(conn_partial);
    RUN(conn_oversized);
    RUN(fuzz_parser);
    return 0;
}
