"""The training program of bench/gpu_feed.py: one pass of an MLP over the
rows of --data (float32 (N, F + 1): F features, then the label), on
--device, fed one of these ways (--mode):

    resident  the whole file as one tensor on the device, sliced per batch
    loader0   DataLoader(TensorDataset(np.load(data)), batch_size=B,
              pin_memory=True), no worker processes
    loader    the same with --workers worker processes
    tfos      DataLoader(FeedDataset(B), batch_size=None) under `tfos run
              --input DATA --batch-rows B` (the rows come from the ring)
    tfos_prefetch  the same with FeedDataset(B, prefetch=2): a thread reads
              ahead from the ring while the GPU steps
    tfos_pinned  FeedDataset(B, prefetch=2, device=--device): the ring
              registered with CUDA, batches copied to the device by DMA
              from the ring in the read-ahead thread
    spark     TorchDistributor.train_on_dataframe on a local Spark DataFrame
              of the same rows (one rank; tfos's feed from Spark)

Before the clock each side trains 10 batches of random data of the same
shape. The clock stops after a device synchronise. Prints one JSON line:
{"mode", "rows", "seconds", "samples_per_s", "loss", "copy_s" (seconds the
host spent in the copies to the device), "wall" ([start, end] of the pass,
time.time(): the window of the GPU samples that count)}; tfos_pinned adds
"pinned" (whether CUDA registered the ring).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True,
                    choices=("resident", "loader0", "loader", "tfos", "tfos_prefetch", "tfos_pinned", "spark"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    return ap.parse_args()


class Trainer(object):
    def __init__(self, features, width, device):
        torch.manual_seed(7)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        self.device = torch.device(device)
        self.features = features
        nn = torch.nn
        self.model = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                   nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(self.device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.rows = 0
        self.loss = None
        self.t_copy = 0.0  # seconds in the copy to the device (the host's part of it)

    def step(self, batch):
        """One step on a (B, F + 1) batch, wherever it is."""
        c0 = time.perf_counter()
        b = batch.to(self.device, non_blocking=True)
        self.t_copy += time.perf_counter() - c0
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(b[:, :self.features]), b[:, self.features].long())
        loss.backward()
        self.opt.step()
        self.rows += len(b)
        self.loss = loss

    def warm(self, batch):
        x = torch.rand(batch, self.features + 1)
        x[:, self.features] = 0
        for _ in range(10):
            self.step(x)
        self.sync()
        self.rows = 0
        self.t_copy = 0.0

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def result(self, mode, t0, wall0):
        self.sync()
        secs = time.perf_counter() - t0
        return {"mode": mode, "rows": self.rows, "seconds": secs, "samples_per_s": self.rows / secs,
                "loss": float(self.loss), "copy_s": self.t_copy, "wall": [wall0, time.time()]}


def run(a):
    from torch.utils.data import DataLoader, TensorDataset
    t = Trainer(a.features, a.width, a.device)
    t.warm(a.batch)
    wall0 = time.time()
    if a.mode == "resident":
        d = torch.from_numpy(np.load(a.data)).to(t.device)
        t.sync()
        t0 = time.perf_counter()
        for lo in range(0, len(d), a.batch):
            t.step(d[lo:lo + a.batch])
    elif a.mode in ("loader0", "loader"):
        t0 = time.perf_counter()
        ds = TensorDataset(torch.from_numpy(np.load(a.data)))
        workers = 0 if a.mode == "loader0" else a.workers
        pin = t.device.type == "cuda"
        for (b,) in DataLoader(ds, batch_size=a.batch, num_workers=workers, pin_memory=pin,
                               persistent_workers=False):
            t.step(b)
    elif a.mode in ("tfos", "tfos_prefetch", "tfos_pinned"):
        from tfos.torch import FeedDataset
        t0 = time.perf_counter()
        ds = FeedDataset(a.batch, prefetch=0 if a.mode == "tfos" else 2,
                         device=t.device if a.mode == "tfos_pinned" else None)
        for (b,) in DataLoader(ds, batch_size=None):
            t.step(b)
        if ds._to_device is not None:
            res = t.result(a.mode, t0, wall0)
            res["pinned"] = ds._to_device.pinned  # CUDA registered the ring (else a line on stderr says why not)
            return res
    return t.result(a.mode, t0, wall0)


def spark_train(a):
    """One rank of TorchDistributor.train_on_dataframe: the same loop over
    FeedDataset, in the rank; returns its result (rank 0's value)."""
    from torch.utils.data import DataLoader
    from tfos.torch import FeedDataset
    t = Trainer(a.features, a.width, a.device)
    t.warm(a.batch)
    wall0, t0 = time.time(), time.perf_counter()
    for (b,) in DataLoader(FeedDataset(a.batch), batch_size=None):
        t.step(b)
    return t.result("spark", t0, wall0)


def run_spark(a):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from tfos.torch import TorchDistributor
    import gpu_feed_prog  # by reference: the ranks import it from bench/ (PYTHONPATH), as cloudpickle
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    rows = np.load(a.data, mmap_mode="r")
    path = a.data + ".parquet"
    flat = pa.array(np.ascontiguousarray(rows).reshape(-1))
    pq.write_table(pa.table({"row": pa.FixedSizeListArray.from_arrays(flat, rows.shape[1])}), path)
    spark = (SparkSession.builder.master("local[2]").appName("tfos-gpu-bench")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(a.batch)).getOrCreate())
    try:
        df = spark.read.parquet(path).cache()
        df.count()
        return TorchDistributor(num_processes=1, local_mode=False, use_gpu=False).train_on_dataframe(
            gpu_feed_prog.spark_train, df, a)
    finally:
        spark.stop()


def main():
    a = parse()
    res = run_spark(a) if a.mode == "spark" else run(a)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
