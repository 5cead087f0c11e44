"""A real MLflow tracking server for the tests (issue 39).

`mlflow server` from .venv-mlflow (`make mlflow-server`; the executable is
$TFOS_MLFLOW, else .venv-mlflow/bin/mlflow under the repository), with a
SQLite backend store and a local artifact root served through the server
(`--serve-artifacts`: clients upload and download through it, as they do
against a shared server), on 127.0.0.1 and a free port. One process group,
stopped with everything it started at the end (gunicorn/uvicorn workers
included).

    server = MlflowServer(tmp_dir); server.start(); ... server.url ...; server.stop()

or, in a test, the session fixture `mlflow_server` below (the suites'
conftest.py files import it: one server per pytest session, started on
first use).

Starting takes about 10 s here (the SQLite schema is made on first start);
the server and its uvicorn worker hold about 600 MB.
"""

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mlflow_executable():
    exe = os.environ.get("TFOS_MLFLOW") or os.path.join(REPO, ".venv-mlflow", "bin", "mlflow")
    if not os.access(exe, os.X_OK):
        raise RuntimeError("no MLflow server at %s: run `make mlflow-server` (or set TFOS_MLFLOW)" % exe)
    return exe


def _die_with_parent():
    """preexec_fn: the kernel SIGTERMs the server if the test process dies
    (even by SIGKILL); its workers then end with it (the stop below is the
    normal way, this the net under it)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    def __init__(self, work_dir, port=None):
        self.work_dir = str(work_dir)
        self.port = port or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.log_path = os.path.join(self.work_dir, "mlflow-server.log")

    def start(self, timeout=90):
        os.makedirs(self.work_dir, exist_ok=True)
        db = os.path.join(self.work_dir, "mlflow.db")
        artifacts = os.path.join(self.work_dir, "artifacts")
        log = open(self.log_path, "ab")
        env = dict(os.environ)
        for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID"):
            env.pop(k, None)
        # No job runner (seven huey consumers, ~1.4 GB): tracking and the
        # registry do not need it.
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        self.proc = subprocess.Popen(
            [mlflow_executable(), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", "sqlite:///" + db, "--artifacts-destination", artifacts,
             "--serve-artifacts", "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=_die_with_parent)
        log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mlflow server exited with %s:\n%s" % (self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError("mlflow server did not answer /health within %d s:\n%s" % (timeout, self.log_tail()))

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=20):
        """Ends the server's process group (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # workers that outlived the master
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()
