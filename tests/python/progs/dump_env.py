"""Writes this node's environment and tfos context as JSON to OUTDIR/<job>-<index>.json."""
import json
import os
import sys

from tfos import TFNode

out = sys.argv[1]
ctx = TFNode.get_context()
keep = {k: v for k, v in os.environ.items()
        if k.startswith(("TFOS_", "TF_CONFIG", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "JAX_"))}
keep.pop("TFOS_SECRET", None)
record = {"env": keep, "ctx": {"job_name": ctx.job_name, "task_index": ctx.task_index,
                               "executor_id": ctx.executor_id, "worker_num": ctx.worker_num,
                               "cluster_spec": ctx.cluster_spec, "num_workers": ctx.num_workers,
                               "attempt": ctx.attempt, "port": ctx.port}}
with open(os.path.join(out, "%s-%d.json" % (ctx.job_name, ctx.task_index)), "w") as f:
    json.dump(record, f)
print("wrote context of %s:%d" % (ctx.job_name, ctx.task_index))
import time
# the trainers finish only once every node has written its record: a ps that
# starts slower must not be stopped (trainers done) before it wrote its own
nodes = sum(len(v) for v in ctx.cluster_spec.values())
deadline = time.monotonic() + 60
while len(os.listdir(out)) < nodes and time.monotonic() < deadline:
    time.sleep(0.05)
if ctx.job_name == "ps":
    # a ps serves until the cluster is done; tfos then stops it
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.1)
