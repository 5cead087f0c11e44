"""tfos run's elastic size (docs/RELIABILITY.md, "Elastic size"): torch
survivors kept in place (--resize-in-place, tfos.torch.ElasticGroup)."""
import json
import os
import re
import signal
import subprocess
import time

from conftest import PY, tfos_cli

# the program: tests/support/inplace_prog.py (its docstring says what it does)
PROG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "inplace_prog.py")


def _start(tmp_path, marker, steps, *options, full=None):
    """tfos run --workers 3 --min-nodes 2 --resize-in-place of PROG (with
    `full`, its FULL argument), read until all three ranks step: (process,
    lines read, {worker: pid})."""
    p = subprocess.Popen([tfos_cli(), "run", "--workers", "3", "--framework", "torch", "--min-nodes", "2",
                          "--resize-in-place", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs")]
                         + list(options) + ["--", PY, PROG, marker, str(steps)] + ([str(full)] if full else []),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if sum("stepping at 3" in x for x in lines) == 3:
                break
        text = "".join(lines)
        pids = {int(w): int(pid) for w, pid in re.findall(r"\[worker:(\d)\] pid (\d+) rank \d of 3", text)}
        assert sorted(pids) == [0, 1, 2] and text.count("stepping at 3") == 3, text
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p, lines, pids


def _finish(p, lines):
    """The rest of the run's output, once it ended (120 s at most)."""
    try:
        rest, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return "".join(lines) + rest


def _check_survivors(tmp_path, text, pids, steps, survivors):
    """exit 0, no restart, one resize to 2 nodes in the status, and each
    survivor (worker: its new rank) rejoined at generation 1 and counted
    every row id once, in the process it started in."""
    assert "restarting" not in text and "starting again" not in text, text[-4000:]
    # the run's last status: elastic 2..3, one resize, the cluster at 2 nodes
    status = json.loads((tmp_path / "logs" / "status.json").read_text())
    assert status["elastic"] == {"min_nodes": 2, "max_nodes": 3} and status["resizes"] == 1, status
    assert status["cluster"]["size"] == 2, status["cluster"]
    expected = sum(range(steps * 8))
    for w, rank in survivors.items():
        assert re.search(r"\[worker:%d\] rejoined as rank %d of 2 \(generation 1\)" % (w, rank), text), text[-4000:]
        # the same process from its first step to its last: nothing restarted
        assert "[worker:%d] pid %d done at world 2: total %d" % (w, pids[w], expected) in text, text[-4000:]


def test_torch_survivors_go_on_in_place_when_a_worker_is_lost(tmp_path, marker):
    """--workers 3 --min-nodes 2 --resize-in-place, gloo all_reduce every
    step: worker 0's program (rank 0, whose store the group used) is
    SIGKILLed while all three step. The coordinator does not fail the
    cluster: it sends the two others their new ranks (the lower executor
    is rank 0 and serves a new store at its reserved port) and world size
    2; their programs rejoin and go on in the same processes, and the run
    ends with exit 0 having spent no restart. Each survivor's in-memory
    total counts every row id exactly once."""
    steps = 300
    p, lines, pids = _start(tmp_path, marker, steps)
    os.kill(pids[0], signal.SIGKILL)
    text = _finish(p, lines)
    assert p.returncode == 0, text[-4000:]
    assert re.search(r"resized in place from 3 to 2 nodes: worker:0 \(executor 0, host 127\.0\.0\.1\) failed: "
                     r"signal 9", text), text[-4000:]
    _check_survivors(tmp_path, text, pids, steps, {1: 0, 2: 1})


def _ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_torch_survivors_go_on_in_place_without_a_silent_worker(tmp_path, marker):
    """A silent host: worker 2's agent and program are stopped (SIGSTOP)
    while all three step, so the survivors' all_reduce waits on a peer
    that neither answers nor fails. After --heartbeat-timeout the
    coordinator goes on in place without it, and the launcher ends what
    is left of it (SIGKILL: a stopped process still dies), which breaks
    the survivors' collective: they rejoin as ranks 0 and 1 of 2 in the
    same processes, and nothing of worker 2 is left running."""
    steps = 300
    p, lines, pids = _start(tmp_path, marker, steps, "--heartbeat-timeout", "3")
    agent = _ppid(pids[2])
    for pid in (agent, pids[2]):
        os.kill(pid, signal.SIGSTOP)
    text = _finish(p, lines)
    assert p.returncode == 0, text[-4000:]
    assert re.search(r"resized in place from 3 to 2 nodes: worker:2 \(executor 2, host 127\.0\.0\.1\) sent no "
                     r"heartbeat for 3 s", text), text[-4000:]
    _check_survivors(tmp_path, text, pids, steps, {0: 0, 1: 1})
    for pid in (agent, pids[2]):
        assert _state(pid) in (None, "Z"), "worker 2's process %d is left (state %s)" % (pid, _state(pid))


def _state(pid):
    """A process's state letter, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_torchdistributor_resize_in_place_is_refused_where_it_cannot_work():
    """resize_in_place needs min_nodes below num_processes, and run(): a
    fed rank's partitions would not be read again."""
    import pytest
    from tfos.torch import TorchDistributor
    for kw in (dict(), dict(min_nodes=2)):
        with pytest.raises(ValueError, match="resize_in_place=True needs min_nodes below num_processes=2"):
            TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, resize_in_place=True, **kw)
    d = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, min_nodes=1, resize_in_place=True)
    with pytest.raises(ValueError, match=r"resize_in_place=True\) is for run\(\)"):
        d.train_on_dataframe(lambda: None, object())


def test_a_worker_joins_in_place_where_a_lost_one_was(tmp_path, marker):
    """--grow-in-place, the ranks looking for a resize at each step
    (ElasticGroup.resized()): worker 0's program (rank 0) is SIGKILLed;
    the two others go on at world size 2, and the launcher starts a worker
    in its place once its agent has ended. The new worker registers into
    worker 0's slot, its program forms the group at generation 2 as rank 1
    of 3, the survivors re-form with it in the processes they started in
    and it takes rank 0's step and total. Two resizes, no restart, the
    cluster back at 3 nodes; every rank's total counts each row id once
    up to the step they ended after."""
    p, lines, pids = _start(tmp_path, marker, 120, "--grow-in-place", full=3)
    os.kill(pids[0], signal.SIGKILL)
    text = _finish(p, lines)
    assert p.returncode == 0, text[-4000:]
    assert "restarting" not in text and "starting again" not in text, text[-4000:]
    assert re.search(r"resized in place from 3 to 2 nodes: worker:0 \(executor 0, host 127\.0\.0\.1\) failed: "
                     r"signal 9", text), text[-4000:]
    assert re.search(r"resized in place from 2 to 3 nodes: worker:0 \(executor 0, host 127\.0\.0\.1\) joined where "
                     r"the capacity of a lost worker came back", text), text[-4000:]
    status = json.loads((tmp_path / "logs" / "status.json").read_text())
    assert status["resizes"] == 2 and status["cluster"]["size"] == 3, status
    joined = re.search(r"\[worker:0\] pid (\d+) joined as rank 1 of 3 \(generation 2\) at step (\d+)", text)
    assert joined and int(joined.group(1)) != pids[0], text[-4000:]
    done = re.findall(r"\[worker:(\d)\] pid (\d+) done at world 3 after step (\d+): total (\d+)", text)
    assert sorted(int(w) for w, _, _, _ in done) == [0, 1, 2], text[-4000:]
    for w, pid, last, total in done:
        # survivors in the processes they started in; the joiner in its own
        assert int(pid) == (int(joined.group(1)) if w == "0" else pids[int(w)]), (w, pid)
        assert int(last) >= 120 and int(total) == sum(range(int(last) * 8)), (w, last, total)
    for w in (1, 2):
        assert re.search(r"\[worker:%d\] (re-formed|rejoined) as rank %d of 3 \(generation 2\)" % (w, {1: 0, 2: 2}[w]),
                         text), text[-4000:]


def test_a_worker_that_joins_after_the_others_finished_is_not_a_failure(tmp_path, marker):
    """--grow-in-place with a program whose ranks never look for a resize:
    the survivors finish at world size 2 without re-forming with the
    worker that joined in worker 0's place. Its group cannot form (rank
    0's store goes with rank 0); the run still succeeds, saying why, and
    nothing is left running."""
    steps = 150
    p, lines, pids = _start(tmp_path, marker, steps, "--grow-in-place")
    os.kill(pids[0], signal.SIGKILL)
    text = _finish(p, lines)
    assert p.returncode == 0, text[-4000:]
    assert re.search(r"resized in place from 2 to 3 nodes: worker:0 .* joined", text), text[-4000:]
    assert ("which joined in place, ended" in text and "not a failure" in text) or \
        "finished but 1 that joined in place" in text, text[-4000:]
    expected = sum(range(steps * 8))
    for w in (1, 2):
        assert "[worker:%d] pid %d done at world 2: total %d" % (w, pids[w], expected) in text, text[-4000:]
