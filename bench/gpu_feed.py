"""A feed-bound model on the GPU, fed in several ways in one run (issue 40; the
ARCHITECTURE target "GPU busy, feed-bound model: >= 90 % of device-resident
data"). For a machine with an NVIDIA GPU; never part of the tests or CI.

The data: --rows rows of float32 (F + 1,): F features and a label (a linear
rule of the features), one .npy file, read once before the clock so it is in
the page cache. The model: an MLP F -> W -> W -> W -> 10 trained with Adam
(TF32 matmuls), one pass over every row, batches of --batch rows, for each
width W in --widths: a narrow one is bound by how fast rows arrive, a wide
one by the GPU's arithmetic. For each width:

  resident   the whole file as one tensor on the GPU, sliced per batch: the
             ceiling (no input pipeline at all)
  loader     what users have: DataLoader(TensorDataset(np.load(FILE)),
             batch_size=B, pin_memory=True), num_workers 0 and --workers,
             each batch .to(device, non_blocking=True)
  tfos       `tfos run --workers 1 --input FILE --batch-rows B`: the C
             feeder writes the rows into the node's ring; the program
             (bench/gpu_feed_prog.py) reads DataLoader(FeedDataset(B),
             batch_size=None) and copies each batch to the GPU
  tfos_prefetch  the same with FeedDataset(B, prefetch=2): a thread reads
             ahead from the ring (without the GIL) while the GPU steps
  tfos_pinned  the same with FeedDataset(B, prefetch=2, device=DEVICE):
             the ring's pinned mode (its mapping registered with CUDA), the
             read-ahead thread copying each batch by DMA straight from the
             ring's records into tensors on the GPU
  spark      a local Spark DataFrame of the same rows through
             TorchDistributor.train_on_dataframe (tfos's feed from Spark);
             skipped, saying so, where pyspark is not installed

While each side runs, a thread samples the GPU's utilisation through NVML
(nvidia-ml-py) every 50 ms; the figure is the mean over the side's training
pass (the program reports its start and end), not its start-up. copy_s is
the time the host spent in the copies to the device.
Prints one JSON line per side and then `name: value` lines:
gpu_<side>_w<W>_samples_per_s, gpu_<side>_w<W>_util, and
gpu_<side>_w<W>_vs_resident (samples/s over the resident ceiling's; the
target is >= 0.9 for tfos).

Usage: python bench/gpu_feed.py [--rows N] [--features F] [--batch B]
       [--widths 1024,4096] [--workers K] [--tfos PATH] [--device cuda]
--device cpu runs every side on the CPU (a check of the script, no figure).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROG = os.path.join(HERE, "gpu_feed_prog.py")
TARGET = 0.9


def make_file(path, rows, features):
    rng = np.random.default_rng(3)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, features + 1))
    w = rng.standard_normal((features, 10)).astype(np.float32)
    step = 1 << 16
    for lo in range(0, rows, step):
        x = rng.random((min(step, rows - lo), features), dtype=np.float32)
        out[lo:lo + len(x), :features] = x
        out[lo:lo + len(x), features] = np.argmax(x @ w, axis=1)
    out.flush()
    del out


class Utilisation(object):
    """The GPU's utilisation (NVML), sampled every 50 ms while in a with-block."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.samples = []
        self._stop = threading.Event()

    def __enter__(self):
        if self.enabled:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)

            def sample():
                while not self._stop.wait(0.05):
                    self.samples.append((time.time(), pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def mean(self, start, end):
        """The mean utilisation over [start, end] (the training pass)."""
        got = [u for t, u in self.samples if start <= t <= end]
        return sum(got) / len(got) if got else None


def run_prog(args, mode, width, extra_env=None):
    """gpu_feed_prog.py in this process's interpreter, under tfos run for
    the tfos side; returns its JSON line."""
    prog = [sys.executable, PROG, "--mode", mode, "--width", str(width), "--features", str(args.features),
            "--batch", str(args.batch), "--device", args.device, "--workers", str(args.workers),
            "--data", args.data]
    if mode.startswith("tfos"):
        logs = tempfile.mkdtemp(prefix="tfos-gpu-bench-")
        cmd = [args.tfos, "run", "--workers", "1", "--quiet", "--log-dir", logs, "--input", args.data,
               "--batch-rows", str(args.batch), "--"] + prog
    else:
        cmd = prog
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""), **(extra_env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in out.stdout.splitlines() if '"samples_per_s"' in ln]
    if out.returncode or not lines:
        raise RuntimeError("%s failed (exit %d):\n%s\n%s" % (mode, out.returncode, out.stdout[-3000:],
                                                            out.stderr[-3000:]))
    line = lines[-1]
    return json.loads(line[line.index("{"):])


def spark_side(args, width):
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return None, "pyspark is not installed here"
    return run_prog(args, "spark", width), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--widths", default="1024,4096")
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers of the loader side")
    ap.add_argument("--tfos", default=os.environ.get("TFOS_CLI") or os.path.join(ROOT, "build", "tfos"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sides", default="resident,loader0,loader,tfos,tfos_prefetch,tfos_pinned,spark")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tfos-gpu-bench-")
    args.data = os.path.join(tmp, "rows.npy")
    t0 = time.perf_counter()
    make_file(args.data, args.rows, args.features)
    with open(args.data, "rb") as f:  # into the page cache before any clock
        while f.read(1 << 24):
            pass
    print("data: %d rows x %d float32 (%.2f GB) in %.1f s" % (args.rows, args.features + 1,
          os.path.getsize(args.data) / 1e9, time.perf_counter() - t0), flush=True)
    gpu = args.device.startswith("cuda")
    results = {}
    sides = args.sides.split(",")
    for width in [int(w) for w in args.widths.split(",")]:
        for side in sides:
            with Utilisation(gpu) as util:
                if side == "spark":
                    res, why = spark_side(args, width)
                    if res is None:
                        print("gpu_spark_w%d: skipped: %s" % (width, why), flush=True)
                        continue
                else:
                    res = run_prog(args, side, width)
            res["util"] = util.mean(*res["wall"])
            res["side"], res["width"] = side, width
            results[(side, width)] = res
            print(json.dumps(res), flush=True)
    for (side, width), res in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        name = "gpu_%s_w%d" % (side, width)
        print("%s_samples_per_s: %.0f" % (name, res["samples_per_s"]))
        if res["util"] is not None:
            print("%s_util: %.1f" % (name, res["util"]))
        ceiling = results.get(("resident", width))
        if ceiling and side != "resident":
            print("%s_vs_resident: %.3f%s" % (name, res["samples_per_s"] / ceiling["samples_per_s"],
                                              " (target >= %.1f)" % TARGET if side.startswith("tfos") else ""))


if __name__ == "__main__":
    main()
