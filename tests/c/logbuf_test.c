/* logbuf_test.c: the forwarded-lines buffer behind /logs/stream (tfos yarn),
 * and the token bucket that bounds each agent's share of those lines. */
#include "check.h"
#include "core/log.h"
#include "web/logbuf.h"

static void numbered_and_bounded(void)
{
    tfos__logbuf b;
    CHECK(tfos__logbuf_init(&b, 4, 1 << 20) == 0);
    char *s = tfos__logbuf_since(&b, 0, 1024);
    CHECK_STR(s, "next 0\n"); /* nothing yet */
    free(s);
    tfos__logbuf_add(&b, "worker:0", "one", 0);
    tfos__logbuf_add(&b, "worker:1", "two", 3);
    s = tfos__logbuf_since(&b, 0, 1024);
    CHECK_STR(s, "next 2\n[worker:0] one\n[worker:1] (3 lines not forwarded: too many too fast; see the node's log) "
                 "two\n");
    free(s);
    CHECK_EQ(b.served, 2);
    s = tfos__logbuf_since(&b, 1, 1024);
    CHECK(!strncmp(s, "next 2\n[worker:1] ", 18));
    free(s);
    for (int i = 0; i < 5; i++) /* 7 lines in a ring of 4: 0..2 are gone */
        tfos__logbuf_add(&b, "ps:0", "x", 0);
    s = tfos__logbuf_since(&b, 1, 1024);
    CHECK_STR(s, "next 7\nskipped 2\n[ps:0] x\n[ps:0] x\n[ps:0] x\n[ps:0] x\n");
    free(s);
    s = tfos__logbuf_since(&b, 99, 1024); /* ahead: nothing, and where it stands */
    CHECK_STR(s, "next 7\n");
    free(s);
    s = tfos__logbuf_since(&b, 3, 12); /* at most 12 bytes: two lines of 9 do not fit, one does */
    CHECK_STR(s, "next 4\n[ps:0] x\n");
    free(s);
    tfos__logbuf_fini(&b);

    CHECK(tfos__logbuf_init(&b, 100, 40) == 0); /* bytes bound: the oldest go first */
    tfos__logbuf_add(&b, "w:0", "aaaaaaaaaaaaaaaa", 0);
    tfos__logbuf_add(&b, "w:0", "bbbbbbbbbbbbbbbb", 0);
    CHECK_EQ(b.first, 1);
    CHECK(b.bytes <= 40);
    tfos__logbuf_fini(&b);
}

/* 20 lines a second, bursts of 200 (a node's share in a 1,000-node cluster) */
static void forward_rate(void)
{
    tfos__rate r = {0};
    tfos__rate_set(&r, 20, 200);
    int64_t t = 1000;
    int passed = 0;
    for (int i = 0; i < 1000; i++) /* a burst at one instant: 200 pass */
        passed += tfos__rate_take(&r, t);
    CHECK_EQ(passed, 200);
    CHECK_EQ(tfos__rate_take(&r, t + 49), 0); /* under one token back after 49 ms */
    CHECK_EQ(tfos__rate_take(&r, t + 50), 1); /* one after 50 ms */
    CHECK_EQ(tfos__rate_take(&r, t + 50), 0);
    /* a steady 100 lines a second for 10 s: about 20 a second pass */
    passed = 0;
    for (int i = 1; i <= 1000; i++)
        passed += tfos__rate_take(&r, t + 50 + i * 10);
    CHECK(passed >= 199 && passed <= 201);
    /* quiet for a minute: the bucket is full again, not fuller */
    t += 70000;
    passed = 0;
    for (int i = 0; i < 1000; i++)
        passed += tfos__rate_take(&r, t);
    CHECK_EQ(passed, 200);
    CHECK_EQ(tfos__rate_take(&r, t - 5000), 0); /* a clock read out of order gives nothing back */
}

int main(void)
{
    numbered_and_bounded();
    forward_rate();
    return 0;
}
