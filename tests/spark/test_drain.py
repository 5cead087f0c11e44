"""Drain on notice on Spark (issue 41): a standalone worker decommissioned
as Spark's own script does it (SIGPWR, spark.decommission.enabled) drains
the cluster -- every node checkpoints at one step and ends -- instead of
crashing it, and the next attempt, on the worker that takes its place,
resumes from that checkpoint with no step lost."""
import json
import os
import signal
import sys
import threading
import urllib.request

import pytest
from pyspark import cloudpickle

from tfos import TFCluster

from tfoshelpers import wait_for, wait_no_tfos_processes

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the node function travels by value


def write_json(path, obj):
    """Write obj to path whole (a reader never sees half of it)."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def drain_stepper(args, ctx):
    """Counts steps; checkpoints the step at the drain step and ends."""
    import json
    import os
    import time
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    out = args["out"]

    def record(name, obj):
        write_json(os.path.join(out, name), obj)

    ckpt = os.path.join(ctx.checkpoint_dir, "step-%s.json" % node)
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    record("start-%d-%s" % (ctx.attempt, node), {"step": step})
    while step < args["steps"]:
        step += 1
        ctx.report(step=step)
        if step == 30:
            record("at30-%d-%s" % (ctx.attempt, node), {})
        if ctx.should_checkpoint(step):
            write_json(ckpt, {"step": step})
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


def elastic_feed_reader(args, ctx):
    """InputMode.SPARK: reads row ids from its feed; at the drain step saves
    its feed position with the ids it read (its checkpoint) and ends."""
    import json
    import os
    import time
    from tfos import TFNode
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    out = args["out"]

    def record(name, obj):
        write_json(os.path.join(out, name), obj)

    feed = TFNode.DataFeed(ctx.mgr, True)
    ids, step = [], 0
    while not feed.should_stop():
        batch = feed.next_batch(10)
        ids.extend(int(r[0]) for r in batch)
        step += 1
        ctx.report(step=step)
        if step == 5:
            record("reading-%d-%s" % (ctx.attempt, node), {"world": ctx.num_workers})
        if ctx.should_checkpoint(step):
            record("ids-%d-%s" % (ctx.attempt, node), ids)   # the checkpoint: what was read
            feed.save_position()                             # and where the feed stands with it
            return
        time.sleep(args["slow"])
    record("ids-%d-%s" % (ctx.attempt, node), ids)


def test_an_elastic_feed_is_resharded_exactly_once_across_resizes(spark_cluster, tmp_path, caplog):
    """InputMode.SPARK, min_nodes=1 of 2: a worker decommissioned while
    train() feeds shrinks the cluster to one node, the worker's return grows
    it back, and the feed goes on across both resizes from the positions
    saved at each drain: every row is read exactly once."""
    out = tmp_path / "out"
    out.mkdir()
    spark = spark_cluster.spark_session("tfos-test-elastic-feed", **{"spark.decommission.enabled": "true"})
    n = 8000
    try:
        sc = spark.sparkContext
        rdd = sc.parallelize([(i,) for i in range(n)], 16)
        cluster = TFCluster.run(sc, elastic_feed_reader, {"out": str(out), "slow": 0.05}, num_executors=2,
                                input_mode=TFCluster.InputMode.SPARK, reservation_timeout=120, max_restarts=0,
                                checkpoint_dir=str(tmp_path / "ckpt"), drain_grace=40, min_nodes=1, elastic_wait=5,
                                feed_mb=1)

        moved = {"gone": False, "back": False}
        over = threading.Event()  # the test ended early: the mover stops waiting

        def capacity_goes_and_comes_back():
            if wait_for(lambda: over.is_set() or all((out / ("reading-1-worker-%d" % i)).exists() for i in (0, 1)),
                        120) and not over.is_set():
                os.kill(spark_cluster.worker_pid(1), signal.SIGPWR)
                moved["gone"] = True
            if wait_for(lambda: over.is_set() or (out / "reading-2-worker-0").exists(), 120) and not over.is_set():
                spark_cluster.restart_worker(1)
                moved["back"] = True

        mover = threading.Thread(target=capacity_goes_and_comes_back, daemon=True)
        mover.start()
        try:
            cluster.train(rdd, feed_timeout=300)
            mover.join(60)
        finally:
            over.set()
            mover.join(60)
            if moved["gone"] and not moved["back"]:
                spark_cluster.restart_worker(1)  # a decommissioned worker left behind fails every later test
        history = cluster.status()["history"]
        cluster.shutdown(timeout=120)
    finally:
        spark.stop()
    made = sorted(p.name for p in out.glob("reading-*"))
    assert made == ["reading-1-worker-0", "reading-1-worker-1", "reading-2-worker-0", "reading-3-worker-0",
                    "reading-3-worker-1"], made
    assert [json.loads((out / ("reading-%d-worker-0" % a)).read_text())["world"] for a in (1, 2, 3)] == [2, 1, 2]
    assert len(history) == 2 and all("-> resized (not a restart)" in h for h in history), history
    read = [i for p in out.glob("ids-*") for i in json.loads(p.read_text())]
    dup = len(read) - len(set(read))
    assert dup == 0 and sorted(read) == list(range(n)), "%d duplicates, %d never read" % (dup, n - len(set(read)))
    said = [r.getMessage() for r in caplog.records]
    assert any("resumes the feed where the checkpoint stands" in m for m in said), said
    assert any("1 of 2 executors usable after 5 s (elastic_wait): forming 1 of 2 nodes" in m for m in said), said
    assert any("growing to 2" in m and "a resize, not a restart" in m for m in said), said
    assert wait_no_tfos_processes(30) == []


def checkpointing_stepper(args, ctx):
    """Steps; rank 0 checkpoints the step every `every` steps (no drain
    here: a killed executor gives no notice)."""
    import json
    import os
    import time
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    out = args["out"]

    def record(name, obj):
        write_json(os.path.join(out, name), obj)

    ckpt = os.path.join(ctx.checkpoint_dir, "step.json")
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    record("start-%d-%s" % (ctx.attempt, node), {"step": step, "world": ctx.num_workers,
                                                 "tf_config": json.loads(os.environ.get("TF_CONFIG", "{}"))})
    if ctx.task_index == 0:
        # every rank reads the checkpoint before rank 0 writes the next one (a
        # framework's start barrier): on a loaded host a rank that started
        # 0.12 s late read rank 0's step 100, not the drain step 96
        started = "start-%d-" % ctx.attempt
        deadline = time.monotonic() + 60
        while (sum(1 for f in os.listdir(out) if f.startswith(started) and not f.endswith(".tmp")) < ctx.num_workers
               and time.monotonic() < deadline):
            time.sleep(0.01)
    while step < args["steps"]:
        step += 1
        ctx.report(step=step)
        if ctx.task_index == 0 and step % args["every"] == 0:
            write_json(ckpt, {"step": step})
            record("saved-%d" % ctx.attempt, {"step": step})
        if step >= 30:
            record("mark-%d-%s" % (ctx.attempt, node), {})
        if ctx.should_checkpoint(step):
            if ctx.task_index == 0:
                write_json(ckpt, {"step": step})
            record("drained-%d-%s" % (ctx.attempt, node), {"step": step})
            return
        # alone (the capacity gone), slower: the run must not end before the
        # test gives the capacity back, however long an executor takes to come
        time.sleep(0.03 if ctx.num_workers > 1 else args.get("alone_s", 0.03))
    record("final-%s" % node, {"step": step, "world": ctx.num_workers})


def test_an_elastic_cluster_goes_on_without_an_executor_killed_for_good(spark_cluster, tmp_path):
    """min_nodes=1 of 2: worker 1 killed with its executor (no notice) is a
    failure, restarted from the last checkpoint (one restart of the budget);
    no executor replaces it within elastic_wait, so attempt 2 runs on one
    node; the worker's return grows the cluster back (a resize)."""
    out = tmp_path / "out"
    out.mkdir()
    spark = spark_cluster.spark_session("tfos-test-elastic-kill", **{"spark.decommission.enabled": "true"})
    try:
        sc = spark.sparkContext
        args = {"out": str(out), "steps": 1000, "every": 25, "alone_s": 0.2}
        cluster = TFCluster.run(sc, checkpointing_stepper, args,
                                num_executors=2, input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=120,
                                max_restarts=1, checkpoint_dir=str(tmp_path / "ckpt"), drain_grace=40,
                                min_nodes=1, elastic_wait=5, heartbeat_timeout=10)
        nodes = ("worker-0", "worker-1")
        seen = {}

        def capacity_lost_then_back():
            if wait_for(lambda: all((out / ("mark-1-" + n)).exists() for n in nodes), 120):
                os.killpg(spark_cluster.worker_pid(1), signal.SIGKILL)   # the worker, its executor, its node
            if wait_for(lambda: (out / "mark-2-worker-0").exists(), 180):
                seen["status"] = json.loads(urllib.request.urlopen(cluster.status_url() + "status", timeout=10).read())
                spark_cluster.restart_worker(1)

        mover = threading.Thread(target=capacity_lost_then_back, daemon=True)
        mover.start()
        cluster.shutdown(timeout=400)
        mover.join(60)
        history = cluster._attempts.policy.history
    finally:
        spark.stop()
    starts = {p.name: json.loads(p.read_text()) for p in out.glob("start-*")}
    assert sorted(starts) == ["start-1-worker-0", "start-1-worker-1", "start-2-worker-0", "start-3-worker-0",
                              "start-3-worker-1"], sorted(starts)
    assert [starts["start-%d-worker-0" % a]["world"] for a in (1, 2, 3)] == [2, 1, 2]
    # attempt 2 resumed from the last checkpoint of attempt 1 (steps since it are redone: no notice)
    # (or the one after it, when rank 0 was stopped between the checkpoint and its record)
    saved, resumed = json.loads((out / "saved-1").read_text())["step"], starts["start-2-worker-0"]["step"]
    assert resumed % 25 == 0 and resumed in (saved, saved + 25) and saved > 0, (saved, resumed)
    assert len(starts["start-2-worker-0"]["tf_config"]["cluster"]["worker"]) == 1     # TF_CONFIG follows the size
    assert [h["decision"] for h in history] == ["restart", "resize"], history
    assert "resized from 1 to 2 nodes" in history[1]["summary"], history
    grown_at = json.loads((out / "drained-2-worker-0").read_text())["step"]
    assert starts["start-3-worker-0"]["step"] == starts["start-3-worker-1"]["step"] == grown_at   # none redone
    status = seen.get("status")   # the status page during attempt 2
    assert status and status["cluster"]["size"] == 1, status
    assert status["elastic"] == {"min_nodes": 1, "max_nodes": 2} and status["resizes"] == 0, status
    assert status["attempts"][0]["decision"] == "restart", status["attempts"]
    for n in nodes:
        assert json.loads((out / ("final-" + n)).read_text()) == {"step": 1000, "world": 2}
    assert wait_no_tfos_processes(30) == []


@pytest.mark.parametrize("lost", ["program", "executor"])
def test_a_torchdistributor_rank_lost_in_place_leaves_the_survivor_running(spark_cluster, tmp_path, lost):
    """TorchDistributor(min_nodes=1, resize_in_place=True) of 2 on a classic
    session, gloo all_reduce every step through tfos.torch.ElasticGroup:
    while both step, rank 1's program is SIGKILLed ("program"), or worker
    1 is, with its executor, node agent and rank, for good ("executor":
    Spark's task of that node is lost and may be tried again). The
    survivor's process goes on: it rejoins as rank 0 of 1 and keeps its
    in-memory state (the sum of every row id, each read once).

    "program" runs with grow_in_place=True, the ranks looking for a resize
    at each step: the lost rank's executor is still there, so a node task
    started in its place there joins the running cluster (generation 2,
    world 2) and takes the survivor's step and total; the two finish at
    world 2. "executor" stays at world 1 to its end (no capacity comes
    back while it runs). The history holds the resizes and no restart,
    and nothing is left."""
    from tfos.torch import TorchDistributor
    out = tmp_path / "out"
    out.mkdir()
    grow = lost == "program"

    def train(out, steps, full):
        import os
        import time
        import torch
        import torch.distributed as dist
        from tfos.torch import ElasticGroup
        g = ElasticGroup()
        step, total = 1, torch.zeros(1, dtype=torch.float64)

        def take_state():
            state = torch.tensor([float(step), total.item()], dtype=torch.float64)
            dist.broadcast(state, 0)
            return int(state[0].item()), state[1:].clone()

        if g.joined:
            step, total = take_state()
        with open(os.path.join(out, "pid-%d-%d" % (g.generation, g.rank)), "w") as f:
            f.write(str(os.getpid()))
        while step <= steps or (full and g.world < full):
            if full and g.resized():
                g.rejoin(timeout=60)
                step, total = take_state()
                continue
            ids = [i for i in range((step - 1) * 8, step * 8) if i % g.world == g.rank]
            t = torch.tensor([float(sum(ids))], dtype=torch.float64)
            try:
                dist.all_reduce(t)
            except g.errors:
                g.rejoin(timeout=60)
                step, total = take_state()
                continue
            total += t
            if step == 30:
                open(os.path.join(out, "stepping-%d" % g.rank), "w").close()
            time.sleep(0.02)
            step += 1
        return {"pid": os.getpid(), "world": g.world, "generation": g.generation, "total": int(total.item()),
                "last": step - 1}

    def kill_rank_1():
        if wait_for(lambda: all((out / ("stepping-%d" % r)).exists() for r in (0, 1)), 120):
            if lost == "program":
                os.kill(int((out / "pid-0-1").read_text()), signal.SIGKILL)
            else:
                os.killpg(spark_cluster.worker_pid(1), signal.SIGKILL)   # whichever rank it runs

    spark = spark_cluster.spark_session("tfos-test-inplace-torch")
    steps = 400 if not grow else 150
    try:
        killer = threading.Thread(target=kill_rank_1, daemon=True)
        killer.start()
        dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, max_restarts=0, spark=spark,
                                min_nodes=1, resize_in_place=True, grow_in_place=grow)
        got = dist.run(train, str(out), steps, 2 if grow else 0)
        killer.join(10)
    finally:
        spark.stop()
        if lost == "executor":
            spark_cluster.restart_worker(1)
    pids = [int((out / ("pid-0-%d" % r)).read_text()) for r in (0, 1)]
    survivor = pids[0] if lost == "program" else got["pid"]
    assert survivor in pids, (got, pids)
    history = dist.cluster.policy.history
    assert "resized in place from 2 to 1 nodes: worker:%s" % ("1" if lost == "program" else "") in \
        history[0]["summary"], history
    if grow:
        assert got["pid"] == survivor and got["world"] == 2 and got["generation"] == 2, got
        assert got["last"] >= steps and got["total"] == sum(range(got["last"] * 8)), got
        joiner = int((out / "pid-2-1").read_text())   # its first line: it joined at generation 2 as rank 1
        assert joiner not in pids, (joiner, pids)
        assert [h["decision"] for h in history] == ["resize", "resize"], history
        assert "resized in place from 1 to 2 nodes: worker:1" in history[1]["summary"], history
    else:
        assert got == {"pid": survivor, "world": 1, "generation": 1, "total": sum(range(steps * 8)),
                       "last": steps}, got
        assert [h["decision"] for h in history] == ["resize"], history
    assert wait_no_tfos_processes(60) == []
