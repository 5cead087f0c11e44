"""A TensorFlowOnSpark Keras program, as TFoS's own Keras examples are
written, runs on tfos with TFCluster's default keras="auto" (issues 12, 14):
model.fit under MultiWorkerMirroredStrategy over a tf.data generator that
reads the Spark feed, ModelCheckpoint(save_weights_only=True) to a path with
no ".weights.h5", then compat.export_saved_model (model.save with
save_format="tf" under Keras 2). Under Keras 3 each of these fails before
tfos has any say (keras-team/keras#20585 for fit; the filepath check of
ModelCheckpoint), so the test also proves that map_fun got tf-keras."""
import json
import os
import sys

import pytest

from pyspark import cloudpickle

from tfos import TFCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCH = 32
TRAIN_ROWS = 1500
EPOCHS = 5


def tfos_keras_main(args, ctx):
    """TFoS's mnist_spark.py (Keras, InputMode.SPARK), on digits."""
    import json
    import os

    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    from tfos import TFNode, compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        tf.keras.utils.set_random_seed(3)
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(64, activation="relu", input_shape=(64,)),
            tf.keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])

    tf_feed = TFNode.DataFeed(ctx.mgr, False)

    def rdd_generator():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if not batch:
                return
            pixels, label = batch[0]
            yield np.asarray(pixels, dtype=np.float32) / 16.0, np.int64(label)

    ds = tf.data.Dataset.from_generator(
        rdd_generator, output_signature=(tf.TensorSpec([64], tf.float32), tf.TensorSpec([], tf.int64)))
    options = tf.data.Options()
    compat.disable_auto_shard(options)  # each worker reads its own feed
    ds = ds.with_options(options).batch(args["batch"])
    # TFoS's rule: stop short of the feed's end, so no worker runs dry mid-epoch
    steps = int(args["rows"] / args["batch"] / ctx.num_workers * 0.9)
    callbacks = [tf.keras.callbacks.ModelCheckpoint(
        filepath=os.path.join(args["ckpt"], "weights-{epoch:04d}"), save_weights_only=True)]
    model.fit(x=ds, epochs=args["epochs"], steps_per_epoch=steps, callbacks=callbacks, verbose=0)

    is_chief = ctx.job_name == "chief"
    compat.export_saved_model(model, args["export"], is_chief)
    if is_chief:
        digits = load_digits()
        x = (digits.data[args["rows"]:] / 16.0).astype("float32")
        # called directly: evaluate() would start a collective the worker has left
        predicted = np.argmax(model(tf.constant(x), training=False).numpy(), axis=1)
        with open(args["out"], "w") as f:
            json.dump({"keras_module": type(model).__module__,
                       "legacy_env": os.environ.get("TF_USE_LEGACY_KERAS"),
                       "accuracy": float(np.mean(predicted == digits.target[args["rows"]:])),
                       "steps": steps}, f)
    tf_feed.terminate()


def test_tfos_style_keras_model_fit_multi_worker(spark, tmp_path):
    from sklearn.datasets import load_digits
    digits = load_digits()
    rows = [(digits.data[i].tolist(), int(digits.target[i])) for i in range(TRAIN_ROWS)]
    args = {"batch": BATCH, "rows": TRAIN_ROWS, "epochs": EPOCHS, "ckpt": str(tmp_path / "ckpt"),
            "export": str(tmp_path / "export"), "out": str(tmp_path / "chief.json")}
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, tfos_keras_main, args, 2, num_ps=0, input_mode=TFCluster.InputMode.SPARK,
                            master_node="chief", log_dir=None, reservation_timeout=120)
    try:
        cluster.train(sc.parallelize(rows, 4), num_epochs=EPOCHS, feed_timeout=300)
    finally:
        cluster.shutdown(timeout=300)

    with open(args["out"]) as f:
        chief = json.load(f)
    assert chief["keras_module"].startswith("tf_keras."), chief  # tf.keras was tf-keras in map_fun
    assert chief["legacy_env"] == "1", chief
    assert chief["accuracy"] >= 0.85, chief
    # ModelCheckpoint wrote TensorFlow checkpoints at the Keras-2 path, epoch by epoch
    ckpts = sorted(p for p in os.listdir(args["ckpt"]) if p.endswith(".index"))
    assert ckpts == ["weights-%04d.index" % e for e in range(1, EPOCHS + 1)], ckpts
    # compat.export_saved_model: the Keras SavedModel (save_format="tf") on the chief
    files = set(os.listdir(args["export"]))
    assert {"saved_model.pb", "keras_metadata.pb", "variables"} <= files, files


def test_keras_mode_is_checked_on_the_driver(spark):
    with pytest.raises(ValueError, match=r"keras='2'.*'auto'.*'legacy'.*'3'"):
        TFCluster.run(spark.sparkContext, tfos_keras_main, {}, 2, keras="2")
