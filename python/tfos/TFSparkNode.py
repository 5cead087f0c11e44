"""What runs inside Spark tasks: node tasks start tfos node agents, feed tasks
stream partitions into the node on their own executor.

The code lives in tfos._spark (nodes.py: node tasks and which executor a task
is on; feeding.py: feed and inference tasks); this module keeps
TensorFlowOnSpark's name, and TFoS's node function for code that builds a
node by hand (``run``, below).
"""
import os

from ._spark.feeding import (FeedTaskError, NodeLost, _NodeLock, _wait_consumed, feed_task,  # noqa: F401
                             feed_task_arrow, inference_task)
from ._spark.nodes import (TASK_JOBS_BLOCKING, NodeSpec, _pid_alive, _ppid, _wait_pid_gone,  # noqa: F401
                           executor_jvm_pid, executor_key, gpu_addresses, host_address, local_nodes,
                           node_task, start_node)

__all__ = ["NodeSpec", "node_task", "feed_task", "feed_task_arrow", "inference_task", "executor_key",
           "NodeLost", "run"]


# ---- TensorFlowOnSpark's node function, by hand -----------------------------------
#
# TFCluster.run does not use this: its node tasks start tfos's C agent, which
# registers with the coordinator. TFoS 2.2.5's test_TFSparkNode (and code that
# built a node by hand) call TFSparkNode.run(...)(iterator) in the calling
# process, with a reservation.Server's address in cluster_meta: this is that,
# over tfos.reservation, tfos.TFManager and tfos.gpu_info, with TFoS's rules for
# GPUs and the cluster spec.

def _has_spark_resource_api():
    """True where Spark's task resources API exists (Spark 3+; tfos needs 3.5)."""
    import pyspark
    return int(pyspark.__version__.split(".")[0]) >= 3


def _get_cluster_spec(sorted_cluster_info):
    """{job: ["host:port", ...]} from reservations sorted by executor_id."""
    spec, last = {}, -1
    for node in sorted_cluster_info:
        if node["executor_id"] == last:
            raise ValueError("duplicate executor_id %r in the reservations" % (node["executor_id"],))
        last = node["executor_id"]
        spec.setdefault(node["job_name"], []).append("%s:%s" % (node["host"], node["port"]))
    return spec


def _set_gpus(tf_args, job_name, task_index, cluster_spec=None):
    """CUDA_VISIBLE_DEVICES by TFoS's rules: Spark's GPU resources of this
    task first (``num_gpus``, where given, truncates them); else, outside
    Kubernetes, ``num_gpus`` GPUs (default 1 where one is present) from
    gpu_info, the index counted among this host's nodes; a ``num_gpus`` that
    cannot be met raises."""
    from . import gpu_info
    requested = getattr(tf_args, "num_gpus", None) if not isinstance(tf_args, (list, dict)) else \
        (tf_args.get("num_gpus") if isinstance(tf_args, dict) else None)
    user_requested = requested is not None
    requested = requested or 0
    gpus = []
    if _has_spark_resource_api():
        from pyspark import TaskContext
        context = TaskContext.get()
        if context:
            resources = context.resources()
            if resources and "gpu" in resources:
                gpus = list(resources["gpu"].addresses)
                if user_requested and requested < len(gpus):
                    gpus = gpus[:requested]
                elif not user_requested:
                    requested = len(gpus)
    if "SPARK_EXECUTOR_POD_IP" not in os.environ and not gpus and gpu_info.is_gpu_available():
        requested = requested if user_requested else max(1, requested)
        if requested > 0:
            index = 0
            if cluster_spec:
                mine = cluster_spec[job_name][task_index]
                host = mine.split(":")[0]
                peers = [a for addrs in cluster_spec.values() for a in addrs if a.split(":")[0] == host]
                index = peers.index(mine)
            gpus = gpu_info.get_gpus(requested, index, format=gpu_info.AS_LIST)
    if user_requested and len(gpus) < requested:
        raise RuntimeError("TFSparkNode: %d GPU(s) asked for (num_gpus) but %d available here (%s)"
                           % (requested, len(gpus), gpus))
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)


def run(fn, tf_args, cluster_meta, tensorboard=False, log_dir=None, queues=("input", "output", "error"),
        background=False):
    """TFoS's node function: a function of a node RDD's partition iterator
    that registers this node with the reservation server at
    ``cluster_meta["server_addr"]``, waits (bounded) for the others, sets
    CUDA_VISIBLE_DEVICES and TF_CONFIG, and runs ``fn(tf_args, ctx)`` in the
    calling thread, with ``ctx.mgr`` a :mod:`tfos.TFManager` of ``queues``.
    ``background=True`` and ``tensorboard=True`` are refused: tfos runs
    nodes in the background under its agent (``TFCluster.run``)."""
    import json
    import socket
    import uuid

    from . import TFManager, reservation, util
    from .TFNode import NodeContext

    if background:
        raise ValueError("TFSparkNode.run(background=True): tfos runs map_fun in the background under its node "
                         "agent; use TFCluster.run (or background=False to run fn in this thread)")
    if tensorboard:
        raise ValueError("TFSparkNode.run(tensorboard=True): use TFCluster.run(..., tensorboard=True)")

    def _mapfn(iterator):
        executor_id = None
        for executor_id in iterator:
            pass
        if executor_id is None:
            raise ValueError("TFSparkNode.run: the node function got an empty partition (it takes the node's "
                             "executor id, as a partition of sc.parallelize(range(n), n))")
        job_name, task_index = "default", -1
        for job, ids in cluster_meta["cluster_template"].items():
            if executor_id in ids:
                job_name, task_index = job, ids.index(executor_id)
                break
        _set_gpus(tf_args, job_name, task_index)
        host = util.get_ip_address()
        mgr = TFManager.start(uuid.uuid4().bytes, [q for q in queues if q in ("input", "output", "error")])
        try:
            client = reservation.Client(cluster_meta["server_addr"])
            try:
                tmp_sock = None
                mine = [n for n in client.get_reservations()
                        if n["host"] == host and n["executor_id"] == executor_id]
                if mine:  # a retry of this task: already registered
                    port = mine[0]["port"]
                else:
                    tmp_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    tmp_sock.bind(("", int(os.environ.get("TENSORFLOW_PORT", "0"))))
                    port = tmp_sock.getsockname()[1]
                    client.register({"executor_id": executor_id, "host": host, "job_name": job_name,
                                     "task_index": task_index, "port": port, "tb_pid": 0, "tb_port": 0,
                                     "addr": mgr.address, "authkey": None})
                cluster_info = client.await_reservations(
                    float(cluster_meta.get("reservation_timeout", reservation.DEFAULT_TIMEOUT)))
            finally:
                client.close()
            cluster_spec = _get_cluster_spec(sorted(cluster_info, key=lambda n: n["executor_id"]))
            if "master" in cluster_spec or "chief" in cluster_spec:
                os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster_spec,
                                                      "task": {"type": job_name, "index": task_index},
                                                      "environment": "cloud"})
            _set_gpus(tf_args, job_name, task_index, cluster_spec)
            num_workers = sum(len(v) for k, v in cluster_spec.items() if k in ("master", "chief", "worker"))
            ctx = NodeContext(job_name, task_index, executor_id, cluster_spec, num_workers,
                              cluster_meta.get("default_fs", "file://"), cluster_meta.get("working_dir"),
                              host=host, port=port)
            ctx._mgr = mgr
            if tmp_sock is not None:
                if cluster_meta.get("release_port", True):
                    tmp_sock.close()
                else:
                    ctx.tmp_socket = tmp_sock
            fn(tf_args, ctx)
        finally:
            mgr.shutdown()

    return _mapfn
