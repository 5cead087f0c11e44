"""Fixtures for the tests of tfos on a real Slurm cluster (docs/SLURM.md).

Run after `make install` (as root, with slurm-wlm and munge installed):
    TFOS_CLI=$PWD/build/tfos .venv/bin/python -m pytest tests/slurm

  slurm_cluster  session scope: munged, slurmctld and two slurmd (n1, n2,
                 2 CPUs each) on 127.0.0.1 (slurmcluster.py), started once
                 (about 1 s) and stopped at the end, asserting that no daemon
                 and no job's process is left.
  no_leftovers   autouse: after every test squeue lists no job and no
                 process of a job (tfos run, an agent, a program,
                 slurmstepd) is left.

TFOS_SLURM_KEEP_TMP=1 keeps the cluster's directory (its daemons' logs).
"""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from slurmcluster import SlurmCluster, missing  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def slurm_cluster():
    why = missing()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster()
    try:
        cluster.start(timeout=60)
        print("\nslurm fixture: started in %.1f s (%s)" % (cluster.started_s, cluster.dir))
        yield cluster
    finally:
        left = cluster.stop()
    assert not left, "Slurm's daemons or jobs' processes left running: %s" % left


@pytest.fixture(autouse=True)
def no_leftovers(request):
    yield
    if "slurm_cluster" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("slurm_cluster")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (cluster.jobs() or cluster.processes()):
        time.sleep(0.2)
    jobs, procs = cluster.jobs(), cluster.processes()
    if jobs:
        cluster.run(["scancel", "--full", "--user", "root"])
    for pid, _ in procs:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not jobs and not procs, "left after the test: jobs %s, processes %s" % (jobs, procs)
