"""The PyTorch program of bench/fit_feed.py --framework torch: one training
pass of a small MLP, from memory or from the feed, run by `tfos run
--workers 1` (same launcher, environment and threads on both sides).

    --mode memory  np.load(--data) into tensors, then a loop over slices of
                   --batch rows (the ceiling: no loader at all)
    --mode feed    a loop over DataLoader(FeedDataset(--batch[, prefetch=
                   --prefetch]), batch_size=None) on the rows that
                   `tfos run --input DATA` feeds

Rows are float32 (N, 65): 64 features and the label. Before the clock, both
sides train 20 batches of the same shape from memory. Prints one JSON line:
{"mode", "rows", "seconds", "samples_per_s", "loss"}.
"""
import json
import time

import numpy as np
import torch

from fit_feed import prog_args  # this directory is on sys.path


def make_model():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 10))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    a = prog_args("--prefetch", "FeedDataset's prefetch")
    model, opt = make_model()
    warm = torch.from_numpy(np.random.default_rng(1).random((20 * a.batch, 64), dtype=np.float32))
    for i in range(20):
        step(model, opt, warm[i * a.batch:(i + 1) * a.batch], torch.zeros(a.batch, dtype=torch.long))
    rows, loss = 0, None
    if a.mode == "memory":
        d = torch.from_numpy(np.load(a.data))
        t0 = time.perf_counter()
        x, y = d[:, :64], d[:, 64].long()
        for lo in range(0, len(d), a.batch):
            loss = step(model, opt, x[lo:lo + a.batch], y[lo:lo + a.batch])
            rows += len(x[lo:lo + a.batch])
    else:
        from torch.utils.data import DataLoader
        from tfos.torch import FeedDataset
        t0 = time.perf_counter()
        kw = {} if a.prefetch is None else {"prefetch": a.prefetch}
        for (c,) in DataLoader(FeedDataset(a.batch, **kw), batch_size=None):
            loss = step(model, opt, c[:, :64], c[:, 64].long())
            rows += len(c)
    secs = time.perf_counter() - t0
    print(json.dumps({"mode": a.mode, "rows": rows, "seconds": secs, "samples_per_s": rows / secs,
                      "loss": float(loss)}), flush=True)


if __name__ == "__main__":
    main()
