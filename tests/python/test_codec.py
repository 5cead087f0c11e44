"""The columnar batch from Python: which rows encode natively, round trips
through the ring, clear errors for rows that change type, and a decoder that
rejects corrupt batches instead of crashing."""
import random

import numpy as np
import pytest

import tfos._tfos as t
from tfos import feed


def roundtrip(rows, batch=None):
    fd_in, fd_out = t.ring_create(1 << 22), t.ring_create(1 << 16)
    prod = t.Ring(fd_in, t.ROLE_PRODUCER)
    feed.write_rows(prod, rows, 1000)
    prod.end_feed(1000)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=5)
    return df.next_batch(batch or len(rows) + 1)


@pytest.mark.parametrize("rows", [
    [[7], [8], [9]],                                            # TFoS's [x] rows: one flat int64 array
    [(1, 2.5, "a", b"x", True), (2, -1.0, "bé", b"", False)],   # tuples: one column per field
    [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],                         # a list of floats: one (n, 3) array
    [list(range(784)), list(range(1, 785))],                    # MNIST-like rows
    [5, 6, 7],                                                  # bare scalars
    ["only", "strings"],
    [[3, [0.5, 1.5]], [4, [2.5, 3.5]]],                        # TFoS's [label, [features]] rows: lists back
    [[list(range(784))], [list(range(1, 785))]],                # [pixels] rows
])
def test_native_rows_round_trip_exactly(rows):
    tag, _ = feed.encode_rows(rows)
    assert tag == feed.TAG_COLUMNS
    assert roundtrip(rows) == rows


def test_numpy_rows_keep_dtype_and_shape():
    rows = [(np.full((2, 3), i, dtype=np.float32), np.int16(i)) for i in range(4)]
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 16)
    prod = t.Ring(fd_in, t.ROLE_PRODUCER)
    feed.write_rows(prod, rows, 1000)
    prod.end_feed(1000)
    x, y = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=5).next_batch_arrays(10)
    assert x.dtype == np.float32 and x.shape == (4, 2, 3) and y.dtype == np.int16
    assert x[3, 1, 2] == 3 and list(y) == [0, 1, 2, 3]


def test_rows_that_change_type_name_the_row():
    with pytest.raises(ValueError, match=r"row 2, field 1: a str where row 0 has a float"):
        t.encode_rows([(1, 1.0), (2, 2.0), (3, "three")])
    with pytest.raises(ValueError, match=r"row 1 has 3 fields, row 0 has 2"):
        t.encode_rows([(1, 1.0), (2, 2.0, 3)])
    with pytest.raises(ValueError, match=r"row 1 is a list where row 0 is a tuple"):
        t.encode_rows([(1, 1.0), [2, "x"]])
    with pytest.raises(TypeError, match=r"row 0, field 0: a dict has no columnar encoding"):
        t.encode_rows([({},)])
    with pytest.raises(OverflowError, match=r"row 1: an int outside the int64 range"):
        t.encode_rows([(1,), (1 << 70,)])
    # ...and the feed still carries them, pickled, unchanged
    odd = [(1, 1.0), (2, "two"), (1 << 70, None)]
    assert feed.encode_rows(odd)[0] == feed.TAG_PICKLE
    assert roundtrip(odd) == odd


def test_columns_fast_path():
    xs = np.random.default_rng(0).random((1000, 28, 28), dtype=np.float32)
    ys = np.arange(1000, dtype=np.int64)
    payload = t.encode_columns([("x", xs), ("y", ys)])
    flags, cols = t.decode_columns(payload)
    assert flags == 0 and [c[0] for c in cols] == ["x", "y"]
    assert cols[0][1:5] == ("fixed", "<f4", (28, 28), 1000)
    with pytest.raises(ValueError, match=r"column 1 \('y'\) has 999 rows, column 0 has 1000"):
        t.encode_columns([("x", xs), ("y", ys[:999])])
    with pytest.raises(TypeError):
        t.encode_columns([("x", np.array(["a"], dtype=object))])


def test_decoder_rejects_corrupt_batches():
    good = t.encode_rows([(i, float(i), "s%d" % i) for i in range(20)])
    rnd = random.Random(1)
    rejected = 0
    for _ in range(3000):
        b = bytearray(good)
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(0, 32 + 3 * 80)] = rnd.randrange(256)
        if rnd.random() < 0.2:
            b = b[:rnd.randrange(len(b))]
        try:
            t.decode_columns(bytes(b))
        except t.FeedError as e:
            assert "corrupt columnar batch" in str(e)
            rejected += 1
    assert rejected > 1000
