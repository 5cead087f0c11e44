"""Fixtures for tests that run on a real Spark standalone cluster.

Run with the project venv:  .venv/bin/python -m pytest tests/spark

Scopes:
  spark_cluster  session scope. One master + 2 workers (1 core, 1 GiB each)
                 started once per pytest session (~8 s) and stopped at the end
                 of the session, also when tests fail or the session is
                 interrupted (yield + finally; atexit and PR_SET_PDEATHSIG in
                 sparkcluster.py are the nets below that). Its teardown also
                 ends this process's py4j driver JVM (shutdown_gateway()).
  spark          module scope. A SparkSession (an application with one executor
                 per worker) created for a test module and stopped after it.
                 Modules get fresh executors and Python workers, so a test that
                 kills or wedges them cannot leak into the next module, for the
                 cost of a few seconds per module. pyspark allows one active
                 SparkContext per process: a test that needs other settings
                 stops the module's session first, or (better) uses
                 ``spark_cluster.spark_session(name, **conf)`` in its own
                 module without requesting ``spark``.

A failed or timed-out test's report ends with the last lines of the
executor logs it wrote to (executor_log_tails): the feed tasks' warnings
are there and nowhere else once the session's temp dir is gone.

Environment knobs:
  TFOS_SPARK_KEEP_TMP=1      keep the cluster's temp dir (logs) after the session.
  TFOS_SPARK_START_TIMEOUT   seconds start() may take (default 120).
"""

import os
import sys

import pytest

from sparkcluster import SparkCluster, shutdown_gateway


# The tests' MLflow tracking server (tests/support/mlflowserver.py): its
# session fixture, started on first use.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from mlflowserver import mlflow_server  # noqa: E402,F401  (a fixture)


def _start_timeout() -> float:
    return float(os.environ.get("TFOS_SPARK_START_TIMEOUT", "120"))


@pytest.fixture(scope="session")
def spark_cluster():
    # decommission enabled: a worker given SIGPWR decommissions (test_drain.py);
    # inert otherwise
    cluster = SparkCluster(n_workers=2, worker_cores=1, worker_memory="1g",
                           worker_opts="-Dspark.decommission.enabled=true")
    cluster.start(timeout=_start_timeout())
    try:
        yield cluster
    finally:
        try:
            shutdown_gateway()  # the driver JVM too, not only the cluster's
        finally:
            cluster.stop()


@pytest.fixture(scope="module")
def spark(spark_cluster, request):
    name = "tfos-test-" + request.module.__name__.rsplit(".", 1)[-1]
    session = spark_cluster.spark_session(name)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(autouse=True)
def no_tfos_leftovers(spark_cluster):
    """No test may leave a tfos agent or node program behind. Before each
    test, the workers an earlier (failed) test left dead or decommissioned
    are restarted: one failure must not become every later test's."""
    import tfoshelpers
    tfoshelpers.MARKER = spark_cluster.tmp_dir
    healed = spark_cluster.heal()
    if healed:
        import warnings
        warnings.warn("an earlier test left the Spark cluster short; restarted " + ", ".join(healed))
    yield
    tfoshelpers.check_no_leftovers(tfoshelpers.tfos_processes, 30)


def executor_log_tails(cluster, since, lines=25, most=4):
    """The last lines of the executors' stderr logs written since ``since``
    (the feed tasks' warnings and errors are there, and nowhere else on a
    failed run: the cluster's temp dir goes with the session)."""
    import glob
    work = os.path.join(cluster.tmp_dir or "", "work")
    logs = [p for p in glob.glob(os.path.join(work, "worker*", "app-*", "*", "stderr"))
            if os.path.getmtime(p) >= since]
    out = []
    for path in sorted(logs, key=os.path.getmtime)[-most:]:
        with open(path, errors="replace") as f:  # without the JVM's stack frames
            tail = [ln for ln in f if not ln.startswith(("\tat ", "\t... "))][-lines:]
        out.append("==> %s <==\n%s" % (os.path.relpath(path, work), "".join(tail)))
    return "\n".join(out)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed (or timed-out) Spark test's report ends with the tails of
    the executor logs it wrote to: what the feed tasks waited for."""
    outcome = yield
    rep = outcome.get_result()
    cluster = item.funcargs.get("spark_cluster") if hasattr(item, "funcargs") else None
    if rep.when != "call" or not rep.failed or cluster is None:
        return
    try:
        text = executor_log_tails(cluster, call.start)
    except OSError as exc:
        text = "(could not read them: %s)" % exc
    if text:
        rep.sections.append(("executor logs, last lines", text))
