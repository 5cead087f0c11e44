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


def is_url(path):
    """True for hdfs://... and other URLs (not file://): TensorFlow 2.21
    cannot write them itself; train.py and predict.py go through tfos.fs."""
    scheme = path.split("://", 1)[0] if "://" in path else ""
    return bool(scheme) and scheme != "file" and scheme.replace("+", "").isalnum()


def model_path(model_dir):
    if is_url(model_dir):
        return model_dir.rstrip("/") + "/" + MODEL_FILE
    if model_dir.startswith("file://"):
        model_dir = model_dir[len("file://"):]
    return os.path.join(os.path.abspath(model_dir), MODEL_FILE)


def fetch_model(path, local_dir):
    """A local copy of the model file at path (a URL: through tfos.fs)."""
    if not is_url(path):
        return path
    import tfos.fs
    local = os.path.join(local_dir, MODEL_FILE)
    tfos.fs.get(path, local)
    return local


def save_model(model, path):
    """model.save(path), written under a temporary name and then renamed,
    so that a reader (the evaluator, predict.py) never sees a half-written
    file. path may be a URL: saved here, then copied with tfos.fs (which
    renames into place the same way)."""
    if not is_url(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".tmp-{os.getpid()}-{MODEL_FILE}")
        model.save(tmp)
        os.replace(tmp, path)
        return
    import tempfile
    import tfos.fs
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, MODEL_FILE)
        model.save(local)
        tfos.fs.put(local, path)


def model_stamp(path):
    """The model file's modification time, or None when there is none."""
    if not is_url(path):
        return os.path.getmtime(path) if os.path.exists(path) else None
    import tfos.fs
    fs, p = tfos.fs.filesystem(path)
    return fs.info(p).get("modificationTime") if fs.exists(p) else None


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
