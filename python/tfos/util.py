"""TensorFlowOnSpark's ``util`` helpers, for programs that import them.

``single_node_env`` takes GPUs through :mod:`tfos.gpu_info` (so two
processes on one host never take the same GPU); the executor-id file of TFoS
is kept only for programs that write it themselves: tfos gives every node
its executor id in its context.
"""
import logging
import os
import socket
import subprocess

from . import gpu_info

__all__ = ["single_node_env", "get_ip_address", "find_in_path", "write_executor_id", "read_executor_id"]

_log = logging.getLogger(__name__)

_EXECUTOR_ID_FILE = "executor_id"


def single_node_env(num_gpus=1, worker_index=-1, nodes=[]):
    """Prepare this process's environment as TensorFlowOnSpark does: with
    ``HADOOP_PREFIX`` set, Hadoop's expanded classpath is added to
    ``CLASSPATH`` once (libhdfs needs it without globs); then
    ``CUDA_VISIBLE_DEVICES`` is set to ``num_gpus`` GPUs from
    :func:`tfos.gpu_info.get_gpus` when the host has GPUs and ``num_gpus >
    0``, else to "" (CPU). ``worker_index`` and ``nodes`` (``host:port``
    strings) give the placement hint: this node's index among the nodes on
    its host, or ``worker_index`` itself without ``nodes``."""
    if "HADOOP_PREFIX" in os.environ and "TFOS_CLASSPATH_UPDATED" not in os.environ:
        hadoop = os.path.join(os.environ["HADOOP_PREFIX"], "bin", "hadoop")
        extra = subprocess.check_output([hadoop, "classpath", "--glob"]).decode().strip()
        classpath = os.environ.get("CLASSPATH", "")
        os.environ["CLASSPATH"] = classpath + os.pathsep + extra if classpath else extra
        os.environ["TFOS_CLASSPATH_UPDATED"] = "1"

    if num_gpus > 0 and gpu_info.is_gpu_available():
        if worker_index >= 0 and nodes:
            my_addr = nodes[worker_index]
            my_host = my_addr.split(":")[0]
            index = [n for n in nodes if n.split(":")[0] == my_host].index(my_addr)
        else:
            index = worker_index
        gpus = gpu_info.get_gpus(num_gpus, index)
        _log.info("using GPU(s) %s", gpus)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    else:
        _log.info("using the CPU")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def get_ip_address():
    """This host's address on the interface of its default route (no packet
    is sent); the address its name resolves to when it has no route out."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("8.8.8.8", 80))
        return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.getfqdn())
    finally:
        s.close()


def find_in_path(path, file):
    """The first ``<dir>/<file>`` that is a regular file, for the dirs of
    ``path`` (an ``os.pathsep``-separated string); False when none is."""
    for d in path.split(os.pathsep):
        candidate = os.path.join(d, file)
        if os.path.isfile(candidate):
            return candidate
    return False


def write_executor_id(num):
    """Write ``num`` to the file ``executor_id`` in the current directory,
    as TensorFlowOnSpark's executors did. tfos itself neither writes nor
    needs it (see :func:`read_executor_id`)."""
    with open(_EXECUTOR_ID_FILE, "w") as f:
        f.write(str(num))


def read_executor_id():
    """The executor id: from the ``executor_id`` file in the current
    directory when a program wrote one (:func:`write_executor_id`), else, in
    a program started by tfos, the node's own executor id
    (``TFNode.get_context().executor_id``). Anywhere else RuntimeError: tfos
    does not record executor ids in files; use ``ctx.executor_id`` in the
    ``map_fun``."""
    if os.path.isfile(_EXECUTOR_ID_FILE):
        with open(_EXECUTOR_ID_FILE) as f:
            return int(f.read())
    if os.environ.get("TFOS_EXECUTOR_ID"):
        return int(os.environ["TFOS_EXECUTOR_ID"])
    raise RuntimeError("no executor id here: tfos does not write TensorFlowOnSpark's executor_id file in the "
                       "executor's directory; use ctx.executor_id in the map_fun (or "
                       "tfos.TFNode.get_context().executor_id in a program started by tfos)")
