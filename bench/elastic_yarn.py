"""Elastic size on YARN (issue 41): how long `tfos yarn --workers 2
--min-nodes 1` takes to go on at one worker when YARN's CapacityScheduler
preempts a container for another queue, and to grow back to two when that
capacity returns, on the YARN + HDFS minicluster of the tests
(tests/yarn/yarncluster.py: two NodeManagers of 2048 MB, queues default and
urgent guaranteed half each, preemption monitor on, 30 s before a kill).

Each round is the scenario of tests/yarn/test_yarn.py's
test_preemption_for_another_queue_resizes_an_elastic_application: the
application of queue default fills the cluster with two workers of 1500 MB
running tests/yarn/progs/elastic.py (a step every 50 ms, ctx.report(step=),
a checkpoint at each drain step); once both step, an application of queue
urgent asks for a worker of 1024 MB and runs 8 s. The program records the
time of each attempt's first step and of each drain checkpoint; the bench
stamps the client's output lines as it reads them (every 20 ms). It
reports, from time.time() (one machine):

  drained_s     the notice -> every rank ended after its checkpoint at the
                drain step (the coordinator's own figure)
  shrink_s      that checkpoint -> the last rank stepping at one node: the
                new attempt's container, agent and program start
  grow_s        the standby's registration seen in the client's output
                (YARN granted the capacity back) -> both ranks stepping at
                two nodes: the grow drain, and the new attempt's start
  steps_redone  steps between each drain step and where the next attempt
                started (0: none)
  restarts      restarts of the budget spent (0: resizes are not restarts)
  ids_once      every row id read exactly once across the attempts

--rounds rounds (default 3) on one minicluster; the median and the range.
Needs `make yarn yarn-minicluster`; run with `make bench-elastic`, never
beside other work if the figures are kept.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "yarn"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from elasticids import each_id_once  # noqa: E402
from yarncluster import YarnCluster  # noqa: E402

TFOS = os.path.join(ROOT, "build", "tfos")
PROG = os.path.join(ROOT, "tests", "yarn", "progs", "elastic.py")


class Stamped:
    """The lines of a growing file, each with the time it was first read."""

    def __init__(self, path):
        self.path, self.lines, self.done = path, [], False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        pos, rest = 0, b""
        while True:
            finishing = self.done
            with open(self.path, "rb") as f:
                f.seek(pos)
                data = f.read()
            pos += len(data)
            now = time.time()
            *whole, rest = (rest + data).split(b"\n")
            self.lines += [(now, line.decode(errors="replace")) for line in whole]
            if finishing:
                return
            time.sleep(0.02)

    def first(self, needle):
        return next((t for t, line in self.lines if needle in line), None)

    def text(self):
        return "\n".join(line for _, line in self.lines)

    def stop(self):
        self.done = True
        self.thread.join(timeout=5)


def one_round(cluster, work):
    ids = os.path.join(work, "ids")
    os.makedirs(ids)
    out_path = os.path.join(work, "default.out")
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "2", "--worker-memory", "1500m", "--am-memory", "384m",
                              "--min-nodes", "1", "--elastic-wait", "8", "--max-restarts", "0", "--file", PROG,
                              "--", sys.executable, "elastic.py", ids, "500", "2"],
                             env=cluster.env(), cwd=cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    lines = Stamped(out_path)
    urgent = None
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and lines.first("training at 2 nodes") is None and p.poll() is None:
            time.sleep(0.05)
        if lines.first("training at 2 nodes") is None:
            raise RuntimeError("the application did not step at 2 nodes:\n" + lines.text())
        urgent = subprocess.run([TFOS, "yarn", "--queue", "urgent", "--workers", "1", "--worker-memory", "1024m",
                                 "--am-memory", "384m", "--", sys.executable, "-c", "import time; time.sleep(8)"],
                                env=cluster.env(), cwd=cluster.tmp_dir, capture_output=True, text=True, timeout=240)
        code = p.wait(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        lines.stop()
    text = lines.text()
    if code != 0 or urgent.returncode != 0:
        raise RuntimeError("exit %s, urgent %s:\n%s\n%s" % (code, urgent.returncode, urgent.stderr, text))
    events = []
    with open(os.path.join(ids, "events")) as f:
        for line in f:
            kind, attempt, rank, world, step, t = line.split()
            events.append((kind, int(attempt), int(rank), int(world), int(step), float(t)))

    def at(kind, attempt):
        return [e for e in events if e[0] == kind and e[1] == attempt]

    drained = float(re.search(r"drained: .*?([\d.]+) s after the notice", text).group(1))
    ckpt1 = max(e[5] for e in at("drain", 1))
    small = at("first", 2)
    assert small and all(e[3] == 1 for e in small), events
    ckpt2_seen = lines.first("capacity for one more node is here")
    big = at("first", 3)
    assert len(big) == 2 and all(e[3] == 2 for e in big), events
    redone = [at("first", a + 1)[0][4] - at("drain", a)[0][4] - 1 for a in (1, 2)]
    m = re.search(r"\((\d+) of \d+ restarts spent", text)
    return {"drained_s": drained, "shrink_s": max(e[5] for e in small) - ckpt1,
            "grow_s": max(e[5] for e in big) - ckpt2_seen, "steps_redone": sum(redone),
            "restarts": int(m.group(1)) if m else -1, "ids_once": each_id_once(ids) == ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cluster = YarnCluster()
    cluster.start()
    rounds = []
    try:
        print("minicluster started in %.1f s" % cluster.start_seconds, flush=True)
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="tfos-elastic-yarn-") as work:
                res = one_round(cluster, work)
            rounds.append(res)
            print("round %d: %s" % (r + 1, " ".join("%s=%s" % (k, ("%.2f" % v) if isinstance(v, float) else v)
                                                     for k, v in res.items())), flush=True)
    finally:
        cluster.stop()
    for key in ("drained_s", "shrink_s", "grow_s"):
        vals = [r[key] for r in rounds]
        print("%-12s median %.2f s (%.2f-%.2f)" % (key, statistics.median(vals), min(vals), max(vals)))
    print("steps_redone %s, restarts %s, ids read once %s" % ([r["steps_redone"] for r in rounds],
                                                              [r["restarts"] for r in rounds],
                                                              [r["ids_once"] for r in rounds]))


if __name__ == "__main__":
    main()
