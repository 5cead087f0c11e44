"""Torch survivors in place (issue 41, part 3): how long the survivors of
`tfos run --framework torch --workers 3 --min-nodes 2 --resize-in-place`
take to step again at world size 2 when rank 0's program is SIGKILLed,
with no process restarted.

The ranks all_reduce a tensor every --step-ms (gloo) through
tfos.torch.ElasticGroup; once all three step, the bench SIGKILLs rank 0's
program (the group's store host, the hard case: a new rank 0 serves a new
store). Each survivor records when its collective broke, when its new group
was formed (rejoin returned) and when its first collective at world size 2
completed. It reports, from time.time() (one machine):

  detect_s    the kill -> the last survivor's broken collective
  rejoin_s    the kill -> the last survivor's new group formed
  step_s      the kill -> the last survivor's first all_reduce at world 2
  restarted   survivor processes restarted (0: their pids are the same)

--silent H: a silent host instead: rank 2's agent and program are
stopped (SIGSTOP), run with --heartbeat-timeout H; the survivors are ranks
0 and 1, and the times include the H seconds of silence it takes to call
the node lost.

--grow: `--grow-in-place` too. The ranks look for a resize at each step
(ElasticGroup.resized()); after the kill the launcher starts a worker in
rank 0's place, which joins the running cluster, and the three re-form
and step at world size 3. Reported from the kill as above, and:

  grow_s      the kill -> all three through their first all_reduce at world 3
  pause_s     a survivor's longest stall: from when it saw the join (resized()
              or a broken collective) to its first all_reduce at world 3
  joiner_s    the joiner's program: its start (before `import torch`) -> its
              first all_reduce at world 3

--rounds rounds (default 5); the median and the range. No timed
assertions anywhere: run it by hand, never beside other work if the
figures are kept.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFOS = os.path.join(ROOT, "build", "tfos")

PROG = r"""
import os, sys, time
T0 = time.time()
import torch
import torch.distributed as dist
from tfos.torch import ElasticGroup

out, step_ms, grow = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "grow"
g = ElasticGroup()
if g.joined:  # the worker started in rank 0's place (--grow): rank 0's state, then one step at world 3
    dist.broadcast(torch.zeros(1), 0)
    dist.all_reduce(torch.ones(1))
    with open(os.path.join(out, "joiner-%d" % os.getpid()), "w") as f:
        f.write("%.4f %.4f" % (T0, time.time()))
    sys.exit(0)
print("pid %d rank %d of %d" % (os.getpid(), g.rank, g.world), flush=True)
step, broke, at2, seen = 1, None, None, None
while True:
    t = None
    if grow and g.resized():  # a resize seen at a step boundary
        pass
    else:
        t = torch.ones(1)
        try:
            dist.all_reduce(t)
        except g.errors:  # ... or in a broken collective
            t = None
    if t is None:
        if at2 is None:
            broke = broke or time.time()
        else:
            seen = seen or time.time()
        g.rejoin(timeout=60)
        if at2 is None:
            formed = time.time()
        if grow:  # every rank takes rank 0's state after a rejoin (the joiner too)
            dist.broadcast(torch.zeros(1), 0)
        continue
    if broke is not None and g.world == 2 and at2 is None:
        at2 = time.time()
        if not grow:
            with open(os.path.join(out, "survivor-%d" % os.getpid()), "w") as f:
                f.write("%.4f %.4f %.4f" % (broke, formed, at2))
            break
    if grow and at2 is not None and g.world == 3:
        with open(os.path.join(out, "survivor-%d" % os.getpid()), "w") as f:
            f.write("%.4f %.4f %.4f %.4f %.4f" % (broke, formed, at2, seen, time.time()))
        break
    if step == 20:
        print("stepping", flush=True)
    step += 1
    time.sleep(step_ms / 1000)
"""


def _ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def one_round(work, step_ms, silent=None, grow=False):
    prog = os.path.join(work, "prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    p = subprocess.Popen([TFOS, "run", "--workers", "3", "--framework", "torch", "--min-nodes", "2",
                          "--resize-in-place", "--max-restarts", "0", "--log-dir", os.path.join(work, "logs")]
                         + (["--heartbeat-timeout", "%g" % silent] if silent else [])
                         + (["--grow-in-place"] if grow else [])
                         + ["--", sys.executable, prog, work, str(step_ms), "grow" if grow else "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    text = ""
    try:
        while text.count("stepping") < 3:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("the run ended before all three stepped:\n" + text)
            text += line
        pids = {int(w): int(pid) for w, pid in re.findall(r"\[worker:(\d)\] pid (\d+) rank", text)}
        killed = time.time()
        if silent:
            for pid in (_ppid(pids[2]), pids[2]):  # its agent, then its program
                os.kill(pid, signal.SIGSTOP)
        else:
            os.kill(pids[0], signal.SIGKILL)
        rest, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text += rest
    if p.returncode != 0:
        raise RuntimeError("exit %d:\n%s" % (p.returncode, text[-3000:]))
    # a survivor's record is named after the pid it had at its first step
    files = [os.path.join(work, "survivor-%d" % pids[w]) for w in ((0, 1) if silent else (1, 2))]
    restarted = sum(not os.path.exists(f) for f in files)
    if restarted:
        raise RuntimeError("%d survivor(s) restarted:\n%s" % (restarted, text[-3000:]))
    times = []
    for path in files:
        with open(path) as f:
            times.append([float(x) for x in f.read().split()])
    res = {"detect_s": max(t[0] for t in times) - killed, "rejoin_s": max(t[1] for t in times) - killed,
           "step_s": max(t[2] for t in times) - killed}
    if grow:
        joiners = [f for f in os.listdir(work) if f.startswith("joiner-")]
        if len(joiners) != 1:
            raise RuntimeError("%d joiners recorded:\n%s" % (len(joiners), text[-3000:]))
        with open(os.path.join(work, joiners[0])) as f:
            t0, j3 = [float(x) for x in f.read().split()]
        res.update(grow_s=max([t[4] for t in times] + [j3]) - killed, pause_s=max(t[4] - t[3] for t in times),
                   joiner_s=j3 - t0)
    res["restarted"] = restarted
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--step-ms", type=float, default=20)
    ap.add_argument("--silent", type=float, default=None, metavar="H",
                    help="stop rank 2 (SIGSTOP) under --heartbeat-timeout H instead of killing rank 0")
    ap.add_argument("--grow", action="store_true", help="--grow-in-place: a worker joins in rank 0's place")
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="tfos-inplace-") as work:
            res = one_round(work, args.step_ms, args.silent, args.grow)
        rounds.append(res)
        print("round %d: %s" % (r + 1, " ".join("%s=%.3f" % (k, v) for k, v in res.items())), flush=True)
    for key in ("detect_s", "rejoin_s", "step_s") + (("grow_s", "pause_s", "joiner_s") if args.grow else ()):
        vals = [r[key] for r in rounds]
        print("%-9s median %.3f s (%.3f-%.3f)" % (key, statistics.median(vals), min(vals), max(vals)))
    print("survivor processes restarted: %s" % [r["restarted"] for r in rounds])


if __name__ == "__main__":
    main()
