"""Fixtures for the tests of tfos yarn on a real YARN + HDFS minicluster.

Run with the project venv after ``make yarn yarn-minicluster``:
    .venv/bin/python -m pytest tests/yarn

  yarn_cluster  session scope: the Kerberized minicluster (yarncluster.py,
                MiniCluster.java --secure), started once (~13 s) and stopped
                at the end of the session. Its HDFS delegation tokens are
                renewable for 60 s and live 120 s; the test user
                (tfos@EXAMPLE.COM) has a ticket in env()'s ticket cache, as a
                user who ran kinit has.
  simple_cluster one test: the minicluster with simple authentication, for
                YARN's log aggregation, which the Kerberized one cannot do.
  plain_cluster module scope: the minicluster configured as a cluster set up
                from Hadoop's documentation is (no yarn.application.classpath,
                no log aggregation, simple authentication), for
                test_setup.py, which runs first, so that the two never run
                at once.
  no_leftovers  autouse: no test may leave a tfos process (client,
                ApplicationMaster, launcher, stand-in, agent, program) behind.

TFOS_YARN_KEEP_TMP=1 keeps the cluster's directory (container logs).
"""

import os
import sys

import pytest

from yarncluster import YarnCluster, tfos_yarn_processes
from tfoshelpers import check_no_leftovers

# The tests' MLflow tracking server (tests/support/mlflowserver.py): its
# session fixture, started on first use
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from mlflowserver import mlflow_server  # noqa: E402,F401  (a fixture)


@pytest.fixture(scope="session")
def yarn_cluster():
    cluster = YarnCluster(secure=True, token_renew_s=60, token_max_s=120)
    cluster.start(timeout=float(os.environ.get("TFOS_YARN_START_TIMEOUT", "180")))
    try:
        cluster.kinit()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def simple_cluster():
    """The minicluster with simple authentication, for what the Kerberized one
    cannot do: YARN's log aggregation (a Kerberized NodeManager opens the logs
    with Hadoop's native library, and checks that the application's user owns
    them, which needs the LinuxContainerExecutor: neither is in Maven's artifacts)."""
    cluster = YarnCluster()
    cluster.start(timeout=float(os.environ.get("TFOS_YARN_START_TIMEOUT", "180")))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def plain_cluster():
    cluster = YarnCluster(plain=True)
    cluster.start(timeout=float(os.environ.get("TFOS_YARN_START_TIMEOUT", "180")))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    check_no_leftovers(tfos_yarn_processes, 40)
