"""A Spark Connect client that forms a tfos.spark.Cluster and then goes away:
test_cluster_api.py checks that the cluster goes away by itself (its lease
runs out).

    python connect_client.py sc://127.0.0.1:PORT LEASE_SECONDS [sigkill|session-ends]

Prints "FORMED <cluster id> <agent pid> ..." once the cluster runs; then
waits to be killed, or (session-ends) stops its session and exits without
shutting the cluster down."""
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
    if sys.argv[3:] == ["session-ends"]:
        spark.stop()  # and return, the cluster never shut down
        return
    time.sleep(600)


if __name__ == "__main__":
    main()
