"""TFCluster on local[2] Spark, run by test_pip_install.py with the
interpreter of a fresh venv that holds only the built tfos wheel and
tfos[spark]: train on a DataFrame (each node writes what it was fed to
OUT_DIR), then inference (one result per row, in order). Prints one JSON line
starting with "RESULT ".

    python wheel_spark.py OUT_DIR
"""
import json
import os
import sys


def train_fun(out_dir, ctx):
    import numpy as np
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
    rows, total = 0, 0.0
    while not feed.should_stop():
        cols = feed.next_batch_arrays(16, as_dict=True)
        if not cols:
            break
        rows += len(cols["x"])
        total += float(np.sum(cols["x"]))
    with open(os.path.join(out_dir, "%s-%d.json" % (ctx.job_name, ctx.task_index)), "w") as f:
        json.dump({"rows": rows, "sum": total}, f)


def infer_fun(_, ctx):
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        cols = feed.next_batch_arrays(16, as_dict=True)
        if not cols:
            break
        feed.batch_results((cols["x"] * 2).tolist())


def main(out_dir):
    import tfos
    from pyspark.sql import SparkSession
    from tfos import TFCluster

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("tfos-wheel")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    try:
        df = spark.createDataFrame([(float(i),) for i in range(100)], "x double").repartition(4)
        cluster = TFCluster.run(sc, train_fun, out_dir, 2, 0, input_mode=TFCluster.InputMode.SPARK,
                                status_port=-1)
        cluster.train(df, num_epochs=1)
        cluster.shutdown()
        fed = {}
        for name in sorted(os.listdir(out_dir)):
            with open(os.path.join(out_dir, name)) as f:
                fed[name] = json.load(f)

        cluster = TFCluster.run(sc, infer_fun, None, 2, 0, input_mode=TFCluster.InputMode.SPARK,
                                status_port=-1)
        test = spark.createDataFrame([(float(i),) for i in range(10)], "x double").coalesce(2)
        preds = cluster.inference(test).collect()
        cluster.shutdown()
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"tfos": os.path.dirname(tfos.__file__), "fed": fed, "preds": preds}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
