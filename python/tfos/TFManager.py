"""TensorFlowOnSpark's ``TFManager``, on tfos's feed rings.

TFoS 2.2.5 ran a ``multiprocessing`` Manager per executor: named
``JoinableQueue``s ("input", "output", "error") and a key-value store
("state"), which its Spark tasks and ``TFNode.DataFeed`` shared. tfos has no
Manager: a node's feed is a pair of shared-memory rings that its agent
creates and hands to the program (``ctx.mgr``). This module keeps TFoS's
names for code (and TFoS's own tests) that builds a manager by hand:

* :func:`start` creates the two rings in this process and returns a
  :class:`TFManager` -- a :class:`tfos.feed.FeedManager`, so
  ``TFNode.DataFeed(mgr)`` reads it as a node's feed;
* ``mgr.get_queue("input").put(item)`` writes one row into the input ring
  (``put(None)``, TFoS's end-of-feed marker, ends the feed);
  ``mgr.get_queue("output").get()`` returns the next result that
  ``DataFeed.batch_results`` wrote; ``mgr.get/set`` is TFoS's key-value store
  (``mgr.get("state")`` starts as "running", as TFoS's node set it);
* :func:`connect` finds a manager started in this process by its
  ``address``. A manager in another process is not reachable (tfos nodes
  get their rings from their agent, ``ctx.mgr``): that is refused, saying so.

A put blocks while the ring is full (its reader is the DataFeed, which in
this shape runs in the same thread): the ring holds ``capacity`` bytes
(default 64 MiB), and a put that would wait longer than ``timeout`` raises.
"""
import itertools
import os
import pickle
import threading

from . import _tfos
from .feed.codec import TAG_RESULTS, write_rows
from .feed.consumer import FeedManager

__all__ = ["TFManager", "start", "connect"]

DEFAULT_CAPACITY = 64 << 20     #: bytes per ring of a manager made by :func:`start`
PUT_TIMEOUT = 600.0             #: seconds a put waits for room, a get for a result, by default

_managers = {}                  # address -> TFManager started in this process
_lock = threading.Lock()
_serial = itertools.count()
_ms = lambda timeout: -1 if timeout is None else int(max(0.0, timeout) * 1000)  # noqa: E731


class _InputQueue(object):
    """TFoS's "input" queue: each ``put`` is one row of one partition (a
    partition begins at the first put and ends at ``join()`` or at the
    end-of-feed marker ``None``)."""

    def __init__(self, mgr, fd):
        self._ring = _tfos.Ring(fd, _tfos.ROLE_PRODUCER)
        self._mgr = mgr
        self._open = False       # a partition is begun
        self._partition = 0
        self._puts = 0
        self._ended = False

    def put(self, item, block=True, timeout=PUT_TIMEOUT):
        if self._ended:
            raise _tfos.FeedEnded("put after the end-of-feed marker (None): the feed of manager %s has ended"
                                  % self._mgr.address)
        ms = _ms(timeout if block else 0)
        if item is None:
            if self._open:
                self._ring.partition_end(ms)
                self._open = False
            self._ring.end_feed(ms)
            self._ended = True
            return
        if not self._open:
            self._ring.partition_begin(self._partition, ms)
            self._partition += 1
            self._open = True
        write_rows(self._ring, [item], ms)
        self._puts += 1

    def put_nowait(self, item):
        self.put(item, block=False)

    def join(self, timeout=PUT_TIMEOUT):
        """End the partition being put and wait (at most ``timeout`` s) until
        the reader has taken all of it -- TFoS's ``queue.join()`` after a
        partition's puts."""
        if self._open:
            self._ring.partition_end(_ms(timeout))
            self._open = False
        st = self._ring.stats()
        try:
            self._ring.wait_acked(st["partitions_completed"] + st["partitions_aborted"], _ms(timeout))
        except _tfos.FeedEnded:
            pass  # the reader terminated the feed: the rest is not wanted

    def task_done(self):
        """Accepted for TFoS's signature: the ring counts what its reader took."""

    def qsize(self):
        return self._ring.stats()["records"]

    def empty(self):
        return self.qsize() == 0

    def close(self):
        self._ring.close()


class _OutputQueue(object):
    """TFoS's "output" queue: ``get`` returns the results that
    ``DataFeed.batch_results`` wrote, one at a time, in order."""

    def __init__(self, mgr, fd):
        self._ring = _tfos.Ring(fd, _tfos.ROLE_CONSUMER)
        self._mgr = mgr
        self._ready = []

    def _fill(self, ms):
        for tag, _, payload in self._ring.read(ms):
            if tag == TAG_RESULTS:
                self._ready.extend(pickle.loads(bytes(payload))[1])

    def get(self, block=True, timeout=PUT_TIMEOUT):
        if not self._ready:
            try:
                self._fill(_ms(timeout) if block else 0)
            except TimeoutError:
                pass
        if not self._ready:
            import queue
            raise queue.Empty("no result in manager %s's output queue%s" % (
                self._mgr.address, " after %g s" % timeout if block and timeout is not None else ""))
        return self._ready.pop(0)

    def get_nowait(self):
        return self.get(block=False)

    def task_done(self):
        """Accepted for TFoS's signature."""

    def empty(self):
        if not self._ready:
            try:
                self._fill(0)
            except TimeoutError:
                pass
        return not self._ready

    def qsize(self):
        self.empty()
        return len(self._ready)

    def close(self):
        self._ring.close()


class TFManager(FeedManager):
    """A node's feed made in this process (see the module's text): a
    FeedManager with TFoS's ``get_queue``, ``get`` and ``set``."""

    def __init__(self, authkey, queues=("input", "output"), capacity=DEFAULT_CAPACITY):
        fd_in, fd_out = _tfos.ring_create(capacity), _tfos.ring_create(capacity)
        self._fds = (fd_in, fd_out)
        FeedManager.__init__(self, fd_in, fd_out)
        self.authkey = authkey
        self.address = "tfos-manager-%d-%d" % (os.getpid(), next(_serial))
        self._kv = {"state": "running"}
        self._queues = {}
        for name in queues:
            if name == "input":
                self._queues[name] = _InputQueue(self, fd_in)
            elif name == "output":
                self._queues[name] = _OutputQueue(self, fd_out)
            elif name == "error":
                import queue
                self._queues[name] = queue.Queue()  # TFoS's error queue: tfos reports failures through its agent
            else:
                raise ValueError("TFManager: unknown queue %r; tfos's feed has the queues 'input', 'output' (and "
                                 "'error', kept for TFoS's signature)" % (name,))

    def get_queue(self, qname):
        """The queue named ``qname``, or None (as TFoS) if it was not asked for."""
        return self._queues.get(qname)

    def get(self, key):
        return self._kv[key]

    def set(self, key, value):
        self._kv[key] = value
        if key == "state" and value == "terminating":
            self.terminated = True  # TFoS's terminate(): readers stop

    def shutdown(self):
        """Close both rings and their fds (TFoS's ``BaseManager.shutdown``)."""
        with _lock:
            _managers.pop(self.address, None)
        for q in self._queues.values():
            if hasattr(q, "close"):
                q.close()
        self.close()
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = ()


def start(authkey, queues, mode="local", capacity=DEFAULT_CAPACITY):
    """A new :class:`TFManager` with the queues named in ``queues``.
    ``authkey`` is kept for :func:`connect`; ``mode`` ("local" or "remote")
    is accepted for TFoS's signature: the rings are shared memory of this
    host either way."""
    if mode not in ("local", "remote"):
        raise ValueError("TFManager.start: mode must be 'local' or 'remote', got %r" % (mode,))
    mgr = TFManager(authkey, queues, capacity)
    with _lock:
        _managers[mgr.address] = mgr
    return mgr


def connect(address, authkey):
    """The manager :func:`start` made in this process at ``address``."""
    with _lock:
        mgr = _managers.get(address)
    if mgr is None:
        raise ConnectionRefusedError(
            "TFManager.connect(%r): no tfos manager with that address in this process. tfos has no Manager "
            "server: a node's program gets its feed from its agent (ctx.mgr, or TFNode.DataFeed(ctx.mgr)), "
            "and TFManager.start(...) makes one in the process that reads it" % (address,))
    if mgr.authkey != authkey:
        raise PermissionError("TFManager.connect(%r): the authkey does not match the manager's" % (address,))
    return mgr
