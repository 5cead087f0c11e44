"""Several FeedClient producer processes feed worker 1; one is SIGKILLed in
the middle of its partition and a new producer feeds that partition again,
as Spark's task retry does. Worker 1 reads with a plain DataFeed (no
timeout) and must see neither the death nor the re-feed: every row id once.
    feed_refeed.py MARKER ROWS_PER_PART"""
import multiprocessing
import os
import signal
import sys
import time

from tfos import TFNode
from tfos.feed import FeedClient

marker, per = sys.argv[1], int(sys.argv[2])
PARTS = (1, 2, 3, 4, 5)
KILLED, KILL_AT = 3, per * 3 // 5


def rows(p, die_at=None):
    for i in range(per):
        if i == die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-partition: earlier batches are in the ring
        yield (p * 100000 + i, "r%d" % i)


def producer(parts, die_at=None):
    c = FeedClient(executor_id=1, batch_rows=100)
    for p in parts:
        c.feed_partition(rows(p, die_at if p == KILLED else None), p)
    c.close()


def run(parts, die_at=None):
    proc = multiprocessing.get_context("fork").Process(target=producer, args=(parts, die_at))
    proc.start()
    return proc


ctx = TFNode.get_context()
if ctx.task_index == 0:
    a = run([1, 2])
    a.join(120)
    b = run([KILLED], KILL_AT)  # alone on the ring: the consumer sees every producer gone
    b.join(120)
    assert b.exitcode == -signal.SIGKILL, b.exitcode
    time.sleep(1.0)  # many of the consumer's 25 ms checks of its producers
    c, d = run([KILLED]), run([4, 5])  # the retry, beside another producer
    for proc in (c, d):
        proc.join(120)
        assert proc.exitcode == 0, proc.exitcode
    end = FeedClient(executor_id=1)
    end.end_feed()
    end.close()
    print("fed %d partitions; the producer of partition %d was killed" % (len(PARTS), KILLED), flush=True)
else:
    feed = TFNode.DataFeed(ctx.mgr)
    seen = []
    while not feed.should_stop():
        seen.extend(r[0] for r in feed.next_batch(64))
        time.sleep(0.002)
    expect = sorted(p * 100000 + i for p in PARTS for i in range(per))
    dups = len(seen) - len(set(seen))
    assert sorted(set(seen)) == expect, "missing rows: %d" % len(set(expect) - set(seen))
    print("consumed %d rows, %d distinct, %d twice, aborted %s" % (len(seen), len(set(seen)), dups,
                                                                    ctx.mgr.aborted), flush=True)
