"""Drain on notice on Spark (issue 41): a standalone worker decommissioned
as Spark's own script does it (SIGPWR, spark.decommission.enabled) drains
the cluster -- every node checkpoints at one step and ends -- instead of
crashing it, and the next attempt, on the worker that takes its place,
resumes from that checkpoint with no step lost."""
import json
import os
import signal
import sys

from pyspark import cloudpickle

from tfos import TFCluster

from tfoshelpers import wait_for, wait_no_tfos_processes

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the node function travels by value


def drain_stepper(args, ctx):
    """Counts steps; checkpoints the step at the drain step and ends."""
    import json
    import os
    import time
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    out = args["out"]

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    ckpt = os.path.join(ctx.checkpoint_dir, "step-%s.json" % node)
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    record("start-%d-%s" % (ctx.attempt, node), {"step": step})
    while step < args["steps"]:
        step += 1
        ctx.report(step=step)
        if step == 30:
            record("at30-%d-%s" % (ctx.attempt, node), {})
        if ctx.should_checkpoint(step):
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(ckpt + ".tmp", ckpt)
            record("drained-%d-%s" % (ctx.attempt, node), {"step": step, "drain_step": ctx.drain_step()})
            return
        time.sleep(0.03)
    record("final-%s" % node, {"step": step})


def test_a_decommissioned_worker_drains_the_cluster_and_the_next_attempt_resumes(spark_cluster, tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    spark = spark_cluster.spark_session("tfos-test-drain", **{"spark.decommission.enabled": "true"})
    try:
        sc = spark.sparkContext
        cluster = TFCluster.run(sc, drain_stepper, {"out": str(out), "steps": 200}, num_executors=2, num_ps=0,
                                input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=120, max_restarts=2,
                                checkpoint_dir=str(tmp_path / "ckpt"), drain_grace=40)
        nodes = ("worker-0", "worker-1")
        assert wait_for(lambda: all((out / ("at30-1-" + n)).exists() for n in nodes), 120)
        os.kill(spark_cluster.worker_pid(1), signal.SIGPWR)   # Spark's decommission-worker.sh does this
        assert wait_for(lambda: all((out / ("drained-1-" + n)).exists() for n in nodes), 60), list(out.iterdir())
        spark_cluster.restart_worker(1)                      # the capacity comes back
        cluster.shutdown(timeout=180)   # steps the attempts: drained -> attempt 2 -> done
    finally:
        spark.stop()
    drained = [json.loads((out / ("drained-1-" + n)).read_text()) for n in nodes]
    step = drained[0]["drain_step"]
    assert drained[0]["step"] == drained[1]["step"] == step > 30, drained   # one step for every rank
    for n in nodes:
        assert json.loads((out / ("start-2-" + n)).read_text())["step"] == step   # no step redone
        assert json.loads((out / ("final-" + n)).read_text())["step"] == 200
    said = [r.getMessage() for r in caplog.records]
    assert any("drained: Spark executor" in m and "decommissioned; re-forming the cluster (attempt 2" in m
               for m in said), said
    assert any("checkpoint at step %d and end, within 40 s" % step in m for m in said), said  # drain_grace
    assert wait_no_tfos_processes(30) == []
