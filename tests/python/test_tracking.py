"""MLflow tracking (issue 39): one run per job against a real tracking
server (tests/support/mlflowserver.py), read back with mlflow-skinny's
MlflowClient. A 2-worker `tfos run --mlflow` with a node killed once gives
one run with per-rank metrics, their mean, the program's own mlflow.log_*,
the restart history and FINISHED; the server stopped mid-run does not
stop the job (tfos.run(mlflow=)), which warns once and ends saying what
was not logged; a URI that is not a server's is refused before any node
starts."""
import os
import re
import shutil
import subprocess
import uuid

import pytest

from conftest import PY, run_tfos, tfos_cli, wait_for

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

# Each rank reports 3 steps (loss = 1/step + rank); on attempt 1, worker:1
# kills itself with SIGKILL after its second; on the last attempt rank 0
# logs through MLflow's own client, into tfos's run (MLFLOW_RUN_ID).
REPORTER = ("import os, signal, sys, time\n"
            "from tfos import TFNode\n"
            "ctx = TFNode.get_context()\n"
            "for step in range(1, 4):\n"
            "    ctx.report(step=step, loss=1.0 / step + ctx.executor_id)\n"
            "    time.sleep(0.6)\n"
            "    if ctx.attempt == 1 and ctx.executor_id == 1 and step == 2:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "if ctx.executor_id == 0 and ctx.attempt == 2:\n"
            "    import mlflow\n"
            "    mlflow.log_param('lr', '0.01')\n"
            "    mlflow.log_metric('own', 7.0)\n")


def only_run(client, experiment):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, "no experiment %s" % experiment
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return runs[0]


def test_tfos_run_is_one_mlflow_run_with_ranks_and_restarts(tmp_path, marker, mlflow_server):
    experiment = "restart-" + uuid.uuid4().hex[:8]
    r = run_tfos(["run", "--workers", "2", "--mlflow", mlflow_server.url, "--mlflow-experiment", experiment,
                  "--log-dir", str(tmp_path / "logs"), "--", PY, "-c", REPORTER, marker], timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "restarting every node (attempt 2 of 4)" in r.stderr
    client = MlflowClient(mlflow_server.url)
    run = only_run(client, experiment)  # attempts inside the one run
    assert re.search(r"MLflow run %s \(experiment \"%s\"\) at %s: FINISHED" % (run.info.run_id, experiment,
                                                                             re.escape(mlflow_server.url)), r.stderr)
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert p["workers"] == "2" and p["max_restarts"] == "3" and "-c" in p["program"]
    assert p["lr"] == "0.01" and run.data.metrics["own"] == 7.0  # the program's own mlflow.log_*
    t = run.data.tags
    assert t["tfos.attempts"] == "2"
    assert t["tfos.attempt.1.cause"] == "signal" and t["tfos.attempt.1.node"] == "worker:1"
    assert t["tfos.attempt.1.decision"] == "restart"
    assert "failed: signal 9 (Killed) -> restarted" in t["tfos.restart_history"]
    # every rank's reports, at their steps; each rank's last report comes with its exit
    r0 = {(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "rank0/loss")}
    r1 = {(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "rank1/loss")}
    assert (3, pytest.approx(1 / 3)) in [(s, v) for s, v in r0] and (3, pytest.approx(1 + 1 / 3)) in list(r1)
    assert all(v == pytest.approx(1.0 / s) for s, v in r0)
    assert all(v == pytest.approx(1.0 + 1.0 / s) for s, v in r1)
    mean = client.get_metric_history(run.info.run_id, "loss")
    assert mean and all(0 < m.value < 2.5 for m in mean)
    assert "tfos.cluster.size" in run.data.metrics  # the status page's figures at the end


# Reports a step every 0.2 s until the go file appears, then 5 more, and ends.
UNTIL_GO = ("import os, sys, time\n"
            "from tfos import TFNode\n"
            "ctx = TFNode.get_context()\n"
            "go, step, more = sys.argv[1], 0, None\n"
            "while more is None or more > 0:\n"
            "    step += 1\n"
            "    ctx.report(step=step, loss=1.0 / step)\n"
            "    time.sleep(0.2)\n"
            "    if more is None and os.path.exists(go):\n"
            "        more = 5\n"
            "    elif more is not None:\n"
            "        more -= 1\n"
            "    if step > 1500:\n"
            "        sys.exit(3)\n")


def test_server_stopped_mid_run_warns_once_and_the_job_goes_on(tmp_path, marker, mlflow_server):
    from mlflowserver import MlflowServer
    work = tmp_path / "mlflow"
    work.mkdir()
    # the shared server's store, schema made: this one starts without migrating
    shutil.copy(os.path.join(mlflow_server.work_dir, "mlflow.db"), work / "mlflow.db")
    server = MlflowServer(work).start()
    try:
        go = tmp_path / "go"
        experiment = "stopped-" + uuid.uuid4().hex[:8]
        launcher = ("import sys, tfos\n"
                    "sys.exit(tfos.run([sys.executable, '-c', sys.argv[1], sys.argv[2], sys.argv[3]], workers=1, "
                    "log_dir=sys.argv[4], mlflow=sys.argv[5], mlflow_experiment=sys.argv[6], check=False))\n")
        proc = subprocess.Popen([PY, "-c", launcher, UNTIL_GO, str(go), marker, str(tmp_path / "logs"),
                                 server.url, experiment], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = MlflowClient(server.url)

        def logged():
            exp = client.get_experiment_by_name(experiment)
            runs = client.search_runs([exp.experiment_id]) if exp else []
            return runs and "rank0/loss" in runs[0].data.metrics and runs[0]

        run = wait_for(logged, 60, 0.3)
        assert run, "nothing logged within 60 s"
        server.stop()
        go.write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == 0, err[-3000:]
    assert err.count("MLflow: cannot log to %s" % server.url) == 1, err[-3000:]
    m = re.search(r"MLflow: not logged to %s run %s: (.*)" % (re.escape(server.url), run.info.run_id), err)
    assert m, err[-3000:]
    assert re.search(r"\d+ of \d+ metrics", m.group(1)) and "the run's status, FINISHED" in m.group(1), m.group(1)


def test_uri_that_is_not_a_tracking_server_is_refused_at_start(tmp_path, marker):
    r = run_tfos(["run", "--workers", "1", "--mlflow", "file:///tmp/mlruns", "--log-dir", str(tmp_path / "logs"), "--", PY, "-c",
                  "print('ran')", marker])
    assert r.returncode != 0
    assert "ran" not in r.stdout and "starting" not in r.stderr
    assert "MLflow tracking URI file:///tmp/mlruns" in r.stderr and "http://" in r.stderr
    assert "mlflow server" in r.stderr  # how to fix it
    # tfos yarn checks it before submitting (the ApplicationMaster's launcher
    # makes the run), and keeps credentials off YARN's command lines
    r = run_tfos(["yarn", "--workers", "1", "--mlflow", "file:///tmp/mlruns", "--", "true"])
    assert r.returncode == 2 and "MLflow tracking URI file:///tmp/mlruns" in r.stderr
    r = run_tfos(["yarn", "--workers", "1", "--mlflow", "http://u:secret@127.0.0.1:5000", "--", "true"])
    assert r.returncode == 2 and "without user:password@" in r.stderr and "secret" not in r.stderr


def test_models_md_tracking_snippets_as_written(tmp_path, marker, mlflow_server):
    """docs/MODELS.md, "Tracking": train.py as written, the tfos run command
    and the read-back, against the tests' server in place of 127.0.0.1:5000."""
    from test_doc_snippets import block, venv_active
    doc_url = "http://127.0.0.1:5000"
    (tmp_path / "train.py").write_text(block("docs/MODELS.md", "ctx.report(step=step, loss=loss)"))
    command = block("docs/MODELS.md", "tfos run --workers 2 --mlflow").replace(doc_url, mlflow_server.url)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **venv_active())
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", command.strip() + " " + marker], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    run_id = re.search(r"MLflow run (\w+) \(experiment \"demo\"\) at \S+: FINISHED", r.stderr).group(1)
    read = block("docs/MODELS.md", "MlflowClient(").replace(doc_url, mlflow_server.url)
    r = subprocess.run([PY, "-c", read], cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "FINISHED 2 0.01", r.stdout
    history = eval(lines[1])  # rank 1's losses: 1/step + 1 at the steps the coordinator saw, the last among them
    assert history and (3, pytest.approx(1 + 1 / 3)) in history, r.stdout
    assert all(v == pytest.approx(1 + 1.0 / s) for s, v in history), r.stdout
    assert MlflowClient(mlflow_server.url).get_run(run_id).data.params["learning_rate"] == "0.01"


def test_a_driver_that_imported_tensorflow_logs_to_mlflow(tmp_path, mlflow_server):
    """`import tensorflow` loads TF's own curl into the global symbol
    scope; libtfos's libcurl must still call its own functions (it crashed
    the Spark driver: curl_easy_perform reached TF's curl_multi_add_handle).
    In a child process, so a crash fails this test and not the session."""
    pytest.importorskip("tensorflow")
    experiment = "tf-driver-%s" % uuid.uuid4().hex[:8]
    code = ("import tensorflow\n"
            "from tfos import _tfos\n"
            "t = _tfos.Tracker(%r, %r, 'driver')\n"
            "t.param('framework', 'tensorflow')\n"
            "t.end('FINISHED')\n"
            "t.close()\n"
            "print('logged')\n" % (mlflow_server.url, experiment))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "logged" in done.stdout, (done.returncode, done.stderr[-3000:])
    run = only_run(MlflowClient(mlflow_server.url), experiment)
    assert run.data.params == {"framework": "tensorflow"}
    assert run.info.status == "FINISHED"
