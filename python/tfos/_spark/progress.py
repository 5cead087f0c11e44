"""What a Spark client shows while it waits (docs/SPARK.md, "What the client
shows"): a line after a few seconds of any wait, and every few seconds
after, saying what it waits for and for how long, with what Spark Connect
reports of the running job (its tasks done and running) where the session
gives it.

A wait that is a blocking Spark job (the node stage, a feed) runs inside
:class:`Ticker`: a daemon thread, woken by an event when the job returns,
logs on the ``"tfos"`` logger (stderr, unless the program configured
logging). Driver side only.
"""
import threading
import time

from .._log import log as logger

__all__ = ["Ticker", "JobProgress"]


class JobProgress(object):
    """Spark Connect's progress of the jobs a client runs (pyspark 4's
    ``SparkSession.registerProgressHandler``: the server reports each
    running query's stages, their tasks and the tasks running, every couple
    of seconds). ``tasks()`` is (done, total, running) of the latest report,
    or None where the session reports none (classic sessions, Spark 3.5)."""

    def __init__(self, spark):
        self.spark = spark
        self.last = None
        self.registered = False

    def __call__(self, stages=None, inflight_tasks=0, operation_id=None, done=False, **_):
        stages = list(stages or ())
        if stages:
            self.last = (sum(s.num_completed_tasks for s in stages), sum(s.num_tasks for s in stages),
                         int(inflight_tasks or 0))

    def __enter__(self):
        self.last = None
        register = getattr(self.spark, "registerProgressHandler", None)
        if register is not None:
            try:
                register(self)
                self.registered = True
            except Exception:  # a classic session: not supported
                self.registered = False
        return self

    def __exit__(self, *exc):
        if self.registered:
            try:
                self.spark.removeProgressHandler(self)
            except Exception:
                pass
            self.registered = False

    def tasks(self):
        return self.last


class Ticker(object):
    """While a blocking call runs: after ``first`` seconds, and then every
    ``every`` seconds, log ``line(seconds)`` (a function of the seconds
    waited, returning the line or None for none this time) at INFO."""

    def __init__(self, line, first=5.0, every=10.0, quiet=False):
        self.line, self.first, self.every, self.quiet = line, float(first), float(every), quiet
        self.done = threading.Event()
        self.thread = None

    def _loop(self):
        t0 = time.monotonic()
        wait = self.first
        while not self.done.wait(wait):
            try:
                text = self.line(time.monotonic() - t0)
            except Exception as exc:  # a line is never worth a failure
                text = None
                logger.debug("progress line: %s", exc)
            if text:
                logger.info("%s", text)
            wait = self.every

    def __enter__(self):
        if not self.quiet:
            self.thread = threading.Thread(target=self._loop, name="tfos-ticker", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        if self.thread is not None:
            self.thread.join(2)
