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


# ---- Arrow columns -> numpy (feed.arrow_to_numpy: the one conversion) -------

def test_arrow_columns_become_numbers_and_matrices():
    pa = pytest.importorskip("pyarrow")
    a2n = feed.arrow_to_numpy
    x = a2n(pa.array([1.5, 2.5]))
    assert x.dtype == np.float64 and list(x) == [1.5, 2.5]
    m = a2n(pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).slice(1))   # a slice: its own rows only
    assert m.shape == (2, 2) and m.tolist() == [[3.0, 4.0], [5.0, 6.0]]
    f = a2n(pa.array([[1, 2], [3, 4]], type=pa.list_(pa.int32(), 2)))  # fixed-size lists
    assert f.dtype == np.int32 and f.shape == (2, 2)
    big = a2n(pa.array([[1, 2], [3, 4]], type=pa.large_list(pa.uint8())))
    assert big.dtype == np.uint8 and big.shape == (2, 2)
    nested = a2n(pa.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]))  # one more axis per level
    assert nested.shape == (2, 2, 2) and nested[1, 0, 1] == 6.0
    chunked = a2n(pa.chunked_array([pa.array([[1.0], [2.0]]), pa.array([[3.0]])]))
    assert chunked.shape == (3, 1)
    flags = a2n(pa.array([[True, False], [False, True]]))
    assert flags.dtype == np.bool_ and flags.tolist() == [[True, False], [False, True]]
    # not strict (the feed): what makes no matrix comes as pyarrow's rows
    ragged = a2n(pa.array([[1.0, 2.0], [3.0]]))
    assert ragged.dtype == object and [list(r) for r in ragged] == [[1.0, 2.0], [3.0]]
    assert a2n(pa.array([[1.0], None])).dtype == object
    assert a2n(pa.array([["a"], ["b"]])).dtype == object
    assert a2n(pa.array(["a", None])).tolist() == ["a", None]


@pytest.mark.parametrize("column, row, text", [
    ([[1.0, 2.0], None, [3.0, 4.0]], 1, r"column 'x': row 1 is null \(null rows in this batch: 1 of 3\).*dropna"),
    ([1.0, 2.0, None], 2, r"column 'x': row 2 is null .*drop or fill the null rows"),
    ([[1.0, 2.0], [3.0, 4.0], [5.0]], 2,
     r"column 'x': rows hold arrays of different lengths \(2 in the batch's first row, 1 in its row 2\): give every "
     r"row the same length"),
    ([[1.0, 2.0], [3.0, None]], 1, r"column 'x': the arrays hold null values \(the first in row 1\).*fill them"),
    ([[[1, 2]], [[3, 4]], [[5]]], 2, r"column 'x': rows hold arrays of different lengths .* in its row 2\)"),
    ([["a"], ["b"]], None, r"column 'x' holds arrays of string, not of numbers: cast the column"),
])
def test_arrow_strict_errors_name_the_column_the_row_and_the_fix(column, row, text):
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(feed.ColumnError, match=text) as e:
        feed.arrow_to_numpy(pa.array(column), "x", strict=True)
    assert isinstance(e.value, ValueError) and e.value.column == "x" and e.value.row == row
    with pytest.raises(feed.ColumnError, match=r"^column 3[: ]"):  # an index names the column too
        feed.arrow_to_numpy(pa.array(column), 3, strict=True)


def test_arrow_records_decode_without_pandas(tmp_path):
    """The feed's Arrow records view the record's buffers: numbers of every
    Arrow width, half floats included, come out with no pandas import
    (pyarrow's to_numpy imports it: ~0.2 s of a program's CPU)."""
    pa = pytest.importorskip("pyarrow")
    rb = pa.RecordBatch.from_arrays(
        [pa.array(np.arange(4, dtype=np.float16)), pa.array(np.arange(4, dtype=np.uint32)),
         pa.array([[1.0, 2.0]] * 4, type=pa.list_(pa.float32()))], names=["h", "u", "v"])
    (tmp_path / "rb.arrow").write_bytes(feed.arrow_ipc(rb).to_pybytes())
    code = ("import sys\nfrom tfos.feed import codec\n"
            "chunk = codec._decode(codec.TAG_ARROW, 1, open(sys.argv[1], 'rb').read())\n"
            "print([str(c.dtype) for c in chunk.columns], [c.shape for c in chunk.columns], chunk.names,\n"
            "      'pandas' in sys.modules)\n")
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "rb.arrow")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[0] == "['float16', 'uint32', 'float32'] [(4,), (4,), (4, 2)] ['h', 'u', 'v'] False"


def test_every_dtype_of_the_one_table_encodes_as_itself():
    """The encoder finds a buffer's dtype code in core/batch.c's table
    (_tfos.DTYPES) by kind and size: every dtype there round-trips, in
    columns and in rows of numpy scalars; one the table lacks is refused."""
    assert len(t.DTYPES) == 11
    for code, np_name, oip, size in t.DTYPES:
        col = np.arange(6).reshape(3, 2).astype(np_name)
        _, cols = t.decode_columns(t.encode_columns([("a", col)]))
        assert cols[0][1:4] == ("fixed", np_name, (2,)), (np_name, cols[0])
        assert np.dtype(np_name).itemsize == size
        rows = [(np.dtype(np_name).type(1),), (np.dtype(np_name).type(0),)]
        _, cols = t.decode_columns(t.encode_rows(rows))
        assert cols[0][2] == np_name, (np_name, cols[0])
    for same in (np.longlong, np.int64, np.intc, np.uintc, np.ulonglong, np.double):  # C names of one size
        _, cols = t.decode_columns(t.encode_columns([("a", np.zeros(2, dtype=same))]))
        assert np.dtype(cols[0][2]) == np.dtype(same)
    with pytest.raises(TypeError, match=r"column 0 \('h'\): dtype 'e'"):
        t.encode_columns([("h", np.zeros(2, dtype=np.float16))])
    assert feed.encode_rows([(np.float16(1),)])[0] == feed.TAG_PICKLE


def test_too_big_is_a_code_and_write_rows_splits_on_it():
    """A batch larger than the ring's largest record: Ring.write_rows raises
    ValueError (as it always did) with .code == _tfos.ETOOBIG, the one thing
    feed.write_rows decides on: it halves the batch until each record fits,
    and a single row that cannot fit is a FeedError asking for --feed-mb."""
    fd_in, fd_out = t.ring_create(1 << 16), t.ring_create(1 << 16)
    prod = t.Ring(fd_in, t.ROLE_PRODUCER)
    rows = [(i, "r" * 200) for i in range(200)]           # ~43 KB: more than a record (32 KiB), less than the ring
    with pytest.raises(ValueError, match=r"larger than the ring's largest record .*send fewer rows") as e:
        prod.write_rows(feed.TAG_COLUMNS, rows, 1000)
    assert e.value.code == t.ETOOBIG and e.value.reason == t.strerror(t.ETOOBIG)
    with pytest.raises(ValueError) as e:                 # rows of no one layout: no code (pickled by write_rows)
        prod.write_rows(feed.TAG_COLUMNS, [(1, 1.0), (2, "x")], 1000)
    assert getattr(e.value, "code", None) is None
    with pytest.raises(feed.FeedError, match=r"one row of \d+ bytes does not fit the feed ring \(largest record "
                                             r"\d+ bytes\): start the cluster with a larger --feed-mb"):
        feed.write_rows(prod, [("x" * (1 << 16),)], 1000)
    feed.write_rows(prod, rows, 1000)                    # split in halves until each fits
    prod.end_feed(1000)
    df = feed.DataFeed(feed.FeedManager(fd_in, fd_out), True, timeout=5)
    assert df.next_batch(1000) == rows and df.should_stop()


def _reference_rows(cols, lo, hi, lists=False):
    rows = zip(*(c[lo:hi].tolist() for c in cols))
    return [list(r) for r in rows] if lists else list(rows)


@pytest.mark.parametrize("dtype", ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"])
def test_rows_from_columns_are_what_tolist_and_zip_give(dtype):
    """take_rows builds a fed RDD's rows in C; they equal numpy's
    tolist + zip, value and Python type, for every numeric dtype, strided
    views included."""
    rng = np.random.default_rng(7)
    if dtype == "?":
        a = rng.integers(0, 2, 50).astype(bool)
    elif dtype[0] == "f":
        a = (rng.standard_normal(50) * 1e3).astype(dtype)
        a[3] = np.nan
        a[4] = np.inf
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
        a[0], a[1] = info.min, info.max
    other = np.arange(100, dtype=np.int64)[::2]  # a strided view
    for lo, hi in [(0, 50), (7, 19), (50, 50)]:
        for lists in (False, True):
            got = t.rows_from_columns([a, other], lo, hi, lists)
            want = _reference_rows([a, other], lo, hi, lists)
            assert repr(got) == repr(want)  # nan == nan, and the types (bool, int, float)
            assert [type(v) for r in got for v in r] == [type(v) for r in want for v in r]


def test_rows_from_columns_leaves_what_it_cannot_read_to_python():
    ints = np.arange(4)
    assert t.rows_from_columns([ints, np.array(["a", "b", "c", "d"], dtype=object)], 0, 4) is NotImplemented
    assert t.rows_from_columns([ints, np.zeros((4, 2))], 0, 4) is NotImplemented      # 2-D
    assert t.rows_from_columns([ints, np.arange(3)], 0, 3) is NotImplemented          # lengths differ
    assert t.rows_from_columns([ints, np.zeros(4, dtype=np.float16)], 0, 4) is NotImplemented
    assert t.rows_from_columns([ints, [1, 2, 3, 4]], 0, 4) is NotImplemented         # a list
    assert t.rows_from_columns([], 0, 0) is NotImplemented
    import gc
    assert gc.isenabled() and t.rows_from_columns([ints], 0, 4) == [(0,), (1,), (2,), (3,)] and gc.isenabled()
    gc.disable()  # paused while it makes rows, and left as it was
    try:
        t.rows_from_columns([ints], 0, 4)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(IndexError, match="rows 2..9 of columns of 4"):
        t.rows_from_columns([ints], 2, 9)


def test_numeric_rows_round_trip_with_their_types():
    rows = [(i, i * 0.5, i % 2 == 0) for i in range(1000)]
    got = roundtrip(rows, batch=333)
    assert got == rows[:333]
    assert [type(v) for v in got[1]] == [int, float, bool]
    lists = [[i, float(i)] for i in range(10)]
    assert roundtrip(lists) == lists


def test_rows_unpickle_with_the_collector_paused():
    """A pickle record's 20,000 rows of (int, float, list) are unpickled with
    no collection (pickle.loads of the same bytes makes some: the check can
    fail), and the collector is left as it was: on, or off."""
    import gc
    import pickle
    from tfos.feed.codec import unpickle_rows
    rows = [(i, i / 2, [float(i)] * 4) for i in range(20000)]
    data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
    started = []

    def count(phase, info):
        if phase == "start":
            started.append(info["generation"])

    was = gc.isenabled()
    gc.callbacks.append(count)
    try:
        gc.enable()
        gc.collect()
        started.clear()
        pickle.loads(data)
        assert started, "pickle.loads of 40,000 containers started no collection: the test shows nothing"
        started.clear()
        got = unpickle_rows(data)
        during = len(started)  # allocates nothing the collector tracks (a collection may follow)
        assert during == 0 and gc.isenabled()
        assert got == rows
        gc.disable()
        assert unpickle_rows(data) == rows and not gc.isenabled()
    finally:
        gc.callbacks.remove(count)
        if was:
            gc.enable()
