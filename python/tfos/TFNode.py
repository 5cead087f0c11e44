"""The node's view of its cluster, with TensorFlowOnSpark's names.

A program started by tfos (``tfos run``, or a Spark node task) finds its
context in its environment: TF_CONFIG plus the TFOS_* variables the node agent
sets. :func:`get_context` turns them into an object with the fields a
TensorFlowOnSpark ``map_fun`` receives as ``ctx``.
"""
import json
import logging
import os
import re

from .feed import DataFeed, hold_stop  # noqa: F401  (TFoS: TFNode.DataFeed)

__all__ = ["NodeContext", "get_context", "hdfs_path", "DataFeed", "next_batch", "batch_results", "terminate",
           "release_port", "export_saved_model", "start_cluster_server", "hold_stop"]


class NodeContext(object):
    """What a node knows about itself and its cluster.

    Fields as TensorFlowOnSpark's ``ctx``: ``job_name``, ``task_index``,
    ``executor_id``, ``worker_num``, ``cluster_spec`` (dict job -> list of
    host:port), ``num_workers`` (chief + workers), ``defaultFS``,
    ``working_dir``, ``mgr`` (the node's feed; None without one) and
    ``tmp_socket`` (None: tfos has no Python manager process), plus tfos's
    own ``attempt`` (1, then 2, ... after restarts), ``checkpoint_dir`` (kept
    across restarts: point Keras's BackupAndRestore or a CheckpointManager at
    it), ``coord_addr``, ``host``, ``port`` and ``log_dir``.
    """

    def __init__(self, job_name, task_index, executor_id, cluster_spec, num_workers,
                 defaultFS="file://", working_dir=None, attempt=1, coord_addr=None,
                 host=None, port=None, log_dir=None, checkpoint_dir=None):
        self.job_name = job_name
        self.task_index = task_index
        self.executor_id = executor_id
        self.worker_num = executor_id
        self.cluster_spec = cluster_spec
        self.num_workers = num_workers
        self.defaultFS = defaultFS
        self.working_dir = working_dir if working_dir is not None else os.getcwd()
        self._mgr = None
        self.tmp_socket = None
        self.attempt = attempt
        self.coord_addr = coord_addr
        self.host = host
        self.port = port
        self.log_dir = log_dir
        self.checkpoint_dir = checkpoint_dir

    @property
    def mgr(self):
        """This node's feed (a :class:`tfos.feed.FeedManager`), or None when the
        node has no feed rings (ps nodes, programs not started by tfos)."""
        if self._mgr is None and os.environ.get("TFOS_FEED_FDS"):
            from . import feed
            self._mgr = feed.get_manager()
        return self._mgr

    def get_data_feed(self, train_mode=True, qname_in="input", qname_out="output", input_mapping=None):
        """``TFNode.DataFeed(ctx.mgr, ...)`` for this node."""
        return DataFeed(self.mgr, train_mode, qname_in, qname_out, input_mapping)

    def absolute_path(self, path):
        """``path`` as a fully qualified URI (see :func:`hdfs_path`)."""
        return hdfs_path(self, path)

    def heartbeat(self):
        """Tell the node's agent this program makes progress (call it every
        training step, or every few seconds). With ``--hang-timeout S``
        (``TFCluster.run(hang_timeout=S)``) a node that neither reads its
        feed nor calls this for S seconds is declared hung: its Python stacks
        (every thread) go into the failure report and the restart policy
        applies. Cheap: one atomic add in shared memory. A no-op for a node
        without feed rings (ps nodes, programs not started by tfos)."""
        ring = self._observer()
        if ring is not None:
            ring.beat()

    def report(self, step=None, **metrics):
        """Show this node's progress on the status page, in ``/status`` and
        in ``tfos status``: ``ctx.report(step=120, loss=0.31, accuracy=0.9)``.
        Values are numbers (anything ``float()`` takes: numpy and TensorFlow
        scalars too; nan and inf are shown as such); at most 16 of them, names
        of letters, digits, ``_`` and ``.``. The latest report wins; a report
        counts as progress for ``--hang-timeout`` as :meth:`heartbeat` does.
        Cheap (a copy into shared memory): call it every step or every few.
        A no-op for a node without feed rings (ps nodes, programs not started
        by tfos). ValueError/TypeError name a bad value."""
        pairs = [] if step is None else [("step", step)]
        pairs += sorted(metrics.items())
        ring = self._observer()
        if ring is None:
            from . import _tfos
            _tfos.check_report(pairs)
            return
        ring.report(pairs)

    def should_checkpoint(self, step):
        """True exactly once, at the drain step, after a notice (SIGTERM to
        ``tfos run``, a Spark decommission): write the checkpoint with its
        feed position, then exit 0. See :mod:`tfos.drain`."""
        from . import drain
        return drain.should_checkpoint(step)

    def drain_step(self):
        """The drain step (-1: at the next check), or None: no notice."""
        from . import drain
        return drain.drain_step()

    def drain_requested(self):
        """True once a drain was asked (see :meth:`should_checkpoint`)."""
        from . import drain
        return drain.drain_requested()

    def _observer(self):
        """An observer handle on the node's input ring (None: no rings)."""
        ring = getattr(self, "_beat_ring", None)
        if ring is None:
            fds = os.environ.get("TFOS_FEED_FDS")
            if not fds:
                return None
            from . import _tfos
            ring = self._beat_ring = _tfos.Ring(int(fds.split(",")[0]), _tfos.ROLE_OBSERVER)
        return ring

    def release_port(self):
        """Release the node's port. By default tfos holds a node's port until
        its program starts and releases it at that moment, so there is
        nothing left to release and this does nothing. With
        ``TFCluster.run(..., release_port=False)`` the program holds it, as
        TensorFlowOnSpark's did, in ``ctx.tmp_socket`` (binding the port fails
        meanwhile) until this closes the socket and sets ``tmp_socket`` to
        None."""
        if self.tmp_socket is not None:
            self.tmp_socket.close()
            self.tmp_socket = None
        return None

    def __repr__(self):
        return "NodeContext(job_name=%r, task_index=%d, executor_id=%d, num_workers=%d)" % (
            self.job_name, self.task_index, self.executor_id, self.num_workers)


def _env_int(name, default=None):
    val = os.environ.get(name)
    if val is None or val == "":
        if default is None:
            raise RuntimeError("%s is not set: this program was not started by tfos "
                               "(run it with `tfos run ... -- program`)" % name)
        return default
    return int(val)


def get_context():
    """The context of this node, from the environment tfos sets.

    Raises RuntimeError naming the missing variable when the program was not
    started by tfos."""
    job = os.environ.get("TFOS_JOB_NAME")
    if not job:
        raise RuntimeError("TFOS_JOB_NAME is not set: this program was not started by tfos "
                           "(run it with `tfos run ... -- program`)")
    spec_text = os.environ.get("TFOS_CLUSTER_SPEC")
    if spec_text is None and "TF_CONFIG" in os.environ:
        spec_text = json.dumps(json.loads(os.environ["TF_CONFIG"]).get("cluster", {}))
    cluster_spec = json.loads(spec_text) if spec_text else {}
    num_workers = _env_int("TFOS_NUM_WORKERS",
                           len(cluster_spec.get("chief", [])) + len(cluster_spec.get("worker", [])))
    port = os.environ.get("TFOS_PORT")
    ctx = NodeContext(job_name=job,
                       task_index=_env_int("TFOS_TASK_INDEX"),
                       executor_id=_env_int("TFOS_EXECUTOR_ID"),
                       cluster_spec=cluster_spec,
                       num_workers=num_workers,
                       defaultFS=os.environ.get("TFOS_DEFAULT_FS", "file://"),
                       working_dir=os.getcwd(),
                       attempt=_env_int("TFOS_ATTEMPT", 1),
                       coord_addr=os.environ.get("TFOS_COORD_ADDR"),
                       host=os.environ.get("TFOS_HOST"),
                       port=int(port) if port else None,
                       log_dir=os.environ.get("TFOS_LOG_DIR"),
                       checkpoint_dir=os.environ.get("TFOS_CHECKPOINT_DIR"))
    held = os.environ.get("TFOS_PORT_FD")  # release_port=False: the port's socket, handed over by the agent
    if held:
        import socket
        try:
            ctx.tmp_socket = socket.socket(fileno=int(held))
        except (OSError, ValueError):
            ctx.tmp_socket = None
        os.environ.pop("TFOS_PORT_FD", None)  # one owner: a second get_context() does not wrap it again
    return ctx


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

_log = logging.getLogger(__name__)


def _hadoop_user():
    from .fs import hadoop_user  # HADOOP_USER_NAME, else the uid's name: never $USER
    return hadoop_user()


def hdfs_path(ctx, path):
    """A fully qualified URI for ``path``, exactly as TensorFlowOnSpark 2.2.5
    resolves it from ``ctx.defaultFS`` and ``ctx.working_dir``.

    - A path with a scheme (``hdfs://``, ``viewfs://``, ``file://``,
      ``s3a://``...) is returned unchanged. (TFoS knew only the Hadoop schemes
      and turned ``gs://b/x`` into ``<defaultFS>/user/<user>/gs://b/x``; tfos
      returns every ``scheme://`` path unchanged.)
    - An absolute path gets the default filesystem in front, as a string:
      ``/data/x`` -> ``hdfs://nn:8020/data/x``; with a bare ``hdfs://`` (or
      ``viewfs://``) ``hdfs:///data/x``; ``file:///data/x``.
    - A relative path on ``hdfs://``/``viewfs://`` goes under the user's home
      (``<defaultFS>/user/<user>/path``, so ``hdfs:///user/<user>/path`` for a
      bare scheme; ``<user>`` is Hadoop's, ``tfos.fs.hadoop_user()``); on ``file://`` under the working directory
      (``file:///<working_dir>/path``); under any other scheme
      ``<defaultFS>/path``.

    Spark's ``fs.defaultFS`` for a local filesystem is ``file:///``; TFoS's
    driver cut that to ``file://`` before its nodes saw it, and so does this
    function, so the results are TFoS's end to end.
    """
    if _SCHEME.match(path):
        return path
    default_fs = ctx.defaultFS or "file://"
    if default_fs.startswith("file://") and len(default_fs) > 7 and default_fs.endswith("/"):
        default_fs = default_fs[:-1]
    if path.startswith("/"):
        return default_fs + path
    if default_fs.startswith(("hdfs://", "viewfs://")):
        return "{0}/user/{1}/{2}".format(default_fs, _hadoop_user(), path)
    if default_fs.startswith("file://"):
        working = ctx.working_dir if ctx.working_dir is not None else os.getcwd()
        return "{0}/{1}/{2}".format(default_fs, working[1:], path)
    _log.warning("unknown scheme %s with the relative path %s: returning %s/%s", default_fs, path, default_fs, path)
    return "{0}/{1}".format(default_fs, path)


# ---- TensorFlowOnSpark's module-level functions ---------------------------------
#
# TFoS 2.2.5 kept these names but made most of them raise "DEPRECATED" under
# TensorFlow 2; tfos makes them work, on the same feed and export that
# DataFeed and compat use.

def _feed_of(mgr):
    """The one DataFeed the module-level functions share for ``mgr`` (the
    node's feed when None): batch_results needs the rows of the last
    next_batch."""
    from . import feed
    mgr = mgr if isinstance(mgr, feed.FeedManager) else feed.get_manager()
    data_feed = getattr(mgr, "_tfnode_feed", None)
    if data_feed is None:
        data_feed = mgr._tfnode_feed = DataFeed(mgr, train_mode=True)
    return data_feed


def next_batch(mgr, batch_size, qname="input"):
    """Up to ``batch_size`` rows from the node's feed (``ctx.mgr``), as
    ``DataFeed(mgr).next_batch(batch_size)``; an empty list once the feed has
    ended. tfos has one input feed per node: ``qname`` is accepted for
    TensorFlowOnSpark's signature and must be "input"."""
    _check_qname(qname, "input")
    return _feed_of(mgr).next_batch(batch_size)


def batch_results(mgr, results, qname="output"):
    """Send one result per row of the last :func:`next_batch` back to Spark,
    in order (a wrong count raises ValueError, naming the partitions)."""
    _check_qname(qname, "output")
    return _feed_of(mgr).batch_results(results)


def terminate(mgr, qname="input"):
    """Stop this node's feed early: the producers stop at once and later
    :func:`next_batch` calls return no rows."""
    _check_qname(qname, "input")
    return _feed_of(mgr).terminate()


def _check_qname(qname, expected):
    if qname != expected:
        raise ValueError("tfos has one %s feed per node, named %r; got qname=%r" % (expected, expected, qname))


def release_port(ctx):
    """Close ``ctx.tmp_socket`` (the socket that held this node's port, with
    ``TFCluster.run(..., release_port=False)``) and set it to None, as
    TensorFlowOnSpark does; with no socket held it logs a warning and does
    nothing (tfos hands the port over when the program starts)."""
    sock = getattr(ctx, "tmp_socket", None)
    if sock is None:
        _log.warning("release_port() invoked with no bound socket")
        return
    _log.info("releasing the port held by %s", sock.getsockname())
    sock.close()
    ctx.tmp_socket = None


def export_saved_model(model, export_dir, is_chief=False):
    """:func:`tfos.compat.export_saved_model` (TFoS 2.2.5's TFNode version
    took a TF1 session and raised under TensorFlow 2)."""
    from . import compat
    return compat.export_saved_model(model, export_dir, is_chief)


def start_cluster_server(ctx, num_gpus=1, rdma=False):
    """Start this node's TensorFlow server and return ``(cluster, server)``:
    ``tf.train.ClusterSpec(ctx.cluster_spec)`` and a started
    ``tf.distribute.Server`` for ``ctx.job_name``/``ctx.task_index``, the
    return of TensorFlowOnSpark's function (which raised "DEPRECATED" under
    TensorFlow 2).

    GPUs first, as TFoS did: with GPUs on the host and ``num_gpus > 0`` (ps
    nodes take none) the node takes ``num_gpus`` of them through
    :func:`tfos.gpu_info.get_gpus` (Spark's GPU resources when it has some,
    never a GPU another node on this host holds) and sets
    ``CUDA_VISIBLE_DEVICES``; otherwise ``CUDA_VISIBLE_DEVICES`` is empty.
    ``rdma=True`` (gRPC over ibverbs) is refused: TensorFlow 2 has no such
    protocol."""
    if rdma:
        raise ValueError("start_cluster_server(rdma=True): TensorFlow 2 has no grpc+verbs protocol; "
                         "use rdma=False (gRPC), or a collective implementation through tf.distribute")
    from . import gpu_info
    spec = ctx.cluster_spec
    if num_gpus > 0 and ctx.job_name != "ps" and gpu_info.is_gpu_available():
        my_addr = spec[ctx.job_name][ctx.task_index]
        my_host = my_addr.split(":")[0]
        local_peers = [a for addrs in spec.values() for a in addrs if a.split(":")[0] == my_host]
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_info.get_gpus(num_gpus, local_peers.index(my_addr))
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import tensorflow as tf
    cluster = tf.train.ClusterSpec(spec)
    server = tf.distribute.Server(cluster, job_name=ctx.job_name, task_index=ctx.task_index, start=True)
    return cluster, server
