"""The digits example with tfos.spark.Cluster: a SparkSession is all it
needs, so it runs the same on Spark Connect and on a classic session.

    python examples/digits/spark_connect_digits.py --remote sc://HOST:15002
    python examples/digits/spark_connect_digits.py --master spark://HOST:7077

The training split is a DataFrame (features array<float>, label); a first
cluster of --num-nodes nodes trains on it (spark_digits.train_fun: two
workers with MultiWorkerMirroredStrategy, each fed the partitions its
executor computes) and saves the model in --model-dir; a second cluster loads
it on every node, and cluster.predict(test_df, "prediction long") gives back
the held-out rows with a prediction column, in order. It prints "test
accuracy: 0.9667".

The Spark application needs exactly --num-nodes executors of one task slot
each; --model-dir must be visible to every executor (a shared filesystem on
a real cluster). This file and its helpers (digits_data, spark_digits) travel
to the executors by value (cloudpickle), so nothing needs installing there but
tfos and TensorFlow.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import digits_data  # noqa: E402
import spark_digits  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--remote", default=None, help="a Spark Connect server: sc://HOST:PORT")
    where.add_argument("--master", default=None, help="a classic session on this master (default local[2])")
    p.add_argument("--num-nodes", type=int, default=2)
    return spark_digits.parse_training_args(p, argv)


def predict_fun(args, ctx):
    """One prediction (the digit) per fed row."""
    for feed, _, preds in spark_digits.predicted_batches(args, ctx):
        feed.batch_results(preds.tolist())


def session(args):
    from pyspark.sql import SparkSession
    if args.remote:
        return SparkSession.builder.remote(args.remote).getOrCreate()
    master = args.master or "local[%d]" % args.num_nodes
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("tfos-digits-connect")
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    return builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()


def main(argv=None, spark=None):
    args = parse_args(argv)
    from pyspark import cloudpickle
    from tfos.spark import Cluster

    own = spark is None
    spark = spark or session(args)
    shipped = {m.__name__: m for m in (digits_data, spark_digits, sys.modules[__name__])}.values()
    for module in shipped:  # these travel with the functions, by value
        cloudpickle.register_pickle_by_value(module)
    x_train, y_train, x_test, y_test = digits_data.load_split(args.seed)
    args.train_rows = len(x_train)
    try:
        t0 = time.monotonic()
        train_df = spark.createDataFrame([(x.tolist(), int(y)) for x, y in zip(x_train, y_train)],
                                         "features array<float>, label long").repartition(args.num_nodes * 2)
        with Cluster(spark, spark_digits.train_fun, args, args.num_nodes, checkpoint_dir=args.checkpoint_dir) as cluster:
            cluster.train(train_df, epochs=args.epochs + 1)
        print("trained in %.1f s; model in %s" % (time.monotonic() - t0, args.model_dir), flush=True)

        test_df = spark.createDataFrame([(i, x.tolist(), int(y)) for i, (x, y) in enumerate(zip(x_test, y_test))],
                                        "id long, features array<float>, label long").repartition(args.num_nodes)
        with Cluster(spark, predict_fun, args, args.num_nodes, checkpoint_dir=args.checkpoint_dir) as cluster:
            rows = cluster.predict(test_df, "prediction long").select("id", "label", "prediction").collect()
        correct = sum(r["label"] == r["prediction"] for r in rows)
        print("predicted %d held-out rows on %d nodes" % (len(rows), args.num_nodes))
        print("test accuracy: %.4f" % (correct / float(len(rows))), flush=True)
        return rows
    finally:
        for module in shipped:
            cloudpickle.unregister_pickle_by_value(module)
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
