"""tfos yarn on a real YARN + HDFS minicluster (conftest.py, yarncluster.py).

Every test submits a real application: the Java client uploads the tfos
binary and the program to HDFS, the ApplicationMaster's container runs the C
launcher, and every node runs in a container of its own (processes of the
NodeManagers on this machine). The programs run with this venv's Python by
absolute path (the containers are on this machine), so no archive is needed
except in the test that ships one.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from elasticids import each_id_once  # tests/support, on the path (conftest.py)
from yarncluster import JVM_OPTS

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
                                 "--env", "NODEINFO_USER=hello", "--env", "NODEINFO_WAIT_PS=1"] + SMALL +
                  ["--file", NODEINFO, "--", sys.executable, "nodeinfo.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    app = app_id(out)
    assert "%s running" % app in out and "%s finished" % app in out, out
    assert re.search(r"status page http://\S+", out), out

    infos = node_infos(yarn_cluster, app)
    assert sorted(infos) == ["ps:0", "worker:0", "worker:1"], infos
    # one attempt: a node that printed twice ran again (the launcher says why)
    assert all(len(v) == 1 for v in infos.values()), (
        {n: [(i["attempt"], i["container"]) for i in v] for n, v in infos.items()}, out[-6000:])
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


def test_packed_venv_is_unpacked_in_every_container_and_runs(yarn_cluster, tmp_path):
    """tfos yarn pack makes the archive from a virtual environment; YARN
    unpacks it as env/ in every container, and the program runs its
    python, which imports what the environment holds."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=60)
    site = [d for d in (tmp_path / "venv" / "lib").glob("python*/site-packages")][0]
    (site / "packprobe.py").write_text("WHERE = __file__\n")
    p = subprocess.run([TFOS, "yarn", "pack", "-o", str(tmp_path / "env.tar.gz"), str(tmp_path / "venv")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "ship it with:" in p.stdout, p.stdout + p.stderr
    assert "every node needs that interpreter" in p.stdout, p.stdout
    r = tfos_yarn(yarn_cluster, ["--workers", "2"] + SMALL +
                  ["--archive", "%s#env" % (tmp_path / "env.tar.gz"), "--", "env/bin/python", "-c",
                   "import os, sys, packprobe; print('ARCHIVE', os.environ['TFOS_JOB_NAME'] + ':' + "
                   "os.environ['TFOS_TASK_INDEX'], os.path.realpath(sys.prefix) == os.path.realpath('env'), "
                   "os.path.realpath(packprobe.WHERE).startswith(os.path.realpath('env') + '/'))"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for node in ("worker:0", "worker:1"):
        assert "[%s] ARCHIVE %s True True" % (node, node) in r.stdout, out


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
    # the missing node's request is withdrawn as the reservation ends: the
    # containers the others give back do not get it allocated after all
    assert "registered after the cluster was formed" not in out, out
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


def assert_drained_at_one_step(yarn_cluster, app, text):
    """Both workers checkpointed at one drain step, the application ended
    drained (exit 75) and YARN says it was ended on request (KILLED)."""
    steps = re.findall(r"\[(worker:\d)\] checkpoint at drain step (\d+)", text)
    assert sorted(w for w, _ in steps) == ["worker:0", "worker:1"], text
    assert len({s for _, s in steps}) == 1, steps  # one step for both
    assert "%s drained (exit code 75)" % app in text, text
    state = subprocess.run([TFOS, "yarn", "status", app], env=yarn_cluster.env(), capture_output=True, text=True,
                           timeout=60).stdout
    assert re.search(r"state\s+FINISHED \(KILLED\)", state), state  # YARN: ended on request


def test_graceful_kill_drains_every_node_at_one_step(yarn_cluster, tmp_path):
    """tfos yarn kill --graceful (issue 41): YARN's GRACEFUL_SHUTDOWN
    signal to the ApplicationMaster's container reaches the launcher as a
    notice; both nodes checkpoint at the one drain step and the application
    ends with exit code 75 (KILLED, not FAILED), with no restart."""
    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "2"] + SMALL +
                             ["--file", os.path.join(HERE, "progs", "drain.py"), "--", sys.executable, "drain.py"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        app = None
        while time.monotonic() < deadline:
            text = out_path.read_text()
            m = APP_RE.search(text)
            app = app or (m and m.group(1))
            if app and "[worker:0] training" in text and "[worker:1] training" in text:
                break
            assert p.poll() is None, text
            time.sleep(0.5)
        text = out_path.read_text()
        assert app and "[worker:0] training" in text and "[worker:1] training" in text, text
        k = tfos_yarn(yarn_cluster, ["kill", "--graceful", app])
        assert k.returncode == 0, k.stderr
        code = p.wait(timeout=120)
        assert "asked %s to drain" % app in k.stderr and "drained and ended" in k.stderr, \
            k.stderr + out_path.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    text = out_path.read_text()
    assert code == 75, text
    assert "starting again" not in text and "sending SIGKILL" not in text, text
    assert_drained_at_one_step(yarn_cluster, app, text)


def test_preemption_for_another_queue_resizes_an_elastic_application(yarn_cluster, tmp_path):
    """YARN's CapacityScheduler preempting a container of an elastic
    application (issue 41): one of queue default fills the cluster (2
    workers of 1500 MB, the NodeManagers have 2048 MB each, --min-nodes 1),
    and one of queue urgent, guaranteed half the cluster, asks for a worker
    of 1024 MB. The preemption monitor (yarncluster.py) tells the first
    application's ApplicationMaster which container it takes back, 30 s
    before it kills it: the AM names it on the client's terminal and the
    cluster drains (both workers checkpoint at one step). It forms again
    without the container YARN named: one worker, while the urgent
    application runs. A standby asks for the other container; when the
    urgent application has ended YARN grants it, and the cluster drains and
    grows back to 2. No restart is spent, every row id is read once across
    the attempts (tests/yarn/progs/elastic.py), and the application
    succeeds."""
    out_path = tmp_path / "default.out"
    ids = tmp_path / "ids"
    ids.mkdir()
    urgent = None
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "2", "--worker-memory", "1500m", "--am-memory", "384m",
                              "--min-nodes", "1", "--elastic-wait", "8", "--max-restarts", "0",
                              "--file", os.path.join(HERE, "progs", "elastic.py"), "--", sys.executable, "elastic.py",
                              str(ids), "500", "2"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "training at 2 nodes" not in out_path.read_text():
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        assert "training at 2 nodes" in out_path.read_text(), out_path.read_text()
        urgent = subprocess.Popen([TFOS, "yarn", "--queue", "urgent", "--workers", "1", "--worker-memory", "1024m",
                                   "--am-memory", "384m", "--", sys.executable, "-c",
                                   "import time; time.sleep(10); print('urgent done', flush=True)"],
                                  env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        urgent_out, urgent_err = urgent.communicate(timeout=180)
        code = p.wait(timeout=180)
    finally:
        for proc in (p, urgent):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    text = out_path.read_text()
    assert urgent.returncode == 0, urgent_out + urgent_err + text
    assert "to queue urgent" in urgent_err and "[worker:0] urgent done" in urgent_out, urgent_err
    assert code == 0, text
    # the note names the container YARN takes back: one of this application's worker containers
    app = app_id(text)
    ts, seq = app.split("_")[1:]
    m = re.search(r"^tfos: YARN is preempting a worker container, (container_(?:e\d+_)?%s_%s_\d+_\d+) on \S+ "
                  r".*max_wait_before_kill.*: draining the cluster$" % (ts, seq), text, re.M)
    assert m, text
    assert "draining (YARN preempts a worker container, %s" % m.group(1) in text, text
    # drained at one step before YARN killed anything, then on 1 node, then back on 2: both nodes
    # checkpointed at the step the coordinator announced (their lines are forwarded as they come, so
    # one may follow the launcher's resize line)
    m = re.search(r"draining \(YARN preempts a worker container, [^)]*\): 2 node\(s\) checkpoint at step (\d+)", text)
    assert m, text
    for w in ("worker:0", "worker:1"):
        assert "[%s] checkpoint at drain step %s\n" % (w, m.group(1)) in text, text
    assert "training at 1 nodes" in text, text
    assert "resized from 1 to 2 nodes: drained: capacity for 1 more node is back" in text, text
    assert "restarting" not in text and "container exited with status" not in text, text
    assert text.count("[worker:0] done at step") == 1 and text.count("[worker:1] done at step") == 1, text
    history = text[text.index("all nodes finished successfully on attempt"):]
    assert history.count("-> resized (not a restart)") == 2, history
    assert each_id_once(str(ids)) == ""


INPLACE = os.path.join(REPO, "tests", "support", "inplace_prog.py")


def test_torch_survivors_go_on_in_place_in_containers_and_a_worker_joins(yarn_cluster, tmp_path):
    """tfos yarn --framework torch --resize-in-place --grow-in-place (issue
    41): the ApplicationMaster's launcher takes the options of tfos run. 3
    workers in containers, gloo all_reduce every step through
    ElasticGroup; worker 0's program (rank 0, the store's host) is
    SIGKILLed. Workers 1 and 2 go on as ranks 0 and 1 of 2 in the same
    processes; once worker 0's container has ended, a container YARN
    grants in its place joins the running cluster (rank 1 of 3), and the
    three finish together, each step's ids summed once; the application
    succeeds, no restart spent."""
    out_path = tmp_path / "yarn.out"
    steps = 200
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--framework", "torch", "--workers", "3", "--worker-memory", "640m",
                              "--am-memory", "384m", "--min-nodes", "2", "--resize-in-place", "--grow-in-place",
                              "--max-restarts", "0", "--file", INPLACE, "--", sys.executable, "inplace_prog.py",
                              "yarn", str(steps), "3"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and out_path.read_text().count("stepping at 3") < 3:
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.2)
        text = out_path.read_text()
        assert text.count("stepping at 3") == 3, text
        pids = {int(w): int(pid) for w, pid in re.findall(r"\[worker:(\d)\] pid (\d+) rank \d of 3", text)}
        assert sorted(pids) == [0, 1, 2], text
        os.kill(pids[0], signal.SIGKILL)
        code = p.wait(timeout=150)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    text = out_path.read_text()
    assert code == 0, text
    assert re.search(r"resized in place from 3 to 2 nodes: worker:0 \(executor 0, host [^)]*\) failed: signal 9",
                     text), text
    assert re.search(r"resized in place from 2 to 3 nodes: worker:0 \(executor 0, host [^)]*\) joined", text), text
    assert "restarting" not in text and "all nodes finished successfully" in text, text
    joined = re.search(r"\[worker:0\] pid (\d+) joined as rank 1 of 3 \(generation 2\)", text)
    assert joined, text
    done = {int(w): (int(last), int(total)) for w, _, last, total in
            re.findall(r"\[worker:(\d)\] pid (\d+) done at world 3 after step (\d+): total (\d+)", text)}
    assert sorted(done) == [0, 1, 2], text
    for w, (last, total) in done.items():
        assert last >= steps and total == sum(range(last * 8)), (w, last, total)
    for w in (1, 2):
        assert "[worker:%d] pid %d done at world 3" % (w, pids[w]) in text, text


def test_mlflow_tracks_the_application_as_one_run(yarn_cluster, mlflow_server):
    """tfos yarn --mlflow (issue 39): the launcher in the ApplicationMaster's
    container makes one MLflow run for the application, with each rank's
    reports, their mean, rank 0's own mlflow.log_param (MLFLOW_RUN_ID in the
    containers' environment) and FINISHED."""
    client_mod = pytest.importorskip("mlflow.tracking")
    experiment = "yarn-" + str(int(time.time() * 1000))
    r = tfos_yarn(yarn_cluster, ["--workers", "2"] + SMALL +
                  ["--mlflow", mlflow_server.url, "--mlflow-experiment", experiment, "--mlflow-run-name", "on-yarn",
                   "--file", os.path.join(HERE, "progs", "report.py"), "--", sys.executable, "report.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    client = client_mod.MlflowClient(mlflow_server.url)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, out
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [x.info.run_id for x in runs]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == "on-yarn"
    assert run.data.metrics["rank0/loss"] == pytest.approx(1.0 / 3)
    assert run.data.metrics["rank1/loss"] == pytest.approx(1.0 + 1.0 / 3)
    assert 0 < run.data.metrics["loss"] < 2.5  # the mean over the ranks
    assert run.data.params.get("lr") == "0.01", run.data.params


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--input", "x.csv", "--", "prog"], "--input feeds files on this machine"),
    (["--workers", "2", "--status-port", "8080", "--", "prog"], "--status-port and --status-host"),
    (["--workers", "2", "--worker-memory", "lots", "--", "prog"], "--worker-memory takes a size"),
    (["--", "prog"], "yarn needs --workers"),
    (["pack", "-x"], "yarn pack: unknown option -x"),
    (["kill", "--graceful"], "yarn kill takes an application id"),
    (["kill", "--now", "application_1_1"], "yarn kill: unexpected '--now'"),
    (["pack", "a", "b"], "'b' is one too many"),
    (["pack", "/"], "/ is not a virtual environment: cannot read //pyvenv.cfg"),
    (["serve", "--worker-memory", "1g"], "serve needs --model NAME=DIR"),
    (["serve", "--model", "d=hdfs:///m", "--listen", "0.0.0.0"], "on YARN the models are served on the "
                                                                 "ApplicationMaster's host"),
    (["serve", "--model", "d=hdfs:///m", "--worker-memory", "lots"], "--worker-memory takes a size"),
    (["serve", "--model", "d=hdfs:///m", "--", "prog"], "unknown option '--'"),
])
def test_usage_errors_exit_2(args, message):
    r = subprocess.run([TFOS, "yarn"] + args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr


def steps_lines(cluster, app):
    return [line.split("] ", 1)[-1] for logs in cluster.container_logs(app).values()
            for line in logs.get("stdout", "").splitlines() if "STEPS " in line]


def test_killed_program_restarts_the_cluster_and_resumes_from_its_hdfs_checkpoint(yarn_cluster, monkeypatch):
    # no --checkpoint-dir: tfos-checkpoints/<application id> on HDFS, which
    # steps.py reaches through tfos.fs (WebHDFS)
    r = tfos_yarn(yarn_cluster, ["--workers", "2"] + SMALL +
                  ["--file", os.path.join(HERE, "progs", "steps.py"), "--env", "STEPS_NODE=worker:1",
                   "--env", "STEPS_DO=kill9", "--", sys.executable, "steps.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    app = app_id(out)
    ckpt = "%s/user/%s/tfos-checkpoints/%s" % (yarn_cluster.default_fs, yarn_cluster.user, app)
    assert "checkpoints in " + ckpt in out, out
    yarn_cluster.use(monkeypatch)
    import tfos.fs
    for node in ("worker-0", "worker-1"):
        with tfos.fs.open("%s/%s.step" % (ckpt, node)) as f:
            assert f.read() == b"8", node
    lines = steps_lines(yarn_cluster, app)
    assert "STEPS worker:1 attempt=1 from=0" in " ".join(lines), lines
    # attempt 2 ran in new containers and worker:1 went on from its checkpoint
    resumed = [ln for ln in lines if ln.startswith("STEPS worker:1 attempt=2")]
    assert resumed and "from=3" in resumed[0], lines
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines
    first = [ln.rsplit("container=", 1)[1] for ln in lines if "attempt=1" in ln]
    second = [ln.rsplit("container=", 1)[1] for ln in lines if "attempt=2" in ln]
    assert len(second) == 2 and not set(first) & set(second), lines


def test_digits_example_trains_on_yarn_and_saves_its_model_to_hdfs(yarn_cluster, monkeypatch):
    """examples/digits/train.py as docs/YARN.md runs it: 2 workers and a ps
    in containers, checkpoints on HDFS (the default), the model saved to
    HDFS; predict.py then reads it back from HDFS and scores it."""
    digits = os.path.join(REPO, "examples", "digits")
    model_dir = "hdfs:///user/%s/digits-model" % yarn_cluster.user
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--ps", "1", "--worker-memory", "1g", "--ps-memory", "512m",
                                 "--am-memory", "384m", "--name", "digits",
                                 "--file", os.path.join(digits, "train.py"),
                                 "--file", os.path.join(digits, "digits_data.py"),
                                 "--", sys.executable, "train.py", "--epochs", "5", "--model-dir", model_dir],
                  timeout=400)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"\[worker:0\] test accuracy: ([0-9.]+)", r.stdout)
    assert m and float(m.group(1)) >= 0.90, out
    assert re.search(r"\[worker:0\] saved model to %s/digits.keras" % re.escape(model_dir), r.stdout), out
    assert "[worker:1] done (held-out accuracy" in r.stdout, out
    # every epoch's checkpoint went to HDFS: the chief pushed it (tfos.fs.Mirror)
    app = app_id(out)
    yarn_cluster.use(monkeypatch)
    import tfos.fs
    ckpt = "%s/user/%s/tfos-checkpoints/%s" % (yarn_cluster.default_fs, yarn_cluster.user, app)
    with tfos.fs.open(ckpt + "/checkpoint") as f:
        assert b'model_checkpoint_path: "ckpt-5"' in f.read()
    # the model on HDFS, read back and scored outside YARN
    p = subprocess.run([sys.executable, os.path.join(digits, "predict.py"), "--model-dir", model_dir],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"test accuracy: ([0-9.]+)", p.stdout)
    assert m and float(m.group(1)) >= 0.90, p.stdout


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
        # the ResourceManager's REST API: stop that one container, as an operator would, with the ticket
        # (SPNEGO); without one the API answers 401
        url = "http://%s/ws/v1/cluster/containers/%s/signal/FORCEFUL_SHUTDOWN" % (yarn_cluster.rm_webapp, container)
        for login, code in (([], "401"), (["--negotiate", "-u", ":"], "200")):
            r = subprocess.run(["curl", "-sS", "-X", "POST", "-o", "/dev/null", "-w", "%{http_code}"] + login + [url],
                               env=yarn_cluster.env(), capture_output=True, text=True, timeout=30)
            assert r.stdout == code, (login, r.stdout + r.stderr)
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


def spark_on_yarn_env(cluster, renewal_ratio=0.5):
    """The environment of a Spark driver (client mode) for the minicluster.
    Without Spark's web UI: on Spark 4 its handlers are started while YARN's
    ApplicationMaster adds its filter to them, and SparkContext's start
    failed once in a whole run with a ConcurrentModificationException in
    Jetty's ServletHandler.initialize (Spark's race, not tfos's; nothing
    here uses that UI).

    Secure: Spark replaces its HDFS tokens at ``renewal_ratio`` of their
    renewal interval (Spark's default 0.75: at 45 s of the shared cluster's
    60 s) and a failed replacement is tried again 5 s later (Spark's
    default: 1 h). At 0.75 an executor wrote with an expired token once on
    CI's loaded machine, 60 s into the application; Spark's own timing, as
    a 24 h interval would leave 6 h of margin. None: Spark's default."""
    conf_dir = os.path.join(cluster.tmp_dir, "spark-conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "spark-defaults.conf"), "w") as f:
        f.write("spark.ui.enabled false\n")
        jvm_opts = JVM_OPTS   # the driver's, the ApplicationMaster's and the executors' JVMs
        if cluster.secure:
            # spark-submit --principal/--keytab, as a long job on a Kerberized cluster is run; and Java reads
            # no KRB5_CONFIG: every JVM of the application is told where krb5.conf is
            f.write("spark.kerberos.principal %s\nspark.kerberos.keytab %s\n" % (cluster.principal, cluster.keytab))
            f.write("spark.security.credentials.retryWait 5s\n")
            if renewal_ratio is not None:
                f.write("spark.security.credentials.renewalRatio %s\n" % renewal_ratio)
            jvm_opts += " -Djava.security.krb5.conf=" + os.path.join(cluster.conf_dir, "krb5.conf")
        for jvm in ("driver", "yarn.am", "executor"):
            f.write("spark.%s.extraJavaOptions %s\n" % (jvm, jvm_opts))
    env = cluster.env()
    env.update({"YARN_CONF_DIR": cluster.conf_dir, "PYSPARK_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": "127.0.0.1", "TF_CPP_MIN_LOG_LEVEL": "2", "SPARK_CONF_DIR": conf_dir})
    env.pop("SPARK_HOME", None)
    return env


def test_tfcluster_on_spark_on_yarn_feeds_a_dataframe_read_from_hdfs(yarn_cluster, tmp_path):
    """TensorFlowOnSpark's own deployment: TFCluster on --master yarn, the
    executors in YARN containers, the data on HDFS."""
    env = spark_on_yarn_env(yarn_cluster)
    r = subprocess.run([sys.executable, os.path.join(HERE, "progs", "tfcluster_yarn.py"), str(tmp_path), "3000"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    causes = [ln for ln in r.stderr.splitlines() if "Exception" in ln or "Error" in ln][:10]
    assert r.returncode == 0, "\n".join(causes) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert result["defaultFS"] == yarn_cluster.default_fs and result["path"].startswith("hdfs://")
    nodes = result["nodes"]
    assert sorted(n["node"] for n in nodes) == ["worker:0", "worker:1"], nodes
    assert sum(n["rows"] for n in nodes) == 3000 and sum(n["sum"] for n in nodes) == 3000 * 2999 // 2, nodes
    user = yarn_cluster.user
    for n in nodes:
        assert n["defaultFS"] == yarn_cluster.default_fs, n                # ctx.defaultFS is HDFS
        assert n["relative"] == "%s/user/%s/model" % (yarn_cluster.default_fs, user), n
        assert n["absolute"] == yarn_cluster.default_fs + "/data/x", n
    # the executors, and so the nodes' agents, ran in YARN containers
    assert len(yarn_cluster.container_logs(result["app"])) == 3, yarn_cluster.container_logs(result["app"]).keys()


def test_spark_digits_example_on_spark_on_yarn_trains_from_hdfs_and_saves_to_hdfs(yarn_cluster, monkeypatch, tmp_path):
    """examples/digits/spark_digits.py under spark-submit --master yarn, as
    its docstring and docs/YARN.md give it: the splits written to HDFS as
    Parquet and read back as DataFrames, fed (InputMode.SPARK) to 2 workers
    in YARN executors, the model saved to HDFS, then distributed inference
    with the model read back from HDFS."""
    digits = os.path.join(REPO, "examples", "digits")
    user = yarn_cluster.user
    data, model = "hdfs:///user/%s/spark-digits-data" % user, "hdfs:///user/%s/spark-digits-model" % user
    jars = os.path.join(os.path.dirname(__import__("pyspark").__file__), "jars", "*")
    conf = {"spark.yarn.jars": "local:" + jars, "spark.yarn.am.memory": "512m",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0", "spark.yarn.maxAppAttempts": "1",
            "spark.pyspark.python": sys.executable}
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"), "--master", "yarn",
           "--num-executors", "2", "--executor-cores", "1", "--executor-memory", "512m",
           "--py-files", ",".join(os.path.join(digits, f) for f in ("digits_data.py", "train.py"))]
    for k, v in conf.items():
        cmd += ["--conf", "%s=%s" % (k, v)]
    cmd += [os.path.join(digits, "spark_digits.py"), "--data-dir", data, "--model-dir", model]
    try:
        r = subprocess.run(cmd, env=spark_on_yarn_env(yarn_cluster), capture_output=True, text=True, timeout=400,
                           cwd=yarn_cluster.tmp_dir)
    except subprocess.TimeoutExpired as e:
        # what the driver and the executors' containers said, to tell a hang from slowness
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        out, err = text(e.stdout), text(e.stderr)
        with open(str(tmp_path / "spark-digits.out"), "w") as f:
            f.write(out + "\n---- stderr\n" + err)
        # tfos's own lines (why an attempt ended), less the progress lines
        said = [ln for ln in (out + err).splitlines() if "tfos" in ln and "feeding (attempt" not in ln]
        logs = "\n".join("%s %s: %s" % (c, n, t[-1500:]) for c, f in yarn_cluster.all_container_logs().items()
                         for n, t in f.items())
        pytest.fail("spark-submit ran past 400 s (its whole output: %s)\ntfos said:\n%s\ncontainers:\n%s"
                    % (str(tmp_path / "spark-digits.out"), "\n".join(said[-60:])[-6000:],
                       logs[-8000:]))
    causes = [ln for ln in r.stderr.splitlines() if "Exception" in ln or "Error" in ln][:10]
    assert r.returncode == 0, "\n".join(causes) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
    m = re.search(r"^test accuracy: ([0-9.]+)$", r.stdout, re.M)
    assert m and float(m.group(1)) >= 0.90, r.stdout
    assert "predicted 360 held-out rows on 2 nodes" in r.stdout, r.stdout
    yarn_cluster.use(monkeypatch)
    import tfos.fs
    assert tfos.fs.exists(model + "/digits.keras")
    for split in ("train", "test"):
        assert tfos.fs.exists("%s/%s/_SUCCESS" % (data, split)), split


def test_logs_of_a_running_then_of_an_ended_application(simple_cluster, tmp_path):
    """tfos yarn logs: while the application runs, the nodes' output from
    its status page; once it has ended (here: tfos yarn kill), YARN's
    aggregated container logs. On the cluster with simple authentication:
    the Kerberized one cannot aggregate logs (conftest.simple_cluster)."""
    out_path = tmp_path / "client.out"
    program = "print('LOGS-TEST hello', flush=True); import time; time.sleep(300)"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "1"] + SMALL + ["--", sys.executable, "-c", program],
                             env=simple_cluster.env(), cwd=simple_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "[worker:0] LOGS-TEST hello" not in out_path.read_text():
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        app = app_id(out_path.read_text())
        running = subprocess.run([TFOS, "yarn", "logs", app], env=simple_cluster.env(), capture_output=True,
                                 text=True, timeout=60)
        assert running.returncode == 0, running.stdout + running.stderr
        assert "[worker:0] LOGS-TEST hello" in running.stdout, running.stdout + running.stderr
        killed = subprocess.run([TFOS, "yarn", "kill", app], env=simple_cluster.env(), capture_output=True,
                                text=True, timeout=60)
        assert killed.returncode == 0 and "killed " + app in killed.stderr, killed.stderr
        assert p.wait(timeout=60) == 143, out_path.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    # aggregation to HDFS runs after the end: give it a little while
    deadline = time.monotonic() + 60
    while True:
        ended = subprocess.run([TFOS, "yarn", "logs", app], env=simple_cluster.env(), capture_output=True,
                               text=True, timeout=60)
        if ended.returncode == 0 and "LOGS-TEST hello" in ended.stdout or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert ended.returncode == 0 and "[worker:0] LOGS-TEST hello" in ended.stdout, ended.stdout + ended.stderr
    bad = subprocess.run([TFOS, "yarn", "logs", app, "--tail"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "yarn logs takes an application id" in bad.stderr, bad.stderr


def test_tensorboard_runs_in_the_chiefs_container(yarn_cluster):
    """tfos yarn --tensorboard: TensorBoard beside worker 0's program in its
    container, its URL streamed to the client, answering while it runs."""
    probe = os.path.join(REPO, "tests", "python", "progs", "tb_probe.py")
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--tensorboard"] + SMALL +
                  ["--file", probe, "--", sys.executable, "tb_probe.py"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"^\[worker:0\] tfos: TensorBoard at http://([\d.]+):(\d+)/ \(logdir (\S+)\)$", r.stdout, re.M)
    assert m, out
    assert "[worker:0] TBPROBE worker:0 port=%s logdir=%s" % (m.group(2), m.group(3)) in r.stdout, out
    stdout = "".join(logs.get("stdout", "") for logs in yarn_cluster.container_logs(app_id(out)).values())
    assert '[worker:0] TB answered {"logdir": "%s"}' % m.group(3) in r.stdout, out + "\nCONTAINERS:\n" + stdout
    assert "[worker:1] TBPROBE worker:1 port=None" in r.stdout, out


def am_stderr(cluster, app):
    am = [logs.get("stderr", "") for c, logs in cluster.container_logs(app).items() if c.endswith("_000001")]
    assert am, cluster.container_logs(app).keys()
    return am[0]


def test_worker_gpus_are_asked_for_and_allocated(yarn_cluster):
    """--worker-gpus: the container request carries yarn.io/gpu, and YARN
    allocates it (the fixture's NodeManagers declare 2 GPUs each; which
    devices a container may use is YARN's isolation, not exercised here)."""
    r = tfos_yarn(yarn_cluster, ["--workers", "2", "--ps", "1", "--worker-gpus", "1"] + SMALL +
                  ["--", sys.executable, "-c", "print('GPU-TEST done')"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    am = am_stderr(yarn_cluster, app_id(out))
    assert am.count("asked YARN for a worker container of 256 MB, 1 vcores, 1 GPUs") == 2, am
    assert re.search(r"asked YARN for a ps container of 256 MB, 1 vcores \(", am), am   # ps nodes get none
    got = re.findall(r"tfos: (worker|ps): container container_\S+ \S+ (<[^>]*>)", am)
    assert sorted(j for j, _ in got) == ["ps", "worker", "worker"], am
    for job, res in got:
        assert ("yarn.io/gpu: 1" in res) == (job == "worker"), got


def test_more_gpus_than_any_node_has_fail_at_once_naming_the_request(yarn_cluster):
    r = tfos_yarn(yarn_cluster, ["--workers", "1", "--worker-gpus", "3"] + SMALL +
                  ["--", sys.executable, "-c", "print('never')"], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "YARN refused the ApplicationMaster's request: InvalidResourceRequestException" in out, out
    assert "Requested resource=<memory:256, vCores:1, yarn.io/gpu: 3>" in out, out
    assert "maximum allowed allocation=<memory:2048, vCores:4, yarn.io/gpu: 2>" in out, out
    assert "\tat org.apache" not in out, out   # the message, not the ResourceManager's stack
    assert "never" not in r.stdout, out


def test_tfos_fs_copies_trees_and_mirrors_a_directory_over_webhdfs(yarn_cluster, monkeypatch, tmp_path):
    """tfos.fs against the minicluster's NameNode (found through
    HADOOP_CONF_DIR's hdfs-site.xml, as a program outside tfos would)."""
    yarn_cluster.use(monkeypatch)
    import tfos.fs
    base = "%s/user/%s/fs-test" % (yarn_cluster.default_fs, yarn_cluster.user)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(bytes(range(256)) * 1000)
    (src / "sub" / "b.txt").write_text("b")
    tfos.fs.put(str(src), base + "/tree")
    tfos.fs.get(base + "/tree", str(tmp_path / "back"))
    assert (tmp_path / "back" / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert (tmp_path / "back" / "sub" / "b.txt").read_text() == "b"
    with pytest.raises(FileNotFoundError, match="no-such"):
        tfos.fs.get(base + "/no-such", str(tmp_path / "x"))
    # a mirror: pulled when made; push uploads what changed and drops what was removed
    m1 = tfos.fs.Mirror(base + "/tree", dir=str(tmp_path))
    assert sorted(os.listdir(m1.path)) == ["a.bin", "sub"]
    os.remove(os.path.join(m1.path, "a.bin"))
    with open(os.path.join(m1.path, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-1"')
    with open(os.path.join(m1.path, "ckpt-1.index"), "w") as f:
        f.write("i")
    assert m1.push() == 2
    assert m1.push() == 0
    fs, path = tfos.fs.filesystem(base + "/tree")
    assert sorted(os.path.basename(p) for p in fs.ls(path, detail=False)) == ["checkpoint", "ckpt-1.index", "sub"]
    m2 = tfos.fs.Mirror(base + "/tree", dir=str(tmp_path))
    with open(os.path.join(m2.path, "checkpoint")) as f:
        assert f.read() == 'model_checkpoint_path: "ckpt-1"'
    m1.close()
    m2.close()
    assert not os.path.exists(m1.path) and not os.path.exists(m2.path)


def test_yarn_serve_serves_a_model_from_hdfs_in_containers_and_loads_a_new_version(yarn_cluster, monkeypatch,
                                                                                   tmp_path):
    """tfos yarn serve: two model servers in containers load a PyTorch model
    (examples/torch/serve_digits.py's loader, shipped with --file) from
    HDFS; the front end in the ApplicationMaster's container answers the
    Open Inference Protocol and local clients; a version renamed into place
    on HDFS is loaded and served; Ctrl-C kills the application."""
    import numpy as np
    import http.client
    made = subprocess.run([sys.executable, os.path.join(REPO, "tests", "python", "progs", "torch_loader.py"),
                           str(tmp_path / "m")], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    x, pred1, pred2 = (np.load(tmp_path / "m" / n) for n in ("x.npy", "pred1.npy", "pred2.npy"))
    yarn_cluster.use(monkeypatch)
    import tfos.fs
    import tfos.serve
    served = "%s/user/%s/served/digits" % (yarn_cluster.default_fs, yarn_cluster.user)
    tfos.fs.put(str(tmp_path / "m" / "digits" / "1"), served + "/1")
    loader = os.path.join(REPO, "examples", "torch", "serve_digits.py")
    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "serve", "--replicas", "2", "--worker-memory", "768m", "--am-memory",
                              "384m", "--file", loader, "--model", "digits=" + served,
                              "--loader", "digits=serve_digits.py:load", "--python", sys.executable, "--poll", "0.5"],
                             env=yarn_cluster.env(), cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)
    url_re = re.compile(r"tfos yarn serve: model digits: POST (http://[^/\s]+)/v2/models/digits/infer")

    def text():
        return out_path.read_text()

    def get(path):
        try:
            with urllib.request.urlopen(url + path, timeout=10) as r:
                return r.status, json.loads(r.read())
        except (OSError, ValueError) as exc:
            return None, str(exc)

    def infer(rows, version=None):
        host, port = url[len("http://"):].rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            body = {"inputs": [{"name": "pixels", "shape": [len(rows), 64], "datatype": "FP32",
                                "data": rows.ravel().tolist()}]}
            c.request("POST", "/v2/models/digits%s/infer" % ("/versions/%s" % version if version else ""),
                      json.dumps(body))
            r = c.getresponse()
            doc = json.loads(r.read())
            assert r.status == 200, doc
            o = doc["outputs"][0]
            return doc["model_version"], np.array(o["data"], dtype=np.float32).reshape(o["shape"])
        finally:
            c.close()
    try:
        deadline = time.monotonic() + 180
        url = None
        while time.monotonic() < deadline and not url:
            assert p.poll() is None, text()
            m = url_re.search(text())
            url = m and m.group(1)
            time.sleep(0.5)
        assert url, text()
        # both model servers, each in a container of its own, have said HELLO
        while time.monotonic() < deadline and "tfos_serve_servers_ready 2" not in get_text(url + "/metrics"):
            assert p.poll() is None, text()
            time.sleep(0.5)
        assert "tfos_serve_servers_ready 2" in get_text(url + "/metrics"), text()
        st, meta = get("/v2/models/digits")
        assert st == 200 and meta["platform"] == "pytorch_torchscript" and meta["versions"] == ["1"], meta
        v, out = infer(x[:40])
        assert v == "1"
        np.testing.assert_allclose(out, pred1[:40], atol=1e-5)
        # a client on the front end's host skips HTTP (the local socket)
        client = tfos.serve.Client(url)
        assert client.is_local
        v, outs = client.infer("digits", {"pixels": x[:7]})
        np.testing.assert_allclose(outs["probs"], pred1[:7], atol=1e-5)
        client.close()
        # a new version: uploaded under a temporary name, renamed into place
        tfos.fs.put(str(tmp_path / "m" / "other" / "1"), served + "/.incoming")
        fs, path = tfos.fs.filesystem(served)
        fs.mv(path + "/.incoming", path + "/2")
        switched = ["[worker:%d] tfos.serve: model digits version 2 loaded" % i for i in (0, 1)]
        while time.monotonic() < deadline + 120 and not all(s in text() for s in switched):
            time.sleep(0.5)
        assert all(s in text() for s in switched), text()
        assert get("/v2/models/digits")[1]["versions"] == ["2", "1"], text()
        for _ in range(6):  # every model server switched
            v, out = infer(x[:10])
            assert v == "2"
            np.testing.assert_allclose(out, pred2[:10], atol=1e-5)
        v, out = infer(x[:10], version="1")
        np.testing.assert_allclose(out, pred1[:10], atol=1e-5)
        app = app_id(text())
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=90) == 130, text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    assert "[worker:0] tfos.serve: model digits version 1 loaded from %s/1" % served in text(), text()
    state = subprocess.run([TFOS, "yarn", "status", app], env=yarn_cluster.env(), capture_output=True, text=True,
                           timeout=60).stdout
    assert re.search(r"state\s+KILLED", state), state


# a model for the registry test (tests/python/test_serve.py's BEHAVE, cut
# down): y = factor * x, factor the version dir's file, so that every
# answer says which registry version ran it
FACTOR_LOADER = """import os
import tfos.serve


def load(path):
    with open(os.path.join(path, "factor")) as f:
        factor = float(f.read())
    return tfos.serve.Model(lambda x: x * factor, inputs={"x": ("FP32", [-1, 1])}, outputs={"y": ("FP32", [-1, 1])})
"""


def test_yarn_serve_follows_a_registry_alias_through_hdfs(yarn_cluster, mlflow_server, monkeypatch, tmp_path):
    """tfos yarn serve --model m=models:/REG@ALIAS (issue 39): the front end
    in the ApplicationMaster's container fetches the version from MLflow's
    registry into the application's staging dir on HDFS, the model server in
    its container serves it; a promotion is served within a bounded wait
    while requests go on, none failing; a missing alias fails at start,
    named, before anything is submitted; after a kill nothing is left on
    HDFS."""
    import threading
    import tfos.fs
    import tfos.models
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    yarn_cluster.use(monkeypatch)
    reg = "yarn-follow-%d" % int(time.time() * 1000)
    for factor in (2, 3):
        d = tmp_path / ("v%d" % factor)
        (d / "assets").mkdir(parents=True)  # a subdirectory goes to HDFS too
        (d / "factor").write_text(str(factor))
        (d / "assets" / "note.txt").write_text("factor %d" % factor)
        tfos.models.register(str(d), reg, alias="production" if factor == 2 else None)
    (tmp_path / "factor_loader.py").write_text(FACTOR_LOADER)
    args = ["serve", "--worker-memory", "512m", "--am-memory", "384m", "--file", str(tmp_path / "factor_loader.py"),
            "--loader", "m=factor_loader.py:load", "--python", sys.executable, "--poll", "0.3"]
    env = dict(yarn_cluster.env(), MLFLOW_TRACKING_URI=mlflow_server.url, MLFLOW_TRACKING_TOKEN="not-for-yarn")

    # a missing alias: named, nothing submitted
    r = tfos_yarn(yarn_cluster, args + ["--model", "m=models:/%s@staging" % reg], timeout=60, env=env)
    assert r.returncode == 1 and "alias staging not found" in r.stderr, r.stderr
    assert "models:/%s@staging" % reg in r.stderr and "submitted" not in r.stderr, r.stderr

    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn"] + args + ["--model", "m=models:/%s@production" % reg,
                                                      "--registry-poll", "0.3"],
                             env=env, cwd=yarn_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)

    def text():
        return out_path.read_text()

    def infer(v):
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [v]}]}).encode()
        req = urllib.request.Request(url + "/v2/models/m/infer", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["outputs"][0]["data"][0] / v

    app = None
    try:
        url_re = re.compile(r"tfos yarn serve: model m: POST (http://[^/\s]+)/v2/models/m/infer")
        deadline = time.monotonic() + 180
        url = None
        while time.monotonic() < deadline and not (url and "tfos_serve_servers_ready 1" in get_text(url + "/metrics")):
            assert p.poll() is None, text()
            m = url_re.search(text())
            url = m and m.group(1)
            time.sleep(0.3)
        assert url and "tfos_serve_servers_ready 1" in get_text(url + "/metrics"), text()
        app = app_id(text())
        assert "MLFLOW_TRACKING_TOKEN stays on this host" in text(), text()
        assert infer(5.0) == 2.0
        staging = "%s/user/%s/.tfos/%s" % (yarn_cluster.default_fs, yarn_cluster.user, app)
        fs, path = tfos.fs.filesystem(staging + "/tfos-registry/m")
        assert [e.rsplit("/", 1)[-1] for e in fs.ls(path, detail=False)] == ["1"]

        answers, failures, stop = [], [], threading.Event()

        def client():
            while not stop.is_set():
                try:
                    answers.append(infer(7.0))
                except Exception as e:  # noqa: BLE001  (any failure is the test's finding)
                    failures.append(repr(e))

        t = threading.Thread(target=client)
        t.start()
        try:
            until = time.monotonic() + 30
            while time.monotonic() < until and len(answers) < 3:  # answered by version 1 meanwhile
                time.sleep(0.05)
            tfos.models.set_alias(reg, "production", "2")
            until = time.monotonic() + 60
            while time.monotonic() < until and answers[-5:] != [3.0] * 5:
                time.sleep(0.2)
        finally:
            stop.set()
            t.join(60)
        assert answers[-5:] == [3.0] * 5, (answers[-20:], text()[-3000:])
        assert not failures and set(answers) == {2.0, 3.0}, (failures[:5], set(answers))
        with urllib.request.urlopen(url + "/v2/models/m", timeout=30) as resp:
            meta = json.loads(resp.read())
        assert meta["registry"] == {"uri": "models:/%s@production" % reg, "version": "2",
                                    "versions": {"1": "1", "2": "2"}}, meta
        assert sorted(e.rsplit("/", 1)[-1] for e in fs.ls(path, detail=False)) == ["1", "2"]
        assert fs.exists(path + "/2/assets/note.txt")
        k = tfos_yarn(yarn_cluster, ["kill", app], timeout=60)
        assert k.returncode == 0, k.stdout + k.stderr
        p.wait(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    assert "[worker:0] tfos.serve: model m version 2 loaded from %s/tfos-registry/m/2" % staging in text(), text()
    assert app and not tfos.fs.exists(staging), text()  # the registry's copies went with the staging dir


def get_text(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except OSError:
        return ""
