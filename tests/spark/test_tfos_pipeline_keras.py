"""TensorFlowOnSpark's Keras pipeline example (examples/mnist/keras/
mnist_pipeline.py) as its users run it, made tiny (issue 34, item 2): CSV
lines written here, parsed by an RDD map into a DataFrame of (image array,
label), TFEstimator.fit with a chief and a worker whose main_fun runs
model.fit under MultiWorkerMirroredStrategy on a from_generator dataset over
next_batch(1) (no disable_auto_shard, steps_per_epoch a float, as the
example), then TFModel.transform. The module imports Sequential and Dense
from tensorflow.keras at its top, on the driver (Keras 3 there), and
main_fun compiles with tf.keras.optimizers.Adam(lr=...) on tf-keras nodes,
as TFoS's tests/test_pipeline.py (issue 34, item 3)."""
import os
import sys

import pytest

from pyspark import cloudpickle

from tfos import pipeline

pytest.importorskip("tensorflow")
from tensorflow.keras.layers import Dense  # noqa: E402  (at the top, on the driver, as TFoS's test)
from tensorflow.keras.models import Sequential  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PIXELS = 16          # a 4x4 "image"
ROWS = 96
BATCH = 4
# Two epochs, as the example: the union's 4 partitions could go 3:1 (one
# executor's first task waits for its node's slow start while the other
# takes the rest) and one node ran out of data while the other waited in a
# collective; the nodes now take turns (2:2, see docs/SPARK.md). Lines of
# one length: textFile splits by bytes, so both partitions hold 48 rows, of
# which the example's 90% rule takes 44 an epoch. (With lines of unequal
# length, partitions of unequal rows still leave one node short: the
# example's own assumption of even partitions.)
EPOCHS = 2


def main_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tfos import compat, TFNode

    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()

    def build_and_compile():
        model = Sequential()
        model.add(Dense(8, activation="relu", input_shape=(PIXELS,)))
        model.add(Dense(2, activation="softmax"))
        model.compile(loss=tf.keras.losses.sparse_categorical_crossentropy,
                      optimizer=tf.keras.optimizers.Adam(lr=0.2), metrics=["accuracy"])
        return model

    tf_feed = TFNode.DataFeed(ctx.mgr, False)

    def rdd_generator():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if len(batch) > 0:
                example = batch[0]
                image = np.array(example[0]).astype(np.float32) / 255.0
                label = np.reshape(np.array(example[1]).astype(np.float32), (1,))
                yield (image, label)
            else:
                return

    ds = tf.data.Dataset.from_generator(rdd_generator, (tf.float32, tf.float32),
                                        (tf.TensorShape([PIXELS]), tf.TensorShape([1])))
    ds = ds.batch(args.batch_size)
    with strategy.scope():
        model = build_and_compile()
    # as the example: 90% of the steps each worker's share of the data allows
    steps_per_epoch_per_worker = ROWS / args.batch_size / ctx.num_workers
    model.fit(x=ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch_per_worker * 0.9)
    compat.export_saved_model(model, args.export_dir, ctx.job_name == "chief")
    tf_feed.terminate()


def test_keras_pipeline_from_csv_trains_and_transforms(spark, tmp_path):
    csv = tmp_path / "images.csv"
    with open(csv, "w") as f:
        for i in range(ROWS):
            f.write(",".join("%03d" % v for v in [i % 2] + [(i * 7 + j) % 256 for j in range(PIXELS)]) + "\n")

    def parse(ln):
        vec = [int(x) for x in ln.split(",")]
        return (vec[1:], vec[0])

    sc = spark.sparkContext
    df = spark.createDataFrame(sc.textFile("file://" + str(csv), 2).map(parse), ["image", "label"])
    export_dir = str(tmp_path / "export")
    est = pipeline.TFEstimator(main_fun, {"batch_size": BATCH, "epochs": EPOCHS, "export_dir": export_dir}) \
        .setInputMapping({"image": "image", "label": "label"}).setClusterSize(2).setEpochs(EPOCHS) \
        .setBatchSize(BATCH).setExportDir(export_dir).setGraceSecs(0)
    model = est.fit(df)
    assert os.path.isdir(export_dir)

    model.setInputMapping({"image": "dense_input"}).setOutputMapping({"dense_1": "prediction"}) \
        .setSignatureDefKey("serving_default").setExportDir(export_dir).setBatchSize(BATCH)
    preds = model.transform(df).collect()
    assert len(preds) == ROWS
    assert all(len(r.prediction) == 2 and abs(sum(r.prediction) - 1.0) < 1e-3 for r in preds)
