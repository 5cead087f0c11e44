"""A driver that forms a tfos cluster and then waits to be killed.

    driver_sleep.py CONF_JSON

CONF_JSON: the SparkConf entries (from SparkCluster.spark_conf). Prints
"READY <agent pids>" once every node's program runs, then sleeps."""
import json
import os
import sys
import time

from pyspark.sql import SparkSession

from tfos import TFCluster


def sleeper(args, ctx):
    import time
    time.sleep(600)


def main():
    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    cluster = TFCluster.run(spark.sparkContext, sleeper, None, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60,
                            ready_timeout=0)  # sleeper never reads its feed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        nodes = cluster.status()["nodes"]
        if all(n["pid"] > 0 for n in nodes):
            print("READY %s" % " ".join(str(n["pid"]) for n in nodes), flush=True)
            break
        time.sleep(0.2)
    time.sleep(600)


if __name__ == "__main__":
    main()
