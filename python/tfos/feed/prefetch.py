"""The prefetcher: a thread that reads a DataFeed's batches ahead of the
training loop, the position of each batch kept for checkpoints."""
import queue
import threading

from .. import _tfos

FeedError = _tfos.FeedError


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
    with them.

    ``read``: what the thread calls for one batch instead (None or an empty
    batch at the end), e.g. one that copies the batch to a device
    (tfos.torch.FeedDataset(device=)). ``views``: ``read`` takes the rows as
    views into the ring (``feed._take(..., copy=False)``) and is done with
    them when it returns, or when its next call begins: else the thread's
    reads copy every record out of the ring, as batches queued ahead must
    outlive the next read."""

    SLICE_MS = 200   # a stop is seen within this, while the thread waits on the ring

    def __init__(self, feed, batch_size, as_dict=False, depth=2, read=None, views=False):
        if int(depth) < 1:
            raise ValueError("Prefetcher: depth must be >= 1, not %r" % (depth,))
        if feed._prefetcher is not None:
            raise FeedError("this DataFeed is already read by a Prefetcher")
        self.feed, self.batch_size, self.as_dict = feed, int(batch_size), as_dict
        self.read = read or (lambda: feed.next_batch_arrays(self.batch_size, as_dict=self.as_dict))
        self.views = bool(views and read)
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
                batch = self.read()
                position = (len(mgr.consumed), dict(mgr.partial))
                if batch is None or not len(batch):
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
