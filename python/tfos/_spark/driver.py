"""The driver's side of a Spark cluster, besides the TFCluster object: the
driver engine of the attempt loop (DriverEngine: each attempt's coordinator
in this process, its node tasks a Spark stage), the coordinator and the
thread that runs its event loop (_Driver), where it listens (_bind_host),
the checks that the application's executors can hold one node each, feed
progress on the console and the status page, and ps nodes started on the
driver (``driver_ps_nodes=True``)."""
import json
import os
import socket
import threading
import time

from .. import _tfos
from .._launch import ClusterError
from .._log import log as logger  # the "tfos" logger; see tfos/_log.py
from .attempts import Engine, Snapshot, cause_code, elastic_size, failure_text  # noqa: F401 (failure_text: its old home)
from .nodes import (TASK_JOBS_BLOCKING, executors_python, guarded, join_task, local_cluster_shape,
                    missing_in_spark_error, missing_module_text, missing_of_row, node_task)
from .wait import JOB, LOCAL, WaitTimeout, wait_until


class TFClusterError(ClusterError):
    """The cluster failed: the message names the node, its exit status or
    signal, and its last lines (the traceback of an exception in map_fun)."""

    def __init__(self, message):
        super().__init__(message, 1, None)


def short(exc, limit=4000):
    """An exception's text, cut at ``limit`` characters."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + " ..."


class _Driver(object):
    """The coordinator in this process and the thread that runs its event
    loop (Coordinator.run: C, GIL released, asleep until a node or a status
    page client has something to say; the page is served from that loop).

    status_port: serve the status page on 127.0.0.1 at this port (0: any
    free one; -1: none); the port taken is ``self.status_port`` (-1 when
    none)."""

    def __init__(self, coord, status_port=-1):
        self.coord = coord
        self.lock = threading.Lock()  # guards `closed` only; the Coordinator locks itself
        self.closed = False
        self.status_port = -1
        if status_port is not None and status_port >= 0:
            try:
                self.status_port = coord.serve_status("127.0.0.1", int(status_port))
            except OSError as exc:
                logger.warning("no status page: %s", exc)
        self.thread = threading.Thread(target=coord.run, name="tfos-coordinator", daemon=True)
        self.thread.start()

    def set_feed(self, **feed):
        """The feed's totals for the status page (see Coordinator.set_feed)."""
        if self.status_port >= 0:
            self.call(self.coord.set_feed, **feed)

    def call(self, fn, *args, **kw):
        with self.lock:
            if self.closed:
                raise TFClusterError("the cluster is shut down")
        try:
            return fn(*args, **kw)
        except RuntimeError as exc:  # closed by another thread meanwhile
            if self.closed:
                raise TFClusterError("the cluster is shut down") from exc
            raise

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

    def decision(self):
        """What the restart policy decided about the failure (RESTART, RAISE,
        or 0 while nothing failed)."""
        return self.call(lambda: self.coord.decision)

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.coord.close()  # ends run() in the loop's thread
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


def live_task_slots(sc):
    """The task slots of the executors alive now, as Spark counts them for
    a barrier stage (which fails when it asks for more), or None when this
    Spark cannot say."""
    try:
        jsc = sc._jsc.sc()
        n = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # noqa: BLE001 -- py4j's errors: a Spark without the (internal) method
        return None
    return n if n > 0 else None


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
    shape = local_cluster_shape(sc.master)
    # local-cluster[N,..] says how many executors come: in SPARK mode wait
    # for all N, so that too many are seen (and refused) however slowly
    # their JVMs start, not only the first n_tasks
    target = max(n_tasks, shape[0]) if shape and spark_mode else n_tasks

    def enough():
        count = _executor_count(sc)
        return count if count >= target else None

    try:
        count = wait_until(enough, wait_s, "%d Spark executors to register" % target, JOB)
    except WaitTimeout:
        count = _executor_count(sc)
    if shape:  # N executor JVMs of C cores on this machine: the master URL is what to change
        ask = "use the master local-cluster[%d,1,%d] (one executor per node, one core each)"
    else:
        ask = ("Give the application exactly %d executors (spark.executor.instances / --num-executors on YARN and "
               "Kubernetes; spark.cores.max together with spark.executor.cores on a standalone master)")
    if count < n_tasks:
        fix = (ask % (n_tasks, shape[2])) if shape else ask.replace("exactly %d", "%d or more") % n_tasks
        raise TFClusterError(
            "TFCluster.run needs %d Spark executors (one per node), but the application has %d after %.0f s: %s, "
            "or lower num_executors" % (n_tasks, count, wait_s, fix))
    if spark_mode and count > n_tasks:
        raise TFClusterError(
            "InputMode.SPARK feeds each partition to the node on the executor that computes it, but the application "
            "has %d executors for %d nodes on executors: feed tasks on the others would have no node. %s, or set "
            "num_executors=%d" % (count, n_tasks, (ask % (n_tasks, shape[2])) if shape else ask % n_tasks, count))
    cores = conf.get("spark.executor.cores", None)
    if shape:
        cores = str(shape[1])
    cpus = int(conf.get("spark.task.cpus", "1"))
    if shape and shape[1] // cpus > 1:
        logger.warning("the master %s gives each executor %d cores, so one executor may run %d node tasks at "
                       "once; two nodes landing on one executor is an error: use local-cluster[%d,1,%d] (or "
                       "spark.task.cpus=%d)", sc.master, shape[1], shape[1] // cpus, shape[0], shape[2], shape[1])
    elif cores is not None and int(cores) // cpus > 1:
        logger.warning("spark.executor.cores=%s and spark.task.cpus=%d let one executor run %d tasks at once; "
                       "two nodes landing on one executor is an error: set spark.task.cpus=%s", cores, cpus,
                       int(cores) // cpus, cores)


class _Outcomes(object):
    """Accumulator of {partition: (state, detail)} reported by feed tasks (an
    AccumulatorParam by duck typing: tfos imports without pyspark)."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        a.update(b)
        return a


class _Progress(object):
    """Feed progress, logged every few seconds (the logger "tfos", INFO:
    stderr unless the program configured logging): partitions delivered,
    rows, rows/s, ETA; none with ``quiet``. The status page's feed numbers
    are updated every second either way."""

    INTERVAL = 5.0

    def __init__(self, total, already, outcomes, attempt, driver=None, quiet=False):
        self.total, self.already, self.outcomes, self.attempt = total, already, outcomes, attempt
        self.driver = driver  # the status page's feed numbers, every second
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.done = threading.Event()
        # the feed starts now, before the job: the page counts the rows the
        # nodes consume from here (a first update a second later counted from
        # then, missing what the trainers had already taken)
        try:
            self._feed()
        except Exception:
            pass
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
        next_line = time.monotonic() + self.INTERVAL
        while not self.done.wait(min(1.0, self.INTERVAL)):
            try:
                parts, rows = self._feed()
            except Exception:
                continue
            if self.quiet or time.monotonic() < next_line:
                continue
            next_line = time.monotonic() + self.INTERVAL
            elapsed = time.monotonic() - self.t0
            rate = rows / elapsed if elapsed > 0 else 0.0
            fresh = parts - self.already
            eta = ""
            if fresh and parts < self.total:
                eta = ", ETA %.0f s" % (elapsed / fresh * (self.total - parts))
            logger.info("feeding (attempt %d): %d/%d partitions, %d rows, %.0f rows/s%s",
                        self.attempt, parts, self.total, rows, rate, eta)

    def stop(self):
        self.done.set()
        self.thread.join(2)
        if self.driver is not None:
            try:
                self._feed(final=True)
            except Exception:
                pass


def _start_driver_ps(spec, ids):
    """ps nodes on the driver (``driver_ps_nodes=True``): agents started here,
    tied to this process (parent-death signal)."""
    import subprocess
    import sys
    from .._launch import agent_path
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


# ---- the driver engine ---------------------------------------------------------

class DriverEngine(Engine):
    """The attempt loop's engine for TFCluster: each attempt's coordinator is
    a ``_tfos.Coordinator`` in this process (same address, secret and
    cluster id on every attempt, so tasks shipped earlier still find it),
    given the controller's restart policy, which it applies itself when a
    node fails (``Snapshot.decision``); the node tasks are one Spark stage
    (a barrier stage unless dynamic allocation is on) run by a background
    thread. A look at the attempt reads the coordinator's state in this
    process: the LOCAL schedule.

    ``conf`` is TFCluster's (see cluster.run()); ``status_url`` the status
    page's URL once formed (None without one)."""

    poll = LOCAL

    def __init__(self, sc, spec, conf):
        self.sc, self.spec, self.conf = sc, spec, conf
        self.stop_timeout = conf["grace"] + 30
        self.driver = None           # the current attempt's _Driver
        self.node_thread = None      # the thread running the node stage
        self.driver_agents = []      # ps agents on this driver (driver_ps_nodes=True)
        self.partitions_refed = 0
        self.drain_reason = None     # this attempt's drain (an executor decommissioned), or None
        self.planned = None          # an elastic cluster's next size (next_size), for form()
        # InputMode.TENSORFLOW grows whenever capacity returns; InputMode.SPARK
        # only while train() feeds (cluster.py)
        self.grow_allowed = conf["input_mode"] != 1

    def error(self, text):
        return TFClusterError(text)

    def status_url(self):
        port = self.conf.get("status_port", -1)
        return "http://127.0.0.1:%d/" % port if port is not None and port > 0 else None

    @property
    def elastic(self):
        """The elastic bounds (attempts.elastic_bounds), or None."""
        return self.conf.get("elastic")

    def drain_pending(self):
        """Seconds a drain this attempt asked may still take (its grace and
        the stop after it), or 0 without one."""
        grace = self.conf.get("drain_grace", 0.0)
        return (grace if grace > 0 else 25.0) + 35.0 if self.drain_reason else 0.0

    def next_size(self):
        """An elastic cluster's size for the next attempt, in nodes: every
        node when the executors are all there within ``elastic_wait``, else
        as many as there are, not fewer than ``min_nodes`` (waiting up to
        ``reservation_timeout`` for that many). Kept for the next form()."""
        el = self.conf["elastic"]
        self.planned = _elastic_size(self.sc, el, self.conf["reservation_timeout"])
        return self.planned + el["on_driver"]

    @property
    def size(self):
        """The nodes of the current (or last) attempt."""
        return self.spec.layout["num_ps"] + int(self.spec.layout["chief"]) + int(self.spec.layout["evaluator"]) + \
            self.spec.layout["num_workers"]

    def _apply_size(self, n):
        """Lay the cluster out on n executor nodes: the last workers go."""
        conf, spec, el = self.conf, self.spec, self.conf["elastic"]
        lay = dict(conf["layout"])
        lay["num_workers"] -= el["max"] - n
        spec.layout = lay
        conf["spark_ids"] = spec.spark_ids = conf["all_spark_ids"][:n]

    def form(self, attempt, first):
        conf, spec = self.conf, self.spec
        el = conf.get("elastic")
        if el is not None:
            n = self.planned if self.planned is not None else _elastic_size(self.sc, el, conf["reservation_timeout"])
            self.planned = None
            self._apply_size(n)
        lay = spec.layout
        coord = _tfos.Coordinator(lay["num_workers"], spec.secret, ps=lay["num_ps"], chief=lay["chief"],
                                  evaluator=lay["evaluator"], bind_host=conf["listen"], port=conf["port"],
                                  reservation_timeout=conf["reservation_timeout"], grace=conf["grace"],
                                  heartbeat_timeout=conf["heartbeat_timeout"], policy=self.policy,
                                  checkpoint_dir=spec.checkpoint_dir, failure_grace=conf["failure_grace"],
                                  tracker=conf.get("tracker"), framework=conf.get("framework", "tf"),
                                  resize_in_place=conf.get("resize_in_place", 0))
        if first:
            conf["port"] = int(coord.address.rsplit(":", 1)[1])
            spec.coord_addr = "%s:%d" % (conf["advertise"], conf["port"])
        coord.set_status(attempt=attempt, max_restarts=conf["max_restarts"],
                         partitions_refed=self.partitions_refed, node_log_dir=spec.log_dir)
        if el is not None:
            coord.set_status(min_nodes=el["min_nodes"], max_nodes=el["max_nodes"])
        self.driver = _Driver(coord, conf.get("status_port", -1))
        self.drain_reason = None
        if first and self.driver.status_port >= 0:
            conf["status_port"] = self.driver.status_port  # the same port on every attempt
            logger.info("status page at %s", self.status_url())
        node_errors = []
        if not first and el is None:  # an executor may have been lost: wait for Spark to replace it
            _check_executors(self.sc, len(conf["spark_ids"]), conf["reservation_timeout"], conf["local"])
        if conf["driver_ps_nodes"]:
            self.driver_agents = _start_driver_ps(spec, list(range(lay["num_ps"])))
        if conf.get("token_publisher") is not None:
            # every attempt's nodes start from the driver's newest HDFS token (tfos._spark.tokens): a
            # restarted program may find the one its executor kept expired
            spec.hdfs_token = conf["token_publisher"].current() or getattr(spec, "hdfs_token", None)
        self.node_thread = _start_node_job(self.sc, spec, conf["spark_ids"], node_errors)
        _wait_formed(self.driver, node_errors, conf["reservation_timeout"])
        if first and conf["input_mode"] == 1 and conf.get("ready_timeout", 0) > 0:
            _wait_reading(self.driver, conf["ready_timeout"])
        if el is not None:
            logger.info("cluster %s attempt %d formed with %d of %d nodes (elastic: min %d)", spec.cluster_id,
                        attempt, self.size, el["max_nodes"], el["min_nodes"])
        else:
            logger.info("cluster %s attempt %d formed", spec.cluster_id, attempt)
        # between run() and shutdown() nobody steps the attempts: a thread of
        # the attempt watches for decommissioned executors
        threading.Thread(target=self._watch_decommission, args=(self.driver,), name="tfos-decommission",
                         daemon=True).start()
        if conf.get("grow_in_place"):
            threading.Thread(target=self._watch_joins, args=(self.driver,), name="tfos-joins", daemon=True).start()

    def snapshot(self):
        d = self.driver
        if d is None:
            raise TFClusterError("the cluster has not formed")
        state, failure = d.state(), d.failure()
        cause = decision = 0
        summary = ""
        if failure:
            info = d.call(lambda: d.coord.failure_info) or {}
            cause, decision = cause_code(info.get("cause")), d.decision()
            summary = info.get("summary") or failure.splitlines()[0]
        stopped = state in (_tfos.STATE_DONE, _tfos.STATE_FAILED) and all(
            n["state"] in ("exited", "waiting") for n in d.status()["nodes"])
        drained = state == _tfos.STATE_DONE and bool(d.call(lambda: d.coord.drained))
        if drained:
            summary = "drained: %s" % self.drain_reason
        return Snapshot(state, failure, cause, decision, summary, stopped, drained=drained)

    def _watch_decommission(self, d):
        """Spark decommissions an executor (spark.decommission.enabled: a
        standalone worker given SIGPWR, a Kubernetes pod going, YARN's
        graceful decommission): the coordinator drains the cluster, so every
        node checkpoints at one step and ends before the executor goes, and
        the next attempt resumes there. Looked at once a second while the
        attempt runs."""
        grace = self.conf.get("drain_grace", 0.0)
        el = self.conf.get("elastic")
        grow = el is not None and len(self.conf["spark_ids"]) < el["max"]
        if grace < 0 and not grow:  # drain_grace=0: never drain
            return
        while True:
            time.sleep(1.0)
            try:
                if d.closed or d.state() != _tfos.STATE_RUNNING:
                    return
                gone = decommissioned_executors(self.sc) if grace >= 0 else []
                if grow and not gone and self.grow_allowed:
                    # capacity came back: grow at a checkpoint every node takes at one step
                    have, now = _usable_executors(self.sc), len(self.conf["spark_ids"])
                    if have > now:
                        reason = "%d Spark executors usable for %d of %d nodes: growing to %d" % (
                            have, now + el["on_driver"], el["max_nodes"], min(have, el["max"]) + el["on_driver"])
                        if d.call(d.coord.drain, reason, max(grace, 0.0)):
                            self.drain_reason = reason
                            logger.warning("%s: draining the cluster (every node checkpoints at one step and "
                                           "ends; the next attempt forms at the larger size)", reason)
                        return
                if not gone:
                    continue
                reason = "Spark executor%s %s decommissioned" % ("s" if len(gone) > 1 else "", ", ".join(gone))
                if d.call(d.coord.drain, reason, self.conf.get("drain_grace", 0.0)):
                    self.drain_reason = reason
                    logger.warning("%s: draining the cluster (every node checkpoints at one step and ends; the "
                                   "next attempt resumes from there)", reason)
                return
            except TFClusterError:  # shut down meanwhile
                return

    def _watch_joins(self, d):
        """TFCluster.run(grow_in_place=True): a worker lost in place is
        started again where Spark has a free task slot. A job of one task
        (in its own job group, which stop() and release() cancel) runs a
        node that joins the running cluster in the lost one's slot
        (docs/RELIABILITY.md, "Growing back in place"); while no slot is
        free the job waits, as a standby waits for capacity. JOIN_TRIES per
        slot and attempt; looked at twice a second while the attempt runs."""
        tries, jobs = {}, {}
        while True:
            time.sleep(0.5)
            try:
                if d.closed or d.state() != _tfos.STATE_RUNNING:
                    return
                nodes = d.status()["nodes"]
            except TFClusterError:  # shut down meanwhile
                return
            for n in nodes:
                eid = n["executor_id"]
                if not n.get("left") or (eid in jobs and jobs[eid].is_alive()) or tries.get(eid, 0) >= JOIN_TRIES:
                    continue
                tries[eid] = tries.get(eid, 0) + 1
                logger.info("%s:%d left the cluster in place: a node task starts in its place to join it, where "
                            "Spark has a free task slot (try %d of %d)", n["job"], n["index"], tries[eid], JOIN_TRIES)
                jobs[eid] = _start_join_job(self.sc, self.spec, eid)

    def end_feed(self):
        self.driver.call(self.driver.coord.end_feed)

    def stop(self, reason):
        d = self.driver
        if d is None or d.closed:
            return
        try:
            d.call(d.coord.stop, reason)
        except TFClusterError:
            pass
        self.sc.cancelJobGroup(node_group(self.spec))  # node tasks not started yet never start
        if self.conf.get("grow_in_place"):
            self.sc.cancelJobGroup(join_group(self.spec))

    def release(self):
        if self.driver is not None:
            self.driver.close()  # agents still connected lose their coordinator and stop
        if self.conf.get("grow_in_place"):
            self.sc.cancelJobGroup(join_group(self.spec))  # a join job still waiting for a task slot
        for p in self.driver_agents:
            try:
                p.wait(30)
            except Exception:
                p.kill()
                p.wait()
        self.driver_agents = []
        if self.node_thread is not None:
            self.node_thread.join(60)
            self.node_thread = None

    def refed(self, count):
        self.partitions_refed = count
        if self.driver is not None and not self.driver.closed:
            self.driver.call(self.driver.coord.set_status, partitions_refed=count)


def _usable_executors(sc):
    """How many of the application's executors are alive and not being
    decommissioned (a new node can start there)."""
    jsc = sc._jsc.sc()
    ids = [e for e in str(jsc.getExecutorIds().mkString(",")).split(",") if e]
    gone = set(decommissioned_executors(sc))
    return sum(1 for e in ids if e not in gone)


def _elastic_size(sc, el, reservation_timeout):
    """elastic_size with the executors the driver's scheduler lists."""
    return elastic_size(lambda: _usable_executors(sc), el, reservation_timeout, TFClusterError)

def decommissioned_executors(sc):
    """Ids of the application's executors being decommissioned, as Spark's
    scheduler knows them ([] when it cannot say: Spark Connect, an old
    Spark)."""
    try:
        jsc = sc._jsc.sc()
        ids = [e for e in str(jsc.getExecutorIds().mkString(",")).split(",") if e]
        sched = jsc.taskScheduler()
        return sorted(e for e in ids if sched.getExecutorDecommissionState(e).isDefined())
    except Exception:  # noqa: BLE001 -- py4j's errors, a scheduler without the method
        return []


#: node tasks started in one lost worker's place in an attempt, at most
#: (one whose program cannot join fails again: bounded)
JOIN_TRIES = 3


def _start_join_job(sc, spec, executor_id):
    """A join job (DriverEngine._watch_joins) in a background thread: one
    task, a node for ``executor_id`` that joins the running cluster. What
    goes wrong is logged: the cluster goes on without it."""
    rdd = sc.parallelize([executor_id], 1)
    fn = guarded(join_task(spec))

    def job():
        sc.setJobGroup(join_group(spec), "tfos node joining cluster %s" % spec.cluster_id, interruptOnCancel=True)
        try:
            for r in rdd.mapPartitions(fn).collect():
                if r.get("error"):
                    logger.warning("the node task started in %s's place could not join: %s",
                                   spec.label(executor_id), short(str(r["error"]), 500))
        except Exception as exc:  # noqa: BLE001 -- cancelled at the attempt's end, or the executor lost
            logger.info("the node task started in %s's place ended: %s", spec.label(executor_id), short(exc, 300))

    t = threading.Thread(target=job, name="tfos-join-%d" % executor_id, daemon=True)
    t.start()
    return t


def _start_node_job(sc, spec, spark_ids, errors):
    """Run the node stage in a background thread (node tasks of ps nodes, and
    of every node with InputMode.TENSORFLOW, last as long as the cluster)."""
    rdd = sc.parallelize(spark_ids, len(spark_ids))
    fn = guarded(node_task(spec))  # an executor without tfos says so (nodes.py)
    conf = sc.getConf()
    # not a barrier stage where a node may go while the others run on: a
    # barrier stage's failed task (an executor lost) kills every other task
    barrier = conf.get("spark.dynamicAllocation.enabled", "false").lower() != "true" and \
        not getattr(spec, "resize_in_place", False)

    def job():
        sc.setJobGroup(node_group(spec), "tfos nodes of cluster %s" % spec.cluster_id, interruptOnCancel=True)
        try:
            stage = rdd.barrier().mapPartitions(fn) if barrier else rdd.mapPartitions(fn)
            for r in stage.collect():
                missing = missing_of_row(r)
                if missing:
                    errors.append(SetupError(missing_module_text(missing, executors_python(conf.get))))
                elif r.get("error"):
                    errors.append(r["error"])
        except Exception as exc:
            errors.append(spark_job_error("the Spark job that starts the nodes failed", exc, conf.get))

    t = threading.Thread(target=job, name="tfos-nodes", daemon=True)
    t.start()
    return t


class SetupError(str):
    """A node stage's error that is the application's setup, not a node's
    (the executors' Python lacks tfos): it leads the cluster's error."""


def spark_job_error(what, exc, conf_get):
    """The text for a failed Spark job: a SetupError paragraph when Spark's
    error says an executor's Python lacked a module (with the first line of
    Spark's own error after it), else ``what`` and Spark's error."""
    missing = missing_in_spark_error(exc)
    if missing:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return SetupError("%s\n(%s: %s)" % (missing_module_text(missing, executors_python(conf_get)), what,
                                             short(first, 300)))
    return "%s: %s" % (what, short(exc))


def setup_errors_first(errors):
    """The errors of a node stage as one text: a SetupError alone (once,
    however many executors said it), else all of them."""
    setup = [e for e in errors if isinstance(e, SetupError)]
    if setup:
        more = len(set(setup)) - 1
        return setup[0] + (" (and %d more executors said the same of theirs)" % more if more > 0 else "")
    return "; ".join(errors)


def node_group(spec):
    """The Spark job group of a cluster's node stage."""
    return "tfos-nodes-%s" % spec.cluster_id


def join_group(spec):
    """The Spark job group of a cluster's join jobs (grow_in_place)."""
    return "tfos-joins-%s" % spec.cluster_id


def _wait_reading(driver, timeout):
    """InputMode.SPARK: wait until every fed node's program reads its feed
    (the coordinator's ``nodes[i].feed.reading``: waited on its ring or took
    rows; each agent sends a first wait at once, rows taken with its next
    heartbeat), so that the
    first train() does not share the executors' cores with the programs'
    start. Not for ps and evaluator nodes (never fed) or nodes that exited;
    ends early when the cluster failed or stopped (train() says why). At
    most ``timeout`` seconds, then run() returns and says which nodes were
    not reading: their rows wait in their rings."""
    def unread():
        if driver.failed() or driver.state() != _tfos.STATE_RUNNING:
            return []
        return ["%s:%d" % (n["job"], n["index"]) for n in driver.status()["nodes"]
                if n["job"] not in TASK_JOBS_BLOCKING and n["state"] in ("registered", "running")
                and not (n.get("feed") or {}).get("reading")]

    t0 = time.monotonic()
    try:
        wait_until(lambda: not unread(), timeout, "every fed node's program to read its feed", LOCAL)
    except WaitTimeout:
        logger.info("run() returns %g s after the cluster formed with %s not reading its feed yet (ready_timeout); "
                    "train() feeds their rings meanwhile", timeout, ", ".join(unread()[:8]) or "every node")
        return
    logger.debug("every fed node read its feed %.2f s after the cluster formed", time.monotonic() - t0)


def _wait_formed(driver, errors, timeout):
    """Wait until every node registered (the coordinator's state, in this
    process: the LOCAL schedule, so run() returns as soon as the nodes are
    there); raise what went wrong otherwise."""
    def formed():
        state = driver.state()
        if driver.failed():
            raise TFClusterError("the tfos cluster failed to start: %s" % driver.failure())
        if state in (_tfos.STATE_RUNNING, _tfos.STATE_DONE):
            return True
        if errors:
            setup = setup_errors_first(errors)
            if isinstance(setup, SetupError) or any(isinstance(e, SetupError) for e in errors):
                raise TFClusterError(setup)  # the paragraph first: the fix, not a node's failure
            raise TFClusterError("the tfos cluster failed to start: %s" % setup)
        return False

    try:
        wait_until(formed, timeout + 5, "every node to register", LOCAL)
    except WaitTimeout:
        raise TFClusterError("the tfos cluster did not form within %g s" % timeout) from None
