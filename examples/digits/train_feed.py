"""Train the digits model on rows that tfos feeds (InputMode.SPARK without
Spark): the data comes from `tfos run --input FILE`, not from the program.

    python examples/digits/make_data.py /tmp/digits.csv
    build/tfos run --workers 1 --input /tmp/digits.csv --epochs 20 -- \\
        python examples/digits/train_feed.py --model-dir /tmp/digits-model

The program reads batches with TensorFlowOnSpark's DataFeed (fast path:
numpy arrays), trains until the feed ends (tfos feeds the file --epochs
times), then evaluates on the held-out split and saves the model.

Rows are 64 pixels and a label: a CSV row (65 columns), a JSON object
{"pixels": [...64], "label": n}, or an (N, 65) .npy array. With several
workers each trains on the partitions it is fed, on its own (no all-reduce:
the nodes get different numbers of batches); the chief or worker 0 saves.
"""
import argparse
import os

import tensorflow as tf

import digits_data
from tfos import TFNode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR)
    ap.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    a = ap.parse_args()
    tf.keras.utils.set_random_seed(a.seed)
    ctx = TFNode.get_context()
    feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy")
    rows = steps = 0
    while not feed.should_stop():
        cols = feed.next_batch_arrays(a.batch_size)
        if not len(cols):
            break
        x, y = digits_data.feed_xy(cols)
        model.train_on_batch(x, y)
        rows += len(y)
        steps += 1
    _, _, x_test, y_test = digits_data.load_split(a.seed)
    acc = digits_data.accuracy(model, x_test, y_test)
    print("trained on %d fed rows in %d steps (aborted partitions: %s)" % (
        rows, steps, ctx.mgr.aborted), flush=True)
    if ctx.job_name == "chief" or (ctx.job_name == "worker" and ctx.task_index == 0
                                   and "chief" not in ctx.cluster_spec):
        os.makedirs(a.model_dir, exist_ok=True)
        model.save(digits_data.model_path(a.model_dir))
        print("test accuracy: %.4f" % acc, flush=True)


if __name__ == "__main__":
    main()
