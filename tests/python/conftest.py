"""Shared helpers for the integration tests: real tfos processes, real
signals, bounded waits, and a check that nothing is left running."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")
PY = sys.executable


# The files whose tests start framework programs (TensorFlow, PyTorch, JAX)
# or long process scenarios: `make check`, the fast tier for the edit-test
# loop, leaves them out (-m "not heavy"); `make test` runs everything.
HEAVY = {"test_serve.py", "test_doc_snippets.py", "test_tensorflow.py", "test_torch.py", "test_restart.py",
         "test_hardening.py", "test_export.py", "test_readme.py", "test_jax.py", "test_pip_install.py",
         "test_models.py", "test_drain.py", "test_tracking.py", "test_elastic.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: starts framework programs or long scenarios (not in make check)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in HEAVY:
            item.add_marker(pytest.mark.heavy)


# The tests' MLflow tracking server (tests/support/mlflowserver.py): its
# session fixture, started on first use.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from mlflowserver import mlflow_server  # noqa: E402,F401  (a fixture)


def tfos_cli():
    path = os.environ.get("TFOS_CLI") or os.path.join(ROOT, "build", "tfos")
    if not os.access(path, os.X_OK):
        pytest.fail("tfos binary not found at %s: run `make` first" % path)
    return path


def wait_for(cond, timeout, interval=0.05):
    """Poll cond() until it is truthy or timeout seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        val = cond()
        if val or time.monotonic() >= deadline:
            return val
        time.sleep(interval)


def pids_with(marker):
    """Pids of live (non-zombie) processes whose command line contains marker."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state not in ("Z", "X"):
            found.append(int(d))
    return found


@pytest.fixture
def marker():
    """A token put on the command lines of a test's processes; at teardown
    no process carrying it may remain (bounded wait), else the test fails."""
    token = "tfos-test-" + uuid.uuid4().hex[:12]
    yield token
    left = wait_for(lambda: not pids_with(token), 15)
    stray = pids_with(token)
    for pid in stray:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert left and not stray, "processes left running after the test: %s" % stray


def run_tfos(args, timeout=120, env=None, **kw):
    """Run the tfos CLI to completion (bounded); return CompletedProcess."""
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    return subprocess.run([tfos_cli()] + list(args), capture_output=True, text=True, timeout=timeout,
                          env=full_env, **kw)


def run_and_kill(args, victim, when, timeout=400, env=None):
    """Run the tfos CLI and read its stdout as it comes: the pid in group 1
    of the first line matching ``victim`` gets SIGKILL once a later line
    matches ``when``. Returns (exit code, stdout, stderr, the pid killed or
    None). stderr goes to a file, so that a chatty run cannot block on it."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen([tfos_cli()] + list(args), stdout=subprocess.PIPE, stderr=errf, text=True,
                                bufsize=1, env=full_env)
        out, pid, killed = [], None, None
        try:
            deadline = time.monotonic() + timeout
            for line in proc.stdout:
                out.append(line)
                m = pid is None and re.search(victim, line)
                if m:
                    pid = int(m.group(1))
                if killed is None and pid and re.search(when, line):
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                if time.monotonic() > deadline:
                    break
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        errf.seek(0)
        return proc.returncode, "".join(out), errf.read(), killed


def prog(name):
    return os.path.join(PROGS, name)


def registered_port(stderr_text, executor_id):
    m = re.search(r"registered executor %d as \S+ at [\d.]+:(\d+)" % executor_id, stderr_text)
    return int(m.group(1)) if m else None


def start_coordinator(args, env=None):
    """`tfos coordinator ARGS` as a process (stdout and stderr piped)."""
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen([tfos_cli(), "coordinator"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full)


def coordinator_address(coord):
    """The host:port a `tfos coordinator` process prints first."""
    first = coord.stdout.readline()
    if first.startswith("TFOS_SECRET="):
        first = coord.stdout.readline()
    assert first.startswith("TFOS_COORD_ADDR="), first
    return first.strip().split("=", 1)[1]


def produce(fd, partitions, end=True, batch=7):
    """In a child: feed {partition_id: rows} into the ring in fd, `batch`
    rows a record, then end the feed."""
    from tfos import _tfos, feed
    ring = _tfos.Ring(fd, _tfos.ROLE_PRODUCER)
    for pid, rows in partitions.items():
        ring.partition_begin(pid, 10000)
        for i in range(0, len(rows), batch):
            feed.write_rows(ring, rows[i:i + batch], 10000)
        ring.partition_end(10000)
    if end:
        ring.end_feed(10000)
    ring.close()


def start_child(target, *args):
    """target(*args) in a forked child process, started."""
    import multiprocessing
    p = multiprocessing.get_context("fork").Process(target=target, args=args)
    p.start()
    return p


def join_child(p):
    """Its exit code; a child still running after 30 s fails the test."""
    p.join(30)
    if p.is_alive():
        p.kill()
        p.join(5)
        pytest.fail("helper process hung")
    return p.exitcode
