"""Misconfigured clusters and lost drivers: clear errors that say what to
change, and nothing left running."""
import json
import os
import signal
import sys
import threading
import time

import pytest

from pyspark import cloudpickle

from tfos import TFCluster, TFSparkNode
from tfos.TFCluster import TFClusterError

from tfoshelpers import tfos_processes, wait_no_tfos_processes, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def sleep_fun(args, ctx):
    time.sleep(args)


def test_too_few_executors(spark):
    with pytest.raises(TFClusterError) as err:
        TFCluster.run(spark.sparkContext, sleep_fun, 1, num_executors=3, num_ps=0, reservation_timeout=3)
    msg = str(err.value)
    assert "needs 3 Spark executors" in msg and "has 2" in msg and "spark.executor.instances" in msg, msg
    assert tfos_processes() == []


def test_spark_mode_with_executors_that_would_get_no_node(spark):
    with pytest.raises(TFClusterError) as err:
        TFCluster.run(spark.sparkContext, sleep_fun, 1, num_executors=1, num_ps=0,
                      input_mode=TFCluster.InputMode.SPARK, reservation_timeout=10)
    msg = str(err.value)
    assert "has 2 executors for 1 nodes" in msg and "num_executors=2" in msg, msg


def test_second_node_on_an_executor_is_refused(spark):
    """A node task on an executor that already runs a node of the cluster (as
    when spark.task.cpus < spark.executor.cores lets two node tasks share
    one): it says so and what to change, and the cluster stops."""
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, sleep_fun, 300, num_executors=2, num_ps=0,  # never reads: run() need not wait
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, ready_timeout=0)
    spec = cluster.spec

    def second_node(it):
        return [TFSparkNode.start_node(spec, 1)[1] for _ in it]

    errors = sc.parallelize([0, 1], 2).mapPartitions(second_node).collect()
    assert any(e and "already runs a node of this cluster" in e["error"] for e in errors), errors
    with pytest.raises(TFClusterError) as err:
        cluster.shutdown(timeout=120)
    msg = str(err.value)
    assert "could not start" in msg and "spark.task.cpus" in msg, msg
    assert wait_no_tfos_processes(30) == []


def test_reservation_timeout_names_the_missing_nodes(spark):
    """Executors busy with another job: the node tasks cannot start, and the
    reservation timeout says which nodes never registered."""
    sc = spark.sparkContext
    started = threading.Event()

    def blocker():
        sc.setJobGroup("blocker", "holds one executor", interruptOnCancel=True)
        started.set()
        try:
            sc.parallelize([0], 1).foreach(lambda _: time.sleep(60))
        except Exception:
            pass

    t = threading.Thread(target=blocker, daemon=True)
    t.start()
    started.wait(10)
    assert wait_for(lambda: sc.statusTracker().getActiveJobsIds(), 20)
    time.sleep(2)
    try:
        with pytest.raises(TFClusterError) as err:
            TFCluster.run(sc, sleep_fun, 1, num_executors=2, num_ps=0, reservation_timeout=8)
        msg = str(err.value)
        assert "reservation timed out" in msg and "missing" in msg and "worker:0" in msg and "worker:1" in msg, msg
    finally:
        sc.cancelJobGroup("blocker")
        t.join(30)
    assert wait_no_tfos_processes(30) == []


def hangs_on_worker1(args, ctx):
    import threading as th
    if ctx.task_index != 1:
        for _ in range(600):  # busy, and says so
            ctx.heartbeat()
            time.sleep(0.2)
        return
    lock = th.Lock()

    def holder():
        lock.acquire()
        time.sleep(600)

    def deadlock_here():
        th.Thread(target=holder, daemon=True).start()
        time.sleep(0.2)
        lock.acquire()

    deadlock_here()


def test_hang_timeout_declares_a_deadlocked_map_fun_hung(spark):
    """TFCluster.run(hang_timeout=S): a map_fun that neither reads its feed
    nor calls ctx.heartbeat() for S s is hung; the error carries its stacks."""
    cluster = TFCluster.run(spark.sparkContext, hangs_on_worker1, {}, num_executors=2, num_ps=0,
                            reservation_timeout=60, max_restarts=0, hang_timeout=3)
    with pytest.raises(TFClusterError) as err:
        cluster.shutdown(timeout=120)
    msg = str(err.value)
    assert "worker:1" in msg and "hung: no progress for 3 s" in msg, msg
    assert "in deadlock_here" in msg, msg
    assert cluster.policy.history[-1]["cause"] == "hang"
    assert wait_no_tfos_processes(30) == []


def reads_but_never_answers(args, ctx):
    """An inference map_fun with the README's old mistake: it reads its feed
    and never calls feed.batch_results()."""
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        feed.next_batch(10)


def test_inference_without_results_asks_about_batch_results(spark):
    """Not a ring timeout after feed_timeout (600 s): the task fails once the
    node has read the partition and sent nothing for results_timeout s."""
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, reads_but_never_answers, None, 2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK)
    try:
        with pytest.raises(Exception) as err:
            cluster.inference(sc.parallelize([(i,) for i in range(20)], 2), results_timeout=2).collect()
        msg = str(err.value)
        assert "returned no results for partition" in msg, msg[-3000:]
        assert "does map_fun call feed.batch_results() for every batch it reads?" in msg, msg[-3000:]
        assert "(0 results of 10)" in msg and "to worker:" in msg, msg[-3000:]
    finally:
        cluster.shutdown(timeout=120)
    assert wait_no_tfos_processes(30) == []


def records_ids(args, ctx):
    """Train mode: read the whole feed, write the ids read and the attempt."""
    import json
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
    ids = []
    while not feed.should_stop():
        ids += [r[0] for r in feed.next_batch(50)]
    with open(os.path.join(args["out"], "ids-%d.json" % ctx.executor_id), "w") as f:
        json.dump({"ids": ids, "attempt": os.environ.get("TFOS_ATTEMPT")}, f)


def killed_once(rows):
    """In the feeding Python worker: partition 1's first attempt SIGKILLs
    its own process at its 60th row, mid-partition (issue 35, item 7)."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    for n, row in enumerate(rows):
        if tc.partitionId() == 1 and tc.attemptNumber() == 0 and n == 60:
            os.kill(os.getpid(), signal.SIGKILL)
        yield row


def test_a_killed_feeding_worker_is_refed_by_spark_and_the_program_sees_nothing(spark, tmp_path):
    """Spark's task retry feeds the partition again; the cluster is not
    formed again (it was, and 4,691 of 20,000 rows were fed twice) and the
    program neither fails nor sees FeedClosed."""
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, records_ids, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60, max_restarts=0)
    cluster.train(sc.parallelize([(i,) for i in range(400)], 4).mapPartitions(killed_once), feed_timeout=120)
    cluster.shutdown(timeout=120)
    got = [json.load(open(tmp_path / ("ids-%d.json" % i))) for i in range(2)]
    assert len({g["attempt"] for g in got}) == 1, got  # one attempt: no node re-formed
    ids = [i for g in got for i in g["ids"]]
    assert set(ids) == set(range(400))
    assert len(ids) <= 400 + 60, len(ids)  # at most the rows read before the kill, twice
    assert wait_no_tfos_processes(30) == []
