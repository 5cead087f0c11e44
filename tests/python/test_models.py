"""Models in MLflow's registry (issue 39): tfos.models.register against a
real `mlflow server` (tests/support/mlflowserver.py), `tfos serve --model
NAME=models:/REG@ALIAS` following the alias (promotion and rollback) under
concurrent clients, and the errors at start. The model is test_serve's
BEHAVE loader: y = factor * x, factor the version dir's file, so every
answer says which registry version ran it."""
import json
import os
import re
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import PY, tfos_cli, wait_for
from test_serve import BEHAVE, Server, post, xbody


def set_alias(url, name, alias, version):
    req = urllib.request.Request(url + "/api/2.0/mlflow/registered-models/alias", method="POST",
                                 data=json.dumps({"name": name, "alias": alias, "version": version}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


class RegistryServer(Server):
    """tfos serve of a registry model as "m" (test_serve.Server's methods)."""

    def __init__(self, uri, tmp_path, marker, *args):
        (tmp_path / "behave.py").write_text(BEHAVE)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([tfos_cli(), "serve", "--model", "m=" + uri, "--loader",
                                      "m=%s:load" % (tmp_path / "behave.py"), "--port", "0", "--python", PY,
                                      "--log-dir", str(tmp_path / ("logs-" + marker))] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.err = [self.proc.stderr.readline()]
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v2/models/m/infer", self.err[0])
        assert m, self.err[0] + self.proc.stderr.read()
        self.port = int(m.group(1))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        assert wait_for(lambda: self.get("/v2/health/ready")[0] == 200, 60, 0.2), self.text()


def factor_dir(tmp_path, name, factor):
    d = tmp_path / name
    d.mkdir()
    (d / "factor").write_text(str(factor))
    (d / "assets").mkdir()  # a subdirectory, copied too
    (d / "assets" / "note.txt").write_text("version with factor %s" % factor)
    return d


def test_a_registered_alias_is_served_and_followed_under_load(mlflow_server, tmp_path, marker, monkeypatch):
    import tfos.models
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    v1 = tfos.models.register(str(factor_dir(tmp_path, "e1", 2)), "digits-follow", alias="production")
    v2 = tfos.models.register(str(factor_dir(tmp_path, "e2", 3)), "digits-follow")
    assert (v1.version, v2.version) == ("1", "2") and v1.run_id != v2.run_id
    assert v2.source.startswith("mlflow-artifacts:/") and v2.source.endswith("/" + v2.run_id + "/artifacts/model")

    s = RegistryServer("models:/digits-follow@production", tmp_path, marker, "--registry-poll", "0.3",
                       "--poll", "0.3", "--replicas", "2")
    try:
        meta = json.loads(s.get("/v2/models/m")[1])
        assert meta["registry"] == {"uri": "models:/digits-follow@production", "version": "1",
                                    "versions": {"1": "1"}}, meta
        st, doc = post(s, "m", xbody([1.0, 5.0]))
        assert st == 200 and doc["outputs"][0]["data"] == [2.0, 10.0], doc

        # 4 clients ask all along; the alias is promoted to 2, then rolled back to 1
        answers, failures, stop = [], [], threading.Event()

        def client(k):
            while not stop.is_set():
                try:
                    st, doc = post(s, "m", xbody([float(k + 1)]))
                except Exception as e:  # noqa: BLE001  (any failure is the test's finding)
                    failures.append(repr(e))
                    continue
                if st != 200:
                    failures.append((st, doc))
                else:
                    answers.append(doc["outputs"][0]["data"][0] / (k + 1))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(answers) > 20, 30)
            set_alias(mlflow_server.url, "digits-follow", "production", "2")
            promoted = wait_for(lambda: answers[-8:] == [3.0] * 8, 60)
            set_alias(mlflow_server.url, "digits-follow", "production", "1")
            rolled_back = wait_for(lambda: answers[-8:] == [2.0] * 8, 60)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not failures, failures[:5]
        assert promoted and rolled_back, (answers[-20:], s.text()[-3000:])
        assert set(answers) == {2.0, 3.0}
        meta = json.loads(s.get("/v2/models/m")[1])
        # folders in fetch order: 1 (registry 1), 2 (registry 2), 3 (registry 1 again, the rollback)
        assert meta["registry"] == {"uri": "models:/digits-follow@production", "version": "1",
                                    "versions": {"1": "1", "2": "2", "3": "1"}}, meta
        assert meta["versions"][0] == "3"
        assert "models:/digits-follow@production moved from version 1 to 2" in s.text()
    finally:
        assert s.stop() in (0, 143, -15), s.text()[-3000:]
    leftovers = [d for d in os.listdir(os.environ.get("TMPDIR", "/tmp")) if d.startswith("tfos-registry-")]
    cache = re.search(r"fetched into (\S+/tfos-registry-\w+)/", s.text()).group(1)
    assert os.path.basename(cache) not in leftovers, "the registry's copies outlived tfos serve"


def test_a_missing_model_alias_or_version_fails_serve_at_start_naming_it(mlflow_server, tmp_path, monkeypatch):
    import tfos.models
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    tfos.models.register(str(factor_dir(tmp_path, "e1", 2)), "digits-missing", alias="production")
    (tmp_path / "behave.py").write_text(BEHAVE)

    def serve(uri, env=None):
        t0 = time.monotonic()
        r = subprocess.run([tfos_cli(), "serve", "--model", "m=" + uri, "--loader", "m=%s:load" % (tmp_path / "behave.py"),
                            "--port", "0", "--python", PY], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, **(env or {})))
        assert r.returncode != 0 and time.monotonic() - t0 < 30, r.stderr
        assert "model server" not in r.stderr and "coordinator" not in r.stderr, r.stderr  # nothing started
        return r.stderr

    err = serve("models:/digits-missing@staging")
    assert "models:/digits-missing@staging" in err and "alias staging not found" in err and mlflow_server.url in err
    err = serve("models:/no-such-model@production")
    assert "models:/no-such-model@production" in err and "no-such-model" in err and "not found" in err
    err = serve("models:/digits-missing/7")
    assert "models:/digits-missing/7" in err and "not found" in err and mlflow_server.url in err
    err = serve("models:/digits-missing/1", {"MLFLOW_TRACKING_URI": ""})
    assert "set MLFLOW_TRACKING_URI" in err
    err = serve("models:/digits-missing")
    assert "models:/NAME@ALIAS or models:/NAME/VERSION" in err


def test_register_names_what_is_wrong(tmp_path, monkeypatch):
    import tfos.models
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(tfos.models.RegistryError, match="set MLFLOW_TRACKING_URI"):
        tfos.models.register(str(tmp_path), "x")
    with pytest.raises(tfos.models.RegistryError, match="not a directory"):
        tfos.models.register(str(tmp_path / "nope"), "x", tracking_uri="http://127.0.0.1:1")
    with pytest.raises(tfos.models.RegistryError, match="127.0.0.1:1"):
        tfos.models.register(str(tmp_path), "x", tracking_uri="http://127.0.0.1:1")


def test_the_register_snippet_runs_as_written(mlflow_server, tmp_path):
    from test_doc_snippets import block
    text = block("docs/MODELS.md", "tfos.models.register(")
    export = factor_dir(tmp_path, "digits-export", 2)
    code = text.replace("/tmp/digits-export", str(export))  # the export's path, as the text says
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MLFLOW_TRACKING_URI=mlflow_server.url, MLFLOW_RUN_ID=""))
    assert r.returncode == 0, r.stderr
    m = re.search(r"registered digits version (\d+) from run (\w+)", r.stdout)
    assert m, r.stdout
    for alias in ("candidate", "production"):
        with urllib.request.urlopen("%s/api/2.0/mlflow/registered-models/alias?name=digits&alias=%s"
                                    % (mlflow_server.url, alias), timeout=30) as f:
            mv = json.loads(f.read())["model_version"]
        assert (mv["version"], mv["run_id"]) == m.groups(), (alias, mv)
    with urllib.request.urlopen("%s/api/2.0/mlflow-artifacts/artifacts?path=0/%s/artifacts/model"
                                % (mlflow_server.url, m.group(2)), timeout=30) as f:
        names = {e["path"] for e in json.loads(f.read())["files"]}
    assert names == {"factor", "assets"}, names


def test_a_canary_splits_requests_by_weight_with_series_per_arm(mlflow_server, tmp_path, marker, monkeypatch):
    import http.client
    import tfos.models
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    tfos.models.register(str(factor_dir(tmp_path, "e1", 2)), "digits-canary", alias="production")
    tfos.models.register(str(factor_dir(tmp_path, "e2", 3)), "digits-canary", alias="candidate")
    s = RegistryServer("models:/digits-canary@production:90,models:/digits-canary@candidate:10", tmp_path, marker)
    try:
        meta = json.loads(s.get("/v2/models/m")[1])
        arms = {a["model"]["name"]: (a["weight"], a["model"]["registry"]["version"]) for a in meta["canary"]}
        assert arms == {"m.production": (90, "1"), "m.candidate": (10, "2")}, meta
        counts, failures = {}, []

        def client(k):
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            for _ in range(500):
                st, doc = post(s, "m", xbody([1.0]), conn=conn)
                if st != 200:
                    failures.append(doc)
                    continue
                key = (doc["model_name"], doc["outputs"][0]["data"][0])  # the arm, and the factor that ran
                counts[key] = counts.get(key, 0) + 1
            conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures, failures[:3]
        assert set(counts) == {("m.production", 2.0), ("m.candidate", 3.0)}, counts
        share = counts[("m.candidate", 3.0)] / 2000.0
        assert abs(share - 0.10) <= 0.05, counts
        metrics = s.get("/metrics")[1].decode()
        for arm, factor in (("m.production", 2.0), ("m.candidate", 3.0)):
            n = counts[(arm, factor)]
            assert 'tfos_serve_requests_total{model="%s",outcome="ok"} %d' % (arm, n) in metrics, metrics
            assert 'tfos_serve_version_requests_total{model="%s",version="1"} %d' % (arm, n) in metrics, metrics
    finally:
        s.stop()


def test_canary_usage_errors_name_the_option():
    for arg, text in (("m=models:/a@p:90,models:/a@c", "a canary is NAME=models:/REG@ALIAS:WEIGHT"),
                      ("m=models:/a@p:90", "a canary has 2 to 4 arms"),
                      ("m=/tmp/x:90,/tmp/y:10", "a canary's arms come from MLflow's registry"),
                      ("m=models:/a@p:0,models:/a@c:10", "weights 1 to 1000000"),
                      ("m=models:/a@p:50,models:/b@p:50", "that name (a canary's arm) is given twice")):
        r = subprocess.run([tfos_cli(), "serve", "--model", arg], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and text in r.stderr, (arg, r.stderr)


def test_export_saved_model_registers_as_on_the_chief(mlflow_server, tmp_path):
    """compat.export_saved_model(register_as=) in a fresh interpreter (it
    imports TensorFlow): the SavedModel is in the registry, whole."""
    code = """
import os, tensorflow as tf
from tfos import compat
class M(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
    def __call__(self, x):
        return x * 2.0
compat.export_saved_model(M(), %r, is_chief=True, register_as="exported")
os.environ.pop("MLFLOW_TRACKING_URI")
compat.export_saved_model(M(), %r, is_chief=True, register_as="exported")  # not registered: a warning
""" % (str(tmp_path / "exp1"), str(tmp_path / "exp2"))
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, MLFLOW_TRACKING_URI=mlflow_server.url, MLFLOW_RUN_ID="",
                                TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MLFLOW_TRACKING_URI is not set" in r.stderr, r.stderr[-2000:]
    with urllib.request.urlopen("%s/api/2.0/mlflow/registered-models/get-latest-versions?name=exported"
                                % mlflow_server.url, timeout=30) as f:
        versions = json.loads(f.read())["model_versions"]
    assert [v["version"] for v in versions] == ["1"], versions
    with urllib.request.urlopen("%s/api/2.0/mlflow-artifacts/artifacts?path=0/%s/artifacts/model"
                                % (mlflow_server.url, versions[0]["run_id"]), timeout=30) as f:
        names = {e["path"] for e in json.loads(f.read())["files"]}
    assert {"saved_model.pb", "variables"} <= names, names
