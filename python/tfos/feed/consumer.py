"""The program's side of the feed: :class:`FeedManager` (the node's two
rings, attached from ``TFOS_FEED_FDS``) and :class:`DataFeed` (batches of
rows or numpy columns out of the input ring, results into the output ring).

The consumer keeps the feed position (partitions consumed whole, rows taken
of the one being read) that :mod:`.positions` saves beside a checkpoint.
"""
import collections
import contextlib
import os
import pickle
import time

from .. import _tfos
from .codec import TAG_PICKLE, TAG_RESULTS, _decode, _is_ndarray, _np
from .positions import hold_stop, save_position
from .prefetch import Prefetcher

FeedError = _tfos.FeedError
FeedClosed = _tfos.FeedClosed
FeedEnded = _tfos.FeedEnded


class _Mark(object):
    """In the chunk queue: a partition's marker (no rows)."""
    __slots__ = ("partition",)


class _Begin(_Mark):
    """Partition ``partition`` begins here, at its row ``first`` (a re-feed
    that resumes where its aborted feed stopped: rows before it came before
    the abort)."""
    __slots__ = ("first",)

    def __init__(self, partition, first):
        self.partition = partition
        self.first = first


class _End(_Mark):
    """The producer ended (or the ring aborted) partition ``partition`` here."""
    __slots__ = ("aborted",)

    def __init__(self, partition, aborted=False):
        self.partition = partition
        self.aborted = aborted


class _RefeedTimeout(TimeoutError):
    """No producer came back for a partition cut short by its producer's death."""


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

    ``timeout`` (seconds, default None: no bound) bounds every wait for data.
    Rows taken are never dropped: a batch whose wait times out after it has
    taken some rows returns them (a short batch, while ``should_stop()`` stays
    False); ``TimeoutError`` is raised only when no row came within
    ``timeout``.

    A producer that dies in the middle of a partition is no error here: the
    ring aborts the partition (``mgr.aborted``) and the program goes on; a new
    producer feeds it again (Spark's task retry), from the row where the ring's
    copy stopped when it comes to this node (docs/FEED.md). While waiting for
    that, with no producer attached, the wait is bounded by
    ``refeed_timeout`` (seconds; default ``$TFOS_FEED_TIMEOUT``, else the feed
    timeout, 600): then ``TimeoutError`` says which partition waits and for
    what, once. ``FeedClosed`` means the feed is over for good short of its
    end (the node is stopping: no producer will come); the rows taken come
    back first, then every call raises it at once and ``should_stop()`` is
    True.
    """

    REFEED_SLICE_MS = 1000   # while waiting for a re-feed, producers are looked at this often

    def __init__(self, mgr=None, train_mode=True, qname_in="input", qname_out="output", input_mapping=None,
                 timeout=None, refeed_timeout=None):
        self.mgr = mgr if isinstance(mgr, FeedManager) else get_manager()
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.input_mapping = input_mapping
        self.timeout_ms = -1 if timeout is None else int(timeout * 1000)
        self._chunks = collections.deque()
        self._reads_columns = False  # what the ring's hint to producers says (Ring.reads_columns)
        self._last_batch = []                # [(partition, rows)] of the last next_batch
        self._partition = 0                  # partition of the records being read
        self._closed = None                  # FeedClosed: the feed is over for good (raised by every read)
        self._pending = None                 # a re-feed's TimeoutError met after rows were taken: raised next
        self.rows_read = 0
        self._prefetcher = None              # the Prefetcher whose thread reads this feed, if any
        if refeed_timeout is None:
            refeed_timeout = float(os.environ.get("TFOS_FEED_TIMEOUT") or _tfos.DEFAULTS["feed_timeout"])
        self.refeed_timeout = float(refeed_timeout)
        self._refeed = None                  # partition cut short by its producer's death, until one comes back
        self._refeed_since = None            # since when no producer is attached meanwhile

    # -- reading
    def _fill(self, views=False):
        """Read at least one record; False at the end of the feed. ``views``:
        large records view the ring (next_batch_arrays(copy=False))."""
        if self.mgr.ended or self.mgr.terminated:
            return False
        if self._closed is not None:
            raise self._closed
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        try:
            records = self._read(views)
            if records is None:  # a Prefetcher's stop
                return False
        except FeedEnded:
            self.mgr.ended = True
            return False
        except _RefeedTimeout:
            raise
        except TimeoutError:
            why = "" if self._refeed is None else (" (waiting for partition %d to be fed again: its producer died "
                                                   "in the middle of it)" % self._refeed)
            raise TimeoutError("no data on the feed for %.1f s%s" % (self.timeout_ms / 1000.0, why)) from None
        except FeedClosed:
            # the one transient-free meaning: the agent shut the ring
            self._closed = FeedClosed("the node is stopping: its feed was closed for good, and no producer will "
                                      "feed it again")
            raise self._closed from None
        for tag, partition, payload in records:
            if tag == _tfos.TAG_PARTITION_BEGIN:
                self._partition = partition
                self._refeed = None  # a producer came back
                self._chunks.append(_Begin(partition, payload))
            elif tag == _tfos.TAG_PARTITION_END:
                self._partition = 0
                self._chunks.append(_End(partition))
            elif tag == _tfos.TAG_PARTITION_ABORT:
                # its producer died: the rows of it already read stay read,
                # and a new producer feeds it again, from where they stop if
                # the ring kept count (exactly once), else whole
                self.mgr.aborted.append(partition)
                self._partition = 0
                self._chunks.append(_End(partition, aborted=True))
                self._refeed, self._refeed_since = partition, None
            else:
                chunk = _decode(tag, self._partition, payload)
                chunk.viewed = tag != TAG_PICKLE and isinstance(payload, memoryview)
                if chunk.pickled is not None or chunk.n:  # a pickle record is counted when unpickled
                    self._chunks.append(chunk)
        return True

    def _read(self, views):
        """One read of the ring, waiting at most the feed's timeout. A
        prefetch thread reads in slices, so that a stop asked from the
        training thread is seen within one, and so does a feed waiting for a
        re-feed, to look at its producers (the wait's bound is unchanged).
        Futex waits in the ring: nothing spins."""
        pf = self._prefetcher
        left = self.timeout_ms
        while True:
            wait = left
            if pf is not None:
                views = views and pf.views  # else batches read ahead must outlive the next read
                wait = Prefetcher.SLICE_MS if left < 0 else min(left, Prefetcher.SLICE_MS)
            if self._refeed is not None:
                wait = self.REFEED_SLICE_MS if wait < 0 else min(wait, self.REFEED_SLICE_MS)
            try:
                return self.mgr.input.read(wait, 64, views)
            except TimeoutError:
                if pf is not None and pf.stopping.is_set():
                    return None
                if left >= 0:
                    left -= wait
                    if left <= 0:
                        raise
                self._check_refeed()

    def _check_refeed(self):
        """Waiting for a partition cut short by its producer's death to be
        fed again: give up (once) after ``refeed_timeout`` s with no producer
        attached. A producer attached may be that re-feed, waiting for the
        ring's lock, so it restarts the clock."""
        if self._refeed is None:
            return
        st = self.mgr.input.stats()
        now = time.monotonic()
        if st["producers"]:
            self._refeed_since = None
        elif self._refeed_since is None:
            self._refeed_since = now
        elif now - self._refeed_since >= self.refeed_timeout:
            part, self._refeed = self._refeed, None
            rows = st["last_aborted_rows"] if st["last_aborted"] == part else None
            raise _RefeedTimeout(
                "partition %d was cut short when its producer%s died%s, and no producer has attached to this "
                "node's feed for %.0f s since: gave up waiting for one to feed it again (raise "
                "DataFeed(refeed_timeout=) or TFOS_FEED_TIMEOUT to wait longer; the rows already read stay read)"
                % (part, " (pid %d)" % st["dead_pid"] if st["dead_pid"] else "",
                   "" if rows is None else " after %d rows" % rows, self.refeed_timeout))

    def _take(self, batch_size, columns, copy=True, before_read=None):
        """Up to batch_size rows as parts, one per record they come from: lists
        of rows, or with ``columns`` (columns, names). With ``copy`` false the
        parts of large records are views of the ring, valid until the next
        read; a batch whose rows go on in the next read has its parts so far
        copied out first (the read lets the producers write over them), or
        handed to ``before_read(parts)``, which is done with them when it
        returns."""
        if columns != self._reads_columns:
            # producers holding Spark's pickled batches pass them on to a
            # reader of rows, and encode columns for a reader of arrays
            self.mgr.input.reads_columns(columns)
            self._reads_columns = columns
        out, got = [], 0
        viewed = 0  # out[:viewed] may view records of the last read
        self._last_batch = []
        while got < batch_size:
            if not self._chunks:
                if not copy and got:
                    if before_read is not None:
                        before_read(out)
                    else:
                        out[:viewed] = [([c.copy() for c in p[0]], p[1]) for p in out[:viewed]]
                    viewed = 0
                try:
                    if not self._fill(not copy):
                        break
                except TimeoutError as exc:
                    if not got:
                        raise
                    if isinstance(exc, _RefeedTimeout):
                        self._pending = exc  # said by the next call
                    break  # the rows taken go out as a short batch, never dropped
                except FeedClosed as exc:
                    if not got:
                        raise
                    self._closed = exc  # the rows taken go out first; the next wait raises
                    break
                continue
            chunk = self._chunks[0]
            if isinstance(chunk, _Begin):
                # a resumed re-feed: its rows before `first` were handed out
                # before the abort, in this attempt (the feed position)
                self._chunks.popleft()
                if chunk.first:
                    self.mgr.partial[chunk.partition] = chunk.first
                else:
                    self.mgr.partial.pop(chunk.partition, None)
                continue
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
            if chunk.viewed and not copy:
                viewed = len(out)
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
        rows = []
        for p in parts:  # joined in C (a row at a time in Python cost 18 ns a row)
            rows.extend(p)
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

    @property
    def done_feeding(self):
        """TensorFlowOnSpark's attribute: True once the feed has ended and
        every row was read (the same as ``should_stop()``)."""
        return self.should_stop()

    def should_stop(self):
        """True once the feed has ended (or was terminated, or closed for good:
        FeedClosed) and every row was read."""
        if self.mgr.terminated:
            return True
        if any(not isinstance(c, _Mark) and c.pos < c.n for c in self._chunks):
            return False
        return self.mgr.ended or self._closed is not None

    # -- inference
    def batch_results(self, results):
        """One result per row of the last ``next_batch`` (or
        ``next_batch_arrays``), in order: a sequence, or a numpy array whose
        first axis is the rows (``model.predict``'s output as it is). An
        array goes back whole, with no per-row work here; Spark gets its
        items as TensorFlowOnSpark gives them: a 1-D array's items numpy
        scalars, a 2-D array's rows 1-D arrays (docs/FEED.md)."""
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
