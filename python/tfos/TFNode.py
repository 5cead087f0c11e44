"""The node's view of its cluster, with TensorFlowOnSpark's names.

A program started by tfos (``tfos run``, or a Spark node task) finds its
context in its environment: TF_CONFIG plus the TFOS_* variables the node agent
sets. :func:`get_context` turns them into an object with the fields a
TensorFlowOnSpark ``map_fun`` receives as ``ctx``.
"""
import getpass
import json
import os
import re

from .feed import DataFeed  # noqa: F401  (TFoS: TFNode.DataFeed)

__all__ = ["NodeContext", "get_context", "hdfs_path", "DataFeed"]


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
        ring = getattr(self, "_beat_ring", None)
        if ring is None:
            fds = os.environ.get("TFOS_FEED_FDS")
            if not fds:
                return
            from . import _tfos
            ring = self._beat_ring = _tfos.Ring(int(fds.split(",")[0]), _tfos.ROLE_OBSERVER)
        ring.beat()

    def release_port(self):
        """Kept for TensorFlowOnSpark compatibility. tfos holds a node's port
        until its program starts and releases it at that moment, so there is
        nothing left to release: this does nothing."""
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
    return NodeContext(job_name=job,
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


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def hdfs_path(ctx, path):
    """A fully qualified URI for ``path``, as TensorFlowOnSpark resolves it.

    - A path with a scheme (``hdfs://``, ``viewfs://``, ``file://``, ``s3a://``,
      ``gs://``...) is returned unchanged.
    - An absolute path gets the default filesystem in front:
      ``/data/x`` -> ``hdfs://nn:8020/data/x``, or ``file:///data/x``.
    - A relative path is resolved against the user's home directory on HDFS
      (``hdfs://nn:8020/user/<user>/path``) or, on a local default filesystem,
      against the working directory (``file:///cwd/path``).
    """
    if _SCHEME.match(path):
        return path
    default_fs = ctx.defaultFS or "file://"
    if default_fs.startswith("file:"):
        if path.startswith("/"):
            return "file://" + path
        working = ctx.working_dir or os.getcwd()
        return "file://%s/%s" % (working.rstrip("/"), path)
    default_fs = default_fs.rstrip("/")
    if path.startswith("/"):
        return default_fs + path
    if default_fs.startswith(("hdfs://", "viewfs://")):
        return "%s/user/%s/%s" % (default_fs, getpass.getuser(), path)
    return "%s/%s" % (default_fs, path)
