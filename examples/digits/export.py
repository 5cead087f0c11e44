"""Export the model train.py saved as a SavedModel for tfos serve.

    python examples/digits/export.py [--model-dir DIR] [--serving-dir DIR]

Loads digits.keras from --model-dir (default: the model folder next to this
script) and writes it with Keras's model.export() as the next numbered
version under --serving-dir (default: the serving folder next to this
script): serving/1, then serving/2... TensorFlow Serving's layout, which
`tfos serve --model digits=examples/digits/serving` serves (the highest
version). The input is named "pixels": 64 floats in [0, 1] a row.
"""

import argparse
import os
import sys

import digits_data

HERE = os.path.dirname(os.path.abspath(__file__))


def next_version(serving_dir):
    taken = [int(n) for n in os.listdir(serving_dir) if n.isdigit()] if os.path.isdir(serving_dir) else []
    return max(taken, default=0) + 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR, help="folder holding digits.keras")
    p.add_argument("--serving-dir", default=os.path.join(HERE, "serving"),
                   help="where the numbered versions go (default: the serving folder next to this script)")
    a = p.parse_args(argv)
    path = digits_data.model_path(a.model_dir)
    if not os.path.isfile(path):
        print(f"export.py: no saved model at {path}; train one first (see examples/digits/README.md)",
              file=sys.stderr)
        return 1
    import keras
    model = keras.models.load_model(path)
    # name the input for clients: the served signature takes "pixels"
    inp = keras.Input((64,), name="pixels")
    named = keras.Model(inp, model(inp))
    version = next_version(a.serving_dir)
    target = os.path.join(a.serving_dir, str(version))
    tmp = os.path.join(a.serving_dir, f".tmp-{os.getpid()}")
    named.export(tmp, verbose=False)
    os.replace(tmp, target)  # a server never sees a half-written version
    print(f"exported {path} as version {version}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
