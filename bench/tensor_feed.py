"""Tensors at memory speed: `tfos run --input big.npy` into a C consumer,
against a streaming memcpy, in one run (issue 16: tensor_vs_memcpy).

The file: --rows rows of a float32 (200, 192) tensor (150 KiB a row; 7,000
rows: 1.07 GB), written once and read once before the clock, so it is in
the page cache as a file being trained on repeatedly is. The consumer
(bench/tensor_feed.c, built with the project) reads its node's feed to the
end and sums every 8-byte word of every batch: it reads all of its data once,
as a trainer does; its time runs from its first batch to the end of the feed.
The ceiling: the best of 7 memcpy calls of a 64 MiB buffer in the same
program (the copy a feed of one copy would make at best).

Prints `name: value` lines: tensor_gb_per_s (median of --rounds runs),
memcpy_gb_per_s (median of the rounds' bests) and tensor_vs_memcpy. Every run
checks the rows and the sum against the file's.

Usage: .venv/bin/python bench/tensor_feed.py [--rows N] [--rounds R] [--workers W]
       [--tfos build/tfos] [--consumer build/tensor_feed] [--batch-rows B]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_file(path, rows):
    """The tensors, each stamped with its row index, and the sum of the
    file's data as uint64 words (what the consumer must print)."""
    a = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, 200, 192))
    for lo in range(0, rows, 500):
        hi = min(rows, lo + 500)
        a[lo:hi] = np.arange(lo, hi, dtype=np.float32)[:, None, None] * 0.5 + 1
    a.flush()
    words = np.asarray(a).reshape(-1).view(np.uint64)
    total = int(words.sum(dtype=np.uint64))
    del a
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-rows", type=int, default=64)
    ap.add_argument("--tfos", default=os.path.join(ROOT, "build", "tfos"))
    ap.add_argument("--consumer", default=os.path.join(ROOT, "build", "tensor_feed"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfos-bench-tensor-") as d:
        path = os.path.join(d, "big.npy")
        expect = make_file(path, a.rows)
        size = os.path.getsize(path)
        with open(path, "rb") as f:  # into the page cache
            while f.read(64 << 20):
                pass
        rates, copies = [], []
        for r in range(a.rounds):
            m = subprocess.run([a.consumer, "memcpy", "64", "7"], capture_output=True, text=True, check=True)
            copies.append(float(m.stdout.split()[1]))
            p = subprocess.run([a.tfos, "run", "--workers", str(a.workers), "--input", path, "--batch-rows",
                                str(a.batch_rows), "--log-dir", os.path.join(d, "logs-%d" % r), "--", a.consumer],
                               capture_output=True, text=True, timeout=600)
            if p.returncode:
                sys.exit("tensor_feed.py: tfos run failed:\n" + p.stdout + p.stderr)
            got = re.findall(r"rows (\d+) bytes (\d+) seconds ([0-9.]+) sum (\d+)", p.stdout)
            rows = sum(int(g[0]) for g in got)
            nbytes = sum(int(g[1]) for g in got)
            total = sum(int(g[3]) for g in got) % (1 << 64)
            if rows != a.rows or total != expect:
                sys.exit("tensor_feed.py: the consumers got %d rows (sum %d), the file has %d (sum %d)"
                         % (rows, total, a.rows, expect))
            secs = max(float(g[2]) for g in got)
            rates.append(nbytes / secs / 1e9)
            sys.stderr.write("[bench-tensor] round %d: feed %.2f GB/s, memcpy %.2f GB/s\n"
                             % (r + 1, rates[-1], copies[-1]))
        print("rows: %d, file: %.2f GB, workers: %d, batch rows: %d, rounds: %d"
              % (a.rows, size / 1e9, a.workers, a.batch_rows, a.rounds))
        feed, copy = statistics.median(rates), statistics.median(copies)
        print("tensor_gb_per_s: %.2f" % feed)
        print("memcpy_gb_per_s: %.2f" % copy)
        print("tensor_vs_memcpy: %.2f" % (feed / copy))


if __name__ == "__main__":
    main()
