"""PyTorch models for `tfos serve --loader` (tests/python/test_serve.py).

    python torch_loader.py OUT

saves two versions of examples/torch/serve_digits.py's classifier (seeds 1
and 2) as OUT/digits/1 and OUT/other/1, with held-out rows (OUT/x.npy) and each
version's class probabilities for them, computed here (OUT/pred1.npy,
pred2.npy). The loaders below fail, each its own way.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")


def load_bad_type(path):
    return "not a model"


def load_raises(path):
    raise FileNotFoundError("no weights in %s" % path)


def main(out):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    sys.path.insert(0, os.path.join(ROOT, "examples", "digits"))
    import digits_data
    import serve_digits
    xtr, ytr, xte, _ = digits_data.load_split()
    for seed in (1, 2):
        net = serve_digits.train(xtr, ytr, seed, 60)
        serve_digits.save_version(net, os.path.join(out, "digits" if seed == 1 else "other"))
        with torch.no_grad():
            p = torch.softmax(net(torch.from_numpy(xte)), dim=1).numpy()
        np.save(os.path.join(out, "pred%d.npy" % seed), p)
    np.save(os.path.join(out, "x.npy"), xte)


if __name__ == "__main__":
    main(sys.argv[1])
