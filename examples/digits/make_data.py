"""Write the digits training split as a file for `tfos run --input`.

    python examples/digits/make_data.py OUT.csv|OUT.jsonl|OUT.npy [--seed 42]

CSV and JSON lines: one row per image, 64 pixel values (0..1) then the label;
CSV with a header (p0..p63,label). NumPy: an (N, 65) float32 array, label last.
The held-out split stays out of the file (predict/evaluate load it themselves).
"""
import argparse
import json

import numpy as np

import digits_data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    a = ap.parse_args()
    x, y, _, _ = digits_data.load_split(a.seed)
    if a.out.endswith(".npy"):
        np.save(a.out, np.hstack([x, y[:, None].astype(np.float32)]))
    elif a.out.endswith(".jsonl"):
        with open(a.out, "w") as f:
            for row, label in zip(x, y):
                f.write(json.dumps({"pixels": [round(float(v), 4) for v in row], "label": int(label)}) + "\n")
    else:
        with open(a.out, "w") as f:
            f.write(",".join(["p%d" % i for i in range(64)] + ["label"]) + "\n")
            for row, label in zip(x, y):
                f.write(",".join("%.4f" % v for v in row) + ",%d\n" % label)
    print("wrote %d training rows to %s" % (len(y), a.out))


if __name__ == "__main__":
    main()
