"""TFCluster on Spark-on-YARN under Kerberos, for tests/yarn/test_secure_spark.py:
run under spark-submit --principal/--keytab (client mode) against the
Kerberized minicluster.

2 workers (InputMode.TENSORFLOW) count steps, STEPS of PAUSE s, keeping
their last step in TFOS_CHECKPOINT_DIR (HDFS, through a tfos.fs.Mirror
pushed after every step): longer than the tokens' maximum lifetime. On
attempt 1, worker:1 SIGKILLs itself at step KILL_AT; the cluster restarts
(max_restarts=1) and every node resumes from its checkpoint. Each node
appends "STEPS <node> attempt=<n> from=<step> home=<hdfs home> t=<time>"
and "STEPS <node> done t=<time>" to OUT_DIR/steps.log. Prints "RESULT <json>".

usage: tfcluster_secure.py OUT_DIR STEPS PAUSE KILL_AT
"""
import json
import os
import sys

from pyspark.sql import SparkSession

from tfos import TFCluster


def node_fun(args, ctx):
    import signal
    import time
    import tfos.fs
    from tfos import TFNode
    me = "%s:%d" % (ctx.job_name, ctx.task_index)
    attempt = int(os.environ.get("TFOS_ATTEMPT", "1"))
    mirror = tfos.fs.Mirror(os.environ["TFOS_CHECKPOINT_DIR"])
    path = os.path.join(mirror.path, "%s-%d.step" % (ctx.job_name, ctx.task_index))
    start = int(open(path).read()) if os.path.exists(path) else 0
    with open(os.path.join(args["out"], "steps.log"), "a") as log:
        log.write("STEPS %s attempt=%d from=%d home=%s t=%.1f\n" % (me, attempt, start, TFNode.hdfs_path(ctx, ""),
                                                                   time.time()))
    for step in range(start, args["steps"]):
        if attempt == 1 and me == "worker:1" and step == args["kill_at"]:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args["pause"])
        with open(path + ".tmp", "w") as f:
            f.write(str(step + 1))
        os.replace(path + ".tmp", path)
        mirror.push()
    with open(os.path.join(args["out"], "steps.log"), "a") as log:
        log.write("STEPS %s done t=%.1f\n" % (me, time.time()))


def main():
    out, steps, pause, kill_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    spark = SparkSession.builder.appName("tfos-tfcluster-secure").getOrCreate()
    try:
        sc = spark.sparkContext
        cluster = TFCluster.run(sc, node_fun, {"out": out, "steps": steps, "pause": pause, "kill_at": kill_at}, 2,
                                num_ps=0, input_mode=TFCluster.InputMode.TENSORFLOW, max_restarts=1)
        cluster.shutdown(timeout=600)
        print("RESULT " + json.dumps({"app": sc.applicationId, "checkpoints": cluster.spec.checkpoint_dir}),
              flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
