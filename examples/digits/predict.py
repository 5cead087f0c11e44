"""Load the model that train.py saved and score it on the held-out split.

    python examples/digits/predict.py [--model-dir DIR] [--seed N] [--show K]

Uses the same split as train.py (same --seed, default 42), prints
"test accuracy: 0.9778" and a few sample predictions. --model-dir defaults
to the model folder next to this script (where train.py saves by default); a
path given on the command line is relative to the current directory, or an
hdfs:// URL (read through tfos.fs). Exits
with status 1 and a message on stderr if there is no saved model.
"""

import argparse
import os
import sys
import tempfile

import digits_data


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR,
                   help="folder holding digits.keras "
                        "(default: the model folder next to this script)")
    p.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED,
                   help="seed of the train/test split; must match training")
    p.add_argument("--show", type=int, default=8,
                   help="how many sample predictions to print (default 8)")
    args = p.parse_args(argv)

    path = digits_data.model_path(args.model_dir)
    with tempfile.TemporaryDirectory(prefix="digits-model-") as tmp:
        if digits_data.is_url(path):  # hdfs://...: a local copy, through tfos.fs
            try:
                path = digits_data.fetch_model(path, tmp)
            except FileNotFoundError:
                pass
        return predict(args, path)


def predict(args, path):
    if not os.path.isfile(path):
        print(f"predict.py: no saved model at {path}; train one first, e.g. "
              f"python {os.path.join(os.path.dirname(__file__), 'train.py')}"
              f" --model-dir {args.model_dir}", file=sys.stderr)
        return 1

    # TensorFlow's load-time lines that look like errors on a CPU host
    # (absl::InitializeLog, cuda drivers, cuInit): off this script's stderr
    import tfos.quiet
    tfos.quiet.tensorflow_noise()
    import keras  # slow import: only once we know there is something to load

    model = keras.models.load_model(path)
    _, _, x_test, y_test = digits_data.load_split(args.seed)
    probs = model.predict(x_test, batch_size=256, verbose=0)
    pred = probs.argmax(axis=-1)

    print(f"model: {digits_data.model_path(args.model_dir)}")
    for i in range(min(args.show, len(x_test))):
        mark = "ok" if pred[i] == y_test[i] else "WRONG"
        print(f"  sample {i}: predicted {pred[i]} "
              f"(p={probs[i, pred[i]]:.2f}), label {y_test[i]}  {mark}")
    print(f"test accuracy: {float((pred == y_test).mean()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
