"""TensorFlowOnSpark's TFParallel: run a function on every executor,
independently (no cluster, no TF_CONFIG), e.g. single-node inference of a
model over data each instance reads itself.

``TFParallel.run(sc, map_fun, tf_args, num_executors, use_barrier=True)``
runs ``map_fun(tf_args, ctx)`` once per executor, in the Spark task itself;
``ctx.executor_id``/``ctx.worker_num`` is the instance number (0..n-1),
``ctx.job_name`` is ``'default'``, ``ctx.num_workers`` is n. An exception
fails the Spark job with the function's traceback. With Spark's GPU scheduling
the task's GPUs are in CUDA_VISIBLE_DEVICES.
"""
import os

from . import TFSparkNode
from .TFNode import NodeContext

__all__ = ["run"]


def run(sc, map_fun, tf_args, num_executors, use_barrier=True):
    """Run ``map_fun(tf_args, ctx)`` on ``num_executors`` executors in parallel
    and return the list of what each call returned (TFoS returns nothing;
    the values are a tfos addition)."""
    try:
        default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS") or "file://"
    except Exception:
        default_fs = "file://"
    n = int(num_executors)
    if n < 1:
        raise ValueError("TFParallel.run: num_executors must be at least 1, got %d" % n)

    def task(iterator):
        out = []
        for i in iterator:
            gpus = TFSparkNode.gpu_addresses()
            saved = os.environ.get("CUDA_VISIBLE_DEVICES")
            if gpus is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            try:
                ctx = NodeContext(job_name="default", task_index=i, executor_id=i, cluster_spec={}, num_workers=n,
                                  defaultFS=default_fs, working_dir=os.getcwd())
                out.append(map_fun(tf_args, ctx))
            finally:
                # Python workers are reused (spark.python.worker.reuse): the
                # next task on this one must not inherit this task's GPUs
                if gpus is not None:
                    if saved is None:
                        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                    else:
                        os.environ["CUDA_VISIBLE_DEVICES"] = saved
        return iter(out)

    rdd = sc.parallelize(range(n), n)
    stage = rdd.barrier().mapPartitions(task) if use_barrier else rdd.mapPartitions(task)
    return stage.collect()
