"""TFCluster.run's advice on a master that cannot hold its nodes, one
SparkContext after another (issue 36, item 11).

    driver_masters.py NODES MASTER[@WAIT]...

WAIT (seconds, default 10) bounds run()'s wait for the executors; a master
whose executors should all come gets a long one (three executor JVMs can
take more than 10 s to start on a loaded machine). For each master: prints "MASTER <master>", then "ERROR <text>" when run()
raised, or "FORMED" (the cluster is shut down at once)."""
import sys

from pyspark.sql import SparkSession

from tfos import TFCluster


def idle(args, ctx):
    pass


def main():
    nodes = int(sys.argv[1])
    for arg in sys.argv[2:]:
        master, _, wait = arg.partition("@")
        spark = (SparkSession.builder.master(master).config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.executor.memory", "512m")
                 .getOrCreate())
        print("MASTER %s" % master, flush=True)
        try:
            cluster = TFCluster.run(spark.sparkContext, idle, None, nodes, input_mode=TFCluster.InputMode.SPARK,
                                    reservation_timeout=int(wait or 10), status_port=-1)
            cluster.shutdown()
            print("FORMED", flush=True)
        except Exception as exc:
            print("ERROR %s" % str(exc).replace("\n", " "), flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
