/* ring_test.c: tests of the shared-memory feed ring (src/core/ring.c).
 *
 * One binary; main() runs every case and prints its name and "ok". Peers are
 * real processes (fork) killed with real signals. Every wait is bounded, and
 * timings are only checked loosely (a loaded 2-core box must pass). */
#include "core/link.h"
#include "core/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LONG_MS 15000 /* "should not happen" bound for waits in tests */
#define HDR 4096      /* header page size, see the layout in ring.c */

static void fail_at(const char *file, int line, const char *what, int rc, int want)
{
    fprintf(stderr, "%s:%d: FAILED (pid %d): %s", file, line, (int)getpid(), what);
    if (rc != want)
        fprintf(stderr, ": got %d (%s), want %d (%s)", rc, tfos_strerror(rc), want, tfos_strerror(want));
    fprintf(stderr, "\n");
    _exit(1);
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            fail_at(__FILE__, __LINE__, #c, 0, 0);                                                 \
    } while (0)
#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != (want))                                                                         \
            fail_at(__FILE__, __LINE__, #expr, rc_, (want));                                       \
    } while (0)

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait (bounded) for a condition that another process makes true. */
#define WAIT_FOR(cond)                                                                             \
    do {                                                                                           \
        uint64_t t0_ = ms_now();                                                                   \
        while (!(cond)) {                                                                          \
            if (ms_now() - t0_ > LONG_MS)                                                          \
                fail_at(__FILE__, __LINE__, "timed out waiting for " #cond, 0, 0);                 \
            nap_ms(1);                                                                             \
        }                                                                                          \
    } while (0)

static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static uint8_t pat(uint32_t seed, size_t i)
{
    return (uint8_t)(hash32(seed) + i * 7u + (i >> 8) * 13u);
}

static void fill(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = pat(seed, i);
}

static int same(const void *p, size_t n, uint32_t seed)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(seed, i))
            return 0;
    return 1;
}

/* Reap a child (bounded); returns its wait status. */
static int reap(pid_t pid)
{
    uint64_t t0 = ms_now();
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        CHECK(w == 0);
        if (ms_now() - t0 > LONG_MS) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_at(__FILE__, __LINE__, "child did not exit", 0, 0);
        }
        nap_ms(1);
    }
}

static int exited_ok(int st)
{
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int killed_by(int st, int sig)
{
    return WIFSIGNALED(st) && WTERMSIG(st) == sig;
}

static tfos__ring_stats stats(tfos__ring *r)
{
    tfos__ring_stats st;
    tfos__ring_stats_get(r, &st);
    return st;
}

/* Consume the next record, which must have this tag (and partition, for
 * markers). The returned view points at a copy of the payload (valid until
 * the next call): after release the ring's bytes belong to the producers. */
static tfos__ring_rec expect(tfos__ring *c, uint32_t tag, uint64_t part)
{
    static uint8_t copy[1 << 16];
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), 0);
    if (rec.tag != tag)
        fprintf(stderr, "got tag %u, want %u\n", rec.tag, tag);
    CHECK(rec.tag == tag);
    if (tag >= TFOS_RING_PARTITION_BEGIN && tag <= TFOS_RING_PARTITION_ABORT)
        CHECK(rec.partition == part);
    CHECK(rec.len <= sizeof copy);
    memcpy(copy, rec.data, rec.len);
    rec.data = copy;
    tfos__ring_release(c);
    return rec;
}

/* ---- wrap-around, varied sizes, contents byte for byte ----------------- */

static size_t wrap_len(uint32_t seq, size_t maxrec)
{
    uint32_t h = hash32(seq * 2654435761u);
    if (h % 40 == 0)
        return maxrec;
    if (h % 40 == 1)
        return 0;
    return h % 900;
}

static uint32_t wrap_tag(uint32_t seq)
{
    return seq % 4 == 0 ? TFOS_RING_DATA : TFOS_RING_TAG_USER + seq % 1000;
}

static void check_wrap_rec(const tfos__ring_rec *rec, uint32_t seq, size_t maxrec)
{
    CHECK(rec->tag == wrap_tag(seq));
    CHECK(rec->len == wrap_len(seq, maxrec));
    CHECK(same(rec->data, rec->len, seq));
    CHECK(((uintptr_t)rec->data & 7u) == 0);
}

static void test_wrap_varied(void)
{
    tfos__ring *c, *p;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    close(fd);
    size_t maxrec = tfos__ring_max_record(p);
    CHECK(maxrec == 2040);

    enum { N = 20000 };
    static uint8_t tmp[4096];
    uint32_t wseq = 0, rseq = 0, rnd = 1;
    uint64_t bytes = 0;
    while (rseq < N) {
        while (wseq < N) {
            size_t len = wrap_len(wseq, maxrec);
            int rc;
            if (wseq % 3 == 0) {
                /* zero-copy, reserving more than is finally committed */
                void *buf;
                size_t extra = len + 24 <= maxrec ? 24 : 0;
                rc = tfos__ring_reserve(p, wrap_tag(wseq), len + extra, &buf, 0);
                if (rc == TFOS_EFULL)
                    break;
                CHECK_RC(rc, 0);
                CHECK(((uintptr_t)buf & 7u) == 0);
                fill(buf, len, wseq);
                CHECK_RC(tfos__ring_commit(p, len), 0);
            } else {
                fill(tmp, len, wseq);
                rc = tfos__ring_write(p, wrap_tag(wseq), tmp, len, 0);
                if (rc == TFOS_EFULL)
                    break;
                CHECK_RC(rc, 0);
            }
            bytes += len;
            wseq++;
        }
        /* Read a varying number of records, alternating peek and batches. */
        rnd = hash32(rnd + rseq);
        size_t want = wseq == N ? N : 1 + rnd % 6;
        for (size_t got = 0; got < want && rseq < wseq;) {
            if (rnd & 1) {
                tfos__ring_rec rec, again;
                CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
                CHECK_RC(tfos__ring_peek(c, &again, 0), 0); /* not consumed yet */
                CHECK(rec.data == again.data && rec.len == again.len);
                check_wrap_rec(&rec, rseq++, maxrec);
                tfos__ring_release(c);
                got++;
            } else {
                tfos__ring_rec recs[8];
                size_t n;
                CHECK_RC(tfos__ring_read_batch(c, recs, 8, &n, 0), 0);
                CHECK(n >= 1 && n <= 8);
                for (size_t i = 0; i < n; i++)
                    check_wrap_rec(&recs[i], rseq++, maxrec);
                tfos__ring_release(c);
                got += n;
            }
        }
    }
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EAGAIN);
    tfos__ring_stats st = stats(c);
    CHECK(st.records == N && st.bytes == bytes && st.used == 0);
    CHECK(st.bytes > 100 * 4096); /* wrapped many times */
    tfos__ring_close(p);
    tfos__ring_close(c);
}

/* ---- the hot window: records cycle through the start of a big ring ------- */

/* Where rec lies in the ring's data area. */
static uint64_t data_off(tfos__ring *c, const tfos__ring_rec *rec)
{
    return (uint64_t)((const char *)rec->data - (const char *)tfos__ring_mapping(c)) - HDR - 8;
}

/* Write and read back `n` records of `len` bytes one by one; returns the
 * largest data offset a record started at (each checked byte for byte). */
static uint64_t cycle(tfos__ring *p, tfos__ring *c, size_t len, int n, uint32_t seed)
{
    static uint8_t buf[11 << 20];
    uint64_t top = 0;
    for (int i = 0; i < n; i++) {
        fill(buf, len, seed + (uint32_t)i);
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, len, 0), 0);
        tfos__ring_rec rec;
        CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
        CHECK(rec.tag == TFOS_RING_DATA && rec.len == len && same(rec.data, len, seed + (uint32_t)i));
        uint64_t off = data_off(c, &rec);
        top = off > top ? off : top;
        tfos__ring_release(c);
    }
    return top;
}

static void test_hot_window(void)
{
    const uint64_t MiB = 1 << 20, cap = 64 * MiB, hot = TFOS_RING_HOT_BYTES;
    CHECK(hot == 8 * MiB);
    unsetenv("TFOS_RING_HOT_MB");
    tfos__ring *c, *p;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, cap, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);

    /* Unread, 64 KiB records fill the window and no more: the producer
     * waits (EFULL) with 8 MiB in the ring, not 64 ... */
    static uint8_t buf[64 << 10];
    int n = 0, rc;
    uint32_t first = 100;
    for (;; n++) {
        fill(buf, sizeof buf, first + (uint32_t)n);
        if ((rc = tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0)) != 0)
            break;
    }
    CHECK_RC(rc, TFOS_EFULL);
    tfos__ring_stats st = stats(c);
    CHECK(st.used >= hot - (64 << 10) && st.used < hot + (128 << 10));
    /* ... and once the records at the start of the window are read, the next
     * one goes there, after a padding record the consumer never sees */
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
    uint64_t start = data_off(c, &rec);
    tfos__ring_release(c);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0), 0);
    for (int i = 1; i <= n; i++) {
        CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
        CHECK(rec.tag == TFOS_RING_DATA && rec.len == sizeof buf);
        CHECK(same(rec.data, rec.len, first + (uint32_t)i));
        if (i == n)
            CHECK(data_off(c, &rec) <= start);
        tfos__ring_release(c);
    }
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EAGAIN);

    /* 64 KiB records: 300 of them (19 MiB) all start in the first 8 MiB */
    CHECK(cycle(p, c, 64 << 10, 300, 1) < hot);
    /* 4 MiB ones: the window is three of them (12 MiB) */
    uint64_t top = cycle(p, c, 4 * MiB, 8, 2);
    CHECK(top >= 8 * MiB && top < 12 * MiB);
    /* 10 MiB ones: three of them (30 MiB), up to four times the least
     * window and half the ring */
    top = cycle(p, c, 10 * MiB, 12, 3);
    CHECK(top >= 20 * MiB && top < 30 * MiB);
    /* 11 MiB ones: three would take 33 MiB, more than four times the least
     * window (and half the ring): the whole ring, as without one */
    CHECK(cycle(p, c, 11 * MiB, 12, 6) >= 44 * MiB);

    tfos__ring_close(p);

    /* A producer's TFOS_RING_HOT_MB: 2 MiB, or 0 for the whole ring */
    setenv("TFOS_RING_HOT_MB", "2", 1);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK(cycle(p, c, 64 << 10, 100, 4) < 2 * MiB);
    tfos__ring_close(p);
    setenv("TFOS_RING_HOT_MB", "0", 1);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK(cycle(p, c, 64 << 10, 1100, 5) >= cap - (128 << 10));
    tfos__ring_close(p);
    unsetenv("TFOS_RING_HOT_MB");
    close(fd);
    tfos__ring_close(c);
}

/* ---- full ring: producer blocks, times out, is woken -------------------- */

static void test_full_ring_blocks_producer(void)
{
    tfos__ring *c, *p, *p2;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_attach(&p2, fd, TFOS_RING_PRODUCER), 0);
    uint8_t buf[1000];
    int n = 0, rc;
    for (;; n++) {
        fill(buf, sizeof buf, (uint32_t)n);
        if ((rc = tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0)) != 0)
            break;
    }
    CHECK_RC(rc, TFOS_EFULL);
    CHECK(n == 4); /* 4 x 1008 bytes fit in 4096, a fifth does not */

    uint64_t t0 = ms_now();
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 300), TFOS_ETIMEDOUT);
    uint64_t el = ms_now() - t0;
    CHECK(el >= 250 && el < LONG_MS);
    void *res;
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 1000, &res, 0), TFOS_EFULL);

    /* A pending reservation holds the producer lock: the other producer waits. */
    expect(c, TFOS_RING_DATA, 0);
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 1000, &res, 0), 0);
    CHECK_RC(tfos__ring_write(p2, TFOS_RING_DATA, "x", 1, 0), TFOS_EAGAIN);
    t0 = ms_now();
    CHECK_RC(tfos__ring_write(p2, TFOS_RING_DATA, "x", 1, 200), TFOS_ETIMEDOUT);
    CHECK(ms_now() - t0 >= 150);
    tfos__ring_cancel(p);
    tfos__ring_close(p2);

    /* A producer in another process blocks on the full ring and is woken as
     * soon as the consumer makes room. */
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0), TFOS_EFULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *cp;
        CHECK_RC(tfos__ring_attach(&cp, fd, TFOS_RING_PRODUCER), 0);
        uint8_t mine[1000];
        fill(mine, sizeof mine, 4242);
        CHECK_RC(tfos__ring_write(cp, TFOS_RING_TAG_USER, mine, sizeof mine, LONG_MS), 0);
        tfos__ring_close(cp);
        _exit(0);
    }
    WAIT_FOR(stats(c).producers == 2);
    for (int i = 0; i < 4; i++)
        expect(c, TFOS_RING_DATA, 0);
    tfos__ring_rec rec = expect(c, TFOS_RING_TAG_USER, 0);
    CHECK(rec.len == 1000 && same(rec.data, rec.len, 4242));
    CHECK(exited_ok(reap(pid)));
    close(fd);
    tfos__ring_close(p);
    tfos__ring_close(c);
}

/* ---- empty ring: consumer times out; clean close is not an error -------- */

static void test_empty_ring_times_out_consumer(void)
{
    tfos__ring *c, *p;
    int fd;
    tfos__ring_rec rec, recs[4];
    size_t n = 99;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EAGAIN);
    CHECK_RC(tfos__ring_read_batch(c, recs, 4, &n, 0), TFOS_EAGAIN);
    CHECK(n == 0);
    uint64_t t0 = ms_now();
    CHECK_RC(tfos__ring_peek(c, &rec, 300), TFOS_ETIMEDOUT);
    uint64_t el = ms_now() - t0;
    CHECK(el >= 250 && el < LONG_MS);

    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "hello", 5, 0), 0);
    rec = expect(c, TFOS_RING_DATA, 0);
    CHECK(rec.len == 5 && memcmp(rec.data, "hello", 5) == 0);
    /* A producer that closes cleanly neither ends the feed nor errs. */
    tfos__ring_close(p);
    CHECK_RC(tfos__ring_peek(c, &rec, 100), TFOS_ETIMEDOUT);

    /* End of feed: after the records, then for good; producers see it too. */
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "last", 4, 0), 0);
    CHECK_RC(tfos__ring_end_feed(p, 0), 0);
    CHECK_RC(tfos__ring_end_feed(p, 0), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "late", 4, 0), TFOS_EEND);
    CHECK_RC(tfos__ring_partition_begin(p, 1, 0), TFOS_EEND);
    CHECK(stats(c).feed_ended);
    rec = expect(c, TFOS_RING_DATA, 0);
    CHECK(rec.len == 4 && memcmp(rec.data, "last", 4) == 0);
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_EEND);
    CHECK_RC(tfos__ring_read_batch(c, recs, 4, &n, 0), TFOS_EEND);
    tfos__ring_close(p);
    close(fd);
    tfos__ring_close(c);
}

/* ---- size bounds and API misuse ---------------------------------------- */

static void test_too_big_and_misuse(void)
{
    tfos__ring *c, *p, *x;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 3000, TFOS_RING_CONSUMER), TFOS_EINVAL);
    CHECK_RC(tfos__ring_create(&c, &fd, 2048, TFOS_RING_CONSUMER), TFOS_EINVAL);
    CHECK_RC(tfos__ring_create(&c, &fd, (size_t)1 << 31, TFOS_RING_CONSUMER), TFOS_EINVAL);
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, 7), TFOS_EINVAL);
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    size_t max = tfos__ring_max_record(p);
    CHECK(max == 4096 / 2 - 8);

    static uint8_t big[4096];
    void *buf;
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, big, max + 1, 0), TFOS_ETOOBIG);
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 4096, &buf, 0), TFOS_ETOOBIG);
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, (size_t)1 << 40, &buf, 0), TFOS_ETOOBIG);
    /* The largest record fits even when it must wrap: move the tail first. */
    for (int i = 0; i < 2; i++) {
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, big, 1400, 0), 0);
        expect(c, TFOS_RING_DATA, 0);
    }
    fill(big, max, 77);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, big, max, 0), 0);
    tfos__ring_rec rec = expect(c, TFOS_RING_DATA, 0);
    CHECK(rec.len == max && same(rec.data, max, 77));

    /* roles, tags and states */
    CHECK_RC(tfos__ring_write(c, TFOS_RING_DATA, "x", 1, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_peek(p, &rec, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_attach(&x, fd, TFOS_RING_CONSUMER), TFOS_EINVAL); /* second consumer */
    CHECK_RC(tfos__ring_write(p, TFOS_RING_PARTITION_END, "12345678", 8, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_write(p, 0, "x", 1, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_write(p, 255, "x", 1, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_commit(p, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_partition_end(p, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 8, &buf, 0), 0);
    CHECK_RC(tfos__ring_commit(p, 9), TFOS_EINVAL);
    CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 8, &buf, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_commit(p, 8), 0);
    expect(c, TFOS_RING_DATA, 0);
    CHECK_RC(tfos__ring_partition_begin(p, 5, 0), 0);
    CHECK_RC(tfos__ring_partition_begin(p, 6, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_end_feed(p, 0), TFOS_EINVAL);
    CHECK_RC(tfos__ring_partition_end(p, 0), 0);
    expect(c, TFOS_RING_PARTITION_BEGIN, 5);
    expect(c, TFOS_RING_PARTITION_END, 5);
    tfos__ring_stats st = stats(c);
    CHECK(st.partitions_begun == 1 && st.partitions_completed == 1 && st.records == 4);

    /* at most TFOS_RING_MAX_PRODUCERS producers at once */
    static tfos__ring *many[TFOS_RING_MAX_PRODUCERS];
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS - 1; i++)
        CHECK_RC(tfos__ring_attach(&many[i], fd, TFOS_RING_PRODUCER), 0);
    CHECK(stats(c).producers == TFOS_RING_MAX_PRODUCERS);
    CHECK_RC(tfos__ring_attach(&x, fd, TFOS_RING_PRODUCER), TFOS_EFULL);
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS - 1; i++)
        tfos__ring_close(many[i]);
    CHECK_RC(tfos__ring_attach(&x, fd, TFOS_RING_OBSERVER), 0);
    CHECK(stats(x).producers == 1 && stats(x).records == 4);
    tfos__ring_close(x);
    tfos__ring_close(NULL);
    close(fd);
    tfos__ring_close(p);
    tfos__ring_close(c);
}

/* ---- many producers: partitions arrive whole ---------------------------- */

enum { NPROD = 4, NPART = 10 };

struct row {
    uint64_t part;
    uint32_t seq;
    uint32_t len;
};

static uint32_t part_rows(uint64_t part)
{
    return 5 + hash32((uint32_t)part) % 40;
}

static size_t row_len(uint64_t part, uint32_t seq)
{
    return sizeof(struct row) + hash32((uint32_t)part * 7919u + seq) % 3000;
}

static void producer_child(int fd, int id)
{
    alarm(60);
    tfos__ring *p;
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    static uint8_t buf[4096];
    for (int k = 0; k < NPART; k++) {
        uint64_t part = (uint64_t)id * 1000 + (uint64_t)k;
        CHECK_RC(tfos__ring_partition_begin(p, part, LONG_MS), 0);
        for (uint32_t s = 0; s < part_rows(part); s++) {
            size_t len = row_len(part, s);
            struct row h = {part, s, (uint32_t)len};
            memcpy(buf, &h, sizeof h);
            fill(buf + sizeof h, len - sizeof h, (uint32_t)part * 7919u + s);
            CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, len, LONG_MS), 0);
        }
        CHECK_RC(tfos__ring_partition_end(p, LONG_MS), 0);
    }
    tfos__ring_close(p);
    _exit(0);
}

static void test_many_producers(void)
{
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 65536, TFOS_RING_CONSUMER), 0);
    pid_t kids[NPROD];
    for (int i = 0; i < NPROD; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0)
            producer_child(fd, i + 1);
    }
    int done[NPROD][NPART];
    memset(done, 0, sizeof done);
    int ended = 0, in_part = 0;
    uint64_t cur = 0;
    uint32_t next = 0;
    while (ended < NPROD * NPART) {
        tfos__ring_rec recs[16];
        size_t n;
        CHECK_RC(tfos__ring_read_batch(c, recs, 16, &n, LONG_MS), 0);
        for (size_t i = 0; i < n; i++) {
            const tfos__ring_rec *r = &recs[i];
            if (r->tag == TFOS_RING_PARTITION_BEGIN) {
                CHECK(!in_part); /* no interleaving */
                in_part = 1;
                cur = r->partition;
                next = 0;
            } else if (r->tag == TFOS_RING_DATA) {
                CHECK(in_part);
                struct row h;
                CHECK(r->len >= sizeof h);
                memcpy(&h, r->data, sizeof h);
                CHECK(h.part == cur && h.seq == next && h.len == r->len);
                CHECK(r->len == row_len(cur, next));
                CHECK(same((const uint8_t *)r->data + sizeof h, r->len - sizeof h, (uint32_t)cur * 7919u + next));
                next++;
            } else {
                CHECK(r->tag == TFOS_RING_PARTITION_END);
                CHECK(in_part && r->partition == cur && next == part_rows(cur));
                int id = (int)(cur / 1000) - 1, k = (int)(cur % 1000);
                CHECK(id >= 0 && id < NPROD && k >= 0 && k < NPART && !done[id][k]);
                done[id][k] = 1;
                in_part = 0;
                ended++;
            }
        }
        tfos__ring_release(c);
    }
    for (int i = 0; i < NPROD; i++)
        CHECK(exited_ok(reap(kids[i])));
    tfos__ring_stats st = stats(c);
    CHECK(st.partitions_completed == NPROD * NPART && st.partitions_begun == NPROD * NPART);
    CHECK(st.partitions_aborted == 0 && st.producers == 0 && st.unclean_exits == 0);

    tfos__ring *p;
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_end_feed(p, LONG_MS), 0);
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_EEND);
    tfos__ring_close(p);
    close(fd);
    tfos__ring_close(c);
}

/* ---- killed producers --------------------------------------------------- */

/* Dies by SIGKILL holding the producer lock, inside partition 77. */
static void test_killed_producer_self(void)
{
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *p;
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK_RC(tfos__ring_partition_begin(p, 77, LONG_MS), 0);
        for (int i = 0; i < 3; i++)
            CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "row", 3, LONG_MS), 0);
        void *buf; /* a half-written reservation, never committed */
        CHECK_RC(tfos__ring_reserve(p, TFOS_RING_DATA, 100, &buf, LONG_MS), 0);
        memset(buf, 'h', 100);
        kill(getpid(), SIGKILL);
        for (;;)
            pause();
    }
    expect(c, TFOS_RING_PARTITION_BEGIN, 77);
    for (int i = 0; i < 3; i++)
        expect(c, TFOS_RING_DATA, 0);
    expect(c, TFOS_RING_PARTITION_ABORT, 77); /* "partition 77 incomplete" */
    tfos__ring_rec rec;
    /* No error for the consumer (the child is an unreaped zombie): a re-feed
     * may come, so it waits on, within its timeout. */
    CHECK_RC(tfos__ring_peek(c, &rec, 300), TFOS_ETIMEDOUT);
    CHECK_RC(tfos__ring_peek(c, &rec, 100), TFOS_ETIMEDOUT);
    tfos__ring_stats st = stats(c);
    CHECK(st.partitions_aborted == 1 && st.unclean_exits == 1 && st.producers == 0 && st.records == 3);
    CHECK(st.dead_pid == pid && st.last_aborted == 77);
    CHECK(st.last_aborted_rows == TFOS_RING_ROWS_UNKNOWN); /* written without row counts */
    CHECK(killed_by(reap(pid), SIGKILL));

    /* The ring still works for a new producer. */
    tfos__ring *p;
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_partition_begin(p, 77, 0), 0);
    CHECK_RC(tfos__ring_partition_end(p, 0), 0);
    expect(c, TFOS_RING_PARTITION_BEGIN, 77);
    expect(c, TFOS_RING_PARTITION_END, 77);
    tfos__ring_close(p);
    close(fd);
    tfos__ring_close(c);
}

/* A producer waiting for the lock takes it over from a killed owner. */
static void test_killed_producer_takeover(void)
{
    tfos__ring *c;
    int fd, ready[2];
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK(pipe(ready) == 0);
    pid_t a = fork();
    CHECK(a >= 0);
    if (a == 0) {
        alarm(60);
        tfos__ring *p;
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK_RC(tfos__ring_partition_begin(p, 88, LONG_MS), 0);
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "a1", 2, LONG_MS), 0);
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "a2", 2, LONG_MS), 0);
        CHECK(write(ready[1], "r", 1) == 1);
        for (;;)
            pause(); /* holds the lock until killed */
    }
    char ch;
    CHECK(read(ready[0], &ch, 1) == 1);
    pid_t b = fork();
    CHECK(b >= 0);
    if (b == 0) {
        alarm(60);
        tfos__ring *p;
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK_RC(tfos__ring_partition_begin(p, 89, LONG_MS), 0);
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "b1", 2, LONG_MS), 0);
        CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "b2", 2, LONG_MS), 0);
        CHECK_RC(tfos__ring_partition_end(p, LONG_MS), 0);
        tfos__ring_close(p);
        _exit(0);
    }
    WAIT_FOR(stats(c).producers == 2);
    expect(c, TFOS_RING_PARTITION_BEGIN, 88);
    expect(c, TFOS_RING_DATA, 0);
    expect(c, TFOS_RING_DATA, 0);
    CHECK(kill(a, SIGKILL) == 0);
    expect(c, TFOS_RING_PARTITION_ABORT, 88);
    expect(c, TFOS_RING_PARTITION_BEGIN, 89);
    tfos__ring_rec rec = expect(c, TFOS_RING_DATA, 0);
    CHECK(rec.len == 2 && memcmp(rec.data, "b1", 2) == 0);
    expect(c, TFOS_RING_DATA, 0);
    expect(c, TFOS_RING_PARTITION_END, 89);
    CHECK(exited_ok(reap(b)));
    /* Every producer is gone now and one of them died: no error, the
     * consumer waits for a re-feed within its timeout. */
    CHECK_RC(tfos__ring_peek(c, &rec, 300), TFOS_ETIMEDOUT);
    CHECK(stats(c).dead_pid == a);
    CHECK(killed_by(reap(a), SIGKILL));
    close(ready[0]);
    close(ready[1]);
    close(fd);
    tfos__ring_close(c);
}

/* Killed while blocked on a full ring, inside partition 99. */
static void test_killed_producer_blocked(void)
{
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *p;
        static uint8_t buf[1000];
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK_RC(tfos__ring_partition_begin(p, 99, LONG_MS), 0);
        for (;;)
            CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 60000), 0);
    }
    WAIT_FOR(stats(c).records == 4); /* BEGIN + 4 x 1008 bytes: full */
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(killed_by(reap(pid), SIGKILL));
    expect(c, TFOS_RING_PARTITION_BEGIN, 99);
    for (int i = 0; i < 4; i++)
        expect(c, TFOS_RING_DATA, 0);
    expect(c, TFOS_RING_PARTITION_ABORT, 99);
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, 300), TFOS_ETIMEDOUT);
    close(fd);
    tfos__ring_close(c);
}

/* ---- resuming a partition after its producer's death -------------------- */

/* Write `n` rows as one record of n row numbers, counted as n rows. */
static int write_ids(tfos__ring *p, uint64_t from, uint64_t n, int timeout_ms)
{
    uint64_t ids[64];
    for (uint64_t i = 0; i < n; i++)
        ids[i] = from + i;
    return tfos__ring_write_rows(p, TFOS_RING_DATA, ids, n * sizeof ids[0], n, timeout_ms);
}

static uint64_t resume(tfos__ring *p, uint64_t part, uint64_t key)
{
    uint64_t first = 99999;
    CHECK_RC(tfos__ring_partition_resume(p, part, key, &first, 0), 0);
    return first;
}

/* The re-feed of an aborted partition resumes where the ring's copy stops
 * when its key is the same; with another key, after a fresh begin, or when a
 * record's rows were not counted it starts at row 0; the table keeps the
 * latest 32 partitions. A producer closing inside a partition aborts it
 * exactly as its death does (the same takeover: lock_fixup). */
static void test_resume_rules(void)
{
    tfos__ring *c, *p;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 1 << 16, TFOS_RING_CONSUMER), 0);
    struct {
        uint64_t part, first; /* expected BEGINs, in order */
    } begins[64];
    int nb = 0;
#define ABORTED(part_, key_, rows_)                                                                \
    do {                                                                                           \
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);                               \
        begins[nb].part = (part_);                                                                 \
        begins[nb++].first = resume(p, (part_), (key_));                                           \
        CHECK_RC(write_ids(p, 0, (rows_), 0), 0);                                                  \
        tfos__ring_close(p); /* inside the partition: aborted */                                   \
    } while (0)
    ABORTED(6, 1, 5);
    CHECK(begins[nb - 1].first == 0 && stats(c).last_aborted_rows == 5);
    ABORTED(6, 2, 2); /* another key: from row 0 */
    CHECK(begins[nb - 1].first == 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_partition_begin(p, 6, 0), 0); /* a fresh feed forgets it */
    begins[nb].part = 6;
    begins[nb++].first = 0;
    CHECK_RC(write_ids(p, 0, 3, 0), 0);
    tfos__ring_close(p);
    ABORTED(6, 0, 4); /* the fresh feed's own abort (key 0) is kept: 3 rows, then 4 more */
    CHECK(begins[nb - 1].first == 3 && stats(c).last_aborted_rows == 7);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0); /* rows not said: no entry */
    begins[nb].part = 6;
    begins[nb++].first = resume(p, 6, 0);
    CHECK(begins[nb - 1].first == 7);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "x", 1, 0), 0);
    tfos__ring_close(p);
    CHECK(stats(c).last_aborted == 6 && stats(c).last_aborted_rows == TFOS_RING_ROWS_UNKNOWN);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK(resume(p, 6, 0) == 0);
    begins[nb].part = 6;
    begins[nb++].first = 0;
    CHECK_RC(tfos__ring_partition_end(p, 0), 0);
    tfos__ring_close(p);
    /* 40 partitions aborted: the table keeps the latest 32 */
    for (uint64_t k = 100; k < 140; k++) {
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK(resume(p, k, 9) == 0);
        CHECK_RC(write_ids(p, 0, k - 90, 0), 0);
        tfos__ring_close(p);
    }
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    for (uint64_t k = 100; k < 140; k++) {
        CHECK(resume(p, k, 9) == (k < 108 ? 0 : k - 90));
        CHECK_RC(tfos__ring_partition_end(p, 0), 0);
    }
    CHECK(stats(c).resumed == 2 + 32);
    tfos__ring_close(p);
    /* what the consumer saw: each BEGIN with the row it starts at */
    int k = 0;
    for (;;) {
        tfos__ring_rec rec;
        int rc = tfos__ring_peek(c, &rec, 0);
        if (rc == TFOS_EAGAIN)
            break;
        CHECK_RC(rc, 0);
        if (rec.tag == TFOS_RING_PARTITION_BEGIN && k < nb) {
            CHECK(rec.partition == begins[k].part && rec.first == begins[k].first);
            k++;
        }
        tfos__ring_release(c);
    }
    CHECK(k == nb);
#undef ABORTED
    close(fd);
    tfos__ring_close(c);
}

/* Producers SIGKILLed at random moments (writing, blocked on a full ring,
 * between records) while feeding one partition, each re-feed resuming it:
 * every BEGIN starts exactly at the rows the consumer got before the ABORT,
 * so the consumer sees the partition's rows 0..N-1 once each, in order. The
 * count must never be high (rows lost) nor low (rows twice). */
static void test_resume_exact_under_kills(void)
{
    enum { PART = 1000, KEY = 7, ROWS = 4000 };
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    uint64_t seen = 0;
    int done = 0, resumed = 0;
    for (uint32_t round = 0; !done; round++) {
        CHECK(round < 400);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(60);
            tfos__ring *p;
            CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
            uint64_t row;
            CHECK_RC(tfos__ring_partition_resume(p, PART, KEY, &row, LONG_MS), 0);
            for (uint32_t i = 0; row < ROWS; i++) {
                uint64_t n = 1 + hash32(round * 7919u + i) % 40;
                n = n < ROWS - row ? n : ROWS - row;
                CHECK_RC(write_ids(p, row, n, LONG_MS), 0);
                row += n;
            }
            CHECK_RC(tfos__ring_partition_end(p, LONG_MS), 0);
            tfos__ring_close(p);
            _exit(0);
        }
        /* kill it after a random number of records (0: before its BEGIN, maybe) */
        uint32_t h = hash32(round + 12345u);
        uint32_t kill_after = h % 12, taken = 0;
        int killed = 0, began = 0, over = 0;
        if (kill_after == 0) {
            if (h & 16)
                nap_ms(1);
            kill(pid, SIGKILL);
            killed = 1;
        }
        while (!over) {
            tfos__ring_rec rec;
            int rc = tfos__ring_peek(c, &rec, 500);
            if (rc == TFOS_ETIMEDOUT) {
                /* nothing more comes: only a producer killed before its
                 * partition was open leaves no ABORT */
                CHECK(killed && !began);
                break;
            }
            CHECK_RC(rc, 0);
            if (rec.tag == TFOS_RING_PARTITION_BEGIN) {
                CHECK(rec.partition == PART && rec.first == seen);
                resumed += rec.first > 0;
                began = 1;
            } else if (rec.tag == TFOS_RING_DATA) {
                CHECK(began && rec.len % 8 == 0);
                const uint64_t *ids = rec.data;
                for (uint32_t i = 0; i < rec.len / 8; i++)
                    CHECK(ids[i] == seen + i);
                seen += rec.len / 8;
                if (!killed && ++taken == kill_after) {
                    if (h & 32)
                        nap_ms(1);
                    kill(pid, SIGKILL);
                    killed = 1;
                }
            } else {
                CHECK(rec.partition == PART);
                CHECK(rec.tag == TFOS_RING_PARTITION_ABORT || rec.tag == TFOS_RING_PARTITION_END);
                done = rec.tag == TFOS_RING_PARTITION_END;
                CHECK(!done || seen == ROWS);
                over = 1;
            }
            tfos__ring_release(c);
        }
        int st = reap(pid);
        CHECK(killed ? (killed_by(st, SIGKILL) || exited_ok(st)) : exited_ok(st));
    }
    CHECK(seen == ROWS && resumed > 0);
    close(fd);
    tfos__ring_close(c);
}

/* A producer dies in the middle of committing a record of 3 rows: it has
 * stored the count before it, the tail after it and (or not yet) the new
 * count, and not the tail itself (ring.c's order). The record is not in the
 * ring, so its rows must not count: the re-feed starts at row 10, not 13.
 * The state is set up by hand (a kill cannot be aimed at one store). */
static void test_resume_count_mid_commit(void)
{
    for (int variant = 0; variant < 3; variant++) {
        tfos__ring *c;
        int fd;
        CHECK_RC(tfos__ring_create(&c, &fd, 1 << 16, TFOS_RING_CONSUMER), 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(60);
            tfos__ring *p;
            CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
            CHECK(resume(p, 4, 2) == 0);
            CHECK_RC(write_ids(p, 0, 5, 0), 0);
            CHECK_RC(write_ids(p, 5, 5, 0), 0);
            uint64_t tail, v[3];
            CHECK(pread(fd, &tail, 8, 64) == 8);
            /* part_rows (2120), part_rows_prev (2128), part_rows_tail (2136) */
            v[0] = variant == 2 ? 10 : 13;
            v[1] = 10;
            v[2] = variant == 0 ? 0 : tail + 32;
            if (variant > 0)
                CHECK(pwrite(fd, v, sizeof v, 2120) == (ssize_t)sizeof v);
            kill(getpid(), SIGKILL);
            for (;;)
                pause();
        }
        CHECK(killed_by(reap(pid), SIGKILL));
        expect(c, TFOS_RING_PARTITION_BEGIN, 4);
        expect(c, TFOS_RING_DATA, 0);
        expect(c, TFOS_RING_DATA, 0);
        expect(c, TFOS_RING_PARTITION_ABORT, 4);
        CHECK(stats(c).last_aborted_rows == 10);
        tfos__ring *p;
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        CHECK(resume(p, 4, 2) == 10);
        tfos__ring_close(p);
        close(fd);
        tfos__ring_close(c);
    }
}

/* tfos__ring_shut (the node is stopping): a sleeping consumer wakes, reads
 * what is left, then gets TFOS_ECLOSED, every call; producers get it at
 * once, waiting for acknowledgements too. */
static void test_shut(void)
{
    tfos__ring *c, *p;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *o;
        CHECK_RC(tfos__ring_attach(&o, fd, TFOS_RING_OBSERVER), 0);
        nap_ms(200);
        CHECK_RC(tfos__ring_shut(o), 0);
        tfos__ring_close(o);
        _exit(0);
    }
    tfos__ring_rec rec;
    uint64_t t0 = ms_now();
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_ECLOSED); /* woken */
    CHECK(ms_now() - t0 < LONG_MS / 2);
    CHECK(exited_ok(reap(pid)));
    CHECK(stats(c).shut);
    close(fd);
    tfos__ring_close(c);

    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "left", 4, 0), 0);
    CHECK_RC(tfos__ring_shut(p), 0);
    expect(c, TFOS_RING_DATA, 0); /* what was there comes first */
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_ECLOSED);
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_ECLOSED);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "late", 4, LONG_MS), TFOS_ECLOSED);
    CHECK_RC(tfos__ring_partition_begin(p, 1, LONG_MS), TFOS_ECLOSED);
    CHECK_RC(tfos__ring_wait_acked(p, 5, LONG_MS), TFOS_ECLOSED);
    tfos__ring_close(p);
    close(fd);
    tfos__ring_close(c);
}

/* ---- killed consumer ---------------------------------------------------- */

static void test_killed_consumer(void)
{
    tfos__ring *p;
    int fd, ready[2], die[2];
    CHECK_RC(tfos__ring_create(&p, &fd, 4096, TFOS_RING_PRODUCER), 0);
    CHECK(pipe(ready) == 0 && pipe(die) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *c;
        CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
        CHECK(write(ready[1], "r", 1) == 1);
        char ch;
        CHECK(read(die[0], &ch, 1) == 1);
        kill(getpid(), SIGKILL);
        for (;;)
            pause();
    }
    char ch;
    CHECK(read(ready[0], &ch, 1) == 1);
    CHECK(stats(p).consumer_pid == pid);
    uint8_t buf[1000] = {0};
    while (tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0) == 0)
        ;
    CHECK(write(die[1], "d", 1) == 1);
    uint64_t t0 = ms_now();
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, LONG_MS), TFOS_ECLOSED);
    uint64_t el = ms_now() - t0;
    CHECK(el < LONG_MS / 3); /* typically ~25-50 ms */
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, 1, LONG_MS), TFOS_ECLOSED);
    CHECK(stats(p).consumer_closed);
    CHECK(killed_by(reap(pid), SIGKILL));
    close(ready[0]);
    close(ready[1]);
    close(die[0]);
    close(die[1]);
    close(fd);
    tfos__ring_close(p);

    /* A consumer that closes cleanly wakes a blocked producer too. */
    tfos__ring *c;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    while (tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0) == 0)
        ;
    tfos__ring_close(c);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, LONG_MS), TFOS_ECLOSED);
    CHECK_RC(tfos__ring_partition_begin(p, 1, 0), TFOS_ECLOSED);
    close(fd);
    tfos__ring_close(p);
}

/* ---- consumer handover: detach, re-attach, take over a dead one ---------- */

enum { HAND_LEN = 500 }; /* 508-byte records: 8 fill a 4096-byte ring */

static int write_seq(tfos__ring *p, uint32_t seq, int timeout_ms)
{
    uint8_t buf[HAND_LEN];
    fill(buf, sizeof buf, seq);
    memcpy(buf, &seq, sizeof seq);
    return tfos__ring_write(p, TFOS_RING_TAG_USER, buf, sizeof buf, timeout_ms);
}

/* Consume the next record, which must carry `seq`. */
static void expect_seq(tfos__ring *c, uint32_t seq)
{
    tfos__ring_rec rec = expect(c, TFOS_RING_TAG_USER, 0);
    uint32_t got;
    CHECK(rec.len == HAND_LEN);
    memcpy(&got, rec.data, sizeof got);
    if (got != seq)
        fprintf(stderr, "got record %u, want %u\n", got, seq);
    CHECK(got == seq);
}

/* In a child: attach as the consumer, read records [from, to), then detach
 * (or get killed, leaving the role behind). */
static pid_t consumer_child(int fd, uint32_t from, uint32_t to, int die)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        tfos__ring *c;
        CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
        for (uint32_t s = from; s < to; s++)
            expect_seq(c, s);
        if (die)
            kill(getpid(), SIGKILL);
        tfos__ring_detach(c);
        _exit(0);
    }
    return pid;
}

/* Acks: only the consumer's count, survives handover, read by producers. */
static void test_partition_acks(void)
{
    tfos__ring *p, *c;
    int fd;
    CHECK_RC(tfos__ring_create(&p, &fd, 4096, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_partition_begin(p, 7, LONG_MS), 0);
    CHECK_RC(write_seq(p, 0, 0), 0);
    CHECK_RC(tfos__ring_partition_end(p, LONG_MS), 0);
    tfos__ring_stats st = stats(p);
    CHECK(st.partitions_completed == 1 && st.acked == 0);
    tfos__ring_ack(p, 5); /* a producer cannot ack */
    CHECK(stats(p).acked == 0);
    tfos__ring_ack(c, 1);
    CHECK(stats(p).acked == 1);
    tfos__ring_detach(c);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    tfos__ring_ack(c, 2);
    CHECK(stats(p).acked == 3);
    tfos__ring_close(c);
    tfos__ring_close(p);
    close(fd);
}

static void test_consumer_handover(void)
{
    tfos__ring *p, *c, *x;
    int fd;
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_create(&p, &fd, 4096, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&x, fd, TFOS_RING_CONSUMER), TFOS_EINVAL); /* one at a time */
    for (uint32_t s = 0; s < 3; s++)
        CHECK_RC(write_seq(p, s, 0), 0);
    expect_seq(c, 0);
    /* held by a peek, not released: the next consumer gets it again */
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), 0);
    tfos__ring_detach(c);
    tfos__ring_stats st = stats(p);
    CHECK(st.consumer_pid == 0 && !st.consumer_closed && !st.consumer_terminated);

    /* Nobody consumes: records still go in, and a full ring makes producers
     * wait (for a consumer, or their timeout), never fail as closed. */
    uint32_t next = 3;
    while (write_seq(p, next, 0) == 0)
        next++;
    CHECK(next == 9); /* 8 records fill the ring; 1 and 2 are still in it */
    uint64_t t0 = ms_now();
    CHECK_RC(write_seq(p, next, 200), TFOS_ETIMEDOUT);
    CHECK(ms_now() - t0 >= 150);

    /* A consumer in another process reads on, in order, from record 1, and
     * hands over again; then it exits: it is not a dead consumer. */
    pid_t pid = consumer_child(fd, 1, 5, 0);
    CHECK_RC(write_seq(p, next++, LONG_MS), 0); /* room as soon as it reads */
    CHECK(exited_ok(reap(pid)));
    CHECK(stats(p).consumer_pid == 0);
    while (write_seq(p, next, 0) == 0)
        next++;
    CHECK_RC(write_seq(p, next, 100), TFOS_ETIMEDOUT);

    /* The same process may come back as the consumer. */
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK(stats(p).consumer_pid == (int32_t)getpid());
    for (uint32_t s = 5; s < next; s++)
        expect_seq(c, s);
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EAGAIN);

    /* A producer's detach is its close. */
    CHECK_RC(tfos__ring_attach(&x, fd, TFOS_RING_PRODUCER), 0);
    CHECK(stats(p).producers == 2);
    tfos__ring_detach(x);
    CHECK(stats(p).producers == 1);
    tfos__ring_detach(NULL);

    /* The end of the feed is seen by every later consumer. */
    CHECK_RC(write_seq(p, next, 0), 0);
    CHECK_RC(tfos__ring_end_feed(p, 0), 0);
    expect_seq(c, next);
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_EEND);
    tfos__ring_detach(c);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_EEND);

    /* close (not detach) ends it: no consumer after that one */
    tfos__ring_close(c);
    CHECK(stats(p).consumer_terminated);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), TFOS_EINVAL);
    close(fd);
    tfos__ring_close(p);
}

static void test_dead_consumer_takeover(void)
{
    tfos__ring *p, *c;
    int fd;
    CHECK_RC(tfos__ring_create(&p, &fd, 4096, TFOS_RING_PRODUCER), 0);
    for (uint32_t s = 0; s < 4; s++)
        CHECK_RC(write_seq(p, s, 0), 0);
    /* a consumer dies holding the role; no producer noticed yet */
    pid_t pid = consumer_child(fd, 0, 2, 1);
    CHECK(killed_by(reap(pid), SIGKILL));
    tfos__ring_stats st = stats(p);
    CHECK(st.consumer_pid == pid && !st.consumer_closed);
    /* a new one takes over and reads on */
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK(stats(p).consumer_pid == (int32_t)getpid());
    expect_seq(c, 2);
    expect_seq(c, 3);
    tfos__ring_detach(c);

    /* A dead consumer that a producer found first: the ring is closed for
     * good, no takeover. */
    for (uint32_t s = 4; s < 12; s++)
        CHECK_RC(write_seq(p, s, 0), 0);
    pid = consumer_child(fd, 4, 5, 1);
    CHECK(killed_by(reap(pid), SIGKILL));
    CHECK_RC(write_seq(p, 12, 0), 0);
    CHECK_RC(write_seq(p, 13, LONG_MS), TFOS_ECLOSED);
    CHECK(stats(p).consumer_closed);
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), TFOS_EINVAL);
    close(fd);
    tfos__ring_close(p);
}

/* ---- corrupt or hostile shared memory ----------------------------------- */

static void poke(int fd, off_t off, const void *v, size_t n)
{
    CHECK(pwrite(fd, v, n, off) == (ssize_t)n);
}

static void poke64(int fd, off_t off, uint64_t v)
{
    poke(fd, off, &v, sizeof v);
}

static void poke32(int fd, off_t off, uint32_t v)
{
    poke(fd, off, &v, sizeof v);
}

static int allowed(int rc)
{
    return rc == 0 || rc == TFOS_EPROTO || rc == TFOS_EINVAL || rc == TFOS_EFULL || rc == TFOS_EAGAIN ||
           rc == TFOS_ECLOSED || rc == TFOS_EEND || rc == TFOS_ETIMEDOUT;
}

static void test_corrupt_header(void)
{
    tfos__ring *r, *c, *p;
    int fd, pfd[2];

    /* things that are not rings at all */
    CHECK(pipe(pfd) == 0);
    CHECK_RC(tfos__ring_attach(&r, pfd[0], TFOS_RING_OBSERVER), TFOS_EPROTO);
    close(pfd[0]);
    close(pfd[1]);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    CHECK(null >= 0);
    CHECK_RC(tfos__ring_attach(&r, null, TFOS_RING_OBSERVER), TFOS_EPROTO);
    close(null);
    CHECK_RC(tfos__ring_attach(&r, -1, TFOS_RING_OBSERVER), TFOS_EINVAL);

    /* a valid header in a memfd that could still shrink under us */
    CHECK_RC(tfos__ring_create(&r, &fd, 4096, TFOS_RING_OBSERVER), 0);
    static uint8_t page[HDR];
    CHECK(pread(fd, page, HDR, 0) == HDR);
    tfos__ring_close(r);
    close(fd);
    int mfd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(mfd >= 0 && ftruncate(mfd, HDR + 4096) == 0);
    poke(mfd, 0, page, HDR);
    CHECK_RC(tfos__ring_attach(&r, mfd, TFOS_RING_OBSERVER), TFOS_EPROTO);
    close(mfd);
    /* sealed, but too small for any ring */
    mfd = memfd_create("tiny", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(mfd >= 0 && ftruncate(mfd, 100) == 0);
    CHECK(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    CHECK_RC(tfos__ring_attach(&r, mfd, TFOS_RING_OBSERVER), TFOS_EPROTO);
    close(mfd);

    /* a real ring, one header field broken at a time */
    CHECK_RC(tfos__ring_create(&r, &fd, 8192, TFOS_RING_OBSERVER), 0);
    CHECK(pread(fd, page, HDR, 0) == HDR);
    struct {
        off_t off;
        uint64_t val;
        int width;
    } bad[] = {
        {0, 0x5858585858585858ull, 8}, /* magic */
        {8, 1, 4},                      /* version (1: the header before the counters and report) */
        {12, 100, 4},                   /* header size */
        {16, 3000, 8},                  /* capacity not a power of two */
        {16, 4096, 8},                  /* capacity does not match the file */
        {16, 1ull << 40, 8},            /* capacity beyond the limit */
        {16, 0, 8},
        {24, 5, 4},                     /* producer slots */
        {64, 3, 8},                     /* tail not aligned */
        {64, 8192 + 8, 8},              /* tail - head > capacity */
        {128, 16, 8},                   /* head beyond tail */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].width == 8)
            poke64(fd, bad[i].off, bad[i].val);
        else
            poke32(fd, bad[i].off, (uint32_t)bad[i].val);
        CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), TFOS_EPROTO);
        CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_PRODUCER), TFOS_EPROTO);
        poke(fd, 0, page, HDR);
    }
    tfos__ring_close(r);

    /* hostile records and indices after attach */
    CHECK_RC(tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "12345678", 8, 0), 0);
    uint64_t hdr;
    CHECK(pread(fd, &hdr, 8, HDR) == 8);
    struct {
        uint32_t len, tag;
    } recbad[] = {
        {100000, TFOS_RING_DATA},         /* past the end of the buffer */
        {100, TFOS_RING_DATA},            /* past the tail */
        {0xffffffffu, TFOS_RING_DATA},
        {8, 77},                          /* reserved tag */
        {4, TFOS_RING_PARTITION_BEGIN},   /* marker without its id */
        {8000, 0},                        /* padding past the tail */
    };
    tfos__ring_rec rec;
    for (size_t i = 0; i < sizeof recbad / sizeof recbad[0]; i++) {
        poke64(fd, HDR, (uint64_t)recbad[i].len | (uint64_t)recbad[i].tag << 32);
        CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EPROTO);
    }
    poke64(fd, HDR, hdr);
    CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
    CHECK(rec.len == 8 && memcmp(rec.data, "12345678", 8) == 0);
    uint64_t tail;
    CHECK(pread(fd, &tail, 8, 64) == 8 && tail == 16);
    poke64(fd, 64, 8192 + 64); /* tail runs ahead of head by more than capacity */
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EPROTO);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "x", 1, 0), TFOS_EPROTO);
    poke64(fd, 64, 20); /* unaligned */
    CHECK_RC(tfos__ring_peek(c, &rec, 0), TFOS_EPROTO);
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "x", 1, 0), TFOS_EPROTO);
    poke64(fd, 64, tail);
    CHECK_RC(tfos__ring_peek(c, &rec, 0), 0);
    tfos__ring_close(p);
    tfos__ring_close(c);
    close(fd);

    /* Mutation fuzz of the header: anything may fail, nothing may crash or hang. */
    CHECK_RC(tfos__ring_create(&r, &fd, 4096, TFOS_RING_OBSERVER), 0);
    CHECK(pread(fd, page, HDR, 0) == HDR);
    tfos__ring_close(r);
    uint32_t rnd = 99;
    for (int it = 0; it < 400; it++) {
        poke(fd, 0, page, HDR);
        int flips = 1 + (int)(hash32(rnd++) % 6);
        for (int k = 0; k < flips; k++) {
            uint32_t h = hash32(rnd++);
            uint8_t v = (uint8_t)(h >> 24);
            poke(fd, (off_t)(h % 400), &v, 1);
        }
        if (hash32(rnd++) % 4 == 0) { /* random record bytes too */
            uint64_t junk = (uint64_t)hash32(rnd) << 32 | hash32(rnd + 1);
            rnd += 2;
            poke64(fd, HDR + (off_t)(hash32(rnd++) % 4096 & ~7u), junk);
        }
        int rc = tfos__ring_attach(&r, fd, TFOS_RING_OBSERVER);
        CHECK(allowed(rc));
        if (rc == 0) {
            tfos__ring_stats st = stats(r);
            CHECK(st.used <= st.capacity);
            tfos__ring_close(r);
        }
        rc = tfos__ring_attach(&c, fd, TFOS_RING_CONSUMER);
        CHECK(allowed(rc));
        if (rc == 0) {
            tfos__ring_rec recs[4];
            size_t n;
            for (int k = 0; k < 3; k++) {
                rc = tfos__ring_read_batch(c, recs, 4, &n, 0);
                CHECK(allowed(rc));
                if (rc == 0)
                    tfos__ring_release(c);
            }
            tfos__ring_close(c);
        }
        rc = tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER);
        CHECK(allowed(rc));
        if (rc == 0) {
            CHECK(allowed(tfos__ring_write(p, TFOS_RING_DATA, "fuzz", 4, 0)));
            CHECK(allowed(tfos__ring_partition_begin(p, 3, 0)));
            tfos__ring_close(p);
        }
    }
    close(fd);
}

/* ---- fd passed to another process over a socket ------------------------- */

/* The ring's fd reaches a process that did not inherit it the way producers
 * get it from the feed socket: with a frame of a link (core/link.h, whose
 * own test covers the passing itself). */
static void test_fd_passing(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t pid = fork(); /* before the ring exists: the child only gets it by SCM_RIGHTS */
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        close(sv[0]);
        tfos__link *k;
        CHECK_RC(tfos__link_wrap(&k, sv[1], &tfos__transport_unix), 0);
        tfos__frame f;
        const char *why = NULL;
        CHECK_RC(tfos__link_wait_frame(k, LONG_MS, &f, &why), 0);
        int fd = tfos__link_take_fd(k);
        CHECK(fd >= 0);
        tfos__link_close(k);
        tfos__ring *p;
        CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
        close(fd);
        static uint8_t buf[2000];
        for (uint32_t i = 0; i < 300; i++) {
            size_t len = hash32(i) % sizeof buf;
            fill(buf, len, i);
            CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, len, LONG_MS), 0);
        }
        CHECK_RC(tfos__ring_end_feed(p, LONG_MS), 0);
        tfos__ring_close(p);
        _exit(0);
    }
    close(sv[1]);
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 16384, TFOS_RING_CONSUMER), 0);
    tfos__link *k;
    CHECK_RC(tfos__link_wrap(&k, sv[0], &tfos__transport_unix), 0);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_FEED_OK);
    tfos__msg_add(&m, "node", "worker:0");
    CHECK_RC(tfos__msg_end(&m), 0);
    CHECK_RC(tfos__link_send_fds(k, &m, &fd, 1), 0);
    CHECK_RC(tfos__link_flush_wait(k, LONG_MS), 0);
    tfos__msg_fini(&m);
    close(fd);
    for (uint32_t i = 0; i < 300; i++) {
        tfos__ring_rec rec = expect(c, TFOS_RING_DATA, 0);
        CHECK(rec.len == hash32(i) % 2000 && same(rec.data, rec.len, i));
    }
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, LONG_MS), TFOS_EEND);
    CHECK(exited_ok(reap(pid)));
    tfos__ring_close(c);
    tfos__link_close(k);
}

/* ---- producer and consumer threads (heavy sleep/wake traffic) ----------- */

struct thread_arg {
    int fd;
    int rc;
};

enum { TH_PARTS = 200, TH_ROWS = 500 };

static void *producer_thread(void *arg)
{
    struct thread_arg *a = arg;
    tfos__ring *p;
    a->rc = tfos__ring_attach(&p, a->fd, TFOS_RING_PRODUCER);
    if (a->rc)
        return NULL;
    uint8_t buf[64];
    for (uint32_t k = 0; k < TH_PARTS && !a->rc; k++) {
        a->rc = tfos__ring_partition_begin(p, k, LONG_MS);
        for (uint32_t s = 0; s < TH_ROWS && !a->rc; s++) {
            uint32_t v = k * TH_ROWS + s;
            size_t len = 4 + v % 60;
            memcpy(buf, &v, 4);
            if (s % 2) {
                a->rc = tfos__ring_write(p, TFOS_RING_DATA, buf, len, LONG_MS);
            } else {
                void *dst;
                a->rc = tfos__ring_reserve(p, TFOS_RING_DATA, len, &dst, LONG_MS);
                if (!a->rc) {
                    memcpy(dst, buf, len);
                    a->rc = tfos__ring_commit(p, len);
                }
            }
        }
        if (!a->rc)
            a->rc = tfos__ring_partition_end(p, LONG_MS);
    }
    if (!a->rc)
        a->rc = tfos__ring_end_feed(p, LONG_MS);
    tfos__ring_close(p);
    return NULL;
}

static void test_threads(void)
{
    tfos__ring *c;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    struct thread_arg a = {fd, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_thread, &a) == 0);
    uint32_t next = 0, parts = 0;
    for (;;) {
        tfos__ring_rec recs[32];
        size_t n;
        int rc = tfos__ring_read_batch(c, recs, 32, &n, LONG_MS);
        if (rc == TFOS_EEND)
            break;
        CHECK_RC(rc, 0);
        for (size_t i = 0; i < n; i++) {
            if (recs[i].tag == TFOS_RING_PARTITION_END) {
                CHECK(recs[i].partition == parts);
                parts++;
            } else if (recs[i].tag == TFOS_RING_DATA) {
                uint32_t v;
                memcpy(&v, recs[i].data, 4);
                CHECK(v == next && recs[i].len == 4 + v % 60);
                next++;
            } else {
                CHECK(recs[i].tag == TFOS_RING_PARTITION_BEGIN && recs[i].partition == parts);
            }
        }
        tfos__ring_release(c);
    }
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_RC(a.rc, 0);
    CHECK(next == TH_PARTS * TH_ROWS && parts == TH_PARTS);
    close(fd);
    tfos__ring_close(c);
}

/* ---- what the status page shows: rows, waits, the report --------------- */

static void test_counters_and_report(void)
{
    tfos__ring *c, *p, *obs;
    int fd;
    CHECK_RC(tfos__ring_create(&c, &fd, 4096, TFOS_RING_CONSUMER), 0);
    CHECK_RC(tfos__ring_attach(&p, fd, TFOS_RING_PRODUCER), 0);
    CHECK_RC(tfos__ring_attach(&obs, fd, TFOS_RING_OBSERVER), 0);
    char text[TFOS_RING_REPORT_MAX + 1];
    int64_t age = -1;
    CHECK_RC(tfos__ring_report_get(obs, text, sizeof text, &age), TFOS_EEND); /* nothing yet */

    /* rows: producers say what they committed, the consumer what it took;
     * only those roles count */
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, "abc", 3, 0), 0);
    tfos__ring_count_rows(p, 30);
    tfos__ring_count_rows(c, 1000);
    tfos__ring_count_taken(c, 12);
    tfos__ring_count_taken(p, 1000);
    tfos__ring_stats st = stats(obs);
    CHECK(st.rows_in == 30 && st.rows_out == 12);

    /* the consumer's sleep on an empty ring is counted, and so is a
     * producer's on a full one */
    expect(c, TFOS_RING_DATA, 0);
    uint64_t w0 = stats(obs).consumer_wait_ns;
    tfos__ring_rec rec;
    CHECK_RC(tfos__ring_peek(c, &rec, 200), TFOS_ETIMEDOUT);
    CHECK(stats(obs).consumer_wait_ns - w0 >= 150000000ull);
    uint8_t buf[1000] = {0};
    while (tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 0) == 0)
        ;
    CHECK_RC(tfos__ring_write(p, TFOS_RING_DATA, buf, sizeof buf, 200), TFOS_ETIMEDOUT);
    CHECK(stats(obs).producer_wait_ns >= 150000000ull);

    /* the report: the latest wins, its age is known, it counts as progress */
    uint64_t beats = stats(obs).progress;
    CHECK_RC(tfos__ring_report(p, "step=1 loss=2", 13), 0);
    CHECK_RC(tfos__ring_report(c, "step=2 loss=1.5", 15), 0);
    CHECK_RC(tfos__ring_report_get(obs, text, sizeof text, &age), 0);
    CHECK(strcmp(text, "step=2 loss=1.5") == 0 && age >= 0 && age < 1000);
    CHECK(stats(obs).progress == beats + 2);
    /* cut to the reader's buffer; too long to publish; empty is fine */
    char small[7];
    CHECK_RC(tfos__ring_report_get(obs, small, sizeof small, NULL), 0);
    CHECK(strcmp(small, "step=2") == 0);
    char big[TFOS_RING_REPORT_MAX + 1];
    memset(big, 'a', sizeof big);
    CHECK_RC(tfos__ring_report(obs, big, sizeof big), TFOS_ETOOBIG);
    CHECK_RC(tfos__ring_report(obs, big, TFOS_RING_REPORT_MAX), 0);
    CHECK_RC(tfos__ring_report_get(obs, text, sizeof text, NULL), 0);
    CHECK(strlen(text) == TFOS_RING_REPORT_MAX);
    CHECK_RC(tfos__ring_report(obs, "", 0), 0);
    CHECK_RC(tfos__ring_report_get(obs, text, sizeof text, NULL), 0);
    CHECK(text[0] == 0);

    /* a child process reports; the parent reads it */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        tfos__ring *o;
        CHECK_RC(tfos__ring_attach(&o, fd, TFOS_RING_OBSERVER), 0);
        CHECK_RC(tfos__ring_report(o, "step=99", 7), 0);
        tfos__ring_close(o);
        _exit(0);
    }
    CHECK(exited_ok(reap(pid)));
    CHECK_RC(tfos__ring_report_get(obs, text, sizeof text, NULL), 0);
    CHECK(strcmp(text, "step=99") == 0);
    close(fd);
    tfos__ring_close(obs);
    tfos__ring_close(p);
    tfos__ring_close(c);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    alarm(110); /* the whole binary, well within ctest's 120 s */
    struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"wrap_varied", test_wrap_varied},
        {"hot_window", test_hot_window},
        {"full_ring_blocks_producer", test_full_ring_blocks_producer},
        {"empty_ring_times_out_consumer", test_empty_ring_times_out_consumer},
        {"too_big_and_misuse", test_too_big_and_misuse},
        {"many_producers", test_many_producers},
        {"killed_producer_self", test_killed_producer_self},
        {"killed_producer_takeover", test_killed_producer_takeover},
        {"killed_producer_blocked", test_killed_producer_blocked},
        {"resume_rules", test_resume_rules},
        {"resume_exact_under_kills", test_resume_exact_under_kills},
        {"resume_count_mid_commit", test_resume_count_mid_commit},
        {"shut", test_shut},
        {"killed_consumer", test_killed_consumer},
        {"partition_acks", test_partition_acks},
        {"consumer_handover", test_consumer_handover},
        {"dead_consumer_takeover", test_dead_consumer_takeover},
        {"corrupt_header", test_corrupt_header},
        {"fd_passing", test_fd_passing},
        {"counters_and_report", test_counters_and_report},
        {"threads", test_threads}, /* last: no fork once a thread has run */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        printf("%s ... ", cases[i].name);
        fflush(stdout);
        uint64_t t0 = ms_now();
        cases[i].fn();
        printf("ok (%llu ms)\n", (unsigned long long)(ms_now() - t0));
        fflush(stdout);
    }
    /* no child left behind */
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
    printf("all ok\n");
    return 0;
}
