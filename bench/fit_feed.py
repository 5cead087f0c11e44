"""Training from the feed against training from memory, in one run (issue
16: fit_feed_vs_memory for Keras, torch_fit_feed_vs_memory for PyTorch).

The data: --rows rows of float32 (65,): 64 features and a label (a linear
rule of the features, so the loss falls), one .npy file, read once before
the clock so it is in the page cache. Both sides run bench/fit_feed_prog.py
under `tfos run --workers 1` (same launcher, environment and threads) and fit
the same model (64-128-64-10, Adam, batches of --batch rows) over every row
once:

  memory  np.load of the file, then model.fit(x, y): Keras's own pipeline
          over in-memory arrays (the ceiling)
  feed    `tfos run --input FILE`: the launcher's C feeder writes the rows
          into the node's ring; model.fit(feed.dataset(B).map(split)), with
          dataset()'s default read-ahead (8 batches per read from the ring)
  feed1   the same with dataset(B, read_ahead=1): one read per batch (the
          feed position of a checkpoint exact to the batch)

Each side's time is the model.fit call (plus, for the feed, building the
dataset, whose first batch it reads). Rounds alternate which side goes first;
figures are medians. Every run checks it trained on --rows rows.

Prints `name: value` lines: fit_memory_samples_per_s,
fit_feed_samples_per_s, fit_feed_vs_memory (target >= 0.9) and
fit_feed_read_ahead_1_vs_memory.

--framework torch runs bench/fit_feed_torch_prog.py instead: the same model
in PyTorch, one pass over the rows, from tensors in memory (a loop over
slices: no loader) and from DataLoader(FeedDataset(B), batch_size=None),
reading on the training thread (feed, FeedDataset's default) and with
prefetch=2 (feed1: a thread reading ahead); the lines are named
torch_fit_*.

Usage: .venv/bin/python bench/fit_feed.py [--rows N] [--batch B] [--rounds R]
       [--tfos build/tfos]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROGS = {"keras": os.path.join(HERE, "fit_feed_prog.py"), "torch": os.path.join(HERE, "fit_feed_torch_prog.py")}
TARGET = 0.9


def prog_args(option, what):
    """The command line of both programs (fit_feed_prog.py,
    fit_feed_torch_prog.py): --mode, --data, --batch and their own knob."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("memory", "feed"), required=True)
    ap.add_argument("--data", help="the .npy (memory mode)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument(option, type=int, help="%s (default: its own)" % what)
    return ap.parse_args()


def make_file(path, rows):
    rng = np.random.default_rng(3)
    x = rng.random((rows, 64), dtype=np.float32)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.float32)
    np.save(path, np.concatenate([x, y[:, None]], axis=1))


def run_side(tfos, prog, mode, path, batch, logs):
    cmd = [tfos, "run", "--workers", "1", "--log-dir", logs]
    if mode != "memory":
        cmd += ["--input", path]
    cmd += ["--", sys.executable, prog, "--mode", "memory" if mode == "memory" else "feed", "--batch", str(batch)]
    if mode == "feed1":  # Keras: one batch per read; torch: a prefetch thread
        cmd += ["--read-ahead", "1"] if prog == PROGS["keras"] else ["--prefetch", "2"]
    if mode == "memory":
        cmd += ["--data", path]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    # the program's lines come prefixed with its node ("[worker:0] ")
    lines = [ln[ln.index("{"):] for ln in p.stdout.splitlines() if '{"mode"' in ln]
    if p.returncode or not lines:
        sys.exit("fit_feed.py: the %s side failed (exit %d):\n%s%s" % (mode, p.returncode, p.stdout[-3000:],
                                                                       p.stderr[-3000:]))
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=400000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tfos", default=os.path.join(ROOT, "build", "tfos"))
    ap.add_argument("--framework", choices=sorted(PROGS), default="keras")
    a = ap.parse_args()
    keras = a.framework == "keras"
    name = "fit" if keras else "torch_fit"
    sides = ("memory", "feed", "feed1")
    with tempfile.TemporaryDirectory(prefix="tfos-bench-fit-") as d:
        path = os.path.join(d, "rows.npy")
        make_file(path, a.rows)
        with open(path, "rb") as f:  # into the page cache
            while f.read(64 << 20):
                pass
        rates = {mode: [] for mode in sides}
        for r in range(a.rounds):
            for mode in (sides if r % 2 == 0 else sides[::-1]):
                res = run_side(a.tfos, PROGS[a.framework], mode, path, a.batch,
                               os.path.join(d, "logs-%s-%d" % (mode, r)))
                if res["rows"] != a.rows:
                    sys.exit("fit_feed.py: the %s side trained on %d rows of %d" % (mode, res["rows"], a.rows))
                rates[mode].append(res["samples_per_s"])
                sys.stderr.write("[bench-%s] round %d: %s %.0f samples/s (%.2f s, loss %.3f)\n"
                                 % (name, r + 1, mode, res["samples_per_s"], res["seconds"], res["loss"]))
        print("%s_rows: %d, batch: %d, rounds: %d" % (name, a.rows, a.batch, a.rounds))
        for mode in ("memory", "feed"):
            xs = rates[mode]
            print("%s_%s_samples_per_s: %.0f (min %.0f, max %.0f)" % (name, mode, statistics.median(xs), min(xs),
                                                                    max(xs)))
        mem = statistics.median(rates["memory"])
        print("%s_feed_vs_memory: %.2f" % (name, statistics.median(rates["feed"]) / mem))
        print("%s_feed_%s_vs_memory: %.2f" % (name, "read_ahead_1" if keras else "prefetch_2",
                                              statistics.median(rates["feed1"]) / mem))
        print("%s_feed_target_vs_memory: >= %g" % (name, TARGET))


if __name__ == "__main__":
    main()
