/* loop_test.c: the event loop: timers in deadline order and re-armed from
 * their callbacks, fd events, quiet watches, an fd unwatched by an earlier
 * callback of the same iteration, wake-ups from another thread, and a sleep
 * that ends at the next timer, not later. */
#include "check.h"
#include "core/loop.h"
#include "platform/clock.h"
#include "tfos/tfos.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int order[8], norder;

static void record(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    order[norder++] = (int)(long)user;
}

static void timers(void)
{
    tfos__loop *l;
    CHECK_EQ(tfos__loop_open(&l), 0);
    tfos__timer a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    int64_t now = tfos__now_ms();
    tfos__timer_arm(l, &a, now + 30, record, (void *)1L);
    tfos__timer_arm(l, &b, now + 10, record, (void *)2L);
    tfos__timer_arm(l, &c, now + 20, record, (void *)3L);
    tfos__timer_disarm(l, &c);
    tfos__timer_arm(l, &c, now + 5, record, (void *)3L);
    norder = 0;
    int64_t t0 = tfos__now_ms();
    while (norder < 3 && tfos__now_ms() - t0 < 2000)
        tfos__loop_run(l, -1);
    CHECK_EQ(norder, 3);
    CHECK_EQ(order[0], 3);
    CHECK_EQ(order[1], 2);
    CHECK_EQ(order[2], 1);
    CHECK(!a.armed && !b.armed && !c.armed);
    /* the wait ends at the timer (not at the 5 s bound) */
    tfos__timer_arm(l, &a, tfos__now_ms() + 50, record, (void *)4L);
    t0 = tfos__now_ms();
    CHECK_EQ(tfos__loop_run(l, 5000), 1);
    CHECK(tfos__now_ms() - t0 < 2000);
    CHECK_EQ(order[3], 4);
    /* a bound with nothing armed */
    t0 = tfos__now_ms();
    CHECK_EQ(tfos__loop_run(l, 30), 0);
    CHECK(tfos__now_ms() - t0 >= 25);
    tfos__loop_close(l);
}

typedef struct fdctx {
    tfos__loop *l;
    int fds[2][2];
    int hits[2];
    int unwatch_other;
} fdctx;

static void on_read(tfos__loop *l, int fd, int events, void *user)
{
    fdctx *c = user;
    CHECK(events & TFOS_EV_READ);
    int which = fd == c->fds[0][0] ? 0 : 1;
    char buf[16];
    CHECK(read(fd, buf, sizeof buf) > 0);
    c->hits[which]++;
    if (c->unwatch_other)
        tfos__loop_unwatch(l, c->fds[1 - which][0]);
}

static void fds(void)
{
    fdctx c;
    memset(&c, 0, sizeof c);
    CHECK_EQ(tfos__loop_open(&c.l), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(pipe(c.fds[i]), 0);
        CHECK_EQ(tfos__loop_watch(c.l, c.fds[i][0], TFOS_EV_READ, on_read, &c), 0);
    }
    CHECK_EQ(write(c.fds[0][1], "x", 1), 1);
    CHECK_EQ(tfos__loop_run(c.l, 1000), 1);
    CHECK_EQ(c.hits[0], 1);
    /* quiet: registered but silent, even with data (and a hang-up) waiting */
    CHECK_EQ(tfos__loop_events(c.l, c.fds[1][0], 0), 0);
    CHECK_EQ(write(c.fds[1][1], "y", 1), 1);
    close(c.fds[1][1]);
    CHECK_EQ(tfos__loop_run(c.l, 20), 0);
    CHECK_EQ(tfos__loop_events(c.l, c.fds[1][0], TFOS_EV_READ), 0);
    CHECK_EQ(tfos__loop_run(c.l, 1000), 1);
    CHECK_EQ(c.hits[1], 1);
    tfos__loop_unwatch(c.l, c.fds[1][0]);
    close(c.fds[1][0]);
    CHECK_EQ(pipe(c.fds[1]), 0);
    CHECK_EQ(tfos__loop_watch(c.l, c.fds[1][0], TFOS_EV_READ, on_read, &c), 0);
    /* both ready; the first callback unwatches the other: one callback only */
    c.unwatch_other = 1;
    c.hits[0] = c.hits[1] = 0;
    CHECK_EQ(write(c.fds[0][1], "x", 1), 1);
    CHECK_EQ(write(c.fds[1][1], "x", 1), 1);
    CHECK_EQ(tfos__loop_run(c.l, 1000), 1);
    CHECK_EQ(c.hits[0] + c.hits[1], 1);
    CHECK_EQ(tfos__loop_watch(c.l, -1, TFOS_EV_READ, on_read, &c), TFOS_EINVAL);
    tfos__loop_close(c.l);
    for (int i = 0; i < 2; i++) {
        close(c.fds[i][0]);
        close(c.fds[i][1]);
    }
}

static void *waker(void *arg)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    tfos__loop_wake(arg);
    return NULL;
}

static void wake(void)
{
    tfos__loop *l;
    CHECK_EQ(tfos__loop_open(&l), 0);
    pthread_t t;
    int64_t t0 = tfos__now_ms();
    CHECK_EQ(pthread_create(&t, NULL, waker, l), 0);
    CHECK_EQ(tfos__loop_run(l, 10000), 0); /* woken, nothing to dispatch */
    CHECK(tfos__now_ms() - t0 < 5000);
    pthread_join(t, NULL);
    tfos__loop_close(l);
}

int main(void)
{
    timers();
    fds();
    wake();
    printf("loop: ok\n");
    return 0;
}
