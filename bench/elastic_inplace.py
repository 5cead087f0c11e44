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
import torch
import torch.distributed as dist
from tfos.torch import ElasticGroup

out, step_ms = sys.argv[1], float(sys.argv[2])
g = ElasticGroup()
print("pid %d rank %d of %d" % (os.getpid(), g.rank, g.world), flush=True)
step, broke = 1, None
while True:
    t = torch.ones(1)
    try:
        dist.all_reduce(t)
    except g.errors:
        broke = time.time()
        g.rejoin(timeout=30)
        formed = time.time()
        continue
    if broke is not None and g.world == 2:
        with open(os.path.join(out, "survivor-%d" % os.getpid()), "w") as f:
            f.write("%.4f %.4f %.4f" % (broke, formed, time.time()))
        break
    if step == 20:
        print("stepping", flush=True)
    step += 1
    time.sleep(step_ms / 1000)
"""


def _ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def one_round(work, step_ms, silent=None):
    prog = os.path.join(work, "prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    p = subprocess.Popen([TFOS, "run", "--workers", "3", "--framework", "torch", "--min-nodes", "2",
                          "--resize-in-place", "--max-restarts", "0", "--log-dir", os.path.join(work, "logs")]
                         + (["--heartbeat-timeout", "%g" % silent] if silent else [])
                         + ["--", sys.executable, prog, work, str(step_ms)],
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
    return {"detect_s": max(t[0] for t in times) - killed, "rejoin_s": max(t[1] for t in times) - killed,
            "step_s": max(t[2] for t in times) - killed, "restarted": restarted}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--step-ms", type=float, default=20)
    ap.add_argument("--silent", type=float, default=None, metavar="H",
                    help="stop rank 2 (SIGSTOP) under --heartbeat-timeout H instead of killing rank 0")
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="tfos-inplace-") as work:
            res = one_round(work, args.step_ms, args.silent)
        rounds.append(res)
        print("round %d: %s" % (r + 1, " ".join("%s=%.3f" % (k, v) for k, v in res.items())), flush=True)
    for key in ("detect_s", "rejoin_s", "step_s"):
        vals = [r[key] for r in rounds]
        print("%-9s median %.3f s (%.3f-%.3f)" % (key, statistics.median(vals), min(vals), max(vals)))
    print("survivor processes restarted: %s" % [r["restarted"] for r in rounds])


if __name__ == "__main__":
    main()
