"""What the terminal that ran tfos yarn shows while it waits (issue 36,
item 4): YARN not allocating a container, programs that print nothing yet,
and a node's failure and the restart it causes, each said on the client's
stderr as it happens ("tfos: ..."), not only in the ApplicationMaster's
container log. On the session's cluster (conftest.py): two applications,
about 60 s together.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TFOS = os.environ.get("TFOS_CLI", os.path.join(REPO, "build", "tfos"))
SMALL = ["--worker-memory", "256m", "--am-memory", "384m"]

# attempt 1: worker:1 fails (exit 3) after a line; attempt 2: both print
# nothing for 17 s (as a program importing its framework), then finish
PROGRAM = """
import os, sys, time
attempt, me = int(os.environ["TFOS_ATTEMPT"]), os.environ["TFOS_TASK_INDEX"]
if attempt == 1:
    if me == "1":
        print("TERM failing on purpose", flush=True)
        time.sleep(2)
        sys.exit(3)
    time.sleep(120)
time.sleep(17)
print("TERM done", me, flush=True)
"""


def run(cluster, args, timeout=180):
    return subprocess.run([TFOS, "yarn"] + args, env=cluster.env(), capture_output=True, text=True,
                          timeout=timeout, cwd=cluster.tmp_dir)


def test_a_failure_and_its_restart_and_a_quiet_program_are_told_on_the_client(yarn_cluster, tmp_path):
    (tmp_path / "term.py").write_text(PROGRAM)
    r = run(yarn_cluster, ["--workers", "2", "--max-restarts", "1"] + SMALL +
            ["--file", str(tmp_path / "term.py"), "--", sys.executable, "term.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # the launcher's lines reach the client's stderr as they are written, as tfos run's do
    assert re.search(r"^tfos: warning: restarting every node \(attempt 2 of 2\) after: .*worker:1", r.stderr,
                     re.M), out
    assert re.search(r"worker:1.*exit code 3", r.stderr), out
    assert re.search(r"^tfos: the programs have started on all 2 nodes", r.stderr, re.M), out
    assert re.search(r"^tfos: no output from the programs yet, 1\d s after they started", r.stderr, re.M), out
    # the nodes' own lines stay on stdout; the launcher's never go there
    assert "[worker:1] TERM failing on purpose" in r.stdout and "[worker:0] TERM done 0" in r.stdout, out
    assert "restarting every node" not in r.stdout, out


def test_a_container_yarn_does_not_allocate_is_told_while_it_waits(yarn_cluster):
    # 3 workers of 1500 MB: the NodeManagers have 2048 MB each and one of them
    # also holds the ApplicationMaster, so the third waits until the timeout
    r = run(yarn_cluster, ["--workers", "3", "--worker-memory", "1500m", "--am-memory", "384m",
                           "--reservation-timeout", "12", "--max-restarts", "0", "--",
                           sys.executable, "-c", "import time; time.sleep(60)"])
    out = r.stdout + r.stderr
    assert r.returncode == 124, out
    m = re.search(r"^tfos: waiting for YARN to allocate 1 of 3 containers \(queue default, (\d+) s\): "
                  r"a worker container of 1500 MB, 1 vcores; YARN says this application may have .* more now$",
                  r.stderr, re.M)
    assert m and int(m.group(1)) >= 5, out
    # said before the timeout's own message, not after it
    assert r.stderr.index(m.group(0)) < r.stderr.index("reservation timeout"), out
