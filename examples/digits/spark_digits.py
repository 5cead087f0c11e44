"""The digits example on Spark, with TensorFlowOnSpark's API (tfos.TFCluster).

    python examples/digits/spark_digits.py                      # embedded local Spark
    spark-submit --master spark://HOST:7077 \\
        --conf spark.executor.cores=1 --conf spark.task.cpus=1 --conf spark.cores.max=2 \\
        --py-files examples/digits/digits_data.py,examples/digits/train.py \\
        examples/digits/spark_digits.py --model-dir /shared/digits-model
    spark-submit --master yarn ...                               # see below

--input-mode spark (default): the training split is a Spark DataFrame
(features array<float>, label); cluster.train(df) streams its partitions,
through Arrow, into the nodes' shared-memory feeds. Two workers train together
with MultiWorkerMirroredStrategy: each takes batch/2 rows per step from its own
feed and the gradients are all-reduced. Both run the same number of steps
(enough for --epochs passes); a worker whose feed runs dry before that reuses
its last batch, so neither waits for the other forever. Then the chief saves
the model and both call feed.terminate().

Then distributed inference: a second cluster loads the model on every node and
cluster.inference(test_df) returns one prediction per held-out row, in order,
which becomes a DataFrame of (label, prediction); its accuracy is printed as
"test accuracy: 0.9667".

--input-mode tensorflow: the nodes read the data themselves; map_fun runs
train.py's MultiWorkerMirroredStrategy loop (the program tfos run starts).

--model-dir must be visible to every executor and to the driver: a shared
filesystem, or an hdfs:// URL (written and read through tfos.fs, since
TensorFlow 2.21 has no HDFS of its own); local Spark shares this machine's
disk. --data-dir DIR (or an hdfs:// URL) keeps the splits there as Parquet
and reads the DataFrames from it. On YARN (docs/YARN.md):

    spark-submit --master yarn --num-executors 2 --executor-cores 1 \
        --py-files examples/digits/digits_data.py,examples/digits/train.py \
        examples/digits/spark_digits.py --data-dir hdfs:///user/$USER/digits-data \
        --model-dir hdfs:///user/$USER/digits-model
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import digits_data  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[2])")
    p.add_argument("--input-mode", choices=("spark", "tensorflow"), default="spark")
    p.add_argument("--num-executors", type=int, default=2)
    p.add_argument("--data-dir", default=None,
                   help="a directory or URL (hdfs://...) for the splits as Parquet: written there "
                        "if absent, and the DataFrames are read from it, as data on HDFS would be")
    return parse_training_args(p, argv)


def parse_training_args(p, argv):
    """Add the training options (also spark_connect_digits.py's) and parse."""
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR)
    p.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    p.add_argument("--checkpoint-dir", default=None,
                   help="tfos's checkpoint dir, kept across restarts (default: tfos-checkpoints/RUN beside "
                        "--model-dir, so `make demo` writes under build/)")
    a = p.parse_args(argv)
    if not digits_data.is_url(a.model_dir):
        a.model_dir = os.path.abspath(a.model_dir)
        if a.checkpoint_dir is None:
            a.checkpoint_dir = os.path.join(os.path.dirname(a.model_dir), "tfos-checkpoints",
                                            "digits-%s-%d" % (time.strftime("%Y%m%d-%H%M%S"), os.getpid()))
    return a


def split_frames(spark, args, x_train, y_train, x_test, y_test):
    """(train, test) DataFrames of (features array<float>, label long):
    made here, or read from --data-dir (written there first if absent)."""
    schema = "features array<float>, label long"
    frames = [spark.createDataFrame([(x.tolist(), int(y)) for x, y in zip(x, y)], schema)
              for x, y in ((x_train, y_train), (x_test, y_test))]
    if not getattr(args, "data_dir", None):
        return frames
    out = []
    for name, df in zip(("train", "test"), frames):
        path = args.data_dir.rstrip("/") + "/" + name
        try:
            df = spark.read.parquet(path)
        except Exception:  # not there yet (AnalysisException: path does not exist)
            df.write.parquet(path)
            df = spark.read.parquet(path)
        out.append(df)
    return out


# ---- what runs on the nodes -------------------------------------------------------

def train_fun(args, ctx):
    """InputMode.SPARK: train on fed batches with MultiWorkerMirroredStrategy."""
    import numpy as np
    import tensorflow as tf
    import keras
    from tfos import TFNode

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    keras.utils.set_random_seed(args.seed)
    nworkers = max(1, ctx.num_workers)
    local_batch = max(1, args.batch_size // nworkers)
    steps = args.train_rows * args.epochs // args.batch_size
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(64,)),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ])
        optimizer = keras.optimizers.Adam(learning_rate=3e-3)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=local_batch * nworkers)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
    last = None
    rows = reused = 0
    t0 = time.monotonic()
    for i in range(steps):
        cols = feed.next_batch_arrays(local_batch, as_dict=True) if not feed.should_stop() else {}
        if cols and len(cols["label"]) == local_batch:
            last = (cols["features"].astype(np.float32), cols["label"].astype(np.int64))
            rows += local_batch
        elif last is None:
            raise RuntimeError("%s:%d got no data to train on" % (ctx.job_name, ctx.task_index))
        else:
            reused += 1
        loss = step(*last)
        if (i + 1) % max(1, steps // 5) == 0 and ctx.task_index == 0:
            print("step %d/%d loss %.4f" % (i + 1, steps, float(loss)),
                  flush=True)
    print("%d steps on %d fed rows (%d steps reused a batch) in %.1f s" % (
        steps, rows, reused, time.monotonic() - t0), flush=True)
    feed.terminate()  # the rest of the feed is not needed
    # every worker saves (MWMS); only the chief's copy is kept
    if ctx.task_index == 0 and ctx.job_name in ("chief", "worker"):
        digits_data.save_model(model, digits_data.model_path(args.model_dir))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            model.save(os.path.join(tmp, digits_data.MODEL_FILE))


def predicted_batches(args, ctx):
    """(feed, columns, predicted digits) for every fed batch, with the model
    of --model-dir loaded once."""
    import keras
    import numpy as np
    from tfos import TFNode

    with tempfile.TemporaryDirectory() as tmp:  # an hdfs:// model: a local copy
        model = keras.models.load_model(digits_data.fetch_model(digits_data.model_path(args.model_dir), tmp))
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        cols = feed.next_batch_arrays(256, as_dict=True)
        if not cols:
            break
        probs = model.predict(cols["features"].astype(np.float32), verbose=0)
        yield feed, cols, np.argmax(probs, axis=-1)


def infer_fun(args, ctx):
    """InputMode.SPARK inference: one (label, prediction) per fed row."""
    for feed, cols, preds in predicted_batches(args, ctx):
        feed.batch_results(list(zip(cols["label"].tolist(), preds.tolist())))


def tensorflow_fun(args, ctx):
    """InputMode.TENSORFLOW: the nodes load the data themselves (train.py)."""
    import train
    train.main(["--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                "--model-dir", args.model_dir, "--seed", str(args.seed)])


# ---- the driver -----------------------------------------------------------------

def main(argv=None):
    args = parse_args(argv)
    from pyspark.sql import SparkSession
    from tfos import TFCluster

    builder = SparkSession.builder.appName("tfos-digits")
    master = args.master
    if not master and not os.environ.get("SPARK_ENV_LOADED"):  # not under spark-submit
        master = "local[%d]" % args.num_executors
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # everything on this machine: stay on the loopback interface
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    # the Python workers run this interpreter (where tfos is installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    for name in ("digits_data.py", "train.py"):
        sc.addPyFile(os.path.join(HERE, name))

    x_train, y_train, x_test, y_test = digits_data.load_split(args.seed)
    args.train_rows = len(x_train)
    train_df, test_df = split_frames(spark, args, x_train, y_train, x_test, y_test)
    t0 = time.monotonic()
    try:
        if args.input_mode == "tensorflow":
            cluster = TFCluster.run(sc, tensorflow_fun, args, args.num_executors, 0,
                                    input_mode=TFCluster.InputMode.TENSORFLOW, checkpoint_dir=args.checkpoint_dir)
            cluster.shutdown()
        else:
            train_df = train_df.repartition(args.num_executors * 2)
            cluster = TFCluster.run(sc, train_fun, args, args.num_executors, 0,
                                    input_mode=TFCluster.InputMode.SPARK, checkpoint_dir=args.checkpoint_dir)
            cluster.train(train_df, num_epochs=args.epochs + 1)
            cluster.shutdown()
        print("trained in %.1f s; model in %s" % (time.monotonic() - t0, args.model_dir), flush=True)

        # distributed inference: a DataFrame of predictions
        test_df = test_df.repartition(args.num_executors)
        cluster = TFCluster.run(sc, infer_fun, args, args.num_executors, 0, input_mode=TFCluster.InputMode.SPARK,
                                checkpoint_dir=args.checkpoint_dir)
        preds = spark.createDataFrame(cluster.inference(test_df), "label long, prediction long").cache()
        n = preds.count()
        correct = preds.filter("label = prediction").count()
        preds.show(5)
        cluster.shutdown()
        print("predicted %d held-out rows on %d nodes" % (n, args.num_executors))
        print("test accuracy: %.4f" % (correct / float(n)), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
