"""The local launcher from Python: what ``tfos run`` does, as a function."""
import os
import shutil
import signal

from . import _tfos


class ClusterError(RuntimeError):
    """A cluster failed: a node's program failed, the reservation timed out, or
    it was stopped. ``exit_code`` is what ``tfos run`` would have exited with,
    ``log_dir`` holds every node's log, and the message names the node, its
    exit status and its last lines."""

    def __init__(self, message, exit_code, log_dir):
        super().__init__(message)
        self.exit_code = exit_code
        self.log_dir = log_dir


def agent_path():
    """Path of the ``tfos`` binary that runs node agents: $TFOS_AGENT, else
    the one installed inside this package, else ``tfos`` on PATH."""
    env = os.environ.get("TFOS_AGENT")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tfos")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("tfos")
    if found:
        return found
    raise FileNotFoundError("the tfos agent binary is missing: expected %s (reinstall tfos) "
                            "or set TFOS_AGENT" % here)


_DEFAULTS = _tfos.DEFAULTS  # include/tfos/defaults.h


def run(argv, workers=1, ps=0, chief=False, evaluator=False, log_dir=None,
        reservation_timeout=_DEFAULTS["reservation_timeout_local"], grace=_DEFAULTS["stop_grace"],
        heartbeat_timeout=_DEFAULTS["heartbeat_timeout"], ps_runs_program=False, python=None, check=True,
        max_restarts=_DEFAULTS["max_restarts"], checkpoint_dir=None, input=None, epochs=1, status_port=0,
        quiet=False, keras="env", mlflow=None, mlflow_experiment=None, mlflow_run_name=None, framework="tf",
        min_nodes=None, elastic_wait=30.0, resize_in_place=False, grow_in_place=False):
    """Run ``argv`` on a cluster of local nodes and wait for it to end.

    Same semantics as ``tfos run --workers N --ps M [--chief] [--evaluator]
    -- argv...``: every node runs ``argv`` with TF_CONFIG and friends set; ps
    nodes run a built-in TensorFlow server unless ``ps_runs_program``. Returns
    the exit code (0 on success). With ``check`` (the default), a failed
    cluster raises :class:`ClusterError` instead. Ctrl-C stops every node
    cleanly and then raises KeyboardInterrupt.

    When a node fails, every node is stopped and the cluster formed again, up
    to ``max_restarts`` times (``TFOS_ATTEMPT`` counts up; programs resume from
    ``checkpoint_dir``, default ``<log_dir>/checkpoints``, given to them as
    ``TFOS_CHECKPOINT_DIR`` and ``ctx.checkpoint_dir``).

    The CLI's other options: ``input`` (a file or a list of files fed to the
    chief and workers, ``--input``; format by extension), ``epochs``
    (``--epochs``), ``status_port`` (``--status-port``: 0 any free port, -1
    none), ``quiet`` (``--quiet``: no feed progress lines) and ``keras``
    (``--keras``: ``"env"``, ``"auto"``, ``"legacy"`` or ``"3"``), ``framework``
    (``--framework``: ``"tf"``, every node's address in TF_CONFIG; ``"torch"``
    or ``"jax"``, the rank, the counts and rank 0's address only).

    ``mlflow`` (``--mlflow``): the http(s):// URI of an MLflow tracking server;
    the whole job, restarts included, is one MLflow run there (in experiment
    ``mlflow_experiment``, default ``$MLFLOW_EXPERIMENT_NAME`` else
    "Default"; named ``mlflow_run_name``) with the launch parameters, every
    rank's ``ctx.report`` metrics and the restart history (docs/MODELS.md,
    "Tracking"). A server that cannot be reached does not fail the job.

    ``min_nodes`` (``--min-nodes``), ``elastic_wait`` (``--elastic-wait``)
    ``resize_in_place`` (``--resize-in-place``) and ``grow_in_place``
    (``--grow-in-place``): an elastic size (docs/RELIABILITY.md, "Elastic
    size").

    Must be called from a thread that outlives the run: agents are tied to the
    launching thread and end with it (they get a parent-death signal).
    """
    cluster = _tfos.LocalCluster([str(a) for a in argv], agent_path(), workers, ps, chief, evaluator,
                                 log_dir=None if log_dir is None else str(log_dir),
                                 reservation_timeout=float(reservation_timeout), grace=float(grace),
                                 heartbeat_timeout=float(heartbeat_timeout),
                                 ps_runs_program=ps_runs_program, python=python, max_restarts=int(max_restarts),
                                 checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir),
                                 inputs=None if input is None else [str(p) for p in (
                                     [input] if isinstance(input, (str, bytes, os.PathLike)) else input)],
                                 epochs=int(epochs), status_port=int(status_port), quiet=bool(quiet),
                                 keras=keras, caller_reports=bool(check),
                                 mlflow=None if mlflow is None else str(mlflow),
                                 mlflow_experiment=mlflow_experiment, mlflow_run_name=mlflow_run_name, framework=framework,
                                 min_nodes=int(min_nodes or 0), elastic_wait=float(elastic_wait),
                                 resize_in_place=bool(resize_in_place), grow_in_place=bool(grow_in_place))
    interrupted = None
    try:
        while True:
            try:
                if cluster.step(200):
                    break
            except KeyboardInterrupt as exc:
                if interrupted is None:
                    interrupted = exc
                    cluster.stop("interrupted by Ctrl-C (KeyboardInterrupt)", signal.SIGINT)
        code, failure, logs = cluster.exit_code, cluster.failure, cluster.log_dir
    finally:
        cluster.close()
    if interrupted is not None:
        raise interrupted
    if code != 0 and check:
        raise ClusterError("the cluster failed (exit code %d):\n%s\nlogs: %s" % (code, failure, logs),
                           code, logs)
    return code
