"""The data feed: rings, DataFeed's TensorFlowOnSpark behaviour, inference
order, dead producers and consumers, and the feed socket under `tfos run`."""
import multiprocessing
import os
import re
import signal
import time

import numpy as np
import pytest

import tfos._tfos as t
from tfos import feed
from conftest import PY, join_child, produce, prog, run_tfos, start_child, wait_for

CTX = multiprocessing.get_context("fork")


def rings(cap=1 << 20):
    return t.ring_create(cap), t.ring_create(cap)


def test_batches_short_last_batch_and_should_stop():
    fd_in, fd_out = rings()
    rows = [[i, i * 0.5] for i in range(25)]
    p = start_child(produce, fd_in, {1: rows})
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), train_mode=True, timeout=20)
    sizes, got = [], []
    while not df.should_stop():
        b = df.next_batch(10)
        if not b:
            break
        sizes.append(len(b))
        got.extend(b)
    assert join_child(p) == 0
    assert sizes == [10, 10, 5]
    assert got == rows
    assert df.should_stop() and df.next_batch(10) == []


def test_input_mapping_and_arrays():
    fd_in, fd_out = rings()
    rows = [(i, float(i), "s%d" % i) for i in range(12)]
    p = start_child(produce, fd_in, {1: rows[:6], 2: rows[6:]})
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, input_mapping={"a": "x", "b": "y", "c": "z"}, timeout=20)
    first = df.next_batch(4)
    assert first == {"x": [0, 1, 2, 3], "y": [0.0, 1.0, 2.0, 3.0], "z": ["s0", "s1", "s2", "s3"]}
    cols = df.next_batch_arrays(8)
    assert join_child(p) == 0
    assert [list(c) for c in cols] == [list(range(4, 12)), [float(i) for i in range(4, 12)],
                                       ["s%d" % i for i in range(4, 12)]]
    assert isinstance(cols[0], np.ndarray)
    assert df.next_batch_arrays(8) == ()
    assert df.should_stop()


def test_pickle_fallback_for_arbitrary_rows():
    fd_in, fd_out = rings()
    rows = [{"k": i, "v": [i, {"nested": True}]} for i in range(9)]
    p = start_child(produce, fd_in, {3: rows})
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    got = df.next_batch(100)
    assert join_child(p) == 0
    assert got == rows


def test_inference_one_result_per_row_and_mismatch_names_partition():
    fd_in, fd_out = rings()
    p = start_child(produce, fd_in, {5: [[i] for i in range(10)], 6: [[i] for i in range(10, 13)]}, True)
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, train_mode=False, timeout=20)
    b = df.next_batch(8)
    assert len(b) == 8
    df.batch_results([r[0] * 10 for r in b])
    b = df.next_batch(8)  # stops at the end of partition 5
    assert b == [[8], [9]]
    with pytest.raises(ValueError, match=r"1 results for a batch of 2 rows \(partition 5: 2 rows\)"):
        df.batch_results([1])
    df.batch_results([80, 90])
    b = df.next_batch(8)
    assert b == [[10], [11], [12]]
    df.batch_results(["a", "b", "c"])
    assert join_child(p) == 0
    out = t.Ring(fd_out, t.ROLE_CONSUMER)
    results = {}
    while sum(len(v) for v in results.values()) < 13:
        for tag, _, payload in out.read(5000):
            part, res = __import__("pickle").loads(payload)
            results.setdefault(part, []).extend(res)
    assert results == {5: [i * 10 for i in range(10)], 6: ["a", "b", "c"]}


def _die_mid_partition(fd):
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    ring.partition_begin(7, 10000)
    tag, payload = feed.encode_rows([[1], [2], [3]])
    ring.write(tag, payload, 10000)
    os.kill(os.getpid(), signal.SIGKILL)


def test_killed_producer_partition_is_reported_and_refed():
    fd_in, fd_out = rings()
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)
    p = start_child(_die_mid_partition, fd_in)
    assert join_child(p) == -signal.SIGKILL
    first = df.next_batch(3)  # the rows that made it are delivered...
    assert first == [[1], [2], [3]]
    # ...and the partition is reported as not delivered whole; a re-feed follows
    p2 = start_child(produce, fd_in, {7: [[1], [2], [3], [4]]})
    again = df.next_batch(10)
    assert join_child(p2) == 0
    assert mgr.aborted == [7]
    assert again == [[1], [2], [3], [4]]
    assert df.should_stop()


def _feed_ids(fd, part, ids, key, die_after=None, end=False):
    """In a child: feed `ids` as partition `part` under `key`, 4 rows a
    record, from where the ring's copy of an aborted feed stops; SIGKILL
    after `die_after` rows written."""
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    first = ring.partition_begin(part, 10000, key)
    for i in range(first, len(ids), 4):
        if die_after is not None and i >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        feed.write_rows(ring, [(x,) for x in ids[i:i + 4]], 10000)
    ring.partition_end(10000)
    if end:
        ring.end_feed(10000)
    ring.close()


def test_refeed_resumes_where_the_ring_stopped_and_the_position_follows():
    """Issue 35, item 7: a producer killed in the middle of partition 7, and
    its re-feed under the same key: the re-feed skips the 12 rows the ring
    had taken, so the program gets each row once, in order, and sees no
    error; the feed position counts the rows of 7 handed out across the
    abort (the aborted feed's and the re-feed's)."""
    fd_in, fd_out = rings()
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)
    ids = list(range(700, 730))
    p = start_child(_feed_ids, fd_in, 7, ids, 5, 12)
    assert join_child(p) == -signal.SIGKILL
    got = [r[0] for r in df.next_batch(10)]
    assert mgr.partial == {7: 10}
    p = start_child(_feed_ids, fd_in, 7, ids, 5, None, True)
    got += [r[0] for r in df.next_batch(5)]  # 2 from the aborted feed, 3 resumed
    assert mgr.aborted == [7] and mgr.partial == {7: 15}
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(7)]
    assert join_child(p) == 0
    assert got == ids
    assert mgr.consumed == [7] and mgr.partial == {}
    st = mgr.input.stats()
    assert st["resumed"] == 1 and st["last_aborted"] == 7 and st["last_aborted_rows"] == 12


def test_refeed_under_another_key_or_of_uncounted_rows_comes_whole():
    """At-least-once where the ring cannot tell: a re-feed under another key
    (another job's partition of the same id), and a feed whose records came
    without a row count, start at row 0."""
    fd_in, fd_out = rings()
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    ids = list(range(10))
    p = start_child(_feed_ids, fd_in, 3, ids, 1, 4)
    assert join_child(p) == -signal.SIGKILL
    p = start_child(_feed_ids, fd_in, 3, ids, 2, None, True)
    got = []
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(100)]
    assert join_child(p) == 0
    assert got == ids[:4] + ids
    fd_in, fd_out = rings()
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    p = start_child(_die_mid_partition, fd_in)  # ring.write without rows
    assert join_child(p) == -signal.SIGKILL
    assert df.mgr.input.stats()["last_aborted_rows"] is None or df.next_batch(3) == [[1], [2], [3]]
    p = start_child(_feed_ids, fd_in, 7, [1, 2, 3, 4], 0, None, True)
    got = []
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(100)]
    assert join_child(p) == 0
    assert got[-4:] == [1, 2, 3, 4] and len(got) in (4, 7)


def _shut_later(fd, delay):
    time.sleep(delay)
    t.Ring(fd, t.ROLE_OBSERVER).shut()


def test_feed_closed_is_for_good_and_nothing_spins():
    """Issue 35, item 7: FeedClosed means the feed is over (the agent shut
    the ring: the node is stopping). A DataFeed waiting with no timeout
    sleeps (futex) until then; after it, every call raises FeedClosed at
    once and should_stop() is True, so a loop `while not
    feed.should_stop()` that catches it ends instead of spinning (before,
    a dead producer gave a FeedClosed that every call repeated at once
    while should_stop() stayed False)."""
    fd_in, fd_out = rings()
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True)
    p = start_child(produce, fd_in, {1: [(i,) for i in range(5)]}, False)
    assert join_child(p) == 0
    s = start_child(_shut_later, fd_in, 1.5)
    cpu0, seen, closed = time.process_time(), [], 0
    while not df.should_stop():
        try:
            seen += [r[0] for r in df.next_batch(3)]
        except feed.FeedClosed as exc:
            assert "the node is stopping" in str(exc)
            closed += 1
    cpu = time.process_time() - cpu0
    assert join_child(s) == 0
    assert seen == list(range(5)) and closed <= 1  # the last rows come back first, then should_stop()
    assert cpu < 0.75, "the wait used %.2f s of CPU" % cpu  # asleep 1.5 s; a spin uses all of it
    for _ in range(3):
        with pytest.raises(feed.FeedClosed):
            df.next_batch(1)
    assert df.should_stop()


def test_waiting_for_a_refeed_is_bounded_says_why_and_does_not_spin():
    """Issue 35, item 7: after a producer's death, with no producer attached,
    a DataFeed without a timeout waits for a re-feed at most refeed_timeout
    (TFOS_FEED_TIMEOUT, the feed timeout), asleep, then says which
    partition waits and why, once; a re-feed later is still read."""
    fd_in, fd_out = rings()
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, refeed_timeout=2)
    ids = list(range(40))
    p = start_child(_feed_ids, fd_in, 9, ids, 0, 8)
    assert join_child(p) == -signal.SIGKILL
    got = [r[0] for r in df.next_batch(8)]
    cpu0 = time.process_time()
    with pytest.raises(TimeoutError) as err:
        df.next_batch(8)
    cpu = time.process_time() - cpu0
    msg = str(err.value)
    assert "partition 9 was cut short when its producer (pid %d) died after 8 rows" % p.pid in msg, msg
    assert "no producer has attached to this node's feed for 2 s" in msg and "refeed_timeout" in msg, msg
    assert cpu < 1.0, "the wait used %.2f s of CPU" % cpu  # asleep >= 2 s
    assert not df.should_stop()
    p = start_child(_feed_ids, fd_in, 9, ids, 0, None, True)
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(8)]
    assert join_child(p) == 0
    assert got == ids


def _fill_until_closed(fd, q):
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    payload = b"x" * 1000
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 60:
            ring.write(feed.TAG_PICKLE, payload, 30000)
    except t.FeedClosed:
        q.put(("closed", time.monotonic()))
        return
    q.put(("no error", time.monotonic()))


def _consume_then_die(fd):
    ring = t.Ring(fd, t.ROLE_CONSUMER)
    ring.read(5000, 1)
    os.kill(os.getpid(), signal.SIGKILL)


def test_dead_consumer_fails_producer_fast():
    fd_in = t.ring_create(64 << 10)
    q = CTX.Queue()
    cons = start_child(_consume_then_die, fd_in)
    prod = start_child(_fill_until_closed, fd_in, q)
    assert join_child(cons) == -signal.SIGKILL
    died = time.monotonic()
    what, when = q.get(timeout=30)
    assert join_child(prod) == 0
    assert what == "closed"
    assert when - died < 5  # a blocked producer learns within ~25 ms; bound loosely


def test_terminate_stops_producers():
    fd_in, fd_out = rings(64 << 10)
    q = CTX.Queue()
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    prod = start_child(_fill_until_closed, fd_in, q)
    df.mgr.input.read(5000, 1)
    df.terminate()
    assert df.should_stop()
    what, _ = q.get(timeout=30)
    assert join_child(prod) == 0
    assert what == "closed"


# Programs of the cluster feed each other (FeedClient), with no --input: without
# this, `tfos run` ends every node's feed at once (no feeder would write).
PRODUCERS = {"TFOS_FEED_PRODUCERS": "1"}


def test_feed_through_tfos_run_train_and_inference(tmp_path, marker):
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "a"), "--", PY, prog("feed_pair.py"),
                  marker, "train", "5", "1000", "64"], env=PRODUCERS)
    assert r.returncode == 0, r.stderr
    assert "[worker:1] consumed 5000 rows in 79 batches, last batch 8, aborted []" in r.stdout
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "b"), "--", PY, prog("feed_pair.py"),
                  marker, "infer", "4", "300", "64"], env=PRODUCERS)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"partition \d: 300 results in order", r.stdout)) == 4
    # results as one numpy array per batch, read from views of the ring
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "c"), "--", PY, prog("feed_pair.py"),
                  marker, "infer_arrays", "3", "300", "64"], env=PRODUCERS)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"partition \d: 300 results in order", r.stdout)) == 3


def test_feed_socket_refuses_wrong_secret(tmp_path, marker):
    code = ("import os, sys\n"
            "from tfos import TFNode, feed\n"
            "ctx = TFNode.get_context()\n"
            "if ctx.task_index == 0:\n"
            "    try:\n"
            "        feed.FeedClient(1, secret='0' * 64, timeout=5)\n"
            "    except feed.FeedError as e:\n"
            "        print('refused:', e, flush=True)\n"
            "    feed.FeedClient(1).end_feed()\n"
            "else:\n"
            "    df = TFNode.DataFeed(ctx.mgr)\n"
            "    assert df.next_batch(5) == []\n")
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "l"), "--", PY, "-c", code, marker], env=PRODUCERS)
    assert r.returncode == 0, r.stderr
    assert "refused: executor 1 refused the feed (wrong cluster secret?)" in r.stdout
    assert "refused a feed producer: it does not know the cluster secret" in r.stderr


@pytest.mark.parametrize("read_ahead,as_dict", [(8, True), (2, False), (1, False)])
def test_tf_data_dataset_on_the_feed(read_ahead, as_dict):
    """Whatever the read-ahead (one read of 512 rows, reads of 128, one per
    batch), the batches are the same: full ones, then the short rest."""
    tf = pytest.importorskip("tensorflow")
    fd_in, fd_out = rings(1 << 22)
    xs = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    ys = np.arange(300, dtype=np.int64)

    def columns(fd):
        ring = t.Ring(fd, t.ROLE_PRODUCER)
        ring.partition_begin(1, 10000)
        for lo in range(0, 300, 100):
            ring.write_columns(feed.TAG_COLUMNS, [("x", xs[lo:lo + 100]), ("y", ys[lo:lo + 100])], 10000)
        ring.partition_end(10000)
        ring.end_feed(10000)

    p = start_child(columns, fd_in)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    ds = df.dataset(64, as_dict=as_dict, read_ahead=read_ahead)
    got = list(ds.as_numpy_iterator())
    assert join_child(p) == 0
    if not as_dict:
        assert all(isinstance(b, tuple) and len(b) == 2 for b in got)
        got = [{"x": b[0], "y": b[1]} for b in got]
    assert [len(b["y"]) for b in got] == [64, 64, 64, 64, 44]
    assert [len(b["x"]) for b in got] == [64, 64, 64, 64, 44]
    spec = ds.element_spec
    x_spec, y_spec = (spec["x"], spec["y"]) if as_dict else spec
    assert x_spec.shape.as_list() == [None, 4] and y_spec.dtype == tf.int64
    assert np.array_equal(np.concatenate([b["x"] for b in got]), xs)
    assert np.array_equal(np.concatenate([b["y"] for b in got]), ys)
    assert df.rows_read == 300 and df.mgr.consumed == [1]


def test_dataset_read_ahead_must_be_positive():
    pytest.importorskip("tensorflow")
    fd_in, fd_out = rings(1 << 16)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=5)
    with pytest.raises(ValueError, match="read_ahead must be >= 1, not 0"):
        df.dataset(64, read_ahead=0)


def _feed_in_two_steps(fd, go, first, second):
    """Feed rows 0..first-1, wait for `go`, then the rest, and end the feed."""
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    ring.partition_begin(1, 10000)
    feed.write_rows(ring, [(i, "r%d" % i) for i in range(first)], 10000)
    ring.partition_end(10000)
    go.wait(60)
    ring.partition_begin(2, 10000)
    feed.write_rows(ring, [(i, "r%d" % i) for i in range(first, first + second)], 10000)
    ring.partition_end(10000)
    ring.end_feed(10000)
    ring.close()


@pytest.mark.parametrize("arrays", [False, True])
def test_timeout_mid_batch_keeps_every_row(arrays):
    """A batch that times out after it has taken rows returns them (a short
    batch); TimeoutError only when no row came. Every row id is seen once."""
    fd_in, fd_out = rings()
    go = CTX.Event()
    p = start_child(_feed_in_two_steps, fd_in, go, 150, 100)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=0.3)
    seen, sizes, timeouts = [], [], 0
    while not df.should_stop():
        try:
            if arrays:
                cols = df.next_batch_arrays(100)
                batch = [int(x) for x in cols[0]] if cols else []
            else:
                batch = [r[0] for r in df.next_batch(100)]
        except TimeoutError:
            timeouts += 1  # nothing came: let the producer go on
            go.set()
            continue
        sizes.append(len(batch))
        seen.extend(batch)
        if len(seen) >= 150:
            go.set()
    assert join_child(p) == 0
    assert sorted(seen) == list(range(250)) and len(seen) == 250
    assert sizes[:2] == [100, 50]  # the second batch timed out with 50 rows: they came back


def _one_partition_then_die(fd):
    produce(fd, {1: [(i, "r%d" % i) for i in range(30)]}, end=False)
    ring = t.Ring(fd, t.ROLE_PRODUCER)  # attached, then killed: it never closes
    os.kill(os.getpid(), signal.SIGKILL)


def test_producer_killed_mid_batch_rows_come_first_then_the_feed_waits_on():
    """The rows come first. Until issue 35 the next call raised FeedClosed;
    now a producer's death is no error (a new producer may come: Spark's
    retry), so the feed waits within its timeout, and reads what comes."""
    fd_in, fd_out = rings()
    p = start_child(_one_partition_then_die, fd_in)
    assert join_child(p) == -signal.SIGKILL
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=1)
    assert [r[0] for r in df.next_batch(100)] == list(range(30))
    with pytest.raises(TimeoutError, match=r"no data on the feed for 1\.0 s$"):
        df.next_batch(100)
    assert not df.should_stop()
    p = start_child(produce, fd_in, {2: [(30, "r30")]})
    assert df.next_batch(100) == [(30, "r30")]
    assert join_child(p) == 0 and df.should_stop()


HOLD_PROG = r'''
import os, signal, sys, threading, time
from tfos import TFNode
mode, flag = sys.argv[1], sys.argv[2]
# a second thread, as numpy's BLAS, TensorFlow and PyTorch start: with
# SIGTERM blocked in the main thread only, the kernel delivers it there
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
if mode == "handler":
    signal.signal(signal.SIGTERM, lambda *_: (print("handler ran", flush=True), sys.exit(3)))
with TFNode.hold_stop():
    print("in", flush=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)                    # the signal has landed by now
    print("wrote both", flush=True)
print("after the block", flush=True)
'''


@pytest.mark.parametrize("mode", ["default", "handler"])
def test_hold_stop_defers_sigterm_until_the_block_ends(tmp_path, mode):
    import subprocess
    flag = tmp_path / "sent"
    p = subprocess.Popen([PY, "-c", HOLD_PROG, mode, str(flag)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "in\n"
        p.send_signal(signal.SIGTERM)
        flag.write_text("1")
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    # the block finished, then the stop acted as it would have: the default
    # kills the process, a handler runs (after the block, not in it)
    assert out.splitlines()[0] == "wrote both", out
    if mode == "default":
        assert p.returncode == -signal.SIGTERM and "after the block" not in out, (p.returncode, out)
    else:
        assert out.splitlines()[1:] == ["handler ran"] and p.returncode == 3, (p.returncode, out)


def test_hold_stop_needs_the_main_thread_and_restores_the_handler():
    import threading
    errors = []

    def body():
        try:
            with feed.hold_stop():
                pass
        except RuntimeError as exc:
            errors.append(str(exc))
    th = threading.Thread(target=body)
    th.start()
    th.join(10)
    assert errors and "main thread" in errors[0], errors
    before = signal.getsignal(signal.SIGTERM)
    with feed.hold_stop():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_checkpoint_saves_the_position_only_when_the_block_succeeds(tmp_path, monkeypatch):
    import json
    monkeypatch.setenv("TFOS_ATTEMPT", "1")
    monkeypatch.setenv("TFOS_JOB_NAME", "worker")
    monkeypatch.setenv("TFOS_TASK_INDEX", "0")
    monkeypatch.delenv("TFOS_CLUSTER_ID", raising=False)   # under tfos, the cluster id ends the name
    mgr = feed.FeedManager.__new__(feed.FeedManager)   # the position needs no rings
    mgr.consumed, mgr.partial = [0, 1], {2: 40}
    pos = tmp_path / feed.POSITION_DIR / "attempt-1-worker-0.json"
    with pytest.raises(OSError):
        with mgr.checkpoint(str(tmp_path)):
            raise OSError("disk full")
    assert not pos.exists()
    with mgr.checkpoint(str(tmp_path)):
        pass
    got = json.loads(pos.read_text())
    assert got["partitions"] == [0, 1] and got["partial"] == {"2": 40}, got


def _two_partitions(fd, rows_each=300, hold=None):
    """Partitions 1 and 2 of `rows_each` rows (x = row number), in records of
    50 rows; with `hold` (an Event), waits for it before ending the feed."""
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    for pid in (1, 2):
        ring.partition_begin(pid, 10000)
        base = (pid - 1) * rows_each
        for lo in range(0, rows_each, 50):
            ring.write_columns(feed.TAG_COLUMNS, [("x", np.arange(base + lo, base + lo + 50, dtype=np.int64))],
                               10000)
        ring.partition_end(10000)
    if hold is not None:
        hold.wait(60)
    ring.end_feed(10000)


def test_prefetcher_hands_out_the_batches_in_order_and_saves_their_position(tmp_path):
    """A thread reads ahead; the batches are those of next_batch_arrays, and a
    checkpoint's feed position is that of the last batch handed out."""
    fd_in, fd_out = rings(1 << 22)
    p = start_child(_two_partitions, fd_in)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    pf = feed.Prefetcher(df, 64, depth=3)
    got = [pf.get()[0] for _ in range(5)]      # 320 rows: partition 1 whole, 20 rows of 2
    assert wait_for(lambda: pf.queue.qsize() >= 3, 10, 0.01)   # the thread is 3 batches ahead
    assert df.rows_read >= 8 * 64              # 5 handed out, 3 queued (and one more, waiting to be)
    path = df.save_position(str(tmp_path))
    import json
    pos = json.load(open(path))
    assert pos["partitions"] == [1] and pos["partial"] == {"2": 20}
    rest = [b[0] for b in pf]
    assert join_child(p) == 0
    assert [len(b) for b in got + rest] == [64] * 9 + [24]
    assert np.array_equal(np.concatenate(got + rest), np.arange(600))
    assert pf.get() is None and list(pf) == []
    pos = json.load(open(df.save_position(str(tmp_path))))
    assert pos["partitions"] == [1, 2] and pos["partial"] == {}


def test_terminate_stops_a_prefetch_thread_waiting_on_the_ring():
    """The producer has fed everything but not ended the feed: the thread
    waits on the ring; terminate() stops it and closes the feed, and the
    producer sees the close."""
    import threading
    fd_in, fd_out = rings(1 << 22)
    hold = multiprocessing.get_context("fork").Event()
    p = start_child(_two_partitions, fd_in, 300, hold)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True)   # no timeout: waits as long as producers live
    pf = feed.Prefetcher(df, 600, depth=2)
    assert len(pf.get()[0]) == 600                  # the rows, then the thread waits for more
    t0 = time.monotonic()
    df.terminate()
    assert time.monotonic() - t0 < 5
    assert not pf.thread.is_alive() and df._prefetcher is None
    assert "tfos-feed-prefetch" not in [th.name for th in threading.enumerate()]
    with pytest.raises(feed.FeedError, match="prefetch thread was stopped"):
        pf.get()
    hold.set()
    assert join_child(p) != 0   # its end_feed met the closed ring


def test_prefetcher_raises_the_threads_error_in_the_training_thread():
    fd_in, fd_out = rings(1 << 16)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=0.5)   # nobody feeds
    pf = feed.Prefetcher(df, 10)
    with pytest.raises(TimeoutError, match="no data on the feed for 0.5 s"):
        pf.get()
    with pytest.raises(TimeoutError):
        pf.get()   # again: the error stays
    with pytest.raises(ValueError, match="depth must be >= 1"):
        feed.Prefetcher(df, 10, depth=0)


def column_records(fd, arrays, end):
    """A producer on ring ``fd`` that wrote partition 1 as one record per
    array (column "x"); with ``end``, the partition's and the feed's end too,
    and it let go of the ring."""
    prod = t.Ring(fd, t.ROLE_PRODUCER)
    prod.partition_begin(1, 5000)
    for a in arrays:
        prod.write_columns(feed.TAG_COLUMNS, [("x", a)], 5000)
    if end:
        prod.partition_end(5000)
        prod.end_feed(5000)
        prod.close()
    return prod


def test_arrays_as_views_into_the_ring_held_until_the_next_read():
    """next_batch_arrays(copy=False): a batch inside one large record is a
    read-only view of the ring (no copy), whose record stays in the ring
    until the next read; batches taken with copy=True from the same read are
    copies; the views stay readable after the feed is closed."""
    fd_in, fd_out = rings()
    data = np.arange(3 * 16 * 1024, dtype=np.float32).reshape(3, 16, 1024)  # 64 KiB records
    prod = column_records(fd_in, data, end=True)
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)

    def root(a):
        while isinstance(getattr(a, "base", None), (np.ndarray, memoryview)):
            a = a.base
        return a

    (a,) = df.next_batch_arrays(16, copy=False)
    assert (a == data[0]).all()
    assert not a.flags.writeable and type(root(a).obj).__name__ == "RingMapping"
    # the mapping a device runtime registers (FeedDataset(device=)): the views lie in it
    addr, length = mgr.input.views_region
    assert length == os.fstat(fd_in).st_size and addr <= a.ctypes.data < a.ctypes.data + a.nbytes <= addr + length
    assert prod.views_region is None  # only a consumer reads views
    held = mgr.input.stats()["used"]
    assert held >= 3 * data[0].nbytes  # all three records read, none released
    (b,) = df.next_batch_arrays(16)  # the same read's second record, copied
    assert (b == data[1]).all() and b.flags.writeable and root(b) is not root(a)
    (c,) = df.next_batch_arrays(16, copy=False)
    assert (c == data[2]).all() and not c.flags.writeable
    assert mgr.input.stats()["used"] == held
    assert df.next_batch_arrays(16, copy=False) == ()  # the next read: records released, end of feed
    assert mgr.input.stats()["used"] < 64  # (the end-of-feed mark stays)
    assert df.should_stop()
    mgr.close()
    assert float(a.sum()) == float(data[0].sum())  # a second mapping of its own: still readable


def test_views_of_a_batch_that_goes_on_in_the_next_read_are_copied_first():
    """next_batch_arrays(copy=False) of a batch whose rows go on past the
    records of one read: the read after lets producers write over those
    records, so the rows taken from them are copied out before it (the batch
    is joined from the copies and the new read's views); the batches are
    the rows fed, in order."""
    fd_in, fd_out = rings()
    data = np.arange(3 * 512 * 40, dtype=np.float32).reshape(3, 512, 40)  # 80 KiB records
    prod = column_records(fd_in, data[:2], end=False)
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)
    (a,) = df.next_batch_arrays(700, copy=False)   # the first read: records 0 and 1
    assert (a == data.reshape(-1, 40)[:700]).all()
    prod.write_columns(feed.TAG_COLUMNS, [("x", data[2])], 5000)
    prod.partition_end(5000)
    prod.end_feed(5000)
    prod.close()
    parts, got = df._take(700, True, copy=False)   # record 1's last 324 rows, then a read: record 2's first 376
    assert got == 700 and [len(p[0][0]) for p in parts] == [324, 376]
    (before, _), (after, _) = parts
    assert before[0].flags.writeable and not after[0].flags.writeable   # a copy; a view of the new read
    assert (np.concatenate([before[0], after[0]]) == data.reshape(-1, 40)[700:1400]).all()
    (c,) = df.next_batch_arrays(700, copy=False)
    assert (c == data.reshape(-1, 40)[1400:]).all() and df.next_batch_arrays(700, copy=False) == ()
    mgr.close()


def test_feed_arrays_records_take_at_most_2_mib_unless_batch_rows_says():
    """FeedClient.feed_arrays without batch_rows: as many rows a record as
    fit in 2 MiB (_tfos.DEFAULTS["record_bytes"]), so that the records go
    round the part of the ring in the cache; batch_rows is kept as given."""
    assert t.DEFAULTS["record_bytes"] == 2 << 20
    xs = np.arange(50 * 25600, dtype=np.float32).reshape(50, 25600)  # 100 KiB rows: 20 to a record
    ys = np.arange(50, dtype=np.int64)
    for batch_rows, sizes in ((None, [20, 20, 10]), (50, [50])):
        fd = t.ring_create(1 << 24)
        client = feed.FeedClient.__new__(feed.FeedClient)  # a producer on a ring of our own, no cluster
        client.input, client.timeout_ms = t.Ring(fd, t.ROLE_PRODUCER), 10000
        client.feed_arrays({"x": xs, "y": ys}, 1, batch_rows=batch_rows)
        reader = t.Ring(fd, t.ROLE_CONSUMER)
        got = [feed._decode_columns(bytes(data))[2] for tag, _, data in reader.read(1000, 64)
               if tag == feed.TAG_COLUMNS]
        assert [len(cols[1]) for cols in got] == sizes
        assert np.array_equal(np.concatenate([cols[0] for cols in got]), xs)
        assert np.array_equal(np.concatenate([cols[1] for cols in got]), ys)
        reader.close()
        client.input.close()
        os.close(fd)


# Every name tfos.feed had as one file that tfos's other modules, the tests,
# bench/, examples/ and the docs use: the package re-exports each (issue 33).
FEED_NAMES = ["FeedManager", "FeedClient", "FeedError", "FeedClosed", "FeedEnded", "ResultsMissing", "get_manager",
              "hold_stop", "DataFeed", "Prefetcher", "TAG_PICKLE", "TAG_COLUMNS", "TAG_ARROW", "TAG_RESULTS",
              "encode_rows", "write_rows", "arrow_ipc", "_decode_columns", "POSITION_DIR", "save_position",
              "read_positions"]


def test_feed_package_keeps_every_import_path():
    import subprocess
    import sys
    for name in FEED_NAMES:
        assert hasattr(feed, name), name
    # the public API is the same, and each object is the one its module defines
    assert feed.__all__ == ["FeedManager", "FeedClient", "FeedError", "FeedClosed", "FeedEnded", "ResultsMissing",
                            "get_manager", "hold_stop"]
    assert feed.FeedError is t.FeedError and issubclass(feed.ResultsMissing, feed.FeedError)
    assert feed.DataFeed is feed.consumer.DataFeed and feed.FeedClient is feed.producer.FeedClient
    from tfos import TFNode
    assert TFNode.DataFeed is feed.DataFeed and TFNode.hold_stop is feed.hold_stop
    # every module imports on its own, first, in a fresh interpreter (no cycle)
    for mod in ("codec", "consumer", "positions", "prefetch", "producer"):
        r = subprocess.run([sys.executable, "-c", "import tfos.feed.%s" % mod], capture_output=True, text=True)
        assert r.returncode == 0, (mod, r.stderr[-2000:])


def test_killed_producer_is_fed_again_and_the_program_sees_nothing(tmp_path, marker):
    """Issue 35, item 7: FeedClient producer processes feed worker 1; the one
    feeding partition 3 is SIGKILLed in the middle of it, with no other
    producer attached, and a new producer feeds partition 3 again beside
    another. The program (a plain DataFeed) sees no exception, reads every
    row, and, re-fed into the same node, each row once: the new producer
    skips the rows the ring had taken (exactly-once)."""
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "0", "--log-dir", str(tmp_path / "l"), "--", PY,
                  prog("feed_refeed.py"), marker, "2000"], env=PRODUCERS, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "consumed 10000 rows, 10000 distinct, 0 twice, aborted [3]" in r.stdout, r.stdout[-3000:]


def _feed_arrow_nulls(fd):
    import pyarrow as pa
    rb = pa.RecordBatch.from_pydict({
        "id": pa.array([0, 1, 2], pa.int64()),
        "x": pa.array([1.5, None, float("nan")], pa.float64()),
        "k": pa.array([7, None, 9], pa.int64()),
        "s": pa.array(["a", None, "c"]),
        "v": pa.array([[1.0, 2.0], None, [5.0, 6.0]], pa.list_(pa.float64())),
    })
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    ring.partition_begin(1, 10000)
    for _ in range(2):
        ring.write(feed.TAG_ARROW, feed.arrow_ipc(rb), 10000, rb.num_rows)
    ring.partition_end(10000)
    ring.end_feed(10000)
    ring.close()


def test_spark_nulls_are_none_in_rows_and_nan_in_number_arrays():
    """Issue 35, item 10: a Spark null in a double (or bigint) column reached
    next_batch's rows as NaN; now it is None, as in string and array
    columns, and a real NaN stays NaN. next_batch_arrays keeps numpy's rule
    (docs/FEED.md): a number column with nulls is float64 with NaN there,
    other columns are object arrays with None."""
    fd_in, fd_out = rings()
    p = start_child(_feed_arrow_nulls, fd_in)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    rows = df.next_batch(3)
    assert [r[:4] for r in rows[:2]] == [(0, 1.5, 7, "a"), (1, None, None, None)]
    assert type(rows[0][2]) is int and rows[1][4] is None and list(rows[0][4]) == [1.0, 2.0]
    assert rows[2][0] == 2 and np.isnan(rows[2][1]) and rows[2][2] == 9
    cols = df.next_batch_arrays(3, as_dict=True)
    assert join_child(p) == 0
    assert cols["x"].dtype == np.float64 and cols["x"][0] == 1.5 and np.isnan(cols["x"][1:]).all()
    assert cols["k"].dtype == np.float64 and np.isnan(cols["k"][1]) and list(cols["k"][[0, 2]]) == [7.0, 9.0]
    assert cols["s"].dtype == object and list(cols["s"]) == ["a", None, "c"]
    assert cols["v"].dtype == object and cols["v"][1] is None
