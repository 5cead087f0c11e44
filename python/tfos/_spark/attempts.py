"""The one attempt loop of tfos's Spark launchers: form a cluster, watch it,
and when a node fails stop it, ask the restart policy, and form it again --
then feed again what the failed attempt did not deliver.

TFCluster (the coordinator in this driver process), tfos.spark.Cluster (the
coordinator on an executor, reached through Spark jobs) and
TorchDistributor(local_mode=False) (one of the two, by session kind) all run
their attempts through :class:`AttemptController`, in the manner of Ray
Train v2's controller: explicit states, one ``step()`` that returns
(previous state, next state), one poll interval, and every restart decision
taken by libtfos's restart policy (``tfos._tfos.RestartPolicy``) as an enum
value (RESTART or RAISE), from the failure's cause code (``_tfos.CAUSE_*``),
never from the text of a message.

The states::

    FORMING --form--> RUNNING --done--> DONE
       |                 |
       | not formed      | a node failed: stop the attempt, ask the policy
       v                 v
     FAILED <--RAISE-- (decide) --RESTART--> RESTARTING --release--> FORMING

The controller never knows where the coordinator or the nodes are: it
drives an :class:`Engine` (form an attempt, look at it, end its feed, stop
it, release it). ``_spark/driver.py`` has the driver engine (TFCluster),
``_spark/client.py`` the session engine (tfos.spark.Cluster).
:func:`feed_until_delivered` is the re-feed bookkeeping both train() paths
share: which partitions were delivered or not wanted, the feed positions a
checkpoint saved (``tfos.feed.read_positions``), ``partitions_refed`` and
the warning lines.

Imports nothing from pyspark: the unit test (tests/python/test_attempts.py)
drives it with an engine of its own.
"""
import collections
import enum
import time

from .. import _tfos
from .. import feed as _feed
from .._launch import ClusterError
from .._log import log as logger
from .wait import JOB, LOCAL, WaitTimeout, wait_until

__all__ = ["State", "Snapshot", "Engine", "AttemptController", "FeedRound", "FeedResult", "feed_until_delivered",
           "cause_code", "failure_text", "open_tracker", "tracker_env", "elastic_bounds", "elastic_size"]


class State(enum.Enum):
    """Where the attempt loop is (Ray Train v2's controller states, less
    those tfos has no use for)."""
    FORMING = "forming"        #: an attempt is being formed (next: RUNNING, or FAILED when it does not form)
    RUNNING = "running"        #: every node registered; the programs run (next: DONE, RESTARTING, FAILED)
    RESTARTING = "restarting"  #: a node failed and the policy said RESTART; the attempt is stopped (next: FORMING)
    DONE = "done"              #: every program returned (terminal)
    FAILED = "failed"          #: did not form, the policy said RAISE, or stopped (terminal; ``error`` says why)


TERMINAL = (State.DONE, State.FAILED)

#: the coordinator's state names (its status JSON) -> _tfos.STATE_*
STATES = {"reserving": _tfos.STATE_RESERVING, "running": _tfos.STATE_RUNNING, "stopping": _tfos.STATE_STOPPING,
          "done": _tfos.STATE_DONE, "failed": _tfos.STATE_FAILED}

#: libtfos's failure causes by the names the coordinator's status JSON and
#: the policy's history use (tfos_cause_name) -> _tfos.CAUSE_* codes
CAUSES = {name[len("CAUSE_"):].lower(): code for name, code in vars(_tfos).items() if name.startswith("CAUSE_")}


def cause_code(name):
    """The ``_tfos.CAUSE_*`` code of a cause name (``"exit"``, ``"signal"``,
    ...); CAUSE_EXIT for a name this build does not know (a node failed)."""
    return CAUSES.get(str(name or "").lower(), _tfos.CAUSE_EXIT)


class Snapshot(collections.namedtuple("Snapshot", "state failure cause decision summary stopped record drained")):
    """One look at an attempt, as an engine reports it.

    state: the coordinator's ``_tfos.STATE_*``; failure: its failure text
    ("" while nothing failed); cause: the failure's ``_tfos.CAUSE_*`` (0
    without one); decision: RESTART or RAISE when the attempt's coordinator
    asked the controller's policy itself (the driver engine), else 0 (the
    controller asks it); summary: the failure's one line; stopped: True once
    every node of the attempt has stopped; record: what else the engine
    knows of the failure, as ``RestartPolicy.decide``'s keywords (node, job,
    exception, where; {} when it knows nothing more); drained: the attempt
    ended DONE by a drain on notice (every node checkpointed at the drain
    step and ended), summary saying why it was drained."""

    def __new__(cls, state, failure="", cause=0, decision=0, summary="", stopped=False, record=None, drained=False):
        return super().__new__(cls, state, failure, cause, decision, summary, stopped, record or {}, drained)

    @property
    def failed(self):
        return bool(self.failure) or self.state == _tfos.STATE_FAILED


class Engine(object):
    """What the controller drives: one attempt at a time, formed on some
    Spark session (an ops table: nng's transport ops are the model; every
    operation says what it may do).

    Attributes: ``poll`` (a wait.Schedule: how often the controller looks,
    from what one ``snapshot()`` costs), ``stop_timeout`` (seconds to wait
    for the nodes once ``stop()`` was asked), ``policy`` (the controller's
    ``_tfos.RestartPolicy``)."""

    poll = LOCAL
    stop_timeout = 60.0
    policy = None

    def error(self, text):
        """The exception this engine's users expect, for ``text``."""
        return ClusterError(text, 1, None)

    def form(self, attempt, first):
        """Form attempt ``attempt`` (``first``: the cluster's first). Blocks
        until every node has registered. Raises (an ``error()``) saying why
        it did not form; the controller then stops and releases whatever
        part of it exists."""
        raise NotImplementedError

    def snapshot(self):
        """The attempt as it is now (a :class:`Snapshot`). May block for as
        long as one look takes (a Spark job, for the session engine); raises
        an ``error()`` when the attempt cannot be reached."""
        raise NotImplementedError

    def end_feed(self):
        """Tell every node that its feed is over (their programs return when
        they have read it)."""
        raise NotImplementedError

    def stop(self, reason):
        """Ask every node of the attempt to stop (SIGTERM, SIGKILL after the
        grace); does not wait (the controller waits on ``snapshot().stopped``).
        Never raises: an attempt that cannot be reached stops by itself."""
        raise NotImplementedError

    def release(self):
        """Let the attempt's coordinator go, once its nodes have stopped.
        Idempotent; never raises."""
        raise NotImplementedError

    def progress(self):
        """The checkpoint's fingerprint for the policy's test of a
        deterministic failure (``_tfos.checkpoint_progress``), "" without
        one."""
        return ""

    def refed(self, count):
        """``count`` partitions in all have been fed again after failures
        (for the engine's status page); nothing by default."""


def open_tracker(uri, experiment, run_name, params, tags):
    """The job's MLflow run for a Spark launcher's ``mlflow=`` (a
    ``_tfos.Tracker``), made before any node starts, with ``params`` and
    ``tags``; None without ``uri``. A URI that is not a tracking server's
    raises ValueError; a server that cannot be reached only warns."""
    if uri is None:
        return None
    tracker = _tfos.Tracker(str(uri), None if experiment is None else str(experiment), run_name)
    for key, value in sorted(params.items()):
        tracker.param(key, str(value))
    for key, value in sorted(tags.items()):
        tracker.tag(key, str(value))
    return tracker


def tracker_env(tracker):
    """What the nodes of a tracked job get in their environment (their own
    mlflow.log_* lands in the job's run)."""
    if tracker is None:
        return {}
    env = {"MLFLOW_TRACKING_URI": tracker.uri}
    if tracker.run_id:
        env["MLFLOW_RUN_ID"] = tracker.run_id
    return env


def failure_text(policy, failure, context=""):
    """A failed cluster's message: the failure, ``context``, the restart
    policy's verdict and the attempts' history (every engine)."""
    text = "the tfos cluster failed: %s" % failure
    if context:
        text += "\n" + context
    if policy.verdict:
        text += "\n" + policy.verdict
    history = policy.render().splitlines()
    if len(history) > 1:
        resizes = getattr(policy, "resizes", 0)
        text += "\nattempts (%d restarts%s):\n  %s" % (len(history) - 1 - resizes,
                                                      ", %d resizes" % resizes if resizes else "", "\n  ".join(history))
    return text


class AttemptController(object):
    """The attempt loop of one cluster over ``engine``, with the restart
    policy ``policy`` (a ``_tfos.RestartPolicy``; the attempts' history is
    its history).

    ``step()`` moves one state on and returns (previous, next); ``start()``,
    ``recover()`` and ``finish()`` step until the loop rests (RUNNING, DONE
    or FAILED) and raise ``error`` on FAILED. ``restart``: whether a failure
    seen while watching may re-form the cluster (``finish(restart=False)``
    once the feed has ended: a re-formed cluster would have nothing to
    read)."""

    #: seconds to wait for the coordinator to record a failure a feed saw (a
    #: feed task sees a dead node a moment before the node's agent says why)
    FAILURE_WAIT = 10.0

    def __init__(self, engine, policy, name="cluster", tracker=None):
        self.engine = engine
        self.tracker = tracker       # the job's MLflow run (_tfos.Tracker), or None: ended with the loop
        self.policy = policy
        engine.policy = policy
        self.name = name
        self.state = State.FORMING
        self.error = None            # the exception of FAILED
        self.last_failure = None     # the Snapshot of the last failure seen
        self.formed = 0              # attempts formed
        self.restart = True
        self.context = ""            # a line for the failure message (what the feed saw)
        self.partitions_refed = 0    # partitions that were in flight when a node failed, fed again
        self.resized = False         # the attempt being re-formed ended in a resize (not a failure)
        self.transitions = []        # (previous, next) of every move, for tests and the debug log

    @property
    def attempt(self):
        """The current attempt (1 for the first), as the policy counts it."""
        return self.policy.attempt

    # -- the loop
    def step(self):
        """One step of the loop: (previous state, next state). An attempt
        that does not form, and a failure the policy does not restart, go
        to FAILED (``error``); an engine that cannot reach a running attempt
        raises its error (the state stays)."""
        prev = self.state
        if prev is State.FORMING:
            nxt = self._form()
        elif prev is State.RUNNING:
            nxt = self._watch()
        elif prev is State.RESTARTING:
            nxt = self._restart()
        else:
            nxt = prev
        self._move(nxt)
        return prev, nxt

    def _move(self, nxt):
        prev, self.state = self.state, nxt
        if nxt is not prev:
            self.transitions.append((prev, nxt))
            logger.debug("%s attempt %d: %s -> %s", self.name, self.attempt, prev.value, nxt.value)
            if self.tracker is not None:
                self._track(nxt)

    def _track(self, nxt):
        """The MLflow run (``mlflow=``) follows the loop: the policy's
        history as tags at each move (libtfos's tfos__tracker_history), and
        the run's end with the loop's: FINISHED or FAILED."""
        self.tracker.history(self.policy)
        if nxt in TERMINAL:
            self.tracker.metric("tfos.partitions_refed", float(self.partitions_refed))
            self.tracker.end("FINISHED" if nxt is State.DONE else "FAILED")

    def fed(self, rows, seconds):
        """A feed's totals (feed_until_delivered) to the MLflow run."""
        if self.tracker is not None:
            self.tracker.metric("tfos.feed.rows", float(rows))
            self.tracker.metric("tfos.feed.rows_per_s", rows / seconds if seconds > 0 else 0.0)

    def _form(self):
        try:
            self.engine.form(self.attempt, self.formed == 0)
        except BaseException as exc:
            self._settle("the cluster did not form")
            self.engine.release()
            if not isinstance(exc, Exception):
                raise
            self.error = exc
            return State.FAILED
        self.formed += 1
        return State.RUNNING

    def _watch(self):
        snap = self.engine.snapshot()
        if snap.failed:
            return self._after_failure(snap)
        if snap.state == _tfos.STATE_DONE and snap.drained:
            return self._after_drain(snap)
        if snap.state == _tfos.STATE_DONE:
            if not snap.stopped:
                self._wait_stopped()
            self.engine.release()
            return State.DONE
        return State.RUNNING

    def _after_failure(self, snap):
        """The attempt failed: stop it (bounded), then RESTARTING or FAILED
        as the policy decides -- asked here with the failure's cause code,
        unless the attempt's coordinator asked it already (snap.decision)."""
        self.last_failure = snap
        self._settle("the cluster failed", snap)
        decision = _tfos.RAISE
        if self.restart:
            decision = snap.decision or self.policy.decide(snap.cause or _tfos.CAUSE_EXIT, summary=snap.summary,
                                                           progress=self.engine.progress(), **snap.record)
        if decision == _tfos.RESTART and self.restart:
            return State.RESTARTING
        self.engine.release()
        self.error = self.engine.error(failure_text(self.policy, snap.failure or "the cluster stopped",
                                                    self.context))
        return State.FAILED

    def _after_drain(self, snap):
        """The attempt drained (a Spark executor was decommissioned): every
        node checkpointed at the drain step and ended. The cluster is formed
        again, on the executors Spark has then, and resumes from that
        checkpoint with no step lost; it counts as a restart of the budget
        (cause: executor lost), and without one left the run fails."""
        if not snap.stopped:
            self._wait_stopped()
        self.last_failure = snap
        if getattr(self.engine, "elastic", None) is not None and self.restart:
            return self._resize(snap)
        decision = _tfos.RAISE
        if self.restart:
            decision = self.policy.decide(_tfos.CAUSE_EXECUTOR_LOST, summary=snap.summary,
                                          progress=self.engine.progress())
        if decision == _tfos.RESTART and self.restart:
            return State.RESTARTING
        self.engine.release()
        self.error = self.engine.error(failure_text(self.policy, snap.summary, self.context))
        return State.FAILED

    def _resize(self, snap):
        """An elastic cluster drained (capacity going, or come back): not a
        failure. The next size is what the executors allow (a bounded wait);
        the policy records the resize without spending a restart."""
        before = self.engine.size
        self.engine.release()
        try:
            after = self.engine.next_size()
        except Exception as exc:  # noqa: BLE001 -- fewer executors than min_nodes: the run fails, saying so
            self.error = exc
            return State.FAILED
        what = "resized from %d to %d nodes" % (before, after) if after != before else "re-formed at %d nodes" % after
        self.policy.resize(_tfos.CAUSE_EXECUTOR_LOST, "%s: %s" % (what, snap.summary))
        self.resized = True
        return State.RESTARTING

    def _restart(self):
        self.engine.release()
        snap = self.last_failure
        if self.resized:
            self.resized = False
            logger.warning("%s; re-forming the cluster (attempt %d; a resize, not a restart: %d of %d restarts "
                           "left)", snap.summary, self.attempt, self.policy.max_restarts -
                           (self.attempt - 1 - self.policy.resizes), self.policy.max_restarts)
            self.context = ""
            return State.FORMING
        logger.warning("%s; re-forming the cluster (attempt %d of %d)", snap.summary or snap.failure,
                       self.attempt, self.policy.max_restarts + 1 + self.policy.resizes)
        self.context = ""
        return State.FORMING

    def _settle(self, reason, snap=None):
        """Stop the attempt and wait (``engine.stop_timeout``) for its nodes."""
        if snap is not None and snap.stopped:
            return
        self.engine.stop(reason)
        self._wait_stopped()

    def _wait_stopped(self):
        try:
            wait_until(self._stopped, self.engine.stop_timeout,
                       "the nodes of %s attempt %d to stop" % (self.name, self.attempt), self.engine.poll)
        except WaitTimeout as exc:
            logger.warning("%s: %s; going on", self.name, exc)

    def _stopped(self):
        try:
            return self.engine.snapshot().stopped
        except ClusterError:  # cannot be reached: nothing left to wait for
            return True

    def _advance(self):
        """Step while the loop is FORMING or RESTARTING."""
        while self.state in (State.FORMING, State.RESTARTING):
            self.step()

    # -- what the fronts call
    def start(self):
        """Form the first attempt (FORMING -> RUNNING); raises when it does
        not form."""
        self._advance()
        self.check()

    def check(self):
        """Raise ``error`` when the loop has FAILED."""
        if self.state is State.FAILED and self.error is not None:
            raise self.error

    def failed(self, wait=None):
        """The running attempt's failure or drain (a Snapshot), waiting up to
        ``wait`` seconds (default FAILURE_WAIT, plus the grace of a drain
        under way) for its coordinator to record one; None when nothing
        failed (or the attempt is done without a drain)."""
        def seen():
            snap = self.engine.snapshot()
            return snap if snap.failed or snap.state == _tfos.STATE_DONE else None

        if wait is None:  # a drain under way ends within its grace
            wait = self.FAILURE_WAIT + getattr(self.engine, "drain_pending", lambda: 0.0)()
        try:
            snap = wait_until(seen, wait, "%s attempt %d to record a failure" % (self.name, self.attempt),
                              self.engine.poll)
        except WaitTimeout:
            return None
        return snap if snap.failed or snap.drained else None

    def recover(self, snap, context=""):
        """The running attempt failed or drained (``snap``, from ``failed()``):
        RUNNING -> RESTARTING -> FORMING -> RUNNING, or FAILED, raised with
        ``context`` (a line saying what the feed saw) in its message."""
        self.check()
        self.context = context
        self._move(self._after_drain(snap) if snap.drained else self._after_failure(snap))
        self._advance()
        self.check()

    def recover_if_failed(self):
        """recover() when the running attempt has failed; else nothing."""
        self.check()
        if self.state is State.RUNNING:
            snap = self.engine.snapshot()
            if snap.failed:
                self.recover(snap)

    def finish(self, timeout, restart=True):
        """Watch (the engine's poll interval) until every program returned
        (DONE) or the cluster failed for good (FAILED: raised). With
        ``restart``, a failure re-forms the cluster while the policy allows.
        Raises WaitTimeout after ``timeout`` seconds; the attempt still runs
        then (``abort()`` stops it)."""
        self.check()
        self.restart = restart

        def rested():
            self.step()
            self._advance()
            return self.state in TERMINAL

        wait_until(rested, timeout, "every program of %s to finish" % self.name, self.engine.poll)
        self.check()

    def abort(self, reason, error=None):
        """Stop the attempt now (a bounded wait for its nodes) and release
        it: FAILED, with ``error`` (default: the one recorded, or "the tfos
        cluster was stopped: reason")."""
        if self.state in TERMINAL:
            return
        self._settle(reason)
        self.engine.release()
        self.error = error or self.error or self.engine.error("the tfos cluster was stopped: %s" % reason)
        self._move(State.FAILED)


FeedRound = collections.namedtuple("FeedRound", "outcomes error")
FeedRound.__doc__ = """One feeding job's outcome: ``outcomes`` {partition: (state, info, rows)} (state: done,
terminated, aborted, skipped, before), ``error`` the job's exception or None."""

FeedResult = collections.namedtuple("FeedResult", "rows terminated seconds")
FeedResult.__doc__ = """What feed_until_delivered fed: rows, partitions not wanted (terminated), seconds."""


def elastic_bounds(layout, total, min_nodes, max_nodes, wait, local, driver_ps_nodes, error, size_name):
    """An elastic run's bounds ({"min": nodes on executors, "max": ..., "wait":
    seconds, ...}), or None when min_nodes leaves the size fixed. Only workers
    come and go: ps, chief and evaluator are the cluster's fixed part.
    ``total``: the largest size, the launcher's ``size_name`` argument;
    ``error``: the exception class a bad value raises."""
    if max_nodes is not None and int(max_nodes) != total:
        raise error("max_nodes=%s: the largest size is %s=%d; pass max_nodes=%d or leave it out" % (
            max_nodes, size_name, total, total))
    if min_nodes is None or int(min_nodes) >= total:
        if min_nodes is not None and int(min_nodes) > total:
            raise error("min_nodes=%d is more than %s=%d" % (min_nodes, size_name, total))
        return None
    fixed = layout["num_ps"] + int(layout["chief"]) + int(layout["evaluator"])
    least = fixed + (0 if layout["chief"] else 1)  # someone must train: the chief, else one worker
    if int(min_nodes) < least:
        raise error("min_nodes=%d: the cluster needs at least %d nodes (%d ps, %s%s and %s); only workers "
                    "come and go" % (min_nodes, least, layout["num_ps"], "a chief" if layout["chief"] else
                                     "no chief", ", an evaluator" if layout["evaluator"] else "",
                                     "no worker" if layout["chief"] else "one worker"))
    if local:
        raise error("min_nodes: a local master's executors do not come and go; an elastic size needs a "
                    "cluster manager (standalone, YARN, Kubernetes)")
    if float(wait) <= 0:
        raise error("elastic_wait=%r: give the seconds to wait for lost capacity to come back (> 0)" % (wait,))
    on_driver = layout["num_ps"] if driver_ps_nodes else 0
    return {"min": int(min_nodes) - on_driver, "max": total - on_driver, "wait": float(wait),
            "min_nodes": int(min_nodes), "max_nodes": total, "on_driver": on_driver}


def elastic_size(usable, el, reservation_timeout, error):
    """Nodes on executors for an elastic cluster's next attempt: el["max"]
    when ``usable()`` (the executors a node can start on now) reaches it
    within el["wait"] seconds, else that count, waiting up to
    ``reservation_timeout`` for el["min"]; raises ``error`` (an exception
    class) when even that many do not come."""
    def at_least(want):
        def enough():
            n = usable()
            return n if n >= want else None
        return enough

    try:
        return min(wait_until(at_least(el["max"]), el["wait"], "%d usable Spark executors (every node)" % el["max"],
                              JOB), el["max"])
    except WaitTimeout:
        pass
    have = usable()
    if have >= el["min"]:
        logger.warning("%d of %d executors usable after %.0f s (elastic_wait): forming %d of %d nodes",
                       have, el["max"], el["wait"], have + el["on_driver"], el["max_nodes"])
        return have
    try:
        have = wait_until(at_least(el["min"]), reservation_timeout, "%d usable Spark executors (min_nodes=%d)" % (
            el["min"], el["min_nodes"]), JOB)
    except WaitTimeout:
        raise error("the elastic cluster needs at least min_nodes=%d nodes, but the application has %d usable "
                    "executors after %.0f s: give it more executors, or lower min_nodes" % (
                        el["min_nodes"], usable(), el["wait"] + reservation_timeout)) from None
    return min(have, el["max"])


def feed_until_delivered(controller, run_round, checkpoint_dir, total=None):
    """Feed until every partition is delivered, re-forming the cluster when
    a node fails (``controller.recover``) and feeding again what was not
    delivered: at-least-once from the nodes' acknowledgements, or, when the
    program saved its feed position with its checkpoint
    (``DataFeed.save_position``), from where that checkpoint stands.

    ``run_round(delivered, offsets)`` runs one feeding job that skips the
    partitions in ``delivered`` and the first ``offsets[p]`` rows of
    partition p, and returns a :class:`FeedRound`. ``total``: the number of
    partitions, when the engine knows it (else a round is complete when its
    job succeeded and no partition was lost). Raises the engine's error when
    partitions were not delivered and no node failed, or when the cluster
    fails for good. Returns a :class:`FeedResult`."""
    engine = controller.engine
    delivered, not_wanted, offsets = set(), set(), {}
    rows = terminated = 0
    started, t0 = time.time(), time.monotonic()
    while True:
        rnd = run_round(frozenset(delivered), dict(offsets))
        lost, missing = [], False
        for part, (state, info, n) in sorted(rnd.outcomes.items()):
            if state in ("done", "terminated"):
                delivered.add(part)
                rows += n or 0
                if state == "terminated":
                    terminated += 1
                    not_wanted.add(part)
            elif state == "aborted":
                lost.append((part, info))
            elif state == "skipped":
                missing = True
        if total is not None:
            complete = len(delivered) >= total
        else:
            complete = rnd.error is None and not lost and not missing
        if complete:
            break
        snap = controller.failed()
        if snap is None:
            if rnd.error is not None:
                raise engine.error("feeding the cluster failed: %s" % _short(rnd.error)) from rnd.error
            left = "%d of %d partitions" % (total - len(delivered), total) if total is not None else "partitions"
            raise engine.error("%s were not delivered, and no node failed: %s" % (left, lost[:3]))
        context = ""
        ended = "the drain" if getattr(snap, "drained", False) else "the failure"
        if lost:
            context = "%d partitions were being fed when it %s; the first: %s" % (
                len(lost), "drained" if ended == "the drain" else "failed", lost[0][1])
        controller.recover(snap, context)
        # where the surviving checkpoint stands: when the program saved its
        # feed position with it (DataFeed.save_position), the partitions
        # consumed after that checkpoint are fed again and those before it
        # are not (else: at-least-once from the acknowledgements)
        positions = _feed.read_positions(checkpoint_dir, since=started)
        if positions is not None:
            whole, offsets = positions
            after = len(delivered - whole - not_wanted)
            delivered = (set(whole) & set(range(total)) if total is not None else set(whole)) | not_wanted
            logger.warning("attempt %d resumes the feed where the checkpoint stands: %d partitions "
                           "recorded whole with it, %d in part; %d delivered after it are fed again",
                           controller.attempt, len(whole), len(offsets), after)
        controller.partitions_refed += len(lost)
        engine.refed(controller.partitions_refed)
        if total is not None:
            logger.warning("attempt %d: feeding again %d partitions not delivered before %s "
                           "(%d of them were in flight)", controller.attempt, total - len(delivered), ended, len(lost))
        else:
            logger.warning("attempt %d: feeding again the partitions not delivered before %s (%d were "
                           "in flight)", controller.attempt, ended, len(lost))
    if terminated:
        logger.info("%d partitions were not fed: the nodes had terminated their feed", terminated)
    secs = time.monotonic() - t0
    logger.info("fed %d rows in %.1f s (%.0f rows/s)", rows, secs, rows / secs if secs > 0 else 0.0)
    controller.fed(rows, secs)
    return FeedResult(rows, terminated, secs)


def _short(exc, limit=4000):
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + " ..."
