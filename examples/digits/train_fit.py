"""digits with Keras 2's model.fit across workers: a TensorFlowOnSpark-era
program (tf.keras, compile + fit under MultiWorkerMirroredStrategy,
ModelCheckpoint to "weights-{epoch:04d}", a SavedModel export) that runs on
tfos unchanged with tf-keras:

    tfos run --workers 2 --keras legacy -- python examples/digits/train_fit.py

Under Keras 3 (`--keras 3`, or TensorFlow's default) fit() over a
distributed dataset fails on several workers (keras-team/keras#20585) and the
checkpoint path would need ".weights.h5": see docs/SPARK.md, "Keras".

The chief prints "test accuracy: A" (A with four decimals; about 0.97
after 8 epochs on 2 workers) on the held-out split of digits_data.py and exports the model with tfos.compat.export_saved_model
to --export-dir (default: the model dir's "export" folder)."""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

import digits_data
from tfos import compat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch, cut across the workers")
    ap.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR)
    ap.add_argument("--export-dir", default=None)
    ap.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    a = ap.parse_args()

    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task", {})
    chief_job = "chief" if "chief" in tf_config.get("cluster", {}) else "worker"
    is_chief = task.get("type", chief_job) == chief_job and task.get("index", 0) == 0
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x_train, y_train, x_test, y_test = digits_data.load_split(a.seed)
    with strategy.scope():
        tf.keras.utils.set_random_seed(a.seed)
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(128, activation="relu", input_shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    # every worker reads the same data; the strategy cuts each global batch
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(y_train), seed=a.seed) \
        .repeat().batch(a.batch_size)
    checkpoints = os.path.join(os.environ.get("TFOS_CHECKPOINT_DIR", a.model_dir), "fit")
    callbacks = [tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoints, "weights-{epoch:04d}"),
                                                    save_weights_only=True)]
    model.fit(train, epochs=a.epochs, steps_per_epoch=len(y_train) // a.batch_size, callbacks=callbacks,
              verbose=2 if is_chief else 0)

    export_dir = a.export_dir or os.path.join(a.model_dir, "export")
    compat.export_saved_model(model, export_dir, is_chief)
    if is_chief:
        # called directly: evaluate() would start a collective the other workers have left
        predicted = np.argmax(model(tf.constant(x_test), training=False).numpy(), axis=1)
        print("exported to %s" % export_dir, flush=True)
        print("test accuracy: %.4f" % float(np.mean(predicted == y_test)), flush=True)


if __name__ == "__main__":
    main()
