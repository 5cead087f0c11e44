"""Restarts (`tfos run --max-restarts`): a node killed with a real SIGKILL
makes tfos re-form the whole cluster with the next attempt number, and the
digits example resumes from its last checkpoint instead of epoch 1."""
import os
import re
import signal
import subprocess
import time

from conftest import PY, ROOT, pids_with, prog, run_and_kill, run_tfos, tfos_cli, wait_for

EXAMPLE = os.path.join(ROOT, "examples", "digits")


def test_killed_worker_restarts_cluster_and_training_resumes(tmp_path, marker):
    model_dir = tmp_path / marker / "model"
    # the TensorFlow process itself is killed, mid-training
    code, text, err, victim = run_and_kill(
        ["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--", PY, os.path.join(EXAMPLE, "train.py"),
         "--epochs", "12", "--model-dir", str(model_dir)],
        r"\[worker:1\] pid (\d+), attempt 1", r"\[worker:0\] epoch 3/12", env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert victim, text[-3000:]
    assert code == 0, text[-3000:] + err[-3000:]
    assert "worker:1 (executor 1, host 127.0.0.1, pid %d) failed: signal 9 (Killed)" % victim in err
    assert "restarting every node (attempt 2 of 4)" in err
    assert "all nodes finished successfully on attempt 2" in err
    assert re.search(r"\[worker:1\] pid \d+, attempt 2", text)
    resumed = re.findall(r"\[worker:0\] resumed from checkpoint ckpt-(\d+) after epoch (\d+)", text)
    assert resumed and int(resumed[0][1]) >= 3, text[-3000:]  # not from step 0
    after = int(resumed[0][1])
    assert "[worker:0] epoch %d/12" % (after + 1) in text.split("resumed from checkpoint")[-1]
    assert float(re.search(r"test accuracy: ([\d.]+)", text).group(1)) >= 0.90
    assert wait_for(lambda: not pids_with(marker), 10)


def test_restarts_exhausted_report_every_attempt(tmp_path, marker):
    pids = tmp_path / "pids"
    pids.mkdir()
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "2", "--grace", "1", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, prog("behave.py"), marker, str(pids), "worker:1=exit3_when_all_up",
                  "default=sleep"], timeout=300)
    assert r.returncode == 1
    assert "failed 3 times (--max-restarts 2):" in r.stderr
    for attempt in (1, 2, 3):
        assert re.search(r"attempt %d at \d\d:\d\d:\d\d: worker:1 \(executor 1, host 127.0.0.1, pid \d+\) failed: "
                         r"exit code 3" % attempt, r.stderr)
    assert "ValueError: bad batch" in r.stderr  # the last failure keeps its last lines
    assert wait_for(lambda: not pids_with(marker), 10)


def test_attempt_and_checkpoint_dir_reach_the_program(tmp_path, marker):
    code = ("import os, sys\n"
            "from tfos import TFNode\n"
            "ctx = TFNode.get_context()\n"
            "print('attempt %d ckpt %s' % (ctx.attempt, ctx.checkpoint_dir), flush=True)\n"
            "sys.exit(5 if ctx.attempt == 1 and ctx.task_index == 0 else 0)\n")
    ckpt = tmp_path / "ck"
    r = run_tfos(["run", "--workers", "2", "--checkpoint-dir", str(ckpt), "--log-dir", str(tmp_path / "logs"),
                  "--", PY, "-c", code, marker])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("attempt 2 ckpt %s" % ckpt) == 2
    assert "[worker:0] attempt 1 ckpt %s" % ckpt in r.stdout
    assert ckpt.is_dir()


def test_hung_agent_is_detected_by_missed_heartbeats(tmp_path, marker):
    """SIGSTOP freezes a node's agent: no exit status ever comes, only silence.
    The coordinator declares the node failed after --heartbeat-timeout, and
    nothing is left behind (the frozen agent is killed, its program with it)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--max-restarts", "0", "--heartbeat-timeout", "2",
                             "--grace", "1", "--log-dir", str(tmp_path / "logs"), "--", PY, prog("behave.py"), marker,
                             str(pids), "default=sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(list(pids.iterdir())) == 2, 30)
        prog_pid = int((pids / "worker-1.pid").read_text())
        with open("/proc/%d/stat" % prog_pid) as f:
            agent_pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the program's parent is its agent
        os.kill(agent_pid, signal.SIGSTOP)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert "worker:1 (executor 1, host 127.0.0.1) sent no heartbeat for 2 s" in err
    assert wait_for(lambda: not pids_with(marker), 10)


def test_a_program_that_exits_127_is_not_restarted(tmp_path, marker):
    """A command line that passes tfos run's checks but whose program cannot
    start (a shell's "not found", exit 127): one attempt, the cause first
    and once, the verdict saying why it was not restarted (4 attempts ran,
    "restarting every node" each time)."""
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "3", "--grace", "1", "--log-dir",
                  str(tmp_path / "logs"), "--", "sh", "-c", "exec nope-tfos-trainer \"$0\"", marker], timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "restarting every node" not in r.stderr and "attempt 2" not in r.stderr, r.stderr[-3000:]
    final = r.stderr.split("the cluster failed:\n", 1)[1]
    assert re.match(r"worker:\d \(executor \d, host 127\.0\.0\.1, pid \d+\) failed: exit code 127: a command it "
                    r"runs was not found \(the shells' code\), so it could not start\nlast lines of worker:\d:\n"
                    r"  \| .*nope-tfos-trainer: not found\n\n", final), final
    assert "\nnot restarted: a program that cannot start is not retried: the same command would fail the same way " \
           "(3 of 3 restarts unused)\n" in final, final
    assert wait_for(lambda: not pids_with(marker), 10)
