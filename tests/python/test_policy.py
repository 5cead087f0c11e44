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

from conftest import PY, pids_with, run_tfos, tfos_cli, wait_for

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


# ---- issue 35, item 9: restarts that cannot succeed -------------------------------

ALTERNATING = textwrap.dedent('''
    import os, sys, time
    attempt = int(os.environ["TFOS_ATTEMPT"])
    job = os.environ["TFOS_JOB_NAME"]
    print("%s attempt %d" % (job, attempt), flush=True)

    def check_config(lr):
        raise ValueError("learning rate %r is not a number" % lr)

    # one bug, reached first by chief:0 on odd attempts and by worker:0 on even ones
    if (job == "chief") == (attempt % 2 == 1):
        check_config("x")
    time.sleep(600)
''')


def test_the_same_exception_from_another_node_is_the_same_failure(tmp_path, marker):
    """chief:0 and worker:0 raising the same ValueError at the same place,
    alternately: one failure, stopped after one restart (it ran all 4
    attempts: another node counted as a new failure)."""
    path = tmp_path / "alternating.py"
    path.write_text(ALTERNATING)
    r = run_tfos(["run", "--chief", "--workers", "1", "--max-restarts", "3", "--grace", "1", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, str(path), marker], timeout=240)
    assert r.returncode == 1, r.stderr[-3000:]
    attempts = sorted(set(int(a) for a in re.findall(r"\[\w+:0\] \w+ attempt (\d+)", r.stdout)))
    assert attempts == [1, 2], r.stdout[-2000:] + r.stderr[-3000:]
    line = ALTERNATING.splitlines().index("    raise ValueError(\"learning rate %r is not a number\" % lr)") + 1
    assert "not restarted: the same ValueError at %s:%d ended attempts 1 and 2 (chief:0, then worker:0)" % (
        path, line) in r.stderr, r.stderr[-3000:]
    assert "(2 of 3 restarts unused)" in r.stderr
    assert wait_for(lambda: not pids_with(marker), 10)


FULL_DISK = textwrap.dedent('''
    import errno, os, sys, time
    attempt = int(os.environ["TFOS_ATTEMPT"])
    print("worker attempt %d" % attempt, flush=True)
    ckpt = os.path.join(os.environ["TFOS_CHECKPOINT_DIR"], "ckpt-%d" % attempt)
    os.makedirs(ckpt)

    def save(path):
        with open(os.path.join(path, "model.data"), "wb") as f:  # created, 0 bytes ...
            raise OSError(errno.ENOSPC, "No space left on device")  # ... and the disk is full

    save(ckpt)
''')


def test_an_empty_checkpoint_file_is_not_progress(tmp_path, marker):
    """A program that dies on a full disk after creating a 0-byte
    checkpoint (and its directory) each attempt: no checkpoint progress,
    so the same OSError twice is deterministic (all 4 attempts ran: the
    fingerprint counted files and mtimes, not data)."""
    path = tmp_path / "full_disk.py"
    path.write_text(FULL_DISK)
    ckpt = tmp_path / "ckpt"
    r = run_tfos(["run", "--workers", "1", "--max-restarts", "3", "--checkpoint-dir", str(ckpt), "--log-dir",
                  str(tmp_path / "logs"), "--", PY, str(path), marker], timeout=240)
    assert r.returncode == 1, r.stderr[-3000:]
    assert sorted(int(a) for a in re.findall(r"\[worker:0\] worker attempt (\d+)", r.stdout)) == [1, 2], \
        r.stdout[-2000:] + r.stderr[-3000:]
    assert sorted(os.listdir(ckpt)) == ["ckpt-1", "ckpt-2"]  # each attempt made its empty checkpoint
    assert "not restarted: the same OSError at %s:" % path in r.stderr, r.stderr[-3000:]
    assert "failure is deterministic" in r.stderr


def _python_bare(tmp_path):
    """An interpreter without site-packages: no tensorflow, no tfos."""
    bare = tmp_path / "python-bare"
    bare.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % PY)
    bare.chmod(0o755)
    return str(bare)


@pytest.mark.parametrize("program, said", [
    ([PY, "nope.py"], "could not start '%s nope.py': its script nope.py (in {cwd}): No such file or directory" % PY),
    (["python9-tfos-nope", "train.py"], "could not start 'python9-tfos-nope': No such file or directory (not on "
                                        "PATH: "),
    (["/nonexistent/python3", "train.py"], "could not start '/nonexistent/python3': No such file or directory"),
])
def test_a_program_that_cannot_start_is_refused_before_the_cluster_forms(tmp_path, marker, program, said):
    """A script path typo (python's "can't open file", exit 2) and an
    interpreter that does not exist: said once, before any node starts (4
    attempts ran, the cause in the last lines of each)."""
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "3", "--log-dir", str(tmp_path / "logs"), "--"] + program
                 + [marker], timeout=60, cwd=str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("tfos: " + said.format(cwd=tmp_path)), r.stderr
    assert r.stderr.count("could not start") == 1, r.stderr
    assert "tfos: no node was started: a program that cannot start is not retried" in r.stderr
    assert "cluster of 2 nodes starting" not in r.stderr and "attempt" not in r.stderr, r.stderr
    assert r.stdout == ""


def _local_cluster(argv, tmp_path, **kw):
    """The launcher without the CLI's checks (the library's tfos_local, as
    on hosts the CLI cannot look at): what the agents and the policy do."""
    lc = t.LocalCluster(argv, tfos_cli(), log_dir=str(tmp_path / "logs"), grace=1.0, **kw)
    try:
        deadline = time.monotonic() + 120
        while not lc.step(200):
            assert time.monotonic() < deadline, "the cluster did not end"
        return lc.exit_code, lc.attempt, lc.failure
    finally:
        lc.close()


def test_agents_report_a_program_that_cannot_start_and_it_is_not_retried(tmp_path, marker, monkeypatch):
    """The agents' own checks, where no launcher looked first: a python
    whose script is not there, a program that is not there, a program that
    exits 127 (a shell's "not found"). One attempt each, the cause once."""
    monkeypatch.chdir(tmp_path)  # the agents' (and their programs') working directory
    cases = [([PY, "nope.py", marker], "could not start '%s nope.py': its script nope.py (in %s): No such file or "
                                       "directory" % (PY, tmp_path)),
             (["/nonexistent/python3", "x.py", marker], "could not start '/nonexistent/python3': No such file"),
             (["sh", "-c", "nope-tfos-cmd", marker], "exit code 127: a command it runs was not found")]
    for argv, said in cases:
        code, attempt, failure = _local_cluster(argv, tmp_path, workers=2, max_restarts=3)
        assert code == 1 and attempt == 1, failure
        first = failure.splitlines()[0]
        assert said in first, failure
        assert "not restarted: a program that cannot start is not retried: the same command would fail the same " \
               "way (3 of 3 restarts unused)" in failure
        assert failure.count(said) == 1, failure
    assert wait_for(lambda: not pids_with(marker), 10)


def test_a_builtin_ps_that_cannot_start_is_not_retried(tmp_path, marker):
    """The built-in ps server without TensorFlow, seen by its agent (the
    workers still run): exit 127, one attempt (4 ran)."""
    code, attempt, failure = _local_cluster([PY, "-c", "import time; time.sleep(60)", marker], tmp_path, workers=1,
                                            ps=1, python=_python_bare(tmp_path), max_restarts=3)
    assert code == 1 and attempt == 1, failure
    assert failure.startswith("ps:0 (executor 0, host 127.0.0.1, pid "), failure
    assert "failed: exit code 127: the built-in parameter server could not start" in failure
    assert "needs TensorFlow, but" in failure and "cannot import it" in failure
    assert "not restarted: a program that cannot start is not retried" in failure
    assert wait_for(lambda: not pids_with(marker), 10)
