"""TensorFlowOnSpark's TFCluster API on tfos's runtime.

``TFCluster.run(sc, map_fun, tf_args, num_executors, num_ps, ...)`` starts the
coordinator (C, in this driver process), then one Spark task per node that
starts a tfos node agent (C) on its executor; the agent reserves a port,
registers, and runs ``map_fun(tf_args, ctx)`` in a supervised process with
TF_CONFIG set. With ``InputMode.SPARK``, ``cluster.train(rdd)`` and
``cluster.inference(rdd)`` stream partitions into the node on the same
executor through its shared-memory feed. ``cluster.shutdown()`` ends the feed,
waits for the programs, and raises the first failure as an exception.

Behaviour differences from TensorFlowOnSpark (same signatures):

- a failure in ``map_fun`` raises :class:`TFClusterError` on the driver with the
  node's name and traceback, from ``train()``, ``inference()`` or
  ``shutdown()`` -- never a feed timeout, never ``sys.exit``;
- ``grace_secs`` is accepted and not slept: shutdown joins the programs;
- ``queues`` and ``release_port`` are accepted and ignored (tfos has no
  Manager queues; ports are held by the agent until the program starts);
- no process is left on any executor after ``shutdown()`` or after the driver
  dies (agents end with the coordinator, or with their executor).
"""
import json
import logging
import os
import socket
import threading
import time
import uuid

from . import _tfos
from . import TFSparkNode
from ._launch import ClusterError

logger = logging.getLogger("tfos")

__all__ = ["InputMode", "TFCluster", "TFClusterError", "run"]

CANCEL_AFTER_S = 10.0  # a failed cluster's feeding job is cancelled after this


class InputMode(object):
    """How a cluster gets its data (TensorFlowOnSpark's constants)."""
    TENSORFLOW = 0  #: map_fun reads its own data
    SPARK = 1       #: Spark feeds RDD/DataFrame partitions to the nodes


class TFClusterError(ClusterError):
    """The cluster failed: the message names the node, its exit status or
    signal, and its last lines (the traceback of an exception in map_fun)."""

    def __init__(self, message):
        super().__init__(message, 1, None)


class _Driver(object):
    """The coordinator in this process and a thread that runs its event loop."""

    def __init__(self, coord):
        self.coord = coord
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="tfos-coordinator", daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            with self.lock:
                if self.closed:
                    return
                self.coord.step(0)
            # step with the lock released between calls so that status
            # queries never wait long
            time.sleep(0.02)

    def call(self, fn, *args):
        with self.lock:
            if self.closed:
                raise TFClusterError("the cluster is shut down")
            return fn(*args)

    def state(self):
        return self.call(lambda: self.coord.state)

    def status(self):
        return json.loads(self.call(self.coord.status))

    def failure(self):
        return self.call(lambda: self.coord.failure)

    def failed(self):
        """True as soon as a failure is recorded (the cluster may still be
        stopping its other nodes)."""
        return bool(self.call(lambda: self.coord.failure))

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.coord.close()
        self.thread.join(5)


def _bind_host(sc):
    """(address to listen on, address to advertise) for the coordinator."""
    host = sc.getConf().get("spark.driver.host", None) or socket.gethostname()
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        ip = host
    if ip.startswith("127."):
        return ip, ip
    return "0.0.0.0", ip


def _executor_count(sc):
    return len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver


def _check_executors(sc, n_tasks, wait_s, local, spark_mode=False):
    """Clear errors for clusters that cannot run one node per executor."""
    conf = sc.getConf()
    if local:
        slots = sc.defaultParallelism
        if n_tasks > slots:
            raise TFClusterError(
                "TFCluster.run needs %d nodes running at once, but the local master %s has %d task slots: use "
                "local[%d] or more, or fewer num_executors" % (n_tasks, sc.master, slots, n_tasks))
        return
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise TFClusterError("TFCluster.run needs a fixed set of executors, one per node: set "
                             "spark.dynamicAllocation.enabled=false")
    deadline = time.monotonic() + wait_s
    count = _executor_count(sc)
    while count < n_tasks and time.monotonic() < deadline:
        time.sleep(0.5)
        count = _executor_count(sc)
    if count < n_tasks:
        raise TFClusterError(
            "TFCluster.run needs %d Spark executors (one per node), but the application has %d after %.0f s. Ask "
            "for more executors (spark.executor.instances / --num-executors on YARN and Kubernetes; spark.cores.max "
            "together with spark.executor.cores on a standalone master), or lower num_executors"
            % (n_tasks, count, wait_s))
    if spark_mode and count > n_tasks:
        raise TFClusterError(
            "InputMode.SPARK feeds each partition to the node on the executor that computes it, but the application "
            "has %d executors for %d nodes on executors: feed tasks on the others would have no node. Give the "
            "application exactly %d executors (spark.executor.instances / --num-executors, or spark.cores.max with "
            "spark.executor.cores on a standalone master), or set num_executors=%d" % (count, n_tasks, n_tasks, count))
    cores = conf.get("spark.executor.cores", None)
    cpus = int(conf.get("spark.task.cpus", "1"))
    if cores is not None and int(cores) // cpus > 1:
        logger.warning("tfos: spark.executor.cores=%s and spark.task.cpus=%d let one executor run %d tasks at once; "
                       "two nodes landing on one executor is an error: set spark.task.cpus=%s", cores, cpus,
                       int(cores) // cpus, cores)


class TFCluster(object):
    """A running cluster (returned by :func:`run`)."""

    def __init__(self, sc, spec, driver, input_mode, node_thread, driver_agents, num_executors):
        self.sc = sc
        self.spec = spec
        self.driver = driver
        self.input_mode = input_mode
        self.num_executors = num_executors
        self._node_thread = node_thread
        self._driver_agents = driver_agents
        self._terminated = sc.accumulator(0)
        self._partitions_fed = 0
        self._shut = False
        self.cluster_id = spec.cluster_id
        self.cluster_info = None
        self.cluster_meta = {"id": spec.cluster_id, "cluster_template": None, "num_executors": num_executors,
                             "server_addr": spec.coord_addr}

    # -- state
    def _raise_if_failed(self, cause=None):
        if self.driver.closed:
            return
        if self.driver.failed():
            raise TFClusterError("the tfos cluster failed: %s" % self.driver.failure()) from cause

    def status(self):
        """The coordinator's view of every node (a dict, as /status serves it)."""
        return self.driver.status()

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
        self._raise_if_failed()

    def train(self, dataRDD, num_epochs=0, feed_timeout=600, qname="input"):
        """Feed an RDD (or a DataFrame, through Arrow; or a DStream, batch by
        batch) to the nodes, ``num_epochs`` times (0 or 1: once). Partitions
        go to the node on the executor that computes them; a partition whose
        feeding fails midway is re-delivered (at-least-once)."""
        self._check_spark_mode("train")
        epochs = max(1, int(num_epochs or 1))
        spec = self.spec
        if _is_dstream(dataRDD):
            acc = self._terminated

            def each(rdd):
                if self._shut or self.driver.closed:
                    return
                rdd.foreachPartition(TFSparkNode.feed_task(spec, feed_timeout, acc))

            dataRDD.foreachRDD(each)
            return
        if _is_dataframe(dataRDD):
            df = dataRDD
            for _ in range(epochs - 1):
                df = df.unionAll(dataRDD) if hasattr(df, "unionAll") else df.union(dataRDD)
            fn = TFSparkNode.feed_task_arrow(spec, feed_timeout, self._terminated)
            self._run_job("train", lambda: df.mapInArrow(fn, "rows long").collect())
        else:
            rdd = dataRDD if epochs == 1 else self.sc.union([dataRDD] * epochs)
            self._run_job("train", lambda: rdd.foreachPartition(TFSparkNode.feed_task(spec, feed_timeout,
                                                                                      self._terminated)))
        skipped = self._terminated.value
        if skipped:
            logger.info("tfos: %d partitions were not fed: the nodes had terminated their feed", skipped)

    def inference(self, dataRDD, feed_timeout=600, qname="input"):
        """Feed an RDD (or a DataFrame, through Arrow) to the nodes and return
        an RDD of their results: exactly one per input row, in order (lazy,
        like any RDD: the feeding runs when it is computed)."""
        self._check_spark_mode("inference")
        spec = self.spec
        if _is_dataframe(dataRDD):
            import pickle
            fn = TFSparkNode.inference_task(spec, feed_timeout, arrow=True)
            packed = dataRDD.mapInArrow(fn, "results binary").rdd
            return packed.flatMap(lambda row: pickle.loads(row[0]))
        return dataRDD.mapPartitions(TFSparkNode.inference_task(spec, feed_timeout))

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
            if self.input_mode == InputMode.SPARK and not self.driver.closed:
                self.driver.call(self.driver.coord.end_feed)
            deadline = time.monotonic() + timeout
            state = self.driver.state()
            while state not in (_tfos.STATE_DONE, _tfos.STATE_FAILED):
                if time.monotonic() >= deadline:
                    running = [n for n in self.driver.status()["nodes"] if n["state"] != "exited"]
                    names = ", ".join("%s:%d" % (n["job"], n["index"]) for n in running)
                    self.driver.call(self.driver.coord.stop, "shutdown timed out after %g s" % timeout)
                    self._wait_stopped(30)
                    raise TFClusterError("shutdown timed out after %g s; still running: %s" % (timeout, names))
                time.sleep(0.1)
                state = self.driver.state()
            self._wait_stopped(60)
            if state == _tfos.STATE_FAILED:
                raise TFClusterError("the tfos cluster failed: %s" % self.driver.failure())
        finally:
            self._shut = True
            self._close()

    def _wait_stopped(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.driver.status()["nodes"]
            if all(n["state"] in ("exited", "waiting") for n in nodes):
                return
            time.sleep(0.1)

    def _await_streaming(self, ssc):
        while not ssc.awaitTerminationOrTimeout(1):
            if self._terminated.value or self.driver.state() != _tfos.STATE_RUNNING:
                ssc.stop(stopSparkContext=False, stopGraceFully=True)
                return

    def _close(self):
        self.driver.close()  # agents still connected lose their coordinator and stop
        for p in self._driver_agents:
            try:
                p.wait(30)
            except Exception:
                p.kill()
                p.wait()
        if self._node_thread is not None:
            self._node_thread.join(60)

    def tensorboard_url(self):
        """URL of the TensorBoard started on the chief (or worker 0) with
        ``tensorboard=True``; None without one."""
        for n in self.driver.status()["nodes"]:
            if n.get("tensorboard_port"):
                return "http://%s:%d" % (n["host"], n["tensorboard_port"])
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
        log_dir=None, driver_ps_nodes=False, master_node=None, reservation_timeout=600,
        queues=("input", "output", "error"), eval_node=False, release_port=True, feed_mb=64,
        heartbeat_timeout=30.0, grace=5.0, node_log_dir="tfos-logs"):
    """Start a cluster of ``num_executors`` nodes (``num_ps`` of them parameter
    servers) running ``map_fun(tf_args, ctx)``, one per Spark executor, and
    return a :class:`TFCluster` once every node has registered.

    Roles follow TensorFlowOnSpark: ps first, then ``master_node`` ('chief'),
    then the evaluator (``eval_node``), then workers. ``log_dir`` is the
    TensorBoard log dir (``tensorboard=True`` starts TensorBoard on the chief,
    or worker 0). ``driver_ps_nodes`` runs the ps nodes on the driver instead
    of executors. tfos's own options: ``feed_mb`` (input ring size per node),
    ``heartbeat_timeout``, ``grace`` (seconds between SIGTERM and SIGKILL when
    stopping) and ``node_log_dir`` (per-node logs, relative to each executor's
    working directory).
    """
    from pyspark import cloudpickle

    layout = _layout(int(num_executors), int(num_ps), master_node, eval_node)
    local = sc.master.startswith("local")
    total = int(num_executors)
    spark_ids = list(range(num_ps, total)) if driver_ps_nodes else list(range(total))
    _check_executors(sc, len(spark_ids), min(60.0, float(reservation_timeout)), local,
                     int(input_mode) == InputMode.SPARK)

    secret = _tfos.random_secret()
    cluster_id = uuid.uuid4().hex[:12]
    listen, advertise = _bind_host(sc)
    coord = _tfos.Coordinator(layout["num_workers"], secret, ps=layout["num_ps"], chief=layout["chief"],
                              evaluator=layout["evaluator"], bind_host=listen,
                              reservation_timeout=float(reservation_timeout), grace=float(grace),
                              heartbeat_timeout=float(heartbeat_timeout))
    port = int(coord.address.rsplit(":", 1)[1])
    coord_addr = "%s:%d" % (advertise, port)
    driver = _Driver(coord)
    try:
        default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS") or "file://"
    except Exception:
        default_fs = "file://"
    if default_fs.startswith("file:"):
        default_fs = "file://"
    spec = TFSparkNode.NodeSpec(cluster_id, secret, coord_addr, layout, int(input_mode),
                                cloudpickle.dumps((map_fun, tf_args)), local, float(reservation_timeout),
                                feed_mb=int(feed_mb), log_dir=node_log_dir, tensorboard=bool(tensorboard),
                                tb_logdir=log_dir, default_fs=default_fs,
                                heartbeat_timeout=float(heartbeat_timeout), spark_ids=spark_ids)
    logger.info("tfos: cluster %s: coordinator at %s, %d nodes %s", cluster_id, coord_addr, total, layout)

    driver_agents = []
    node_errors = []
    try:
        if driver_ps_nodes:
            driver_agents = _start_driver_ps(spec, list(range(num_ps)))
        node_thread = _start_node_job(sc, spec, spark_ids, local, node_errors)
        cluster = TFCluster(sc, spec, driver, int(input_mode), node_thread, driver_agents, total)
        _wait_formed(cluster, node_errors, float(reservation_timeout))
    except BaseException:
        try:
            driver.call(coord.stop, "TFCluster.run failed")
        except TFClusterError:
            pass
        sc.cancelJobGroup(_node_group(spec))  # node tasks not started yet never start
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not driver.closed:
            if driver.state() in (_tfos.STATE_DONE, _tfos.STATE_FAILED) and all(
                    n["state"] in ("exited", "waiting") for n in driver.status()["nodes"]):
                break
            time.sleep(0.1)
        driver.close()
        for p in driver_agents:
            try:
                p.wait(30)
            except Exception:
                p.kill()
                p.wait()
        raise
    return cluster


def _start_node_job(sc, spec, spark_ids, local, errors):
    """Run the node stage in a background thread (node tasks of ps nodes, and
    of every node with InputMode.TENSORFLOW, last as long as the cluster)."""
    rdd = sc.parallelize(spark_ids, len(spark_ids))
    fn = TFSparkNode.node_task(spec)
    conf = sc.getConf()
    barrier = conf.get("spark.dynamicAllocation.enabled", "false").lower() != "true"

    def job():
        sc.setJobGroup(_node_group(spec), "tfos nodes of cluster %s" % spec.cluster_id, interruptOnCancel=True)
        try:
            stage = rdd.barrier().mapPartitions(fn) if barrier else rdd.mapPartitions(fn)
            for r in stage.collect():
                if r.get("error"):
                    errors.append(r["error"])
        except Exception as exc:
            errors.append("the Spark job that starts the nodes failed: %s" % _short(exc))

    t = threading.Thread(target=job, name="tfos-nodes", daemon=True)
    t.start()
    return t


def _node_group(spec):
    return "tfos-nodes-%s" % spec.cluster_id


def _short(exc, limit=4000):
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + " ..."


def _wait_formed(cluster, errors, timeout):
    """Wait until every node registered; raise what went wrong otherwise."""
    driver = cluster.driver
    deadline = time.monotonic() + timeout + 5
    while True:
        state = driver.state()
        if driver.failed():
            raise TFClusterError("the tfos cluster failed to start: %s" % driver.failure())
        if state in (_tfos.STATE_RUNNING, _tfos.STATE_DONE):
            return
        if errors:
            raise TFClusterError("the tfos cluster failed to start: %s" % "; ".join(errors))
        if time.monotonic() >= deadline:
            raise TFClusterError("the tfos cluster did not form within %g s" % timeout)
        time.sleep(0.1)


def _start_driver_ps(spec, ids):
    """ps nodes on the driver (``driver_ps_nodes=True``): agents started here,
    tied to this process (parent-death signal)."""
    import subprocess
    import sys
    from ._launch import agent_path
    procs = []
    env = dict(os.environ)
    env["TFOS_SECRET"] = spec.secret
    for i in ids:
        r = os.memfd_create("tfos-payload", 0)
        os.write(r, spec.payload)
        env_i = dict(env, TFOS_PAYLOAD_FD=str(r), TFOS_INPUT_MODE=str(spec.input_mode),
                     TFOS_DEFAULT_FS=spec.default_fs)
        argv = [agent_path(), "node", "--coord", spec.coord_addr, "--executor-id", str(i),
                "--host", spec.coord_addr.rsplit(":", 1)[0], "--watch-pid", str(os.getpid()),
                "--", sys.executable, "-m", "tfos._sparkprog"]
        procs.append(subprocess.Popen(argv, env=env_i, pass_fds=(r,), stdin=subprocess.DEVNULL))
        os.close(r)
    return procs
