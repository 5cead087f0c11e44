"""tfos.spark.Cluster (the API that needs only a SparkSession) on a classic
session and over a real Spark Connect server, against the engine's own
ceiling and Spark's predict_batch_udf, on the same cluster and data, in one
run.

Starts one Spark standalone cluster (tests/spark/sparkcluster.py: a master
and 2 workers of 1 core, on 127.0.0.1); first a classic session on it, then
a Spark Connect server (SparkConnectServer through spark-submit) and a client
session. With each session, on a cached DataFrame of N rows (id and 8 float
columns, P partitions), it measures:

  ceiling       a mapInArrow stage that only counts its rows (what any feed
                through Spark's Python workers can reach)
  feed          Cluster.train(df) into 2 nodes whose program only counts
                (rows/s of the train() call; the cluster formed before)
  predict       Cluster.predict(df, "y double") with a linear model (y = w.x
                + b, numpy) on 2 nodes, summed so every row is computed
  predict_udf   pyspark.ml.functions.predict_batch_udf with the same model
                and batch size, summed the same way

Each figure is the median of --rounds rounds; every run checks its row count
(and the predictions' sum), so a lost row fails the benchmark.

Prints `name: value` lines on stdout: rows/s, and the ratios
{classic,connect}_feed_vs_ceiling, _predict_vs_ceiling and
_predict_vs_predict_batch_udf. Progress goes to stderr.

Usage: .venv/bin/python bench/spark_cluster_api.py [--rows N] [--partitions P] [--rounds R]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "spark"))

from sparkcluster import SparkCluster  # noqa: E402

FEATURES = 8
W = [0.5 * (i + 1) for i in range(FEATURES)]
B = 1.0
BATCH = 1024


def log(msg):
    sys.stderr.write("[bench-cluster-api %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def count_fun(args, ctx):
    """Reads its feed to the end, counting rows."""
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr)
    n = 0
    while not feed.should_stop():
        cols = feed.next_batch_arrays(4096)
        if cols:
            n += len(cols[0])
    print("read %d rows" % n, flush=True)


def predict_fun(args, ctx):
    """y = w.x + b for every fed row (columns f0..f7)."""
    import numpy as np
    from tfos import TFNode
    w, b = np.asarray(args["w"], dtype=np.float64), args["b"]
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        cols = feed.next_batch_arrays(args["batch"])
        if cols:
            x = np.stack(cols, axis=1).astype(np.float64)
            feed.batch_results(x @ w + b)


def counting_stage(batches):
    import pyarrow as pa
    n = 0
    for b in batches:
        n += b.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]})


def make_predict_fn():
    import numpy as np
    w = np.asarray(W, dtype=np.float64)

    def predict(f0, f1, f2, f3, f4, f5, f6, f7):  # one input per column, as predict_batch_udf wants
        return np.stack([f0, f1, f2, f3, f4, f5, f6, f7], axis=1).astype(np.float64) @ w + B
    return predict


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(kind, spark, opts, results):
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType
    from tfos.spark import Cluster

    n = opts.rows
    cols = ["CAST((id %% %d) AS FLOAT) * %g AS f%d" % (97 + i, 0.01 * (i + 1), i) for i in range(FEATURES)]
    df = spark.range(0, n, 1, opts.partitions).selectExpr(*cols).cache()
    assert df.count() == n
    expect = df.select((sum(F.col("f%d" % i) * W[i] for i in range(FEATURES)) + B).alias("y")) \
        .agg(F.sum("y")).collect()[0][0]
    udf = predict_batch_udf(make_predict_fn, return_type=DoubleType(), batch_size=BATCH)
    df.mapInArrow(counting_stage, "n long").collect()  # warm-up: the executors' Python workers start
    for rnd in range(opts.rounds):
        secs, got = timed(lambda: sum(r["n"] for r in df.mapInArrow(counting_stage, "n long").collect()))
        assert got == n, got
        results.setdefault(kind + "_ceiling", []).append(n / secs)
        with Cluster(spark, count_fun, None, 2) as cluster:
            secs, fed = timed(lambda: cluster.train(df))
        assert fed == n, fed
        results.setdefault(kind + "_feed", []).append(n / secs)
        with Cluster(spark, predict_fun, {"w": W, "b": B, "batch": BATCH}, 2) as cluster:
            secs, total = timed(lambda: cluster.predict(df, "y double").agg(F.sum("y")).collect()[0][0])
        assert abs(total - expect) <= 1e-6 * abs(expect), (total, expect)
        results.setdefault(kind + "_predict", []).append(n / secs)
        secs, total = timed(lambda: df.select(udf(*["f%d" % i for i in range(FEATURES)]).alias("y"))
                            .agg(F.sum("y")).collect()[0][0])
        assert abs(total - expect) <= 1e-6 * abs(expect), (total, expect)
        results.setdefault(kind + "_predict_batch_udf", []).append(n / secs)
        log("%s round %d: %s" % (kind, rnd + 1, ", ".join("%s %.0f" % (k, v[-1]) for k, v in results.items()
                                                            if k.startswith(kind))))
    df.unpersist()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args()
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    results = {}
    with SparkCluster(n_workers=2, worker_cores=1, worker_memory="2g") as cluster:
        log("classic session")
        spark = cluster.spark_session("tfos-bench-cluster-api", spark_executor_memory="1g")
        try:
            measure("classic", spark, opts, results)
        finally:
            spark.stop()
        log("Spark Connect server")
        server = cluster.connect_server("tfos-bench-connect", spark_executor_memory="1g")
        try:
            spark = server.session()
            try:
                measure("connect", spark, opts, results)
            finally:
                spark.stop()
        finally:
            server.stop()
    med = {k: statistics.median(v) for k, v in results.items()}
    print("rows: %d, partitions: %d, rounds: %d" % (opts.rows, opts.partitions, opts.rounds))
    for k in sorted(med):
        print("%s_rows_per_s: %.0f" % (k, med[k]))
    for kind in ("classic", "connect"):
        print("%s_feed_vs_ceiling: %.2f" % (kind, med[kind + "_feed"] / med[kind + "_ceiling"]))
        print("%s_predict_vs_ceiling: %.2f" % (kind, med[kind + "_predict"] / med[kind + "_ceiling"]))
        print("%s_predict_vs_predict_batch_udf: %.2f" % (kind, med[kind + "_predict"] /
                                                         med[kind + "_predict_batch_udf"]))


if __name__ == "__main__":
    main()
