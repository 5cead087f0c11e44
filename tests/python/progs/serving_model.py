"""Two digits classifiers exported as SavedModels for the serving tests:
DIR/digits/1 (10 epochs) and DIR/v2 (3 epochs, another seed), the
held-out rows (DIR/x.npy) and each model's predictions for them
(DIR/pred1.npy, DIR/pred2.npy).

    python serving_model.py DIR
"""
import os
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

out = sys.argv[1]
digits = load_digits()
x = (digits.data / 16.0).astype("float32")
y = digits.target
np.save(os.path.join(out, "x.npy"), x[1500:])
for version, epochs in ((1, 10), (2, 3)):
    keras.utils.set_random_seed(version)
    m = keras.Sequential([keras.Input((64,), name="pixels"), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy")
    m.fit(x[:1500], y[:1500], epochs=epochs, verbose=0)
    where = ("digits", "1") if version == 1 else ("v2",)
    m.export(os.path.join(out, *where), verbose=False)
    np.save(os.path.join(out, "pred%d.npy" % version), m.predict(x[1500:], verbose=0))
