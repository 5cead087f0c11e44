"""TensorFlowOnSpark's ``gpu_info``: pick free GPUs for this process.

Where the GPUs come from, first match wins:

1. the GPUs Spark gave this task (``TaskContext.resources()['gpu']``);
2. in a program started by a tfos node, the GPUs the node was given
   (its ``CUDA_VISIBLE_DEVICES``, which the agent set from Spark's resources);
3. ``nvidia-smi``: every GPU of the host, less those running compute apps.

Whatever the source, a GPU taken here is claimed host-wide by binding the
abstract Unix socket ``tfos-gpu/<index>``: the bind is atomic, the kernel
drops it when this process dies (no stale lock files), and any other process
on the host calling :func:`get_gpus` skips it. So two nodes on one host never
take the same GPU, even when both ask at the same instant with the same
``worker_index`` hint (TFoS relied on ``nvidia-smi`` showing a GPU busy,
which it does only once a process has allocated memory on it). A process
keeps its claims until it exits or calls :func:`get_gpus` again (a process
uses one set of GPUs: the new call replaces the old claims).
"""
import logging
import os
import random
import re
import socket
import subprocess
import time

__all__ = ["AS_STRING", "AS_LIST", "MAX_RETRIES", "is_gpu_available", "get_gpus"]

_log = logging.getLogger(__name__)

MAX_RETRIES = 3            #: tries to find the GPUs asked for (as TFoS)
RETRY_WAIT = 30.0          #: seconds before the n-th retry: n * RETRY_WAIT (as TFoS)
AS_STRING = "string"
AS_LIST = "list"

_claims = {}               # GPU index (str) -> bound abstract socket, held by this process
_GPU_LINE = re.compile(r"^GPU (\d+):.*\(UUID: ([^)\s]+)\)")


def _smi(*args):
    return subprocess.check_output(["nvidia-smi"] + list(args), stderr=subprocess.STDOUT).decode()


def _assigned():
    """The GPUs assigned to this task or node (sources 1 and 2), or None."""
    try:
        from ._spark.nodes import gpu_addresses
        gpus = gpu_addresses()
    except ImportError:
        gpus = None
    if gpus:
        return [str(g) for g in gpus]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if os.environ.get("TFOS_JOB_NAME") and visible.strip():
        return [g.strip() for g in visible.split(",") if g.strip()]
    return None


def is_gpu_available():
    """True when this process has GPUs to use: Spark's or its tfos node's
    assignment, or an ``nvidia-smi --list-gpus`` that works."""
    if _assigned():
        return True
    try:
        _smi("--list-gpus")
        return True
    except Exception:
        return False


def _smi_free():
    """Indices of the host's GPUs with no compute app, per nvidia-smi."""
    gpus = []
    for line in _smi("--list-gpus").splitlines():
        m = _GPU_LINE.match(line.strip())
        if m:
            gpus.append((m.group(1), m.group(2)))
    busy = set(x.strip() for x in _smi("--format=csv,noheader,nounits",
                                       "--query-compute-apps=gpu_uuid").splitlines() if x.strip())
    return [index for index, uuid in gpus if uuid not in busy]


def _claim(index):
    """Bind the host-wide claim on GPU ``index``; the socket, or None when
    another process holds it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind("\0tfos-gpu/%s" % index)
        return s
    except OSError:
        s.close()
        return None


def _claimed_elsewhere(index):
    if index in _claims:
        return False
    s = _claim(index)
    if s is None:
        return True
    s.close()
    return False


def _release_all():
    for s in _claims.values():
        s.close()
    _claims.clear()


def get_gpus(num_gpu=1, worker_index=-1, format=AS_STRING):
    """``num_gpu`` free GPUs for this process, as TensorFlowOnSpark's
    ``get_gpus``: a comma-separated string of indices (``format=AS_STRING``)
    or a list of index strings (``AS_LIST``), ready for
    ``CUDA_VISIBLE_DEVICES``.

    ``worker_index`` places as TFoS did: -1 picks at random among the free
    GPUs, ``i`` takes the ``i``-th block of ``num_gpu`` free GPUs (wrapping
    around). The GPUs returned are claimed host-wide (see the module's
    docstring). Tries ``MAX_RETRIES`` times, waiting ``n * RETRY_WAIT``
    seconds before the n-th retry, then raises RuntimeError saying what is
    free, what is busy and where the GPUs were looked for."""
    if format not in (AS_STRING, AS_LIST):
        raise ValueError("unknown GPU format %r: use gpu_info.AS_STRING or gpu_info.AS_LIST" % (format,))
    _release_all()
    if num_gpu <= 0:
        return "" if format == AS_STRING else []
    retries = 0
    while True:
        assigned = _assigned()
        if assigned is not None:
            source, candidates = "the GPUs Spark assigned (%s)" % ",".join(assigned), assigned
        else:
            try:
                candidates = _smi_free()
            except OSError as exc:
                raise RuntimeError("no GPUs on host %s: Spark gave this task no 'gpu' resources and nvidia-smi "
                                   "cannot run (%s)" % (socket.gethostname(), exc))
            source = "nvidia-smi's GPUs with no compute apps"
        free = [g for g in candidates if not _claimed_elsewhere(g)]
        if len(free) >= num_gpu:
            taken = _place(free, num_gpu, worker_index)
            socks = [(g, _claim(g)) for g in taken]
            if all(s is not None for _, s in socks):
                _claims.update(socks)
                _log.info("using GPU(s) %s", ",".join(taken))
                return ",".join(taken) if format == AS_STRING else taken
            for _, s in socks:          # another process took one meanwhile: look again
                if s is not None:
                    s.close()
            continue
        if retries >= MAX_RETRIES:
            held = [g for g in candidates if g not in free]
            raise RuntimeError("unable to find %d free GPU(s) on host %s among %s: free %s, claimed by other "
                               "tfos processes on this host %s" % (num_gpu, socket.gethostname(), source,
                                                                   free or "none", held or "none"))
        retries += 1
        _log.warning("unable to find %d free GPU(s) (free: %s); retry %d of %d", num_gpu, free, retries,
                     MAX_RETRIES)
        time.sleep(RETRY_WAIT * retries)


def _place(free, num_gpu, worker_index):
    """TFoS's placement among the free GPUs: -1 at random, else the
    ``worker_index``-th block of ``num_gpu``, wrapping around. (Where TFoS's
    wrap-around ran past the end and returned fewer GPUs than asked, the
    block is moved back to end at the last free GPU.)"""
    if worker_index == -1:
        free = list(free)
        random.shuffle(free)
        return free[:num_gpu]
    start = worker_index * num_gpu
    if start + num_gpu > len(free):
        start %= len(free)
        start = min(start, len(free) - num_gpu)
    return free[start:start + num_gpu]
