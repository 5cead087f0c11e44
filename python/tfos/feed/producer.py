"""The producer's side of the feed: :class:`FeedClient` writes partitions
into a node's input ring on this machine (found through the node agent's
feed socket) and collects the inference results from its output ring.
"""
import collections
import contextlib
import itertools
import os
import time

from .. import _tfos
from .codec import (TAG_ARROW, TAG_COLUMNS, TAG_PICKLE, TAG_RESULTS, _np, arrow_ipc, unpickle, unpickle_rows,
                    write_rows)

FeedError = _tfos.FeedError


class ResultsMissing(FeedError):
    """``FeedClient.collect_results``: the node read the whole partition and
    sent no (more) results for ``results_timeout`` seconds. The node is
    alive: its program does not answer."""


def skip_arrow_rows(batches, n):
    """Arrow record batches after their first ``n`` rows."""
    for rb in batches:
        if n >= rb.num_rows:
            n -= rb.num_rows
            continue
        yield rb.slice(n) if n else rb
        n = 0


class FeedClient(object):
    """A producer feeding one node on this machine.

    ``FeedClient(executor_id)`` finds the node through its agent's feed socket
    (cluster id and secret from ``TFOS_CLUSTER_ID``/``TFOS_SECRET`` unless
    given). ``feed_partition(rows, partition_id)`` writes one whole partition;
    ``collect_results(partition_id, count)`` reads its inference results;
    ``end_feed()`` ends the node's feed for good.

    Feeding a partition again after its producer died in the middle of it
    (call the same method with the same ``partition_id`` and ``key``): when
    the node's ring kept count of the rows it had taken of it, the rows the
    node already has are skipped, so the node gets every row once (the rows
    must be the same, in the same order); else the partition is written
    whole (at-least-once). ``key`` (default 0) tells feeds of the same
    partition id apart: a feed of the same id under another key (the next
    epoch that reuses ids, a later job) always starts at its first row.
    ``key=None``: never skip. docs/FEED.md."""

    def __init__(self, executor_id, cluster_id=None, secret=None, timeout=_tfos.DEFAULTS["connect_timeout"],
                 batch_rows=_tfos.DEFAULTS["batch_rows"], connect_timeout=None):
        """``timeout`` (seconds) bounds every wait of the client (writes,
        results); ``connect_timeout`` (default ``timeout``) the wait for the
        node's feed socket alone."""
        cluster_id = cluster_id or os.environ.get("TFOS_CLUSTER_ID")
        secret = secret or os.environ.get("TFOS_SECRET")
        if not cluster_id or not secret:
            raise FeedError("FeedClient needs the cluster id and secret (TFOS_CLUSTER_ID, TFOS_SECRET)")
        wait = timeout if connect_timeout is None else connect_timeout
        in_fd, out_fd, self.node = _tfos.feed_connect(cluster_id, int(executor_id), secret, int(wait * 1000))
        try:
            self.input = _tfos.Ring(in_fd, _tfos.ROLE_PRODUCER)
            self._out_fd = out_fd
            self.output = None
        finally:
            os.close(in_fd)
        self.batch_rows = batch_rows
        self.timeout_ms = int(timeout * 1000)
        self.skipped = 0  # rows of the last partition the node had already (a resumed re-feed)
        self._results = collections.defaultdict(list)  # partition -> result chunks read before it was asked for

    @contextlib.contextmanager
    def _partition(self, partition_id, timeout, key):
        """Hold the ring for one whole partition; yields (the timeout in ms,
        the row to start at). If writing fails midway the handle is closed,
        and the ring marks the partition aborted (so it is fed again, never
        taken as whole)."""
        t = self.timeout_ms if timeout is None else int(timeout * 1000)
        first = self.input.partition_begin(partition_id, t, key)
        self.skipped = first
        try:
            yield t, first
        except BaseException:
            self.input.close()
            raise
        self.input.partition_end(t)

    def feed_partition(self, rows, partition_id, timeout=None, key=0):
        """Write ``rows`` (an iterable) as partition ``partition_id``, whole
        (a re-feed: from where the node's copy stops; see the class). Returns
        the number of rows written (``self.skipped``: those skipped)."""
        rows = iter(rows)
        with self._partition(partition_id, timeout, key) as (t, first):
            if first:
                rows = itertools.islice(rows, first, None)
            return self._write_rows(rows, t)

    def _write_rows(self, rows, t):
        """Write the rows of an iterator in records of ``batch_rows``; the
        number written."""
        n = 0
        while True:
            # batches are cut by islice in C: no Python bytecode per row
            batch = list(itertools.islice(rows, self.batch_rows))
            if not batch:
                return n
            write_rows(self.input, batch, t)
            n += len(batch)

    def feed_pickled(self, batches, partition_id, timeout=None, key=0, skip=0):
        """Write a partition given as PySpark's pickled batches (bytes, each
        the pickle of a list of rows, as a batched pickle serializer writes
        an RDD that Spark holds), the rows after its first ``skip``. A batch
        whose rows its opcodes count (``_tfos.pickled_list_len``) goes into
        the ring as it is: not unpickled and encoded again here, the node
        unpickles it once (its rows are the objects the RDD holds). While
        the node's program reads columns (``next_batch_arrays``: the ring's
        ``reads_columns`` hint), the columns are made here instead (measured:
        made in the node, they cost the host more CPU): a batch of tuples of
        plain numbers goes from its pickle to the encoder's columns in C
        (``_tfos.pickled_columns``). Any other batch, and those holding rows
        to skip (``skip``, a re-feed's), is unpickled here and written as
        :meth:`feed_partition` writes rows. Returns the number of rows
        written, as feed_partition."""
        n = 0
        cap = self.input.max_record
        with self._partition(partition_id, timeout, key) as (t, first):
            drop = skip + first
            for b in batches:
                if not drop and len(b) <= cap:
                    if not self.input.reads_columns():
                        k = _tfos.pickled_list_len(b)
                        if k >= 0:
                            if k:
                                self.input.write(TAG_PICKLE, b, t, k)
                                n += k
                            continue
                    else:
                        # rows of plain numbers: read from the pickle into
                        # the encoder's columns in C, with no row object
                        enc = _tfos.pickled_columns(b)
                        if enc is not None and len(enc[1]) <= cap:
                            self.input.write(TAG_COLUMNS, enc[1], t, enc[0])
                            n += enc[0]
                            continue
                rows = unpickle_rows(b)
                d = min(drop, len(rows))
                drop -= d
                n += self._write_rows(itertools.islice(rows, d, None), t)
        return n

    def feed_arrays(self, columns, partition_id, names=None, batch_rows=None, timeout=None, key=0):
        """Write whole numpy columns (a dict name -> array, or a sequence of
        arrays, all with the same first dimension) as one partition, in
        batches of ``batch_rows`` rows, with no per-row Python work (default:
        as many rows as fit in 2 MiB, at least one: records that go round
        the ring's part in the processor's cache, docs/FEED.md). A re-feed
        starts where the node's copy stops (see the class)."""
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
        with self._partition(partition_id, timeout, key) as (t, first):
            for lo in range(min(first, n), n, step):
                self.input.write_columns(TAG_COLUMNS, list(zip(names, [c[lo:lo + step] for c in columns])), t)

    def feed_arrow(self, batches, partition_id, timeout=None, key=0):
        """Write Arrow record batches (pyarrow.RecordBatch, a Table, or any
        iterable of record batches, written as they come) as one partition,
        passed through as Arrow IPC: no per-row work anywhere. Returns the
        number of rows written (a re-feed starts where the node's copy
        stops; see the class)."""
        import pyarrow as pa
        if isinstance(batches, pa.Table):
            batches = batches.to_batches()
        elif isinstance(batches, pa.RecordBatch):
            batches = [batches]
        n = 0
        with self._partition(partition_id, timeout, key) as (t, first):
            if first:
                batches = skip_arrow_rows(batches, first)
            for rb in batches:
                if rb.num_rows:
                    self.input.write(TAG_ARROW, arrow_ipc(rb), t, rb.num_rows)
                    n += rb.num_rows
        return n

    def feed_encoded(self, tag, payload, timeout=None):
        """Write one already-encoded record (inside a partition or not). Its
        rows are not known: a partition holding one is fed again whole after
        its producer's death."""
        self.input.write(tag, payload, self.timeout_ms if timeout is None else int(timeout * 1000))

    def collect_results(self, partition_id, count, timeout=None, results_timeout=None, abort=None,
                        chunks=False):
        """The ``count`` inference results of partition ``partition_id``, in
        order. ``chunks``: instead, the results as the program sent them, a
        list of its ``batch_results`` arguments (lists, or numpy arrays kept
        whole: no Python object per row). Raises FeedError naming the
        partition if more arrive than rows were fed. With ``results_timeout`` (seconds), once the node has read
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
        got = self._results.pop(partition_id, [])  # chunks, as batch_results sent them
        have = sum(len(c) for c in got)
        deadline = time.monotonic() + t / 1000.0 if t >= 0 else None
        st = self.input.stats()
        read_target = st["partitions_completed"] + st["partitions_aborted"]  # our END is at or before this
        quiet_since = None  # when the node had read our whole partition, or sent its last result since
        while have < count:
            now = time.monotonic()
            why = abort() if abort is not None else None
            if why:
                raise FeedError("stopped waiting for the results of partition %d (%d of %d): %s"
                                % (partition_id, have, count, why))
            if deadline is not None and now >= deadline:
                raise TimeoutError("timed out after %g s waiting for inference results of partition %d "
                                   "(%d of %d)" % (t / 1000.0, partition_id, have, count))
            if results_timeout is not None and quiet_since is None and self._read_all(read_target):
                quiet_since = now
            if quiet_since is not None and now - quiet_since >= results_timeout:
                raise ResultsMissing("returned %s for partition %d in %g s after reading all of its rows (%d "
                                     "results of %d) -- does map_fun call feed.batch_results() for every batch it "
                                     "reads?" % ("no results" if not have else "no more results", partition_id,
                                                 results_timeout, have, count))
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
                part, results = unpickle(payload)
                if part == partition_id:
                    got.append(results)
                    have += len(results)
                    if quiet_since is not None:
                        quiet_since = time.monotonic()
                else:
                    self._results[part].append(results)
        if have > count:
            raise FeedError("partition %d: %d inference results for %d input rows" % (partition_id, have, count))
        if chunks:
            return got
        out = []
        for c in got:  # batch_results(array): its items (numpy scalars), as TFoS gives them
            out.extend(c)
        return out

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
