"""Elastic size on Spark (issue 41): how long a TFCluster with min_nodes=1
of 2 takes to shrink when a standalone worker is decommissioned, and to grow
back when the worker returns, on a real standalone cluster (master + two
1-core workers, spark.decommission.enabled) on this machine.

Each round runs a fresh application: two workers step (``ctx.report(step=)``
every --step-ms) and check ``ctx.should_checkpoint(step)``; at the drain
step rank 0 writes the step, and every rank records the time. Once both
step, the bench sends SIGPWR to worker 1 (Spark's decommission-worker.sh);
once attempt 2 steps on one node it restarts worker 1. It reports, from
time.time() across the processes (one machine):

  drained_s     notice -> the last rank's checkpoint written at the drain step
  shrink_s      that checkpoint -> attempt 2's first step on one node, less
                elastic_wait (--wait: the bounded wait for a replacement
                that does not come, the user's setting): the re-forming itself
  grow_s        the returned worker's executor registered -> attempt 3's
                last rank stepping at two nodes (the grow drain, the stop
                and the new attempt's start: Python and the program)
  steps_redone  steps between each drain step and where the next attempt
                started (0: none)
  restarts      restarts of the budget spent (0: resizes are not restarts)

--rounds rounds (default 3); the median and the range of each. Run with
`make bench-elastic`, never beside other work if the figures are kept.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "spark"))

from pyspark import cloudpickle  # noqa: E402
from sparkcluster import SparkCluster  # noqa: E402

from tfos import TFCluster  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def stepper(args, ctx):
    import json
    import os
    import time
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    out = args["out"]

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    ckpt = os.path.join(ctx.checkpoint_dir, "step.json")
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    start, first = step, None
    stop = os.path.join(out, "stop")
    while not os.path.exists(stop):
        step += 1
        ctx.report(step=step)
        if first is None:
            first = time.time()
            record("first-%d-%s" % (ctx.attempt, node), {"t": first, "start": start, "world": ctx.num_workers})
        if ctx.should_checkpoint(step):
            if ctx.task_index == 0:
                with open(ckpt + ".tmp", "w") as f:
                    json.dump({"step": step}, f)
                os.replace(ckpt + ".tmp", ckpt)
            record("drained-%d-%s" % (ctx.attempt, node), {"t": time.time(), "step": step})
            return
        time.sleep(args["step_ms"] / 1000.0)


def wait_for(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise TimeoutError("gave up after %g s waiting for %s" % (timeout, what))


def load(out, name):
    return json.loads(open(os.path.join(out, name)).read())


def one_round(cluster, work, rnd, opts):
    out = os.path.join(work, "r%d" % rnd)
    os.makedirs(out)
    spark = cluster.spark_session("tfos-bench-elastic-%d" % rnd, **{"spark.decommission.enabled": "true"})
    try:
        sc = spark.sparkContext
        tfc = TFCluster.run(sc, stepper, {"out": out, "step_ms": opts.step_ms},
                            num_executors=2, input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=120,
                            max_restarts=0, checkpoint_dir=os.path.join(out, "ckpt"), drain_grace=40,
                            min_nodes=1, elastic_wait=opts.wait)
        both = ("worker-0", "worker-1")
        t = {}

        def capacity_goes_and_comes_back():
            try:
                wait_for(lambda: all(os.path.exists(os.path.join(out, "first-1-" + n)) for n in both), 120,
                         "attempt 1")
                time.sleep(1.0)
                t["notice"] = time.time()
                os.kill(cluster.worker_pid(1), signal.SIGPWR)
                wait_for(lambda: os.path.exists(os.path.join(out, "first-2-worker-0")), 120, "attempt 2 on one node")
                time.sleep(1.0)
                cluster.restart_worker(1)
                t["registered"] = wait_for(
                    lambda: time.time() if sc._jsc.sc().getExecutorIds().size() >= 2 else None, 120,
                    "the returned worker's executor")
                wait_for(lambda: all(os.path.exists(os.path.join(out, "first-3-" + n)) for n in both), 180,
                         "attempt 3")
                t["status"] = tfc.status()
            finally:
                open(os.path.join(out, "stop"), "w").close()   # the programs end: shutdown() returns

        mover = threading.Thread(target=capacity_goes_and_comes_back, daemon=True)
        mover.start()
        tfc.shutdown(timeout=400)   # steps the attempts: the resizes happen in here
        mover.join(60)
    finally:
        spark.stop()
    if "status" not in t:
        raise RuntimeError("round %d did not shrink and grow back: see %s" % (rnd, out))
    notice, registered, status = t["notice"], t["registered"], t["status"]
    d1 = [load(out, "drained-1-" + n) for n in both]
    d2 = load(out, "drained-2-worker-0")
    f2 = load(out, "first-2-worker-0")
    f3 = [load(out, "first-3-" + n) for n in both]
    assert f2["world"] == 1 and all(f["world"] == 2 for f in f3), (f2, f3)
    redone = (d1[0]["step"] - f2["start"]) + sum(d2["step"] - f["start"] for f in f3)
    restarts = sum(1 for a in status["attempts"] if a["decision"] == "restart")
    return {"drained_s": max(d["t"] for d in d1) - notice,
            "shrink_s": f2["t"] - max(d["t"] for d in d1) - opts.wait,
            "grow_s": max(f["t"] for f in f3) - registered,
            "steps_redone": redone, "restarts": restarts}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--wait", type=float, default=5.0, help="elastic_wait, seconds")
    p.add_argument("--step-ms", type=float, default=20.0)
    opts = p.parse_args()
    work = tempfile.mkdtemp(prefix="tfos-bench-elastic-")
    cluster = SparkCluster(n_workers=2, worker_cores=1, worker_memory="1g",
                           worker_opts="-Dspark.decommission.enabled=true")
    rows, ok = [], False
    try:
        cluster.start()
        for rnd in range(opts.rounds):
            r = one_round(cluster, work, rnd, opts)
            print("round %d: %s" % (rnd, json.dumps({k: round(v, 3) for k, v in r.items()})), flush=True)
            rows.append(r)
        ok = True
    finally:
        cluster.stop()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept %s" % work, file=sys.stderr)
    print("\nelastic size on Spark: min_nodes=1 of 2, elastic_wait %g s, %d rounds (median, range)" % (
        opts.wait, len(rows)))
    for k in ("drained_s", "shrink_s", "grow_s", "steps_redone", "restarts"):
        v = [r[k] for r in rows]
        print("  %-13s %8.2f   (%.2f - %.2f)" % (k, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
