"""PyTorch DDP on Spark, fed from a DataFrame, with tfos's TorchDistributor.

    python examples/torch/spark_ddp.py                     # embedded local Spark
    spark-submit --master spark://HOST:7077 \\
        --conf spark.executor.cores=1 --conf spark.task.cpus=1 --conf spark.cores.max=2 \\
        --py-files examples/digits/digits_data.py,examples/torch/ddp_digits.py \\
        examples/torch/spark_ddp.py

The training split of scikit-learn's digits becomes a DataFrame (features
array<float>, label long). `TorchDistributor(num_processes=2,
local_mode=False, use_gpu=False).train_on_dataframe(ddp_digits.train, df,
epochs=10)` runs `ddp_digits.train` on two executors as a DDP process group
(gloo) while Spark streams the DataFrame's partitions, as Arrow batches, into
the rank on the executor that computes them; each rank reads its rows with
`tfos.torch.FeedDataset`. Rank 0's held-out accuracy comes back as the
return value and is printed as "held-out accuracy: 0.95...".
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "digits"))

import digits_data  # noqa: E402
import ddp_digits  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[2])")
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-restarts", type=int, default=1)
    p.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    return p.parse_known_args(argv)  # the rest goes to ddp_digits.train


def digits_frame(spark, seed, partitions):
    x, y, _, _ = digits_data.load_split(seed)
    rows = [(row.tolist(), int(label)) for row, label in zip(x, y)]
    return spark.createDataFrame(rows, "features array<float>, label long").repartition(partitions)


def main(argv=None, spark=None):
    a, rest = parse_args(argv)
    from pyspark.sql import SparkSession
    from tfos.torch import TorchDistributor

    own = spark is None
    if own:
        builder = SparkSession.builder.appName("tfos torch digits")
        if a.master or not os.environ.get("SPARK_ENV_LOADED"):
            builder = builder.master(a.master or "local[2]")
        spark = builder.getOrCreate()
    try:
        for path in (ddp_digits.__file__, digits_data.__file__):  # the executors import them
            spark.sparkContext.addPyFile(os.path.abspath(path))
        df = digits_frame(spark, a.seed, 2 * a.num_processes)
        dist = TorchDistributor(num_processes=a.num_processes, local_mode=False, use_gpu=False,
                                max_restarts=a.max_restarts, spark=spark)
        acc = dist.train_on_dataframe(ddp_digits.train, df, rest, epochs=a.epochs)
        print("held-out accuracy: %.4f" % acc, flush=True)
        return acc
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
