"""A Spark Connect client that forms a tfos.spark.Cluster and then waits to
be killed: test_cluster_api.py SIGKILLs it and checks that the cluster goes
away by itself (its lease runs out).

    python connect_client.py sc://127.0.0.1:PORT LEASE_SECONDS

Prints "FORMED <cluster id> <agent pid> ..." once the cluster runs."""
import sys
import time


def wait_fun(args, ctx):
    """Reads its feed until it ends (it never does: the client dies)."""
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr)
    while not feed.should_stop():
        feed.next_batch(10)


def main():
    from pyspark.sql import SparkSession
    from tfos.spark import Cluster
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    cluster = Cluster(spark, wait_fun, None, 2, lease_timeout=float(sys.argv[2])).start()
    print("FORMED", cluster.cluster_id, *[n["pid"] for n in cluster.nodes], flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
