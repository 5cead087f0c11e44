"""Executor loss: a whole Spark worker is killed while train() feeds the node
on its executor. The node's agent notices its executor is gone, the cluster
is formed again on the executor Spark starts on the spare worker, and every
row still reaches a node (at-least-once)."""
import os
import signal
import sys
import threading
import time

import pytest

from pyspark import cloudpickle

from tfos import TFCluster, TFNode
from tfos.TFSparkNode import _ppid

from sparkcluster import SparkCluster
from tfoshelpers import tfos_processes, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def log_ids(args, ctx):
    feed = TFNode.DataFeed(ctx.mgr, True)
    path = os.path.join(args["out"], "ids-%d-attempt%d-%d.txt" % (ctx.executor_id, ctx.attempt, os.getpid()))
    with open(path, "w") as f:
        while not feed.should_stop():
            batch = feed.next_batch(10)
            f.write("".join("%d\n" % r[0] for r in batch))
            f.flush()
            time.sleep(args["slow"])


@pytest.fixture(scope="module")
def three_workers():
    """Its own cluster: three 1-core workers, of which the application uses
    two (spark.cores.max=2); the third is where Spark replaces a lost one."""
    cluster = SparkCluster(n_workers=3, worker_cores=1, worker_memory="1g")
    cluster.start(timeout=120)
    try:
        yield cluster
    finally:
        cluster.stop()


def _watch_pid(agent_pid):
    with open("/proc/%d/cmdline" % agent_pid, "rb") as f:
        argv = f.read().split(b"\0")
    return int(argv[argv.index(b"--watch-pid") + 1])


def test_killed_worker_node_is_relaunched_elsewhere(three_workers, tmp_path):
    spark = three_workers.spark_session("tfos-executor-loss", wait_executors=0, **{"spark.cores.max": "2"})
    try:
        three_workers.wait_executors(spark, 2, 60)
        sc = spark.sparkContext
        n = 4000
        rdd = sc.parallelize([(i, "x" * 1000) for i in range(n)], 8)
        cluster = TFCluster.run(sc, log_ids, {"out": str(tmp_path), "slow": 0.02}, num_executors=2, num_ps=0,
                                input_mode=TFCluster.InputMode.SPARK, reservation_timeout=120, feed_mb=1,
                                max_restarts=2)
        victim = wait_for(lambda: [x for x in cluster.status()["nodes"] if x["index"] == 1 and x["pid"] > 0], 60)
        assert victim
        victim = victim[0]
        executor_pid = _watch_pid(victim["agent_pid"])
        worker_pid = _ppid(executor_pid)  # the Worker JVM started the executor
        assert worker_pid in three_workers._pgids()

        def kill_worker():
            wait_for(lambda: any(p.name.startswith("ids-%d-" % victim["executor_id"]) and p.stat().st_size > 0
                                 for p in tmp_path.iterdir()), 60)
            os.killpg(worker_pid, signal.SIGKILL)  # the worker, its executor, its Python workers

        killer = threading.Thread(target=kill_worker, daemon=True)
        killer.start()
        cluster.train(rdd, feed_timeout=300)
        killer.join(5)
        status = cluster.status()
        cluster.shutdown(timeout=120)
        assert status["attempt"] == 2, status
        assert "executor" in status["history"][0], status["history"]
        seen = set()
        for p in tmp_path.iterdir():
            seen.update(int(x) for x in p.read_text().split())
        assert seen == set(range(n)), "rows never delivered: %d" % len(set(range(n)) - seen)
        left = wait_for(lambda: not tfos_processes(three_workers.tmp_dir), 30)
        assert left, tfos_processes(three_workers.tmp_dir)
    finally:
        spark.stop()
