"""What a Spark user of PyTorch has today for issue 41's scenario: Spark's
own TorchDistributor (pyspark.ml.torch, ``num_processes=2,
local_mode=False``) on the same standalone cluster as
bench/elastic_spark.py (master + two 1-core workers,
spark.decommission.enabled), against that bench's figures for tfos.

Each rank runs an all_reduce per step (--step-ms apart); rank 0 saves the
step every --every steps (the checkpoint: TorchDistributor has none of its
own) and records the step it is at. A round: both ranks step; worker 1 gets
its notice (SIGPWR, Spark's decommission-worker.sh), and --notice s later
the machine goes (the worker, its executor and every process under them,
SIGKILL: torchrun's workers included); --away s later a worker starts in
its place. A barrier stage that is a job's result stage cannot be run
again: the lost executor fails the whole job ("Could not recover from a
failed barrier ResultStage"), and ``run()`` raises. The bench does what a
user's script would: it calls ``run()`` again (up to 3 times), which waits
for two slots and starts every rank again from the checkpoint. Reports
(medians and ranges over --rounds):

  failed_s      the notice -> run() raised
  at_one_node   steps taken at one node while the worker was away (a
                barrier stage needs every slot: 0)
  back_s        the returned worker's executor registered -> both ranks
                stepping again (in the run() called again)
  steps_redone  steps between where rank 0 was at the kill and where the
                ranks resumed (the checkpoint)
  restarted     rank processes started again (every rank: a barrier stage
                is retried whole)
  came_back     rounds in which the ranks stepped again within 240 s

Run with `.venv/bin/python bench/elastic_torchdistributor.py`, alone.
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
sys.path.insert(0, HERE)

from pyspark import cloudpickle  # noqa: E402
from sparkcluster import SparkCluster  # noqa: E402

from elastic_torchrun import children, firsts, wait_for  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train(out, every, step_ms):
    """Each rank: an all_reduce a step until the bench writes out/stop."""
    import json
    import os
    import time
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt = os.path.join(out, "ckpt.json")
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    start, first, t = step, None, torch.ones(1)

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    while not os.path.exists(os.path.join(out, "stop")):
        dist.all_reduce(t)
        step += 1
        if first is None:
            first = time.time()
            record("first-%d" % os.getpid(), {"t": first, "start": start, "world": world, "rank": rank})
        if rank == 0:
            if step % every == 0:
                with open(ckpt + ".tmp", "w") as f:
                    json.dump({"step": step}, f)
                os.replace(ckpt + ".tmp", ckpt)
            record("at", {"step": step, "world": world})
        time.sleep(step_ms / 1000.0)
    dist.destroy_process_group()


def descendants(pid):
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def machine_goes(cluster, i):
    """Worker i's machine goes: the worker and everything under it, at once
    (torchrun starts its workers in sessions of their own: a signal to the
    worker's process group would miss them)."""
    root = cluster.worker_pid(i)
    for pid in [root] + descendants(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def one_round(cluster, work, rnd, opts):
    from pyspark.ml.torch.distributor import TorchDistributor
    out = os.path.join(work, "r%d" % rnd)
    os.makedirs(out)
    spark = cluster.spark_session("tfos-bench-torchdistributor-%d" % rnd,
                                  **{"spark.decommission.enabled": "true",
                                     "spark.executorEnv.OMP_NUM_THREADS": "1"})
    t, error = {}, []
    try:
        sc = spark.sparkContext

        def fit():
            for _ in range(3):  # the user's script, calling run() again when it raises
                try:
                    TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
                        train, out, opts.every, opts.step_ms)
                    return
                except Exception as exc:  # noqa: BLE001 -- reported with the round
                    error.append((time.time(), exc))
                    if os.path.exists(os.path.join(out, "stop")):
                        return

        runner = threading.Thread(target=fit, daemon=True)
        runner.start()
        wait_for(lambda: sum(1 for r in firsts(out) if r["world"] == 2) >= 2, 180, "both ranks stepping")
        time.sleep(1.0)
        before = {r["t"] for r in firsts(out)}
        t["notice"] = time.time()
        os.kill(cluster.worker_pid(1), signal.SIGPWR)
        time.sleep(opts.notice)
        t["at_kill"] = json.load(open(os.path.join(out, "at")))["step"]
        t["killed"] = time.time()
        machine_goes(cluster, 1)
        time.sleep(opts.away)
        t["one_node_steps"] = json.load(open(os.path.join(out, "at")))["step"] - t["at_kill"]
        cluster.restart_worker(1)
        t["registered"] = wait_for(lambda: time.time() if sc._jsc.sc().getExecutorIds().size() >= 2 else None, 120,
                                   "the returned worker's executor")
        try:
            t["again"] = wait_for(lambda: (lambda rs: rs if len(rs) >= 2 else None)(
                [r for r in firsts(out) if r["t"] not in before and r["t"] > t["killed"]]), 240,
                "both ranks stepping again")
        except TimeoutError:
            t["again"] = None
    finally:
        open(os.path.join(out, "stop"), "w").close()
        if t.get("again") is None:
            spark.sparkContext.cancelAllJobs()
        runner.join(120)
        spark.stop()
    again = t["again"]
    for when, exc in error:
        print("round %d: run() raised %.1f s after the notice: %s" % (
            rnd, when - t["notice"], str(exc).strip().splitlines()[0][:200]), flush=True)
    if again is None:
        print("round %d: the ranks did not step again within 240 s" % rnd, flush=True)
    return {"failed_s": error[0][0] - t["notice"] if error else float("nan"),
            "at_one_node": t["one_node_steps"],
            "back_s": max(r["t"] for r in again) - t["registered"] if again else float("nan"),
            "steps_redone": t["at_kill"] - min(r["start"] for r in again) if again else float("nan"),
            "restarted": len(again) if again else float("nan"),
            "came_back": 1.0 if again else 0.0}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--notice", type=float, default=2.0, help="seconds from the notice to the machine going")
    p.add_argument("--away", type=float, default=10.0, help="seconds before a worker takes its place")
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--every", type=int, default=100, help="checkpoint every N steps")
    opts = p.parse_args()
    work = tempfile.mkdtemp(prefix="tfos-bench-torchdistributor-")
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
    print("\nSpark TorchDistributor(num_processes=2), notice %g s, worker away %g s, checkpoint every %d steps, "
          "%d rounds (median, range)" % (opts.notice, opts.away, opts.every, len(rows)))
    for k in ("failed_s", "at_one_node", "back_s", "steps_redone", "restarted", "came_back"):
        v = [r[k] for r in rows if r[k] == r[k]] or [float("nan")]
        print("  %-13s %8.2f   (%.2f - %.2f)" % (k, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
