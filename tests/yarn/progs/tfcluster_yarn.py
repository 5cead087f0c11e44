"""A TensorFlowOnSpark program on Spark-on-YARN, for tests/yarn: run as its
own driver (client mode) against the minicluster whose configuration is in
HADOOP_CONF_DIR.

It writes a DataFrame to HDFS, reads it back, and feeds it with TFCluster
(InputMode.SPARK) into 2 nodes running in YARN executors. Each node counts
its rows and reports what it saw: ctx.defaultFS and TFNode.hdfs_path of a
relative and an absolute path. Prints one line "RESULT <json>".

usage: tfcluster_yarn.py OUT_DIR ROWS
"""
import json
import os
import sys
import glob

from pyspark.sql import SparkSession

import pyspark
from tfos import TFCluster, TFNode


def node_fun(args, ctx):
    feed = TFNode.DataFeed(ctx.mgr, True)
    n = total = 0
    while not feed.should_stop():
        batch = feed.next_batch(100)
        n += len(batch)
        total += sum(r[0] for r in batch)
    info = {"node": "%s:%d" % (ctx.job_name, ctx.task_index), "rows": n, "sum": total,
            "defaultFS": ctx.defaultFS, "relative": TFNode.hdfs_path(ctx, "model"),
            "absolute": TFNode.hdfs_path(ctx, "/data/x"), "container": os.environ.get("CONTAINER_ID")}
    with open(os.path.join(args["out"], "node-%d.json" % ctx.executor_id), "w") as f:
        json.dump(info, f)


def main():
    out, rows = sys.argv[1], int(sys.argv[2])
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    spark = (SparkSession.builder.master("yarn").appName("tfos-tfcluster-yarn")
             .config("spark.submit.deployMode", "client")
             .config("spark.yarn.jars", "local:" + jars)       # no upload of Spark's own jars
             .config("spark.yarn.am.memory", "512m")
             .config("spark.executor.memory", "512m")
             .config("spark.executor.instances", "2")
             .config("spark.executor.cores", "1")
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.yarn.maxAppAttempts", "1")
             .config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    try:
        sc = spark.sparkContext
        default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS")
        # the driver's Hadoop user: the principal's short name on a Kerberized cluster
        user = sc._jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getShortUserName()
        path = default_fs + "/user/%s/tfos-test/numbers" % user
        spark.range(rows, numPartitions=4).toDF("x").write.mode("overwrite").parquet(path)
        df = spark.read.parquet(path)
        cluster = TFCluster.run(sc, node_fun, {"out": out}, 2, num_ps=0, input_mode=TFCluster.InputMode.SPARK)
        cluster.train(df.rdd.map(lambda r: (r.x,)), num_epochs=1)
        cluster.shutdown()
        nodes = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "node-*.json")))]
        print("RESULT " + json.dumps({"defaultFS": default_fs, "path": path, "nodes": nodes,
                                      "app": sc.applicationId}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
