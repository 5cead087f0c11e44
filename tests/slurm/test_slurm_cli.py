"""tfos slurm: submit, follow, status, logs, cancel; Slurm's signals
(scancel, the time limit's warning) reaching tfos run as SIGTERM; a
program's error reported with its traceback and node (docs/SLURM.md)."""

import os
import re
import subprocess
import sys
import time

from conftest import REPO
from test_slurm_run import read, wait_for

CLI = os.path.abspath(os.environ.get("TFOS_CLI", os.path.join(REPO, "build", "tfos")))

FAILING = r'''
import os, time
print("started", flush=True)
if os.environ["TFOS_TASK_INDEX"] == "1":
    def load_shard(n):
        raise ValueError("bad shard %d" % n)
    load_shard(7)
time.sleep(1)
'''

# trains until SIGTERM, then "checkpoints" and exits 0, as a program that
# saves on SIGTERM does
TRAINING = r'''
import os, signal, sys, time
def on_term(sig, frame):
    print("SIGTERM: checkpoint saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("training", flush=True)
for _ in range(1200):
    time.sleep(0.1)
'''

# reports its steps and drains on notice (docs/RELIABILITY.md, "Drain on
# notice"): checkpoints at the drain step the coordinator chose, exits 0
DRAINING = r'''
import sys, time
import tfos
ctx = tfos.TFNode.get_context()
for step in range(1, 100000):
    time.sleep(0.05)
    ctx.report(step=step)
    if step == 40:  # a few heartbeats have carried a step to the coordinator
        print("training", flush=True)
    if ctx.should_checkpoint(step):
        print("checkpoint at drain step %d" % step, flush=True)
        sys.exit(0)
'''

# counts the rows tfos run --input feeds it (docs/FEED.md)
COUNT = r'''
from tfos import TFNode
ctx = TFNode.get_context()
df = TFNode.DataFeed(ctx.mgr)
n = total = 0
while not df.should_stop():
    rows = df.next_batch(100)
    if not rows:
        break
    n += len(rows)
    total += sum(int(r[0]) for r in rows)
print("rows %d sum %d" % (n, total), flush=True)
'''


def tfos_slurm(cluster, cwd, *args, **kw):
    return cluster.run([CLI, "slurm"] + list(args), cwd=str(cwd), timeout=kw.pop("timeout", 120), **kw)


def job_of(text):
    for line in text.splitlines():
        if line.startswith("tfos slurm: submitted job "):
            return line.split()[4]
    raise AssertionError("no job id in:\n" + text)


def test_a_program_error_is_reported_with_its_traceback_and_node(slurm_cluster, tmp_path):
    (tmp_path / "fails.py").write_text(FAILING)
    r = tfos_slurm(slurm_cluster, tmp_path, "--nodes", "2", "--job-name", "fails", "--max-restarts", "0",
                   "--", sys.executable, "fails.py")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out  # tfos run's exit code, through the job's
    job = job_of(r.stderr)
    # the traceback, live, with its node; the summary names the node too
    assert "[worker:1] ValueError: bad shard 7" in r.stdout, out
    assert '[worker:1]   File "%s", line 6, in load_shard' % (tmp_path / "fails.py") in r.stdout, out
    assert "worker:1 (executor 1, host 127.0.0.1" in r.stdout and "failed: exit code 1" in r.stdout, out
    assert "tfos slurm: job %s FAILED, exit code 1" % job in r.stderr, out

    s = tfos_slurm(slurm_cluster, tmp_path, "status", job)
    assert s.returncode == 0 and "job %s: FAILED, exit code 1 on n[1-2]" % job in s.stdout, s.stdout + s.stderr
    lg = tfos_slurm(slurm_cluster, tmp_path, "logs", job)
    assert lg.returncode == 0 and "[worker:1] ValueError: bad shard 7" in lg.stdout, lg.stdout + lg.stderr
    bad = tfos_slurm(slurm_cluster, tmp_path, "status", "99999")
    assert bad.returncode == 1 and "Slurm does not know job 99999" in bad.stderr, bad.stderr
    # a mistake in tfos run's options is caught before anything is submitted
    u = tfos_slurm(slurm_cluster, tmp_path, "--nodes", "1", "--wokrers", "2", "--", sys.executable, "fails.py")
    assert u.returncode == 2 and "unknown option '--wokrers'" in u.stderr and "submitted" not in u.stderr, u.stderr


def test_scancel_the_time_limit_and_tfos_slurm_cancel_stop_the_run_through_sigterm(slurm_cluster, tmp_path):
    (tmp_path / "train.py").write_text(TRAINING)
    (tmp_path / "drain.py").write_text(DRAINING)
    env = slurm_cluster.env()

    def submit(name, *opts):
        prog = ["--", sys.executable, "drain.py" if name == "cancel" else "train.py"]
        return subprocess.Popen([CLI, "slurm", "--job-name", name] + list(opts) + prog, cwd=str(tmp_path),
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # three jobs at once on the fixture's 4 CPUs: one node of 2 tasks, two of 1
    follow = {
        "scancel": submit("scancel", "--nodes", "1", "--ntasks-per-node", "2"),
        # the warning at the earliest Slurm allows: 58 s before a 1 min limit
        "timelimit": submit("timelimit", "--nodes", "1", "--time", "1", "--signal-before", "58"),
        "cancel": submit("cancel", "--nodes", "1"),
    }

    def job_ids():
        r = slurm_cluster.run(["squeue", "-h", "-o", "%j %i %T"])
        return {n: (i, st) for n, i, st in (line.split() for line in r.stdout.splitlines() if line.strip())}

    jobs = wait_for(lambda: (lambda j: j if len(j) == 3 and all(st == "RUNNING" for _, st in j.values())
                             else None)(job_ids()), 60, "three running jobs")
    outs = {n: tmp_path / ("tfos-slurm-%s.out" % jobs[n][0]) for n in follow}
    wait_for(lambda: read(outs["scancel"]).count("] training") == 2 and "] training" in read(outs["cancel"]), 60,
             "the programs training")
    # the user's own scancel, and tfos slurm cancel
    assert slurm_cluster.run(["scancel", jobs["scancel"][0]]).returncode == 0
    c = tfos_slurm(slurm_cluster, tmp_path, "cancel", jobs["cancel"][0])
    assert c.returncode == 0, c.stderr

    results = {}
    for name, p in follow.items():
        out, err = p.communicate(timeout=120)
        results[name] = (p.returncode, out, err)
    # a program that reports its steps is drained (issue 41's mechanism, the
    # same SIGTERM path): it checkpoints at the announced step, and tfos run
    # exits 75, "drained: run the same command again to continue"
    code, out, err = results.pop("cancel")
    assert code == 75, out + err
    m = re.search(r"\[worker:0\] checkpoint at drain step (\d+)", out)
    assert m and out.count("checkpoint at drain step") == 1, out + err
    assert "sending SIGKILL" not in out and "starting again" not in out, out + err
    for name, (code, out, err) in results.items():
        text = out + err
        # the batch shell, tfos run, got SIGTERM and took the path it takes
        # on a terminal: every node asked to stop with its grace
        assert code == 143, (name, text)
        if name == "scancel":
            # a plain scancel signals the steps at the moment it signals the
            # batch shell: whichever tfos run hears first names the stop (a
            # node "failed: signal 15", or the interruption; docs/SLURM.md);
            # both are exit 143 with no restart, asserted here and below
            assert "interrupted by signal 15" in out or "failed: signal 15" in out, (name, text)
        else:
            assert "interrupted by signal 15" in out, (name, text)
        workers = ["worker:0", "worker:1"] if name == "scancel" else ["worker:0"]
        for w in workers:
            # the program saw SIGTERM and saved, was not killed; signalled once
            # where only the batch shell was; a plain scancel signals the
            # step's processes (proctrack) as well as the batch shell, so the
            # program may get Slurm's SIGTERM and its agent's in turn, both
            # handled (docs/SLURM.md; seen on a loaded host)
            saved = out.count("[%s] SIGTERM: checkpoint saved" % w)
            assert saved in ((1, 2) if name == "scancel" else (1,)), (name, text)
        assert "sending SIGKILL" not in out, (name, text)
        # no restart: a stop is not a failure to retry
        assert "starting again" not in out, (name, text)
        assert "exit code 143" in err, (name, text)
    # scancel signals the steps themselves too (Slurm's CANCELLED notes, for
    # the job and for each step still running when its slurmstepd hears it:
    # on a loaded host tfos run may have ended them first): each program
    # still saw one SIGTERM (above); a node whose step Slurm signalled first
    # may be reported failed by that signal (docs/SLURM.md)
    assert re.search(r"\*\*\* JOB %s ON \S+ CANCELLED AT" % jobs["scancel"][0], results["scancel"][1]), \
        results["scancel"]
    # the time limit's warning and tfos slurm cancel signal the batch shell only
    assert "stopped: exit code 0" in results["timelimit"][1], results["timelimit"]


def test_nothing_outlives_a_launcher_killed_with_sigkill(slurm_cluster, tmp_path):
    """tfos run (the batch shell) SIGKILLed mid-run: its sruns get SIGTERM
    (PR_SET_PDEATHSIG) and forward it, Slurm ends the job and its steps;
    no_leftovers then finds no job and no process of it."""
    (tmp_path / "train.py").write_text(TRAINING)
    r = tfos_slurm(slurm_cluster, tmp_path, "--nodes", "2", "--no-follow", "--", sys.executable, "train.py")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    out = tmp_path / ("tfos-slurm-%s.out" % job)
    wait_for(lambda: read(out).count("] training") == 2, 60, "both programs training")
    launcher = [pid for pid, cmd in slurm_cluster.processes() if " run --backend slurm " in cmd]
    assert len(launcher) == 1, slurm_cluster.processes()
    os.kill(launcher[0], 9)
    wait_for(lambda: not slurm_cluster.jobs() and not slurm_cluster.processes(), 60,
             "job %s and its processes gone" % job)
    s = tfos_slurm(slurm_cluster, tmp_path, "status", job)
    assert "exit code 137" in s.stdout, s.stdout  # the batch shell's SIGKILL, as Slurm records it


def test_input_feeds_a_one_host_allocation_and_is_refused_across_hosts(slurm_cluster, tmp_path):
    """--input's rings are shared memory on the batch host: a one-node
    allocation's tasks are fed every row once; an allocation of several
    hosts is refused before anything is submitted (docs/SLURM.md)."""
    (tmp_path / "count.py").write_text(COUNT)
    data = tmp_path / "n.csv"
    data.write_text("".join("%d\n" % i for i in range(3000)))
    r = tfos_slurm(slurm_cluster, tmp_path, "--nodes", "1", "--ntasks-per-node", "2", "--job-name", "feed",
                   "--input", str(data), "--partition-rows", "500", "--", sys.executable, "count.py")
    assert r.returncode == 0, r.stdout + r.stderr
    got = {w: (int(n), int(t)) for w, n, t in re.findall(r"\[(worker:\d)\] rows (\d+) sum (\d+)", r.stdout)}
    assert set(got) == {"worker:0", "worker:1"}, r.stdout
    assert all(n > 0 for n, _ in got.values()), got
    assert sum(n for n, _ in got.values()) == 3000 and sum(t for _, t in got.values()) == sum(range(3000)), got
    u = tfos_slurm(slurm_cluster, tmp_path, "--nodes", "2", "--input", str(data), "--", sys.executable, "count.py")
    assert u.returncode == 2 and "--nodes 2 spans hosts" in u.stderr and "submitted" not in u.stderr, u.stderr
