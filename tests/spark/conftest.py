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
