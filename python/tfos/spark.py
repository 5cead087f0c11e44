"""A tfos cluster driven through a SparkSession only: the same on classic
Spark and on Spark Connect, where the client has no SparkContext, no RDDs
and no accumulators, and the executors may not reach the client at all.

    from tfos.spark import Cluster

    with Cluster(spark, main_fun, args, num_nodes=2) as cluster:
        cluster.train(df, epochs=5)            # DataFrame -> the nodes' feeds
    # leaving the block ends the feed and waits for main_fun to return

    with Cluster(spark, predict_fun, args, num_nodes=2) as cluster:
        preds = cluster.predict(df_test, "prediction long")   # df_test's rows + the column

``main_fun(args, ctx)`` is a TensorFlowOnSpark map_fun, as for
``TFCluster.run(..., input_mode=InputMode.SPARK)``: it reads its feed with
``ctx.get_data_feed()`` (or ``tfos.feed``), and a predicting one answers
each batch with ``feed.batch_results``. Everything the client does is a
Spark job over a DataFrame (``mapInArrow``; the stage that forms the cluster
is a barrier stage), so its results carry every outcome back: the node that
failed and its traceback, the coordinator's status. The coordinator runs on
the host of the first node, started by that node's task; the client holds a
lease on it that its jobs renew (a small job every ``lease_timeout / 4``
seconds while nothing else runs): when the client is gone, the cluster
stops itself within ``lease_timeout`` seconds. See docs/SPARK.md, "Spark
Connect".
"""
import json
import os
import threading
import uuid

from . import _payload, _tfos
from ._extras import spark_extra
from ._launch import ClusterError
from ._log import log as logger
from ._spark import session as _session
from ._spark.attempts import (AttemptController, FeedRound, State, elastic_bounds, feed_until_delivered, open_tracker,
                              tracker_env)
from ._spark.client import SessionEngine
from ._spark.progress import JobProgress, Ticker
from ._spark.nodes import NodeSpec, master_kind
from ._spark.wait import WaitTimeout

__all__ = ["Cluster", "ClusterError"]

_DEFAULTS = _tfos.DEFAULTS


class Cluster(object):
    """``num_nodes`` tfos nodes, one per Spark executor, running
    ``main_fun(args, ctx)`` and fed from DataFrames.

    The Spark application must have exactly ``num_nodes`` executors, each
    running one task at a time (``spark.executor.cores`` equal to
    ``spark.task.cpus``; no dynamic allocation): a partition is fed to the
    node on the executor that computes it. Options as for ``TFCluster.run``:
    ``chief`` (the first node is the chief), ``feed_mb``,
    ``reservation_timeout``, ``heartbeat_timeout``, ``grace``, ``failure_grace``,
    ``node_log_dir``, ``checkpoint_dir`` (default:
    ``tfos-checkpoints/<cluster id>`` under the client's working directory,
    which the executors must see), ``keras``, ``max_restarts`` (default 3:
    a failed node forms the cluster again and ``train()`` resumes the feed),
    ``tensorboard`` (TensorBoard on the chief, or worker 0, serving
    ``tensorboard_log_dir``; see :meth:`tensorboard_url`), ``framework``
    (``"torch"`` or ``"jax"``: each node is sent rank 0's address and its
    ranks, not every address).
    ``lease_timeout``: seconds after which a cluster whose client has
    stopped asking is stopped. ``show_output``: print every node's output
    on this client's stdout, each line with its node's name (``[worker:1]
    ...``), read from the nodes' log files while the client waits; default:
    on a Spark Connect session and on a classic one whose executors are not
    in this process (a local master's already print here). ``quiet``: no
    progress lines while the client waits (feeding, forming, finishing).
    ``mlflow``: the http(s):// URI of an MLflow tracking server; the job,
    restarts included, is one MLflow run there (``mlflow_experiment``,
    ``mlflow_run_name``), as with TFCluster.run (docs/MODELS.md,
    "Tracking"); the nodes' reports are sampled each time the client looks
    at the cluster. ``min_nodes`` (an elastic size, workers only; below
    ``num_nodes``, which is then the largest size, as ``max_nodes`` may
    repeat): a node lost with its executor restarts the cluster (one restart
    of ``max_restarts``) on the executors there are within ``elastic_wait``
    seconds, not fewer than ``min_nodes``; while ``train()`` feeds a smaller
    cluster, a feed task that runs on an executor with no node asks for a
    drain (every node checkpoints at one step and ends), and the cluster
    forms again on every executor there is, a resize that spends no restart.
    The client cannot list executors over Spark Connect: a probe job of a few
    0.3 s tasks for each node counts those that run its tasks.
    """

    def __init__(self, spark, main_fun, args=None, num_nodes=2, *, chief=False,
                 feed_mb=_DEFAULTS["feed_mb"], reservation_timeout=_DEFAULTS["reservation_timeout_spark"],
                 heartbeat_timeout=_DEFAULTS["heartbeat_timeout"], grace=_DEFAULTS["stop_grace"],
                 failure_grace=_DEFAULTS["failure_grace"],
                 node_log_dir="tfos-logs", checkpoint_dir=None, keras="auto", lease_timeout=_DEFAULTS["lease_timeout"],
                 max_restarts=_DEFAULTS["max_restarts"], tensorboard=False, tensorboard_log_dir=None,
                 show_output=None, quiet=False, mlflow=None, mlflow_experiment=None, mlflow_run_name=None,
                 framework="tf", min_nodes=None, max_nodes=None, elastic_wait=30.0):
        from ._extras import require
        # a Spark Connect client is told tfos[connect], a classic driver tfos[spark]
        require("tfos.spark.Cluster", "pyspark", "pyarrow", "numpy", extra=spark_extra(spark))
        if int(num_nodes) < 1:
            raise ValueError("Cluster: num_nodes must be at least 1, got %r" % (num_nodes,))
        if not isinstance(keras, str) or not _tfos.keras_mode_valid(keras):
            raise ValueError("Cluster: keras=%r: use 'auto', 'legacy', '3' or 'env' (see TFCluster.run)" % (keras,))
        if framework not in ("tf", "torch", "jax"):
            raise ValueError("Cluster: framework=%r: use 'tf', 'torch' or 'jax'" % (framework,))
        if float(lease_timeout) < 5:
            raise ValueError("Cluster: lease_timeout must be at least 5 seconds, got %r" % (lease_timeout,))
        self.spark = spark
        self.num_nodes = int(num_nodes)
        self.lease_timeout = float(lease_timeout)
        self.cluster_id = uuid.uuid4().hex[:12]
        layout = {"num_ps": 0, "num_workers": self.num_nodes - int(bool(chief)), "chief": bool(chief),
                  "evaluator": False}
        try:
            local = master_kind(spark.conf.get("spark.master", "")) == "local"
        except Exception:
            local = False
        elastic = elastic_bounds(layout, self.num_nodes, min_nodes, max_nodes, elastic_wait, local, False,
                                 lambda text: ValueError("Cluster: %s" % text), "num_nodes")
        if checkpoint_dir is None:
            checkpoint_dir = os.path.abspath(os.path.join("tfos-checkpoints", self.cluster_id))
        self.checkpoint_dir = checkpoint_dir
        self.spec = NodeSpec(self.cluster_id, _tfos.random_secret(), None, layout, 1,
                             _payload.dumps((main_fun, args)), local, float(reservation_timeout),
                             feed_mb=int(feed_mb), log_dir=node_log_dir, heartbeat_timeout=float(heartbeat_timeout),
                             spark_ids=list(range(self.num_nodes)), checkpoint_dir=checkpoint_dir, keras=keras,
                             tensorboard=bool(tensorboard), tb_logdir=tensorboard_log_dir)
        tracker = open_tracker(mlflow, mlflow_experiment, mlflow_run_name or "tfos-spark-%s" % self.cluster_id,
                               {"num_nodes": self.num_nodes, "chief": bool(chief), "max_restarts": max_restarts,
                                "feed_mb": feed_mb, "heartbeat_timeout": heartbeat_timeout,
                                "min_nodes": elastic["min_nodes"] if elastic else self.num_nodes},
                               {"tfos.cluster_id": self.cluster_id, "tfos.backend": "spark"})
        self.spec.env = tracker_env(tracker)
        self.spec.grace = float(grace)
        self.spec.failure_grace = float(failure_grace)
        self.spec.framework = framework
        # the one restart policy (libtfos), asked by the attempt loop: each
        # attempt has a coordinator of its own, started by its node stage
        self.policy = _tfos.RestartPolicy(max(0, int(max_restarts)))
        self.spec.max_restarts = self.policy.max_restarts
        if show_output is None:
            show_output = spark_extra(spark) == "connect" or not local
        self.quiet = bool(quiet)
        self._engine = SessionEngine(spark, self.spec, self.num_nodes, self.lease_timeout, checkpoint_dir,
                                     output=show_output)
        self._engine.tracker = tracker
        if elastic is not None:
            elastic["layout"] = dict(layout)
            self._engine.elastic = elastic
            self.spec.elastic = True  # a feed task on an executor with no node: fed again, not an error
        self._attempts = AttemptController(self._engine, self.policy, name="cluster %s" % self.cluster_id,
                                           tracker=tracker)
        self._stop_keepalive = threading.Event()
        self._keepalive = None
        # programs that read no feed (TorchDistributor.run over Connect): an
        # elastic cluster below its size grows from the keepalive's look
        self.grow_unfed = False

    @property
    def attempt(self):
        """The current attempt (1 for the first), as the policy counts it."""
        return self.policy.attempt

    @property
    def nodes(self):
        """The node stage's rows of the current attempt: executor_id, host,
        coord, pid, error."""
        return self._engine.nodes

    @property
    def partitions_refed(self):
        """Partitions fed again after a node failure (those in flight)."""
        return self._attempts.partitions_refed

    @property
    def _closed(self):
        return self._attempts.state in (State.DONE, State.FAILED)

    # -- forming
    def start(self):
        """Form the cluster (one barrier stage); returns self. Raises
        ClusterError naming the node that could not start."""
        try:
            self._attempts.start()
        finally:
            if self._closed:
                self._stop_keepalive.set()
        self._keepalive = threading.Thread(target=self._renew, name="tfos-keepalive", daemon=True)
        self._keepalive.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.shutdown()
        else:
            self.stop("the client's block raised %s" % exc_type.__name__)
        return False

    # -- the coordinator, through Spark jobs
    def _query(self, command=None, reason=None):
        """The coordinator's status (a dict) after ``command``; raises
        ClusterError when it cannot be reached."""
        return self._engine.query(command, reason)

    def _renew(self):
        """The lease: a small job every ``lease_timeout / 4`` seconds (a
        timer, woken early when the cluster ends); every GROW_LOOK_S
        seconds while an elastic cluster of unfed programs is small."""
        over = None  # the coordinator of an attempt seen ended: not asked again
        while not self._stop_keepalive.wait(self._keepalive_interval()):
            if self._closed:
                return
            addr = self._engine.spec.coord_addr
            if addr is None or addr == over:
                continue
            try:
                st = self._query()
            except Exception as exc:  # the session is gone, or the cluster is over
                logger.debug("tfos keepalive: %s", exc)
                continue
            if st.get("state") in ("done", "failed"):
                # another attempt may follow (a restart, a resize), with its
                # own coordinator: the thread ends with the cluster
                over = addr
            elif self.grow_unfed and st.get("state") == "running" and not st.get("drain"):
                self._grow_if_capacity()

    #: seconds between two looks for capacity come back (grow_unfed)
    GROW_LOOK_S = 5.0

    def _keepalive_interval(self):
        if self.grow_unfed and self._engine.below_size:
            return min(self.lease_timeout / 4.0, self.GROW_LOOK_S)
        return self.lease_timeout / 4.0

    def _grow_if_capacity(self):
        """An elastic cluster below its size whose programs read no feed:
        when more executors run tasks than it has nodes, ask for the drain
        that forms it again on all of them (a feed's tasks ask it
        themselves: feeding._ask_to_grow)."""
        eng = self._engine
        el = eng.elastic
        if not eng.below_size:
            return
        try:
            have = eng.usable_executors()
            if have > eng.size:
                reason = "%d Spark executors run tasks for %d of %d nodes: growing to %d" % (
                    have, eng.size, el["max_nodes"], min(have, el["max"]))
                logger.warning("%s: draining the cluster (every node checkpoints at one step and ends; the next "
                               "attempt forms at the larger size)", reason)
                self._query("drain", reason)
        except Exception as exc:  # the session or the cluster is going: the next look tries again
            logger.debug("tfos keepalive: looking for capacity: %s", exc)

    def tensorboard_url(self):
        """``http://HOST:PORT`` of the TensorBoard that ``tensorboard=True``
        started (where it listens on the cluster: the client may or may not
        reach it), or None. Still answers after the cluster ended."""
        url = getattr(self, "_tb_url", None)
        if url is not None or self._closed:
            return url
        for n in self._query().get("nodes", []):
            if n.get("tensorboard_port"):
                self._tb_url = "http://%s:%d" % (n["host"], n["tensorboard_port"])
                return self._tb_url
        return None

    def status(self):
        """The coordinator's view of every node (as the status page serves
        it: state, failure, nodes with their feed counters and reports)."""
        return self._query()

    def _check_open(self, what):
        if self._closed:
            raise ClusterError("Cluster.%s() after the cluster ended" % what, 1, None)
        if not self.spec.coord_addr:
            raise ClusterError("Cluster.%s() before start() (or use it as a context manager)" % what, 1, None)

    # -- feeding
    def train(self, df, epochs=1, feed_timeout=_DEFAULTS["feed_timeout"]):
        """Feed a DataFrame to the nodes, ``epochs`` times: each partition,
        as the Arrow record batches Spark hands over, goes to the node on
        the executor that computes it, and counts as delivered once that
        node's program has read it. Returns the number of rows fed. Raises
        ClusterError (the failed node, its exit status, its last lines) when
        a node fails."""
        self._check_open("train")
        data = df
        for _ in range(max(1, int(epochs)) - 1):
            data = data.union(df)

        def run_round(delivered, offsets):
            """One feed stage: every task returns its partition's outcome."""
            stage = _session.feed_stage(self.spec, float(feed_timeout), self.lease_timeout, delivered, offsets,
                                        self._engine.log_paths())
            job = JobProgress(self.spark)
            sizes = None  # a failed job or partition: the nodes' last lines are read whatever the sizes
            try:
                with job, Ticker(self._feed_line(job, len(delivered)), first=5.0, every=5.0, quiet=self.quiet):
                    rows = data.mapInArrow(stage, _session.ddl(_session.FEED_FIELDS)).collect()
                if all(r["state"] in ("done", "before") for r in rows):
                    sizes = {}
                    for r in rows:
                        for eid, size in json.loads(r["log_sizes"] or "{}").items():
                            sizes[int(eid)] = max(size, sizes.get(int(eid), 0))
            except Exception as exc:
                return FeedRound({}, exc)
            finally:
                self._engine.read_output(force=True, sizes=sizes)
            return FeedRound({r["partition"]: (r["state"], r["info"], r["rows"]) for r in rows}, None)

        try:
            fed = feed_until_delivered(self._attempts, run_round, self.checkpoint_dir)
        finally:
            if self._closed:
                self._stop_keepalive.set()
        return fed.rows

    def _feed_line(self, job, before):
        """The progress line of a feed job (a Ticker's): partitions delivered
        and tasks running as Spark Connect reports them, and, while none is
        delivered yet, that the programs are still starting."""
        attempt = self.attempt

        def line(secs):
            tasks = job.tasks()
            if tasks is None:  # a classic session reports no task counts: the job runs, that is all it knows
                return "feeding (attempt %d): %.0f s, its Spark job still running" % (attempt, secs)
            text = "feeding (attempt %d): %d/%d partitions delivered, %d being fed, %.0f s" % (
                attempt, tasks[0], tasks[1], tasks[2], secs)
            if tasks[0] - before <= 0:  # partitions delivered before are skipped at once
                text += ("; no partition delivered yet: the nodes' programs are still starting (importing their "
                         "framework) or have not read their first rows")
            return text

        return line

    def predict(self, df, schema="prediction double", feed_timeout=_DEFAULTS["feed_timeout"],
                results_timeout=_DEFAULTS["results_timeout"]):
        """A DataFrame of ``df``'s rows, each with the nodes' result for it
        appended as the columns of ``schema`` (a DDL string such as
        ``"prediction long"`` or ``"label long, score double"``; with more
        than one column, each result is a tuple or a dict). Lazy, as any
        DataFrame: the nodes answer when it is computed. One result per row,
        in order: the program answers every batch with
        ``feed.batch_results``. ``results_timeout``: as for
        ``TFCluster.inference``."""
        self._check_open("predict")
        extra = self.spark.createDataFrame([], schema).schema
        clash = [f.name for f in extra.fields if f.name in df.columns]
        if clash:
            raise ValueError("Cluster.predict: the result column(s) %s are already in the DataFrame; name them "
                             "otherwise in schema=" % ", ".join(clash))
        from pyspark.sql.types import StructType
        out = StructType(list(df.schema.fields) + list(extra.fields))
        rt = None if results_timeout is None else float(results_timeout)
        stage = _session.predict_stage(self.spec, float(feed_timeout), rt,
                                       [(f.name, f.dataType) for f in extra.fields], self.lease_timeout)
        return df.mapInArrow(stage, out)

    # -- the end
    def shutdown(self, timeout=3600):
        """End the feed, wait (at most ``timeout`` seconds) until every
        program has returned, and let the coordinator go. Raises
        ClusterError when a node failed."""
        self._run_to_end(timeout, restart=False)

    def _run_to_end(self, timeout, restart):
        """shutdown(), and for TorchDistributor.run over Spark Connect (whose
        ranks read no feed) with ``restart``: a failure re-forms the cluster
        while the restart policy allows."""
        if self._closed:
            return
        try:
            self._engine.end_feed()
            with Ticker(self._finish_line, first=5.0, every=10.0, quiet=self.quiet):
                self._attempts.finish(timeout, restart=restart)
        except WaitTimeout:
            self._attempts.abort("shutdown timed out after %g s" % timeout, ClusterError(
                "shutdown timed out after %g s; the cluster was stopped" % timeout, 124, None))
            self._attempts.check()
        except BaseException:
            self._attempts.abort("shutdown failed")
            raise
        finally:
            self._stop_keepalive.set()

    def _finish_line(self, secs):
        """The line while shutdown() waits for the programs: which still run."""
        st = self._engine.last or {}
        running = ["%s:%s" % (nd.get("job"), nd.get("index")) for nd in st.get("nodes", [])
                   if nd.get("state") not in ("exited", "waiting")]
        if not running:
            return None
        return "cluster %s (attempt %d): waiting for its programs to finish, %.0f s: %s still running" % (
            self.cluster_id, self.attempt, secs, ", ".join(running))

    def stop(self, reason="stopped by the client"):
        """Stop every node now (SIGTERM, then SIGKILL after ``grace``)."""
        if not self._closed:
            self._attempts.abort(reason)
        self._stop_keepalive.set()
