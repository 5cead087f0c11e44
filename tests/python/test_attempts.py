"""The attempt loop of tfos's Spark launchers (tfos/_spark/attempts.py) and
its one wait helper (tfos/_spark/wait.py), without Spark: a small engine
written here plays the cluster, and the real restart policy of libtfos
(``_tfos.RestartPolicy``) decides."""
import logging
import time

import pytest

from tfos import _tfos
from tfos._launch import ClusterError
from tfos._spark import wait as waiting
from tfos._spark.attempts import (AttemptController, Engine, FeedRound, Snapshot, State, cause_code,
                                  elastic_bounds, elastic_size, feed_until_delivered)

RUNNING, DONE, FAILED = _tfos.STATE_RUNNING, _tfos.STATE_DONE, _tfos.STATE_FAILED
FAST = waiting.Schedule(0.001, 0.0, 0.001)


class ScriptedEngine(Engine):
    """An engine whose attempts do what the test says: ``forms`` (one entry
    per attempt: True, or the text of the error form() raises) and
    ``looks`` (the Snapshots snapshot() returns, one per look; the last one
    repeats). Records every call."""

    poll = FAST
    stop_timeout = 1.0

    def __init__(self, forms=(True,), looks=()):
        self.forms = list(forms)
        self.looks = list(looks)
        self.calls = []
        self.stopped = False

    def error(self, text):
        return ClusterError(text, 1, None)

    def form(self, attempt, first):
        self.calls.append(("form", attempt, first))
        self.stopped = False
        ok = self.forms.pop(0) if self.forms else True
        if ok is not True:
            raise self.error(ok)

    def snapshot(self):
        snap = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
        return snap._replace(stopped=snap.stopped or self.stopped)

    def end_feed(self):
        self.calls.append(("end_feed",))

    def stop(self, reason):
        self.calls.append(("stop", reason))
        self.stopped = True

    def release(self):
        self.calls.append(("release",))

    def progress(self):
        return ""


def running():
    return Snapshot(RUNNING)


def failed(text="worker:1 (executor 1, host h) failed: exit code 1", cause=_tfos.CAUSE_EXIT, decision=0):
    record = {"node": "worker:1", "job": "worker", "exception": "ValueError", "where": "train.py:3"}
    return Snapshot(FAILED, text + "\nTraceback ...\nValueError: boom", cause, decision, text, True, record)


def done():
    return Snapshot(DONE, stopped=True)


def test_form_fails_goes_to_failed_and_cleans_up():
    engine = ScriptedEngine(forms=["the tfos cluster did not form: no executor"], looks=[running()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3))
    assert ctl.state is State.FORMING
    assert ctl.step() == (State.FORMING, State.FAILED)
    assert "did not form: no executor" in str(ctl.error)
    assert ("stop", "the cluster did not form") in engine.calls and engine.calls[-1] == ("release",)
    with pytest.raises(ClusterError, match="no executor"):
        ctl.start()
    assert ctl.step() == (State.FAILED, State.FAILED)  # terminal


def test_node_fails_policy_restarts_then_running(caplog):
    engine = ScriptedEngine(looks=[running(), failed(), running()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(2), name="cluster t")
    ctl.start()
    assert ctl.state is State.RUNNING and ctl.attempt == 1
    assert ctl.step() == (State.RUNNING, State.RUNNING)
    with caplog.at_level(logging.WARNING, logger="tfos"):
        assert ctl.step() == (State.RUNNING, State.RESTARTING)
        assert ctl.attempt == 2  # the policy said RESTART: attempt 2 comes
        assert ctl.step() == (State.RESTARTING, State.FORMING)
    assert "worker:1 (executor 1, host h) failed: exit code 1; re-forming the cluster (attempt 2 of 3)" in caplog.text
    assert ctl.step() == (State.FORMING, State.RUNNING)
    assert [c for c in engine.calls if c[0] == "form"] == [("form", 1, True), ("form", 2, False)]
    assert ctl.transitions == [(State.FORMING, State.RUNNING), (State.RUNNING, State.RESTARTING),
                               (State.RESTARTING, State.FORMING), (State.FORMING, State.RUNNING)]
    assert [a["decision"] for a in ctl.policy.history] == ["restart"]
    assert ctl.policy.history[0]["cause"] == "exit"


def test_raise_goes_to_failed_with_the_history():
    """The same exception twice with no checkpoint between: the policy's
    deterministic-failure rule says RAISE on attempt 2; the error carries
    the failure, the verdict and both attempts."""
    text = "worker:1 (executor 1, host h) failed: exit code 1"
    engine = ScriptedEngine(looks=[failed(text)])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3))
    ctl.start()
    with pytest.raises(ClusterError) as err:
        ctl.finish(timeout=5)
    assert ctl.state is State.FAILED
    msg = str(err.value)
    assert msg.startswith("the tfos cluster failed: " + text), msg
    assert "attempts (1 restarts):" in msg, msg
    assert [a["decision"] for a in ctl.policy.history] == ["restart", "raise"]
    assert (State.RUNNING, State.FAILED) in ctl.transitions
    assert engine.calls[-1] == ("release",)
    with pytest.raises(ClusterError):  # FAILED stays FAILED, and says why again
        ctl.check()


def test_no_restart_left_raises_with_the_verdict():
    engine = ScriptedEngine(looks=[failed(cause=_tfos.CAUSE_SIGNAL)])
    ctl = AttemptController(engine, _tfos.RestartPolicy(0))
    ctl.start()
    assert ctl.step() == (State.RUNNING, State.FAILED)
    assert ctl.policy.history[0]["cause"] == "signal"


def test_the_coordinators_own_decision_is_taken_as_it_is():
    """The driver engine's coordinator applied the policy itself: the
    controller does not ask it a second time."""
    engine = ScriptedEngine(looks=[failed(decision=_tfos.RESTART), running()])
    policy = _tfos.RestartPolicy(3)
    ctl = AttemptController(engine, policy)
    ctl.start()
    assert ctl.step() == (State.RUNNING, State.RESTARTING)
    assert policy.history == []  # nobody asked it here


def test_finish_without_restart_raises_the_failure():
    engine = ScriptedEngine(looks=[running(), failed()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3))
    ctl.start()
    with pytest.raises(ClusterError, match="ValueError: boom"):
        ctl.finish(timeout=5, restart=False)
    assert ctl.policy.history == []  # after the feed ended there is nothing to restart for


def test_done():
    engine = ScriptedEngine(looks=[running(), running(), done()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3))
    ctl.start()
    engine.end_feed()
    ctl.finish(timeout=5)
    assert ctl.state is State.DONE and ctl.error is None
    assert ctl.transitions[-1] == (State.RUNNING, State.DONE)
    assert engine.calls[-1] == ("release",)
    assert ctl.step() == (State.DONE, State.DONE)


def test_finish_times_out_saying_what_it_waited_for():
    engine = ScriptedEngine(looks=[running()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3), name="cluster abc")
    ctl.start()
    with pytest.raises(waiting.WaitTimeout) as err:
        ctl.finish(timeout=0.05)
    assert str(err.value) == "gave up after 0.05 s waiting for every program of cluster abc to finish"
    assert ctl.state is State.RUNNING
    ctl.abort("shutdown timed out")
    assert ctl.state is State.FAILED and "shutdown timed out" in str(ctl.error)
    assert ("stop", "shutdown timed out") in engine.calls


class ElasticEngine(ScriptedEngine):
    """A ScriptedEngine with an elastic size: ``sizes`` are what next_size()
    finds, one per resize (an exception instance is raised)."""

    elastic = {"min_nodes": 1, "max_nodes": 2}

    def __init__(self, sizes, **kw):
        super().__init__(**kw)
        self.sizes, self.size = list(sizes), 2

    def next_size(self):
        n = self.sizes.pop(0)
        if isinstance(n, Exception):
            raise n
        self.calls.append(("next_size", n))
        self.size = n
        return n


def drained(reason):
    return Snapshot(DONE, stopped=True, summary="drained: " + reason, drained=True)


def test_an_elastic_drain_is_a_resize_that_spends_no_restart(caplog):
    """An elastic engine's drain re-forms at the size next_size() finds,
    recorded as a resize: max_restarts=0 still lets it go on, twice, and a
    real failure afterwards still finds its budget empty."""
    engine = ElasticEngine([1, 2], looks=[drained("Spark executor 1 decommissioned"),
                                          drained("2 Spark executors usable for 1 of 2 nodes: growing to 2"),
                                          failed(cause=_tfos.CAUSE_SIGNAL)])
    ctl = AttemptController(engine, _tfos.RestartPolicy(0), name="cluster e")
    ctl.start()
    with caplog.at_level(logging.WARNING, logger="tfos"):
        for _ in range(2):
            assert ctl.step() == (State.RUNNING, State.RESTARTING)
            assert ctl.step() == (State.RESTARTING, State.FORMING)
            assert ctl.step() == (State.FORMING, State.RUNNING)
        assert ctl.step() == (State.RUNNING, State.FAILED)   # a signal: no restart in the budget of 0
    assert [c for c in engine.calls if c[0] in ("form", "next_size")] == [
        ("form", 1, True), ("next_size", 1), ("form", 2, False), ("next_size", 2), ("form", 3, False)]
    hist = ctl.policy.history
    assert [h["decision"] for h in hist] == ["resize", "resize", "raise"] and ctl.policy.resizes == 2
    assert hist[0]["summary"] == "resized from 2 to 1 nodes: drained: Spark executor 1 decommissioned"
    assert hist[1]["summary"].startswith("resized from 1 to 2 nodes: drained: 2 Spark executors usable")
    assert "a resize, not a restart: 0 of 0 restarts left" in caplog.text
    assert "attempts (0 restarts, 2 resizes):" in str(ctl.error)


def test_an_elastic_cluster_below_min_nodes_fails_saying_so():
    engine = ElasticEngine([ClusterError("the elastic cluster needs at least min_nodes=2 nodes", 1, None)],
                           looks=[drained("Spark executor 1 decommissioned")])
    ctl = AttemptController(engine, _tfos.RestartPolicy(3))
    ctl.start()
    assert ctl.step() == (State.RUNNING, State.FAILED)
    assert "min_nodes=2" in str(ctl.error) and ctl.policy.history == []
    assert engine.calls[-1] == ("release",)


WORKERS = {"num_ps": 0, "num_workers": 2, "chief": False, "evaluator": False}


def bounds(min_nodes, layout=WORKERS, total=2, max_nodes=None, wait=5.0, local=False, on_driver=False):
    return elastic_bounds(layout, total, min_nodes, max_nodes, wait, local, on_driver, ValueError, "num_nodes")


@pytest.mark.parametrize("call, says", [
    (lambda: bounds(3), "min_nodes=3 is more than num_nodes=2"),
    (lambda: bounds(1, max_nodes=3), "max_nodes=3: the largest size is num_nodes=2"),
    (lambda: bounds(1, layout=dict(WORKERS, num_workers=1, chief=True, evaluator=True), total=3),
     "min_nodes=1: the cluster needs at least 2 nodes (0 ps, a chief, an evaluator and no worker); only workers"),
    (lambda: bounds(0), "min_nodes=0: the cluster needs at least 1 nodes (0 ps, no chief and one worker)"),
    (lambda: bounds(1, local=True), "a local master's executors do not come and go"),
    (lambda: bounds(1, wait=0), "elastic_wait=0: give the seconds"),
])
def test_elastic_bounds_refuse_what_cannot_be(call, says):
    # the one check of TFCluster.run's and tfos.spark.Cluster's min_nodes (each names its own size argument)
    with pytest.raises(ValueError) as info:
        call()
    assert says in str(info.value)


def test_elastic_bounds():
    assert bounds(None) is None and bounds(2) is None  # a fixed size
    assert bounds(1) == {"min": 1, "max": 2, "wait": 5.0, "min_nodes": 1, "max_nodes": 2, "on_driver": 0}
    ps = dict(WORKERS, num_ps=1)
    assert bounds(2, layout=ps, total=3, on_driver=True)["min"] == 1  # a ps on the driver is not an executor's


def test_elastic_size_waits_for_every_node_then_takes_what_there_is(caplog):
    el = bounds(1, total=3, wait=0.6)
    assert elastic_size(lambda: 3, el, 1.0, ValueError) == 3
    assert elastic_size(lambda: 5, el, 1.0, ValueError) == 3  # never more than the largest size
    seen = iter([1, 1, 3])  # the third look finds every executor
    assert elastic_size(lambda: next(seen, 3), el, 1.0, ValueError) == 3
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tfos"):
        assert elastic_size(lambda: 2, el, 1.0, ValueError) == 2
    assert time.monotonic() - t0 >= 0.6  # elastic_wait for all of them first
    assert "2 of 3 executors usable after 1 s (elastic_wait): forming 2 of 3 nodes" in caplog.text
    with pytest.raises(ValueError, match="needs at least min_nodes=1 nodes, but the application has 0 usable "
                                         "executors after 2 s"):
        elastic_size(lambda: 0, el, 1.0, ValueError)


def test_cause_codes():
    assert cause_code("signal") == _tfos.CAUSE_SIGNAL
    assert cause_code("executor_lost") == _tfos.CAUSE_EXECUTOR_LOST
    assert cause_code("hang") == _tfos.CAUSE_HANG
    assert cause_code("") == _tfos.CAUSE_EXIT


def test_feed_refeeds_what_a_failed_attempt_did_not_deliver(tmp_path, caplog):
    """Round 1 delivers partitions 0 and 1, loses 2 in flight and never
    reaches 3; the cluster re-forms and round 2 is asked for 2 and 3 only."""
    engine = ScriptedEngine(looks=[running(), failed(), running()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(2))
    ctl.start()
    asked = []

    def run_round(delivered, offsets):
        asked.append(sorted(delivered))
        if len(asked) == 1:
            engine.looks = [failed(), running()]
            return FeedRound({0: ("done", None, 10), 1: ("terminated", None, 0),
                              2: ("aborted", "feeding partition 2 failed", 0), 3: ("skipped", "", 0)}, None)
        return FeedRound({2: ("done", None, 10), 3: ("done", None, 10)}, None)

    with caplog.at_level(logging.WARNING, logger="tfos"):
        res = feed_until_delivered(ctl, run_round, str(tmp_path), total=4)
    assert asked == [[], [0, 1]]
    assert res.rows == 30 and res.terminated == 1
    assert ctl.partitions_refed == 1 and ctl.attempt == 2
    assert "attempt 2: feeding again 2 partitions not delivered before the failure (1 of them were in flight)" \
        in caplog.text


def test_feed_without_a_failure_says_so():
    engine = ScriptedEngine(looks=[running()])
    ctl = AttemptController(engine, _tfos.RestartPolicy(2))
    ctl.FAILURE_WAIT = 0.05
    ctl.start()
    with pytest.raises(ClusterError, match="feeding the cluster failed: bad row"):
        feed_until_delivered(ctl, lambda d, o: FeedRound({}, ValueError("bad row")), "/nonexistent")


def test_wait_until_returns_the_value_and_times_out_naming_what():
    t0 = time.monotonic()
    box = []
    assert waiting.wait_until(lambda: box.append(1) or (len(box) >= 3 and "yes"), 5, "three looks") == "yes"
    assert time.monotonic() - t0 < 1.0  # the first looks are 20 ms apart
    with pytest.raises(waiting.WaitTimeout) as err:
        waiting.wait_until(lambda: 0, 0.2, "the coordinator to answer")
    assert isinstance(err.value, TimeoutError)
    assert str(err.value) == "gave up after 0.2 s waiting for the coordinator to answer"
    assert err.value.what == "the coordinator to answer" and err.value.last == 0


def test_wait_schedule():
    s = waiting.Schedule(0.02, 2.0, 0.5)
    assert s.interval(0.0) == 0.02 and s.interval(1.99) == 0.02 and s.interval(2.0) == 0.5
    assert waiting.JOB.interval(0.0) == waiting.JOB.slow  # a look that is a Spark job is never fast
