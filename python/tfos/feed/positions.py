"""Feed positions: which partitions a node consumed, saved beside a
checkpoint (:func:`save_position`) and read back by a restarted feed
(:func:`read_positions`, libtfos's reader); :class:`hold_stop` keeps a stop
from splitting a checkpoint and its position.
"""
import os
import signal
import threading

from .. import _tfos

FeedError = _tfos.FeedError


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
    attempt-<A>-<job>-<index>-<cluster>.json`` with the partitions consumed whole and,
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
    # the cluster id tells runs apart: a drained run's positions count in the
    # run that resumes it, whose attempts count from 1 again
    cluster = os.environ.get("TFOS_CLUSTER_ID", "")
    path = os.path.join(d, "attempt-%d-%s%s.json" % (attempt, node, "-" + cluster if cluster else ""))
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
