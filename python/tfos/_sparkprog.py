"""The program a tfos node agent runs for a Spark node: ``map_fun(args, ctx)``.

Started as ``python -m tfos._sparkprog`` by the agent, with TF_CONFIG and the
TFOS_* variables set. The user's function and its arguments come pickled
(cloudpickle, from the driver) in the memfd TFOS_PAYLOAD_FD. An exception in
the function is printed with its traceback and ends the program with exit code
1; the agent sends the last lines to the coordinator, which raises them on the
driver with the node's name.
"""
import os
import signal
import subprocess
import sys
import time
import traceback

from .tensorboard import stop_child  # TensorBoard ends as tfos.tensorboard ends its own


def _read_payload():
    fd = int(os.environ["TFOS_PAYLOAD_FD"])
    chunks, off = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, off)
        if not chunk:
            break
        chunks.append(chunk)
        off += len(chunk)
    os.close(fd)
    del os.environ["TFOS_PAYLOAD_FD"]
    from . import _payload
    return _payload.loads(b"".join(chunks), "map_fun")


def start_tensorboard(ctx):
    """TensorBoard on this node (the chief, or worker 0) when the driver asked
    for it: ``TFCluster.run(tensorboard=True)``. It is in the program's
    process group, so it ends with the program."""
    port = os.environ.get("TFOS_TENSORBOARD_PORT")
    if not port:
        return None
    logdir = os.environ.get("TFOS_TENSORBOARD_LOGDIR") or os.path.join(ctx.working_dir, "tensorboard_%d" % ctx.executor_id)
    if logdir.startswith("file://"):
        logdir = logdir[len("file://"):]
    if "://" not in logdir:
        os.makedirs(logdir, exist_ok=True)
    import importlib.util
    if importlib.util.find_spec("tensorboard") is None:
        # TensorFlow 2.21 no longer installs it: say so instead of announcing
        # a URL nothing will ever answer on (TFoS failed here too)
        raise RuntimeError("TFCluster.run(tensorboard=True): TensorBoard is not installed in %s on this executor "
                           "(pip install tensorboard)" % sys.executable)
    host = os.environ.get("TFOS_HOST") or "127.0.0.1"
    # a log dir on HDFS: TensorBoard reads local paths only, tfos.tensorboard follows the URL for it
    module = "tfos.tensorboard" if "://" in logdir else "tensorboard.main"
    argv = [sys.executable, "-m", module, "--logdir", logdir, "--host", host, "--port", port]
    sys.stderr.write("tfos: TensorBoard at http://%s:%s (logdir %s)\n" % (host, port, logdir))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _wait_for_stop():
    """ps and evaluator nodes whose function returned stay up until the
    cluster stops them (TensorFlowOnSpark's behaviour): a returned ps must not
    look like a failure to the workers still using it."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)




def _note_failure():
    """Say when this program caught its failure, in TFOS_ERROR_FILE (seconds
    since the epoch): when several nodes fail at once, the coordinator
    reports the one that failed first, not the one whose report came first
    (a peer's broken collective fails a moment after the node that broke it)."""
    path = os.environ.get("TFOS_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            f.write("%.6f\n" % time.time())
    except OSError:
        pass


def main():
    from . import TFNode
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        from . import _tfkeras
        _tfkeras.install()  # TFoS programs' Adam(lr=...) (tfos._tfkeras)
    map_fun, tf_args = _read_payload()
    if os.environ.get("TFOS_HDFS_CREDENTIALS"):
        from . import fs
        fs.keep_tokens_fresh()  # its token must not die while map_fun computes without HDFS
    ctx = TFNode.get_context()
    if os.environ.get("TFOS_INPUT_MODE") == "1" and ctx.job_name != "ps":
        # The feed's decoder needs numpy (about 0.1 s to import). Importing
        # it here, before map_fun reads and so before run() returns, keeps
        # it out of the first train()/inference(): else the node read its
        # first rows only after the import, while Spark's tasks had fed a
        # whole partition (docs/BENCHMARKS.md, first runs).
        import numpy  # noqa: F401
    tb = None
    try:
        if ctx.job_name in ("chief", "worker"):
            tb = start_tensorboard(ctx)
        map_fun(tf_args, ctx)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _note_failure()
            sys.stderr.write("tfos: map_fun on %s:%d called sys.exit(%r)\n" % (ctx.job_name, ctx.task_index, exc.code))
            sys.stderr.flush()
            stop_child(tb)
            os._exit(exc.code if isinstance(exc.code, int) else 1)
    except BaseException:
        _note_failure()
        sys.stdout.flush()
        sys.stderr.write("tfos: map_fun failed on %s:%d (executor %d)\n" % (ctx.job_name, ctx.task_index,
                                                                           ctx.executor_id))
        traceback.print_exc()
        sys.stderr.flush()
        stop_child(tb)
        os._exit(1)
    finally:
        stop_child(tb)
    sys.stdout.flush()
    sys.stderr.flush()
    if ctx.job_name == "ps":
        _wait_for_stop()


if __name__ == "__main__":
    main()
    from ._exit import exit_now
    exit_now(0)  # map_fun returned: end without the interpreter's teardown (tfos._exit)
