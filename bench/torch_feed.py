"""A Spark DataFrame into a PyTorch DDP training loop: tfos's feed against
Spark's TorchDistributor paths, on one Spark cluster, same data, one run.

Starts one Spark standalone cluster (tests/spark/sparkcluster.py: a master and
2 workers of 1 core, on 127.0.0.1) and one SparkSession. The DataFrame is
ROWS rows of (features array<float> of 64, label long), made by Spark SQL,
in 2 partitions, cached and counted before anything is timed. Each path runs
the same DDP loop on 2 ranks (gloo, a 64->10 linear model, Adam, batches of
BATCH rows) and reads every row once:

  tfos         tfos.torch.TorchDistributor(2, local_mode=False).train_on_dataframe:
               the partitions stream as Arrow batches into the ranks' feeds,
               read by tfos.torch.FeedDataset
  documented   what Spark's docs tell a user to do: df.write.parquet(DIR), then
               pyspark.ml.torch.distributor.TorchDistributor(2, local_mode=False)
               .run(fn, DIR), each rank reading its half of the Parquet files
               with its own loader (pyarrow, batches of BATCH rows -> tensors)
  private      Spark's TorchDistributor._train_on_dataframe: each task writes its
               partition to an Arrow file, the rank reads it with
               _get_spark_partition_data_loader(num_samples=its rows, BATCH)

Measured per path (rank 0's clock, wall time since the driver started the
path): `enter_s`, until the training function starts in rank 0; `start_s`,
until the first optimizer step (for `documented` the
Parquet write is part of it); `loop_rows_per_s`, rows of both ranks over the
time from the first step to the last rank's end; `total_rows_per_s`, rows
over the whole call. Ratios: tfos over each baseline (rows/s), each
baseline's start over tfos's. Every path checks it trained on ROWS rows
(an all-reduce of the counts); a mismatch fails the benchmark.

Rounds alternate the order of the paths. The first --warmup rounds (default
1) are not in the medians: the first call of a session pays the JVMs' first
run of its plan (code generation, the executors' first Arrow stage and
Python workers) and the first `import torch` from a cold page cache, which
fell on whichever path ran first (tfos: 18.1 s against 10.7 s warm). Their
figures are printed apart, as `first_*` (round 1's order: the first path
pays the session's start).

Usage: .venv/bin/python bench/torch_feed.py [--rows N] [--batch B] [--rounds R] [--warmup W]
Prints `name: value` lines on stdout, progress on stderr.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "spark"))

from sparkcluster import SparkCluster, shutdown_gateway  # noqa: E402


def log(msg):
    sys.stderr.write("bench-torch: %s\n" % msg)
    sys.stderr.flush()


def out(name, value):
    print("%s: %s" % (name, value), flush=True)


# ---- the training loop, the same for every path ------------------------------------

def ddp_loop(batches, t0, entered):
    """Join the gloo process group, train on ``batches(rank, world)`` (an
    iterable of (x, y) tensors), and return the run's figures (rank 0's
    clock; rows of every rank; the last rank's end)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    rows, first = 0, None
    with model.join():
        for x, y in batches(dist.get_rank(), dist.get_world_size()):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if first is None:
                first = time.time()
            rows += len(y)
    end = time.time()
    stats = torch.tensor([float(rows), end], dtype=torch.float64)
    total = stats.clone()
    dist.all_reduce(total[:1])            # rows of every rank
    last = stats[1:].clone()
    dist.all_reduce(last, op=dist.ReduceOp.MAX)  # the last rank's end
    dist.destroy_process_group()
    return {"rows": int(total[0].item()), "start_s": first - t0, "loop_s": last.item() - first,
            "enter_s": entered - t0}


def tfos_train(t0, batch):
    entered = time.time()
    import torch.utils.data
    from tfos.torch import FeedDataset

    def batches(rank, world):
        return torch.utils.data.DataLoader(FeedDataset(batch), batch_size=None)

    return ddp_loop(batches, t0, entered)


def documented_train(t0, batch, path):
    entered = time.time()
    import glob
    import pyarrow.parquet as pq
    import torch

    def batches(rank, world):
        for f in sorted(glob.glob(os.path.join(path, "*.parquet")))[rank::world]:
            for rb in pq.ParquetFile(f).iter_batches(batch_size=batch):
                feats = rb.column(0).flatten().to_numpy(zero_copy_only=False).reshape(rb.num_rows, 64)
                yield torch.from_numpy(feats), torch.from_numpy(rb.column(1).to_numpy())

    return ddp_loop(batches, t0, entered)


def private_train(t0, batch, rows_per_rank):
    entered = time.time()
    from pyspark.ml.torch.distributor import _get_spark_partition_data_loader

    def batches(rank, world):
        for feats, label in _get_spark_partition_data_loader(rows_per_rank, batch, num_workers=0):
            yield feats.float(), label.long()

    return ddp_loop(batches, t0, entered)


# ---- the paths --------------------------------------------------------------------

def run_tfos(spark, df, a, tmp):
    from tfos.torch import TorchDistributor
    t0 = time.time()
    res = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, max_restarts=0, quiet=True,
                           status_port=-1, spark=spark, checkpoint_dir=os.path.join(tmp, "ckpt")
                           ).train_on_dataframe(tfos_train, df, t0, a.batch)
    res["total_s"] = time.time() - t0
    return res


def run_documented(spark, df, a, tmp):
    from pyspark.ml.torch.distributor import TorchDistributor
    path = os.path.join(tmp, "parquet-%d" % time.monotonic_ns())
    t0 = time.time()
    df.write.parquet(path)
    res = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(documented_train, t0, a.batch,
                                                                                 path)
    res["total_s"] = time.time() - t0
    shutil.rmtree(path, ignore_errors=True)
    return res


def run_private(spark, df, a):
    from pyspark.ml.torch.distributor import TorchDistributor
    t0 = time.time()
    res = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)._train_on_dataframe(
        private_train, df, t0, a.batch, a.rows // 2)
    res["total_s"] = time.time() - t0
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="tfos,documented,private")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and left out of the medians")
    a = ap.parse_args()
    paths = a.paths.split(",")
    cluster = SparkCluster(n_workers=2, worker_cores=1, worker_memory="2g")
    cluster.start(timeout=120)
    tmp = tempfile.mkdtemp(prefix="tfos-bench-torch-")
    results = {p: [] for p in paths}
    try:
        spark = cluster.spark_session("tfos-bench-torch", **{"spark.executor.memory": "1500m"})
        from pyspark.sql import functions as F
        sc = spark.sparkContext
        for f in (__file__,):
            sc.addPyFile(f)
        df = (spark.range(a.rows, numPartitions=2)
              .select(F.array(*[F.rand(seed=i).cast("float") for i in range(64)]).alias("features"),
                      (F.col("id") % 10).alias("label"))
              .cache())
        log("dataframe: %d rows in %d partitions" % (df.count(), df.rdd.getNumPartitions()))
        out("torch_rows", a.rows)
        out("torch_batch", a.batch)
        out("torch_cpu_cores", os.cpu_count())
        first = {p: [] for p in paths}
        for r in range(a.warmup + a.rounds):
            order = paths if r % 2 == 0 else list(reversed(paths))
            for p in order:
                log("round %d%s: %s" % (r + 1, " (warm-up)" if r < a.warmup else "", p))
                if p == "tfos":
                    res = run_tfos(spark, df, a, tmp)
                elif p == "documented":
                    res = run_documented(spark, df, a, tmp)
                else:
                    res = run_private(spark, df, a)
                if res["rows"] != a.rows:
                    raise SystemExit("bench-torch: %s trained on %d rows, not %d" % (p, res["rows"], a.rows))
                log("  %s: function entered %.2f s, first step %.2f s, loop %.2f s, total %.2f s" % (
                    p, res["enter_s"], res["start_s"], res["loop_s"], res["total_s"]))
                (first if r < a.warmup else results)[p].append(res)
        for p in paths:
            for i, x in enumerate(first[p]):
                name = "first_%s_total_rows_per_s%s" % (p, "" if i == 0 else "_%d" % (i + 1))
                out(name, "%.0f" % (a.rows / x["total_s"]))
        med = {}
        for p in paths:
            rs = results[p]
            med[p] = {"enter_s": statistics.median(x["enter_s"] for x in rs),
                      "start_s": statistics.median(x["start_s"] for x in rs),
                      "loop_rows_per_s": statistics.median(a.rows / x["loop_s"] for x in rs),
                      "total_rows_per_s": statistics.median(a.rows / x["total_s"] for x in rs)}
            for k, v in med[p].items():
                out("%s_%s" % (p, k), "%.2f" % v if k in ("enter_s", "start_s") else "%.0f" % v)
        if "tfos" in med:
            for p in paths:
                if p == "tfos":
                    continue
                out("tfos_over_%s_loop_rows_per_s" % p, "%.2f" % (med["tfos"]["loop_rows_per_s"] /
                                                                  med[p]["loop_rows_per_s"]))
                out("tfos_over_%s_total_rows_per_s" % p, "%.2f" % (med["tfos"]["total_rows_per_s"] /
                                                                   med[p]["total_rows_per_s"]))
                out("%s_start_over_tfos_start" % p, "%.2f" % (med[p]["start_s"] / med["tfos"]["start_s"]))
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            shutdown_gateway()
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
