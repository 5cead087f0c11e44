"""What a Ray user has for issue 41's scenario, on this machine: Ray Train
v2's elastic TorchTrainer (``ScalingConfig(num_workers=(1, 2))``,
``FailureConfig(max_failures=5)``) on a Ray cluster of a head (no CPUs) and
two 1-CPU nodes started here (ray.cluster_utils, each node its own raylet),
against the figures of bench/elastic_spark.py for tfos.

Each rank runs an all_reduce per step (--step-ms apart, gloo); rank 0 saves
the step every --every steps (the checkpoint) and records the step it is
at. A round: both ranks step; node 2 is removed at once (its raylet and
every worker on it killed: Ray has no notice to act on); Ray Train restarts
the worker group on what is left; then a node is added again, and Ray Train
grows the group at its next resize check (``elastic_resize_monitor_interval_s``,
--interval, default 60 s in Ray, 5 s here as tfos's elastic_wait).
Reports (medians and ranges over --rounds):

  shrink_s      node removed -> the first step at world 1
  steps_redone  steps between where rank 0 was at the kill and where the
                world-1 rank resumed (the checkpoint)
  grow_s        node added -> both ranks stepping at world 2
  restarted     rank processes started again over the round
  grew          rounds in which the group did grow back within 180 s

Ray is not one of tfos's dependencies: install it beside the project's venv
(torch from there) and run this alone:

  python3 -m venv /tmp/rayvenv
  echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/rayvenv/lib/python3.11/site-packages/zz-tfos.pth
  /tmp/rayvenv/bin/pip install "ray[train]==2.60.0"
  /tmp/rayvenv/bin/python bench/elastic_ray.py
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from elastic_torchrun import firsts, wait_for  # noqa: E402

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
# Ray turns 127.0.0.1 into the host's outward address (its nodes are meant
# for many machines); with "clusters" off it keeps to the loopback address
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def train_func(config):
    import json
    import os
    import time
    import torch
    import torch.distributed as dist
    import ray.train
    out, every, step_ms = config["out"], config["every"], config["step_ms"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    ckpt = os.path.join(out, "ckpt.json")
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    start, first, t = step, None, torch.ones(1)

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    while not os.path.exists(os.path.join(out, "stop")):
        if world > 1:
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


def one_round(opts, work, rnd):
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    out = os.path.join(work, "r%d" % rnd)
    os.makedirs(out)
    local = {"node_ip_address": "127.0.0.1"}   # every Ray server on 127.0.0.1
    cluster = Cluster(initialize_head=True, head_node_args=dict(local, num_cpus=0, include_dashboard=False))
    nodes = [cluster.add_node(num_cpus=1, **local), cluster.add_node(num_cpus=1, **local)]
    ray.init(address="127.0.0.1:%s" % cluster.address.rsplit(":", 1)[1], log_to_driver=False)
    error, two = [], None
    try:
        trainer = TorchTrainer(
            train_func, train_loop_config={"out": out, "every": opts.every, "step_ms": opts.step_ms},
            scaling_config=ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=opts.interval),
            run_config=RunConfig(name="bench-%d" % rnd, storage_path=os.path.join(work, "ray-storage"),
                                 failure_config=FailureConfig(max_failures=5)))

        def fit():
            try:
                trainer.fit()
            except Exception as exc:  # noqa: BLE001 -- reported with the round
                error.append(exc)

        runner = threading.Thread(target=fit, daemon=True)
        runner.start()
        wait_for(lambda: sum(1 for r in firsts(out) if r["world"] == 2) >= 2, 300, "both ranks at world 2")
        time.sleep(1.0)
        at_kill = json.load(open(os.path.join(out, "at")))["step"]
        killed = time.time()
        cluster.remove_node(nodes[1], allow_graceful=False)
        one = wait_for(lambda: [r for r in firsts(out) if r["world"] == 1 and r["t"] > killed], 300,
                       "a world-1 rank")[0]
        time.sleep(1.0)
        grown = time.time()
        cluster.add_node(num_cpus=1, **local)
        try:
            two = wait_for(lambda: (lambda rs: rs if len(rs) >= 2 else None)(
                [r for r in firsts(out) if r["world"] == 2 and r["t"] > grown]), 180, "both ranks back at world 2")
        except TimeoutError:
            two = None
        procs = len(firsts(out))
    finally:
        open(os.path.join(out, "stop"), "w").close()
        runner.join(120)
        ray.shutdown()
        cluster.shutdown()
    if two is None:
        print("round %d: grow failed within 180 s (%s)" % (rnd, error[0] if error else "no error from fit()"),
              flush=True)
    return {"shrink_s": one["t"] - killed, "steps_redone": at_kill - one["start"],
            "grow_s": max(r["t"] for r in two) - grown if two else float("nan"), "restarted": procs - 2,
            "grew": 1.0 if two else 0.0}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--interval", type=float, default=5.0, help="elastic_resize_monitor_interval_s, seconds")
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--every", type=int, default=100, help="checkpoint every N steps")
    opts = p.parse_args()
    import ray
    work = tempfile.mkdtemp(prefix="tfos-bench-ray-")
    rows, ok = [], False
    try:
        for rnd in range(opts.rounds):
            r = one_round(opts, work, rnd)
            print("round %d: %s" % (rnd, json.dumps({k: round(v, 3) for k, v in r.items()})), flush=True)
            rows.append(r)
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept %s" % work, file=sys.stderr)
    print("\nRay %s Train v2 TorchTrainer num_workers=(1, 2), a node removed then added, resize check every %g s, "
          "checkpoint every %d steps, %d rounds (median, range)" % (ray.__version__, opts.interval, opts.every,
                                                                    len(rows)))
    for k in ("shrink_s", "steps_redone", "grow_s", "restarted", "grew"):
        v = [r[k] for r in rows if r[k] == r[k]] or [float("nan")]
        print("  %-13s %8.2f   (%.2f - %.2f)" % (k, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
