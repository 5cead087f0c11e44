"""Node tasks and where they run: what a Spark task does to start a tfos node
agent on its executor, and how a task tells which executor it is on.

Everything here (and in feeding.py) is executed on executors (shipped by
Spark in closures), so it only uses the standard library, tfos itself and
pyspark's TaskContext.

How a feed task finds its node. A node task binds two abstract unix-socket
names (datagram sockets, never read) and hands them to its agent, so they live
exactly as long as the agent:

- ``tfos-exec-<cluster>-<key>``: the claim. ``<key>`` is the executor's JVM
  pid; binding is atomic, so a second node of the same cluster on the same
  executor fails at once with an error that says what to change (on a local
  master all nodes share the one executor, and the claim is skipped);
- ``tfos-node-<cluster>-<key>-<executor_id>``: the tag a feed task looks for
  (a datagram ``connect`` to an abstract name succeeds only when it is bound).
"""
import errno
import json
import os
import re
import socket
import sys
import time

from .. import _tfos
from .._launch import agent_path
from .wait import LOCAL, NODE, WaitTimeout, wait_until

TASK_JOBS_BLOCKING = ("ps", "evaluator")  # node tasks of these hold their executor (TFoS does the same)


class NodeSpec(object):
    """What every node and feed task of one cluster needs (pickled by Spark)."""

    def __init__(self, cluster_id, secret, coord_addr, layout, input_mode, payload, local_master,
                 reservation_timeout, feed_mb=64, log_dir=None, tensorboard=False, tb_logdir=None,
                 default_fs="file://", heartbeat_timeout=30.0, spark_ids=None, checkpoint_dir=None,
                 hang_timeout=0.0, hand_port=False, keras="auto", max_restarts=0, webhdfs=None, hadoop_user=None):
        self.cluster_id = cluster_id
        self.secret = secret
        self.coord_addr = coord_addr
        self.layout = layout          # dict: num_ps, num_workers, chief, evaluator
        self.input_mode = input_mode  # 0 TENSORFLOW, 1 SPARK
        self.payload = payload        # cloudpickled (map_fun, tf_args)
        self.local_master = local_master
        self.reservation_timeout = reservation_timeout
        self.feed_mb = feed_mb
        self.log_dir = log_dir
        self.tensorboard = tensorboard
        self.tb_logdir = tb_logdir
        self.default_fs = default_fs
        self.heartbeat_timeout = heartbeat_timeout
        self.spark_ids = spark_ids    # executor ids started by Spark tasks (not on the driver)
        self.checkpoint_dir = checkpoint_dir  # kept across restarts (TFOS_CHECKPOINT_DIR)
        self.hang_timeout = hang_timeout      # > 0: the agent's hang watchdog (ctx.heartbeat())
        self.hand_port = hand_port            # release_port=False: map_fun holds its port (ctx.tmp_socket)
        self.keras = keras                    # the agent's --keras: which Keras tf.keras is in map_fun
        self.max_restarts = max_restarts      # the agent's --max-restarts: TORCHELASTIC_MAX_RESTARTS
        self.webhdfs = webhdfs                # TFOS_WEBHDFS: tfos.fs reaches hdfs:// through it
        self.hadoop_user = hadoop_user        # HADOOP_USER_NAME: the driver's Hadoop user (its Kerberos one)
        self.elastic = False                  # min_nodes < num_executors: executors may have no node for a while
        # an elastic cluster below its size whose client cannot see executors (Spark Connect): a feed task on
        # an executor with no node asks the coordinator for the drain that grows the cluster onto it
        self.grow_by_feed = False

    def roles(self):
        """[(job, index)] by executor id: libtfos's role table (the order of
        TensorFlowOnSpark: ps, chief, evaluator, workers)."""
        lay = self.layout
        return _tfos.layout_roles(lay["num_ps"], lay["num_workers"], bool(lay["chief"]), bool(lay["evaluator"]))

    def role(self, executor_id):
        """(job, index) of an executor id."""
        return tuple(self.roles()[executor_id])

    def total(self):
        return len(self.roles())

    def feed_ids(self):
        """Executor ids of the nodes that read a feed (chief and workers)."""
        return [i for i, (job, _) in enumerate(self.roles()) if job in ("chief", "worker")]

    def label(self, executor_id):
        job, index = self.role(executor_id)
        return "%s:%d" % (job, index)

    def tensorboard_id(self):
        """The node that runs TensorBoard: the chief, else worker 0."""
        for i in range(self.total()):
            if self.role(i)[0] == "chief":
                return i
        for i in range(self.total()):
            if self.role(i) == ("worker", 0):
                return i
        return None


def master_kind(master):
    """"local" for a master that runs every task in the driver's JVM
    (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``), "local-cluster"
    for ``local-cluster[N,C,M]`` (N executor JVMs on this machine: one node
    each, as on a cluster), else "cluster"."""
    master = (master or "").strip()
    if master.startswith("local-cluster"):
        return "local-cluster"
    if master == "local" or master.startswith("local["):
        return "local"
    return "cluster"


def local_cluster_shape(master):
    """(executors, cores each, MiB each) of a ``local-cluster[N,C,M]``
    master, or None."""
    m = re.match(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]", (master or "").strip())
    return tuple(int(g) for g in m.groups()) if m else None


# ---- where am I ---------------------------------------------------------------

def _ppid(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def _comm(pid):
    with open("/proc/%d/comm" % pid, "rb") as f:
        return f.read().strip().decode("utf-8", "replace")


def executor_jvm_pid():
    """The pid of the JVM (Spark executor, or the driver on a local master)
    this Python worker belongs to, or None when there is none above us."""
    pid = os.getpid()
    for _ in range(16):
        try:
            pid = _ppid(pid)
            if pid <= 1:
                return None
            if _comm(pid) == "java":
                return pid
        except (OSError, ValueError, IndexError):
            return None
    return None


def executor_key():
    """A name for this executor, unique on this host: its JVM's pid."""
    jvm = executor_jvm_pid()
    return str(jvm) if jvm else "pid%d" % os.getppid()


def _abstract(name):
    return "\0" + name


def _tag_name(spec, key, executor_id):
    return "tfos-node-%s-%s-%d" % (spec.cluster_id, key, executor_id)


def _bind_name(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind(_abstract(name))
    except BaseException:
        s.close()
        raise
    return s


def _name_bound(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(_abstract(name))
        return True
    except OSError:
        return False
    finally:
        s.close()


def local_nodes(spec, key=None):
    """Executor ids of this cluster's feed nodes running on this executor."""
    key = key or executor_key()
    return [i for i in spec.feed_ids() if _name_bound(_tag_name(spec, key, i))]


def host_address(coord_addr):
    """The address other nodes reach this host at: SPARK_LOCAL_IP, else the
    interface used to reach the coordinator."""
    env = os.environ.get("SPARK_LOCAL_IP")
    if env:
        return env
    host = coord_addr.rsplit(":", 1)[0]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((host, 9))
        return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        s.close()


def _task_context():
    try:
        from pyspark import TaskContext
        return TaskContext.get()
    except ImportError:
        return None


def gpu_addresses():
    """The GPUs Spark gave this task (``TaskContext.resources()['gpu']``), or None."""
    tc = _task_context()
    if tc is None:
        return None
    try:
        res = tc.resources()
    except Exception:
        return None
    gpu = res.get("gpu") if res else None
    return list(gpu.addresses) if gpu is not None else None


# ---- executors whose Python lacks tfos -------------------------------------------
#
# The most common Spark setup mistake: the executors run a Python without
# tfos (the driver's venv is not the executors' interpreter). A task function
# of tfos's is pickled by reference to tfos's modules, so such an executor
# fails in Spark's unpickler, before any code of ours runs, and the user got
# 159 lines of Java and Python traces around "No module named 'tfos'".
# guarded() ships the node stage's function inside a closure that needs only
# the standard library: it tries `import tfos` first and, when that fails,
# returns a row with what failed (structured: the ImportError's module, the
# executor's sys.executable and host), from which the driver writes one
# paragraph. missing_in_spark_error() is the fallback for failures before
# the function runs at all (an Arrow stage on an executor without pyarrow).

def guarded(fn, arrow_fields=None):
    """``fn`` (a node stage's task function) for an executor that may lack
    tfos: the returned function imports tfos first and, when it cannot,
    yields one row ``{"missing": JSON}`` (an Arrow batch of ``arrow_fields``
    with the JSON in ``missing`` when given) instead of running ``fn``.
    Read the row back with :func:`missing_of_row`."""
    from pyspark import cloudpickle  # every executor has pyspark's copy: plain pickle.loads reads it
    inner = cloudpickle.dumps(fn)
    fields = tuple(arrow_fields or ())

    def run(iterator):
        # standard library only up to the import: this closure is pickled
        # by value, and nothing in it may need tfos to be unpickled
        try:
            import tfos._tfos  # noqa: F401 (the extension too: a tfos built for another Python fails here)
        except ImportError as exc:
            import json as _json
            import socket as _socket
            import sys as _sys
            info = _json.dumps({"module": getattr(exc, "name", None) or "tfos", "python": _sys.executable,
                                "host": _socket.gethostname(), "error": "%s: %s" % (type(exc).__name__, exc)})
            if not fields:
                yield {"missing": info}
                return
            import pyarrow as _pa
            types = {"long": _pa.int64(), "string": _pa.string()}
            row = {name: (info if name == "missing" else None) for name, _ in fields}
            yield _pa.RecordBatch.from_pylist([row], schema=_pa.schema([(n, types[t]) for n, t in fields]))
            return
        import pickle as _pickle
        for out in _pickle.loads(inner)(iterator):
            yield out

    return run


def missing_of_row(row):
    """The dict a guarded task returned (module, python, host, error), or None."""
    info = row.get("missing") if isinstance(row, dict) else None
    return json.loads(info) if info else None


_NO_MODULE = re.compile(r"^(?:\S+\.)?ModuleNotFoundError: No module named '([^']+)'", re.M)


def missing_in_spark_error(exc):
    """The module a Spark job's failure says an executor's Python lacked
    (``{"module": ...}``), or None: Spark reports a Python worker's
    exception as text (the worker's traceback, last line
    ``ModuleNotFoundError: No module named 'X'``), and pyspark 4's check of
    pyarrow as its error class PACKAGE_NOT_INSTALLED."""
    text = str(exc)
    cls = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        cond = cls() if cls else None
    except Exception:
        cond = None
    if cond == "PACKAGE_NOT_INSTALLED":
        params = getattr(exc, "getMessageParameters", lambda: {})() or {}
        name = str(params.get("package_name", "")).lower()
        if name:
            return {"module": name}
    found = _NO_MODULE.findall(text)
    return {"module": found[-1]} if found else None


def executors_python(conf_get):
    """The executors' Python as Spark's settings name it (``conf_get(key)``
    returns a value or None), or None."""
    for key in ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON"):
        try:
            value = conf_get(key)
        except Exception:
            value = None
        if value:
            return "%s (%s)" % (value, key)
    return None


def missing_module_text(missing, python=None):
    """One paragraph for an executor whose Python lacks a module tfos's
    tasks need: what, where, and the three ways to fix it. ``python``: the
    executors' Python from Spark's settings, when the task could not say."""
    mod = missing.get("module") or "tfos"
    top = mod.split(".")[0]
    py = missing.get("python") or python
    where = " on host %s" % missing["host"] if missing.get("host") else ""
    exe = ("the executors' Python (%s)%s" % (py, where)) if py else ("the executors' Python%s" % where)
    what = ("tfos" if top == "tfos" else "%s, which tfos's Spark tasks need (pip install 'tfos[spark]' brings it)"
            % top)
    return ("Spark's executors cannot run tfos: %s has no module %r (%s). Install %s in the Python that "
            "the executors run, which is not necessarily the driver's (%s): set spark.pyspark.python (or "
            "spark.executorEnv.PYSPARK_PYTHON) to a Python that has it on every worker, or ship a virtual "
            "environment with the application (tfos yarn pack -o env.tar.gz, then spark-submit --archives "
            "env.tar.gz#env --conf spark.pyspark.python=./env/bin/python). See docs/SPARK.md, \"Installing tfos "
            "on the executors\"." % (exe, mod, missing.get("error") or "ModuleNotFoundError",
                                       what, sys.executable))


# ---- node tasks -----------------------------------------------------------------

def _free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _pid_alive(pid):
    """libtfos's liveness check (a zombie counts as gone)."""
    return _tfos.pid_alive(pid)


def _wait_pid_gone(pid, timeout=None):
    """Wait until the (not our child) process pid is gone; bounded by timeout
    seconds when given. True when it is gone. A pidfd makes it a blocking
    wait in the kernel; without one (old kernels), a poll."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        try:
            return wait_until(lambda: not _pid_alive(pid), timeout, "process %d to end" % pid, LOCAL)
        except WaitTimeout:
            return False
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        import select
        while _pid_alive(pid):
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if left <= 0:
                return False
            select.select([fd], [], [], left)
        return True
    finally:
        os.close(fd)


def status_node(st, executor_id):
    """Node ``executor_id`` of a coordinator status document, or None."""
    return next((nd for nd in st.get("nodes", []) if nd.get("executor_id") == executor_id), None)


def _node_state(spec, executor_id):
    st = json.loads(_tfos.query_status(spec.coord_addr, spec.secret, 5000))
    return st, status_node(st, executor_id)


def _abort(spec, executor_id, message):
    try:
        _tfos.report_abort(spec.coord_addr, spec.secret, executor_id, message, 10000)
    except Exception as exc:  # the driver is gone: nothing to tell
        sys.stderr.write("tfos: could not tell the coordinator: %s\n" % exc)
    return {"executor_id": executor_id, "error": message}


def _collision_message(spec, executor_id, key):
    tc = _task_context()
    cpus = ""
    if tc is not None:
        try:
            cpus = " (this task has spark.task.cpus=%d)" % tc.cpus()
        except Exception:
            pass
    return ("%s (executor_id %d) landed on a Spark executor (host %s, JVM pid %s) that already runs a node of "
            "this cluster%s. tfos runs one node per executor: set spark.task.cpus equal to spark.executor.cores "
            "so an executor runs one task at a time, and give the application exactly num_executors=%d "
            "executors (no dynamic allocation)"
            % (spec.label(executor_id), executor_id, socket.gethostname(), key, cpus, spec.total()))


def _claim(spec, key, wait=10.0):
    """Bind this executor's claim; None when another node holds it. After a
    restart the previous attempt's agent may still be exiting: wait a little."""
    name = "tfos-exec-%s-%s" % (spec.cluster_id, key)

    def bound():
        try:
            return _bind_name(name)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return None

    try:
        return wait_until(bound, wait, "the previous node on this executor to release %s" % name, LOCAL)
    except WaitTimeout:
        return None


def start_node(spec, executor_id, join=False):
    """Start the node agent for ``executor_id`` on this executor. Returns
    (agent pid, None) or (None, error dict). ``join``: it joins the running
    cluster in the slot of a worker lost in place (``tfos node --join``);
    what stops it is this task's failure, not the cluster's."""
    key = executor_key()
    job, _ = spec.role(executor_id)
    keep = []
    claim = tag = payload_fd = None
    try:
        if not spec.local_master:
            claim = _claim(spec, key)
            if claim is None and join:
                return None, {"executor_id": executor_id, "error": _collision_message(spec, executor_id, key)}
            if claim is None:
                return None, _abort(spec, executor_id, _collision_message(spec, executor_id, key))
            keep.append(claim.fileno())
        tag = _bind_name(_tag_name(spec, key, executor_id))
        keep.append(tag.fileno())
        payload_fd = os.memfd_create("tfos-payload", 0)
        os.write(payload_fd, spec.payload)
        keep.append(payload_fd)

        env = dict(os.environ)
        env.update({
            "TFOS_SECRET": spec.secret,
            "TFOS_PAYLOAD_FD": str(payload_fd),
            "TFOS_INPUT_MODE": str(spec.input_mode),
            "TFOS_DEFAULT_FS": spec.default_fs or "file://",
            "TFOS_EXECUTOR_KEY": key,
            # modules Spark added at run time (addPyFile, --py-files) are on
            # this worker's sys.path but not in its environment
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        })
        if getattr(spec, "keras", "env") in ("auto", "legacy") and "TFOS_HAS_TF_KERAS" not in os.environ:
            # the program runs this interpreter with this sys.path: the
            # agent's Keras decision needs no probe of its own (a Python
            # started after the cluster formed, 0.08-0.21 s on a busy machine)
            import importlib.util
            env["TFOS_HAS_TF_KERAS"] = "1" if importlib.util.find_spec("tf_keras") is not None else "0"
        env.update(getattr(spec, "env", None) or {})  # MLFLOW_TRACKING_URI, MLFLOW_RUN_ID (mlflow=)
        if "TFOS_HDFS_CREDENTIALS" in env:
            # where tfos.fs keeps a newer HDFS token than the container's, for this node's next program;
            # it starts with the driver's token of when this attempt was formed, if that one is newer
            env["TFOS_HDFS_TOKEN_CACHE"] = os.path.abspath(".tfos-hdfs-token-%s-%d" % (spec.cluster_id, executor_id))
            if getattr(spec, "hdfs_token", None):
                from .. import _hdfstokens
                _hdfstokens.keep_if_newer(_hdfstokens.Token.from_url_string(spec.hdfs_token),
                                          env["TFOS_HDFS_TOKEN_CACHE"])
        if getattr(spec, "webhdfs", None) and "TFOS_WEBHDFS" not in os.environ:
            env["TFOS_WEBHDFS"] = spec.webhdfs
        if getattr(spec, "hadoop_user", None) and "HADOOP_USER_NAME" not in os.environ:
            # the nodes act on HDFS as the application's user (under Kerberos, the principal's short
            # name, which need not be the executor's uid): /user/<it>/ is their home (TFNode.hdfs_path)
            env["HADOOP_USER_NAME"] = spec.hadoop_user
        gpus = gpu_addresses()
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        argv = [agent_path(), "node", "--coord", spec.coord_addr, "--executor-id", str(executor_id),
                "--host", host_address(spec.coord_addr), "--cluster-id", spec.cluster_id,
                "--feed-mb", str(spec.feed_mb), "--max-restarts", str(getattr(spec, "max_restarts", 0))]
        if spec.log_dir:
            argv += ["--log-dir", spec.log_dir]
        if spec.checkpoint_dir:
            argv += ["--checkpoint-dir", spec.checkpoint_dir]
        if getattr(spec, "hang_timeout", 0) > 0:
            argv += ["--hang-timeout", "%g" % spec.hang_timeout]
        if getattr(spec, "hand_port", False):
            argv += ["--hand-port"]
        if getattr(spec, "keras", "env") != "env":
            argv += ["--keras", spec.keras]
        jvm = executor_jvm_pid()
        if jvm and not spec.local_master:
            argv += ["--watch-pid", str(jvm)]
        if spec.tensorboard and executor_id == spec.tensorboard_id():
            port = _free_port()
            argv += ["--tensorboard-port", str(port)]
            env["TFOS_TENSORBOARD_PORT"] = str(port)
            if spec.tb_logdir:
                env["TFOS_TENSORBOARD_LOGDIR"] = spec.tb_logdir
        if join:
            argv += ["--join"]
        argv += ["--", sys.executable, "-m", "tfos._sparkprog"]
        try:
            # detached (own session, not our child), and a failed exec is an
            # error here and now, with its errno
            pid = _tfos.spawn_detached(argv, env, keep)
        except OSError as exc:
            return None, _abort(spec, executor_id, "cannot start the tfos node agent %s on host %s: %s"
                                % (argv[0], socket.gethostname(), exc))
    finally:
        for s in (claim, tag):
            if s is not None:
                s.close()
        if payload_fd is not None:
            os.close(payload_fd)
    return pid, None


def _wait_registered(spec, executor_id, pid):
    """Wait until the coordinator has this node (or the cluster failed, or
    the agent died). Returns None or an error message. Looks on the NODE
    schedule: every 20 ms for the first 2 s (this task holds the executor's
    core, and the first feed task waits for it: looking every 200 ms, the
    node stage ended 0.17-0.31 s after run() returned), then every 200 ms,
    for a cluster that takes long to form."""
    def settled():
        # whether the agent lives is looked at before the coordinator is
        # asked: an agent that registered, ran a program that failed at once
        # and exited between two looks has registered (its failure is the
        # cluster's, reported with the program's traceback), which only the
        # coordinator can tell
        alive = _pid_alive(pid)
        try:
            st, nd = _node_state(spec, executor_id)
        except Exception as exc:  # coordinator gone: the cluster is over
            return ("the coordinator at %s cannot be reached: %s" % (spec.coord_addr, exc),)
        if st.get("state") not in ("reserving", "running") or (nd and nd.get("state") != "waiting"):
            return (None,)
        if not alive:
            return ("the tfos node agent of %s exited before it registered with the coordinator at %s "
                    "(see this executor's stderr log)" % (spec.label(executor_id), spec.coord_addr),)
        return None

    try:
        return wait_until(settled, spec.reservation_timeout, "%s to register" % spec.label(executor_id), NODE)[0]
    except WaitTimeout:
        return None  # the coordinator's reservation timeout names the node


def start_registered(spec, executor_id):
    """start_node, then wait until the coordinator has the node (or says
    why not). Returns (agent pid, None) or (None, error dict)."""
    pid, err = start_node(spec, executor_id)
    if err:
        return None, err
    why = _wait_registered(spec, executor_id, pid)
    return (None, _abort(spec, executor_id, why)) if why else (pid, None)


def join_task(spec):
    """The function of a join job (TFCluster.run(grow_in_place=True)): a
    node started again, on whichever executor Spark gives the task, in the
    slot of the worker of the one executor id in its partition, which left
    the running cluster; the task lasts as long as the node."""

    def run(iterator):
        out = []
        for executor_id in iterator:
            pid, err = start_node(spec, executor_id, join=True)
            if err:
                out.append(err)
                continue
            _wait_pid_gone(pid)
            out.append({"executor_id": executor_id, "agent_pid": pid, "host": socket.gethostname()})
        return iter(out)

    return run


def node_task(spec):
    """The function of the node stage: one partition per executor id."""

    def run(iterator):
        out = []
        for executor_id in iterator:
            job, _ = spec.role(executor_id)
            if spec.input_mode == 1 and job not in TASK_JOBS_BLOCKING:
                # InputMode.SPARK: the executor must stay free for feed tasks
                pid, err = start_registered(spec, executor_id)
            else:
                pid, err = start_node(spec, executor_id)
                if not err:
                    _wait_pid_gone(pid)
            if err:
                out.append(err)
                continue
            out.append({"executor_id": executor_id, "agent_pid": pid, "host": socket.gethostname()})
        return iter(out)

    return run
