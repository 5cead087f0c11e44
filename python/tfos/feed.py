"""The data feed: batches of rows from producers into the trainers, through
each node's shared-memory rings (tfos._tfos.Ring, C).

A node owns two rings: *input* (producers -> the program) and *output* (the
program's inference results -> the producer). The program inherits both
(``TFOS_FEED_FDS``); producers on the same machine get them from the node
agent's feed socket (:class:`FeedClient`).

Records on the input ring carry *batches* of rows, never one row per record:

- ``TAG_COLUMNS``: tfos's columnar batch (encoded in C, decoded to numpy
  arrays with no per-row work), for rows of numbers, strings, bytes and
  fixed-shape arrays;
- ``TAG_PICKLE``: a pickled list of rows, for anything else (local only: the
  ring never leaves the machine and only processes of the same user holding
  the cluster secret can attach);
- ``TAG_ARROW``: an Arrow IPC stream of one record batch (pyarrow).

Partitions are framed by PARTITION_BEGIN/END records; a partition whose
producer died midway is followed by PARTITION_ABORT and counts as not
delivered (the producer side re-feeds it: at-least-once).
"""
import collections
import contextlib
import itertools
import os
import pickle
import queue
import signal
import sys
import threading
import time

from . import _tfos

TAG_PICKLE = _tfos.TAG_USER + 0
TAG_COLUMNS = _tfos.TAG_USER + 1
TAG_ARROW = _tfos.TAG_USER + 2
TAG_RESULTS = _tfos.TAG_USER + 3

FeedError = _tfos.FeedError
FeedClosed = _tfos.FeedClosed
FeedEnded = _tfos.FeedEnded


class ResultsMissing(FeedError):
    """``FeedClient.collect_results``: the node read the whole partition and
    sent no (more) results for ``results_timeout`` seconds. The node is
    alive: its program does not answer."""


__all__ = ["FeedManager", "FeedClient", "FeedError", "FeedClosed", "FeedEnded", "ResultsMissing", "get_manager",
           "hold_stop"]


def _np():
    import numpy
    return numpy


# ---- encoding -----------------------------------------------------------

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


def write_rows(ring, rows, timeout_ms):
    """Write one batch of rows as one record: columnar straight into the ring
    when the rows allow it, else pickled."""
    try:
        ring.write_rows(TAG_COLUMNS, rows, timeout_ms)
    except (TypeError, OverflowError):
        ring.write(TAG_PICKLE, pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL), timeout_ms, len(rows))
    except ValueError as exc:
        if "larger than the ring" in str(exc) and len(rows) > 1:
            half = len(rows) // 2
            write_rows(ring, rows[:half], timeout_ms)
            write_rows(ring, rows[half:], timeout_ms)
        elif "larger than the ring" in str(exc):
            raise FeedError("one row of %d bytes does not fit the feed ring (largest record %d bytes): start the "
                            "cluster with a larger --feed-mb" % (len(encode_rows(rows)[1]), ring.max_record))
        else:
            ring.write(TAG_PICKLE, pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL), timeout_ms, len(rows))


class _Chunk(object):
    """Rows of one decoded record, consumed front to back."""

    __slots__ = ("partition", "columns", "names", "rows", "n", "pos", "flat", "lists", "viewed")

    def __init__(self, partition, columns=None, names=None, rows=None, flat=False, lists=False):
        self.viewed = False     # columns view the ring itself (read with views): copied unless asked not to
        self.partition = partition
        self.columns = columns  # list of numpy arrays (or lists), one per column
        self.names = names
        self.rows = rows        # a list of rows (pickle records)
        self.flat = flat        # rows were single values (not tuples of fields)
        self.lists = lists      # rows were lists of fields
        self.n = len(rows) if rows is not None else (len(columns[0]) if columns else 0)
        self.pos = 0

    def take_rows(self, k):
        lo, hi = self.pos, min(self.n, self.pos + k)
        self.pos = hi
        if self.rows is not None:
            return self.rows[lo:hi]
        cols = [c[lo:hi] for c in self.columns]
        if self.flat:
            col = cols[0]
            return col.tolist() if col.dtype != object else list(col)
        rows = zip(*[c.tolist() if c.dtype != object else list(c) for c in cols])
        return [list(r) for r in rows] if self.lists else list(rows)

    def take_columns(self, k, copy=True):
        lo, hi = self.pos, min(self.n, self.pos + k)
        self.pos = hi
        if self.rows is not None:
            np = _np()
            part = self.rows[lo:hi]
            if part and isinstance(part[0], (list, tuple)):
                return [np.asarray(c) for c in zip(*part)], None
            return [np.asarray(part)], None
        if self.viewed and copy:
            return [c[lo:hi].copy() for c in self.columns], self.names
        return [c[lo:hi] for c in self.columns], self.names


class _End(object):
    """In the chunk queue: the producer ended (or the ring aborted) partition
    ``partition`` here."""
    __slots__ = ("partition", "aborted")

    def __init__(self, partition, aborted=False):
        self.partition = partition
        self.aborted = aborted


def _is_ndarray(v):
    """Whether ``v`` is a numpy array (without importing numpy)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.ndarray)


def _scalar(v):
    item = getattr(v, "item", None)
    if item is not None and getattr(v, "ndim", 1) == 0:
        return item()
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _decode(tag, partition, payload):
    if tag == TAG_PICKLE:
        return _Chunk(partition, rows=pickle.loads(memoryview(payload)))
    if tag == TAG_COLUMNS:
        flags, names, columns = _decode_columns(payload)
        return _Chunk(partition, columns=columns, names=names, flat=bool(flags & _tfos.BATCH_FLAT_ROWS),
                      lists=bool(flags & _tfos.BATCH_LIST_ROWS))
    if tag == TAG_ARROW:
        import pyarrow as pa
        table = pa.ipc.open_stream(payload).read_all()
        return _Chunk(partition, columns=[_arrow_column(c) for c in table.columns], names=list(table.column_names))
    raise FeedError("unknown record tag %d in the feed (partition %d)" % (tag, partition))


def _arrow_column(col):
    """An Arrow column as numpy: list columns whose rows all have one length
    (a DataFrame's array<double> features) become one 2-D array."""
    import pyarrow as pa
    np = _np()
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and len(arr) \
            and arr.null_count == 0 and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)):
        if pa.types.is_fixed_size_list(t):
            width = t.list_size
        else:
            lens = np.diff(_arrow_numpy(arr.offsets))
            width = int(lens[0]) if (lens == lens[0]).all() else None
        values = arr.flatten()
        if width is not None and values.null_count == 0:
            return _arrow_numpy(values).reshape(len(arr), width)
    return _arrow_numpy(arr)


# Arrow's fixed-width number types, as numpy dtypes (native byte order, as
# Arrow IPC delivers them)
_ARROW_NUMPY = {"double": "f8", "float": "f4", "halffloat": "f2", "int64": "i8", "int32": "i4", "int16": "i2",
                "int8": "i1", "uint64": "u8", "uint32": "u4", "uint16": "u2", "uint8": "u1"}


def _arrow_numpy(arr):
    """An Arrow array as numpy: one of numbers without nulls is a view of its
    data buffer (pyarrow's own to_numpy imports pandas, which costs a
    program ~0.2 s of CPU at its first batch); anything else by to_numpy."""
    dt = _ARROW_NUMPY.get(str(arr.type))
    if dt is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    np = _np()
    dt = np.dtype(dt)
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


# ---- consumer side: the program ------------------------------------------

class FeedManager(object):
    """The program's end of its node's rings (TensorFlowOnSpark's ``ctx.mgr``).

    Built from ``TFOS_FEED_FDS`` (set by the node agent), or from explicit fds.
    The input ring is read as its one consumer; the output ring is written as
    a producer (inference results)."""

    # (how many of `consumed`, a copy of `partial`) as of the last batch
    # handed to the training loop, where a prefetch thread reads ahead of it
    # (Prefetcher); None otherwise. `consumed` only grows, so a count of it
    # is its state then.
    delivered = None

    def __init__(self, in_fd=None, out_fd=None):
        if in_fd is None:
            fds = os.environ.get("TFOS_FEED_FDS")
            if not fds:
                raise FeedError("this process has no feed: TFOS_FEED_FDS is not set (start it with `tfos run`, or "
                                "from a tfos node on Spark)")
            in_fd, out_fd = (int(x) for x in fds.split(","))
            if os.environ.get("TFOS_FEED_EMPTY") == "1":
                # set by `tfos run` without --input: the agent ended this
                # node's input ring before the program started (no feeder
                # will ever write), so readers see the end at once
                import sys
                sys.stderr.write("tfos: no --input given, so this node's feed is empty (DataFeed.should_stop() "
                                 "is True at once; set TFOS_FEED_PRODUCERS=1 for `tfos run` to feed nodes with "
                                 "FeedClient instead)\n")
                sys.stderr.flush()
        self.input = _tfos.Ring(in_fd, _tfos.ROLE_CONSUMER)
        self.output = _tfos.Ring(out_fd, _tfos.ROLE_PRODUCER)
        self.aborted = []      # partitions the producers could not deliver whole
        self.consumed = []     # partitions whose every row was handed out (in order)
        self.partial = {}      # partition -> rows handed out of it so far (not ended yet)
        self.ended = False
        self.terminated = False

    def save_position(self, checkpoint_dir=None):
        """Record which partitions this node has consumed, beside the
        checkpoint just written: call it right after saving a checkpoint (and
        on every worker). After a restart, ``tfos run --input`` and
        ``TFCluster.train`` feed only the partitions that no surviving
        checkpoint has seen: rows before the checkpoint are never fed again,
        rows after it are (exactly-once per epoch for the state that
        survives). ``checkpoint_dir``: default ``TFOS_CHECKPOINT_DIR`` (a local
        or shared filesystem path). Returns the file written. Behind a
        :class:`Prefetcher` the position is that of the last batch it handed
        out, not of the rows it has read ahead."""
        if self.delivered is not None:
            n, partial = self.delivered
            return save_position(self.consumed[:n], checkpoint_dir, partial)
        return save_position(self.consumed, checkpoint_dir, self.partial)

    @contextlib.contextmanager
    def checkpoint(self, checkpoint_dir=None):
        """Write a checkpoint inside ``with mgr.checkpoint():``; the feed
        position is saved when the block ends (not when it raises), and a stop
        (SIGTERM, SIGINT) that comes meanwhile waits until both are written
        (:func:`hold_stop`)."""
        with hold_stop():
            yield
            self.save_position(checkpoint_dir)

    def close(self):
        self.input.close()
        self.output.close()


class hold_stop(object):
    """``with hold_stop():`` defers SIGTERM and SIGINT until the block ends,
    then acts on them as it would have (the default kills the process, a
    handler runs): for writing a checkpoint and its feed position, which a
    stop must not split. tfos stops the survivors of a failed node with
    SIGTERM, and SIGKILL after ``--failure-grace``.

    Blocking the signal with ``signal.pthread_sigmask`` is not enough: it
    blocks it in the calling thread only, and a process with other threads
    (numpy's BLAS, TensorFlow, PyTorch) gets the signal in one of those,
    which kills it mid-write. This swaps in a Python handler instead, which
    runs in the main thread whichever thread the signal lands on. Only the
    main thread can do that: elsewhere it raises RuntimeError."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self.signals = tuple(signals)
        self.held = []
        self._old = {}
        self._masked = set()

    def _note(self, signum, frame):
        self.held.append(signum)

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("tfos.hold_stop() must run in the main thread (Python handles signals there); "
                               "write the checkpoint from the main thread")
        for s in self.signals:
            if signal.getsignal(s) is None:
                # a handler Python did not install cannot be put back:
                # block it in this thread, the best that can be done
                self._masked.add(s)
            else:
                self._old[s] = signal.signal(s, self._note)
        if self._masked:
            signal.pthread_sigmask(signal.SIG_BLOCK, self._masked)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        if self._masked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self._masked)
        for s in dict.fromkeys(self.held):
            signal.raise_signal(s)     # now, with the disposition it had
        return False


POSITION_DIR = _tfos.FEED_POSITION_DIR  # under the checkpoint dir (feed/position.h)


def save_position(partitions, checkpoint_dir=None, partial=None):
    """Write the feed position of this node for the current attempt,
    atomically: ``<checkpoint_dir>/tfos-feed-position/
    attempt-<A>-<job>-<index>.json`` with the partitions consumed whole and,
    for a partition being read, the rows of it handed out in this attempt.
    See :meth:`FeedManager.save_position`."""
    import json
    import time
    d = checkpoint_dir or os.environ.get("TFOS_CHECKPOINT_DIR")
    if not d:
        raise FeedError("save_position needs a checkpoint dir: this node has no TFOS_CHECKPOINT_DIR")
    if d.startswith("file://"):
        d = d[len("file://"):]
    if "://" in d:
        raise FeedError("save_position writes to a local or shared filesystem path, not %s" % d)
    d = os.path.join(d, POSITION_DIR)
    os.makedirs(d, exist_ok=True)
    attempt = int(os.environ.get("TFOS_ATTEMPT", "1"))
    node = "%s-%s" % (os.environ.get("TFOS_JOB_NAME", "node"), os.environ.get("TFOS_TASK_INDEX", "0"))
    path = os.path.join(d, "attempt-%d-%s.json" % (attempt, node))
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump({"attempt": attempt, "node": node, "time": time.time(), "partitions": sorted(set(partitions)),
                   "partial": {str(p): int(k) for p, k in (partial or {}).items() if k > 0}}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_positions(checkpoint_dir, since=0.0):
    """Where a restarted feed resumes: ``(partitions, partial)``, the
    partitions recorded whole by save_position (every node and attempt
    together) and, for partitions read only in part, how many of their first
    rows were taken (the attempts' counts add up: each attempt was fed the
    partition from where the earlier ones stopped); from files written at or
    after ``since`` (seconds since the epoch). None when there are none. The
    reader is libtfos's (feed/position.c), the one ``tfos run`` uses."""
    if not checkpoint_dir:
        return None
    return _tfos.read_positions(checkpoint_dir, float(since))


_manager = None


def get_manager():
    """The process's FeedManager (created on first use)."""
    global _manager
    if _manager is None:
        _manager = FeedManager()
    return _manager


class DataFeed(object):
    """TensorFlowOnSpark's ``TFNode.DataFeed``, on tfos's rings.

    ``next_batch(n)`` returns up to ``n`` rows as a list (or, with
    ``input_mapping``, a dict of tensor name -> list of column values) and
    blocks until ``n`` rows are there or the feed has ended; ``should_stop()``
    tells when the feed has ended; ``batch_results(results)`` sends one result
    per row of the last batch back to the producer, in order;
    ``terminate()`` stops the feed early. ``next_batch_arrays(n)`` is the fast
    path: numpy arrays by column, with no per-row Python objects.

    ``timeout`` (seconds, default None = wait as long as producers live) bounds
    every wait for data; a producer that dies is reported at once. Rows taken
    are never dropped: a batch whose wait times out after it has taken some
    rows returns them (a short batch, while ``should_stop()`` stays False);
    ``TimeoutError`` is raised only when no row came within ``timeout``. The
    same holds when the producers go away without ending the feed: the rows
    taken come back first, and the next call raises ``FeedClosed``.
    """

    def __init__(self, mgr=None, train_mode=True, qname_in="input", qname_out="output", input_mapping=None,
                 timeout=None):
        self.mgr = mgr if isinstance(mgr, FeedManager) else get_manager()
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.input_mapping = input_mapping
        self.timeout_ms = -1 if timeout is None else int(timeout * 1000)
        self._chunks = collections.deque()
        self._last_batch = []                # [(partition, rows)] of the last next_batch
        self._partition = 0                  # partition of the records being read
        self._closed = None                  # FeedClosed met after rows were taken: raised on the next wait
        self.rows_read = 0
        self._prefetcher = None              # the Prefetcher whose thread reads this feed, if any

    # -- reading
    def _fill(self, views=False):
        """Read at least one record; False at the end of the feed. ``views``:
        large records view the ring (next_batch_arrays(copy=False))."""
        if self.mgr.ended or self.mgr.terminated:
            return False
        if self._closed is not None:
            raise self._closed
        try:
            records = self._read(views)
            if records is None:  # a Prefetcher's stop
                return False
        except FeedEnded:
            self.mgr.ended = True
            return False
        except TimeoutError:
            raise TimeoutError("no data on the feed for %.1f s" % (self.timeout_ms / 1000.0))
        except FeedClosed:
            raise FeedClosed("the feed's producers went away without ending the feed (a feeding process died)")
        for tag, partition, payload in records:
            if tag == _tfos.TAG_PARTITION_BEGIN:
                self._partition = partition
            elif tag == _tfos.TAG_PARTITION_END:
                self._partition = 0
                self._chunks.append(_End(partition))
            elif tag == _tfos.TAG_PARTITION_ABORT:
                # rows of it already read stay read: the partition is fed
                # again (at-least-once)
                self.mgr.aborted.append(partition)
                self._partition = 0
                self._chunks.append(_End(partition, aborted=True))
            else:
                chunk = _decode(tag, self._partition, payload)
                chunk.viewed = tag != TAG_PICKLE and isinstance(payload, memoryview)
                if chunk.n:
                    self._chunks.append(chunk)
        return True

    def _read(self, views):
        pf = self._prefetcher
        if pf is None:
            return self.mgr.input.read(self.timeout_ms, 64, views)
        # a prefetch thread reads in slices, so that a stop asked from the
        # training thread is seen within one (the wait's bound is unchanged)
        left = self.timeout_ms
        while True:
            wait = Prefetcher.SLICE_MS if left < 0 else min(left, Prefetcher.SLICE_MS)
            try:
                return self.mgr.input.read(wait, 64)
            except TimeoutError:
                if pf.stopping.is_set():
                    return None
                if left >= 0:
                    left -= wait
                    if left <= 0:
                        raise

    def _take(self, batch_size, columns, copy=True):
        out, got = [], 0
        self._last_batch = []
        while got < batch_size:
            if not self._chunks:
                try:
                    if not self._fill(not copy):
                        break
                except TimeoutError:
                    if not got:
                        raise
                    break  # the rows taken go out as a short batch, never dropped
                except FeedClosed as exc:
                    if not got:
                        raise
                    self._closed = exc  # the rows taken go out first; the next wait raises
                    break
                continue
            chunk = self._chunks[0]
            end = isinstance(chunk, _End)
            if end or chunk.pos >= chunk.n:
                self._chunks.popleft()
                if end:
                    # every row before it was handed out: tell the producer
                    # (it counts a partition as delivered only then), and
                    # remember it for the feed position of a checkpoint
                    self.mgr.input.ack(1)
                    self.mgr.partial.pop(chunk.partition, None)
                    if not chunk.aborted:
                        self.mgr.consumed.append(chunk.partition)
                if end and got and not self.train_mode:
                    # inference: a batch never spans partitions, so the
                    # producer gets a partition's results without waiting for
                    # the next partition (TFoS's EndPartition marker does this)
                    break
                continue
            k = min(batch_size - got, chunk.n - chunk.pos)
            part = chunk.take_columns(k, copy) if columns else chunk.take_rows(k)
            out.append(part)
            got += k
            self._last_batch.append((chunk.partition, k))
            self.mgr.partial[chunk.partition] = self.mgr.partial.get(chunk.partition, 0) + k
        self.rows_read += got
        if got:
            self.mgr.input.count_taken(got)  # the status page's "rows consumed"
        return out, got

    def next_batch(self, batch_size):
        """Up to ``batch_size`` rows, as TensorFlowOnSpark returns them."""
        parts, got = self._take(batch_size, columns=False)
        rows = [r for p in parts for r in p]
        if self.input_mapping is None:
            return rows
        names = list(self.input_mapping.keys())
        result = {self.input_mapping[n]: [] for n in names}
        for r in rows:
            for i, n in enumerate(names):
                result[self.input_mapping[n]].append(r[i])
        return result

    def next_batch_arrays(self, batch_size, as_dict=False, copy=True):
        """Up to ``batch_size`` rows as numpy arrays, one per column (a tuple,
        or a dict by column name). Empty arrays at the end of the feed.

        ``copy=False``: the arrays of a batch that lies in one record of 64
        KiB or more are read-only views into the feed ring itself, with no
        copy out of it (a batch across records is still joined into new
        arrays). They are valid until the next call that reads this feed
        (``next_batch``, ``next_batch_arrays``, ``terminate``): the producer
        may then write over them. Copy what must outlive that
        (``a.copy()``). Do not use it where the arrays are kept: tf.data,
        a Prefetcher, a list of batches."""
        np = _np()
        parts, got = self._take(batch_size, columns=True, copy=copy)
        if not parts:
            return {} if as_dict else ()
        ncols = len(parts[0][0])
        cols = []
        for i in range(ncols):
            pieces = [p[0][i] for p in parts]
            cols.append(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
        names = parts[0][1] or ["c%d" % i for i in range(ncols)]
        if as_dict:
            return dict(zip(names, cols))
        return tuple(cols)

    def dataset(self, batch_size, as_dict=False, read_ahead=8):
        """A ``tf.data.Dataset`` of numpy batches of ``batch_size`` rows from
        this feed (the fast path, no per-row Python work). Its element spec
        comes from the first read, made at once; the dataset ends with the
        feed.

        ``read_ahead``: rows are taken from the ring ``read_ahead`` batches at
        a time and cut into batches inside tf.data, so the Python generator
        that tf.data calls runs once per ``read_ahead`` batches (once per
        batch cost a Keras fit about a fifth of its speed). The rows of a read
        count as handed out for :meth:`save_position` when they are read, up
        to ``read_ahead - 1`` batches before the model trains on them; pass
        ``read_ahead=1`` where a checkpoint's feed position must be exact to
        the batch (and add no prefetch after it)."""
        import tensorflow as tf
        if int(read_ahead) < 1:
            raise ValueError("dataset: read_ahead must be >= 1, not %r" % (read_ahead,))
        read = batch_size * int(read_ahead)
        first = self.next_batch_arrays(read, as_dict=as_dict)
        if not len(first):
            raise FeedEnded("the feed ended before the first batch")

        def spec(a):
            return tf.TensorSpec(shape=(None,) + a.shape[1:], dtype=tf.as_dtype(a.dtype) if a.dtype != object
                                 else tf.string)

        sig = {k: spec(v) for k, v in first.items()} if as_dict else tuple(spec(a) for a in first)

        def gen():
            batch = first
            while len(batch):
                yield batch
                batch = self.next_batch_arrays(read, as_dict=as_dict)

        ds = tf.data.Dataset.from_generator(gen, output_signature=sig)
        if read == batch_size:
            return ds

        def cut(*parts):
            element = parts[0] if as_dict else parts
            column = next(iter(element.values())) if as_dict else element[0]
            n = tf.shape(column, out_type=tf.int64)[0]
            return tf.data.Dataset.range(0, n, batch_size).map(
                lambda i: tf.nest.map_structure(lambda c: c[i:i + batch_size], element))

        return ds.flat_map(cut)

    def should_stop(self):
        """True once the feed has ended (or was terminated) and every row was read."""
        if self.mgr.terminated:
            return True
        if any(not isinstance(c, _End) and c.pos < c.n for c in self._chunks):
            return False
        return self.mgr.ended

    # -- inference
    def batch_results(self, results):
        """One result per row of the last ``next_batch`` (or
        ``next_batch_arrays``), in order: a sequence, or a numpy array whose
        first axis is the rows (``model.predict``'s output as it is). An
        array goes back whole, with no per-row work here; its rows reach
        Spark as Python values, as ``ndarray.tolist()`` gives them."""
        if not _is_ndarray(results) or results.ndim == 0:
            results = list(results)
        expected = sum(k for _, k in self._last_batch)
        if len(results) != expected:
            parts = ", ".join("partition %d: %d rows" % pk for pk in self._last_batch) or "no rows"
            raise ValueError("batch_results got %d results for a batch of %d rows (%s); inference needs exactly "
                             "one result per input row" % (len(results), expected, parts))
        pos = 0
        for partition, k in self._last_batch:
            self.mgr.output.write(TAG_RESULTS, pickle.dumps((partition, results[pos:pos + k]),
                                                            protocol=pickle.HIGHEST_PROTOCOL), self.timeout_ms)
            pos += k
        self._last_batch = []

    def save_position(self, checkpoint_dir=None):
        """Record, beside the checkpoint just written, which partitions this
        node has consumed (see :meth:`FeedManager.save_position`): after a
        restart the feed resumes where the checkpoint stands."""
        return self.mgr.save_position(checkpoint_dir)

    def checkpoint(self, checkpoint_dir=None):
        """``with feed.checkpoint(): <save the model>``: the feed position is
        saved when the block ends, and a stop waits until both are written
        (see :meth:`FeedManager.checkpoint`)."""
        return self.mgr.checkpoint(checkpoint_dir)

    def terminate(self):
        """Stop the feed early: producers writing to this node get FeedClosed
        at once (and stop), and ``should_stop()`` becomes True. Behind a
        :class:`Prefetcher`, its thread is stopped first."""
        if self._prefetcher is not None:
            self._prefetcher.stop()
        self.mgr.terminated = True
        self.mgr.input.close()


class Prefetcher(object):
    """Batches of ``feed.next_batch_arrays(batch_size)`` read by a background
    thread, ``depth`` ahead of the training loop, which takes them in order
    (iterating it, or :meth:`get`). The thread waits on the ring without the
    GIL; the training thread spends no time reading.

    The feed position of a checkpoint stays exact: each batch carries the
    position after it, and ``feed.save_position()``/``feed.checkpoint()``
    record that of the last batch handed out, not of the rows read ahead.
    While it runs, the thread is the feed's only reader: from the training
    thread call only ``feed.checkpoint()``, ``feed.save_position()`` and
    ``feed.terminate()`` (which stops the thread first). Stopping the
    iteration early keeps the batches read: the next iteration continues
    with them."""

    SLICE_MS = 200   # a stop is seen within this, while the thread waits on the ring

    def __init__(self, feed, batch_size, as_dict=False, depth=2):
        if int(depth) < 1:
            raise ValueError("Prefetcher: depth must be >= 1, not %r" % (depth,))
        if feed._prefetcher is not None:
            raise FeedError("this DataFeed is already read by a Prefetcher")
        self.feed, self.batch_size, self.as_dict = feed, int(batch_size), as_dict
        self.queue = queue.Queue(int(depth))
        self.stopping = threading.Event()
        self._done = False        # the end (or an error) was handed out
        self._error = None
        feed._prefetcher = self
        self.thread = threading.Thread(target=self._run, name="tfos-feed-prefetch", daemon=True)
        self.thread.start()

    def _put(self, item):
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=self.SLICE_MS / 1000.0)
                return True
            except queue.Full:
                pass
        return False

    def _run(self):
        mgr = self.feed.mgr
        try:
            while True:
                batch = self.feed.next_batch_arrays(self.batch_size, as_dict=self.as_dict)
                position = (len(mgr.consumed), dict(mgr.partial))
                if not len(batch):
                    self._put(("end", None, position))
                    return
                if not self._put(("batch", batch, position)):
                    return
        except BaseException as exc:  # raised in the training thread
            self._put(("error", exc, None))

    def get(self):
        """The next batch (numpy columns), or None at the end of the feed;
        an error of the reading thread is raised here."""
        if self._error is not None:
            raise self._error
        if self._done:
            return None
        kind, value, position = self._next()
        if kind == "error":
            self._error = value
            self.feed._prefetcher = None  # the thread has ended
            raise value
        self.feed.mgr.delivered = position
        if kind == "end":
            self._done = True
            self.feed._prefetcher = None
            return None
        return value

    def _next(self):
        while True:
            if self.stopping.is_set():
                raise FeedError("the feed's prefetch thread was stopped (terminate())")
            try:
                return self.queue.get(timeout=self.SLICE_MS / 1000.0)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    raise FeedError("the feed's prefetch thread ended without handing out the end of the feed")

    def __iter__(self):
        while True:
            batch = self.get()
            if batch is None:
                return
            yield batch

    def stop(self, timeout=10.0):
        """Stop the thread (within SLICE_MS of a wait on the ring); the batches
        it read and nobody took are dropped."""
        self.stopping.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise FeedError("the feed's prefetch thread did not stop within %.0f s" % timeout)
        self.feed._prefetcher = None


# ---- producer side --------------------------------------------------------

class FeedClient(object):
    """A producer feeding one node on this machine.

    ``FeedClient(executor_id)`` finds the node through its agent's feed socket
    (cluster id and secret from ``TFOS_CLUSTER_ID``/``TFOS_SECRET`` unless
    given). ``feed_partition(rows, partition_id)`` writes one whole partition;
    ``collect_results(partition_id, count)`` reads its inference results;
    ``end_feed()`` ends the node's feed for good."""

    def __init__(self, executor_id, cluster_id=None, secret=None, timeout=_tfos.DEFAULTS["connect_timeout"],
                 batch_rows=_tfos.DEFAULTS["batch_rows"]):
        cluster_id = cluster_id or os.environ.get("TFOS_CLUSTER_ID")
        secret = secret or os.environ.get("TFOS_SECRET")
        if not cluster_id or not secret:
            raise FeedError("FeedClient needs the cluster id and secret (TFOS_CLUSTER_ID, TFOS_SECRET)")
        in_fd, out_fd, self.node = _tfos.feed_connect(cluster_id, int(executor_id), secret, int(timeout * 1000))
        try:
            self.input = _tfos.Ring(in_fd, _tfos.ROLE_PRODUCER)
            self._out_fd = out_fd
            self.output = None
        finally:
            os.close(in_fd)
        self.batch_rows = batch_rows
        self.timeout_ms = int(timeout * 1000)
        self._results = collections.defaultdict(list)

    @contextlib.contextmanager
    def _partition(self, partition_id, timeout):
        """Hold the ring for one whole partition; yields the timeout in ms.
        If writing fails midway the handle is closed, and the ring marks the
        partition aborted (so it is fed again, never taken as whole)."""
        t = self.timeout_ms if timeout is None else int(timeout * 1000)
        self.input.partition_begin(partition_id, t)
        try:
            yield t
        except BaseException:
            self.input.close()
            raise
        self.input.partition_end(t)

    def feed_partition(self, rows, partition_id, timeout=None):
        """Write ``rows`` (an iterable) as partition ``partition_id``, whole.
        Returns the number of rows."""
        n = 0
        rows = iter(rows)
        with self._partition(partition_id, timeout) as t:
            while True:
                # batches are cut by islice in C: no Python bytecode per row
                batch = list(itertools.islice(rows, self.batch_rows))
                if not batch:
                    break
                write_rows(self.input, batch, t)
                n += len(batch)
        return n

    def feed_arrays(self, columns, partition_id, names=None, batch_rows=None, timeout=None):
        """Write whole numpy columns (a dict name -> array, or a sequence of
        arrays, all with the same first dimension) as one partition, in
        batches of ``batch_rows`` rows, with no per-row Python work (default:
        as many rows as fit in 2 MiB, at least one: records that go round
        the ring's part in the processor's cache, docs/FEED.md)."""
        np = _np()
        if isinstance(columns, dict):
            names, columns = list(columns.keys()), list(columns.values())
        columns = [np.ascontiguousarray(c) for c in columns]
        names = list(names) if names is not None else [""] * len(columns)
        n = len(columns[0])
        for c in columns:
            if len(c) != n:
                raise ValueError("feed_arrays: columns have different lengths (%d and %d rows)" % (n, len(c)))
        row_bytes = sum(c[:1].nbytes for c in columns) or 1
        cap = min(_tfos.DEFAULTS["record_bytes"], self.input.max_record // 2)
        step = batch_rows or max(1, min(n, cap // row_bytes))
        with self._partition(partition_id, timeout) as t:
            for lo in range(0, n, step):
                self.input.write_columns(TAG_COLUMNS, list(zip(names, [c[lo:lo + step] for c in columns])), t)

    def feed_arrow(self, batches, partition_id, timeout=None):
        """Write Arrow record batches (pyarrow.RecordBatch, a Table, or any
        iterable of record batches, written as they come) as one partition,
        passed through as Arrow IPC: no per-row work anywhere. Returns the
        number of rows."""
        import pyarrow as pa
        if isinstance(batches, pa.Table):
            batches = batches.to_batches()
        elif isinstance(batches, pa.RecordBatch):
            batches = [batches]
        n = 0
        with self._partition(partition_id, timeout) as t:
            for rb in batches:
                if rb.num_rows:
                    self.input.write(TAG_ARROW, arrow_ipc(rb), t, rb.num_rows)
                    n += rb.num_rows
        return n

    def feed_encoded(self, tag, payload, timeout=None):
        """Write one already-encoded record (inside a partition or not)."""
        self.input.write(tag, payload, self.timeout_ms if timeout is None else int(timeout * 1000))

    def collect_results(self, partition_id, count, timeout=None, results_timeout=None, abort=None):
        """The ``count`` inference results of partition ``partition_id``, in
        order. Raises FeedError naming the partition if more arrive than rows
        were fed. With ``results_timeout`` (seconds), once the node has read
        every row written so far (its DataFeed acknowledged our partition's
        end) and no result came for that long, raises FeedError asking whether
        the program returns results (``feed.batch_results``), instead of
        waiting out ``timeout``. ``abort``: a callable asked every second,
        returning None, or a reason to stop waiting (raised as FeedError)."""
        if self.output is None:
            self.output = _tfos.Ring(self._out_fd, _tfos.ROLE_CONSUMER)
            os.close(self._out_fd)
            self._out_fd = None
        t = self.timeout_ms if timeout is None else int(timeout * 1000)
        got = self._results.pop(partition_id, [])
        deadline = time.monotonic() + t / 1000.0 if t >= 0 else None
        st = self.input.stats()
        read_target = st["partitions_completed"] + st["partitions_aborted"]  # our END is at or before this
        quiet_since = None  # when the node had read our whole partition, or sent its last result since
        while len(got) < count:
            now = time.monotonic()
            why = abort() if abort is not None else None
            if why:
                raise FeedError("stopped waiting for the results of partition %d (%d of %d): %s"
                                % (partition_id, len(got), count, why))
            if deadline is not None and now >= deadline:
                raise TimeoutError("timed out after %g s waiting for inference results of partition %d "
                                   "(%d of %d)" % (t / 1000.0, partition_id, len(got), count))
            if results_timeout is not None and quiet_since is None and self._read_all(read_target):
                quiet_since = now
            if quiet_since is not None and now - quiet_since >= results_timeout:
                raise ResultsMissing("returned %s for partition %d in %g s after reading all of its rows (%d "
                                     "results of %d) -- does map_fun call feed.batch_results() for every batch it "
                                     "reads?" % ("no results" if not got else "no more results", partition_id,
                                                 results_timeout, len(got), count))
            slice_ms = 1000 if results_timeout is not None or abort is not None else t
            if deadline is not None:
                slice_ms = max(1, min(slice_ms, int((deadline - now) * 1000)))
            try:
                records = self.output.read(slice_ms, 64)
            except TimeoutError:
                continue
            for tag, _, payload in records:
                if tag != TAG_RESULTS:
                    continue
                part, results = pickle.loads(payload)
                if _is_ndarray(results):  # batch_results(array): its rows as Python values
                    results = results.tolist()
                if part == partition_id:
                    got.extend(results)
                    if quiet_since is not None:
                        quiet_since = time.monotonic()
                else:
                    self._results[part].extend(results)
        if len(got) > count:
            raise FeedError("partition %d: %d inference results for %d input rows" % (partition_id, len(got), count))
        return got

    def _read_all(self, target):
        """Whether the node's program has read past partition end ``target``."""
        try:
            self.input.wait_acked(target, 0)
            return True
        except TimeoutError:
            return False
        except FeedError:  # ended or closed: the results are all there will be
            return True

    def end_feed(self):
        self.input.end_feed(self.timeout_ms)

    def close(self, detach_output=False):
        """Detach from the node. ``detach_output``: give the output ring's
        reader role back, so that a later producer can collect its results
        (the next inference task on this executor)."""
        self.input.close()
        if self.output is not None:
            if detach_output:
                self.output.detach()
            else:
                self.output.close()
            self.output = None
        elif self._out_fd is not None:
            os.close(self._out_fd)
        self._out_fd = None
