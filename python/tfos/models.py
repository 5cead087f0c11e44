"""Registering exported models in MLflow's model registry (docs/MODELS.md).

``register(path, name)`` uploads an exported model directory (a TensorFlow
SavedModel, or any directory a ``tfos serve --loader`` function reads) as a
run's artifacts, and registers it as a new version of ``name`` with that run
as its source; ``tfos serve --model NAME=models:/NAME@ALIAS`` then serves it.

It speaks MLflow's REST API with ``requests`` (no ``mlflow`` package needed
where the model is exported), to the server in ``MLFLOW_TRACKING_URI``, with
MLflow's own credentials variables (``MLFLOW_TRACKING_TOKEN``, or
``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``; ``MLFLOW_TRACKING_INSECURE_TLS``).
Artifacts go through the tracking server (``mlflow server`` serves them by
default), so nothing but the server's URL is needed.
"""
import collections
import os
import time
import urllib.parse

__all__ = ["register", "set_alias", "ModelVersion", "RegistryError"]

ModelVersion = collections.namedtuple("ModelVersion", "name version run_id source")

_TIMEOUT = 60  # seconds per request (a file's upload included)


class RegistryError(RuntimeError):
    """The registry refused or could not be reached; the text says which call and why."""


class _Client(object):
    def __init__(self, uri):
        import requests
        if not uri:
            raise RegistryError("tfos.models.register needs MLflow's tracking server: set MLFLOW_TRACKING_URI "
                                "(http://HOST:PORT) or pass tracking_uri=")
        if not uri.startswith(("http://", "https://")):
            raise RegistryError("tracking URI %r is not an MLflow server (http:// or https://): file stores and "
                                "databricks are not taken" % uri)
        self.uri = uri.rstrip("/")
        self.s = requests.Session()
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        user, pw = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if token:
            self.s.headers["Authorization"] = "Bearer " + token
        elif user is not None and pw is not None:
            self.s.auth = (user, pw)
        if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
            self.s.verify = False

    def call(self, method, path, ok_codes=(), **kw):
        import requests
        try:
            r = self.s.request(method, self.uri + path, timeout=_TIMEOUT, **kw)
        except requests.RequestException as e:
            raise RegistryError("MLflow tracking server at %s: %s %s: %s" % (self.uri, method, path, e)) from None
        if r.status_code // 100 == 2:
            return r.json() if r.content and "json" in r.headers.get("Content-Type", "") else {}
        try:
            doc = r.json()
        except ValueError:
            doc = {"message": r.text[:300]}
        if doc.get("error_code") in ok_codes:
            return None
        raise RegistryError("MLflow tracking server at %s: %s %s: HTTP %d %s: %s" % (
            self.uri, method, path.split("?")[0], r.status_code, doc.get("error_code", ""), doc.get("message", "")))


def _artifact_path(uri):
    """An ``mlflow-artifacts:`` URI's path (what the artifact proxy takes)."""
    if not uri.startswith("mlflow-artifacts:"):
        raise RegistryError("the run's artifacts are at %s, not served through the tracking server: run `mlflow "
                            "server` with --serve-artifacts (the default)" % uri)
    p = uri[len("mlflow-artifacts:"):]
    if p.startswith("//"):  # mlflow-artifacts://host:port/path: the server's own host
        p = p[2:].partition("/")[2]
    return p.strip("/")


def register(path, name, run_id=None, alias=None, tracking_uri=None, artifact_path="model"):
    """Register the exported model in directory ``path`` as a new version of
    ``name`` in MLflow's model registry; return its :class:`ModelVersion`.

    The directory's files are uploaded as the artifacts of run ``run_id``
    (else ``$MLFLOW_RUN_ID``, the job's run when tfos tracks it; else a new
    run, in ``$MLFLOW_EXPERIMENT_ID`` or the Default experiment, ended
    here) under ``artifact_path``. The registered model is created if
    missing; the new version's source is that run's artifacts, its
    ``run_id`` the run. ``alias`` (``"production"``, ``"candidate"``) then
    points at the new version. Raises :class:`RegistryError` naming the
    call that failed.
    """
    if not os.path.isdir(path):
        raise RegistryError("tfos.models.register: %s is not a directory (an exported model)" % path)
    c = _Client(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
    run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
    created = False
    if run_id:
        run = c.call("GET", "/api/2.0/mlflow/runs/get?" + urllib.parse.urlencode({"run_id": run_id}))
    else:
        run = c.call("POST", "/api/2.0/mlflow/runs/create", json={
            "experiment_id": os.environ.get("MLFLOW_EXPERIMENT_ID", "0"), "run_name": "register-" + name,
            "start_time": int(time.time() * 1000), "tags": [{"key": "mlflow.source.name", "value": "tfos.models"}]})
        created = True
    info = run["run"]["info"]
    run_id = info["run_id"]
    base = _artifact_path(info["artifact_uri"]) + "/" + artifact_path.strip("/")
    for root, _, files in os.walk(path):
        for f in sorted(files):
            local = os.path.join(root, f)
            rel = os.path.relpath(local, path).replace(os.sep, "/")
            with open(local, "rb") as fh:
                c.call("PUT", "/api/2.0/mlflow-artifacts/artifacts/" + urllib.parse.quote(base + "/" + rel), data=fh)
    if created:
        c.call("POST", "/api/2.0/mlflow/runs/update", json={"run_id": run_id, "status": "FINISHED",
                                                               "end_time": int(time.time() * 1000)})
    c.call("POST", "/api/2.0/mlflow/registered-models/create", ok_codes=("RESOURCE_ALREADY_EXISTS",),
           json={"name": name})
    source = info["artifact_uri"].rstrip("/") + "/" + artifact_path.strip("/")
    mv = c.call("POST", "/api/2.0/mlflow/model-versions/create",
                json={"name": name, "source": source, "run_id": run_id})["model_version"]
    deadline = time.monotonic() + 60  # a registry that copies the files first says PENDING_REGISTRATION
    while mv.get("status", "READY") == "PENDING_REGISTRATION" and time.monotonic() < deadline:
        time.sleep(0.5)
        mv = c.call("GET", "/api/2.0/mlflow/model-versions/get?" + urllib.parse.urlencode(
            {"name": name, "version": mv["version"]}))["model_version"]
    if mv.get("status", "READY") != "READY":
        raise RegistryError("model %s version %s is %s after 60 s: %s" % (name, mv["version"], mv.get("status"),
                                                                           mv.get("status_message", "")))
    if alias:
        set_alias(name, alias, mv["version"], tracking_uri=c.uri)
    return ModelVersion(name, mv["version"], run_id, source)


def set_alias(name, alias, version, tracking_uri=None):
    """Point ``models:/NAME@ALIAS`` at ``version`` (a promotion, or a
    rollback): a ``tfos serve`` following the alias serves it next."""
    c = _Client(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
    c.call("POST", "/api/2.0/mlflow/registered-models/alias",
           json={"name": name, "alias": alias, "version": str(version)})
