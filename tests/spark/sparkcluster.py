"""A real Spark standalone cluster on 127.0.0.1 for integration tests.

Started from the pip-installed pyspark (which ships ``bin/spark-class`` but no
``sbin/`` scripts): one master and two workers, each worker 1 core and 1 GiB.

    from sparkcluster import SparkCluster

    with SparkCluster() as cluster:          # start(), then stop() on exit
        spark = cluster.spark_session("my-test")
        ...
        spark.stop()

Everything the cluster writes (logs, worker dirs, local dirs, conf dir) lives
under a temporary directory it owns (``cluster.tmp_dir``) that ``stop()``
removes unless ``keep_tmp=True`` (or the environment sets
``TFOS_SPARK_KEEP_TMP=1``).

Every JVM is started in its own session/process group, and every process of
the cluster (master, workers, executors launched by workers, Python workers of
the executors) inherits the environment variable ``TFOS_SPARKCLUSTER`` set to
the cluster's temp dir; ``stop()`` kills the process groups and then scans
/proc for that marker to make sure nothing of this cluster survived.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional

HOST = "127.0.0.1"
MARKER_ENV = "TFOS_SPARKCLUSTER"
# Every JVM of a test cluster compiles with C1 only: a test's JVMs live
# seconds to minutes, and C2's compiler threads cost more CPU than they
# save. Measured on 2 cores: a cluster, two sessions and two small jobs took
# 111-113 CPU s with the default, 62 with this (docs/TESTING.md).
JVM_OPTS = "-XX:TieredStopAtLevel=1"

__all__ = [
    "SparkCluster",
    "SparkClusterError",
    "free_port",
    "find_java_home",
    "pyspark_home",
    "cluster_processes",
    "shutdown_gateway",
    "driver_tmp_dir",
    "restore_env",
    "write_jvm_defaults",
]


class SparkClusterError(RuntimeError):
    """The cluster failed to start or to stop cleanly."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _free_ports(n: int) -> List[int]:
    # Hold all sockets open together so the n ports are distinct.
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pyspark_home() -> str:
    """SPARK_HOME of the pip-installed pyspark (the package directory)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def find_java_home() -> str:
    """$JAVA_HOME if set, else derived from the ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return home
    java = shutil.which("java")
    if not java:
        raise SparkClusterError("no JAVA_HOME and no java on PATH")
    # /usr/bin/java -> /etc/alternatives/java -> /usr/lib/jvm/X/bin/java
    return os.path.dirname(os.path.dirname(os.path.realpath(java)))


def write_jvm_defaults(conf_dir) -> None:
    """A spark-defaults.conf in conf_dir (a spark-submit's SPARK_CONF_DIR)
    that gives the application's driver and executors JVM_OPTS."""
    with open(os.path.join(str(conf_dir), "spark-defaults.conf"), "w") as f:
        f.write("spark.driver.extraJavaOptions %s\nspark.executor.extraJavaOptions %s\n" % (JVM_OPTS, JVM_OPTS))


def _read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def cluster_processes(marker: str, pgids: Optional[List[int]] = None) -> List[Dict]:
    """Live processes belonging to a cluster: those whose environment carries
    ``TFOS_SPARKCLUSTER=<marker>`` (inherited by everything the daemons
    start) or whose process group is one of ``pgids``. Zombies are ignored (they are
    gone once their parent reaps them). Returns dicts with pid and cmdline."""
    env_needle = f"{MARKER_ENV}={marker}".encode() + b"\0"
    found = []
    me = os.getpid()
    pgids = set(pgids or [])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        stat = _read_proc(pid, "stat")
        if not stat:
            continue
        # state is the field after "(comm)"; comm may contain spaces/parens.
        after = stat[stat.rfind(b")") + 2:].split()
        if not after or after[0] in (b"Z", b"X"):
            continue
        cmdline = _read_proc(pid, "cmdline")
        environ = _read_proc(pid, "environ")
        pgid = int(after[2]) if len(after) > 2 else None
        # Not "marker in cmdline": the driver's JVM may mention the temp dir
        # in its --conf arguments, and it is not the cluster's to kill.
        if env_needle in environ + b"\0" or (pgid is not None and pgid in pgids):
            found.append(
                {"pid": pid, "cmdline": cmdline.replace(b"\0", b" ").decode(errors="replace").strip()}
            )
    return found


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGTERM the child when the thread that
    forked it dies (PR_SET_PDEATHSIG survives the exec of spark-class and of
    java). A safety net for a test process killed with SIGKILL; stop() is the
    normal path."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


_driver_tmp: Optional[str] = None


def driver_tmp_dir() -> str:
    """java.io.tmpdir of this process's driver JVM: one per Python process
    (the driver JVM outlives clusters), removed by shutdown_gateway(). Spark
    leaves an empty /tmp/spark-* dir behind otherwise."""
    global _driver_tmp
    if _driver_tmp is None or not os.path.isdir(_driver_tmp):
        _driver_tmp = tempfile.mkdtemp(prefix=f"tfos-spark-driver-{os.getpid()}-")
        atexit.register(_atexit_shutdown_gateway)
    return _driver_tmp


def _atexit_shutdown_gateway() -> None:
    with contextlib.suppress(Exception):
        shutdown_gateway()


def shutdown_gateway(timeout: float = 30.0) -> None:
    """Stop the active SparkContext (if any) and end this process's py4j
    gateway JVM (the driver JVM), waiting for it to exit. pyspark otherwise
    keeps that JVM until the Python process ends. A later SparkSession
    launches a new gateway."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return
    if SparkContext._active_spark_context is not None:
        with contextlib.suppress(Exception):
            SparkContext._active_spark_context.stop()
    global _driver_tmp
    gw = SparkContext._gateway
    if gw is None:
        if _driver_tmp:
            shutil.rmtree(_driver_tmp, ignore_errors=True)
            _driver_tmp = None
        return
    proc = getattr(gw, "proc", None)
    with contextlib.suppress(Exception):
        gw.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the gateway JVM exits on EOF of its stdin
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    if _driver_tmp:
        shutil.rmtree(_driver_tmp, ignore_errors=True)
        _driver_tmp = None


def restore_env(saved: Dict[str, Optional[str]]) -> None:
    """Put back the environment variables of ``saved`` ({name: value, or
    None for one that was not set})."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _tail(path: str, n: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError as e:
        return f"<cannot read {path}: {e}>"


class ConnectServer:
    """A Spark Connect server started by ``SparkCluster.connect_server``."""

    def __init__(self, cluster: "SparkCluster", label: str, port: int):
        self.cluster, self.label, self.port = cluster, label, port
        self.url = f"sc://{HOST}:{port}"
        self.proc = cluster._procs[label]

    def wait_ready(self, timeout: float) -> None:
        """Until a client session answers a query (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SparkClusterError(f"the Spark Connect server exited with {self.proc.returncode}:\n"
                                        + _tail(self.cluster._logs[self.label]))
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), timeout=1):
                return
            time.sleep(0.5)
        self.stop()
        raise SparkClusterError(f"the Spark Connect server did not listen on {HOST}:{self.port} within "
                                f"{timeout:g} s:\n" + _tail(self.cluster._logs[self.label]))

    def session(self):
        """A Spark Connect client session to this server (``spark.stop()``
        ends it; the server and its executors stay)."""
        from pyspark.sql import SparkSession
        return SparkSession.builder.remote(self.url).getOrCreate()

    def stop(self, term_timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(term_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


class SparkCluster:
    """Standalone master + ``n_workers`` workers on 127.0.0.1.

    Attributes (valid after ``start()``): ``master_url`` (spark://127.0.0.1:P),
    ``webui_url`` (http://127.0.0.1:W), ``log_dir``, ``tmp_dir``,
    ``start_seconds`` / ``stop_seconds`` (how long start()/stop() took).
    """

    def __init__(
        self,
        n_workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        python: Optional[str] = None,
        keep_tmp: Optional[bool] = None,
        die_with_parent: bool = True,
        worker_opts=None,
        worker_env=None,
    ):
        self.n_workers = n_workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.python = python or sys.executable
        if keep_tmp is None:
            keep_tmp = os.environ.get("TFOS_SPARK_KEEP_TMP", "") not in ("", "0")
        self.keep_tmp = keep_tmp
        self.die_with_parent = die_with_parent
        # Extra JVM options (SPARK_WORKER_OPTS) and environment for the
        # workers, e.g. Spark's resource scheduling:
        #   worker_opts="-Dspark.worker.resource.gpu.amount=1 "
        #               "-Dspark.worker.resource.gpu.discoveryScript=/path/gpus.sh"
        # Each is one value for every worker, or a list with one per worker.
        self.worker_opts = worker_opts
        self.worker_env = worker_env
        self.spark_home = pyspark_home()
        self.java_home = find_java_home()
        self.tmp_dir: Optional[str] = None
        self.log_dir: Optional[str] = None
        self.master_url: Optional[str] = None
        self.webui_url: Optional[str] = None
        self.master_port: Optional[int] = None
        self.master_webui_port: Optional[int] = None
        self.worker_webui_ports: List[int] = []
        self.start_seconds: Optional[float] = None
        self.stop_seconds: Optional[float] = None
        self._procs: Dict[str, subprocess.Popen] = {}
        self._logs: Dict[str, str] = {}
        self._log_files = []
        self._stopped = False
        self._started = False

    # ----------------------------------------------------------------- env
    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        # Drop anything that could point the daemons at another Spark/config.
        for k in ("SPARK_CONF_DIR", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT",
                  "SPARK_WORKER_INSTANCES", "PYSPARK_SUBMIT_ARGS",
                  "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
            env.pop(k, None)
        conf_dir = os.path.join(self.tmp_dir, "conf")
        os.makedirs(conf_dir, exist_ok=True)
        env.update({
            MARKER_ENV: self.tmp_dir,
            "SPARK_HOME": self.spark_home,
            "JAVA_HOME": self.java_home,
            "SPARK_CONF_DIR": conf_dir,  # empty: no stray spark-defaults/spark-env
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_LOCAL_DIRS": os.path.join(self.tmp_dir, "local"),
            "SPARK_WORKER_DIR": os.path.join(self.tmp_dir, "work"),
            "SPARK_LOG_DIR": self.log_dir,
            "SPARK_PID_DIR": self.tmp_dir,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS,  # the master and the workers
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
            "PYTHONHASHSEED": "0",
        })
        os.makedirs(env["SPARK_LOCAL_DIRS"], exist_ok=True)
        return env

    def _per_worker(self, value, i: int):
        if isinstance(value, (list, tuple)):
            return value[i] if i < len(value) else None
        return value

    def _worker_env(self, env: Dict[str, str], i: int) -> Dict[str, str]:
        """The environment of worker i: the cluster's, plus worker_opts and
        worker_env (unchanged when neither is given)."""
        opts = self._per_worker(self.worker_opts, i)
        extra = self._per_worker(self.worker_env, i)
        if not opts and not extra:
            return env
        env = dict(env)
        if opts:
            env["SPARK_WORKER_OPTS"] = opts if isinstance(opts, str) else " ".join(opts)
        if extra:
            env.update({k: str(v) for k, v in extra.items()})
        return env

    def _spawn(self, name: str, args: List[str], env: Dict[str, str], cwd: str, tool: str = "spark-class") -> None:
        log = os.path.join(self.log_dir, f"{name}.log")
        f = open(log, "ab")
        self._log_files.append(f)
        self._logs[name] = log
        cmd = [os.path.join(self.spark_home, "bin", tool)] + args
        f.write(("+ " + " ".join(cmd) + "\n").encode())
        f.flush()
        # start_new_session: own session and process group (pgid == pid), so
        # the worker's executors and their Python workers can be killed as a
        # group. spark-class execs java, so the pid is the JVM's.
        # die_with_parent: the JVMs get SIGTERM if this thread dies (so
        # only pass it when start() runs in a long-lived thread, e.g. main).
        preexec = None
        if self.die_with_parent and threading.current_thread() is threading.main_thread():
            preexec = _die_with_parent
        self._procs[name] = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            env=env, cwd=cwd, start_new_session=True, close_fds=True,
            preexec_fn=preexec,
        )

    # ---------------------------------------------------------------- start
    def start(self, timeout: float = 90.0) -> "SparkCluster":
        if self._started:
            raise SparkClusterError("already started (a SparkCluster starts once)")
        t0 = time.monotonic()
        self.tmp_dir = tempfile.mkdtemp(prefix="tfos-sparkcluster-")
        self._started = True
        # Stop at interpreter exit if the caller forgot (or crashed before) stop().
        atexit.register(self._atexit_stop)
        self.log_dir = os.path.join(self.tmp_dir, "logs")
        os.makedirs(self.log_dir)
        work_dir = os.path.join(self.tmp_dir, "work")
        os.makedirs(work_dir)
        env = self._env()

        ports = _free_ports(2 + self.n_workers)
        self.master_port, self.master_webui_port = ports[0], ports[1]
        self.worker_webui_ports = ports[2:]
        self.master_url = f"spark://{HOST}:{self.master_port}"
        self.webui_url = f"http://{HOST}:{self.master_webui_port}"
        try:
            self._spawn("master", [
                "org.apache.spark.deploy.master.Master",
                "--host", HOST, "--port", str(self.master_port),
                "--webui-port", str(self.master_webui_port),
            ], env, self.tmp_dir)
            for i, wport in enumerate(self.worker_webui_ports):
                wdir = os.path.join(work_dir, f"worker{i}")
                os.makedirs(wdir)
                self._spawn(f"worker{i}", [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", HOST, "--cores", str(self.worker_cores),
                    "--memory", self.worker_memory, "--webui-port", str(wport),
                    "--work-dir", wdir, self.master_url,
                ], self._worker_env(env, i), wdir)
            self._wait_alive(t0 + timeout)
        except BaseException:
            # Never leave half a cluster behind (the error carries the log
            # tails; TFOS_SPARK_KEEP_TMP=1 keeps the whole log dir).
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def worker_pid(self, i: int) -> int:
        """The pid (and process group) of worker i's JVM launcher."""
        return self._procs[f"worker{i}"].pid

    def restart_worker(self, i: int, timeout: float = 60.0) -> None:
        """Stop worker i (its executors with it) and start a fresh one in
        its place, with the same settings; returns once the master counts
        every worker alive again (bounded)."""
        name = f"worker{i}"
        p = self._procs[name]
        before = {w.get("id") for w in self.alive_workers()}
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(15)
        wdir = os.path.join(self.tmp_dir, "work", name)
        self._spawn(name, [
            "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--cores", str(self.worker_cores),
            "--memory", self.worker_memory, "--webui-port", "0",
            "--work-dir", wdir, self.master_url,
        ], self._worker_env(self._env(), i), wdir)
        deadline = time.monotonic() + timeout
        while True:
            alive = {w.get("id") for w in self.alive_workers()}
            if len(alive) >= self.n_workers and alive - before:
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(f"{name} did not come back within {timeout:g} s\n" + self.log_tails())
            time.sleep(0.25)

    def heal(self, timeout: float = 60.0) -> List[str]:
        """Restart the workers a test left dead or decommissioned, so that
        one failed test does not fail every later one for lack of
        executors. A worker whose process exited is restarted; when the
        master still counts fewer than n_workers ALIVE, worker 1 (the one
        tests take away, by convention) is. Returns what it restarted."""
        if not self._procs:
            return []   # attached: not ours to restart
        healed = []
        for i in range(self.n_workers):
            if self._procs[f"worker{i}"].poll() is not None:
                self.restart_worker(i, timeout)
                healed.append(f"worker{i} (exited)")
        if len(self.alive_workers()) < self.n_workers:
            self.restart_worker(self.n_workers - 1, timeout)
            healed.append(f"worker{self.n_workers - 1} (not ALIVE at the master)")
        return healed

    @classmethod
    def attach(cls, master_url: str, tmp_dir: Optional[str] = None, n_workers: int = 2,
               worker_cores: int = 1) -> "SparkCluster":
        """A handle on a cluster started elsewhere (e.g. by the test process,
        for a driver running in a subprocess): spark_session() works, stop()
        does nothing."""
        c = cls(n_workers=n_workers, worker_cores=worker_cores)
        c.master_url, c.tmp_dir = master_url, tmp_dir
        return c

    def master_state(self, timeout: float = 2.0) -> dict:
        """The master's /json/ status (workers, activeapps, ...)."""
        with urllib.request.urlopen(self.webui_url + "/json/", timeout=timeout) as r:
            return json.load(r)

    def alive_workers(self) -> List[dict]:
        return [w for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE"]

    def _wait_alive(self, deadline: float) -> None:
        last_err = "no answer yet"
        while True:
            for name, p in self._procs.items():
                if p.poll() is not None:
                    raise SparkClusterError(
                        f"{name} exited with {p.returncode} during start\n" + self.log_tails())
            try:
                alive = self.alive_workers()
                if len(alive) >= self.n_workers:
                    return
                last_err = f"{len(alive)}/{self.n_workers} workers ALIVE"
            except (urllib.error.URLError, OSError, ValueError) as e:
                last_err = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"cluster not ready before timeout ({last_err})\n" + self.log_tails())
            time.sleep(0.25)

    def log_tails(self, n: int = 30) -> str:
        out = []
        for name, path in self._logs.items():
            out.append(f"----- {name}: {path} (last {n} lines) -----\n{_tail(path, n)}")
        return "\n".join(out)

    # ----------------------------------------------------------------- stop
    def _pgids(self) -> List[int]:
        return [p.pid for p in self._procs.values()]  # pgid == pid (new session)

    def _kill_all(self, term_timeout: float = 15.0) -> None:
        # Workers first (their shutdown kills their executors), then master.
        order = [n for n in self._procs if n != "master"] + (["master"] if "master" in self._procs else [])
        for name in order:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._procs[name].pid, signal.SIGTERM)
        deadline = time.monotonic() + term_timeout
        for name in order:
            p = self._procs[name]
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        # SIGKILL whatever is left in the groups (JVMs that ignored SIGTERM,
        # executors or Python daemons that outlived their parents).
        for pg in self._pgids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pg, signal.SIGKILL)
        for p in self._procs.values():
            p.wait(timeout=30)
        # Stragglers with the marker outside our groups (should not happen).
        deadline = time.monotonic() + 10
        while True:
            left = cluster_processes(self.tmp_dir, self._pgids())
            if not left:
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(f"processes of the cluster survived stop(): {left}")
            for proc in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc["pid"], signal.SIGKILL)
            time.sleep(0.2)

    def _close_logs(self) -> None:
        for f in self._log_files:
            with contextlib.suppress(Exception):
                f.close()
        self._log_files = []

    def stop(self, term_timeout: float = 15.0) -> None:
        """SIGTERM every process group, SIGKILL after ``term_timeout``, reap,
        verify no process of the cluster remains, remove the temp dir."""
        if self._stopped or not self._started:
            return  # never started here (or attach()ed): nothing to stop
        t0 = time.monotonic()
        try:
            self._kill_all(term_timeout)
        finally:
            self._stopped = True
            self._close_logs()
            self.stop_seconds = time.monotonic() - t0
        atexit.unregister(self._atexit_stop)
        if not self.keep_tmp and self.tmp_dir:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _atexit_stop(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def remaining_processes(self) -> List[Dict]:
        """Processes of this cluster still alive (empty after stop())."""
        return cluster_processes(self.tmp_dir, self._pgids()) if self._started else []

    def __enter__(self) -> "SparkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -------------------------------------------------------------- session
    def spark_conf(self, app_name: str, **conf) -> Dict[str, str]:
        """The SparkConf entries spark_session() uses (``conf`` overrides;
        keys may use ``_`` for ``.``, e.g. spark_sql_shuffle_partitions=2)."""
        base = {
            "spark.master": self.master_url,
            "spark.app.name": app_name,
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.driver.memory": "512m",
            # Read only when the driver JVM is launched (first session of
            # the process): its temp files go to a dir we remove.
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={driver_tmp_dir()} {JVM_OPTS}",
            "spark.executor.extraJavaOptions": JVM_OPTS,
            "spark.ui.enabled": "false",
            # No spark.local.dir: the driver JVM (one per Python process, it
            # outlives clusters) caches its local root dirs at first use, so
            # it keeps Spark's default (java.io.tmpdir, cleaned at its exit);
            # executors use the workers' SPARK_LOCAL_DIRS under tmp_dir.
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.task.cpus": "1",
            "spark.cores.max": str(self.n_workers * self.worker_cores),
            "spark.python.worker.reuse": "true",
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.executorEnv.PYSPARK_PYTHON": self.python,
            "spark.network.timeout": "60s",
            "spark.executor.heartbeatInterval": "5s",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            # Do not schedule before all executors are up (barrier stages
            # need every slot at once).
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            # Barrier slot check: retry quickly instead of every 15 s.
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "60",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        }
        for k, v in conf.items():
            base[k if "." in k else k.replace("_", ".")] = str(v)
        return base

    def spark_session(self, app_name: str = "tfos-test", wait_executors: float = 60.0, **conf):
        """A SparkSession on this cluster (driver on 127.0.0.1, small memory).

        Waits (bounded by ``wait_executors`` seconds; 0 to skip) until every
        worker runs an executor for it. The caller stops it (``spark.stop()``).
        ``spark.stop()`` leaves the py4j gateway JVM running, as pyspark does;
        it ends with the Python process."""
        from pyspark.sql import SparkSession

        if not self.master_url or self._stopped:
            raise SparkClusterError("cluster not started")
        builder = SparkSession.builder
        for k, v in self.spark_conf(app_name, **conf).items():
            builder = builder.config(k, v)
        # The driver JVM is launched from this process's environment; make it
        # bind to 127.0.0.1 too, without leaving the change behind.
        # (Only for the launch of the gateway JVM, which pyspark does once per
        # Python process: so nothing cluster-specific here.)
        overrides = {
            "SPARK_LOCAL_IP": HOST,
            "PYSPARK_PYTHON": self.python,
            "SPARK_HOME": self.spark_home,
            "JAVA_HOME": self.java_home,
        }
        saved = {k: os.environ.get(k) for k in overrides}
        os.environ.update(overrides)
        try:
            spark = builder.getOrCreate()
        finally:
            restore_env(saved)
        if wait_executors:
            try:
                self.wait_executors(spark, self.n_workers, wait_executors)
            except BaseException:
                spark.stop()
                raise
        return spark

    def connect_server(self, name: str = "tfos-connect", timeout: float = 120.0, **conf) -> "ConnectServer":
        """Start Spark 4's Spark Connect server (SparkConnectServer through
        spark-submit: its driver is a Spark application on this cluster with
        one executor per worker) listening on 127.0.0.1 at a free port.
        Returns once it answers; ``ConnectServer.url`` is the client's
        ``sc://`` URL, ``stop()`` ends it (``stop()`` of the cluster too)."""
        port = free_port()
        settings = self.spark_conf(name, **conf)
        settings["spark.driver.extraJavaOptions"] = JVM_OPTS  # not the test process's driver tmp dir
        settings.update({"spark.connect.grpc.binding.address": HOST, "spark.connect.grpc.binding.port": str(port)})
        args = ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", name,
                "--driver-memory", "1g"]
        for k, v in settings.items():
            args += ["--conf", f"{k}={v}"]
        label = f"connect-{port}"
        # spark-submit sizes the Connect server like a daemon (SPARK_DAEMON_MEMORY)
        env = dict(self._env(), SPARK_LOCAL_IP=HOST, SPARK_DAEMON_MEMORY="1g")
        self._spawn(label, args, env, self.tmp_dir, tool="spark-submit")
        server = ConnectServer(self, label, port)
        server.wait_ready(timeout)
        return server

    def wait_executors(self, spark, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` executors (not counting the driver) are registered."""
        sc = spark.sparkContext
        deadline = time.monotonic() + timeout
        while True:
            # getExecutorInfos() includes the driver.
            count = len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1
            if count >= n:
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"only {count}/{n} executors registered after {timeout}s\n" + self.log_tails())
            time.sleep(0.2)
