"""Data and paths shared by the digits examples (examples/digits, jax, torch).

The data is scikit-learn's bundled 8x8 handwritten digits (1797 images, 10
classes); it ships with scikit-learn, so nothing is downloaded. Every process
loads it itself and splits it the same way (a fixed seed), so all workers, the
evaluator and predict.py agree on which rows are held out.
"""

import os

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = os.path.dirname(os.path.abspath(__file__))

# Default --model-dir: the folder "model" next to these scripts, whatever the
# current directory is. A --model-dir given on the command line is resolved
# against the current directory, like any other path argument.
DEFAULT_MODEL_DIR = os.path.join(HERE, "model")
MODEL_FILE = "digits.keras"

DEFAULT_SEED = 42
TEST_FRACTION = 0.2


def model_path(model_dir):
    return os.path.join(os.path.abspath(model_dir), MODEL_FILE)


def load_split(seed=DEFAULT_SEED):
    """Returns (x_train, y_train, x_test, y_test), pixels scaled to [0, 1]."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixel values are 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test


def accuracy(model, x, y):
    """Fraction of rows of x that model (softmax outputs) classifies as y."""
    probs = model.predict(x, batch_size=256, verbose=0)
    return float(np.mean(np.argmax(probs, axis=-1) == y))


def feed_xy(cols):
    """The columns of a fed batch -> (x float32 (n, 64), y int64 (n,)), for
    every way the rows come: a .npy file (one (n, 65) column, label last),
    CSV (65 columns), JSON lines or a DataFrame (pixels array, label)."""
    if len(cols) == 65:
        return np.stack(cols[:64], axis=1).astype(np.float32), np.asarray(cols[64]).astype(np.int64)
    if len(cols) == 2:
        return np.asarray(cols[0], dtype=np.float32), np.asarray(cols[1]).astype(np.int64)
    a = np.asarray(cols[0], dtype=np.float32)
    return a[:, :64], a[:, 64].astype(np.int64)
