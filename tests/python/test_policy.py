"""The decisions libtfos owns, seen through `tfos run` and the extension:
the restart policy stops a deterministic failure after one restart (and
keeps retrying one that makes checkpoint progress), the survivors of a
failed node are killed without waiting out the stop grace, a detached spawn
reports a failed exec at once, and a producer waits for its partition's
acknowledgement with one blocking call on the ring."""
import multiprocessing as mp
import os
import re
import textwrap
import time

import pytest

from conftest import PY, pids_with, run_tfos, wait_for

t = pytest.importorskip("tfos._tfos")

FAILING = textwrap.dedent('''
    import os, sys, time
    marker, ckpt_each_attempt = sys.argv[1], sys.argv[2] == "1"
    attempt = int(os.environ["TFOS_ATTEMPT"])
    job = os.environ["TFOS_JOB_NAME"]
    print("%s attempt %d" % (job, attempt), flush=True)
    if ckpt_each_attempt and job == "worker" and os.environ["TFOS_TASK_INDEX"] == "0":
        with open(os.path.join(os.environ["TFOS_CHECKPOINT_DIR"], "ckpt-%d" % attempt), "w") as f:
            f.write("weights")

    def load_batch(n):
        raise ValueError("bad batch size %d" % n)

    if os.environ["TFOS_TASK_INDEX"] == "1":
        time.sleep(0.5)
        load_batch(-1)
    time.sleep(600)
''')


def _failing(tmp_path, marker):
    path = tmp_path / "failing.py"
    path.write_text(FAILING)
    return str(path)


def test_deterministic_failure_costs_one_restart_not_the_budget(tmp_path, marker):
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "3", "--grace", "1", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, _failing(tmp_path, marker), marker, "0"], timeout=240)
    assert r.returncode == 1, r.stderr[-3000:]
    attempts = sorted(set(int(a) for a in re.findall(r"\[worker:1\] worker attempt (\d+)", r.stdout)))
    assert attempts == [1, 2], r.stdout[-2000:]  # one restart, then stop: not 4 attempts
    assert "failed 2 times (--max-restarts 3):" in r.stderr, r.stderr[-3000:]
    line = FAILING.splitlines().index("    raise ValueError(\"bad batch size %d\" % n)") + 1
    assert "not restarted: the same ValueError at %s:%d ended attempts 1 and 2 (worker)" % (
        tmp_path / "failing.py", line) in r.stderr, r.stderr[-3000:]
    assert "deterministic, so tfos stops retrying (2 of 3 restarts unused)" in r.stderr
    assert "-> deterministic: not restarted" in r.stderr
    assert wait_for(lambda: not pids_with(marker), 10)


def test_the_same_failure_with_checkpoint_progress_is_retried(tmp_path, marker):
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "2", "--grace", "1", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, _failing(tmp_path, marker), marker, "1"], timeout=240)
    assert r.returncode == 1, r.stderr[-3000:]
    attempts = sorted(set(int(a) for a in re.findall(r"\[worker:1\] worker attempt (\d+)", r.stdout)))
    assert attempts == [1, 2, 3], r.stdout[-2000:]  # a checkpoint was written each time: the budget decides
    assert "failed 3 times (--max-restarts 2):" in r.stderr, r.stderr[-3000:]
    assert "not restarted: every restart is used (max_restarts 2)" in r.stderr
    assert "deterministic" not in r.stderr
    assert wait_for(lambda: not pids_with(marker), 10)


SURVIVOR = textwrap.dedent('''
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a trainer blocked in a collective behaves
    print("up %s" % os.environ["TFOS_TASK_INDEX"], flush=True)
    if os.environ["TFOS_TASK_INDEX"] == "1":
        time.sleep(1.0)
        sys.exit(4)
    time.sleep(600)
''')


def test_survivors_of_a_failed_node_are_not_given_the_stop_grace(tmp_path, marker):
    prog = tmp_path / "survivor.py"
    prog.write_text(SURVIVOR)
    t0 = time.monotonic()
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "0", "--grace", "120", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, str(prog), marker], timeout=100)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stderr[-3000:]
    assert "worker:1 (executor 1, host 127.0.0.1" in r.stderr and "exit code 4" in r.stderr
    # worker:0 ignores SIGTERM: had it been given the 120 s grace, the run
    # (bounded at 100 s above) could not have ended
    assert took < 100
    assert re.search(r"worker:0 stopped: signal 9", r.stderr), r.stderr[-3000:]
    assert wait_for(lambda: not pids_with(marker), 10)


def test_spawn_detached_reports_a_failed_exec_at_once(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(FileNotFoundError) as err:
        t.spawn_detached(["/nonexistent/tfos-agent", "node"], dict(os.environ))
    assert err.value.errno == 2 and err.value.filename == "/nonexistent/tfos-agent"
    assert time.monotonic() - t0 < 10
    data = tmp_path / "data.txt"
    data.write_text("not a program")
    data.chmod(0o644)
    with pytest.raises(PermissionError):
        t.spawn_detached([str(data)], {})  # not executable
    pid = t.spawn_detached(["/bin/sleep", "0.3"], {})
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # detached: not our child
    assert wait_for(lambda: not t.pid_alive(pid), 10)


def _consume_and_ack(fd, n, ack, die=False):
    ring = t.Ring(fd, t.ROLE_CONSUMER)
    ends = 0
    while ends < n:
        for tag, _, _ in ring.read(10000):
            if tag == t.TAG_PARTITION_END:
                ends += 1
                if ack:
                    ring.ack(1)
    time.sleep(0.3)
    if die:
        os._exit(0)  # gone without closing its handle, as a killed program is
    ring.close()  # closing on purpose: the rest of the feed is not wanted


def test_producer_waits_for_acknowledgement_on_the_ring():
    fd = t.ring_create(1 << 16)
    prod = t.Ring(fd, t.ROLE_PRODUCER)
    for part in range(2):
        prod.partition_begin(part, 5000)
        prod.write(t.TAG_DATA, b"row", 5000)
        prod.partition_end(5000)
    with pytest.raises(TimeoutError):
        prod.wait_acked(1, 0)  # nobody consumed yet
    p = mp.get_context("fork").Process(target=_consume_and_ack, args=(fd, 2, True))
    p.start()
    prod.wait_acked(2, 10000)  # both partitions taken and acknowledged
    assert prod.stats()["acked"] >= 2
    p.join(10)
    # a consumer that reads without acknowledging and dies: FeedClosed; one
    # that closes its feed on purpose (DataFeed.terminate): FeedEnded
    for die, exc in ((True, t.FeedClosed), (False, t.FeedEnded)):
        fd2 = t.ring_create(1 << 16)
        prod2 = t.Ring(fd2, t.ROLE_PRODUCER)
        prod2.partition_begin(0, 5000)
        prod2.partition_end(5000)
        q = mp.get_context("fork").Process(target=_consume_and_ack, args=(fd2, 1, False, die))
        q.start()
        with pytest.raises(exc):
            prod2.wait_acked(1, 10000)
        q.join(10)
        prod2.close()
        os.close(fd2)
    prod.close()
    os.close(fd)


def test_defaults_and_roles_come_from_libtfos():
    from tfos import TFCluster
    import inspect
    sig = inspect.signature(TFCluster.run)
    assert sig.parameters["reservation_timeout"].default == t.DEFAULTS["reservation_timeout_spark"] == 600
    assert sig.parameters["max_restarts"].default == t.DEFAULTS["max_restarts"]
    assert sig.parameters["grace"].default == t.DEFAULTS["stop_grace"]
    assert t.layout_roles(1, 2, True, True) == [("ps", 0), ("chief", 0), ("evaluator", 0), ("worker", 0),
                                                ("worker", 1)]


def test_restart_policy_decide_takes_every_field_of_a_failure():
    """decide() takes the failure's fields by keyword, exit_code an int
    (its format string had one string too many: exit_code raised TypeError)."""
    p = t.RestartPolicy(2)
    kw = dict(node="worker:1", job="worker", exception="ValueError", where="train.py:3", summary="worker:1 failed",
              progress="")
    assert p.decide(t.CAUSE_EXIT, exit_code=1, **kw) == t.RESTART
    assert p.history[-1]["exit_code"] == 1
    # the same exception at the same place again, no checkpoint in between: deterministic
    assert p.decide(t.CAUSE_EXIT, exit_code=1, **kw) == t.RAISE
    with pytest.raises(TypeError):
        p.decide(t.CAUSE_EXIT, exit_code="1", **kw)
