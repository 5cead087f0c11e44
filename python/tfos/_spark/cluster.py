"""TensorFlowOnSpark's TFCluster on tfos's runtime: run() and the TFCluster
object it returns (attempts and restarts, train/inference feeding jobs,
shutdown). tfos.TFCluster re-exports it under TensorFlowOnSpark's name; see
that module for how it differs from TensorFlowOnSpark."""
import os
import threading
import time
import uuid

from .. import _payload, _tfos
from .._log import log as logger  # the "tfos" logger; see tfos/_log.py
from .attempts import (AttemptController, FeedRound, State, elastic_bounds, feed_until_delivered, failure_text,
                       open_tracker, tracker_env)
from .driver import (DriverEngine, TFClusterError, _bind_host, _check_executors, _Outcomes, _Progress, short)
from .feeding import feed_task, feed_task_arrow, inference_task, pickled_batches
from .nodes import NodeSpec, master_kind
from .wait import LOCAL, WaitTimeout, wait_until

_DEFAULTS = _tfos.DEFAULTS  # include/tfos/defaults.h

CANCEL_AFTER_S = 10.0  # a failed cluster's feeding job is cancelled after this


class InputMode(object):
    """How a cluster gets its data (TensorFlowOnSpark's constants)."""
    TENSORFLOW = 0  #: map_fun reads its own data
    SPARK = 1       #: Spark feeds RDD/DataFrame partitions to the nodes


class TFCluster(object):
    """A running cluster (returned by :func:`run`). Its attempts run
    through the attempt loop (attempts.py) over the driver engine
    (driver.py): the coordinator in this process."""

    def __init__(self, sc, spec, conf):
        self.sc = sc
        self.spec = spec
        self._conf = conf                 # how to form an attempt (see run())
        self.input_mode = conf["input_mode"]
        self.num_executors = conf["total"]
        self._terminated = sc.accumulator(0)
        self._shut = False
        # the one restart policy (libtfos): every attempt's coordinator
        # applies it when a node fails; the attempt loop acts on its decision
        self.policy = _tfos.RestartPolicy(conf["max_restarts"])
        self._engine = DriverEngine(sc, spec, conf)
        self._attempts = AttemptController(self._engine, self.policy, name="cluster %s" % spec.cluster_id,
                                           tracker=conf.get("tracker"))
        self.cluster_id = spec.cluster_id
        self.cluster_info = None
        self.cluster_meta = {"id": spec.cluster_id, "cluster_template": None, "num_executors": conf["total"],
                             "server_addr": spec.coord_addr}

    @property
    def driver(self):
        """The current attempt's coordinator and its loop thread (_Driver)."""
        return self._engine.driver

    @property
    def partitions_refed(self):
        """Partitions fed again after a node failure (those in flight)."""
        return self._attempts.partitions_refed

    @property
    def attempt(self):
        """The current attempt (1 for the first), as the policy counts it."""
        return self.policy.attempt

    @property
    def history(self):
        """One line per failed attempt (the policy's history, rendered by
        libtfos); ``self.policy.history`` has them as dicts."""
        return self.policy.render().splitlines()

    def _failure_text(self, failure, context=""):
        return failure_text(self.policy, failure, context)

    # -- state
    def _raise_if_failed(self, cause=None):
        if self.driver.closed:
            return
        if self.driver.failed():
            raise TFClusterError(self._failure_text(self.driver.failure())) from cause

    def status_url(self):
        """The status page's URL (``http://127.0.0.1:PORT/``: /status,
        /metrics, /feed/history and the live page), or None without one
        (``run(..., status_port=-1)``)."""
        port = self._conf.get("status_port", -1)
        return "http://127.0.0.1:%d/" % port if port is not None and port > 0 else None

    def status(self):
        """The coordinator's view of every node (a dict, as /status serves
        it), plus ``history`` (one line per failed attempt) and
        ``partitions_refed``."""
        st = self.driver.status()
        st["history"] = self.history
        st["attempts"] = self.policy.history
        st["partitions_refed"] = self.partitions_refed
        return st

    def _run_job(self, what, fn):
        """Run a Spark job; cancel it when the cluster fails meanwhile, and
        raise the cluster's failure rather than the task errors it caused."""
        group = "tfos-%s-%s" % (self.cluster_id, uuid.uuid4().hex[:8])
        self.sc.setJobGroup(group, "tfos %s" % what, interruptOnCancel=True)
        done = threading.Event()

        def watch():
            # Tasks feeding a failed node fail by themselves within moments,
            # saying which node died and why; tasks blocked elsewhere are
            # cancelled a little later.
            failed_at = None
            while not done.wait(0.5):
                try:
                    if failed_at is None and self.driver.failed():
                        failed_at = time.monotonic()
                    if failed_at is not None and time.monotonic() - failed_at >= CANCEL_AFTER_S:
                        self.sc.cancelJobGroup(group)
                        return
                except TFClusterError:
                    return

        watcher = threading.Thread(target=watch, name="tfos-watch", daemon=True)
        watcher.start()
        try:
            return fn()
        except Exception as exc:
            self._raise_if_failed(exc)
            raise
        finally:
            done.set()
            watcher.join()
            self.sc.setLocalProperty("spark.jobGroup.id", None)
            self.sc.setLocalProperty("spark.job.description", None)
            self.sc.setLocalProperty("spark.job.interruptOnCancel", None)

    # -- InputMode.SPARK
    def _check_spark_mode(self, what):
        if self.input_mode != InputMode.SPARK:
            raise TFClusterError("cluster.%s() needs TFCluster.run(..., input_mode=InputMode.SPARK)" % what)
        if self._shut:
            raise TFClusterError("cluster.%s() after shutdown()" % what)
        self._attempts.recover_if_failed()

    def train(self, dataRDD, num_epochs=0, feed_timeout=_DEFAULTS["feed_timeout"], qname="input"):
        """Feed an RDD (or a DataFrame, through Arrow; or a DStream, batch by
        batch) to the nodes, ``num_epochs`` times (0 or 1: once). Partitions
        go to the node on the executor that computes them. A partition counts
        as delivered once its node has read it; when a node fails, the cluster
        is formed again (``max_restarts``) and every partition not delivered
        is fed again (at-least-once; ``partitions_refed`` counts those that
        were in flight)."""
        self._check_spark_mode("train")
        epochs = max(1, int(num_epochs or 1))
        spec = self.spec
        if _is_dstream(dataRDD):
            acc = self._terminated

            def feed_ended():
                """A chief/worker whose map_fun returned: its feed is over
                (its agent is gone, so feed tasks on its executor would find
                no node). As with TFoS, the stream is then not wanted any
                more: shutdown(ssc) stops the streaming context."""
                try:
                    return any(n["state"] == "exited" and n["exit_code"] == 0 and n["job"] in ("chief", "worker")
                               for n in self.driver.status()["nodes"])
                except TFClusterError:  # shut down meanwhile
                    return True

            def each(rdd):
                # runs on the driver, once per micro-batch (pyspark hands an
                # empty one-partition RDD once a queueStream runs dry)
                if self._shut or self.driver.closed:
                    return
                if feed_ended():
                    acc.add(1)
                    return
                outcomes = self.sc.accumulator({}, _Outcomes())
                try:
                    batches = pickled_batches(rdd)
                    (rdd if batches is None else batches).mapPartitionsWithIndex(
                        feed_task(spec, feed_timeout, outcomes, pickled=batches is not None)).count()
                except Exception:
                    # a node finished while this batch was being fed: its
                    # partitions found no node there; not an error
                    if self.driver.closed or self.driver.failed() or not feed_ended():
                        raise
                    acc.add(1)
                    logger.info("a streaming batch was not fed: a node had finished its feed")
                    return
                res = outcomes.value
                acc.add(sum(1 for st, _ in res.values() if st == "terminated"))
                lost = [info for st, info in res.values() if st in ("aborted", "skipped")]
                if lost:
                    raise TFClusterError(self._failure_text(self.driver.failure() or lost[0]))

            dataRDD.foreachRDD(each)
            return
        if _is_dataframe(dataRDD):
            data = dataRDD
            for _ in range(epochs - 1):
                data = data.union(dataRDD)
            total = data.rdd.getNumPartitions()
        else:
            data = dataRDD if epochs == 1 else self.sc.union([dataRDD] * epochs)
            total = data.getNumPartitions()
        batches = None if _is_dataframe(data) else pickled_batches(data)  # where Spark holds the rows pickled
        fed = data if batches is None else batches  # (the batches are passed on whole)

        def run_round(delivered, offsets):
            """One feeding job (the attempt loop's round): partitions in
            ``delivered`` are skipped, of those in ``offsets`` the first
            rows; the outcomes come back in an accumulator."""
            outcomes = self.sc.accumulator({}, _Outcomes())
            progress = _Progress(total, len(delivered), outcomes, self.attempt, self.driver,
                                 quiet=self._conf.get("quiet", False))
            job_error = None
            try:
                if _is_dataframe(data):
                    fn = feed_task_arrow(spec, feed_timeout, outcomes, delivered, offsets, total)
                    self._run_job("train", lambda: data.mapInArrow(fn, "rows long").collect())
                else:
                    fn = feed_task(spec, feed_timeout, outcomes, delivered, offsets, total, pickled=batches is not None)
                    self._run_job("train", lambda: fed.mapPartitionsWithIndex(fn).count())
            except TFClusterError as exc:  # the cluster failed (a node's failure, not the tasks' errors)
                job_error = exc
            finally:
                progress.stop()
            return FeedRound({part: (state, info, info if state == "done" and isinstance(info, int) else 0)
                              for part, (state, info) in outcomes.value.items()}, job_error)

        # an elastic cluster grows (a drain) only while it is fed: a drain
        # after the feed would end the programs before their own end
        self._engine.grow_allowed = True
        try:
            fed = feed_until_delivered(self._attempts, run_round, spec.checkpoint_dir, total)
        finally:
            self._engine.grow_allowed = False
        if fed.terminated:
            self._terminated.add(fed.terminated)

    def inference(self, dataRDD, feed_timeout=_DEFAULTS["feed_timeout"], qname="input", results_timeout=_DEFAULTS["results_timeout"]):
        """Feed an RDD (or a DataFrame, through Arrow) to the nodes and return
        an RDD of their results: exactly one per input row, in order (lazy,
        like any RDD: the feeding runs when it is computed).

        ``results_timeout`` (tfos's, default 60 s): once a node has read every
        row of a partition, the most seconds it may go without sending a
        result before the task fails with "worker:0 ... returned no results
        for partition P ... does map_fun call feed.batch_results()?" (a
        map_fun that never returns results would otherwise hold the task for
        the whole ``feed_timeout``). Raise it for a model that takes longer
        than that over one batch; ``None``: only ``feed_timeout``."""
        self._check_spark_mode("inference")
        spec = self.spec
        rt = None if results_timeout is None else float(results_timeout)
        from .results import with_results_serializer  # numpy results go as arrays (results.py)
        if _is_dataframe(dataRDD):
            import pickle
            fn = inference_task(spec, feed_timeout, arrow=True, results_timeout=rt)
            packed = dataRDD.mapInArrow(fn, "results binary").rdd
            return with_results_serializer(packed.flatMap(lambda row: pickle.loads(row[0])))
        batches = pickled_batches(dataRDD)  # Spark's pickled batches, passed on whole, where it holds them
        return with_results_serializer((dataRDD if batches is None else batches).mapPartitions(
            inference_task(spec, feed_timeout, results_timeout=rt, pickled=batches is not None)))

    # -- end
    def shutdown(self, ssc=None, grace_secs=0, timeout=259200):
        """End the feed, wait (at most ``timeout`` seconds) for every program
        to finish, stop the ps nodes, and raise :class:`TFClusterError` if a
        node failed. With ``ssc`` (a StreamingContext), first wait until the
        streaming context ends or a node calls ``terminate()``, then stop it."""
        if self._shut:
            return
        try:
            if ssc is not None:
                self._await_streaming(ssc)
            if self.input_mode == InputMode.SPARK and self._attempts.state is State.RUNNING:
                self._engine.end_feed()
            try:
                # InputMode.TENSORFLOW: map_fun reads its own data and resumes
                # from its checkpoint, so a failure forms the cluster again
                # while restarts are left; fed from Spark, the feed is over
                self._attempts.finish(timeout, restart=self.input_mode == InputMode.TENSORFLOW)
            except WaitTimeout:
                running = [n for n in self.driver.status()["nodes"] if n["state"] != "exited"]
                names = ", ".join("%s:%d" % (n["job"], n["index"]) for n in running)
                self._attempts.abort("shutdown timed out after %g s" % timeout, TFClusterError(
                    "shutdown timed out after %g s; still running: %s" % (timeout, names)))
                self._attempts.check()
        finally:
            self._shut = True
            self._close()

    def _await_streaming(self, ssc):
        """Wait until the streaming context ends, a node terminated its feed
        (a feed task found it terminated), or the cluster stopped running;
        then stop the streaming context (gracefully, unless the cluster
        failed). A failed streaming job (awaitTermination raises it) stops it
        too and is raised: as TFClusterError when the cluster failed."""
        def _stop_streaming(ssc, graceful):
            try:
                ssc.stop(stopSparkContext=False, stopGraceFully=graceful)
            except Exception as exc:
                logger.warning("stopping the StreamingContext failed: %s", short(exc, 500))

        try:
            while not ssc.awaitTerminationOrTimeout(1):
                if self._terminated.value or self.driver.state() != _tfos.STATE_RUNNING:
                    break
            else:
                return  # the streaming context ended by itself
        except Exception as exc:
            _stop_streaming(ssc, graceful=False)
            if isinstance(exc, TFClusterError) or self.driver.closed:
                raise
            # a feed task sees a dead node a moment before the coordinator
            # has recorded why
            try:
                wait_until(self.driver.failed, 5, "the coordinator to record the failure the stream saw", LOCAL)
            except WaitTimeout:
                pass
            self._raise_if_failed(exc)
            raise
        _stop_streaming(ssc, graceful=not self.driver.failed())

    def _close(self):
        self._engine.release()  # agents still connected lose their coordinator and stop
        if self._conf.get("token_publisher") is not None:
            self._conf["token_publisher"].stop()
        tracker = self._conf.get("tracker")
        if tracker is not None:  # ended with the attempt loop; KILLED if shut down before that
            tracker.close()

    def tensorboard_url(self):
        """URL of the TensorBoard started on the chief (or worker 0) with
        ``tensorboard=True``; None without one. Still answers after
        ``shutdown()`` (with the address it had), as TensorFlowOnSpark's did."""
        url = getattr(self, "_tb_url", None)
        if url is not None or self.driver.closed:
            return url
        try:
            nodes = self.driver.status()["nodes"]
        except TFClusterError:  # shut down meanwhile
            return getattr(self, "_tb_url", None)
        for n in nodes:
            if n.get("tensorboard_port"):
                self._tb_url = "http://%s:%d" % (n["host"], n["tensorboard_port"])
                return self._tb_url
        return None


def _is_dataframe(x):
    try:
        from pyspark.sql import DataFrame
    except ImportError:
        return False
    return isinstance(x, DataFrame)


def _is_dstream(x):
    try:
        from pyspark.streaming import DStream
    except ImportError:
        return False
    return isinstance(x, DStream)


def _hadoop_user(sc):
    """The user the driver's Hadoop client acts as: its JVM's (under
    Kerberos the principal's short name, which need not be this process's
    uid), else tfos.fs's rule (HADOOP_USER_NAME, else the uid's name)."""
    from ..fs import hadoop_user
    try:
        return str(sc._jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getShortUserName())
    except Exception:  # noqa: BLE001 (no JVM to ask: Spark Connect, a stand-in context)
        return hadoop_user()


def _layout(num_executors, num_ps, master_node, eval_node):
    chief = master_node is not None
    if master_node not in (None, "chief", "master"):
        raise TFClusterError("master_node=%r: tfos names the chief job 'chief' (TF_CONFIG's name); pass "
                             "master_node='chief'" % (master_node,))
    workers = num_executors - num_ps - int(chief) - int(bool(eval_node))
    if workers < 0 or num_executors < 1:
        raise TFClusterError("num_executors=%d is too small for num_ps=%d%s%s" % (
            num_executors, num_ps, ", a chief" if chief else "", ", an evaluator" if eval_node else ""))
    return {"num_ps": num_ps, "num_workers": workers, "chief": chief, "evaluator": bool(eval_node)}


def run(sc, map_fun, tf_args, num_executors, num_ps=0, tensorboard=False, input_mode=InputMode.TENSORFLOW,
        log_dir=None, driver_ps_nodes=False, master_node=None,
        reservation_timeout=_DEFAULTS["reservation_timeout_spark"], queues=("input", "output", "error"),
        eval_node=False, release_port=True, max_restarts=_DEFAULTS["max_restarts"], checkpoint_dir=None,
        feed_mb=_DEFAULTS["feed_mb"], heartbeat_timeout=_DEFAULTS["heartbeat_timeout"],
        grace=_DEFAULTS["stop_grace"], failure_grace=_DEFAULTS["failure_grace"], hang_timeout=0.0,
        drain_grace=None, min_nodes=None, max_nodes=None, elastic_wait=30.0, node_log_dir="tfos-logs",
        status_port=0, keras="auto", quiet=False, mlflow=None, mlflow_experiment=None, mlflow_run_name=None,
        framework="tf", resize_in_place=False, ready_timeout=30.0, grow_in_place=False):
    """Start a cluster of ``num_executors`` nodes (``num_ps`` of them parameter
    servers) running ``map_fun(tf_args, ctx)``, one per Spark executor, and
    return a :class:`TFCluster` once every node has registered; with
    InputMode.SPARK, also once every fed node's program reads its feed, for
    at most ``ready_timeout`` seconds (default 30; 0: return at
    registration, as TensorFlowOnSpark does; see docs/SPARK.md, "When run()
    returns").

    Roles follow TensorFlowOnSpark: ps first, then ``master_node`` ('chief'),
    then the evaluator (``eval_node``), then workers. ``log_dir`` is the
    TensorBoard log dir (``tensorboard=True`` starts TensorBoard on the chief,
    or worker 0). ``driver_ps_nodes`` runs the ps nodes on the driver instead
    of executors.

    tfos's own options: ``max_restarts`` (when a node fails, every node is
    stopped and the cluster formed again, up to this many times; programs see
    ``ctx.attempt`` and resume from ``ctx.checkpoint_dir``), ``checkpoint_dir``
    (kept across restarts; default ``tfos-checkpoints/<cluster id>`` under the
    driver's working directory, or the user's home on HDFS: it must be visible
    to every executor), ``feed_mb`` (input ring size per node),
    ``heartbeat_timeout``, ``grace`` (seconds between SIGTERM and SIGKILL when
    stopping), ``failure_grace`` (the same for the survivors of a failed
    node; default 0.5: a trainer blocked in a collective with a dead peer
    never reaches its SIGTERM handler, so it is not given the full grace),
    ``hang_timeout`` (> 0: a node whose map_fun neither reads its feed nor
    calls ``ctx.heartbeat()`` for this many seconds is hung: its Python
    stacks go into the failure and the restart policy applies; 0: off),
    ``drain_grace`` (seconds the nodes get to reach the drain step, write
    their checkpoint and end when Spark decommissions an executor; default
    None: 25 s, as ``tfos run --drain-grace``; 0: never drain, the
    executor's node is lost as before; see docs/RELIABILITY.md, "Drain on
    notice"), ``min_nodes`` (elastic size: below ``num_executors``, the
    cluster runs on fewer nodes, down to ``min_nodes``, when executors are
    lost or decommissioned and none comes back within ``elastic_wait``
    seconds, and grows back when they return; workers come and go, ps,
    chief and evaluator stay; ``max_nodes``, if given, must be
    ``num_executors``; see docs/RELIABILITY.md, "Elastic size"),
    ``resize_in_place`` (with ``min_nodes``, ``framework="torch"``, workers
    only and InputMode.TENSORFLOW: a lost worker's survivors go on in their
    processes at the smaller world size, their programs' process group
    re-formed by ``tfos.torch.ElasticGroup``; see docs/RELIABILITY.md,
    "Torch survivors in place"), ``grow_in_place`` (with ``resize_in_place``:
    a node task started again in a lost worker's place, where Spark has a
    free task slot, joins the running cluster; the programs look for it
    with ``ElasticGroup.resized()``), ``node_log_dir`` (per-node logs, relative
    to each executor's working directory) and ``status_port`` (the driver's
    status page on 127.0.0.1, see :meth:`TFCluster.status_url`; 0: any free
    port, -1: none) and ``keras``: which Keras ``tf.keras`` is in ``map_fun``. ``"auto"`` (the
    default) gives tf-keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``) on every
    executor that has the ``tf_keras`` package and no ``TF_USE_LEGACY_KERAS``
    of its own: TensorFlowOnSpark programs were written for Keras 2, and Keras
    3's ``model.fit`` does not run under a multi-worker
    MultiWorkerMirroredStrategy. ``"legacy"`` insists on tf-keras (a node
    without it fails to start, saying so); ``"3"`` gives Keras 3; ``"env"``
    leaves the executors' environment alone. ``import keras`` is Keras 3 in
    every mode. See docs/SPARK.md, "Keras". ``quiet=True`` drops the feed
    progress lines that :meth:`TFCluster.train` logs every 5 s (as ``tfos run
    --quiet``); the status page still shows the feed. The driver's lines go to
    the logger ``"tfos"`` (see docs/DESIGN.md, "Logs").

    ``mlflow``: the http(s):// URI of an MLflow tracking server; the job,
    restarts included, is one MLflow run there (``mlflow_experiment``,
    default ``$MLFLOW_EXPERIMENT_NAME`` else "Default"; ``mlflow_run_name``)
    with the parameters, every node's ``ctx.report`` metrics by rank and
    their mean, the restart history and the feed's totals; the nodes get
    ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID``. It ends when the cluster
    does (:meth:`TFCluster.shutdown`). See docs/MODELS.md, "Tracking".

    ``framework``: what each node is sent of the cluster, as ``tfos run
    --framework``. ``"tf"`` (the default): every node's address
    (``TF_CONFIG``, ``ctx.cluster_spec``). ``"torch"`` or ``"jax"``: rank 0's
    address and the node's ranks only, a few hundred bytes per node whatever
    the size (``ctx.cluster_spec`` is then ``{}``); ``TorchDistributor`` says
    ``"torch"``. See docs/DESIGN.md, "What each node is sent of the cluster".
    """
    from .._extras import require
    require("TFCluster.run", "pyspark", "pyarrow", "numpy")  # here, before any executor is asked

    if framework not in ("tf", "torch", "jax"):
        raise ValueError("TFCluster.run: framework=%r: use 'tf', 'torch' or 'jax'" % (framework,))
    if not isinstance(keras, str) or not _tfos.keras_mode_valid(keras):
        raise ValueError("TFCluster.run: keras=%r: use 'auto' (tf-keras where installed), 'legacy' (tf-keras), "
                         "'3' (Keras 3) or 'env' (as the executors' environment says)" % (keras,))
    layout = _layout(int(num_executors), int(num_ps), master_node, eval_node)
    # local[N]: every node in the driver's JVM; local-cluster[N,C,M] runs N
    # executor JVMs, one node each, as a cluster does
    local = master_kind(sc.master) == "local"
    total = int(num_executors)
    spark_ids = list(range(num_ps, total)) if driver_ps_nodes else list(range(total))
    elastic = elastic_bounds(layout, total, min_nodes, max_nodes, elastic_wait, local, driver_ps_nodes,
                             TFClusterError, "num_executors")
    inplace = 0
    if resize_in_place:
        if elastic is None or framework != "torch" or layout["num_ps"] or layout["chief"] or layout["evaluator"] \
                or int(input_mode) != InputMode.TENSORFLOW:
            raise TFClusterError("resize_in_place=True needs min_nodes below num_executors, framework='torch', "
                                 "workers only (no ps, master_node or eval_node) and InputMode.TENSORFLOW (a fed "
                                 "node's partitions would not be read again)")
        inplace = elastic["min_nodes"]
    if grow_in_place and not inplace:
        raise TFClusterError("grow_in_place=True replaces a worker lost in place: give resize_in_place=True too")
    if elastic is None:
        _check_executors(sc, len(spark_ids), min(60.0, float(reservation_timeout)), local,
                         int(input_mode) == InputMode.SPARK)

    cluster_id = uuid.uuid4().hex[:12]
    tracker = open_tracker(mlflow, mlflow_experiment, mlflow_run_name or "tfos-spark-%s" % cluster_id, {
        "num_executors": num_executors, "num_ps": num_ps, "input_mode": int(input_mode),
        "max_restarts": max_restarts, "tensorboard": bool(tensorboard), "master_node": master_node,
        "eval_node": bool(eval_node), "feed_mb": feed_mb, "heartbeat_timeout": heartbeat_timeout},
        {"tfos.cluster_id": cluster_id, "tfos.backend": "spark"})
    listen, advertise = _bind_host(sc)
    try:
        hconf = sc._jsc.hadoopConfiguration()
        default_fs = hconf.get("fs.defaultFS") or "file://"
    except Exception:
        hconf, default_fs = None, "file://"
    webhdfs = None
    if hconf is not None and default_fs.startswith("hdfs://"):
        # tfos.fs in the nodes reaches hdfs:// over WebHDFS (TFOS_WEBHDFS)
        from ..fs import FileSystemError, webhdfs_address
        import urllib.parse
        try:
            webhdfs = webhdfs_address(default_host=urllib.parse.urlsplit(default_fs).hostname, conf=hconf.get)
        except FileSystemError as e:
            logger.warning("hdfs:// paths will not be reachable from the nodes through tfos.fs: %s", e)
    if default_fs.startswith("file:"):
        default_fs = "file://"
    husr = _hadoop_user(sc) if default_fs != "file://" else None
    if checkpoint_dir is None:
        if default_fs == "file://":
            checkpoint_dir = os.path.abspath(os.path.join("tfos-checkpoints", cluster_id))
        else:
            checkpoint_dir = "%s/user/%s/tfos-checkpoints/%s" % (default_fs.rstrip("/"), husr, cluster_id)
    spec = NodeSpec(cluster_id, _tfos.random_secret(), None, layout, int(input_mode),
                                _payload.dumps((map_fun, tf_args), keras), local, float(reservation_timeout),
                                feed_mb=int(feed_mb), log_dir=node_log_dir, tensorboard=bool(tensorboard),
                                tb_logdir=log_dir, default_fs=default_fs,
                                heartbeat_timeout=float(heartbeat_timeout), spark_ids=spark_ids,
                                checkpoint_dir=checkpoint_dir, hang_timeout=float(hang_timeout),
                                hand_port=not release_port, keras=keras,
                                max_restarts=max(0, int(max_restarts)), webhdfs=webhdfs, hadoop_user=husr)
    spec.env = tracker_env(tracker)
    spec.elastic = elastic is not None
    spec.resize_in_place = bool(inplace)
    spec.grow_in_place = bool(grow_in_place)
    publisher = None
    if husr is not None and webhdfs is not None:
        # Kerberos: the tokens Spark renews reach the nodes through HDFS (tfos._spark.tokens)
        from .tokens import Publisher
        publisher = Publisher(sc, cluster_id)
        try:
            url = publisher.start()
        except Exception as e:  # noqa: BLE001 (said: the nodes keep their executors' tokens)
            logger.warning("cannot publish HDFS delegation tokens for the nodes (%s): they use their "
                           "executors' tokens, until those expire", short(e, 300))
            url = None
        if url:
            spec.env.update({"TFOS_HDFS_CREDENTIALS": url, "TFOS_HDFS_TOKEN_RENEW_MS": str(publisher.renew_ms)})
        else:
            publisher = None
    conf = {"input_mode": int(input_mode), "total": total, "max_restarts": max(0, int(max_restarts)),
            "listen": listen, "advertise": advertise, "port": 0, "reservation_timeout": float(reservation_timeout),
            "grace": float(grace), "failure_grace": float(failure_grace), "heartbeat_timeout": float(heartbeat_timeout), "spark_ids": spark_ids,
            "local": local, "driver_ps_nodes": bool(driver_ps_nodes), "status_port": int(status_port),
            "quiet": bool(quiet), "tracker": tracker, "framework": framework, "token_publisher": publisher,
            # None: libtfos's default (0.0 to tfos_coord_drain); 0: never drain (-1)
            "drain_grace": 0.0 if drain_grace is None else float(drain_grace) if drain_grace > 0 else -1.0,
            "elastic": elastic, "all_spark_ids": list(spark_ids), "layout": dict(layout), "resize_in_place": inplace,
            "grow_in_place": bool(grow_in_place), "ready_timeout": float(ready_timeout or 0)}
    cluster = TFCluster(sc, spec, conf)
    cluster._attempts.start()
    cluster.cluster_meta["server_addr"] = spec.coord_addr
    logger.info("cluster %s: coordinator at %s, %d nodes %s, checkpoints in %s", cluster_id,
                spec.coord_addr, total, layout, checkpoint_dir)
    return cluster
