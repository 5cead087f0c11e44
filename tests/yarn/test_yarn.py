"""tfos yarn on a real YARN + HDFS minicluster (conftest.py, yarncluster.py).

Every test submits a real application: the Java client uploads the tfos
binary and the program to HDFS, the ApplicationMaster's container runs the C
launcher, and every node runs in a container of its own (processes of the
NodeManagers on this machine). The programs run with this venv's Python by
absolute path (the containers are on this machine), so no archive is needed
except in the test that ships one.
"""

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TFOS = os.environ.get("TFOS_CLI", os.path.join(REPO, "build", "tfos"))
NODEINFO = os.path.join(HERE, "progs", "nodeinfo.py")
APP_RE = re.compile(r"submitted (application_\d+_\d+)")

# small containers: the NodeManagers have 2 GiB each
SMALL = ["--worker-memory", "256m", "--ps-memory", "256m", "--am-memory", "384m"]


def tfos_yarn(cluster, args, timeout=180, env=None):
    e = cluster.env()
    e.update(env or {})
    return subprocess.run([TFOS, "yarn"] + args, env=e, capture_output=True, text=True, timeout=timeout,
                          cwd=cluster.tmp_dir)


def app_id(output):
    m = APP_RE.search(output)
    assert m, "no application id in:\n" + output
    return m.group(1)


def node_infos(cluster, app):
    """NODEINFO lines of every node container's stdout, by node name."""
    infos = {}
    for container, logs in cluster.container_logs(app).items():
        for line in logs.get("stdout", "").splitlines():
            if "NODEINFO " in line:
                info = json.loads(line.split("NODEINFO ", 1)[1])
                infos.setdefault(info["node"], []).append(dict(info, log_container=container))
    return infos


def test_workers_and_ps_get_the_cluster_spec_in_containers(yarn_cluster):
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--ps", "1", "--ps-runs-program", "--name", "nodeinfo",
                                 "--env", "NODEINFO_USER=hello"] + SMALL +
                  ["--file", NODEINFO, "--", sys.executable, "nodeinfo.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    app = app_id(out)
    assert "%s running" % app in out and "%s finished" % app in out, out
    assert re.search(r"status page http://\S+", out), out

    infos = node_infos(yarn_cluster, app)
    assert sorted(infos) == ["ps:0", "worker:0", "worker:1"], infos
    # every node's output reached the submitting terminal, prefixed with its node
    for node in infos:
        assert re.search(r"^\[%s\] NODEINFO " % node, r.stdout, re.M), r.stdout
    specs = [i[0]["tf_config"] for i in infos.values()]
    cluster = specs[0]["cluster"]
    assert len(cluster["worker"]) == 2 and len(cluster["ps"]) == 1, cluster
    assert all(s["cluster"] == cluster for s in specs), specs
    containers = set()
    for node, [info] in infos.items():
        job, index = node.split(":")
        assert info["tf_config"]["task"] == {"type": job, "index": int(index)}
        assert info["ps_hosts"] == ",".join(cluster["ps"])
        assert info["worker_hosts"] == ",".join(cluster["worker"])
        assert info["attempt"] == "1"
        assert info["user_env"] == "hello"          # --env reaches every node
        assert "nodeinfo.py" in info["cwd_files"]   # --file is localized into every container
        assert info["container"] == info["log_container"]
        containers.add(info["container"])
    assert len(containers) == 3                     # a container per node
    # the ApplicationMaster's container holds the launcher's account of the run
    am = [logs for c, logs in yarn_cluster.container_logs(app).items() if c.endswith("_000001")]
    assert am and "all nodes finished successfully" in am[0]["stderr"], am


def test_archive_is_unpacked_in_every_container(yarn_cluster, tmp_path):
    env_dir = tmp_path / "env"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "hello.sh").write_text("#!/bin/sh\necho \"ARCHIVE $TFOS_JOB_NAME:$TFOS_TASK_INDEX $1\"\n")
    (env_dir / "bin" / "hello.sh").chmod(0o755)
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env_dir, arcname=".")
    r = tfos_yarn(yarn_cluster, ["--workers", "2"] + SMALL +
                  ["--archive", "%s#env" % archive, "--", "env/bin/hello.sh", "from-the-archive"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    stdout = "".join(logs.get("stdout", "") for logs in yarn_cluster.container_logs(app_id(out)).values())
    for node in ("worker:0", "worker:1"):
        assert "ARCHIVE %s from-the-archive" % node in stdout, stdout


def test_failing_node_is_named_with_its_exit_code(yarn_cluster):
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--max-restarts", "0"] + SMALL +
                  ["--file", NODEINFO, "--env", "NODEINFO_FAIL=worker:1", "--env", "NODEINFO_EXIT=3",
                   "--env", "NODEINFO_SLEEP=2", "--", sys.executable, "nodeinfo.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "%s failed" % app_id(out) in out, out
    assert re.search(r"worker:1.*exit code 3", out), out
    assert "failing on purpose" in out, out          # the node's last lines come back
    assert "[worker:1] nodeinfo: failing on purpose" in r.stdout, (r.stdout, r.stderr)  # streamed as printed


def test_unsatisfiable_reservation_fails_in_time_and_names_the_request(yarn_cluster):
    # 3 workers of 1500 MB: the NodeManagers have 2048 MB each and one of them
    # also holds the ApplicationMaster, so at most 2 fit
    t0 = time.monotonic()
    r = tfos_yarn(yarn_cluster, ["--workers", "3", "--worker-memory", "1500m", "--am-memory", "384m",
                                 "--reservation-timeout", "15", "--max-restarts", "0", "--file", NODEINFO,
                                 "--", sys.executable, "nodeinfo.py"])
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 124, out
    assert ("YARN did not allocate 1 of the containers asked for within the reservation timeout (15.0 s): "
            "a worker container of 1500 MB, 1 vcores") in out, out
    assert "reservation" in out and "worker:" in out, out
    assert took < 90, "took %.0f s" % took
    status = subprocess.run([TFOS, "yarn", "status", app_id(out)], env=yarn_cluster.env(), capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert re.search(r"state\s+FINISHED \(FAILED\)", status.stdout), status.stdout  # over, not left pending


def test_killed_client_kills_the_application(yarn_cluster, tmp_path):
    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "2"] + SMALL +
                             ["--file", NODEINFO, "--env", "NODEINFO_SLEEP=300", "--", sys.executable, "nodeinfo.py"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    app = None
    try:
        # wait until both nodes' programs run
        while time.monotonic() < deadline:
            m = APP_RE.search(out_path.read_text())
            app = app or (m and m.group(1))
            if app and len(node_infos(yarn_cluster, app)) == 2:
                break
            time.sleep(0.5)
        assert app and len(node_infos(yarn_cluster, app)) == 2, out_path.read_text()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # the Java client dies with tfos yarn and kills the application on its way out
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run([TFOS, "yarn", "status", app], env=yarn_cluster.env(), capture_output=True,
                               text=True, timeout=60).stdout
        if "KILLED" in state:
            break
        time.sleep(1)
    assert re.search(r"state\s+KILLED", state), state
    # and no_leftovers checks that no agent or program survived


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--input", "x.csv", "--", "prog"], "--input feeds files on this machine"),
    (["--workers", "2", "--status-port", "8080", "--", "prog"], "--status-port and --status-host"),
    (["--workers", "2", "--worker-memory", "lots", "--", "prog"], "--worker-memory takes a size"),
    (["--", "prog"], "yarn needs --workers"),
])
def test_usage_errors_exit_2(args, message):
    r = subprocess.run([TFOS, "yarn"] + args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr


def steps_lines(cluster, app):
    return [line.split("] ", 1)[-1] for logs in cluster.container_logs(app).values()
            for line in logs.get("stdout", "").splitlines() if "STEPS " in line]


def test_killed_program_restarts_the_cluster_and_resumes_from_its_checkpoint(yarn_cluster, tmp_path):
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--checkpoint-dir", str(tmp_path)] + SMALL +
                  ["--file", os.path.join(HERE, "progs", "steps.py"), "--env", "STEPS_NODE=worker:1",
                   "--env", "STEPS_DO=kill9", "--", sys.executable, "steps.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    lines = steps_lines(yarn_cluster, app_id(out))
    assert "STEPS worker:1 attempt=1 from=0" in " ".join(lines), lines
    # attempt 2 ran in new containers and worker:1 went on from its checkpoint
    resumed = [ln for ln in lines if ln.startswith("STEPS worker:1 attempt=2")]
    assert resumed and "from=3" in resumed[0], lines
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines
    first = [ln.rsplit("container=", 1)[1] for ln in lines if "attempt=1" in ln]
    second = [ln.rsplit("container=", 1)[1] for ln in lines if "attempt=2" in ln]
    assert len(second) == 2 and not set(first) & set(second), lines


def test_container_killed_through_yarn_restarts_the_cluster(yarn_cluster, tmp_path):
    out_path = tmp_path / "client.out"
    ckpt = tmp_path / "ckpt"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "2", "--checkpoint-dir", str(ckpt)] + SMALL +
                             ["--file", os.path.join(HERE, "progs", "steps.py"), "--env", "STEPS_NODE=worker:0",
                              "--env", "STEPS_DO=wait", "--", sys.executable, "steps.py"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        container = None
        while time.monotonic() < deadline and container is None:
            m = APP_RE.search(out_path.read_text())
            for line in steps_lines(yarn_cluster, m.group(1)) if m else []:
                if line.startswith("STEPS worker:0 attempt=1"):
                    waiting = any(ln.startswith("STEPS worker:0 waiting") for ln in steps_lines(yarn_cluster,
                                                                                                 m.group(1)))
                    if waiting:
                        container = line.rsplit("container=", 1)[1]
            time.sleep(0.5)
        assert container, out_path.read_text()
        # the ResourceManager's REST API: stop that one container, as an operator would
        req = urllib.request.Request("http://%s/ws/v1/cluster/containers/%s/signal/FORCEFUL_SHUTDOWN?user.name=%s"
                                     % (yarn_cluster.rm_webapp, container, getpass.getuser()), method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        rc = p.wait(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    out = out_path.read_text()
    assert rc == 0, out
    app = app_id(out)
    am = [logs["stderr"] for c, logs in yarn_cluster.container_logs(app).items() if c.endswith("_000001")]
    assert am and "restarting every node (attempt 2 of 4)" in am[0], am
    assert re.search(r"worker: container exited with status (137|143|-\d+)", am[0]), am[0]
    lines = steps_lines(yarn_cluster, app)
    assert any(ln.startswith("STEPS worker:0 attempt=2 from=3") for ln in lines), lines
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines


def test_tfcluster_on_spark_on_yarn_feeds_a_dataframe_read_from_hdfs(yarn_cluster, tmp_path):
    """TensorFlowOnSpark's own deployment: TFCluster on --master yarn, the
    executors in YARN containers, the data on HDFS."""
    env = yarn_cluster.env()
    env.update({"YARN_CONF_DIR": yarn_cluster.conf_dir, "PYSPARK_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": "127.0.0.1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    env.pop("SPARK_HOME", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "progs", "tfcluster_yarn.py"), str(tmp_path), "3000"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    causes = [ln for ln in r.stderr.splitlines() if "Exception" in ln or "Error" in ln][:10]
    assert r.returncode == 0, "\n".join(causes) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert result["defaultFS"] == yarn_cluster.default_fs and result["path"].startswith("hdfs://")
    nodes = result["nodes"]
    assert sorted(n["node"] for n in nodes) == ["worker:0", "worker:1"], nodes
    assert sum(n["rows"] for n in nodes) == 3000 and sum(n["sum"] for n in nodes) == 3000 * 2999 // 2, nodes
    user = getpass.getuser()
    for n in nodes:
        assert n["defaultFS"] == yarn_cluster.default_fs, n                # ctx.defaultFS is HDFS
        assert n["relative"] == "%s/user/%s/model" % (yarn_cluster.default_fs, user), n
        assert n["absolute"] == yarn_cluster.default_fs + "/data/x", n
    # the executors, and so the nodes' agents, ran in YARN containers
    assert len(yarn_cluster.container_logs(result["app"])) == 3, yarn_cluster.container_logs(result["app"]).keys()
