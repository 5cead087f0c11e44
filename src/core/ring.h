/* ring.h: the shared-memory feed ring.
 *
 * A bounded ring of framed records in a sealed memfd, between producers
 * (Spark feed tasks, the CLI reader, Python code) and one consumer at a time
 * (the user's training program; for the output ring, the Spark tasks that
 * collect results, one after the other: see tfos__ring_detach). The node agent creates a ring and hands its fd to
 * the producers and to the consumer (fork/exec inheritance, or with a frame
 * of the feed socket's link: core/feedsock.h); each of them attaches its own
 * handle.
 *
 * Layout: one 4096-byte header page (magic, version, capacity, head and tail,
 * futex words, pids, flags, counters) followed by `capacity` bytes of data
 * (a power of two). Records are 8-byte aligned: an 8-byte header (payload
 * length, tag) and the payload padded to 8. A record never wraps: when it does
 * not fit before the end of the buffer, an internal padding record fills the
 * rest and the record starts at offset 0. Hence the size bound: a record
 * (header + padded payload) takes at most capacity/2, so an empty ring always
 * has room for it; tfos__ring_max_record() gives the largest payload.
 *
 * Producers. Many processes may produce into one ring. They share one
 * producer lock that lives in the header (a futex whose word holds the owner's
 * pid). A plain reserve/commit or write takes the lock for that one record; a
 * partition (tfos__ring_partition_begin .. _end) keeps the lock from its BEGIN
 * record to its END record, so a partition's records are contiguous in the
 * ring and never interleave with another producer's. A producer that dies
 * holding the lock is detected by whoever waits for the lock next (its pid is
 * gone, checked every ~25 ms), or by the consumer when it runs dry; that
 * process takes the lock over, drops the dead producer's uncommitted
 * reservation (it was never visible), and, when the dead producer was inside a
 * partition, writes a PARTITION_ABORT record for it: "partition P was not
 * delivered whole, feed it again". Delivery is thus whole or re-delivered.
 *
 * Resuming. The ring counts the rows of the open partition: a producer says
 * how many rows each record holds (tfos__ring_commit_rows, _write_rows), and
 * the count stays exact whenever the producer dies (ring.c). When it aborts a
 * partition whose rows were all counted, the ring remembers the partition's
 * id, the key it was begun with and its rows in the ring, in a table of 32
 * (the oldest goes first). A producer that feeds the partition again with
 * tfos__ring_partition_resume and the same key learns how many of its first
 * rows are in the ring already (the consumer gets them: they must not come
 * twice), skips them, and its PARTITION_BEGIN says where it starts
 * (rec.first). The partition is then delivered exactly once across the
 * death. Anything else gets at-least-once: a record committed without a row
 * count, a re-feed into another ring (another node), a key that differs, an
 * entry pushed out of the table; the re-feed then starts at row 0. The
 * re-feed must produce the same rows in the same order (Spark recomputes a
 * partition so).
 *
 * Dead peers. Waits are futex waits on shared (not private) futex words, in
 * slices of ~25 ms; between slices the waiter checks its peers with kill(pid,0)
 * and /proc/<pid>/stat (so an unreaped zombie counts as dead). A producer
 * waiting for room whose consumer died gets TFOS_ECLOSED (while no consumer
 * is attached, e.g. between two that detached, it just waits). A consumer is
 * never told of a producer's death as an error: it gets the partition's
 * PARTITION_ABORT and waits on for a producer that feeds it again (bounded by
 * its timeout: tfos_feed and DataFeed bound it). A consumer gets TFOS_ECLOSED
 * only when the feed is over for good short of its end: tfos__ring_shut (the
 * node is stopping), once every record before it was read. The pid checks
 * assume one pid namespace and no pid reuse within the ~25 ms window.
 *
 * Errors: TFOS_EINVAL (wrong role or state, bad argument), TFOS_ETOOBIG,
 * TFOS_EAGAIN / TFOS_EFULL (timeout 0 and not ready), TFOS_ETIMEDOUT,
 * TFOS_ECLOSED (peer gone or closed), TFOS_EEND (end of feed), TFOS_EPROTO
 * (corrupt or hostile shared memory: never a crash), TFOS_ESYS (errno kept),
 * TFOS_ENOMEM.
 *
 * Timeouts are in milliseconds: 0 never waits, a negative value waits without
 * bound (still checking peers every slice).
 *
 * Threads: a handle is used by one thread at a time. Several handles on the
 * same ring may live in one process (each attach maps the ring anew). After
 * fork, a child must not use handles inherited from its parent; it attaches
 * its own (tfos__ring_close of an inherited handle only unmaps it). */
#ifndef TFOS_CORE_RING_H
#define TFOS_CORE_RING_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tfos/tfos.h"

/* The hot window: a producer past this many bytes of the buffer (or past three
 * records of the size it writes, if that is more) starts its next record at
 * offset 0 again, as long as that window is at most four times this and half
 * the ring. Records then cycle through a part of the ring that stays in the
 * CPU's last-level cache: a 64 MiB ring otherwise sends every byte to DRAM and
 * back. Records too large for it (over 10.7 MiB) still use the whole ring. A
 * producer's environment can set it: TFOS_RING_HOT_MB=N (0: the whole ring). */
#define TFOS_RING_HOT_BYTES ((uint64_t)8 << 20)
#define TFOS_RING_MIN_CAPACITY ((size_t)4096)
#define TFOS_RING_MAX_CAPACITY ((size_t)1 << 30)
/* Longest report text (tfos__ring_report). */
#define TFOS_RING_REPORT_MAX 1024
/* Producer handles attached at the same time to one ring. */
#define TFOS_RING_MAX_PRODUCERS 64
/* A record's rows, not said (tfos__ring_commit): its partition's row count is
 * then unknown, and a re-feed of it after an abort starts at row 0. */
#define TFOS_RING_ROWS_UNKNOWN UINT64_MAX

/* What a handle does with the ring. */
enum {
    TFOS_RING_OBSERVER = 0, /* reads counters only (e.g. the agent) */
    TFOS_RING_PRODUCER = 1, /* writes records; any number at once */
    TFOS_RING_CONSUMER = 2, /* reads records; one at a time (tfos__ring_detach hands over) */
};

/* Record tags. DATA and tags >= TFOS_RING_TAG_USER are free for producers;
 * the others are written only through the functions named beside them. */
enum {
    TFOS_RING_DATA = 1,
    TFOS_RING_PARTITION_BEGIN = 2, /* tfos__ring_partition_begin */
    TFOS_RING_PARTITION_END = 3,   /* tfos__ring_partition_end */
    TFOS_RING_PARTITION_ABORT = 4, /* written by the ring: partition incomplete */
    TFOS_RING_END_OF_FEED = 5,     /* tfos__ring_end_feed; seen as TFOS_EEND */
    TFOS_RING_TAG_USER = 256,      /* first user tag; any value up to UINT32_MAX */
};

typedef struct tfos__ring tfos__ring;

/* A record seen by the consumer. `data` points into the shared mapping and
 * stays valid until tfos__ring_release or tfos__ring_close; a hostile producer
 * could still change the bytes under it, but never `len`, which was checked. */
typedef struct tfos__ring_rec {
    uint32_t tag;
    uint32_t len;          /* payload bytes */
    const void *data;      /* payload */
    uint64_t partition;    /* PARTITION_BEGIN/END/ABORT: the partition id; else 0 */
    uint64_t first;        /* PARTITION_BEGIN: the partition's row it starts at (a resumed re-feed:
                            * its rows before were in the ring before its ABORT); else 0 */
} tfos__ring_rec;

/* The start of this handle's mapping of the ring (its memfd from offset 0):
 * a record's data lies at ((const char *)rec.data - base) in the memfd, so
 * that another mapping of it finds the same bytes (tfos._tfos.Ring's views). */
const void *tfos__ring_mapping(const tfos__ring *r);

/* Counters, readable by any handle. Producers update them under the producer
 * lock; a reader may see them a record behind. */
typedef struct tfos__ring_stats {
    uint64_t capacity;
    uint64_t used;                 /* bytes written and not yet released */
    uint64_t records;              /* DATA and user-tagged records committed */
    uint64_t bytes;                /* their payload bytes */
    uint64_t partitions_begun;
    uint64_t partitions_completed; /* PARTITION_END committed */
    uint64_t partitions_aborted;   /* PARTITION_ABORT committed */
    uint32_t producers;            /* producer handles attached now */
    uint32_t unclean_exits;        /* producers that died attached */
    int32_t dead_pid;              /* the last producer found dead, or 0 */
    uint64_t last_aborted;         /* the partition of the last PARTITION_ABORT */
    uint64_t last_aborted_rows;    /* its rows in the ring then (TFOS_RING_ROWS_UNKNOWN: not counted) */
    uint32_t resumed;              /* partitions a re-feed resumed where their abort left them */
    int32_t consumer_pid;          /* 0 while no consumer is attached */
    uint32_t acked;                /* partition ENDs/ABORTs the consumer's application has passed (tfos__ring_ack) */
    uint64_t consumed;             /* bytes the consumer has released so far (its read position) */
    uint64_t progress;             /* progress beats of the application (tfos__ring_beat) */
    uint64_t rows_in;              /* rows producers said they committed (tfos__ring_count_rows) */
    uint64_t rows_out;             /* rows the application took (tfos__ring_count_taken) */
    uint64_t consumer_wait_ns;     /* the consumer asleep on an empty ring, in all */
    uint64_t producer_wait_ns;     /* producers asleep on a full ring, added up over producers */
    bool consumer_waiting;         /* the consumer sleeps waiting for data (an empty ring) */
    bool feed_ended;               /* END_OF_FEED committed */
    bool consumer_closed;          /* consumer closed or found dead */
    bool consumer_terminated;      /* consumer closed its handle on purpose (not dead) */
    bool shut;                     /* tfos__ring_shut: no producer will write again */
} tfos__ring_stats;

/* ---- lifetime ---------------------------------------------------------- */

/* Create a ring of `capacity` data bytes (a power of two within
 * [TFOS_RING_MIN_CAPACITY, TFOS_RING_MAX_CAPACITY], else TFOS_EINVAL) in a new
 * memfd, sealed against resizing, and attach to it with `role`.
 * *fd_out gets the memfd (close-on-exec), owned by the caller: hand it to the
 * peers, then close it; the ring does not keep it. The caller owns *out and
 * frees it with tfos__ring_close. */
int tfos__ring_create(tfos__ring **out, int *fd_out, size_t capacity, int role);

/* Attach to the ring in `fd` (received from elsewhere) with `role`. The
 * header is validated against fstat and the seals: a file that is not a sealed
 * ring of this version gives TFOS_EPROTO, never a crash. A consumer attaches
 * when there is none (none yet, or the last one detached) or when the
 * recorded one died without closing and producers have not declared the ring
 * closed yet (it takes over); otherwise TFOS_EINVAL. It starts at the oldest
 * unreleased record. A 65th producer gives TFOS_EFULL. `fd` stays the
 * caller's and may be closed right after. The caller owns *out
 * (tfos__ring_close or tfos__ring_detach). */
int tfos__ring_attach(tfos__ring **out, int fd, int role);

/* Detach and free. A consumer marks the ring closed by the consumer (waiting
 * producers get TFOS_ECLOSED). A producer cancels its reservation; inside a
 * partition it tries to write PARTITION_ABORT at once, or leaves that to the
 * next lock holder or the consumer. Closing a producer does not end the feed
 * (see tfos__ring_end_feed). NULL is a no-op. */
void tfos__ring_close(tfos__ring *r);

/* Unmap and free like tfos__ring_close, but a consumer hands its role over
 * instead of closing the ring: no flag is set, a later process may attach as
 * the consumer and reads from the oldest record not released (records held
 * by a peek and not released are read again). Meanwhile producers see no
 * consumer: they block on a full ring until one comes or their timeout ends.
 * Other roles: the same as tfos__ring_close. NULL is a no-op. */
void tfos__ring_detach(tfos__ring *r);

/* Largest payload one record may carry: capacity/2 - 8 bytes. */
size_t tfos__ring_max_record(const tfos__ring *r);

/* Snapshot of the counters. */
void tfos__ring_stats_get(const tfos__ring *r, tfos__ring_stats *st);

/* ---- producer ---------------------------------------------------------- */

/* Reserve room for one record of `len` payload bytes tagged `tag` (DATA or a
 * user tag) and point *buf at it: the caller writes the payload there, then
 * commits or cancels. Takes the producer lock unless inside a partition (it
 * is held until commit/cancel), then waits for room. Returns TFOS_ETOOBIG when
 * len > tfos__ring_max_record, TFOS_EAGAIN when the lock is busy and
 * timeout_ms is 0, TFOS_EFULL when there is no room and timeout_ms is 0,
 * TFOS_ETIMEDOUT, TFOS_ECLOSED (consumer closed or dead), TFOS_EEND (feed
 * already ended), TFOS_EINVAL (not a producer, reservation pending, bad tag). */
int tfos__ring_reserve(tfos__ring *r, uint32_t tag, size_t len, void **buf, int timeout_ms);

/* Publish the reserved record with its first `len` bytes (len <= the reserved
 * length, else TFOS_EINVAL) and say it holds `rows` rows: counted for the
 * status page (tfos__ring_count_rows) and, inside a partition, for resuming
 * it after an abort (TFOS_RING_ROWS_UNKNOWN: not said). Wakes the consumer
 * only if it sleeps. */
int tfos__ring_commit_rows(tfos__ring *r, size_t len, uint64_t rows);

/* tfos__ring_commit_rows with TFOS_RING_ROWS_UNKNOWN. */
int tfos__ring_commit(tfos__ring *r, size_t len);

/* Drop the reservation; nothing becomes visible. */
void tfos__ring_cancel(tfos__ring *r);

/* reserve + memcpy + commit_rows / commit. */
int tfos__ring_write_rows(tfos__ring *r, uint32_t tag, const void *buf, size_t len, uint64_t rows, int timeout_ms);
int tfos__ring_write(tfos__ring *r, uint32_t tag, const void *buf, size_t len, int timeout_ms);

/* Take the producer lock and write PARTITION_BEGIN(partition). The lock is
 * held (other producers wait) until tfos__ring_partition_end; records written
 * meanwhile belong to the partition. On error nothing was written and the
 * lock is not held. TFOS_EINVAL when already inside a partition. A fresh
 * feed: it starts at row 0, and the ring forgets where an aborted feed of
 * the same id stopped. */
int tfos__ring_partition_begin(tfos__ring *r, uint64_t partition, int timeout_ms);

/* Like tfos__ring_partition_begin, for a feed of `partition` that may be the
 * re-feed of one aborted in this ring (see "Resuming" above): *first gets
 * the row to start at, the count of its first rows the ring already holds
 * from the aborted feed begun with the same `key` (0 when there was none).
 * The caller writes the partition's rows from that row on; the BEGIN
 * record carries it. */
int tfos__ring_partition_resume(tfos__ring *r, uint64_t partition, uint64_t key, uint64_t *first, int timeout_ms);

/* Write PARTITION_END and release the lock. On TFOS_ETIMEDOUT/TFOS_EFULL the
 * partition is still open and the call may be repeated. */
int tfos__ring_partition_end(tfos__ring *r, int timeout_ms);

/* End the feed: write END_OF_FEED after everything committed so far; the
 * consumer gets TFOS_EEND once it has read the rest, and later writes by any
 * producer get TFOS_EEND. Idempotent. Not inside a partition (TFOS_EINVAL).
 * In the one-producer case a clean close is tfos__ring_end_feed + close. */
int tfos__ring_end_feed(tfos__ring *r, int timeout_ms);

/* Any handle: the feed is over short of its end, for good (the node's
 * agent, as it stops its node): no producer will write again. The consumer
 * reads what is in the ring, then gets TFOS_ECLOSED; producers get
 * TFOS_ECLOSED at once, also those waiting for room or acknowledgements. */
int tfos__ring_shut(tfos__ring *r);

/* ---- consumer ---------------------------------------------------------- */

/* Wait for the oldest unreleased record and describe it in *rec without
 * consuming it; calling again before tfos__ring_release gives it again.
 * PARTITION_ABORT records tell that partition rec->partition is incomplete.
 * Returns TFOS_EEND at the end of the feed (every later call too),
 * TFOS_EAGAIN (timeout 0, empty), TFOS_ETIMEDOUT, TFOS_ECLOSED (the feed was
 * shut: tfos__ring_shut; every later call too), TFOS_EPROTO. */
int tfos__ring_peek(tfos__ring *r, tfos__ring_rec *rec, int timeout_ms);

/* Like peek, for up to `max` records at once: waits for at least one, then
 * takes those already there. *n gets the count (0 on error). The views stay
 * valid until tfos__ring_release. */
int tfos__ring_read_batch(tfos__ring *r, tfos__ring_rec *recs, size_t max, size_t *n, int timeout_ms);

/* Release the records returned by the last peek or read_batch, making room
 * for producers (waking one only if it sleeps). No-op when none are held. */
void tfos__ring_release(tfos__ring *r);

/* Consumer: the application has taken every row of `n` more partitions (it
 * passed their END or ABORT records). Producers that must know their
 * partition was delivered, not only written, wait for this count
 * (tfos__ring_stats.acked) to pass their partition's place in the ring. */
void tfos__ring_ack(tfos__ring *r, uint32_t n);

/* Any handle: wait until the consumer has acknowledged `target` partitions
 * (tfos__ring_stats.acked reaches it, compared in wrap-around order) -- a
 * producer that read acked+pending before writing its partition END waits
 * here for its partition to be taken, not only written. A futex wait on the
 * counter, woken by tfos__ring_ack, checking the consumer every slice.
 * Returns 0, TFOS_EEND (the consumer terminated its feed on purpose: the rest
 * is not wanted), TFOS_ECLOSED (it closed or died first, or the feed was
 * shut), TFOS_EAGAIN
 * (timeout 0, not yet) or TFOS_ETIMEDOUT. */
int tfos__ring_wait_acked(tfos__ring *r, uint32_t target, int timeout_ms);

/* Any handle: the application made progress (a training step; TFNode's
 * ctx.heartbeat()). The node agent's hang watchdog (--hang-timeout) counts
 * these beats and the consumer's read position; a node showing neither for
 * the timeout, while not waiting on an empty ring, is hung. */
void tfos__ring_beat(tfos__ring *r);

/* Consumer: how the application reads its rows, as columns (`on`) or as
 * row objects (off, the start). A hint for producers that hold rows in two
 * forms and can hand over the cheaper one to read (FeedClient.feed_pickled:
 * a batch as Spark pickled it for row readers, encoded columns for column
 * readers); no one checks records against it. */
void tfos__ring_set_reads_columns(tfos__ring *r, bool on);

/* Any handle: the consumer's last tfos__ring_set_reads_columns. */
bool tfos__ring_reads_columns(const tfos__ring *r);

/* ---- what the status page shows ---------------------------------------- */

/* Producer: `n` more rows went into records it committed (the ring does
 * not look into payloads; a producer that knows its rows says so). */
void tfos__ring_count_rows(tfos__ring *r, uint64_t n);

/* Consumer: the application took `n` more rows (handed them to the
 * trainer). Rows committed minus rows taken is what the node has buffered. */
void tfos__ring_count_taken(tfos__ring *r, uint64_t n);

/* Any handle: publish the application's latest report, `len` bytes of text
 * (at most TFOS_RING_REPORT_MAX, else TFOS_ETOOBIG), e.g. "step=120
 * loss=0.31", with the time. Counts as progress (tfos__ring_beat). A seqlock
 * in the header: readers never block the writer; a second writer racing the
 * first gets TFOS_EAGAIN and its report is dropped (the next one wins). */
int tfos__ring_report(tfos__ring *r, const char *text, size_t len);

/* Any handle: copy the latest report into out (NUL-terminated, cut to
 * outlen-1) and its age in ms into *age_ms (may be NULL). TFOS_EEND: nothing
 * reported yet; TFOS_EAGAIN: a writer kept it busy (try at the next beat).
 * The text is the application's: check it before use. */
int tfos__ring_report_get(const tfos__ring *r, char *out, size_t outlen, int64_t *age_ms);

#endif
