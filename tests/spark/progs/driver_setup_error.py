"""A driver whose executors run a Python without tfos: TFCluster.run must
fail at once with the paragraph that says so (issue 36, item 5).

    driver_setup_error.py CONF_JSON

CONF_JSON: the SparkConf entries (SparkCluster.spark_conf, with
spark.pyspark.python pointing at a Python that lacks tfos). Prints
"ERROR-BEGIN", the error's text, "ERROR-END"; exits 0 when run() raised."""
import json
import sys

from pyspark.sql import SparkSession

from tfos import TFCluster


def never(args, ctx):
    raise AssertionError("no node should have started")


def main():
    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        TFCluster.run(spark.sparkContext, never, None, num_executors=2, input_mode=TFCluster.InputMode.SPARK,
                      reservation_timeout=60, status_port=-1)
    except Exception as exc:
        print("ERROR-BEGIN\n%s: %s\nERROR-END" % (type(exc).__name__, exc), flush=True)
        spark.stop()
        return 0
    spark.stop()
    return 1


if __name__ == "__main__":
    sys.exit(main())
