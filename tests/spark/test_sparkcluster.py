"""The Spark test cluster itself: real master, workers, executors, Python."""

import json
import os
import sys

import pytest

from pyspark import cloudpickle

# Executors cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------- helpers
def _executor_of_this_task():
    """Runs inside a task: walk up from the Python worker to the executor JVM
    and return what identifies it."""
    import os
    import sys

    pid = os.getpid()
    chain = []
    for _ in range(8):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        chain.append(pid)
        if b"--executor-id" in argv:
            i = argv.index(b"--executor-id")
            return {
                "executor_id": argv[i + 1].decode(),
                "executor_pid": pid,
                "python_pid": os.getpid(),
                "python": sys.executable,
                "prefix": sys.prefix,
                "chain": chain,
            }
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        pid = int(stat[stat.rfind(b")") + 2:].split()[1])  # ppid
        if pid <= 1:
            break
    raise RuntimeError(f"no executor JVM above python worker {os.getpid()}: {chain}")


# ----------------------------------------------------------------- tests
def test_both_workers_registered(spark_cluster):
    state = spark_cluster.master_state()
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2, json.dumps(state["workers"], indent=1)
    for w in alive:
        assert w["host"] == "127.0.0.1"
        assert w["cores"] == 1
        assert w["memory"] == 1024
    assert state["url"] == spark_cluster.master_url
    assert spark_cluster.master_url.startswith("spark://127.0.0.1:")
    assert os.path.isdir(spark_cluster.log_dir)


def test_app_has_one_executor_per_worker(spark_cluster, spark):
    sc = spark.sparkContext
    assert sc.master == spark_cluster.master_url
    apps = [a for a in spark_cluster.master_state()["activeapps"] if a["id"] == sc.applicationId]
    assert len(apps) == 1 and apps[0]["cores"] == 2, apps
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()
    hosts = sorted(i.host() for i in infos)
    assert hosts == ["127.0.0.1"] * 3  # driver + 2 executors


def test_two_partitions_run_on_two_executors(spark):
    sc = spark.sparkContext
    res = sc.parallelize(range(2), 2).mapPartitions(lambda it: [_executor_of_this_task()]).collect()
    assert len(res) == 2
    assert res[0]["executor_id"] != res[1]["executor_id"], res
    assert res[0]["executor_pid"] != res[1]["executor_pid"], res
    assert os.getpid() not in (r["executor_pid"] for r in res)


def test_executors_run_the_venv_python(spark):
    sc = spark.sparkContext
    res = sc.parallelize(range(2), 2).mapPartitions(lambda it: [_executor_of_this_task()]).collect()
    for r in res:
        assert r["python"] == sys.executable, r
        assert r["prefix"] == sys.prefix, r


def test_barrier_stage_allgather(spark):
    from pyspark import BarrierTaskContext

    def task(it):
        ctx = BarrierTaskContext.get()
        values = list(it)
        gathered = ctx.allGather(json.dumps({"part": ctx.partitionId(), "sum": sum(values)}))
        ctx.barrier()
        addrs = [i.address for i in ctx.getTaskInfos()]
        yield {"part": ctx.partitionId(), "gathered": sorted(gathered), "addrs": addrs,
               "executor": _executor_of_this_task()["executor_id"]}

    rdd = spark.sparkContext.parallelize(range(10), 2)
    res = rdd.barrier().mapPartitions(task).collect()
    assert sorted(r["part"] for r in res) == [0, 1]
    expect = sorted(json.dumps({"part": p, "sum": s}) for p, s in ((0, 10), (1, 35)))
    for r in res:
        assert r["gathered"] == expect
        assert len(set(r["addrs"])) == 2  # two tasks on two executor endpoints
    assert res[0]["executor"] != res[1]["executor"]


def test_dataframe_arrow_collect(spark):
    """Executors compute a DataFrame, the driver receives it as Arrow record
    batches (pyarrow only; no pandas)."""
    import pyarrow as pa

    df = spark.range(0, 1000, numPartitions=2).selectExpr("id", "id * 0.5 AS half", "cast(id AS string) AS s")
    batches = df._collect_as_arrow()
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 1000
    assert table.schema.names == ["id", "half", "s"]
    assert table.column("id").to_pylist() == list(range(1000))
    assert table.column("half").to_pylist()[-1] == 499.5


def test_dataframe_topandas_arrow_roundtrip(spark):
    pd = pytest.importorskip("pandas", reason="pandas is not installed in this venv")
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.fallback.enabled") == "false"
    pdf = pd.DataFrame({"a": range(100), "b": [i * 1.5 for i in range(100)]})
    df = spark.createDataFrame(pdf).repartition(2)  # Arrow: pandas -> JVM
    df2 = df.selectExpr("a", "b * 2 AS b2")
    out = df2.toPandas().sort_values("a").reset_index(drop=True)  # Arrow: JVM -> pandas
    assert list(out["a"]) == list(range(100))
    assert list(out["b2"]) == [i * 3.0 for i in range(100)]


# That stop() leaves no process of the cluster is checked by stop() itself
# (SparkClusterError when one survives), at the end of every session: the
# spark_cluster fixture's teardown. A separate cluster stopped under a busy
# application was tested here until suite time made it too dear (33 s).
