"""Spark's GPU scheduling reaches the nodes: with workers that own (fake) GPUs
and an application that asks one per executor and per task, each node's
CUDA_VISIBLE_DEVICES is the address Spark gave its task.

Its own Spark cluster (module scope): two workers whose GPU discovery script
reports a different address each ("2" and "5", so nothing passes by
accident with a default "0"). No real GPU is needed: Spark standalone only
runs the script and hands out what it printed."""
import json
import os
import sys

import pytest

from pyspark import cloudpickle

from sparkcluster import SparkCluster, shutdown_gateway
from tfos import TFCluster, TFParallel

from tfoshelpers import tfos_processes, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ADDRESSES = ["2", "5"]  # worker0's GPU, worker1's GPU

DISCOVERY = """#!/bin/sh
# Spark's GPU discovery script: one fake GPU, its address from the worker's environment
printf '{"name": "gpu", "addresses": ["%s"]}\\n' "$TFOS_FAKE_GPU_ADDRESS"
"""


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory):
    script = tmp_path_factory.mktemp("gpu") / "fake_gpus.sh"
    script.write_text(DISCOVERY)
    script.chmod(0o755)
    opts = "-Dspark.worker.resource.gpu.amount=1 -Dspark.worker.resource.gpu.discoveryScript=%s" % script
    cluster = SparkCluster(n_workers=2, worker_cores=1, worker_memory="1g", worker_opts=opts,
                           worker_env=[{"TFOS_FAKE_GPU_ADDRESS": a} for a in ADDRESSES])
    cluster.start(timeout=float(os.environ.get("TFOS_SPARK_START_TIMEOUT", "120")))
    try:
        yield cluster
    finally:
        cluster.stop()


GPU_CONF = {"spark.executor.resource.gpu.amount": "1", "spark.task.resource.gpu.amount": "1"}


@pytest.fixture(scope="module")
def gpu_spark(gpu_cluster):
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    if SparkContext._active_spark_context is not None:  # one SparkContext per process
        SparkContext._active_spark_context.stop()
    try:
        session = gpu_cluster.spark_session("tfos-test-gpu-resources", **GPU_CONF)
        try:
            yield session
        finally:
            session.stop()
    finally:
        # Later modules' sessions must not ask for GPUs: SparkSession.builder
        # is one object per process and keeps every option ever set on it,
        # and when this session launched the driver JVM its options became
        # that JVM's system properties (read by every later SparkConf). So
        # drop them, and end the driver JVM (the next session starts one).
        for k in GPU_CONF:
            SparkSession.builder._options.pop(k, None)
        shutdown_gateway()


@pytest.fixture(autouse=True)
def no_tfos_leftovers(gpu_cluster):
    """(Overrides conftest's: the same check, for this cluster's processes
    only: other Spark jobs may run on this host.)"""
    yield
    import signal
    marker = gpu_cluster.tmp_dir
    wait_for(lambda: not tfos_processes(marker), 30)
    left = tfos_processes(marker)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "tfos processes left running after the test: %s" % left


def _worker_index(path):
    """Which worker's work dir a path is in (.../work/worker<i>/app-.../<n>)."""
    parts = path.split(os.sep)
    for p in parts:
        if p.startswith("worker") and p[6:].isdigit():
            return int(p[6:])
    raise AssertionError("not under a worker's work dir: %s" % path)


def spark_gpus(_):
    """In a Spark task: the GPU addresses Spark assigned it."""
    import os
    from pyspark import TaskContext
    res = TaskContext.get().resources()
    yield {"cwd": os.getcwd(), "gpus": list(res["gpu"].addresses) if "gpu" in res else None}


def record_gpu(args, ctx):
    import json
    import os
    with open(os.path.join(args["out"], "gpu-%d.json" % ctx.executor_id), "w") as f:
        json.dump({"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "cwd": os.getcwd(),
                   "job": ctx.job_name, "index": ctx.task_index}, f)


def parallel_gpu(args, ctx):
    import os
    from pyspark import TaskContext
    return {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "cwd": os.getcwd(),
            "task_gpus": list(TaskContext.get().resources()["gpu"].addresses)}


def test_spark_assigns_the_workers_gpus(gpu_spark):
    """The setting itself: each executor's tasks get their worker's GPU."""
    sc = gpu_spark.sparkContext
    got = sc.parallelize(range(2), 2).barrier().mapPartitions(spark_gpus).collect()
    assert sorted(_worker_index(g["cwd"]) for g in got) == [0, 1], got
    for g in got:
        assert g["gpus"] == [ADDRESSES[_worker_index(g["cwd"])]], got


def test_node_cuda_visible_devices_is_the_tasks_gpu(gpu_spark, tmp_path):
    sc = gpu_spark.sparkContext
    cluster = TFCluster.run(sc, record_gpu, {"out": str(tmp_path)}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.TENSORFLOW, reservation_timeout=60)
    cluster.shutdown(timeout=120)
    nodes = [json.load(open(tmp_path / ("gpu-%d.json" % i))) for i in range(2)]
    assert sorted(_worker_index(n["cwd"]) for n in nodes) == [0, 1], nodes
    for n in nodes:
        assert n["cuda"] == ADDRESSES[_worker_index(n["cwd"])], nodes


def test_tfparallel_cuda_visible_devices_is_the_tasks_gpu(gpu_spark):
    sc = gpu_spark.sparkContext
    got = TFParallel.run(sc, parallel_gpu, None, num_executors=2, use_barrier=True)
    assert sorted(_worker_index(g["cwd"]) for g in got) == [0, 1], got
    for g in got:
        expected = ADDRESSES[_worker_index(g["cwd"])]
        assert g["task_gpus"] == [expected] and g["cuda"] == expected, got
