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
import time
import uuid

from . import _payload, _tfos
from . import feed as _feed
from ._launch import ClusterError
from ._log import log as logger
from ._spark import session as _session
from ._spark.driver import failure_text
from ._spark.driver import short as _short
from ._spark.nodes import NodeSpec

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
    ``tensorboard_log_dir``; see :meth:`tensorboard_url`).
    ``lease_timeout``: seconds after which a cluster whose client has
    stopped asking is stopped.
    """

    def __init__(self, spark, main_fun, args=None, num_nodes=2, *, chief=False,
                 feed_mb=_DEFAULTS["feed_mb"], reservation_timeout=_DEFAULTS["reservation_timeout_spark"],
                 heartbeat_timeout=_DEFAULTS["heartbeat_timeout"], grace=_DEFAULTS["stop_grace"],
                 failure_grace=_DEFAULTS["failure_grace"],
                 node_log_dir="tfos-logs", checkpoint_dir=None, keras="auto", lease_timeout=_DEFAULTS["lease_timeout"],
                 max_restarts=_DEFAULTS["max_restarts"], tensorboard=False, tensorboard_log_dir=None):
        from ._extras import require
        require("tfos.spark.Cluster", "pyspark", "pyarrow", "numpy")
        if int(num_nodes) < 1:
            raise ValueError("Cluster: num_nodes must be at least 1, got %r" % (num_nodes,))
        if not isinstance(keras, str) or not _tfos.keras_mode_valid(keras):
            raise ValueError("Cluster: keras=%r: use 'auto', 'legacy', '3' or 'env' (see TFCluster.run)" % (keras,))
        if float(lease_timeout) < 5:
            raise ValueError("Cluster: lease_timeout must be at least 5 seconds, got %r" % (lease_timeout,))
        self.spark = spark
        self.num_nodes = int(num_nodes)
        self.lease_timeout = float(lease_timeout)
        self.cluster_id = uuid.uuid4().hex[:12]
        layout = {"num_ps": 0, "num_workers": self.num_nodes - int(bool(chief)), "chief": bool(chief),
                  "evaluator": False}
        try:
            local = spark.conf.get("spark.master", "").startswith("local")
        except Exception:
            local = False
        if checkpoint_dir is None:
            checkpoint_dir = os.path.abspath(os.path.join("tfos-checkpoints", self.cluster_id))
        self.checkpoint_dir = checkpoint_dir
        self.spec = NodeSpec(self.cluster_id, _tfos.random_secret(), None, layout, 1,
                             _payload.dumps((main_fun, args)), local, float(reservation_timeout),
                             feed_mb=int(feed_mb), log_dir=node_log_dir, heartbeat_timeout=float(heartbeat_timeout),
                             spark_ids=list(range(self.num_nodes)), checkpoint_dir=checkpoint_dir, keras=keras,
                             tensorboard=bool(tensorboard), tb_logdir=tensorboard_log_dir)
        self.spec.grace = float(grace)
        self.spec.failure_grace = float(failure_grace)
        # the one restart policy (libtfos), applied here: each attempt has a
        # coordinator of its own, started by its node stage
        self.policy = _tfos.RestartPolicy(max(0, int(max_restarts)))
        self.spec.max_restarts = self.policy.max_restarts
        self.partitions_refed = 0  # partitions fed again after a node failure
        self.nodes = []           # the node stage's rows: executor_id, host, coord, pid
        self._stop_keepalive = threading.Event()
        self._keepalive = None
        self._closed = False

    @property
    def attempt(self):
        """The current attempt (1 for the first), as the policy counts it."""
        return self.policy.attempt

    # -- forming
    def start(self):
        """Form the cluster (one barrier stage); returns self. Raises
        ClusterError naming the node that could not start."""
        self._form()
        self._keepalive = threading.Thread(target=self._renew, name="tfos-keepalive", daemon=True)
        self._keepalive.start()
        return self

    def _form(self):
        n = self.num_nodes
        self.spec.attempt = self.attempt
        self.spec.coord_addr = None
        stage = _session.node_stage(self.spec, self.lease_timeout, self.lease_timeout)
        t0 = time.monotonic()
        try:
            rows = self.spark.range(0, n, 1, n).mapInArrow(stage, _session.ddl(_session.NODE_FIELDS),
                                                           barrier=True).collect()
        except Exception as exc:
            raise ClusterError("the tfos cluster did not form: the Spark job that starts its %d nodes failed: %s"
                               % (n, _short(exc)), 1, None) from exc
        rows = sorted((r.asDict() for r in rows), key=lambda r: r["executor_id"])
        self.nodes = rows
        if rows and rows[0]["coord"]:
            self.spec.coord_addr = rows[0]["coord"]
        errors = [r["error"] for r in rows if r["error"]]
        if errors or not self.spec.coord_addr:
            if self.spec.coord_addr:
                self._stop_quietly("the cluster did not form")
            raise ClusterError("the tfos cluster did not form: %s" % "; ".join(errors or ["no coordinator"]), 1, None)
        st = self._wait_state(("running", "done", "failed"), self.spec.reservation_timeout + 10)
        if st["state"] == "failed":
            self._finish(st)
        logger.info("cluster %s attempt %d formed in %.1f s: %d nodes on %s; coordinator at %s, checkpoints in %s",
                    self.cluster_id, self.attempt, time.monotonic() - t0, n,
                    ", ".join(sorted({r["host"] for r in rows})), self.spec.coord_addr, self.checkpoint_dir)

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
        stage = _session.query_stage(self.spec, command, reason)
        row = self.spark.range(0, 1, 1, 1).mapInArrow(stage, _session.ddl(_session.QUERY_FIELDS)).collect()[0]
        if row["error"]:
            raise ClusterError("the cluster's coordinator at %s cannot be reached: %s" % (self.spec.coord_addr,
                                                                                           row["error"]), 1, None)
        return json.loads(row["status"])

    def _renew(self):
        interval = self.lease_timeout / 4.0
        while not self._stop_keepalive.wait(interval):
            try:
                st = self._query()
            except Exception as exc:  # the session is gone, or the cluster is over
                logger.debug("tfos keepalive: %s", exc)
                continue
            if st.get("state") in ("done", "failed"):
                return

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

    def _wait_state(self, states, timeout):
        deadline = time.monotonic() + timeout
        while True:
            st = self._query()
            if st.get("state") in states:
                return st
            if time.monotonic() >= deadline:
                return st
            time.sleep(0.5)

    def _finish(self, st):
        """The cluster is over: let the coordinator go, raise its failure."""
        self._closed = True
        self._stop_keepalive.set()
        try:
            self._query("release")
        except Exception:
            pass
        if st.get("state") == "failed":
            raise ClusterError(failure_text(self.policy, st.get("failure")), 1, None)

    def _restart_or_raise(self, failure):
        """This attempt failed: form the cluster again when the restart
        policy says so (a new coordinator, attempt + 1), else raise."""
        st = self._wait_state(("done", "failed"), self.spec.grace + 60)
        st["failure"] = st.get("failure") or failure
        st["state"] = "failed"
        cause = getattr(_tfos, "CAUSE_" + str(st.get("cause", "")).upper(), _tfos.CAUSE_EXIT)
        progress = ""
        if os.path.isdir(self.checkpoint_dir):  # where the client sees it
            progress = _tfos.checkpoint_progress(self.checkpoint_dir)
        if self.policy.decide(cause, summary=st["failure"].splitlines()[0], progress=progress) != _tfos.RESTART:
            self._finish(st)
        try:
            self._query("release")
        except ClusterError:
            pass
        logger.warning("%s; re-forming the cluster (attempt %d of %d)", st["failure"].splitlines()[0],
                       self.attempt, self.policy.max_restarts + 1)
        self._form()

    def _failure(self, wait=10.0):
        """The cluster's failure text, once the coordinator has it (a feed
        task sees a dead node a moment before the node's agent says why)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                st = self._query()
            except ClusterError as exc:
                return str(exc)
            if st.get("failure") or st.get("state") in ("done", "failed") or time.monotonic() >= deadline:
                return st.get("failure")
            time.sleep(0.5)

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
        delivered, not_wanted, offsets = set(), set(), {}
        fed, started, t0 = 0, time.time(), time.monotonic()
        while True:
            stage = _session.feed_stage(self.spec, float(feed_timeout), self.lease_timeout, delivered, offsets)
            rows, job_error = [], None
            try:
                rows = data.mapInArrow(stage, _session.ddl(_session.FEED_FIELDS)).collect()
            except Exception as exc:
                job_error = exc
            for r in rows:
                if r["state"] in ("done", "terminated"):
                    delivered.add(r["partition"])
                    fed += r["rows"]
                if r["state"] == "terminated":
                    not_wanted.add(r["partition"])
            lost = [r for r in rows if r["state"] in ("aborted", "skipped")]
            if job_error is None and not lost:
                break
            failure = self._failure()
            if not failure:
                raise ClusterError("feeding the cluster failed: %s" % (
                    _short(job_error) if job_error is not None else lost[0]["info"]), 1, None) from job_error
            self._restart_or_raise(failure)
            # where the surviving checkpoint stands: the partitions its feed
            # position records are not fed again (else at-least-once)
            positions = _feed.read_positions(self.checkpoint_dir, since=started)
            if positions is not None:
                whole, offsets = positions
                delivered = set(whole) | not_wanted
            aborted = sum(1 for r in lost if r["state"] == "aborted")
            self.partitions_refed += aborted
            logger.warning("attempt %d: feeding again the partitions not delivered before the failure (%d were "
                           "in flight)", self.attempt, aborted)
        secs = time.monotonic() - t0
        logger.info("fed %d rows in %.1f s (%.0f rows/s)", fed, secs, fed / secs if secs > 0 else 0.0)
        return fed

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
        if self._closed:
            return
        try:
            self._query("end_feed")
            st = self._wait_state(("done", "failed"), timeout)
        except BaseException:
            self._stop_quietly("shutdown failed")
            raise
        if st.get("state") not in ("done", "failed"):
            self._stop_quietly("shutdown timed out after %g s" % timeout)
            raise ClusterError("shutdown timed out after %g s; the cluster was stopped" % timeout, 124, None)
        self._finish(st)

    def stop(self, reason="stopped by the client"):
        """Stop every node now (SIGTERM, then SIGKILL after ``grace``)."""
        if not self._closed:
            self._stop_quietly(reason)

    def _stop_quietly(self, reason):
        self._closed = True
        self._stop_keepalive.set()
        try:
            self._query("stop", reason)
            self._wait_state(("done", "failed"), self.spec.grace + 30)
            self._query("release")
        except Exception as exc:
            logger.warning("stopping the cluster: %s (it stops by itself within %g s: its lease runs out)",
                           _short(exc, 300), self.lease_timeout)

