/* ring.c: the shared-memory feed ring (see ring.h for the contract).
 *
 * Shared layout (a cross-process format; the offsets are checked below):
 *      0 magic "TFOSRING"   8 version   12 header size   16 capacity
 *     24 max producers
 *     64 tail               72 data_seq (futex)   76 consumer waiting
 *    128 head              136 space_seq (futex)  140 producer waiting
 *    192 lock (futex: owner pid | waiters bit)    196 flags
 *    200 consumer pid      204 partition active   208 partition id
 *    216 partition end tail                       224 unclean exits   228 partitions acked
 *    256 counters: records, bytes, partitions begun/completed/aborted
 *    320 producer pids[64]
 *    576 application progress beats (tfos__ring_beat)
 *    640 rows committed, rows taken by the application, ns the consumer
 *        slept on an empty ring, ns producers slept on a full one
 *   1024 the application's report (tfos__ring_report): seqlock word,
 *        length, time, text
 *   2112 the open partition's key and row count (resuming, below), the
 *        last partition aborted and the last producer found dead
 *   3072 partitions to resume: RESUME_SLOTS x {id, key, rows, used}
 *   4096 data, `capacity` bytes
 *
 * Invariants:
 *  - head and tail are byte indices that only grow; offset = index & (cap-1).
 *    0 <= tail - head <= cap; both are multiples of 8. tail is written only
 *    by the holder of the producer lock, head only by the consumer.
 *  - Bytes in [head, tail) are committed records; a record's header and
 *    payload are written before the tail store that publishes it (release)
 *    and read after the tail load (acquire); symmetrically for head.
 *  - A record is contiguous: it never crosses the end of the buffer. A PAD
 *    record fills the gap. Record size <= cap/2, so an empty ring fits any.
 *  - Everything read from shared memory is treated as hostile: indices are
 *    re-validated on every use and lengths are copied once, then checked
 *    against the local capacity, so a peer can make us fail but not fault.
 *  - Partition state (active, id, end tail) changes only under the lock. The
 *    end tail is stored before the END/ABORT record is published, so a process
 *    that takes the lock over from a dead owner can tell whether the END made
 *    it into the ring (tail == end tail) or an ABORT is owed.
 *  - The open partition's row count is exact across its producer's death, by
 *    the same device: before publishing a record of n rows the producer stores
 *    the count before it (prev), the tail after it (rows tail), then prev + n;
 *    then the tail. Whoever takes the lock over reads prev + n if the tail
 *    reached the rows tail (the record is in the ring) and prev if not. The
 *    count may come out low (rows fed twice: at-least-once), never high (rows
 *    skipped by the re-feed: lost), whatever instant the producer died at.
 *
 * Wake-ups: a sleeper sets its "waiting" word, then re-checks the index; the
 * other side stores the index, then reads "waiting" (all seq_cst, so one of
 * the two sees the other) and only then bumps the futex word and wakes. The
 * fast path is one load of "waiting" and no system call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/ring.h"

#include "platform/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_MAGIC 0x474e4952534f4654ull /* "TFOSRING" read little-endian */
#define RING_VERSION 3u
#define RING_HEADER_SIZE 4096u
#define REC_HDR 8u
#define PART_PAYLOAD 8u     /* partition markers carry the 64-bit id */
#define BEGIN_PAYLOAD 16u   /* PARTITION_BEGIN: the id and the row it starts at */
#define RESUME_SLOTS 32u    /* aborted partitions remembered for their re-feed */
#define SLICE_NS 25000000ull /* longest sleep between checks of peers */
#define SPIN_LIMIT 128u     /* short bounded spin before sleeping */
#define LOCK_WAITERS 0x80000000u
#define LOCK_PID_MASK 0x7fffffffu
#define TAG_PAD 0u

enum {
    FLAG_FEED_ENDED = 1u,
    FLAG_CONSUMER_CLOSED = 2u,
    FLAG_CONSUMER_TERMINATED = 4u, /* closed on purpose */
    FLAG_SHUT = 8u,                /* tfos__ring_shut: no producer will write again */
    FLAG_READS_COLUMNS = 16u,      /* tfos__ring_set_reads_columns: a hint, never a state */
};

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shared futex words must be lock-free");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared 64-bit indices must be lock-free");

struct ring_shm {
    /* Fixed at creation; copied into the handle once at attach. */
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t capacity;
    uint32_t max_producers;
    uint32_t reserved0;

    /* Written by the lock holder. */
    _Alignas(64) _Atomic uint64_t tail;
    _Atomic uint32_t data_seq;     /* futex the consumer sleeps on */
    _Atomic uint32_t cons_waiting; /* consumer is (about to be) asleep */

    /* Written by the consumer. */
    _Alignas(64) _Atomic uint64_t head;
    _Atomic uint32_t space_seq;    /* futex a producer sleeps on */
    _Atomic uint32_t prod_waiting; /* a producer is (about to be) asleep */

    _Alignas(64) _Atomic uint32_t lock; /* 0 free, else owner pid | LOCK_WAITERS */
    _Atomic uint32_t flags;
    _Atomic int32_t consumer_pid;
    _Atomic uint32_t part_active;
    _Atomic uint64_t part_id;
    _Atomic uint64_t part_end_tail;
    _Atomic uint32_t unclean_exits;
    _Atomic uint32_t parts_acked;  /* partition ends the consumer's application has passed */

    /* Counters: written under the lock, read by anyone. */
    _Alignas(64) _Atomic uint64_t records;
    _Atomic uint64_t bytes;
    _Atomic uint64_t partitions_begun;
    _Atomic uint64_t partitions_completed;
    _Atomic uint64_t partitions_aborted;

    _Alignas(64) _Atomic int32_t producer_pid[TFOS_RING_MAX_PRODUCERS];

    /* Anyone: the application made progress (the hang watchdog reads it). */
    _Alignas(64) _Atomic uint64_t progress;

    /* Anyone: what the status page shows (relaxed adds; read as a snapshot). */
    _Alignas(64) _Atomic uint64_t rows_in;   /* tfos__ring_count_rows: rows producers committed */
    _Atomic uint64_t rows_out;               /* tfos__ring_count_taken: rows the application took */
    _Atomic uint64_t cons_wait_ns;           /* the consumer asleep on an empty ring */
    _Atomic uint64_t prod_wait_ns;           /* producers asleep on a full ring, added up */

    /* The application's latest report: seq is odd while one is written. */
    _Alignas(1024) _Atomic uint32_t report_seq;
    uint32_t report_len;
    uint64_t report_ms; /* CLOCK_MONOTONIC, ms: the same clock on every process of the host */
    char report[TFOS_RING_REPORT_MAX];

    /* The open partition (under the lock; see "row count" at the top). */
    _Alignas(64) _Atomic uint64_t part_key;
    _Atomic uint64_t part_rows;      /* rows of it in the ring up to part_rows_tail, from its row 0 */
    _Atomic uint64_t part_rows_prev; /* the count before the last record counted */
    _Atomic uint64_t part_rows_tail; /* the tail after that record */
    _Atomic uint32_t part_rows_known; /* 0 once a record of it came without a row count */
    _Atomic uint32_t resume_next;    /* slot evicted next when the table is full */
    _Atomic uint64_t last_abort_id;   /* the last partition aborted (stats) */
    _Atomic uint64_t last_abort_rows; /* its rows in the ring, or UINT64_MAX: unknown */
    _Atomic int32_t last_dead_pid;    /* the last producer found dead (stats) */
    _Atomic uint32_t resumed;         /* partitions begun where their aborted feed stopped */

    /* Aborted partitions whose rows are counted: a re-feed with the same id
     * and key resumes at `rows` (tfos__ring_partition_resume). Under the
     * lock; hostile values can make a re-feed skip rows, never fault. */
    _Alignas(1024) struct {
        _Atomic uint64_t id, key, rows, used;
    } resume[RESUME_SLOTS];
};

_Static_assert(offsetof(struct ring_shm, capacity) == 16, "layout");
_Static_assert(offsetof(struct ring_shm, tail) == 64, "layout");
_Static_assert(offsetof(struct ring_shm, head) == 128, "layout");
_Static_assert(offsetof(struct ring_shm, lock) == 192, "layout");
_Static_assert(offsetof(struct ring_shm, part_end_tail) == 216, "layout");
_Static_assert(offsetof(struct ring_shm, records) == 256, "layout");
_Static_assert(offsetof(struct ring_shm, producer_pid) == 320, "layout");
_Static_assert(offsetof(struct ring_shm, progress) == 576, "layout");
_Static_assert(offsetof(struct ring_shm, rows_in) == 640, "layout");
_Static_assert(offsetof(struct ring_shm, report_seq) == 1024, "layout");
_Static_assert(offsetof(struct ring_shm, part_key) == 2112, "layout");
_Static_assert(offsetof(struct ring_shm, resume) == 3072, "layout");
_Static_assert(sizeof(struct ring_shm) <= RING_HEADER_SIZE, "header page");

struct tfos__ring {
    struct ring_shm *shm;
    uint8_t *data;
    size_t map_len;
    uint64_t cap, mask;
    uint64_t hot;  /* producer: the hot window (ring_hot), cap when none */
    int role;
    int32_t pid;  /* process that attached this handle */
    int slot;     /* producer slot, or -1 */
    uint64_t next_check_ns; /* when peers are next checked for liveness */

    /* producer */
    bool locked;       /* holds the producer lock */
    bool in_partition; /* between partition_begin and _end (lock held) */
    bool reserved;
    uint32_t res_tag;
    uint64_t res_pos;  /* index of the reserved record's header */
    uint64_t res_pad;  /* padding bytes just before it (wrap), or 0 */
    size_t res_len;
    uint64_t part;     /* id of our open partition */

    /* consumer */
    uint64_t head;     /* our copy of head; the shared one is never read back */
    uint64_t held_end; /* index after the records handed out; == head if none */
    bool ended;
};

/* ---- small helpers ------------------------------------------------------ */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The least hot window of a ring of `cap` bytes: TFOS_RING_HOT_BYTES, or
 * TFOS_RING_HOT_MB from the environment (0: none); the whole ring (no window)
 * when it is not smaller than the ring. */
static uint64_t ring_hot(uint64_t cap)
{
    uint64_t hot = TFOS_RING_HOT_BYTES;
    const char *e = getenv("TFOS_RING_HOT_MB");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long mb = strtoull(e, &end, 10);
        if (!errno && !*end && mb <= (TFOS_RING_MAX_CAPACITY >> 20))
            hot = mb ? (uint64_t)mb << 20 : cap;
    }
    return hot < cap ? hot : cap;
}

typedef struct deadline {
    uint64_t end_ns;
    bool poll;    /* timeout 0: never sleep */
    bool forever; /* negative timeout */
} deadline;

static deadline dl_make(int timeout_ms)
{
    deadline d = {0, false, false};
    if (timeout_ms < 0)
        d.forever = true;
    else if (timeout_ms == 0)
        d.poll = true;
    else
        d.end_ns = now_ns() + (uint64_t)timeout_ms * 1000000ull;
    return d;
}

static bool dl_expired(const deadline *d)
{
    if (d->forever)
        return false;
    return d->poll || now_ns() >= d->end_ns;
}

/* How long the next sleep may last: a slice, or what is left. */
static uint64_t dl_slice_ns(const deadline *d)
{
    if (d->forever)
        return SLICE_NS;
    uint64_t t = now_ns();
    uint64_t left = d->end_ns > t ? d->end_ns - t : 0;
    return left < SLICE_NS ? left : SLICE_NS;
}

static int dl_fail(const deadline *d, int when_polling)
{
    return d->poll ? when_polling : TFOS_ETIMEDOUT;
}

/* Sleep while *word == val, at most ns. Shared (not private) futex: the word
 * lives in a MAP_SHARED mapping other processes wait on. Returns an errno
 * value: 0 (woken), ETIMEDOUT, EAGAIN (value differed), EINTR. */
static int futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    if (syscall(SYS_futex, (void *)word, FUTEX_WAIT, val, &ts, NULL, 0) == 0)
        return 0;
    return errno;
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (void *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Liveness of a peer: one definition for the ring and everything else
 * (platform/proc.h). */
static bool pid_alive(int32_t pid)
{
    return tfos__pid_alive(pid);
}

/* True at most once per slice: time to look at the peers again. */
static bool check_due(tfos__ring *r)
{
    uint64_t t = now_ns();
    if (t < r->next_check_ns)
        return false;
    r->next_check_ns = t + SLICE_NS;
    return true;
}

static uint64_t rec_size(uint64_t len)
{
    return REC_HDR + ((len + 7u) & ~(uint64_t)7u);
}

static bool is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

/* Record headers are one aligned 64-bit word (len | tag << 32), written and
 * read with a single access so a peer cannot change it between two reads. */
static void put_hdr(tfos__ring *r, uint64_t pos, uint32_t tag, uint32_t len)
{
    *(volatile uint64_t *)(void *)(r->data + (pos & r->mask)) = (uint64_t)len | (uint64_t)tag << 32;
}

static uint64_t get_hdr(const tfos__ring *r, uint64_t pos)
{
    return *(const volatile uint64_t *)(const void *)(r->data + (pos & r->mask));
}

/* Counters are written only by the lock holder: a plain load+store suffices. */
static void bump(_Atomic uint64_t *c, uint64_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

/* ---- producer lock ------------------------------------------------------ */

/* Take the producer lock. Returns 0 (taken), 1 (taken over from a dead
 * owner), TFOS_EAGAIN (busy, polling) or TFOS_ETIMEDOUT. */
static int lock_acquire(tfos__ring *r, const deadline *dl)
{
    _Atomic uint32_t *w = &r->shm->lock;
    const uint32_t me = (uint32_t)r->pid;
    uint32_t take = me; /* after sleeping, take it with the waiters bit set */
    unsigned spins = 0;
    bool slept_out = false;
    for (;;) {
        uint32_t cur = atomic_load(w);
        if (cur == 0) {
            if (atomic_compare_exchange_weak(w, &cur, take))
                return 0;
            continue;
        }
        if (!dl->poll && spins < SPIN_LIMIT) {
            spins++;
            cpu_relax();
            continue;
        }
        bool expired = dl_expired(dl);
        if (slept_out || expired) {
            slept_out = false;
            int32_t owner = (int32_t)(cur & LOCK_PID_MASK);
            if (owner != r->pid && !pid_alive(owner)) {
                if (atomic_compare_exchange_strong(w, &cur, me | (cur & LOCK_WAITERS))) {
                    atomic_store(&r->shm->last_dead_pid, owner);
                    return 1;
                }
                continue;
            }
        }
        if (expired)
            return dl_fail(dl, TFOS_EAGAIN);
        if (!(cur & LOCK_WAITERS)) {
            if (!atomic_compare_exchange_weak(w, &cur, cur | LOCK_WAITERS))
                continue;
            cur |= LOCK_WAITERS;
        }
        if (futex_wait(w, cur, dl_slice_ns(dl)) == ETIMEDOUT)
            slept_out = true;
        take = me | LOCK_WAITERS;
    }
}

static void lock_release(tfos__ring *r)
{
    _Atomic uint32_t *w = &r->shm->lock;
    uint32_t cur = atomic_load(w);
    /* Only ever release our own lock (a hostile peer may have rewritten it). */
    while ((cur & LOCK_PID_MASK) == (uint32_t)r->pid) {
        if (atomic_compare_exchange_weak(w, &cur, 0)) {
            if (cur & LOCK_WAITERS)
                futex_wake(w);
            break;
        }
    }
    r->locked = false;
}

/* ---- writing (lock held) ----------------------------------------------- */

/* Wait for room for a record of `len` payload bytes at the tail; fill in
 * r->res_pos/res_pad/res_len. The lock is held, so tail is ours. */
static int room(tfos__ring *r, size_t len, const deadline *dl)
{
    struct ring_shm *s = r->shm;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    if (tail & 7u)
        return TFOS_EPROTO;
    uint64_t total = rec_size(len);
    uint64_t off = tail & r->mask;
    uint64_t pad = off + total > r->cap ? r->cap - off : 0;
    /* The hot window: past r->hot bytes, or three records of this size if
     * that is more, the record starts again at offset 0 (the rest of the
     * buffer is one PAD record), as long as the window is at most four times
     * r->hot and half the ring. The records then cycle through the first
     * few MiB of it, which stay in the cache, instead of through all of it.
     * A consumer reads a record about two records after it was written: a
     * window of three 10 MB records still pays in a 32 MiB cache
     * (docs/FEED.md). */
    uint64_t window = 3 * total > r->hot ? 3 * total : r->hot;
    if (!pad && off >= window && window <= 4 * r->hot && window <= r->cap / 2)
        pad = r->cap - off;
    uint64_t need = pad + total;
    unsigned spins = 0;
    for (;;) {
        uint64_t used = tail - atomic_load_explicit(&s->head, memory_order_acquire);
        if (used > r->cap)
            return TFOS_EPROTO;
        if (r->cap - used >= need)
            break;
        if (atomic_load(&s->flags) & (FLAG_CONSUMER_CLOSED | FLAG_SHUT))
            return TFOS_ECLOSED;
        if (!dl->poll && spins < SPIN_LIMIT) {
            spins++;
            cpu_relax();
            continue;
        }
        uint32_t seq = atomic_load(&s->space_seq);
        atomic_store(&s->prod_waiting, 1);
        used = tail - atomic_load(&s->head);
        if (used <= r->cap && r->cap - used >= need)
            continue;
        if (check_due(r)) {
            /* 0: no consumer right now (none yet, or one detached): wait for
             * the next. A dead one is only declared so if it is still the
             * recorded consumer after the check: one that detached and then
             * exited has already given the role back. */
            int32_t c = atomic_load(&s->consumer_pid);
            if (c != 0 && !pid_alive(c) && atomic_load(&s->consumer_pid) == c) {
                atomic_fetch_or(&s->flags, FLAG_CONSUMER_CLOSED);
                return TFOS_ECLOSED;
            }
        }
        if (dl_expired(dl))
            return dl_fail(dl, TFOS_EFULL);
        uint64_t t0 = now_ns();
        futex_wait(&s->space_seq, seq, dl_slice_ns(dl));
        atomic_fetch_add_explicit(&s->prod_wait_ns, now_ns() - t0, memory_order_relaxed);
    }
    r->res_pos = tail + pad;
    r->res_pad = pad;
    r->res_len = len;
    return 0;
}

static void *res_payload(tfos__ring *r)
{
    return r->data + (r->res_pos & r->mask) + REC_HDR;
}

/* Publish the reserved record (and its padding) by moving tail; wake the
 * consumer only if it sleeps. */
static void publish(tfos__ring *r, uint32_t tag, size_t len)
{
    struct ring_shm *s = r->shm;
    if (r->res_pad)
        put_hdr(r, r->res_pos - r->res_pad, TAG_PAD, (uint32_t)(r->res_pad - REC_HDR));
    put_hdr(r, r->res_pos, tag, (uint32_t)len);
    atomic_store(&s->tail, r->res_pos + rec_size(len));
    if (atomic_load(&s->cons_waiting) && atomic_exchange(&s->cons_waiting, 0)) {
        atomic_fetch_add(&s->data_seq, 1);
        futex_wake(&s->data_seq);
    }
    r->reserved = false;
}

/* Inside a partition, just before publishing the reserved record of `len`
 * bytes that holds `rows` rows: count them, in the order that keeps the count
 * exact across a death (see the top of this file). A record whose rows are
 * not said makes the partition's count unknown: its re-feed starts at row 0. */
static void part_count(tfos__ring *r, size_t len, uint64_t rows)
{
    struct ring_shm *s = r->shm;
    if (!r->in_partition || rows == 0)
        return;
    if (rows == TFOS_RING_ROWS_UNKNOWN) {
        atomic_store_explicit(&s->part_rows_known, 0, memory_order_release);
        return;
    }
    uint64_t prev = atomic_load_explicit(&s->part_rows, memory_order_relaxed);
    atomic_store_explicit(&s->part_rows_prev, prev, memory_order_release);
    atomic_store_explicit(&s->part_rows_tail, r->res_pos + rec_size(len), memory_order_release);
    atomic_store_explicit(&s->part_rows, prev + rows, memory_order_release);
}

/* The open partition's rows in the ring, or TFOS_RING_ROWS_UNKNOWN. Read by
 * the lock holder after its producer died or closed (its stores are final). */
static uint64_t part_rows_now(const struct ring_shm *s)
{
    if (!atomic_load(&s->part_rows_known))
        return TFOS_RING_ROWS_UNKNOWN;
    uint64_t at = atomic_load(&s->part_rows_tail);
    return atomic_load(&s->tail) >= at ? atomic_load(&s->part_rows) : atomic_load(&s->part_rows_prev);
}

/* Remember that partition `id` (fed under `key`) is in the ring up to row
 * `rows`, for its re-feed: the entry of the same id, a free one, or the
 * oldest. Under the lock. */
static void resume_put(struct ring_shm *s, uint64_t id, uint64_t key, uint64_t rows)
{
    unsigned slot = RESUME_SLOTS, free_slot = RESUME_SLOTS;
    for (unsigned i = 0; i < RESUME_SLOTS && slot == RESUME_SLOTS; i++) {
        if (!atomic_load(&s->resume[i].used))
            free_slot = free_slot == RESUME_SLOTS ? i : free_slot;
        else if (atomic_load(&s->resume[i].id) == id)
            slot = i;
    }
    if (slot == RESUME_SLOTS)
        slot = free_slot;
    if (slot == RESUME_SLOTS)
        slot = atomic_fetch_add(&s->resume_next, 1) % RESUME_SLOTS;
    atomic_store(&s->resume[slot].id, id);
    atomic_store(&s->resume[slot].key, key);
    atomic_store(&s->resume[slot].rows, rows);
    atomic_store(&s->resume[slot].used, 1);
}

/* Whether partition `id` was aborted fed under `key`, with its rows in *rows. */
static bool resume_find(const struct ring_shm *s, uint64_t id, uint64_t key, uint64_t *rows)
{
    for (unsigned i = 0; i < RESUME_SLOTS; i++) {
        if (atomic_load(&s->resume[i].used) && atomic_load(&s->resume[i].id) == id &&
            atomic_load(&s->resume[i].key) == key) {
            *rows = atomic_load(&s->resume[i].rows);
            return true;
        }
    }
    return false;
}

/* Forget partition `id`: a new feed of it has begun (its own abort, if any,
 * puts it back). */
static void resume_drop(struct ring_shm *s, uint64_t id)
{
    for (unsigned i = 0; i < RESUME_SLOTS; i++)
        if (atomic_load(&s->resume[i].used) && atomic_load(&s->resume[i].id) == id)
            atomic_store(&s->resume[i].used, 0);
}

/* Write PARTITION_END or PARTITION_ABORT for partition `id` into the room
 * reserved by room(r, PART_PAYLOAD, ..) and close the shared partition state.
 * The end tail goes first so a takeover after a death here stays exact. */
static void close_partition(tfos__ring *r, uint32_t tag, uint64_t id)
{
    struct ring_shm *s = r->shm;
    memcpy(res_payload(r), &id, sizeof id);
    atomic_store(&s->part_end_tail, r->res_pos + rec_size(PART_PAYLOAD));
    publish(r, tag, PART_PAYLOAD);
    atomic_store(&s->part_active, 0);
    bump(tag == TFOS_RING_PARTITION_END ? &s->partitions_completed : &s->partitions_aborted, 1);
}

/* Just took the lock: if a partition is still open, its producer died or
 * closed inside it; say so with PARTITION_ABORT (unless its END got in), and
 * remember how many of its rows are in the ring for its re-feed. */
static int lock_fixup(tfos__ring *r, const deadline *dl)
{
    struct ring_shm *s = r->shm;
    if (!atomic_load(&s->part_active))
        return 0;
    uint64_t end = atomic_load(&s->part_end_tail);
    if (end != 0 && end == atomic_load(&s->tail)) {
        atomic_store(&s->part_active, 0);
        return 0;
    }
    int rc = room(r, PART_PAYLOAD, dl);
    if (rc)
        return rc;
    uint64_t id = atomic_load(&s->part_id), rows = part_rows_now(s);
    if (rows != TFOS_RING_ROWS_UNKNOWN)
        resume_put(s, id, atomic_load(&s->part_key), rows);
    atomic_store(&s->last_abort_id, id);
    atomic_store(&s->last_abort_rows, rows);
    close_partition(r, TFOS_RING_PARTITION_ABORT, id);
    return 0;
}

static int check_flags(const tfos__ring *r)
{
    uint32_t f = atomic_load(&r->shm->flags);
    if (f & (FLAG_CONSUMER_CLOSED | FLAG_SHUT))
        return TFOS_ECLOSED;
    if (f & FLAG_FEED_ENDED)
        return TFOS_EEND;
    return 0;
}

/* Hold the lock for one operation (already held inside a partition). */
static int producer_enter(tfos__ring *r, const deadline *dl)
{
    if (r->in_partition)
        return check_flags(r);
    int rc = lock_acquire(r, dl);
    if (rc < 0)
        return rc;
    r->locked = true;
    rc = lock_fixup(r, dl);
    if (rc == 0)
        rc = check_flags(r);
    if (rc)
        lock_release(r);
    return rc;
}

static void producer_leave(tfos__ring *r)
{
    if (!r->in_partition && r->locked)
        lock_release(r);
}

static bool producer_idle(const tfos__ring *r)
{
    return r && r->role == TFOS_RING_PRODUCER && !r->reserved;
}

/* ---- lifetime ------------------------------------------------------------ */

int tfos__ring_create(tfos__ring **out, int *fd_out, size_t capacity, int role)
{
    if (!out || !fd_out)
        return TFOS_EINVAL;
    *out = NULL;
    *fd_out = -1;
    if (!is_pow2(capacity) || capacity < TFOS_RING_MIN_CAPACITY || capacity > TFOS_RING_MAX_CAPACITY)
        return TFOS_EINVAL;
    if (role < TFOS_RING_OBSERVER || role > TFOS_RING_CONSUMER)
        return TFOS_EINVAL;

    int fd = memfd_create("tfos-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return TFOS_ESYS;
    int rc = TFOS_ESYS;
    if (ftruncate(fd, (off_t)(RING_HEADER_SIZE + capacity)) != 0)
        goto fail;
    struct ring_shm *s = mmap(NULL, RING_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        goto fail;
    /* A fresh memfd reads as zeros: indices, futexes and counters start at 0. */
    s->magic = RING_MAGIC;
    s->version = RING_VERSION;
    s->header_size = RING_HEADER_SIZE;
    s->capacity = capacity;
    s->max_producers = TFOS_RING_MAX_PRODUCERS;
    munmap(s, RING_HEADER_SIZE);
    /* Nobody may shrink the file under a mapping (that would SIGBUS us). */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        goto fail;
    rc = tfos__ring_attach(out, fd, role);
    if (rc)
        goto fail;
    *fd_out = fd;
    return 0;
fail:;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Claim a producer slot: a free one, else one whose process died (it went
 * away without closing: count it as an unclean exit). */
static int claim_slot(tfos__ring *r)
{
    struct ring_shm *s = r->shm;
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS; i++) {
        int32_t cur = 0;
        if (atomic_compare_exchange_strong(&s->producer_pid[i], &cur, r->pid))
            return i;
    }
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS; i++) {
        int32_t cur = atomic_load(&s->producer_pid[i]);
        if (cur != r->pid && !pid_alive(cur) && atomic_compare_exchange_strong(&s->producer_pid[i], &cur, r->pid)) {
            atomic_fetch_add(&s->unclean_exits, 1);
            atomic_store(&s->last_dead_pid, cur);
            return i;
        }
    }
    return -1;
}

/* Become the ring's consumer: when there is none (never was, or the last one
 * detached), or when the recorded one died without closing and no producer
 * has declared the ring closed yet. A producer may declare the dead consumer
 * while we take over; if its flag lands after our check the ring is closed
 * under us, as it would have been a moment earlier: producers see ECLOSED. */
static int claim_consumer(struct ring_shm *s, int32_t me)
{
    int32_t cur = 0;
    if (atomic_compare_exchange_strong(&s->consumer_pid, &cur, me))
        return 0;
    if (cur == me || (atomic_load(&s->flags) & FLAG_CONSUMER_CLOSED) || pid_alive(cur))
        return TFOS_EINVAL; /* one consumer at a time */
    if (!atomic_compare_exchange_strong(&s->consumer_pid, &cur, me))
        return TFOS_EINVAL; /* someone else took it over first */
    if (atomic_load(&s->flags) & FLAG_CONSUMER_CLOSED) {
        atomic_compare_exchange_strong(&s->consumer_pid, &me, cur);
        return TFOS_EINVAL;
    }
    return 0;
}

int tfos__ring_attach(tfos__ring **out, int fd, int role)
{
    if (!out)
        return TFOS_EINVAL;
    *out = NULL;
    if (fd < 0 || role < TFOS_RING_OBSERVER || role > TFOS_RING_CONSUMER)
        return TFOS_EINVAL;

    struct stat st;
    if (fstat(fd, &st) != 0)
        return TFOS_ESYS;
    if (!S_ISREG(st.st_mode))
        return TFOS_EPROTO;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return TFOS_EPROTO; /* not a memfd, or one that could shrink under us */
    if (st.st_size < (off_t)(RING_HEADER_SIZE + TFOS_RING_MIN_CAPACITY) ||
        st.st_size > (off_t)(RING_HEADER_SIZE + TFOS_RING_MAX_CAPACITY))
        return TFOS_EPROTO;

    size_t map_len = (size_t)st.st_size;
    void *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return TFOS_ESYS;
    struct ring_shm *s = map;

    /* Read the fixed fields once; the handle never reads them again. */
    const volatile struct ring_shm *vs = s;
    uint64_t magic = vs->magic, cap = vs->capacity;
    uint32_t version = vs->version, hsize = vs->header_size, maxp = vs->max_producers;
    uint64_t head = atomic_load(&s->head), tail = atomic_load(&s->tail);
    int rc = TFOS_EPROTO;
    if (magic != RING_MAGIC || version != RING_VERSION || hsize != RING_HEADER_SIZE ||
        maxp != TFOS_RING_MAX_PRODUCERS || !is_pow2(cap) || cap < TFOS_RING_MIN_CAPACITY ||
        cap > TFOS_RING_MAX_CAPACITY || RING_HEADER_SIZE + cap != map_len || ((head | tail) & 7u) ||
        tail - head > cap)
        goto fail;

    tfos__ring *r = calloc(1, sizeof *r);
    rc = TFOS_ENOMEM;
    if (!r)
        goto fail;
    r->shm = s;
    r->data = (uint8_t *)map + RING_HEADER_SIZE;
    r->map_len = map_len;
    r->cap = cap;
    r->mask = cap - 1;
    r->hot = role == TFOS_RING_PRODUCER ? ring_hot(cap) : cap;
    r->role = role;
    r->pid = (int32_t)getpid();
    r->slot = -1;
    r->head = r->held_end = head;

    if (role == TFOS_RING_CONSUMER) {
        rc = claim_consumer(s, r->pid);
        if (rc) {
            free(r);
            goto fail;
        }
    } else if (role == TFOS_RING_PRODUCER) {
        r->slot = claim_slot(r);
        if (r->slot < 0) {
            free(r);
            rc = TFOS_EFULL;
            goto fail;
        }
    }
    *out = r;
    return 0;
fail:
    munmap(map, map_len);
    return rc;
}

void tfos__ring_close(tfos__ring *r)
{
    if (!r)
        return;
    struct ring_shm *s = r->shm;
    if (r->pid == (int32_t)getpid()) {
        if (r->role == TFOS_RING_PRODUCER) {
            r->reserved = false;
            if (r->in_partition) {
                /* Still holding the lock: report the partition now if there
                 * is room, else the next lock holder or the consumer will. */
                deadline now = dl_make(0);
                lock_fixup(r, &now);
                r->in_partition = false;
            }
            producer_leave(r);
            int32_t me = r->pid;
            atomic_compare_exchange_strong(&s->producer_pid[r->slot], &me, 0);
        } else if (r->role == TFOS_RING_CONSUMER) {
            atomic_fetch_or(&s->flags, FLAG_CONSUMER_CLOSED | FLAG_CONSUMER_TERMINATED);
            atomic_fetch_add(&s->space_seq, 1);
            futex_wake(&s->space_seq);
        }
    }
    munmap(s, r->map_len);
    free(r);
}

void tfos__ring_detach(tfos__ring *r)
{
    if (!r)
        return;
    if (r->role != TFOS_RING_CONSUMER || r->pid != (int32_t)getpid()) {
        tfos__ring_close(r);
        return;
    }
    /* Give the role back, and nothing else: no flag, no wake-up. Records held
     * but not released stay in the ring for the next consumer; producers
     * waiting for room keep waiting for it. */
    int32_t me = r->pid;
    atomic_compare_exchange_strong(&r->shm->consumer_pid, &me, 0);
    munmap(r->shm, r->map_len);
    free(r);
}

const void *tfos__ring_mapping(const tfos__ring *r)
{
    return r ? (const void *)r->shm : NULL;
}

size_t tfos__ring_max_record(const tfos__ring *r)
{
    return r ? (size_t)(r->cap / 2 - REC_HDR) : 0;
}

void tfos__ring_ack(tfos__ring *r, uint32_t n)
{
    if (r && r->role == TFOS_RING_CONSUMER && n) {
        atomic_fetch_add(&r->shm->parts_acked, n);
        futex_wake(&r->shm->parts_acked); /* producers in tfos__ring_wait_acked */
    }
}

void tfos__ring_beat(tfos__ring *r)
{
    if (r)
        atomic_fetch_add_explicit(&r->shm->progress, 1, memory_order_relaxed);
}

void tfos__ring_set_reads_columns(tfos__ring *r, bool on)
{
    if (!r || r->role != TFOS_RING_CONSUMER)
        return;
    if (on)
        atomic_fetch_or(&r->shm->flags, FLAG_READS_COLUMNS);
    else
        atomic_fetch_and(&r->shm->flags, ~(uint32_t)FLAG_READS_COLUMNS);
}

bool tfos__ring_reads_columns(const tfos__ring *r)
{
    return r && (atomic_load_explicit(&r->shm->flags, memory_order_relaxed) & FLAG_READS_COLUMNS) != 0;
}

void tfos__ring_count_rows(tfos__ring *r, uint64_t n)
{
    if (r && r->role == TFOS_RING_PRODUCER && n)
        atomic_fetch_add_explicit(&r->shm->rows_in, n, memory_order_relaxed);
}

void tfos__ring_count_taken(tfos__ring *r, uint64_t n)
{
    if (r && r->role == TFOS_RING_CONSUMER && n)
        atomic_fetch_add_explicit(&r->shm->rows_out, n, memory_order_relaxed);
}

int tfos__ring_report(tfos__ring *r, const char *text, size_t len)
{
    if (!r || (!text && len))
        return TFOS_EINVAL;
    if (len > TFOS_RING_REPORT_MAX)
        return TFOS_ETOOBIG;
    struct ring_shm *s = r->shm;
    uint32_t seq = atomic_load(&s->report_seq);
    /* one writer at a time: take the odd value, or leave it to the one writing */
    if ((seq & 1) || !atomic_compare_exchange_strong(&s->report_seq, &seq, seq + 1))
        return TFOS_EAGAIN;
    if (len)
        memcpy(s->report, text, len);
    s->report_len = (uint32_t)len;
    s->report_ms = now_ns() / 1000000u;
    atomic_store(&s->report_seq, seq + 2);
    atomic_fetch_add_explicit(&s->progress, 1, memory_order_relaxed); /* a report is progress too */
    return 0;
}

int tfos__ring_report_get(const tfos__ring *r, char *out, size_t outlen, int64_t *age_ms)
{
    if (!r || !out || outlen < 1)
        return TFOS_EINVAL;
    struct ring_shm *s = r->shm;
    for (int tries = 0; tries < 64; tries++) {
        uint32_t seq = atomic_load(&s->report_seq);
        if (seq & 1) {
            cpu_relax();
            continue;
        }
        if (seq == 0)
            return TFOS_EEND; /* never reported */
        uint32_t len = s->report_len; /* hostile peers: bound it before use */
        if (len > TFOS_RING_REPORT_MAX)
            len = TFOS_RING_REPORT_MAX;
        if (len > outlen - 1)
            len = (uint32_t)(outlen - 1);
        memcpy(out, s->report, len);
        uint64_t at = s->report_ms;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load(&s->report_seq) != seq)
            continue;
        out[len] = 0;
        if (age_ms) {
            int64_t age = (int64_t)(now_ns() / 1000000u) - (int64_t)at;
            *age_ms = age < 0 ? 0 : age;
        }
        return 0;
    }
    return TFOS_EAGAIN;
}

int tfos__ring_wait_acked(tfos__ring *r, uint32_t target, int timeout_ms)
{
    if (!r)
        return TFOS_EINVAL;
    struct ring_shm *s = r->shm;
    deadline dl = dl_make(timeout_ms);
    for (;;) {
        uint32_t acked = atomic_load(&s->parts_acked);
        if ((int32_t)(acked - target) >= 0) /* wrap-around order */
            return 0;
        uint32_t f = atomic_load(&s->flags);
        if (f & FLAG_CONSUMER_TERMINATED)
            return TFOS_EEND;
        int32_t c = atomic_load(&s->consumer_pid);
        if ((f & (FLAG_CONSUMER_CLOSED | FLAG_SHUT)) || (c != 0 && !pid_alive(c)))
            return TFOS_ECLOSED;
        if (dl_expired(&dl))
            return dl_fail(&dl, TFOS_EAGAIN);
        futex_wait(&s->parts_acked, acked, dl_slice_ns(&dl));
    }
}

void tfos__ring_stats_get(const tfos__ring *r, tfos__ring_stats *st)
{
    if (!r || !st)
        return;
    struct ring_shm *s = r->shm;
    memset(st, 0, sizeof *st);
    uint64_t head = atomic_load(&s->head), tail = atomic_load(&s->tail);
    st->capacity = r->cap;
    st->used = tail - head <= r->cap ? tail - head : r->cap;
    st->records = atomic_load(&s->records);
    st->bytes = atomic_load(&s->bytes);
    st->partitions_begun = atomic_load(&s->partitions_begun);
    st->partitions_completed = atomic_load(&s->partitions_completed);
    st->partitions_aborted = atomic_load(&s->partitions_aborted);
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS; i++)
        st->producers += atomic_load(&s->producer_pid[i]) != 0;
    st->unclean_exits = atomic_load(&s->unclean_exits);
    st->dead_pid = atomic_load(&s->last_dead_pid);
    st->last_aborted = atomic_load(&s->last_abort_id);
    st->last_aborted_rows = atomic_load(&s->last_abort_rows);
    st->resumed = atomic_load(&s->resumed);
    st->consumer_pid = atomic_load(&s->consumer_pid);
    st->acked = atomic_load(&s->parts_acked);
    st->consumed = head;
    st->progress = atomic_load(&s->progress);
    st->rows_in = atomic_load_explicit(&s->rows_in, memory_order_relaxed);
    st->rows_out = atomic_load_explicit(&s->rows_out, memory_order_relaxed);
    st->consumer_wait_ns = atomic_load_explicit(&s->cons_wait_ns, memory_order_relaxed);
    st->producer_wait_ns = atomic_load_explicit(&s->prod_wait_ns, memory_order_relaxed);
    st->consumer_waiting = atomic_load(&s->cons_waiting) != 0;
    uint32_t f = atomic_load(&s->flags);
    st->feed_ended = (f & FLAG_FEED_ENDED) != 0;
    st->consumer_closed = (f & FLAG_CONSUMER_CLOSED) != 0;
    st->consumer_terminated = (f & FLAG_CONSUMER_TERMINATED) != 0;
    st->shut = (f & FLAG_SHUT) != 0;
}

/* ---- producer API -------------------------------------------------------- */

int tfos__ring_reserve(tfos__ring *r, uint32_t tag, size_t len, void **buf, int timeout_ms)
{
    if (!producer_idle(r) || !buf)
        return TFOS_EINVAL;
    if (tag != TFOS_RING_DATA && tag < TFOS_RING_TAG_USER)
        return TFOS_EINVAL;
    if (len > tfos__ring_max_record(r))
        return TFOS_ETOOBIG;
    deadline dl = dl_make(timeout_ms);
    int rc = producer_enter(r, &dl);
    if (rc)
        return rc;
    rc = room(r, len, &dl);
    if (rc) {
        producer_leave(r);
        return rc;
    }
    r->reserved = true;
    r->res_tag = tag;
    *buf = res_payload(r);
    return 0;
}

int tfos__ring_commit_rows(tfos__ring *r, size_t len, uint64_t rows)
{
    if (!r || r->role != TFOS_RING_PRODUCER || !r->reserved || len > r->res_len)
        return TFOS_EINVAL;
    part_count(r, len, rows);
    publish(r, r->res_tag, len);
    bump(&r->shm->records, 1);
    bump(&r->shm->bytes, len);
    producer_leave(r);
    if (rows != TFOS_RING_ROWS_UNKNOWN)
        tfos__ring_count_rows(r, rows);
    return 0;
}

int tfos__ring_commit(tfos__ring *r, size_t len)
{
    return tfos__ring_commit_rows(r, len, TFOS_RING_ROWS_UNKNOWN);
}

void tfos__ring_cancel(tfos__ring *r)
{
    if (!r || r->role != TFOS_RING_PRODUCER || !r->reserved)
        return;
    r->reserved = false;
    producer_leave(r);
}

int tfos__ring_write_rows(tfos__ring *r, uint32_t tag, const void *buf, size_t len, uint64_t rows, int timeout_ms)
{
    if (len && !buf)
        return TFOS_EINVAL;
    void *dst;
    int rc = tfos__ring_reserve(r, tag, len, &dst, timeout_ms);
    if (rc)
        return rc;
    if (len)
        memcpy(dst, buf, len);
    return tfos__ring_commit_rows(r, len, rows);
}

int tfos__ring_write(tfos__ring *r, uint32_t tag, const void *buf, size_t len, int timeout_ms)
{
    return tfos__ring_write_rows(r, tag, buf, len, TFOS_RING_ROWS_UNKNOWN, timeout_ms);
}

/* partition_begin and _resume: `resume` looks `partition` up among those
 * aborted with their rows counted (a fresh feed only drops its entry). */
static int begin_partition(tfos__ring *r, uint64_t partition, bool resume, uint64_t key, uint64_t *first,
                           int timeout_ms)
{
    if (!producer_idle(r) || r->in_partition)
        return TFOS_EINVAL;
    struct ring_shm *s = r->shm;
    deadline dl = dl_make(timeout_ms);
    int rc = producer_enter(r, &dl);
    if (rc)
        return rc;
    rc = room(r, BEGIN_PAYLOAD, &dl);
    if (rc) {
        producer_leave(r);
        return rc;
    }
    uint64_t from = 0;
    bool found = resume && resume_find(s, partition, key, &from);
    if (!found)
        from = 0;
    /* Open the shared partition state before BEGIN becomes visible: if we die
     * in between, the consumer gets an ABORT without a BEGIN, never a BEGIN
     * without an END or ABORT. The table entry goes only once the BEGIN is
     * in: dead before, the entry stays; dead after, the ABORT puts it back
     * (with `from` and the rows since), so no death loses where to resume. */
    atomic_store(&s->part_id, partition);
    atomic_store(&s->part_end_tail, 0);
    atomic_store(&s->part_key, key);
    atomic_store(&s->part_rows, from);
    atomic_store(&s->part_rows_prev, from);
    atomic_store(&s->part_rows_tail, 0);
    atomic_store(&s->part_rows_known, 1);
    atomic_store(&s->part_active, 1);
    uint64_t payload[2] = {partition, from};
    memcpy(res_payload(r), payload, sizeof payload);
    publish(r, TFOS_RING_PARTITION_BEGIN, BEGIN_PAYLOAD);
    resume_drop(s, partition);
    if (found)
        atomic_fetch_add(&s->resumed, 1);
    bump(&s->partitions_begun, 1);
    r->part = partition;
    r->in_partition = true;
    if (first)
        *first = from;
    return 0;
}

int tfos__ring_partition_begin(tfos__ring *r, uint64_t partition, int timeout_ms)
{
    return begin_partition(r, partition, false, 0, NULL, timeout_ms);
}

int tfos__ring_partition_resume(tfos__ring *r, uint64_t partition, uint64_t key, uint64_t *first, int timeout_ms)
{
    if (!first)
        return TFOS_EINVAL;
    *first = 0;
    return begin_partition(r, partition, true, key, first, timeout_ms);
}

int tfos__ring_shut(tfos__ring *r)
{
    if (!r)
        return TFOS_EINVAL;
    struct ring_shm *s = r->shm;
    atomic_fetch_or(&s->flags, FLAG_SHUT);
    /* wake every sleeper: the consumer, producers waiting for room or acks */
    atomic_fetch_add(&s->data_seq, 1);
    futex_wake(&s->data_seq);
    atomic_fetch_add(&s->space_seq, 1);
    futex_wake(&s->space_seq);
    futex_wake(&s->parts_acked);
    return 0;
}

int tfos__ring_partition_end(tfos__ring *r, int timeout_ms)
{
    if (!producer_idle(r) || !r->in_partition)
        return TFOS_EINVAL;
    deadline dl = dl_make(timeout_ms);
    int rc = check_flags(r);
    if (rc == 0)
        rc = room(r, PART_PAYLOAD, &dl);
    if (rc)
        return rc;
    close_partition(r, TFOS_RING_PARTITION_END, r->part);
    r->in_partition = false;
    lock_release(r);
    return 0;
}

int tfos__ring_end_feed(tfos__ring *r, int timeout_ms)
{
    if (!producer_idle(r) || r->in_partition)
        return TFOS_EINVAL;
    deadline dl = dl_make(timeout_ms);
    int rc = producer_enter(r, &dl);
    if (rc)
        return rc == TFOS_EEND ? 0 : rc;
    rc = room(r, 0, &dl);
    if (rc == 0) {
        publish(r, TFOS_RING_END_OF_FEED, 0);
        atomic_fetch_or(&r->shm->flags, FLAG_FEED_ENDED);
    }
    producer_leave(r);
    return rc;
}

/* ---- consumer API -------------------------------------------------------- */

/* Move head to `pos`, making room; wake a producer only if one sleeps. */
static void release_to(tfos__ring *r, uint64_t pos)
{
    struct ring_shm *s = r->shm;
    r->head = pos;
    r->held_end = pos;
    atomic_store(&s->head, pos);
    if (atomic_load(&s->prod_waiting) && atomic_exchange(&s->prod_waiting, 0)) {
        atomic_fetch_add(&s->space_seq, 1);
        futex_wake(&s->space_seq);
    }
}

/* The ring is empty and we are about to sleep: look after the producers.
 * Dead producer slots are freed. A dead lock owner (or a partition left open
 * by a closed producer) is taken over and its partition reported with
 * PARTITION_ABORT. Returns 1 when records may have appeared, 0 to keep
 * waiting. A producer's death is no error of the consumer's: the partition
 * it was writing is aborted and a new producer may feed it again (Spark's
 * task retry), so the consumer waits on (its caller bounds the wait). */
static int consumer_check_peers(tfos__ring *r)
{
    struct ring_shm *s = r->shm;
    for (int i = 0; i < TFOS_RING_MAX_PRODUCERS; i++) {
        int32_t p = atomic_load(&s->producer_pid[i]);
        if (p == 0 || pid_alive(p))
            continue;
        if (atomic_compare_exchange_strong(&s->producer_pid[i], &p, 0)) {
            atomic_fetch_add(&s->unclean_exits, 1);
            atomic_store(&s->last_dead_pid, p);
        }
    }

    uint32_t w = atomic_load(&s->lock);
    int32_t owner = (int32_t)(w & LOCK_PID_MASK);
    bool orphan = w == 0 ? atomic_load(&s->part_active) != 0 : owner != r->pid && !pid_alive(owner);
    if (orphan) {
        deadline now = dl_make(0);
        if (lock_acquire(r, &now) >= 0) {
            r->locked = true;
            lock_fixup(r, &now);
            lock_release(r);
        }
    }

    /* a takeover above may have written an ABORT */
    return atomic_load(&s->tail) != r->head;
}

/* Nothing after head: spin briefly, then sleep one slice (or less). Returns 0
 * to look again, or an error. */
static int wait_data(tfos__ring *r, const deadline *dl, unsigned *spins)
{
    struct ring_shm *s = r->shm;
    if (!dl->poll && *spins < SPIN_LIMIT) {
        ++*spins;
        cpu_relax();
        return 0;
    }
    uint32_t seq = atomic_load(&s->data_seq);
    atomic_store(&s->cons_waiting, 1);
    if (atomic_load(&s->tail) != r->head) {
        atomic_store(&s->cons_waiting, 0);
        return 0;
    }
    /* Read to the end, then told: no producer will come (tfos__ring_shut). */
    int rc = (atomic_load(&s->flags) & FLAG_SHUT) ? TFOS_ECLOSED : check_due(r) ? consumer_check_peers(r) : 0;
    if (rc == 0 && dl_expired(dl))
        rc = dl_fail(dl, TFOS_EAGAIN);
    if (rc) {
        /* Not going to sleep: spare the producers a wake-up call. */
        atomic_store(&s->cons_waiting, 0);
        return rc < 0 ? rc : 0;
    }
    uint64_t t0 = now_ns();
    futex_wait(&s->data_seq, seq, dl_slice_ns(dl));
    atomic_fetch_add_explicit(&s->cons_wait_ns, now_ns() - t0, memory_order_relaxed);
    return 0;
}

/* Describe up to `max` records from head. TFOS_EAGAIN: only padding was
 * there (now released). */
static int parse_batch(tfos__ring *r, uint64_t tail, tfos__ring_rec *recs, size_t max, size_t *n)
{
    if ((tail & 7u) || tail - r->head > r->cap)
        return TFOS_EPROTO;
    uint64_t pos = r->head;
    size_t k = 0;
    int rc = 0;
    while (pos != tail && k < max) {
        uint64_t h = get_hdr(r, pos);
        uint32_t len = (uint32_t)h, tag = (uint32_t)(h >> 32);
        uint64_t total = rec_size(len);
        if ((pos & r->mask) + total > r->cap || total > tail - pos) {
            rc = TFOS_EPROTO;
            break;
        }
        if (tag == TAG_PAD) {
            pos += total;
            if (k == 0)
                release_to(r, pos);
            continue;
        }
        if (tag == TFOS_RING_END_OF_FEED) {
            if (k == 0) {
                r->ended = true;
                rc = TFOS_EEND;
            }
            break;
        }
        const uint8_t *payload = r->data + (pos & r->mask) + REC_HDR;
        tfos__ring_rec *rec = &recs[k];
        rec->tag = tag;
        rec->len = len;
        rec->data = payload;
        rec->partition = 0;
        rec->first = 0;
        if (tag == TFOS_RING_PARTITION_BEGIN || tag == TFOS_RING_PARTITION_END ||
            tag == TFOS_RING_PARTITION_ABORT) {
            if (len != (tag == TFOS_RING_PARTITION_BEGIN ? BEGIN_PAYLOAD : PART_PAYLOAD)) {
                rc = TFOS_EPROTO;
                break;
            }
            memcpy(&rec->partition, payload, sizeof rec->partition);
            if (tag == TFOS_RING_PARTITION_BEGIN)
                memcpy(&rec->first, payload + 8, sizeof rec->first);
        } else if (tag != TFOS_RING_DATA && tag < TFOS_RING_TAG_USER) {
            rc = TFOS_EPROTO;
            break;
        }
        pos += total;
        k++;
    }
    if (k == 0)
        return rc ? rc : TFOS_EAGAIN;
    /* Records before a bad one are still good: hand them out first. */
    r->held_end = pos;
    *n = k;
    return 0;
}

int tfos__ring_read_batch(tfos__ring *r, tfos__ring_rec *recs, size_t max, size_t *n, int timeout_ms)
{
    if (n)
        *n = 0;
    if (!r || r->role != TFOS_RING_CONSUMER || !recs || !n || max == 0)
        return TFOS_EINVAL;
    if (r->ended)
        return TFOS_EEND;
    deadline dl = dl_make(timeout_ms);
    unsigned spins = 0;
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->shm->tail, memory_order_acquire);
        if (tail != r->head) {
            int rc = parse_batch(r, tail, recs, max, n);
            if (rc != TFOS_EAGAIN)
                return rc;
            continue;
        }
        int rc = wait_data(r, &dl, &spins);
        if (rc)
            return rc;
    }
}

int tfos__ring_peek(tfos__ring *r, tfos__ring_rec *rec, int timeout_ms)
{
    size_t n;
    return tfos__ring_read_batch(r, rec, 1, &n, timeout_ms);
}

void tfos__ring_release(tfos__ring *r)
{
    if (!r || r->role != TFOS_RING_CONSUMER || r->held_end == r->head)
        return;
    release_to(r, r->held_end);
}

