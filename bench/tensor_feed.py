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

Each round runs the feed once per --batch-rows value (default 0, 8 and 64:
0 is tfos run's own choice, no --batch-rows: records of at most 2 MiB, 13
rows here; then records of 1.2 MB, and of 9.8 MB, three of which go round
the ring's 32 MiB hot window), with the ring tfos run picks unless --feed-mb
is given.

Prints `name: value` lines: memcpy_gb_per_s (median of the rounds' bests),
tensor_gb_per_s and tensor_vs_memcpy for the first batch size (medians of
--rounds runs), tensor_<N>_rows_gb_per_s and _vs_memcpy for the others.
Every run checks the rows and the sum against the file's. Until 2026-11-25
the first size was 8 rows (now tensor_8_rows_vs_memcpy): tfos run's default
then made records of 1024 rows (150 MB), at 0.29 of memcpy.

Usage: .venv/bin/python bench/tensor_feed.py [--rows N] [--rounds R] [--workers W]
       [--tfos build/tfos] [--consumer build/tensor_feed] [--batch-rows B[,B...]] [--feed-mb M]
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
    ap.add_argument("--batch-rows", type=lambda v: [int(x) for x in v.split(",")], default=[0, 8, 64],
                    help="rows per record, comma-separated (0: tfos run's default): the first gives "
                         "tensor_vs_memcpy, the others tensor_<N>_rows_vs_memcpy")
    ap.add_argument("--feed-mb", type=int, default=0, help="the ring's size (tfos run --feed-mb; 0: its default)")
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
        copies = []
        rates = {b: [] for b in a.batch_rows}
        for r in range(a.rounds):
            m = subprocess.run([a.consumer, "memcpy", "64", "7"], capture_output=True, text=True, check=True)
            copies.append(float(m.stdout.split()[1]))
            for b in a.batch_rows:
                rates[b].append(feed_rate(a, path, b, os.path.join(d, "logs-%d-%d" % (r, b)), expect))
            sys.stderr.write("[bench-tensor] round %d: feed %s GB/s, memcpy %.2f GB/s\n"
                             % (r + 1, ", ".join("%.2f (%d rows)" % (rates[b][-1], b) for b in a.batch_rows),
                                copies[-1]))
        print("rows: %d, file: %.2f GB, workers: %d, batch rows: %s, feed ring: %s, rounds: %d"
              % (a.rows, size / 1e9, a.workers, ",".join(map(str, a.batch_rows)),
                 "%d MiB" % a.feed_mb if a.feed_mb else "tfos run's choice", a.rounds))
        copy = statistics.median(copies)
        print("memcpy_gb_per_s: %.2f" % copy)
        for i, b in enumerate(a.batch_rows):
            name = "tensor" if i == 0 else "tensor_%d_rows" % b
            feed = statistics.median(rates[b])
            print("%s_gb_per_s: %.2f" % (name, feed))
            print("%s_vs_memcpy: %.2f" % (name, feed / copy))


def feed_rate(a, path, batch_rows, log_dir, expect):
    """One tfos run of the file into the consumer: its GB/s (rows and sum checked)."""
    ring = ["--feed-mb", str(a.feed_mb)] if a.feed_mb else []
    rows = ["--batch-rows", str(batch_rows)] if batch_rows else []
    p = subprocess.run([a.tfos, "run", "--workers", str(a.workers), "--input", path, "--log-dir", log_dir] + rows
                       + ring + ["--", a.consumer],
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
    return nbytes / max(float(g[2]) for g in got) / 1e9


if __name__ == "__main__":
    main()
