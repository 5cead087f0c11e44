"""A PyTorch digits classifier served by `tfos serve`, through a loader.

    python examples/torch/serve_digits.py DIR [--seed S] [--steps N]
    tfos serve --model digits=DIR --loader digits=examples/torch/serve_digits.py:load

The first command trains a 64 -> 32 -> 10 MLP on scikit-learn's digits (the
training split of examples/digits, full-batch Adam, a second or two on a
CPU), prints its held-out accuracy, and saves it as TorchScript in the next
numbered version dir under DIR (DIR/1/model.pt, then DIR/2...), written
whole under a temporary name and renamed into place, so a server watching
DIR never sees half of it.

The second serves it: `load(path)` is the loader tfos serve calls once per
version dir. It returns a tfos.serve.Model: the predict function (numpy in,
numpy out) and its input ("pixels": FP32, 64 a row, floats in [0, 1]) and
output ("probs": FP32, 10 class probabilities a row). Clients send the same
requests as to the Keras digits model (examples/digits/serve_client.py).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    """tfos serve's loader: the model in the version dir ``path``."""
    import torch
    import tfos.serve
    net = torch.jit.load(os.path.join(path, "model.pt")).eval()

    def predict(pixels):
        with torch.no_grad():
            return {"probs": torch.softmax(net(torch.from_numpy(pixels)), dim=1).numpy()}
    return tfos.serve.Model(predict, inputs={"pixels": ("FP32", [-1, 64])}, outputs={"probs": ("FP32", [-1, 10])},
                            platform="pytorch_torchscript")


def train(x, y, seed, steps):
    """The MLP, trained full-batch for ``steps`` steps, as TorchScript."""
    import torch
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return torch.jit.script(net.eval())


def save_version(net, serving_dir):
    """``net`` as the next numbered version under ``serving_dir``; its path."""
    os.makedirs(serving_dir, exist_ok=True)
    taken = [int(n) for n in os.listdir(serving_dir) if n.isdigit()]
    final = os.path.join(serving_dir, str(max(taken, default=0) + 1))
    tmp = os.path.join(serving_dir, ".tmp-%d" % os.getpid())
    os.makedirs(tmp)
    net.save(os.path.join(tmp, "model.pt"))
    os.rename(tmp, final)
    return final


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("serving_dir", help="where the numbered versions go")
    p.add_argument("--seed", type=int, default=1, help="initial weights")
    p.add_argument("--steps", type=int, default=60, help="full-batch training steps")
    a = p.parse_args(argv)
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "digits"))
    import digits_data
    xtr, ytr, xte, yte = digits_data.load_split()
    net = train(xtr.astype(np.float32), ytr.astype(np.int64), a.seed, a.steps)
    with torch.no_grad():
        acc = float((net(torch.from_numpy(xte.astype(np.float32))).argmax(1).numpy() == yte).mean())
    print("held-out accuracy: %.4f; saved %s" % (acc, save_version(net, a.serving_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
