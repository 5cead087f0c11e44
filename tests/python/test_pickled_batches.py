"""Spark's pickled batches passed into the feed ring whole (issue 40):
_tfos.pickled_list_len counts a pickled list's items from its opcodes, and
FeedClient.feed_pickled writes each batch it can count as it is, the rest
as rows. The Spark side (pickled_batches over a cached RDD, train and
inference through it) runs in tests/spark/test_tfcluster.py."""
import collections
import datetime
import decimal
import os
import pickle
import random
import signal

import numpy as np

import tfos._tfos as t
from tfos import feed
from conftest import join_child, start_child


def _value(rng, depth=0):
    k = rng.randrange(14 if depth < 3 else 8)
    if k == 0:
        return rng.randrange(-2 ** 70, 2 ** 70)
    if k == 1:
        return rng.random()
    if k == 2:
        return "s%d" % rng.randrange(1000) * rng.randrange(0, 40)
    if k == 3:
        return bytes(rng.randrange(0, 300))
    if k == 4:
        return None
    if k == 5:
        return rng.choice([True, False])
    if k == 6:
        return rng.randrange(-300, 300)
    if k == 7:
        return np.arange(rng.randrange(0, 20), dtype=rng.choice([np.float32, np.int64]))
    if k == 8:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(0, 5)))
    if k == 9:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if k == 10:
        return {str(i): _value(rng, depth + 1) for i in range(rng.randrange(0, 4))}
    if k == 11:
        return set(range(rng.randrange(0, 5)))
    if k == 12:
        return frozenset(range(rng.randrange(0, 3)))
    return (datetime.date(2020, 1, 1), decimal.Decimal("1.5"), collections.OrderedDict(a=1), np.float64(2.5),
            bytearray(b"xy"))


def test_the_count_is_the_lists_length_for_every_protocol_and_any_items():
    """Protocols 1-5 over numbers, strings, bytes, containers, numpy arrays
    and scalars, dates, decimals, one object shared by many items (memo
    references), and lists across pickle's 1000-item APPENDS runs: the
    count is len(); protocol 0 (text) may say -1, never a wrong count."""
    rng = random.Random(1)
    for proto in range(0, 6):
        for _ in range(60):
            n = rng.choice([0, 1, 2, 5, 999, 1000, 1001, 2500])
            shared = _value(rng)
            items = [_value(rng) if rng.random() < 0.9 else shared for _ in range(n)]
            data = pickle.dumps(items, proto)
            got = t.pickled_list_len(data)
            assert got == n if proto else got in (-1, n), (proto, n, got)
            for cut in rng.sample(range(len(data)), min(10, len(data))):
                assert t.pickled_list_len(data[:cut]) == -1  # truncated: never counted
    # PySpark's own rows (a namedtuple-like Row) and a memoryview payload
    rows = [(float(i), i, "x") for i in range(300)]
    assert t.pickled_list_len(memoryview(pickle.dumps(rows, 5))) == 300


def test_what_is_not_surely_a_list_of_items_is_minus_one():
    """Not a list at the top, a list holding itself (its items reach it
    through the memo), extra bytes after STOP, an out-of-band buffer."""
    for obj in [(1, 2), {1: 2}, np.arange(3), 5, "x", None]:
        assert t.pickled_list_len(pickle.dumps(obj, 5)) == -1
    a = [1, 2]
    a.append(a)
    for proto in range(1, 6):
        assert t.pickled_list_len(pickle.dumps(a, proto)) == -1
    assert t.pickled_list_len(pickle.dumps([1, 2], 5) + b"\x00") == -1
    oob = pickle.dumps([pickle.PickleBuffer(b"abc")], 5, buffer_callback=lambda b: False)
    assert t.pickled_list_len(oob) == -1
    assert t.pickled_list_len(b"") == -1


def _fuzz(check, base, seed, n, out_fd):
    """In a child with its address space capped (a mutated memo index makes
    pickle.loads allocate what it names): mutate the pickles in ``base``
    (1-3 bytes each); ``check(bytes)`` gives None (not taken) or a callable
    judging what pickle.loads made of those bytes, run where they unpickle.
    Writes 'taken wrong' to out_fd."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
    rng = random.Random(seed)
    taken = wrong = 0
    for _ in range(n):
        b = bytearray(rng.choice(base))
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        judge = check(bytes(b))
        if judge is None:
            continue
        try:
            obj = pickle.loads(bytes(b))
        except (Exception, MemoryError):
            continue
        taken += 1
        wrong += not judge(obj)
    os.write(out_fd, b"%d %d" % (taken, wrong))
    os._exit(0)


def _run_fuzz(check, base, seed):
    """(taken, wrong) of 20,000 mutations (_fuzz in a child)."""
    r, w = os.pipe()
    p = start_child(_fuzz, check, base, seed, 20000, w)
    os.close(w)
    assert join_child(p) == 0
    taken, wrong = map(int, os.read(r, 100).split())
    os.close(r)
    return taken, wrong


def _counted(b):
    k = t.pickled_list_len(b)
    return None if k < 0 else (lambda obj: isinstance(obj, list) and len(obj) == k)


def test_mutated_streams_are_never_counted_wrong():
    base = [pickle.dumps([(1.5, i, "ab", b"x", None, [i, {"k": i}]) for i in range(k)], p)
            for p in (2, 4, 5) for k in (0, 3, 40)]
    taken, wrong = _run_fuzz(_counted, base, 3)
    assert wrong == 0 and taken > 100  # the mutations that stay valid pickles were counted, rightly


def _client(fd, batch_rows=1000):
    client = feed.FeedClient.__new__(feed.FeedClient)  # a producer on a ring of our own, no cluster
    client.input, client.timeout_ms, client.batch_rows = t.Ring(fd, t.ROLE_PRODUCER), 10000, batch_rows
    return client


def test_batches_go_into_the_ring_as_they_are_and_the_rows_come_back_as_the_rdd_held_them():
    rows = [(float(i), i, "r%d" % i) for i in range(50)] + [[i, 2.0] for i in range(10)]
    batches = [pickle.dumps(rows[i:i + 20], 5) for i in range(0, 60, 20)]
    batches.append(pickle.dumps((("a", 1), ("b", 2)), 5))  # a batch of a tuple: unpickled here, fed as rows
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    client = _client(fd_in)
    assert client.feed_pickled(iter(batches), 4) == 62
    client.input.end_feed(10000)
    reader = t.Ring(fd_in, t.ROLE_CONSUMER)
    records = [(tag, bytes(data)) for tag, _, data in reader.read(1000, 64) if tag >= t.TAG_USER]
    reader.close()
    assert [r for r in records if r[0] == feed.TAG_PICKLE] == [(feed.TAG_PICKLE, b) for b in batches[:3]]
    assert len(records) == 4  # and the tuple's rows as one record of their own

    fd_in = t.ring_create(1 << 20)
    client = _client(fd_in)
    client.feed_pickled(iter(batches), 4)
    client.input.end_feed(10000)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    got = []
    while not df.should_stop():
        got += df.next_batch(7)
    assert got == rows + [("a", 1), ("b", 2)]
    assert [type(r) for r in got[48:52]] == [tuple, tuple, list, list]  # the objects the batches held
    assert df.mgr.consumed == [4]


def test_arrays_of_passed_batches_are_those_of_the_encoded_rows():
    """next_batch_arrays over pickled batches gives what it gave when the
    producer encoded the rows: the columnar encoder's columns, writable."""
    rows = [(float(i), i, np.arange(3, dtype=np.float32) + i) for i in range(40)]
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    client = _client(fd_in)
    client.feed_pickled(iter([pickle.dumps(rows[:25], 5), pickle.dumps(rows[25:], 5)]), 1)
    client.input.end_feed(10000)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    x, n, v = df.next_batch_arrays(30)
    assert x.dtype == np.float64 and n.dtype == np.int64 and v.shape == (30, 3) and v.dtype == np.float32
    assert np.array_equal(n, np.arange(30)) and np.array_equal(v[:, 0], np.arange(30, dtype=np.float32))
    v[0, 0] = -1.0  # writable, as the encoded path's copies
    x, n, v = df.next_batch_arrays(30)
    assert np.array_equal(n, np.arange(30, 40))


def _feed_batches(fd, batches, key, die_after=None, skip=0):
    """In a child: feed_pickled the batches as partition 9 under key; SIGKILL
    after `die_after` batches."""
    client = _client(fd)

    def gen():
        for i, b in enumerate(batches):
            if die_after is not None and i == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
            yield b

    client.feed_pickled(gen(), 9, key=key, skip=skip)
    client.input.end_feed(10000)
    client.input.close()


def test_a_refeed_of_passed_batches_resumes_at_the_row_the_ring_counted():
    """The ring counts the rows of a passed batch as pickled_list_len read
    them: a producer killed after 2 of 4 batches, then the re-feed under the
    same key, give the program every row once; ``skip`` leaves out a
    checkpoint's first rows."""
    ids = list(range(100, 140))
    batches = [pickle.dumps([(x,) for x in ids[i:i + 10]], 5) for i in range(0, 40, 10)]
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)
    p = start_child(_feed_batches, fd_in, batches, 5, 2)
    assert join_child(p) == -signal.SIGKILL
    got = [r[0] for r in df.next_batch(13)]
    p = start_child(_feed_batches, fd_in, batches, 5)
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(6)]
    assert join_child(p) == 0
    assert got == ids
    assert mgr.input.stats()["resumed"] == 1 and mgr.input.stats()["last_aborted_rows"] == 20

    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    p = start_child(_feed_batches, fd_in, batches, 1, None, 13)
    got = []
    while not df.should_stop():
        got += [r[0] for r in df.next_batch(100)]
    assert join_child(p) == 0
    assert got == ids[13:]


def test_a_node_reading_columns_gets_its_batches_encoded_by_the_producer():
    """The consumer's reads_columns hint (set by next_batch_arrays, cleared
    by next_batch): while it is on, feed_pickled encodes the rows (what the
    node reads as numpy columns), else it passes the batches on."""
    rows = [(float(i), i) for i in range(30)]
    fd = t.ring_create(1 << 20)
    reader = t.Ring(fd, t.ROLE_CONSUMER)
    client = _client(fd)
    assert reader.reads_columns() is False and client.input.reads_columns() is False
    assert reader.reads_columns(True) is True and client.input.reads_columns() is True
    client.feed_pickled(iter([pickle.dumps(rows, 5)]), 2)
    reader.reads_columns(False)
    client.feed_pickled(iter([pickle.dumps(rows, 5)]), 3)
    tags = [tag for tag, _, _ in reader.read(1000, 64) if tag >= t.TAG_USER]
    assert tags == [feed.TAG_COLUMNS, feed.TAG_PICKLE]
    reader.close()

    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    client = _client(fd_in)
    client.feed_pickled(iter([pickle.dumps(rows, 5)] * 3), 1)
    client.input.end_feed(10000)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=20)
    df.next_batch_arrays(5)
    assert df.mgr.input.reads_columns() is True
    df.next_batch(5)
    assert df.mgr.input.reads_columns() is False


def _columns(batch):
    flags, names, cols = feed._decode_columns(bytes(batch))
    return flags, names, [(c.dtype.str, c.tolist()) for c in cols]


def test_rows_of_numbers_go_from_the_pickle_to_the_encoders_columns_with_no_python_object():
    """pickled_columns gives, for tuples of floats, ints and bools, the
    columns encode_rows makes of the unpickled rows: 1-3 fields (TUPLE1-3)
    and more, one row and thousands (APPENDS runs), ints to the ends of
    int64, protocols 2-5."""
    big = 2 ** 63 - 1
    cases = [
        [(float(i), i, i % 2 == 0) for i in range(2500)],
        [(i * 0.5,) for i in range(7)],
        [(-i, big, -big - 1, 2 ** 31, -2 ** 31 - 1, 255, 256, 65536, 0.25) for i in range(30)],
        [(1.5, 2.5)],
        [tuple(float(j) for j in range(40)) for _ in range(3)],
    ]
    for rows in cases:
        want = _columns(t.encode_rows(rows))
        for proto in (2, 3, 4, 5):
            got = t.pickled_columns(pickle.dumps(rows, proto))
            assert got is not None, (proto, rows[:1])
            assert got[0] == len(rows) and _columns(got[1]) == want


def test_what_the_encoder_would_not_take_alike_or_is_not_plain_numbers_is_none():
    """None (the caller unpickles and encodes): strings, nested tuples,
    lists as rows, types that change from row to row (an int where row 0
    had a float, a bool where it had an int), ints beyond int64, numpy
    scalars, rows of another length, the same tuple object twice (a memo
    reference), an empty list, a truncated stream."""
    same = (1.0, 2.0)
    for rows in ([(1.0, "a")], [((1.0, 2.0), 3.0)], [[1.0, 2.0], [3.0, 4.0]], [(1.0,), (2,)], [(1,), (True,)],
                 [(2 ** 63,)], [(np.float64(1.0),)], [(1.0, 2.0), (3.0,)], [same, same], [], [1.0, 2.0]):
        assert t.pickled_columns(pickle.dumps(rows, 5)) is None, rows
    data = pickle.dumps([(1.0, 2)] * 1 + [(3.0, 4)], 5)
    assert t.pickled_columns(data) is not None
    for cut in range(len(data)):
        assert t.pickled_columns(data[:cut]) is None
    # a call that gave None leaves nothing behind for the next one
    assert _columns(t.pickled_columns(data)[1]) == _columns(t.encode_rows([(1.0, 2), (3.0, 4)]))


def _as_columns(b):
    got = t.pickled_columns(b)
    return None if got is None else (
        lambda rows: got[0] == len(rows) and _columns(got[1]) == _columns(t.encode_rows(rows)))


def test_mutated_number_batches_give_the_encoders_columns_or_none():
    """Where pickled_columns gives columns for a mutated batch, unpickling
    the same bytes gives rows whose encoding is those columns."""
    base = [pickle.dumps([(float(i), i, i % 3 == 0) for i in range(k)], p) for p in (2, 4, 5) for k in (1, 4, 30)]
    taken, wrong = _run_fuzz(_as_columns, base, 5)
    assert wrong == 0 and taken > 100
