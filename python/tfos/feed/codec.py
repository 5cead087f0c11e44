"""The feed's codec: batches of rows or columns <-> the bytes of one ring
record, and Arrow columns -> numpy.

A record's tag says how its payload is encoded (TAG_COLUMNS: tfos's columnar
batch, encoded and checked in C; TAG_PICKLE: a pickled list of rows, for rows
the columnar batch cannot hold; TAG_ARROW: an Arrow IPC stream of one record
batch). Producers encode here (:func:`encode_rows`, :func:`write_rows`,
:func:`arrow_ipc`); the consumer decodes a record into a :class:`_Chunk` of
rows or numpy columns (:func:`_decode`). :func:`arrow_to_numpy` is tfos's one
conversion of Arrow columns (lists of numbers included) to numpy arrays.
"""
import gc
import pickle
import sys

from .. import _tfos

TAG_PICKLE = _tfos.TAG_USER + 0
TAG_COLUMNS = _tfos.TAG_USER + 1
TAG_ARROW = _tfos.TAG_USER + 2
TAG_RESULTS = _tfos.TAG_USER + 3

FeedError = _tfos.FeedError


def _np():
    import numpy
    return numpy


def encode_rows(rows):
    """(tag, payload) for a list of rows: the columnar batch when every row is
    made of numbers/str/bytes/fixed-shape arrays of one layout, else pickle."""
    try:
        return TAG_COLUMNS, _tfos.encode_rows(rows)
    except (TypeError, ValueError, OverflowError):
        return TAG_PICKLE, pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL)


def arrow_ipc(record_batch):
    """One Arrow record batch as an Arrow IPC stream (a TAG_ARROW payload)."""
    import pyarrow as pa
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, record_batch.schema) as w:
        w.write_batch(record_batch)
    return sink.getvalue()


def unpickle(data, **kwargs):
    """pickle.loads with Python's cyclic garbage collector paused: a batch's
    thousands of new tuples and lists start a collection every 700, each
    going over the rows made so far (and now and then the whole heap),
    which cost 30 % of unpickling rows of a few numbers (issue 40). At most
    one collection of the young objects follows, when the next container is
    made while the rows are still held (the rows of an earlier batch freed
    first count against it). The collector is turned on again unless it
    was off (a program that turns it off in another thread while a record
    is unpickled finds it on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(data, **kwargs)
    finally:
        if was:
            gc.enable()


def unpickle_rows(data):
    """A pickled batch of rows as a list, read as PySpark's PickleSerializer
    reads an RDD's batches (encoding "bytes"; a batch of another sequence
    gives its items), with the collector paused (:func:`unpickle`)."""
    rows = unpickle(data, encoding="bytes")
    return rows if isinstance(rows, list) else list(rows)


def write_rows(ring, rows, timeout_ms):
    """Write one batch of rows as one record: columnar straight into the ring
    when the rows allow it, else pickled."""
    try:
        ring.write_rows(TAG_COLUMNS, rows, timeout_ms)
    except (TypeError, OverflowError):
        ring.write(TAG_PICKLE, pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL), timeout_ms, len(rows))
    except ValueError as exc:
        # the extension marks "larger than the ring's largest record" with
        # its code; any other ValueError is rows of no one columnar layout
        if getattr(exc, "code", None) != _tfos.ETOOBIG:
            ring.write(TAG_PICKLE, pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL), timeout_ms, len(rows))
        elif len(rows) > 1:
            half = len(rows) // 2
            write_rows(ring, rows[:half], timeout_ms)
            write_rows(ring, rows[half:], timeout_ms)
        else:
            raise FeedError("one row of %d bytes does not fit the feed ring (largest record %d bytes): start the "
                            "cluster with a larger --feed-mb" % (len(encode_rows(rows)[1]), ring.max_record))


class _Chunk(object):
    """Rows of one decoded record, consumed front to back."""

    __slots__ = ("partition", "columns", "names", "_rows", "pickled", "_n", "pos", "flat", "lists", "viewed",
                 "nulls")

    def __init__(self, partition, columns=None, names=None, rows=None, flat=False, lists=False, nulls=None,
                 pickled=None):
        self.viewed = False     # columns view the ring itself (read with views): copied unless asked not to
        self.partition = partition
        self.columns = columns  # list of numpy arrays (or lists), one per column
        self.names = names
        self._rows = rows       # a list of rows (pickle records)
        self.pickled = pickled  # or: the pickled list of rows, unpickled when first asked for (rows, n)
        self.flat = flat        # rows were single values (not tuples of fields)
        self.lists = lists      # rows were lists of fields
        self.nulls = nulls      # Arrow: per column, the Arrow array where numpy shows its nulls as values (NaN)
        self._n = -1 if pickled is not None else len(rows) if rows is not None else \
            (len(columns[0]) if columns else 0)
        self.pos = 0

    @property
    def rows(self):
        """The rows of a pickle record (None for columns). Unpickled when
        first asked for (or its row count), not when read: a read of 64
        records unpickled at once held ~15 MB of new rows beyond the
        processor's cache until taken, which cost 0.57 µs a row of 11
        numbers against 0.24 unpickled one record at a time (issue 40)."""
        if self.pickled is not None:
            # a batch of an RDD passed through as Spark pickled it (FeedClient.feed_pickled)
            self._rows = unpickle_rows(self.pickled)
            self._n = len(self._rows)
            self.pickled = None
        return self._rows

    @property
    def n(self):
        """The record's rows (a pickle record's unpickles it)."""
        return self._n if self._n >= 0 else len(self.rows)

    def take_rows(self, k):
        lo, hi = self.pos, min(self.n, self.pos + k)
        self.pos = hi
        if self.rows is not None:
            return self.rows[lo:hi]
        if not self.flat and not self.nulls:
            # 1-D columns of numbers: the rows made in C, in one pass
            rows = _tfos.rows_from_columns(self.columns, lo, hi, self.lists)
            if rows is not NotImplemented:
                return rows
        cols = [c[lo:hi] for c in self.columns]
        if self.flat:
            col = cols[0]
            return col.tolist() if col.dtype != object else list(col)
        values = [c.tolist() if c.dtype != object else list(c) for c in cols]
        if self.nulls:
            _put_nulls(values, self.nulls, lo, hi)
        rows = zip(*values)
        return [list(r) for r in rows] if self.lists else list(rows)

    def take_columns(self, k, copy=True):
        lo, hi = self.pos, min(self.n, self.pos + k)
        self.pos = hi
        if self.rows is not None:
            part = self.rows[lo:hi]
            try:
                # the columns the producer's encoder makes of rows (what a
                # columnar record of the same rows gives), in C
                _, names, cols = _decode_columns(bytearray(_tfos.encode_rows(part)))
                return cols, names
            except (TypeError, ValueError, OverflowError):
                pass
            np = _np()
            if part and isinstance(part[0], (list, tuple)):
                return [np.asarray(c) for c in zip(*part)], None
            return [np.asarray(part)], None
        if self.viewed and copy:
            return [c[lo:hi].copy() for c in self.columns], self.names
        return [c[lo:hi] for c in self.columns], self.names


def _arrow_nulls(col, arr):
    """The Arrow array of column ``col`` when numpy (``arr``) shows its nulls
    as values (NaN in a float column, an integer one made float), else None:
    rows get None there (_put_nulls), as object columns (strings, arrays)
    already have it."""
    if not col.null_count or arr.dtype == object:
        return None
    import pyarrow as pa
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _put_nulls(values, nulls, lo, hi):
    """Rows lo..hi of each column in ``values`` (lists) get None at their
    nulls: numbers as Python numbers again (an int column stays int), the
    rest with the null's place set to None."""
    import pyarrow as pa
    for i, src in enumerate(nulls):
        if src is None:
            continue
        part = src.slice(lo, hi - lo)
        if not part.null_count:
            continue
        t = part.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            values[i] = part.to_pylist()
        else:
            for j, null in enumerate(part.is_null().to_pylist()):
                if null:
                    values[i][j] = None


def _is_ndarray(v):
    """Whether ``v`` is a numpy array (without importing numpy)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.ndarray)


def _decode(tag, partition, payload):
    if tag == TAG_PICKLE:
        if not isinstance(payload, memoryview):  # a copy of the record (not a view of the ring)
            return _Chunk(partition, pickled=payload)  # unpickled when first taken
        return _Chunk(partition, rows=unpickle_rows(payload))
    if tag == TAG_COLUMNS:
        flags, names, columns = _decode_columns(payload)
        return _Chunk(partition, columns=columns, names=names, flat=bool(flags & _tfos.BATCH_FLAT_ROWS),
                      lists=bool(flags & _tfos.BATCH_LIST_ROWS))
    if tag == TAG_ARROW:
        import pyarrow as pa
        table = pa.ipc.open_stream(payload).read_all()
        columns = [arrow_to_numpy(c, n) for c, n in zip(table.columns, table.column_names)]
        nulls = [_arrow_nulls(c, a) for c, a in zip(table.columns, columns)]
        return _Chunk(partition, columns=columns, names=list(table.column_names),
                      nulls=nulls if any(x is not None for x in nulls) else None)
    raise FeedError("unknown record tag %d in the feed (partition %d)" % (tag, partition))


class ColumnError(ValueError):
    """An Arrow column that :func:`arrow_to_numpy` cannot make numbers of
    (asked with ``strict``): ``column`` is its name or index, ``row`` the
    first row at fault (None when no one row is)."""

    def __init__(self, message, column=None, row=None):
        super().__init__(message)
        self.column = column
        self.row = row


def arrow_to_numpy(col, name=None, strict=False):
    """An Arrow column (Array or ChunkedArray) as numpy, the rows on axis 0,
    with no per-row Python objects where the data allows: numbers without
    nulls are a view of the column's buffer; a column of lists whose rows
    all hold one number of values (a DataFrame's ``array<double>``
    features) is a matrix ``(rows, k)`` made from the lists' values buffer,
    and a column of lists of such lists has one more axis per level.

    Anything else comes as pyarrow's ``to_numpy`` gives it (strings, nulls,
    rows of different lengths: an object array of rows) unless ``strict``,
    for consumers that take numbers only (a model's inputs): then a null row,
    a null inside the arrays, arrays of something else than numbers, or rows
    of different lengths raise :class:`ColumnError` naming the column
    (``name``: its name or index), the row and what to do. The one
    conversion of Arrow lists to matrices in tfos: the feed's Arrow records
    (not strict) and tfos serve's Spark UDF (strict) use it."""
    import pyarrow as pa
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if _is_list(arr.type):
        m = _list_matrix(arr, name, strict, 1)
        return m if m is not None else arr.to_numpy(zero_copy_only=False)
    if strict and arr.null_count:
        raise _null_rows(arr, name, 1)
    return _arrow_numpy(arr)


def _is_list(t):
    import pyarrow as pa
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _column_label(name):
    return "a column" if name is None else "column %d" % name if isinstance(name, int) else "column %r" % (name,)


def _first_null(arr):
    import pyarrow.compute as pc
    return pc.index(arr.is_null(), True).as_py()


def _null_rows(arr, name, per_row):
    """ColumnError for the nulls in ``arr`` (``per_row`` of its entries make
    one row of the column)."""
    row = _first_null(arr) // per_row
    if per_row == 1:
        return ColumnError("%s: row %d is null (null rows in this batch: %d of %d), and only numbers convert: "
                           "drop or fill the null rows first (DataFrame.dropna or fillna)"
                           % (_column_label(name), row, arr.null_count, len(arr)), name, row)
    return ColumnError("%s: the arrays hold null values (the first in row %d), and only numbers convert: fill "
                       "them first (e.g. F.transform(col, lambda v: F.coalesce(v, F.lit(0))))"
                       % (_column_label(name), row), name, row)


def _list_matrix(arr, name, strict, per_row):
    """The lists of ``arr`` as one array with an axis more, or None (not
    strict) where they do not make one. ``per_row``: how many entries of
    ``arr`` make one row of the column (1 at the top; errors name rows)."""
    import pyarrow as pa
    np = _np()
    n, t = len(arr), arr.type
    if arr.null_count:
        if strict:
            raise _null_rows(arr, name, per_row)
        return None
    if n == 0:
        return None
    if pa.types.is_fixed_size_list(t):
        k = t.list_size
    else:
        lens = np.diff(_arrow_numpy(arr.offsets))
        k = int(lens[0])
        if (lens != k).any():
            if not strict:
                return None
            bad = int(np.argmax(lens != k))
            raise ColumnError("%s: rows hold arrays of different lengths (%d in the batch's first row, %d in its "
                              "row %d): give every row the same length first (pad or cut the arrays)"
                              % (_column_label(name), k, int(lens[bad]), bad // per_row), name, bad // per_row)
    values = arr.flatten()  # the values of these rows only (flatten follows a slice's offset)
    if values.null_count:
        if strict:
            raise _null_rows(values, name, per_row * k)
        return None
    vt = values.type
    if _is_list(vt):
        inner = _list_matrix(values, name, strict, per_row * k)
        return None if inner is None else inner.reshape((n, k) + inner.shape[1:])
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt)):
        if strict:
            raise ColumnError("%s holds arrays of %s, not of numbers: cast the column first (e.g. "
                              "F.col(c).cast('array<double>'))" % (_column_label(name), vt), name)
        return None
    return _arrow_numpy(values).reshape(n, k)


def _arrow_numpy(arr):
    """An Arrow array as numpy: one of numbers without nulls is a view of its
    data buffer (pyarrow's own to_numpy imports pandas, which costs a
    program ~0.2 s of CPU at its first batch); anything else by to_numpy.
    The numpy dtype is the Arrow type's own (``to_pandas_dtype``, which
    imports nothing for numbers): no table of ours."""
    import pyarrow as pa
    t = arr.type
    if arr.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return arr.to_numpy(zero_copy_only=False)
    np = _np()
    dt = np.dtype(t.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dt, count=len(arr), offset=arr.offset * dt.itemsize)


def _decode_columns(payload):
    """Columnar batch -> (flags, names, numpy arrays), viewing ``payload``."""
    np = _np()
    names, columns = [], []
    flags, cols = _tfos.decode_columns(payload)
    for col in cols:
        name, kind, dtype, shape, nrows, data_off, data_len, offsets_off = col
        names.append(name)
        if kind == "fixed":
            arr = np.frombuffer(payload, dtype=np.dtype(dtype), count=nrows * _prod(shape), offset=data_off)
            columns.append(arr.reshape((nrows,) + tuple(shape)))
        else:
            offs = np.frombuffer(payload, dtype="<u8", count=nrows + 1, offset=offsets_off).tolist()
            raw = memoryview(payload)[data_off:data_off + data_len]
            vals = [bytes(raw[offs[i]:offs[i + 1]]) for i in range(nrows)]
            if kind == "str":
                try:
                    vals = [v.decode("utf-8") for v in vals]
                except UnicodeDecodeError as exc:
                    raise FeedError("corrupt columnar batch in the feed: column %r is not UTF-8 (%s)" % (name, exc))
            arr = np.empty(nrows, dtype=object)
            arr[:] = vals
            columns.append(arr)
    return flags, names, columns


def _prod(shape):
    p = 1
    for d in shape:
        p *= d
    return p
