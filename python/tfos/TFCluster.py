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
    """The coordinator in this process and a thread that runs its event loop
    (which also answers the status page's requests, see status_port).

    status_port: serve the status page on 127.0.0.1 at this port (0: any
    free one; -1: none); the port taken is ``self.status_port`` (-1 when
    none). info: a callable returning set_status()'s keywords (attempt,
    history...), read about once a second."""

    def __init__(self, coord, status_port=-1, info=None):
        self.coord = coord
        self.lock = threading.Lock()
        self.closed = False
        self.status_port = -1
        self.info = info
        if status_port is not None and status_port >= 0:
            try:
                self.status_port = coord.serve_status("127.0.0.1", int(status_port))
            except OSError as exc:
                logger.warning("tfos: no status page: %s", exc)
        self.thread = threading.Thread(target=self._loop, name="tfos-coordinator", daemon=True)
        self.thread.start()

    def _loop(self):
        next_info = 0.0
        while True:
            info = None
            if self.info is not None and self.status_port >= 0 and time.monotonic() >= next_info:
                next_info = time.monotonic() + 1.0
                try:
                    info = self.info()
                except Exception:
                    info = None
            with self.lock:
                if self.closed:
                    return
                if info:
                    self.coord.set_status(**info)
                self.coord.step(0)  # also answers the status page
            # step with the lock released between calls so that status
            # queries never wait long
            time.sleep(0.02)

    def set_feed(self, **feed):
        """The feed's totals for the status page (see Coordinator.set_feed)."""
        if self.status_port >= 0:
            self.call(self.coord.set_feed, **feed)

    def call(self, fn, *args, **kw):
        with self.lock:
            if self.closed:
                raise TFClusterError("the cluster is shut down")
            return fn(*args, **kw)

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

    def __init__(self, sc, spec, conf):
        self.sc = sc
        self.spec = spec
        self._conf = conf                 # how to form an attempt (see run())
        self.driver = None
        self.input_mode = conf["input_mode"]
        self.num_executors = conf["total"]
        self._node_thread = None
        self._driver_agents = []
        self._terminated = sc.accumulator(0)
        self._shut = False
        self.attempt = 0
        self.restarts_left = conf["max_restarts"]
        self.history = []                 # one line per failed attempt
        self.partitions_refed = 0         # partitions fed again after a node failure
        self.cluster_id = spec.cluster_id
        self.cluster_info = None
        self.cluster_meta = {"id": spec.cluster_id, "cluster_template": None, "num_executors": conf["total"],
                             "server_addr": spec.coord_addr}

    # -- attempts
    def _start_attempt(self, first):
        """Form the cluster: a coordinator (same address, secret and cluster
        id on every attempt, so tasks shipped earlier still find it) and one
        node task per node. Raises TFClusterError when it does not form."""
        conf, spec = self._conf, self.spec
        self.attempt += 1
        lay = spec.layout
        coord = _tfos.Coordinator(lay["num_workers"], spec.secret, ps=lay["num_ps"], chief=lay["chief"],
                                  evaluator=lay["evaluator"], bind_host=conf["listen"], port=conf["port"],
                                  reservation_timeout=conf["reservation_timeout"], grace=conf["grace"],
                                  heartbeat_timeout=conf["heartbeat_timeout"], attempt=self.attempt)
        if first:
            conf["port"] = int(coord.address.rsplit(":", 1)[1])
            spec.coord_addr = "%s:%d" % (conf["advertise"], conf["port"])
            self.cluster_meta["server_addr"] = spec.coord_addr
        info = lambda: {"attempt": self.attempt, "max_restarts": conf["max_restarts"],  # noqa: E731
                        "history": list(self.history), "partitions_refed": self.partitions_refed,
                        "node_log_dir": spec.log_dir}
        self.driver = _Driver(coord, conf.get("status_port", -1), info)
        if first and self.driver.status_port >= 0:
            conf["status_port"] = self.driver.status_port  # the same port on every attempt
            logger.info("tfos: status page at %s", self.status_url())
        node_errors = []
        try:
            if not first:  # an executor may have been lost: wait for Spark to replace it
                _check_executors(self.sc, len(conf["spark_ids"]), conf["reservation_timeout"], conf["local"])
            if conf["driver_ps_nodes"]:
                self._driver_agents = _start_driver_ps(spec, list(range(lay["num_ps"])))
            self._node_thread = _start_node_job(self.sc, spec, conf["spark_ids"], conf["local"], node_errors)
            _wait_formed(self, node_errors, conf["reservation_timeout"])
        except BaseException:
            self._stop_attempt("the cluster did not form")
            raise
        logger.info("tfos: cluster %s attempt %d formed", spec.cluster_id, self.attempt)

    def _stop_attempt(self, reason, wait=True):
        """Stop this attempt's nodes (bounded), close its coordinator, reap."""
        driver = self.driver
        if driver is None or driver.closed:
            return
        try:
            driver.call(driver.coord.stop, reason)
        except TFClusterError:
            pass
        self.sc.cancelJobGroup(_node_group(self.spec))  # node tasks not started yet never start
        deadline = time.monotonic() + (self._conf["grace"] + 30 if wait else 0)
        while time.monotonic() < deadline:
            if driver.state() in (_tfos.STATE_DONE, _tfos.STATE_FAILED) and all(
                    n["state"] in ("exited", "waiting") for n in driver.status()["nodes"]):
                break
            time.sleep(0.1)
        self._close()

    def _restart_or_raise(self, context=""):
        """The current attempt failed: form the cluster again when restarts
        are left and the failure was a node's (not a timeout or a stop);
        else raise TFClusterError with the history of the attempts."""
        failure = self.driver.failure() or "the cluster stopped"
        code = self.driver.call(lambda: self.driver.coord.failure_code)
        self.history.append("attempt %d, %s: %s" % (self.attempt, time.strftime("%H:%M:%S"),
                                                     failure.splitlines()[0]))
        if self.restarts_left <= 0 or code != _tfos.EFAILED or self._shut:
            self._stop_attempt("the cluster failed", wait=True)
            raise TFClusterError(self._failure_text(failure, context))
        self.restarts_left -= 1
        logger.warning("tfos: %s; re-forming the cluster (attempt %d, %d restarts left)", failure.splitlines()[0],
                       self.attempt + 1, self.restarts_left)
        self._stop_attempt("restarting after a failure", wait=True)
        self._start_attempt(first=False)

    def _failure_text(self, failure, context=""):
        text = "the tfos cluster failed: %s" % failure
        if context:
            text += "\n" + context
        if len(self.history) > 1:
            text += "\nattempts (%d restarts):\n  %s" % (len(self.history) - 1, "\n  ".join(self.history))
        return text

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
        st["history"] = list(self.history)
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
        if self.driver.failed():
            self._restart_or_raise()

    def train(self, dataRDD, num_epochs=0, feed_timeout=600, qname="input"):
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
                    rdd.mapPartitionsWithIndex(TFSparkNode.feed_task(spec, feed_timeout, outcomes)).count()
                except Exception:
                    # a node finished while this batch was being fed: its
                    # partitions found no node there; not an error
                    if self.driver.closed or self.driver.failed() or not feed_ended():
                        raise
                    acc.add(1)
                    logger.info("tfos: a streaming batch was not fed: a node had finished its feed")
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
        delivered, terminated = set(), 0
        while True:
            outcomes = self.sc.accumulator({}, _Outcomes())
            progress = _Progress(total, len(delivered), outcomes, self.attempt, self.driver)
            job_error = None
            try:
                if _is_dataframe(data):
                    fn = TFSparkNode.feed_task_arrow(spec, feed_timeout, outcomes, delivered)
                    self._run_job("train", lambda: data.mapInArrow(fn, "rows long").collect())
                else:
                    fn = TFSparkNode.feed_task(spec, feed_timeout, outcomes, delivered)
                    self._run_job("train", lambda: data.mapPartitionsWithIndex(fn).count())
            except TFClusterError as exc:
                job_error = exc
            finally:
                progress.stop()
            res = outcomes.value
            for part, (state, _) in res.items():
                if state in ("done", "terminated"):
                    delivered.add(part)
                    terminated += state == "terminated"
            lost = sorted((part, info) for part, (state, info) in res.items() if state == "aborted")
            if len(delivered) >= total:
                break
            if not self.driver.failed():
                if job_error is not None:
                    raise job_error
                raise TFClusterError("%d of %d partitions were not delivered, and no node failed: %s" % (
                    total - len(delivered), total, lost[:3]))
            context = ""
            if lost:
                context = "%d partitions were being fed when it failed; the first: %s" % (len(lost), lost[0][1])
            self._restart_or_raise(context)
            self.partitions_refed += len(lost)
            logger.warning("tfos: attempt %d: feeding again %d partitions not delivered before the failure "
                           "(%d of them were in flight)", self.attempt, total - len(delivered), len(lost))
        if terminated:
            self._terminated.add(terminated)
            logger.info("tfos: %d partitions were not fed: the nodes had terminated their feed", terminated)

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
            while True:
                if self.input_mode == InputMode.TENSORFLOW and self.driver.failed():
                    # map_fun reads its own data and resumes from its
                    # checkpoint: form the cluster again while restarts are left
                    self._restart_or_raise()
                    continue
                state = self.driver.state()
                if state in (_tfos.STATE_DONE, _tfos.STATE_FAILED):
                    break
                if time.monotonic() >= deadline:
                    running = [n for n in self.driver.status()["nodes"] if n["state"] != "exited"]
                    names = ", ".join("%s:%d" % (n["job"], n["index"]) for n in running)
                    self.driver.call(self.driver.coord.stop, "shutdown timed out after %g s" % timeout)
                    self._wait_stopped(30)
                    raise TFClusterError("shutdown timed out after %g s; still running: %s" % (timeout, names))
                time.sleep(0.1)
            self._wait_stopped(60)
            if state == _tfos.STATE_FAILED:
                self.history.append("attempt %d, %s: %s" % (self.attempt, time.strftime("%H:%M:%S"),
                                                             self.driver.failure().splitlines()[0]))
                raise TFClusterError(self._failure_text(self.driver.failure()))
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
        """Wait until the streaming context ends, a node terminated its feed
        (a feed task found it terminated), or the cluster stopped running;
        then stop the streaming context (gracefully, unless the cluster
        failed). A failed streaming job (awaitTermination raises it) stops it
        too and is raised: as TFClusterError when the cluster failed."""
        def _stop_streaming(ssc, graceful):
            try:
                ssc.stop(stopSparkContext=False, stopGraceFully=graceful)
            except Exception as exc:
                logger.warning("tfos: stopping the StreamingContext failed: %s", _short(exc, 500))

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
            deadline = time.monotonic() + 5
            while not self.driver.failed() and time.monotonic() < deadline:
                time.sleep(0.1)
            self._raise_if_failed(exc)
            raise
        _stop_streaming(ssc, graceful=not self.driver.failed())

    def _close(self):
        self.driver.close()  # agents still connected lose their coordinator and stop
        for p in self._driver_agents:
            try:
                p.wait(30)
            except Exception:
                p.kill()
                p.wait()
        self._driver_agents = []
        if self._node_thread is not None:
            self._node_thread.join(60)
            self._node_thread = None

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
        queues=("input", "output", "error"), eval_node=False, release_port=True, max_restarts=3,
        checkpoint_dir=None, feed_mb=64, heartbeat_timeout=30.0, grace=5.0, node_log_dir="tfos-logs",
        status_port=0):
    """Start a cluster of ``num_executors`` nodes (``num_ps`` of them parameter
    servers) running ``map_fun(tf_args, ctx)``, one per Spark executor, and
    return a :class:`TFCluster` once every node has registered.

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
    stopping), ``node_log_dir`` (per-node logs, relative to each executor's
    working directory) and ``status_port`` (the driver's status page on
    127.0.0.1, see :meth:`TFCluster.status_url`; 0: any free port, -1: none).
    """
    from pyspark import cloudpickle

    layout = _layout(int(num_executors), int(num_ps), master_node, eval_node)
    local = sc.master.startswith("local")
    total = int(num_executors)
    spark_ids = list(range(num_ps, total)) if driver_ps_nodes else list(range(total))
    _check_executors(sc, len(spark_ids), min(60.0, float(reservation_timeout)), local,
                     int(input_mode) == InputMode.SPARK)

    cluster_id = uuid.uuid4().hex[:12]
    listen, advertise = _bind_host(sc)
    try:
        default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS") or "file://"
    except Exception:
        default_fs = "file://"
    if default_fs.startswith("file:"):
        default_fs = "file://"
    if checkpoint_dir is None:
        if default_fs == "file://":
            checkpoint_dir = os.path.abspath(os.path.join("tfos-checkpoints", cluster_id))
        else:
            import getpass
            checkpoint_dir = "%s/user/%s/tfos-checkpoints/%s" % (default_fs.rstrip("/"), getpass.getuser(),
                                                                cluster_id)
    spec = TFSparkNode.NodeSpec(cluster_id, _tfos.random_secret(), None, layout, int(input_mode),
                                cloudpickle.dumps((map_fun, tf_args)), local, float(reservation_timeout),
                                feed_mb=int(feed_mb), log_dir=node_log_dir, tensorboard=bool(tensorboard),
                                tb_logdir=log_dir, default_fs=default_fs,
                                heartbeat_timeout=float(heartbeat_timeout), spark_ids=spark_ids,
                                checkpoint_dir=checkpoint_dir)
    conf = {"input_mode": int(input_mode), "total": total, "max_restarts": max(0, int(max_restarts)),
            "listen": listen, "advertise": advertise, "port": 0, "reservation_timeout": float(reservation_timeout),
            "grace": float(grace), "heartbeat_timeout": float(heartbeat_timeout), "spark_ids": spark_ids,
            "local": local, "driver_ps_nodes": bool(driver_ps_nodes), "status_port": int(status_port)}
    cluster = TFCluster(sc, spec, conf)
    cluster._start_attempt(first=True)
    logger.info("tfos: cluster %s: coordinator at %s, %d nodes %s, checkpoints in %s", cluster_id,
                spec.coord_addr, total, layout, checkpoint_dir)
    return cluster


class _Outcomes(object):
    """Accumulator of {partition: (state, detail)} reported by feed tasks (an
    AccumulatorParam by duck typing: tfos imports without pyspark)."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        a.update(b)
        return a


class _Progress(object):
    """Feed progress on the driver's console (stderr) every few seconds:
    partitions delivered, rows, rows/s, ETA."""

    INTERVAL = 5.0

    def __init__(self, total, already, outcomes, attempt, driver=None):
        self.total, self.already, self.outcomes, self.attempt = total, already, outcomes, attempt
        self.driver = driver  # the status page's feed numbers, every second
        self.t0 = time.monotonic()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="tfos-progress", daemon=True)
        self.thread.start()

    def _feed(self, final=False):
        """Partitions delivered and rows, to the status page; (parts, rows)."""
        res = dict(self.outcomes.value)
        parts = self.already + sum(1 for st, _ in res.values() if st in ("done", "terminated"))
        rows = sum(n for st, n in res.values() if st == "done" and isinstance(n, int))
        state = "feeding" if not final else "done" if parts >= self.total else "stopped"
        if self.driver is not None:
            try:
                self.driver.set_feed(rows=rows, partitions_done=parts, partitions_expected=self.total,
                                     partitions_aborted=sum(1 for st, _ in res.values() if st == "aborted"),
                                     state=state)
            except TFClusterError:
                pass
        return parts, rows

    def _loop(self):
        import sys
        next_line = time.monotonic() + self.INTERVAL
        while not self.done.wait(min(1.0, self.INTERVAL)):
            try:
                parts, rows = self._feed()
            except Exception:
                continue
            if time.monotonic() < next_line:
                continue
            next_line = time.monotonic() + self.INTERVAL
            elapsed = time.monotonic() - self.t0
            rate = rows / elapsed if elapsed > 0 else 0.0
            fresh = parts - self.already
            eta = ""
            if fresh and parts < self.total:
                eta = ", ETA %.0f s" % (elapsed / fresh * (self.total - parts))
            sys.stderr.write("tfos: feeding (attempt %d): %d/%d partitions, %d rows, %.0f rows/s%s\n" % (
                self.attempt, parts, self.total, rows, rate, eta))
            sys.stderr.flush()

    def stop(self):
        self.done.set()
        self.thread.join(2)
        if self.driver is not None:
            try:
                self._feed(final=True)
            except Exception:
                pass


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
