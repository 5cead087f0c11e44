"""A TensorFlowOnSpark-style Keras program: trains a small classifier on
scikit-learn's digits with MultiWorkerMirroredStrategy for five steps, then
every worker calls compat.export_saved_model(model, export_dir, is_chief)
with is_chief true on worker 0 only.

It uses tf.keras throughout, as TFoS programs do: with TF_USE_LEGACY_KERAS=1
in the environment that is tf-keras (Keras 2), else Keras 3.

usage: export_keras.py EXPORT_DIR META_JSON [marker]

Worker 0 writes META_JSON: the Keras version, the model's input and output
layer names, a few test rows and the trained model's own predictions on them.
Every worker prints "worker N exported: <return value>"."""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from tfos import compat

export_dir, meta_path = sys.argv[1], sys.argv[2]
task_index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()

digits = load_digits()
x = (digits.data / 16.0).astype("float32")
y = digits.target.astype("int64")
with strategy.scope():
    tf.keras.utils.set_random_seed(7)
    inputs = tf.keras.Input(shape=(64,), name="pixels")
    hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
    outputs = tf.keras.layers.Dense(10)(hidden)  # auto-named "dense_1", as in TFoS's examples
    model = tf.keras.Model(inputs, outputs)
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-2)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

# A custom loop (TensorFlow's documented one for this strategy): Keras 3's
# fit() fails under a multi-worker MultiWorkerMirroredStrategy
# (keras-team/keras#20585), and the same loop serves both Kerases.
options = tf.data.Options()
compat.disable_auto_shard(options)  # every worker reads all rows: a few steps, nothing to split
train = tf.data.Dataset.from_tensor_slices((x[:1600], y[:1600])).batch(64).repeat().with_options(options)
batches = iter(strategy.experimental_distribute_dataset(train))


@tf.function
def train_step(batch):
    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=64)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)


for _ in range(5):
    loss = train_step(next(batches))
print("worker %d trained, last loss %.3f" % (task_index, float(loss)), flush=True)

result = compat.export_saved_model(model, export_dir, is_chief=(task_index == 0))
print("worker %d exported: %s" % (task_index, result), flush=True)

if task_index == 0:
    rows = x[1600:1620]
    meta = {
        "keras_package": type(model).__module__.split(".")[0],  # tf_keras or keras
        "keras_version": sys.modules[type(model).__module__.split(".")[0]].__version__,
        "input_layers": [model.layers[0].name],
        "output_layers": [model.layers[-1].name],
        "rows": rows.tolist(),
        # called directly: model.predict would start a collective the others have left
        "predictions": model(tf.constant(rows), training=False).numpy().tolist(),
    }
    with open(meta_path, "w") as f:
        json.dump(meta, f)
