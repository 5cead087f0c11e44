"""The program of bench/fit_feed.py: one Keras model fit, from memory or from
the feed, run by `tfos run --workers 1` (so both sides have the same
launcher, environment and threads).

    --mode memory  np.load(--data), then model.fit(x, y) over every row
    --mode feed    model.fit(feed.dataset(--batch[, read_ahead=--read-ahead]))
                   over the rows that `tfos run --input DATA` feeds

Rows are float32 (N, 65): 64 features and the label. Before the clock, both
sides fit 20 batches of the same shape from an in-memory tf.data dataset
(the model is built and its train step traced). Prints one JSON line:
{"mode", "rows", "seconds", "samples_per_s", "loss"}.
"""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fit_feed import prog_args  # noqa: E402  (this directory is on sys.path)


def model_for(batch):
    tf.keras.utils.set_random_seed(7)
    m = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    m.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    warm = np.random.default_rng(1).random((20 * batch, 64), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((warm, np.zeros(20 * batch, np.int32))).batch(batch)
    m.fit(ds, epochs=1, verbose=0)
    return m


def split(*cols):
    """A feed batch (one (B, 65) column; tf.data passes a tuple's parts as
    arguments) -> (x, y)."""
    c = cols[0]
    return c[:, :64], tf.cast(c[:, 64], tf.int32)


def main():
    a = prog_args("--read-ahead", "dataset()'s read_ahead")
    model = model_for(a.batch)
    if a.mode == "memory":
        d = np.load(a.data)
        x, y = d[:, :64], d[:, 64].astype(np.int32)
        t0 = time.perf_counter()
        h = model.fit(x, y, batch_size=a.batch, epochs=1, shuffle=False, verbose=0)
        secs = time.perf_counter() - t0
        rows = len(y)
    else:
        from tfos import TFNode
        feed = TFNode.DataFeed(TFNode.get_context().mgr, True)
        t0 = time.perf_counter()
        kw = {} if a.read_ahead is None else {"read_ahead": a.read_ahead}
        ds = feed.dataset(a.batch, **kw).map(split)
        h = model.fit(ds, epochs=1, verbose=0)
        secs = time.perf_counter() - t0
        rows = feed.rows_read
    print(json.dumps({"mode": a.mode, "rows": int(rows), "seconds": secs, "samples_per_s": rows / secs,
                      "loss": float(h.history["loss"][-1])}), flush=True)


if __name__ == "__main__":
    main()
