"""tfos.spark.Cluster (the API that needs only a SparkSession) on a classic
session and over a real Spark Connect server, against the engine's own
ceilings and Spark's predict_batch_udf, on the same cluster and data, in one
run.

Starts one Spark standalone cluster (tests/spark/sparkcluster.py: a master
and 2 workers of 1 core, on 127.0.0.1); first a classic session on it, then
a Spark Connect server (SparkConnectServer through spark-submit) and a client
session. With each session, on a cached DataFrame of N rows (id and 8 float
columns, P partitions), each round measures:

  ceiling       a mapInArrow stage that only counts its rows (what any feed
                through Spark's Python workers can reach)
  feed          Cluster.train(df) into 2 nodes whose program only counts:
                the first train() right after the cluster formed (feed_first)
                and the median of --warm more on the same cluster (feed)
  arrow_udf     the same model as predict, y = w.x + b (numpy), in a
                mapInArrow stage that appends y to every batch, summed: the
                plain job predict does (predict's ceiling)
  pandas_udf    the same model in a scalar pandas_udf, summed
  predict       Cluster.predict(df, "y double") with that model on 2 nodes,
                summed so every row is computed: first and warm as for feed
  predict_batch_udf  pyspark.ml.functions.predict_batch_udf with the same
                model and batch size, summed the same way

Each figure is the median of --rounds rounds; every run checks its row count
(and the predictions' sum), so a lost row fails the benchmark.

Prints `name: value` lines on stdout: rows/s, the spread over rounds, and
the ratios {classic,connect}_feed[_first]_vs_ceiling,
_predict[_first]_vs_arrow_udf, _predict_vs_pandas_udf and
_predict_vs_predict_batch_udf. Progress goes to stderr.

Usage: .venv/bin/python bench/spark_cluster_api.py [--rows N] [--partitions P] [--rounds R] [--warm W]
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


def model_stage(batches):
    """The plain job Cluster.predict does: each batch with y = w.x + b
    appended (numpy over the Arrow columns)."""
    import numpy as np
    import pyarrow as pa
    w = np.asarray(W, dtype=np.float64)
    for b in batches:
        x = np.stack([b.column(i).to_numpy() for i in range(FEATURES)], axis=1).astype(np.float64)
        yield b.append_column("y", pa.array(x @ w + B))


def make_predict_fn():
    import numpy as np
    w = np.asarray(W, dtype=np.float64)

    def predict(f0, f1, f2, f3, f4, f5, f6, f7):  # one input per column, as predict_batch_udf wants
        return np.stack([f0, f1, f2, f3, f4, f5, f6, f7], axis=1).astype(np.float64) @ w + B
    return predict


def model_series(*cols):
    """The model in a scalar pandas_udf: a Series a column."""
    import pandas as pd
    return pd.Series(make_predict_fn()(*[c.to_numpy() for c in cols]))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(kind, spark, opts, results):
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import DoubleType
    from tfos.spark import Cluster

    n = opts.rows
    cols = ["CAST((id %% %d) AS FLOAT) * %g AS f%d" % (97 + i, 0.01 * (i + 1), i) for i in range(FEATURES)]
    df = spark.range(0, n, 1, opts.partitions).selectExpr(*cols).cache()
    assert df.count() == n
    expect = df.select((sum(F.col("f%d" % i) * W[i] for i in range(FEATURES)) + B).alias("y")) \
        .agg(F.sum("y")).collect()[0][0]
    udf = predict_batch_udf(make_predict_fn, return_type=DoubleType(), batch_size=BATCH)
    pudf = pandas_udf(model_series, DoubleType())
    out_schema = ", ".join(["%s %s" % nt for nt in df.dtypes] + ["y double"])
    features = ["f%d" % i for i in range(FEATURES)]

    def record(name, secs):
        results.setdefault(kind + "_" + name, []).append(n / secs)

    def check_sum(total):
        assert abs(total - expect) <= 1e-6 * abs(expect), (total, expect)

    def check_fed(fed):
        assert fed == n, fed

    def warm(name, fn, check):
        rates = []
        for _ in range(opts.warm):
            secs, out = timed(fn)
            check(out)
            rates.append(n / secs)
        results.setdefault(kind + "_" + name, []).append(statistics.median(rates))

    df.mapInArrow(counting_stage, "n long").collect()  # warm-up: the executors' Python workers start
    for rnd in range(opts.rounds):
        secs, got = timed(lambda: sum(r["n"] for r in df.mapInArrow(counting_stage, "n long").collect()))
        assert got == n, got
        record("ceiling", secs)
        secs, total = timed(lambda: df.mapInArrow(model_stage, out_schema).agg(F.sum("y")).collect()[0][0])
        check_sum(total)
        record("arrow_udf", secs)
        secs, total = timed(lambda: df.select(pudf(*features).alias("y")).agg(F.sum("y")).collect()[0][0])
        check_sum(total)
        record("pandas_udf", secs)
        with Cluster(spark, count_fun, None, 2, quiet=True) as cluster:
            secs, fed = timed(lambda: cluster.train(df))
            check_fed(fed)
            record("feed_first", secs)
            warm("feed", lambda: cluster.train(df), check_fed)
        with Cluster(spark, predict_fun, {"w": W, "b": B, "batch": BATCH}, 2, quiet=True) as cluster:
            def predicted():
                return cluster.predict(df, "y double").agg(F.sum("y")).collect()[0][0]
            secs, total = timed(predicted)
            check_sum(total)
            record("predict_first", secs)
            warm("predict", predicted, check_sum)
        secs, total = timed(lambda: df.select(udf(*features).alias("y")).agg(F.sum("y")).collect()[0][0])
        check_sum(total)
        record("predict_batch_udf", secs)
        log("%s round %d: %s" % (kind, rnd + 1, ", ".join("%s %.0f" % (k[len(kind) + 1:], v[-1])
                                                            for k, v in results.items() if k.startswith(kind))))
    df.unpersist()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm", type=int, default=3, help="warm runs a cluster, after its first (default 3)")
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
    print("rows: %d, partitions: %d, rounds: %d, warm runs a cluster: %d" % (opts.rows, opts.partitions,
                                                                        opts.rounds, opts.warm))
    for k in sorted(med):
        print("%s_rows_per_s: %.0f (%.0f-%.0f)" % (k, med[k], min(results[k]), max(results[k])))
    ratios = [("feed_first", "ceiling"), ("feed", "ceiling"), ("predict_first", "arrow_udf"),
              ("predict", "arrow_udf"), ("predict", "pandas_udf"), ("predict", "predict_batch_udf")]
    for kind in ("classic", "connect"):
        for a, b in ratios:
            # each round's own pair, so a slow round on both sides does not move the ratio
            per = [x / y for x, y in zip(results[kind + "_" + a], results[kind + "_" + b])]
            print("%s_%s_vs_%s: %.2f (%.2f-%.2f)" % (kind, a, b, statistics.median(per), min(per), max(per)))


if __name__ == "__main__":
    main()
