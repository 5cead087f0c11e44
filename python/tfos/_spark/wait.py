"""The one way tfos's Spark launchers wait for a condition: ``wait_until``.

Every wait in tfos._spark, tfos.spark and tfos.torch that is not a blocking
call (a ring's futex, a pidfd, a Spark job) is a bounded poll: look at a
condition, sleep a little, look again, give up at a deadline and say what
was being waited for. It lives here once so that the intervals are chosen
in one place and every timeout reads the same way. Runs on the driver and
on executors (nodes.py, feeding.py, session.py import it), so it imports
nothing but the standard library.
"""
import collections
import time

__all__ = ["Schedule", "WaitTimeout", "wait_until", "LOCAL", "NODE", "JOB"]


class Schedule(collections.namedtuple("Schedule", "fast fast_for slow")):
    """How often a wait looks: every ``fast`` seconds for the first
    ``fast_for`` seconds, then every ``slow`` seconds. The first looks are
    fast because most waits end early (a node registers within a second of
    its task starting: looking every 200 ms made ``run()`` return 0.17-0.31 s
    after the nodes were there); the later ones slow down to what a look
    costs."""

    def interval(self, elapsed):
        """Seconds to sleep after a look made ``elapsed`` seconds into the wait."""
        return self.fast if elapsed < self.fast_for else self.slow


#: a look at this process's own state (the in-driver coordinator) or a syscall
LOCAL = Schedule(0.02, 2.0, 0.1)
#: a look that asks a coordinator over the network, from a task on an executor
NODE = Schedule(0.02, 2.0, 0.2)
#: a look that is a Spark job (tfos.spark.Cluster asking its coordinator)
JOB = Schedule(0.5, 0.0, 0.5)


class WaitTimeout(TimeoutError):
    """A bounded wait ran out. ``what`` is what it waited for, ``timeout``
    its bound in seconds, ``last`` the condition's last (false) value."""

    def __init__(self, what, timeout, last=None):
        super().__init__("gave up after %g s waiting for %s" % (timeout, what))
        self.what, self.timeout, self.last = what, timeout, last


def wait_until(condition, timeout, what, schedule=LOCAL):
    """Call ``condition()`` until it returns a true value, and return that
    value. Sleeps between looks as ``schedule`` says; raises
    :class:`WaitTimeout` (naming ``what``) once ``timeout`` seconds have
    passed without it (the condition is always asked at least once, and once
    more at the deadline). ``timeout=None`` waits without a bound: only for a
    wait whose end something else guarantees (a node task waiting for its
    agent, which ends with its cluster). Exceptions from ``condition``
    propagate."""
    start = time.monotonic()
    deadline = None if timeout is None else start + float(timeout)
    while True:
        value = condition()
        if value:
            return value
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise WaitTimeout(what, timeout, value)
        pause = schedule.interval(now - start)
        if deadline is not None:
            pause = min(pause, deadline - now)
        time.sleep(max(0.0, pause))
