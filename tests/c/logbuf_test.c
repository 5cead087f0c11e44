/* logbuf_test.c: the forwarded-lines buffer behind /logs/stream (tfos yarn). */
#include "check.h"
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

int main(void)
{
    numbered_and_bounded();
    return 0;
}
