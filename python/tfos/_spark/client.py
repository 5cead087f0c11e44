"""The session engine of the attempt loop (attempts.py): tfos.spark.Cluster's
attempts, driven through a SparkSession only -- classic or Spark Connect,
where the client has no SparkContext, no accumulators, and the executors may
not reach the client at all.

Each attempt has a coordinator of its own: the node stage (a barrier
``mapInArrow``, session.py) starts it, detached, on the host of the first
node, and every node registers with it. The client reaches it only through
small Spark jobs (the query stage: one task that asks it for its status,
carrying a command: end the feed, stop, release); a look at the attempt is
one such job, so the loop looks on the JOB schedule. The coordinator on the
executor does not know the client's restart policy: the controller asks the
policy itself, with the cause code the status carries.
"""
import json
import os
import sys
import time

from .. import _tfos
from .._launch import ClusterError
from .._log import console_write, log as logger
from . import session as _session
from .attempts import STATES, Engine, Snapshot, cause_code, elastic_size, failure_text
from .driver import SetupError, setup_errors_first, short, spark_job_error
from .nodes import executors_python, guarded, missing_module_text, missing_of_row
from .progress import JobProgress, Ticker
from .wait import JOB, WaitTimeout, wait_until


#: failure causes after which a node's executor may be gone
LOST_CAUSES = (_tfos.CAUSE_EXECUTOR_LOST, _tfos.CAUSE_AGENT_LOST, _tfos.CAUSE_HEARTBEAT)


class SessionEngine(Engine):
    """Attempts of ``spec`` (a NodeSpec carrying Cluster's grace,
    failure_grace and attempt too) on ``spark`` (any SparkSession);
    ``lease``: seconds after which a coordinator whose client stopped asking
    stops its cluster."""

    poll = JOB

    #: seconds between two reads of the nodes' output while the client waits
    OUTPUT_EVERY = 2.0
    #: an elastic cluster's probe job (usable_executors): tasks for each node
    #: it may have, and the seconds each holds its task slot
    PROBE_TASKS_PER_NODE = 3
    PROBE_HOLD_S = 0.3

    def __init__(self, spark, spec, num_nodes, lease, checkpoint_dir, output=False):
        self.spark, self.spec, self.num_nodes = spark, spec, int(num_nodes)
        self.lease, self.checkpoint_dir = float(lease), checkpoint_dir
        self.stop_timeout = spec.grace + 60
        self.nodes = []       # the node stage's rows: executor_id, host, coord, pid, error
        self.last = None      # the coordinator's last status (a dict)
        self.released = True
        self.output = bool(output)  # bring the nodes' output to this client (show_output)
        self.logs = {}        # executor_id -> [executor key, log path, offset read up to, label]
        self.logs_read_at = 0.0
        self.read_at_end = None  # (attempt, state, failed) of the last forced read
        self.tracker = None   # the job's MLflow run (mlflow=), or None
        self.reports = {}     # (attempt, executor_id) -> (report text, when made): those sent to it
        self.elastic = None   # min_nodes's bounds (attempts.elastic_bounds, with "layout": the whole one), or None
        self.planned = None   # an elastic cluster's next size (next_size), for form()

    # -- the coordinator, through Spark jobs
    def query(self, command=None, reason=None):
        """The coordinator's status (a dict) after ``command``; raises
        ClusterError when it cannot be reached."""
        if not self.spec.coord_addr:
            raise ClusterError("the tfos cluster has no coordinator (it did not form)", 1, None)
        stage = _session.query_stage(self.spec, command, reason)
        row = self.spark.range(0, 1, 1, 1).mapInArrow(stage, _session.ddl(_session.QUERY_FIELDS)).collect()[0]
        if row["error"]:
            raise ClusterError("the cluster's coordinator at %s cannot be reached: %s" % (self.spec.coord_addr,
                                                                                           row["error"]), 1, None)
        self.last = json.loads(row["status"])
        if self.tracker is not None:
            self._track_reports(self.last)
        return self.last

    def _track_reports(self, st):
        """Each node's report this status brings that was not sent yet, to
        the MLflow run. The coordinator is on an executor: a report is seen
        at the looks (one Spark job each), the latest of each."""
        now = time.time()
        for n in st.get("nodes") or ():
            rep = n.get("report")
            if not rep or n.get("executor_id") is None:
                continue
            text = " ".join("%s=%s" % (k, v) for k, v in rep.items())
            age = float(n.get("report_age_s") or 0.0)
            key = (self.spec.attempt, int(n["executor_id"]))
            prev = self.reports.get(key)
            if prev is not None and prev[0] == text and abs(prev[1] - (now - age)) < 0.5:
                continue  # the same report, seen again
            self.reports[key] = (text, now - age)
            self.tracker.report(key[1], text, int(age * 1000))

    # -- an elastic size (Cluster's min_nodes)
    @property
    def size(self):
        """The nodes of the current (or last) attempt."""
        return self.num_nodes

    @property
    def below_size(self):
        """An elastic cluster formed on fewer nodes than its size."""
        return self.elastic is not None and self.size < self.elastic["max"]

    def usable_executors(self):
        """How many executors run this session's tasks now. Spark Connect
        lists no executors to its clients, so a probe job asks: a few short
        tasks for each node the cluster may have, each saying which
        executor ran it. A decommissioned or lost executor runs none."""
        n = self.PROBE_TASKS_PER_NODE * (self.elastic["max"] + 1)
        rows = self.spark.range(0, n, 1, n).mapInArrow(_session.probe_stage(self.PROBE_HOLD_S),
                                                       _session.ddl(_session.PROBE_FIELDS)).collect()
        return len({(r["host"], r["key"]) for r in rows})

    def next_size(self):
        """The next attempt's size (attempts.elastic_size over the probe
        job's count), kept for the next form()."""
        self.planned = elastic_size(self.usable_executors, self.elastic, self.spec.reservation_timeout, self.error)
        return self.planned

    def drain_pending(self):
        """Seconds a drain under way may still take (the coordinator's
        default grace, and the stop after it), or 0 without one."""
        if self.elastic is None or self.released or not self.spec.coord_addr:
            return 0.0
        try:
            drain = self.query().get("drain")
        except ClusterError:
            return 0.0
        return _tfos.DEFAULTS["drain_grace"] + 35.0 if drain and not drain.get("drained") else 0.0

    def _apply_size(self, n):
        """Lay the cluster out on n nodes: the last workers go. Below its
        size, a feed task on an executor with no node asks for the drain
        that grows the cluster onto it (feeding._ask_to_grow)."""
        el = self.elastic
        lay = dict(el["layout"])
        lay["num_workers"] -= el["max"] - n
        self.num_nodes = n
        self.spec.layout = lay
        self.spec.spark_ids = list(range(n))
        self.spec.grow_by_feed = n < el["max"]

    # -- Engine
    def form(self, attempt, first):
        if self.elastic is not None:
            n = self.planned if self.planned is not None else self.next_size()
            self.planned = None
            self._apply_size(n)
        n = self.num_nodes
        self.spec.attempt = attempt
        self.spec.coord_addr = None
        self.last = None
        # an executor whose Python lacks tfos says so (nodes.guarded)
        stage = guarded(_session.node_stage(self.spec, self.lease, self.lease), _session.NODE_FIELDS)
        t0 = time.monotonic()
        conf_get = self._conf_get
        job = JobProgress(self.spark)

        def waiting(secs):
            tasks = job.tasks()
            running = ("; %d of its %d tasks running" % (tasks[2], n)) if tasks else ""
            return ("forming cluster %s (attempt %d): %.0f s waiting for its node stage%s. It is a barrier stage: "
                    "Spark starts its %d tasks only when %d task slots are free at once, then each starts its node "
                    "and waits until the node registered" % (self.spec.cluster_id, attempt, secs, running, n, n))

        try:
            with job, Ticker(waiting):
                rows = self.spark.range(0, n, 1, n).mapInArrow(stage, _session.ddl(_session.NODE_FIELDS),
                                                               barrier=True).collect()
        except Exception as exc:
            text = spark_job_error("the Spark job that starts its %d nodes failed" % n, exc, conf_get)
            raise ClusterError(text if isinstance(text, SetupError) else "the tfos cluster did not form: %s" % text,
                               1, None) from exc
        rows = [r.asDict() for r in rows]
        setup = [SetupError(missing_module_text(m, executors_python(conf_get)))
                 for m in map(missing_of_row, rows) if m]
        if setup:
            raise ClusterError(setup_errors_first(setup), 1, None)
        rows = sorted(rows, key=lambda r: r["executor_id"])
        self.nodes = rows
        if rows and rows[0]["coord"]:
            self.spec.coord_addr = rows[0]["coord"]
            self.released = False
        errors = [r["error"] for r in rows if r["error"]]
        if errors or not self.spec.coord_addr:
            raise ClusterError("the tfos cluster did not form: %s" % "; ".join(errors or ["no coordinator"]), 1, None)
        timeout = self.spec.reservation_timeout + 10
        try:
            st = wait_until(lambda: self._state_in("running", "done", "failed"), timeout,
                            "the nodes of attempt %d to register with the coordinator at %s" % (
                                attempt, self.spec.coord_addr), JOB)
        except WaitTimeout as exc:
            raise ClusterError("the tfos cluster did not form: %s" % exc, 1, None) from None
        if st["state"] == "failed":
            raise ClusterError(failure_text(self.policy, st.get("failure")), 1, None)
        size = "%d nodes" % n if self.elastic is None else "%d of %d nodes (elastic: min %d)" % (
            n, self.elastic["max_nodes"], self.elastic["min_nodes"])
        logger.info("cluster %s attempt %d formed in %.1f s: %s on %s; coordinator at %s, checkpoints in %s",
                    self.spec.cluster_id, attempt, time.monotonic() - t0, size,
                    ", ".join(sorted({r["host"] for r in rows})), self.spec.coord_addr, self.checkpoint_dir)
        self.logs = {r["executor_id"]: [r["key"], r["log"], r["log_offset"] or 0, self.spec.label(r["executor_id"])]
                     for r in rows if r.get("log") and r.get("key")}
        self.logs_read_at = 0.0

    def _conf_get(self, key):
        try:
            return self.spark.conf.get(key, None)
        except Exception:  # a setting a Connect server does not show its clients
            return None

    def _state_in(self, *states):
        st = self.query()
        return st if st.get("state") in states else None

    # -- the nodes' output, brought to the client
    def log_paths(self):
        """{executor key: [(executor_id, log path)]}: what a feed stage's
        tasks stat (session.feed_stage), when the output is shown."""
        paths = {}
        if self.output:
            for eid, (key, path, _, _) in self.logs.items():
                paths.setdefault(key, []).append((eid, path))
        return paths

    def read_output(self, force=False, looked=False, sizes=None):
        """Show the nodes' output written since the last read (``[worker:0]
        line`` on this client's stdout): at most every OUTPUT_EVERY seconds,
        or now with ``force``. A barrier job of one task per executor reads
        each node's log file on its executor (session.logs_stage); the lines
        are whole and in order, each node's after the last shown. Not
        after a node was lost with its executor or host (that job would
        wait for the lost slot); ``looked``: the status was just asked.
        ``sizes`` ({executor_id: size}, what a feed job's tasks saw of the
        logs as they ended): a forced read runs its job only if one of them
        is past what was shown (a feed whose nodes printed nothing costs no
        second job)."""
        if not self.output or not self.logs:
            return
        if sizes is not None and not any(size > self.logs[eid][2] for eid, size in sizes.items()
                                         if eid in self.logs):
            return
        if force and not looked and not self.released:
            try:  # how the attempt stands now (a feed's end may be a node's loss)
                self.query()
            except ClusterError:
                return
        if cause_code((self.last or {}).get("cause")) in LOST_CAUSES:
            # a node's executor (or host) may be gone: a barrier job of one task
            # per node would wait for its slot (Spark checks every 15 s, up to
            # 40 times); the failure text carries the node's last lines
            return
        now = time.monotonic()
        if not force and now - self.logs_read_at < self.OUTPUT_EVERY:
            return
        self.logs_read_at = now
        wanted = {}
        for eid, (key, path, offset, _) in self.logs.items():
            wanted.setdefault(key, []).append((eid, path, offset))
        n = self.num_nodes
        try:
            rows = self.spark.range(0, n, 1, n).mapInArrow(
                _session.logs_stage(wanted, self.spec.local_master), _session.ddl(_session.LOG_FIELDS),
                barrier=True).collect()
        except Exception as exc:  # the session is going away: the lines stay in the nodes' log files
            logger.debug("reading the nodes' output: %s", short(exc, 300))
            return
        for r in sorted(rows, key=lambda r: r["executor_id"]):
            entry = self.logs.get(r["executor_id"])
            if entry is None or r["offset"] != entry[2]:
                continue  # read twice (a local master's executors are one): shown once
            entry[2] = r["end"]
            for line in json.loads(r["lines"]):
                console_write(sys.stdout, "[%s] %s" % (entry[3], line))

    def snapshot(self):
        try:
            st = self.query()
        except ClusterError as exc:
            if self.released:
                raise
            # the coordinator is gone while its attempt ran: its host (an
            # executor's) was lost, or it ended and lingered out unread. The
            # attempt is over (its nodes stop when they lose it): a failure
            # the policy may restart, as a lost executor
            text = "%s; its host may be lost" % exc
            return Snapshot(_tfos.STATE_FAILED, text, _tfos.CAUSE_EXECUTOR_LOST, 0, text, True, {})
        # the output up to now, before a look that ends the wait: a rank's
        # last lines come before the run ends or its failure is raised
        ending = (self.spec.attempt, st.get("state"), bool(st.get("failure")))
        over = ending[2] or ending[1] in ("done", "failed")
        self.read_output(force=over and ending != self.read_at_end, looked=True)
        if over:
            self.read_at_end = ending
        failure = st.get("failure") or ""
        state = STATES.get(st.get("state"), _tfos.STATE_RUNNING)
        rec = st.get("failure_record") or {}
        # what the restart policy compares: the same exception at the same
        # place from any node is the same failure (RestartPolicy.decide)
        record = {k: rec[k] for k in ("node", "job", "exception", "where") if rec.get(k)}
        if failure and rec.get("exit_code", -1) >= 0:
            record["exit_code"] = int(rec["exit_code"])
        drain = st.get("drain") or {}
        drained = state == _tfos.STATE_DONE and bool(drain.get("drained"))
        summary = failure.splitlines()[0] if failure else ("drained: %s" % drain.get("reason") if drained else "")
        return Snapshot(state, failure, cause_code(st.get("cause")) if failure else 0, 0, summary,
                        state in (_tfos.STATE_DONE, _tfos.STATE_FAILED), record, drained=drained)

    def end_feed(self):
        self.query("end_feed")

    def stop(self, reason):
        if self.released or not self.spec.coord_addr:
            return
        if self.last is not None and self.last.get("state") in ("stopping", "done", "failed"):
            return  # stopping by itself already: one Spark job less
        try:
            self.query("stop", reason)
        except ClusterError as exc:
            logger.warning("stopping the cluster: %s (it stops by itself within %g s: its lease runs out)",
                           short(exc, 300), self.lease)

    def release(self):
        if self.released:
            return
        self.released = True
        try:
            self.query("release")
        except Exception as exc:  # the session is gone: the lease runs out instead
            logger.debug("releasing the coordinator at %s: %s", self.spec.coord_addr, exc)

    def progress(self):
        if os.path.isdir(self.checkpoint_dir):  # where the client sees it
            return _tfos.checkpoint_progress(self.checkpoint_dir)
        return ""
