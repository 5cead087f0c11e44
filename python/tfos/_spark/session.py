"""The executors' side of tfos.spark.Cluster: the Spark stages it runs, each
a ``mapInArrow`` over a DataFrame, so that a SparkSession is all the client
needs (classic or Spark Connect; no SparkContext, no accumulators, no socket
from the executors to the client).

- the node stage (a barrier stage, one task per node): task 0 starts the
  cluster's coordinator (``tfos coordinator``, detached, on its host), every
  task learns its address through ``allGather`` and starts its node agent as
  TFCluster's node tasks do (nodes.py);
- feed and predict stages: each task feeds its partition to the node on its
  executor (feeding.py) and returns its outcome, or the rows with the node's
  results appended, as Arrow;
- the query stage: one task asks the coordinator for its status, carrying a
  command (end the feed, stop, release, drain);
- the probe stage (an elastic cluster's): short tasks that say which
  executor ran them, so that the client, which cannot list executors over
  Spark Connect, learns how many there are.

Every one of them renews the client's lease on the coordinator (``tfos
coordinator --lease``): when no stage of the client's has asked for
``lease`` seconds, the client is gone and the coordinator stops the cluster.
"""
import json
import os
import shutil
import socket
import tempfile
import threading
import time

from .. import _tfos
from .._launch import agent_path
from .feeding import _feed_one, _skip_arrow_rows, infer_partition
from .nodes import _task_context, executor_key, start_registered
from .wait import LOCAL, WaitTimeout, wait_until

NODE_FIELDS = (("executor_id", "long"), ("host", "string"), ("coord", "string"), ("pid", "long"),
               ("error", "string"), ("key", "string"), ("log", "string"), ("log_offset", "long"),
               ("missing", "string"))  # key: the executor's (JVM pid); log: the node's log file; missing: guarded's
LOG_FIELDS = (("executor_id", "long"), ("offset", "long"), ("end", "long"), ("lines", "string"))
FEED_FIELDS = (("partition", "long"), ("state", "string"), ("info", "string"), ("rows", "long"),
               ("log_sizes", "string"))
QUERY_FIELDS = (("status", "string"), ("error", "string"))
PROBE_FIELDS = (("host", "string"), ("key", "string"))


def ddl(fields):
    """A Spark DDL schema string of (name, type) pairs."""
    return ", ".join("%s %s" % f for f in fields)


def _batch(fields, rows):
    import pyarrow as pa
    types = {"long": pa.int64(), "string": pa.string()}
    schema = pa.schema([(name, types[t]) for name, t in fields])
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _host_ip():
    """The address the other executors reach this one at."""
    env = os.environ.get("SPARK_LOCAL_IP")
    if env:
        return env
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def start_coordinator(spec, lease, linger, timeout=30.0):
    """Start the cluster's coordinator on this host (detached: it outlives
    this task, and ends when the cluster is over or the lease runs out);
    returns its address. ``spec`` carries Cluster's grace, failure_grace,
    attempt and framework beside the NodeSpec fields."""
    lay = spec.layout
    tmp = tempfile.mkdtemp(prefix="tfos-coord-")
    path = os.path.join(tmp, "address")
    try:
        argv = [agent_path(), "coordinator", "--cluster-id", spec.cluster_id, "--workers", str(lay["num_workers"]),
                "--ps", str(lay["num_ps"]),
                "--listen", "%s:0" % _host_ip(), "--address-file", path, "--lease", "%g" % lease,
                "--linger", "%g" % linger, "--reservation-timeout", "%g" % spec.reservation_timeout,
                "--heartbeat-timeout", "%g" % spec.heartbeat_timeout, "--grace", "%g" % spec.grace,
                "--failure-grace", "%g" % spec.failure_grace, "--attempt", str(spec.attempt),
                "--framework", getattr(spec, "framework", "tf")]
        if lay["chief"]:
            argv.append("--chief")
        pid = _tfos.spawn_detached(argv, dict(os.environ, TFOS_SECRET=spec.secret), [])
        def listening():
            if os.path.exists(path):
                return True
            if not _tfos.pid_alive(pid):
                raise RuntimeError("%s exited before it listened (see this executor's stderr)" % argv[0])
            return False

        try:
            wait_until(listening, timeout, "%s to listen" % argv[0], LOCAL)
        except WaitTimeout:
            raise RuntimeError("%s did not listen within %g s" % (argv[0], timeout)) from None
        with open(path) as f:
            return f.read().strip()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Renewer(object):
    """While a task runs: renew the client's lease (a status query to the
    coordinator) every ``interval`` seconds, at most 2 s apart, and tell
    why the cluster is over (``reason()``: None while it runs): a task
    waiting on a node stops waiting then."""

    def __init__(self, spec, interval):
        self.spec, self.interval = spec, min(2.0, max(0.5, float(interval)))
        self.done = threading.Event()
        self.failure = None
        self.thread = threading.Thread(target=self._loop, name="tfos-lease", daemon=True)

    def reason(self):
        """None, or why the cluster is over."""
        return self.failure

    def _loop(self):
        while not self.done.wait(self.interval):
            try:
                st = json.loads(_tfos.query_status(self.spec.coord_addr, self.spec.secret, 5000))
            except Exception as exc:  # the cluster is over: nothing to renew
                self.failure = "the coordinator cannot be reached: %s" % exc
                return
            if st.get("failure") or st.get("state") in ("done", "failed"):
                self.failure = st.get("failure") or "the cluster ended"
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(6)


def node_stage(spec, lease, linger):
    """The barrier stage that forms the cluster: one task per node."""

    def run(batches):
        from pyspark import BarrierTaskContext
        ctx = BarrierTaskContext.get()
        for _ in batches:
            pass
        part = ctx.partitionId()
        coord = err = ""
        if part == 0:
            try:
                coord = start_coordinator(spec, lease, linger)
            except Exception as exc:
                err = "the tfos coordinator could not start on host %s: %s" % (socket.gethostname(), exc)
        coord, err = json.loads(ctx.allGather(json.dumps([coord, err]))[0])
        row = {"executor_id": part, "host": socket.gethostname(), "coord": coord, "pid": 0, "error": err or None,
               "key": executor_key()}
        if spec.log_dir:
            # where the node's output goes (its agent appends to it), and how
            # much an earlier cluster of this executor wrote there: the client
            # reads it from here on (logs_stage)
            path = os.path.abspath(os.path.join(spec.log_dir, "%s-%d.log" % spec.role(part)))
            row["log"] = path
            row["log_offset"] = os.path.getsize(path) if os.path.exists(path) else 0
        if coord:
            spec.coord_addr = coord
            pid, failed = start_registered(spec, part)
            row["pid"] = pid or 0
            if failed:
                row["error"] = failed["error"]
        yield _batch(NODE_FIELDS, [row])

    return run


class _Recorder(object):
    """The outcome of this task's partition (feeding._feed_one reports it as
    to an accumulator; here it goes back in the task's result)."""

    def __init__(self):
        self.value = {}

    def add(self, outcome):
        self.value.update(outcome)


def _log_sizes(logs):
    """{executor_id: size} of the log files of this executor's nodes, of
    ``logs`` {executor key: [(executor_id, path)]}, as JSON (a stat each)."""
    sizes = {}
    for eid, path in (logs or {}).get(executor_key(), ()):
        try:
            sizes[eid] = os.stat(path).st_size
        except OSError:
            pass
    return json.dumps(sizes)


def feed_stage(spec, feed_timeout, lease, skip=(), offsets=None, logs=None):
    """The train stage: each task feeds its partition (Arrow record batches
    as Spark hands them over) to the node on its executor and returns one
    row: partition, state (done, terminated, aborted, skipped; 'before' for
    a partition in ``skip``, delivered before), info, rows, and the sizes
    its executor's node logs had when it ended (``logs``: see _log_sizes;
    the client reads the nodes' output after the job only if one grew). Of
    a partition in ``offsets``, the first rows are in a checkpoint and are
    not fed."""
    skip = frozenset(skip)
    offsets = dict(offsets or {})

    def run(batches):
        tc = _task_context()
        part = tc.partitionId() if tc is not None else 0
        if part in skip:
            yield _batch(FEED_FIELDS, [{"partition": part, "state": "before", "info": None, "rows": 0,
                                        "log_sizes": "{}"}])
            return
        rec = _Recorder()
        with Renewer(spec, lease / 4.0) as renewer:
            rows = _feed_one(spec, _skip_arrow_rows(batches, offsets.get(part, 0)), feed_timeout, rec, True,
                             renewer.reason)
        state, info = rec.value.get(part, ("done", rows))
        yield _batch(FEED_FIELDS, [{"partition": part, "state": state, "info": None if state == "done" else
                                    str(info), "rows": rows or 0, "log_sizes": _log_sizes(logs)}])

    return run


def _pyval(v):
    return v.tolist() if hasattr(v, "tolist") else v


def _result_columns(chunks, fields):
    """Arrow arrays, one per (name, arrow type) in fields, from the node's
    results (chunks, as its batch_results calls sent them; one result per
    row: a value with one field, else a tuple/list or a dict by name)."""
    import numpy as np
    import pyarrow as pa
    if len(fields) == 1:
        t = fields[0][1]
        try:  # the fast path: results numpy can hold as one flat array, cast to the column's type
            arr = np.concatenate([np.asarray(c) for c in chunks])  # an array chunk is itself, not copied
            if arr.ndim == 1 and arr.dtype != object:
                return [pa.array(arr).cast(t)]
        except (ValueError, TypeError, NotImplementedError, pa.ArrowException):
            pass  # ragged, nested or not castable as a whole: value by value below, which names the bad one
    results = [r for c in chunks for r in c]
    if len(fields) == 1:
        return [pa.array([_pyval(r) for r in results], type=fields[0][1])]
    cols = []
    for i, (name, t) in enumerate(fields):
        cols.append(pa.array([_pyval(r[name] if isinstance(r, dict) else r[i]) for r in results], type=t))
    return cols


def _first(chunks):
    """The first result of a partition's chunks (None if there is none)."""
    for c in chunks:
        if len(c):
            return c[0]
    return None


def predict_stage(spec, feed_timeout, results_timeout, out_fields, lease):
    """The predict stage: each task feeds its partition to the node on its
    executor and yields the partition's rows with the node's results
    appended as the columns ``out_fields`` ([(name, Spark DataType)])."""

    def run(batches):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type
        fields = [(name, to_arrow_type(dt)) for name, dt in out_fields]
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        with Renewer(spec, lease / 4.0) as renewer:
            results = infer_partition(spec, batches, feed_timeout, results_timeout, arrow=True,
                                      abort=renewer.reason, chunks=True)
        table = pa.Table.from_batches(batches)
        try:
            cols = _result_columns(results, fields)
        except (KeyError, IndexError, TypeError, ValueError, pa.ArrowException) as exc:
            tc = _task_context()
            raise ValueError("partition %d: the node's results do not fit the output columns %s: %s (first "
                             "result: %r)" % (tc.partitionId() if tc else 0,
                                              ", ".join("%s %s" % (n, t) for n, t in fields), exc,
                                              _first(results))) from exc
        for (name, _), col in zip(fields, cols):
            table = table.append_column(name, col)
        for rb in table.to_batches():
            yield rb

    return run


#: the most a logs task reads of one node's log at a time
LOG_READ_MAX = 256 * 1024


def _tf_noise():
    """tfos.quiet's test for TensorFlow's lines at load that the node agent
    keeps off its console (absl's notice, "Could not find cuda drivers",
    "failed call to cuInit"); they stay in the log file, and the client does
    not show them either. None where they are shown (a driver,
    TF_CPP_MIN_LOG_LEVEL=0)."""
    from .. import quiet
    return quiet.is_noise if quiet.applies_here() else None


def logs_stage(wanted, local_master):
    """The nodes' output since the client last read it (the client shows it
    with each node's name: the programs' stdout and stderr are the
    executors'). A barrier stage of one task per executor: each reads the
    log files of the nodes on its own executor, ``wanted`` {executor key:
    [(executor_id, path, offset)]}, from ``offset``, whole lines only, at
    most LOG_READ_MAX bytes a node; returns (executor_id, offset, end, lines
    as a JSON list). On a local master every task is on the one executor:
    task 0 reads."""

    def run(batches):
        for _ in batches:
            pass
        tc = _task_context()
        rows = []
        noise = _tf_noise()
        if not (local_master and tc is not None and tc.partitionId() != 0):
            for eid, path, offset in wanted.get(executor_key(), ()):
                try:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        data = f.read(LOG_READ_MAX)
                except OSError:
                    continue
                cut = data.rfind(b"\n") + 1  # a line still being written waits for the next read
                if cut:
                    lines = data[:cut].decode("utf-8", "replace").splitlines()
                    if noise is not None:
                        lines = [line for line in lines if not noise(line)]
                    rows.append({"executor_id": eid, "offset": offset, "end": offset + cut,
                                 "lines": json.dumps(lines)})
        yield _batch(LOG_FIELDS, rows)

    return run


def query_stage(spec, command=None, reason=None):
    """One task: the coordinator's status JSON after ``command`` (None: a
    query; it renews the lease), or the error that kept it from answering."""

    def run(batches):
        for _ in batches:
            pass
        try:
            row = {"status": _tfos.query_status(spec.coord_addr, spec.secret, 10000, command, reason),
                   "error": None}
        except Exception as exc:
            row = {"status": None, "error": "%s (from host %s)" % (exc, socket.gethostname())}
        yield _batch(QUERY_FIELDS, [row])

    return run


def probe_stage(hold):
    """One row per task: the executor that ran it (host, JVM pid), after it
    held its task slot ``hold`` seconds, so that a job of several tasks per
    executor spreads over all of them (Spark offers a free slot of any
    executor the next task)."""

    def run(batches):
        for _ in batches:
            pass
        time.sleep(hold)
        yield _batch(PROBE_FIELDS, [{"host": socket.gethostname(), "key": executor_key()}])

    return run
