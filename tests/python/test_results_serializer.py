"""ResultsSerializer (tfos/_spark/results.py): an inference RDD's results
through the stream format Spark's workers write and the driver reads, as
TensorFlowOnSpark gives them (numpy scalars, 1-D arrays), with runs of numpy
values sent as one array. Spark's own use of it: tests/spark/test_tfcluster.py."""
import io
import struct

import numpy as np

from tfos._spark.results import ResultsSerializer, pack


def round_trip(items, batch=None):
    ser = ResultsSerializer()
    if batch:
        ser.BATCH = batch
    buf = io.BytesIO()
    ser.dump_stream(iter(items), buf)
    buf.write(b"\xff\xff\xff\xfc")  # SpecialLengths.END_OF_DATA_SECTION, as Spark ends a stream
    buf.seek(0)
    return list(ser.load_stream(buf))


def test_numpy_scalars_go_as_one_array_and_come_back_as_scalars_of_their_dtype():
    for arr in (np.arange(10000, dtype=np.int64), np.linspace(0, 1, 5000, dtype=np.float32),
                np.arange(300, dtype=np.uint8), np.array([True, False] * 50)):
        items = list(arr)  # what batch_results(array) gives Spark: the array's items
        assert pack(items)[0] == "a"
        got = round_trip(items, batch=4096)
        assert len(got) == len(items)
        assert all(type(v) is type(items[0]) for v in got), {type(v) for v in got}
        assert np.array_equal(np.array(got), arr)


def test_rows_of_a_2d_array_come_back_as_writable_1d_arrays():
    arr = np.arange(3000 * 3, dtype=np.float64).reshape(3000, 3)
    items = list(arr)
    assert pack(items)[0] == "s"
    got = round_trip(items, batch=1000)
    assert all(isinstance(r, np.ndarray) and r.shape == (3,) and r.dtype == np.float64 for r in got)
    assert np.array_equal(np.stack(got), arr)
    got[0][0] = -1.0  # each row is writable and its own
    assert got[0][0] == -1.0 and got[1][0] == 3.0


def test_frames_grow_to_a_mebibyte_and_large_rows_go_a_few_at_a_time():
    def frames(items):
        buf = io.BytesIO()
        ResultsSerializer().dump_stream(iter(items), buf)
        data, pos, sizes = buf.getvalue(), 0, []
        while pos < len(data):
            (n,) = struct.unpack(">i", data[pos:pos + 4])
            sizes.append(n)
            pos += 4 + n
        return sizes

    small = frames(list(np.arange(100000)))       # 8-byte scalars: 16, then as many as BATCH
    assert len(small) <= 8 and max(small) < (1 << 20), small
    big = frames(list(np.zeros((600, 8192))))     # 64 KiB rows: 16 a frame, about 1 MiB
    assert len(big) >= 600 // 17 and max(big) <= 16 * 65536 + 4096, big
    assert len(round_trip(list(np.zeros((600, 8192))))) == 600


def test_anything_else_goes_pickled_as_it_is():
    mixed = [np.int64(1), 2, np.float64(3.5)]
    ragged = [np.zeros(2), np.zeros(3)]
    texts = [np.str_("a"), np.str_("b")]
    objects = [{"id": 1}, (2, "x"), None, 4.5, "s", [1, 2]]
    for items in (mixed, ragged, texts, objects, [np.complex128(1j)]):
        assert pack(items)[0] == "p", items
        got = round_trip(items)
        assert [type(v) for v in got] == [type(v) for v in items]
        assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(got, items))
    assert round_trip([]) == []
