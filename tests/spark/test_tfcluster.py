"""TFCluster on a real Spark standalone cluster (master + 2 workers, 1 core
each): both input modes, RDDs and DataFrames, inference, and the failures
users hit with TensorFlowOnSpark."""
import json
import os
import signal
import sys
import time

import numpy as np
import pytest

from pyspark import cloudpickle

from tfos import TFCluster, TFNode
from tfos.TFCluster import TFClusterError

from tfoshelpers import wait_no_tfos_processes, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---- map_funs (run in the nodes' programs on the executors) -----------------

def record_ctx(args, ctx):
    """Write what the node saw."""
    info = {"job_name": ctx.job_name, "task_index": ctx.task_index, "executor_id": ctx.executor_id,
            "worker_num": ctx.worker_num, "num_workers": ctx.num_workers, "cluster_spec": ctx.cluster_spec,
            "tf_config": json.loads(os.environ["TF_CONFIG"]), "defaultFS": ctx.defaultFS,
            "working_dir": ctx.working_dir, "abs": ctx.absolute_path("data/x"), "pid": os.getpid(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "args": args}
    with open(os.path.join(args["out"], "ctx-%d.json" % ctx.executor_id), "w") as f:
        json.dump(info, f)


def report_steps(args, ctx):
    """Report 3 steps (loss = step + executor id); write the MLflow run the
    node was given."""
    for step in range(1, 4):
        ctx.report(step=step, loss=float(step + ctx.executor_id))
        time.sleep(0.4)
    with open(os.path.join(args["out"], "mlflow-%d.json" % ctx.executor_id), "w") as f:
        json.dump({k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID")}, f)


def count_rows(args, ctx):
    """Read the feed to its end; write how many rows and their sum."""
    feed = TFNode.DataFeed(ctx.mgr, True)
    n = total = 0
    if ctx.executor_id == 0 and args.get("first_delay"):  # a program slow to start (TF's own start)
        time.sleep(args["first_delay"])
    if args.get("go"):  # a program that reads only once the test says so (at most 120 s)
        deadline = time.monotonic() + 120
        while not os.path.exists(args["go"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    if ctx.executor_id == args.get("end_after_one"):  # one batch, then terminate() and return at once
        feed.next_batch(args.get("batch", 100))
        feed.terminate()
        return
    while not feed.should_stop():
        batch = feed.next_batch(args.get("batch", 100))
        n += len(batch)
        total += sum(int(r[0]) for r in batch)
        if args.get("slow"):
            time.sleep(args["slow"])
    with open(os.path.join(args["out"], "count-%d.json" % ctx.executor_id), "w") as f:
        json.dump({"rows": n, "sum": total, "pid": os.getpid()}, f)


def count_arrays(args, ctx):
    """DataFrame feed: columns arrive as numpy arrays (features 2-D)."""
    feed = TFNode.DataFeed(ctx.mgr, True)
    n, shapes, label_sum = 0, set(), 0
    while not feed.should_stop():
        cols = feed.next_batch_arrays(64, as_dict=True)
        if not cols:
            break
        shapes.add(tuple(cols["features"].shape[1:]))
        label_sum += int(cols["label"].sum())
        n += len(cols["label"])
    with open(os.path.join(args["out"], "arrays-%d.json" % ctx.executor_id), "w") as f:
        json.dump({"rows": n, "shapes": sorted(shapes), "label_sum": label_sum}, f)


def double_it(args, ctx):
    """Inference: one result per row, in order, in the form the rows ask
    for: rows (id,) get tuples; rows (id, kind) get, per batch, a 2-D array
    ("2d"), a 1-D array ("1d"), a list of arrays, of dicts or of scalars;
    pyspark Rows (id, "row") get (the row's type, id)."""
    import numpy as np
    feed = TFNode.DataFeed(ctx.mgr, False)
    while not feed.should_stop():
        batch = feed.next_batch(37)
        if not batch:
            continue
        ids = np.array([r[0] for r in batch], dtype=np.int64)
        kind = batch[0][1] if len(batch[0]) == 2 else "tuples"
        if kind == "2d":
            feed.batch_results(np.stack([ids, ids * 2], axis=1))
        elif kind == "1d":
            feed.batch_results(ids * 2)
        elif kind == "arrays":
            feed.batch_results([np.array([i, 2 * i]) for i in ids])
        elif kind == "dicts":
            feed.batch_results([{"id": int(i), "twice": int(2 * i)} for i in ids])
        elif kind == "scalars":
            feed.batch_results([int(2 * i) for i in ids])
        elif kind == "row":  # what the program was handed
            feed.batch_results([(type(r).__name__, r.id) for r in batch])
        else:
            feed.batch_results([(int(r[0]), int(r[0]) * 2) for r in batch])


def fail_on_worker1(args, ctx):
    if ctx.job_name == "worker" and ctx.task_index == 1:
        raise ValueError("boom from the user's map_fun")
    time.sleep(args.get("sleep", 0))


def read_then_fail(args, ctx):
    feed = TFNode.DataFeed(ctx.mgr, True)
    feed.next_batch(10)
    if ctx.executor_id == 1:
        raise ValueError("bad record in the user's code")
    while not feed.should_stop():
        feed.next_batch(10)


# ---- InputMode.TENSORFLOW ------------------------------------------------------

def test_tensorflow_mode_cluster_spec(spark, tmp_path):
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, record_ctx, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=60)
    cluster.shutdown(timeout=120)
    infos = {i: json.load(open(tmp_path / ("ctx-%d.json" % i))) for i in range(2)}
    for i, info in infos.items():
        assert info["job_name"] == "worker" and info["task_index"] == i and info["worker_num"] == i
        assert info["num_workers"] == 2
        tf_config = info["tf_config"]
        assert tf_config["task"] == {"type": "worker", "index": i}
        assert len(tf_config["cluster"]["worker"]) == 2 and "chief" not in tf_config["cluster"]
        assert info["cluster_spec"] == tf_config["cluster"]
        assert info["abs"] == "file://%s/data/x" % info["working_dir"]
    # the two nodes ran on different executors (different working dirs)
    assert infos[0]["working_dir"] != infos[1]["working_dir"]
    assert wait_no_tfos_processes(30) == []


def test_mlflow_one_run_with_every_ranks_reports(spark, tmp_path, mlflow_server):
    """Issue 39: TFCluster.run(mlflow=) is one MLflow run: parameters, each
    node's ctx.report as rank<N>/loss, the run id in the nodes' environment,
    FINISHED at shutdown."""
    MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
    experiment = "spark-" + os.path.basename(str(tmp_path))
    cluster = TFCluster.run(spark.sparkContext, report_steps, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=60,
                            mlflow=mlflow_server.url, mlflow_experiment=experiment)
    cluster.shutdown(timeout=120)
    client = MlflowClient(mlflow_server.url)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["num_executors"] == "2" and run.data.tags["tfos.backend"] == "spark"
    assert run.data.tags["tfos.attempts"] == "1"
    for rank in (0, 1):
        hist = client.get_metric_history(run.info.run_id, "rank%d/loss" % rank)
        assert hist and all(m.value == m.step + rank for m in hist)
        assert max(m.step for m in hist) == 3  # the last report comes with the node's exit
        env = json.load(open(tmp_path / ("mlflow-%d.json" % rank)))
        assert env == {"MLFLOW_TRACKING_URI": mlflow_server.url, "MLFLOW_RUN_ID": run.info.run_id}
    assert client.get_metric_history(run.info.run_id, "loss")
    assert wait_no_tfos_processes(30) == []


def test_chief_and_roles_in_tfos_order(spark, tmp_path):
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, record_ctx, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            master_node="chief", reservation_timeout=60)
    cluster.shutdown(timeout=120)
    roles = sorted((json.load(open(tmp_path / ("ctx-%d.json" % i)))["tf_config"]["task"]["type"], i)
                   for i in range(2))
    assert roles == [("chief", 0), ("worker", 1)]


def test_exception_in_map_fun_reaches_the_driver(spark, tmp_path):
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, fail_on_worker1, {"sleep": 120}, num_executors=2, num_ps=0,
                            reservation_timeout=60, max_restarts=0)
    t0 = time.monotonic()
    with pytest.raises(TFClusterError) as err:
        cluster.shutdown(timeout=300)
    msg = str(err.value)
    assert "worker:1" in msg
    assert "Traceback" in msg and "ValueError: boom from the user's map_fun" in msg
    # worker:0 sleeps 120 s: the failure stopped it instead of waiting for it
    assert time.monotonic() - t0 < 100, msg
    assert wait_no_tfos_processes(30) == []


def test_deterministic_map_fun_error_costs_one_restart(spark, tmp_path):
    """The same exception at the same place twice, with no checkpoint written
    in between: the restart policy stops after one restart, not after the
    whole budget of 3."""
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, fail_on_worker1, {"sleep": 120}, num_executors=2, num_ps=0,
                            reservation_timeout=60, max_restarts=3, checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(TFClusterError) as err:
        cluster.shutdown(timeout=300)
    msg = str(err.value)
    assert "the failure is deterministic" in msg and "ValueError" in msg, msg
    attempts = cluster.policy.history
    assert [a["decision"] for a in attempts] == ["restart", "raise"], attempts
    assert all(a["exception"] == "ValueError" and a["node"] == "worker:1" and a["cause"] == "exit"
               for a in attempts), attempts
    assert attempts[0]["where"] == attempts[1]["where"] and attempts[0]["where"].endswith(":%d" % (
        fail_on_worker1.__code__.co_firstlineno + 2)), attempts
    assert wait_no_tfos_processes(30) == []


# ---- InputMode.SPARK -------------------------------------------------------------

def test_train_rdd_every_row_once_per_epoch(spark, tmp_path):
    sc = spark.sparkContext
    rdd = sc.parallelize([(i, float(i)) for i in range(2000)], 6)
    cluster = TFCluster.run(sc, count_rows, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    cluster.train(rdd, num_epochs=2, feed_timeout=120)
    cluster.shutdown(timeout=120)
    counts = [json.load(open(tmp_path / ("count-%d.json" % i))) for i in range(2)]
    assert sum(c["rows"] for c in counts) == 4000
    assert sum(c["sum"] for c in counts) == 2 * sum(range(2000))
    # both nodes were fed (partitions go to the node on the executor that computes them)
    assert all(c["rows"] > 0 for c in counts), counts
    assert wait_no_tfos_processes(30) == []


def take_one_then_end(args, ctx):
    """TFoS's early end: read a batch, terminate() the feed, return at once."""
    feed = TFNode.DataFeed(ctx.mgr, True)
    feed.next_batch(10)
    feed.terminate()


def _late(row):
    import time
    if row[0] >= 20:  # these partitions come after the programs ended
        time.sleep(0.3)
    return row


def test_partitions_fed_after_a_node_ended_are_not_wanted(spark, tmp_path):
    """A program that called terminate() and returned takes its agent, and
    the tag feed tasks look for, with it: the partitions its executor feeds
    after that are not wanted ("terminated", as TFoS skips them), not an
    executor without a node (FeedTaskError, four times, then the job)."""
    sc = spark.sparkContext
    rdd = sc.parallelize([(i, float(i)) for i in range(40)], 40).map(_late)
    cluster = TFCluster.run(sc, take_one_then_end, {}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    cluster.train(rdd, num_epochs=1, feed_timeout=60)
    nodes = cluster.driver.status()["nodes"]
    cluster.shutdown(timeout=60)
    assert [(n["state"], n["exit_code"]) for n in nodes] == [("exited", 0)] * 2, nodes
    assert wait_no_tfos_processes(30) == []


@pytest.mark.timeout(240)
def test_a_node_that_ended_early_does_not_hold_the_others_feed(spark, tmp_path):
    """One node's program took a partition, called terminate() and
    returned, so its executor's feed tasks found it ended and never asked
    for a turn again; the other node, reading on, was two partitions ahead
    and its next task waited for the ended one until feed_timeout (600 s).
    A node that reads no more is not waited for (the coordinator hears it
    in heartbeats and from the agent's exit). Before the fix this test ran
    past 600 s (stopped from outside); with it, 25 s."""
    sc = spark.sparkContext
    rdd = sc.parallelize([(i, float(i)) for i in range(600)], 12)
    cluster = TFCluster.run(sc, count_rows, {"out": str(tmp_path), "batch": 50, "slow": 0.1, "end_after_one": 1},
                            num_executors=2, num_ps=0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    cluster.train(rdd, num_epochs=1, feed_timeout=600)
    cluster.shutdown(timeout=120)
    count = json.load(open(tmp_path / "count-0.json"))
    assert 300 <= count["rows"] <= 550, count  # most of the job, once the other had ended
    assert wait_no_tfos_processes(30) == []


@pytest.mark.parametrize("kind", ["rdd", "dataframe"])
def test_a_node_slow_to_start_still_gets_its_share(spark, tmp_path, kind):
    """Issue 34, item 2: chief:0's program starts 2 s late, so its executor
    holds its first feed task that long. Spark gave worker:1 (free sooner)
    7 of the 8 partitions and a program that computes its steps from rows /
    workers ran out of data; the nodes now take turns: worker:1 waits for
    chief:0 to read, then goes at most one partition ahead of it."""
    sc = spark.sparkContext
    rows = [(i, float(i)) for i in range(800)]
    data = sc.parallelize(rows, 8) if kind == "rdd" else \
        spark.createDataFrame(sc.parallelize(rows, 8), "a long, b double")
    # ready_timeout=0: run() returns at registration, while chief:0 is still asleep (else run() waits for it)
    cluster = TFCluster.run(sc, count_rows, {"out": str(tmp_path), "first_delay": 2.0}, num_executors=2,
                            num_ps=0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, ready_timeout=0)
    cluster.train(data, num_epochs=1, feed_timeout=120)
    cluster.shutdown(timeout=120)
    counts = [json.load(open(tmp_path / ("count-%d.json" % i))) for i in range(2)]
    assert sum(c["sum"] for c in counts) == sum(range(800))
    assert all(300 <= c["rows"] <= 500 for c in counts), counts  # 4 : 4, at worst 3 : 5
    assert wait_no_tfos_processes(30) == []


def test_run_returns_once_every_fed_program_reads_or_after_ready_timeout(spark, tmp_path, caplog):
    """InputMode.SPARK: run() returns once every fed node's program reads its
    feed, so that the first train() does not share the cores with their
    start; past ready_timeout it returns, naming the nodes not reading."""
    sc = spark.sparkContext
    rdd = sc.parallelize([(i, float(i)) for i in range(1000)], 4)
    # programs that start reading 2 s late (executor 0's): run() waits for them
    slow = tmp_path / "slow"
    slow.mkdir()
    cluster = TFCluster.run(sc, count_rows, {"out": str(slow), "first_delay": 2.0}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    try:
        nodes = cluster.status()["nodes"]
        assert [bool(n["feed"] and n["feed"]["reading"]) for n in nodes] == [True, True], nodes
        cluster.train(rdd, num_epochs=1, feed_timeout=120)
    finally:
        cluster.shutdown(timeout=120)
    # programs that read only once told: run() returns after ready_timeout, saying which nodes do not read
    held, go = tmp_path / "held", tmp_path / "go"
    held.mkdir()
    caplog.set_level("INFO", logger="tfos")
    cluster = TFCluster.run(sc, count_rows, {"out": str(held), "go": str(go)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, ready_timeout=1)
    try:
        said = [r.getMessage() for r in caplog.records if "not reading its feed yet" in r.getMessage()]
        assert len(said) == 1 and "worker:0" in said[0] and "worker:1" in said[0], said
        nodes = cluster.status()["nodes"]
        assert not any(n["feed"] and n["feed"]["reading"] for n in nodes), nodes
        go.touch()
        cluster.train(rdd, num_epochs=1, feed_timeout=120)
    finally:
        cluster.shutdown(timeout=120)
    for out in (slow, held):
        counts = [json.load(open(out / ("count-%d.json" % i))) for i in range(2)]
        assert sum(c["rows"] for c in counts) == 1000 and sum(c["sum"] for c in counts) == sum(range(1000)), counts
    assert wait_no_tfos_processes(30) == []


def test_train_dataframe_through_arrow(spark, tmp_path):
    import numpy as np
    sc = spark.sparkContext
    feats = np.arange(300 * 8, dtype=np.float64).reshape(300, 8)
    rows = [(feats[i].tolist(), i % 10) for i in range(300)]
    df = spark.createDataFrame(rows, "features array<double>, label long").repartition(4)
    cluster = TFCluster.run(sc, count_arrays, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    cluster.train(df, num_epochs=1, feed_timeout=120)
    cluster.shutdown(timeout=120)
    got = [json.load(open(tmp_path / ("arrays-%d.json" % i))) for i in range(2)]
    assert sum(g["rows"] for g in got) == 300
    assert sum(g["label_sum"] for g in got) == sum(i % 10 for i in range(300))
    assert all(g["shapes"] in ([[8]], []) for g in got), got


def test_inference_one_result_per_row_in_order(spark):
    sc = spark.sparkContext
    rdd = sc.parallelize([(i,) for i in range(1000)], 7)
    cluster = TFCluster.run(sc, double_it, {}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    results = cluster.inference(rdd, feed_timeout=120).collect()
    # more jobs on the same cluster (output rings handed over), one per kind
    # of batch_results argument: each result is what TensorFlowOnSpark gives,
    # the argument's item (a 2-D array's row is a 1-D array, a 1-D array's a
    # numpy scalar), so e.g. .sum() works as under TFoS (issue 34)
    def kind(k, n=50):
        return cluster.inference(sc.parallelize([(i, k) for i in range(n)], 3))
    two_d, one_d_sum = kind("2d").collect(), kind("1d").sum()
    one_d, arrays, dicts, scalars = (kind(k).collect() for k in ("1d", "arrays", "dicts", "scalars"))
    # numpy results travel as arrays (results.py); a cached RDD's readers get them back as items too
    cached = kind("1d").cache()
    read_back = cached.map(lambda v: (type(v).__name__, int(v))).collect()
    cached.unpersist()
    # an RDD Spark holds pickled goes to the nodes as its pickled batches
    # (feeding.pickled_batches): the program gets the objects it holds, as
    # under TensorFlowOnSpark (Rows, not tuples); rows made by Python code in
    # the feed task itself (an uncached map) are fed as rows
    from pyspark.sql import Row
    from tfos._spark.feeding import pickled_batches
    held = sc.parallelize([Row(id=i, kind="row") for i in range(50)], 3)
    assert pickled_batches(held) is not None and pickled_batches(held.map(lambda r: r).cache()) is not None
    assert pickled_batches(held.map(lambda r: r)) is None
    typed = cluster.inference(held).collect()
    mapped = cluster.inference(held.map(lambda r: r)).collect()
    cluster.shutdown(timeout=120)
    assert read_back == [("int64", 2 * i) for i in range(50)], read_back[:3]
    assert typed == [("Row", i) for i in range(50)] and mapped == typed, (typed[:3], mapped[:3])
    two_d[0][0] = -1  # a row is writable, and only itself
    assert two_d[0].tolist() == [-1, 0] and two_d[1].tolist() == [1, 2]
    two_d[0][0] = 0
    assert results == [(i, 2 * i) for i in range(1000)]
    assert all(isinstance(r, np.ndarray) and r.shape == (2,) for r in two_d), two_d[:3]
    assert [r.tolist() for r in two_d] == [[i, 2 * i] for i in range(50)]
    assert one_d_sum == 2 * sum(range(50))
    assert all(isinstance(v, np.integer) for v in one_d) and one_d == [2 * i for i in range(50)]
    assert all(isinstance(r, np.ndarray) for r in arrays) and [r.tolist() for r in arrays] == [[i, 2 * i] for i in
                                                                                               range(50)]
    assert dicts == [{"id": i, "twice": 2 * i} for i in range(50)]
    assert scalars == [2 * i for i in range(50)] and all(type(v) is int for v in scalars)
    assert wait_no_tfos_processes(30) == []


def test_exception_while_training_names_the_node(spark, tmp_path):
    sc = spark.sparkContext
    # 8 MB of rows for 1 MiB rings: the feed is still running when the node fails
    rdd = sc.parallelize([(i, "x" * 1000) for i in range(8000)], 8)
    cluster = TFCluster.run(sc, read_then_fail, {}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, feed_mb=1,
                            max_restarts=0)
    with pytest.raises(TFClusterError) as err:
        cluster.train(rdd, feed_timeout=600)
    msg = str(err.value)
    assert "worker:1" in msg and "ValueError: bad record in the user's code" in msg, msg
    with pytest.raises(TFClusterError):
        cluster.shutdown(timeout=60)
    assert wait_no_tfos_processes(30) == []


def test_killed_process_fails_the_feed_fast(spark, tmp_path):
    sc = spark.sparkContext
    # 8 MB of rows for 1 MiB rings read at ~200 rows/s: the feed is blocked on
    # a full ring when the kill comes
    rdd = sc.parallelize([(i, "x" * 1000) for i in range(8000)], 8)
    cluster = TFCluster.run(sc, count_rows, {"out": str(tmp_path), "slow": 0.05, "batch": 10}, num_executors=2,
                            num_ps=0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, feed_mb=1,
                            max_restarts=0)
    def started_victim():
        nodes = [n for n in cluster.status()["nodes"] if n["index"] == 1 and n["pid"] > 0]
        return nodes[0] if nodes else None

    victim = wait_for(started_victim, 60)
    assert victim, cluster.status()

    import threading

    def kill_soon():
        time.sleep(3)
        os.kill(victim["pid"], signal.SIGKILL)

    threading.Thread(target=kill_soon, daemon=True).start()
    with pytest.raises(TFClusterError) as err:
        cluster.train(rdd, feed_timeout=600)
    msg = str(err.value)
    assert "worker:1" in msg and "signal 9" in msg, msg
    # what the feeding tasks saw: which partition, which node died and why
    assert "feeding partition" in msg and "the cluster failed: worker:1" in msg, msg
    with pytest.raises(TFClusterError):
        cluster.shutdown(timeout=60)
    assert wait_no_tfos_processes(30) == []


def log_ids(args, ctx):
    """Append every row id read to a file of this node and attempt."""
    feed = TFNode.DataFeed(ctx.mgr, True)
    path = os.path.join(args["out"], "ids-%d-attempt%d-%d.txt" % (ctx.executor_id, ctx.attempt, os.getpid()))
    with open(path, "w") as f:
        while not feed.should_stop():
            batch = feed.next_batch(10)
            f.write("".join("%d\n" % r[0] for r in batch))
            f.flush()
            time.sleep(args["slow"])


def test_killed_node_restarts_and_every_partition_is_delivered(spark, tmp_path):
    """kill -9 of a node's program while train() feeds it: the cluster is
    formed again (attempt 2), the partitions not yet read are fed again, and
    every row reaches a node at least once."""
    sc = spark.sparkContext
    n = 6000
    rdd = sc.parallelize([(i, "x" * 1000) for i in range(n)], 8)
    cluster = TFCluster.run(sc, log_ids, {"out": str(tmp_path), "slow": 0.02}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, feed_mb=1,
                            max_restarts=2)

    def started_victim():
        nodes = [n for n in cluster.status()["nodes"] if n["index"] == 1 and n["pid"] > 0]
        return nodes[0] if nodes else None

    victim = wait_for(started_victim, 60)
    assert victim

    import threading

    def kill_soon():
        # once the node has read some rows
        wait_for(lambda: any(p.name.startswith("ids-%d-" % victim["executor_id"]) and p.stat().st_size > 0
                             for p in tmp_path.iterdir()), 60)
        os.kill(victim["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_soon, daemon=True)
    killer.start()
    cluster.train(rdd, feed_timeout=300)
    killer.join(5)
    status = cluster.status()
    cluster.shutdown(timeout=120)
    assert status["attempt"] == 2, status
    assert len(status["history"]) == 1 and "signal 9" in status["history"][0], status["history"]
    assert status["partitions_refed"] >= 1, status
    seen = set()
    for p in tmp_path.iterdir():
        seen.update(int(x) for x in p.read_text().split())
    assert seen == set(range(n)), "rows never delivered: %d" % (n - len(seen & set(range(n))))
    assert any("attempt2" in p.name for p in tmp_path.iterdir())


def checkpointing_reader(args, ctx):
    """A model whose state is the row ids it trained on, checkpointed (with
    the feed position) every few partitions; worker:1 of attempt 1 dies
    after a while."""
    import json
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    ckpt = os.path.join(ctx.checkpoint_dir, "state-%s.json" % node)
    state = json.load(open(ckpt)) if os.path.exists(ckpt) else []
    feed = TFNode.DataFeed(ctx.mgr, True)
    fresh, at_ckpt = [], 0
    while not feed.should_stop():
        fresh.extend(int(r[0]) for r in feed.next_batch(30))
        done = len(feed.mgr.consumed)
        ctx.report(step=done, rows=len(state) + len(fresh))  # to the MLflow run, with mlflow=
        if done - at_ckpt >= args["every"]:
            # the checkpoint and its feed position go together: a stop
            # (SIGTERM) waits until both are written
            with feed.checkpoint():
                state.extend(fresh)
                fresh = []
                with open(ckpt + ".tmp", "w") as f:
                    json.dump(state, f)
                os.replace(ckpt + ".tmp", ckpt)
            at_ckpt = done
        if ctx.attempt == 1 and ctx.task_index == 1 and done >= args["die_after"]:
            with open(os.path.join(args["out"], "lost-%s.txt" % node), "w") as f:
                f.write(str(len(fresh)))
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args["slow"])
    state.extend(fresh)
    # the state of the attempt that finishes is the one that survives
    with open(os.path.join(args["out"], "final-%d-%s.json" % (ctx.attempt, node)), "w") as f:
        json.dump(state, f)


def test_restart_resumes_the_feed_where_the_checkpoint_stands(spark, tmp_path):
    """Beyond at-least-once: after a kill -9 mid-epoch, the model state that
    survives (its checkpoints plus what it read after them) has every row id
    exactly once per epoch: rows before a checkpoint are never fed again."""
    import collections
    import json
    sc = spark.sparkContext
    n, epochs = 3000, 2
    rdd = sc.parallelize([(i,) for i in range(n)], 15)
    out = tmp_path / "out"
    out.mkdir()
    cluster = TFCluster.run(sc, checkpointing_reader, {"out": str(out), "every": 2, "die_after": 5, "slow": 0.01},
                            num_executors=2, num_ps=0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60,
                            max_restarts=2, checkpoint_dir=str(tmp_path / "ckpt"), failure_grace=10)
    cluster.train(rdd, num_epochs=epochs, feed_timeout=300)
    status = cluster.status()
    cluster.shutdown(timeout=120)
    assert status["attempt"] == 2, status
    counts = collections.Counter()
    for p in out.glob("final-%d-*.json" % status["attempt"]):
        counts.update(json.loads(p.read_text()))
    wrong = {i: c for i, c in counts.items() if c != epochs}
    missing = [i for i in range(n) if i not in counts]
    lost = int((out / "lost-worker-1.txt").read_text())
    print("rows the killed node read after its last checkpoint (fed again): %d; rows in the surviving state "
          "seen other than once per epoch: %d" % (lost, len(wrong) + len(missing)))
    assert not missing and not wrong, (missing[:5], list(wrong.items())[:5])
    assert wait_no_tfos_processes(30) == []


def record_port_holding(args, ctx):
    """What map_fun sees of its port, as TFoS programs check it."""
    import errno
    import json
    import socket

    def bind_fails():
        s = socket.socket()
        try:
            s.bind(("", ctx.port))
            return False
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
        finally:
            s.close()

    rec = {"held": ctx.tmp_socket is not None, "bind_fails": bind_fails()}
    if ctx.tmp_socket is not None:
        rec["sock_port"] = ctx.tmp_socket.getsockname()[1]
    ctx.release_port()
    rec["after"] = ctx.tmp_socket is None and not bind_fails()
    with open(os.path.join(args["out"], "port-%d.json" % ctx.executor_id), "w") as f:
        json.dump(dict(rec, port=ctx.port), f)


@pytest.mark.parametrize("release_port", [True, False])
def test_release_port_false_hands_map_fun_the_held_port(spark, tmp_path, release_port):
    """TFoS's contract: with release_port=False, ctx.tmp_socket holds the
    node's port (binding it fails) until ctx.release_port(); by default tfos
    hands the port over at exec and there is nothing to release."""
    import json
    cluster = TFCluster.run(spark.sparkContext, record_port_holding, {"out": str(tmp_path)}, num_executors=2,
                            num_ps=0, reservation_timeout=60, release_port=release_port)
    cluster.shutdown(timeout=120)
    for i in range(2):
        rec = json.loads((tmp_path / ("port-%d.json" % i)).read_text())
        if release_port:
            assert rec == {"held": False, "bind_fails": False, "after": True, "port": rec["port"]}, rec
        else:
            assert rec["held"] and rec["bind_fails"] and rec["sock_port"] == rec["port"] and rec["after"], rec
    assert wait_no_tfos_processes(30) == []
