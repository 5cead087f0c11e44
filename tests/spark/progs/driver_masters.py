"""TFCluster.run's advice on a master that cannot hold its nodes, one
SparkContext after another (issue 36, item 11).

    driver_masters.py NODES MASTER...

For each master: prints "MASTER <master>", then "ERROR <text>" when run()
raised, or "FORMED" (the cluster is shut down at once)."""
import sys

from pyspark.sql import SparkSession

from tfos import TFCluster


def idle(args, ctx):
    pass


def main():
    nodes = int(sys.argv[1])
    for master in sys.argv[2:]:
        spark = (SparkSession.builder.master(master).config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.executor.memory", "512m")
                 .getOrCreate())
        print("MASTER %s" % master, flush=True)
        try:
            cluster = TFCluster.run(spark.sparkContext, idle, None, nodes, input_mode=TFCluster.InputMode.SPARK,
                                    reservation_timeout=10, status_port=-1)  # 10: the wait for executors
            cluster.shutdown()
            print("FORMED", flush=True)
        except Exception as exc:
            print("ERROR %s" % str(exc).replace("\n", " "), flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
