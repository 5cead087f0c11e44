"""tfos: distributed TensorFlow, PyTorch and JAX on Spark and on one machine.

The native runtime (coordinator, node agent, launcher) is C, in the extension
module ``tfos._tfos``; this package is the thin Python over it:

* :func:`tfos.run` forms a cluster of local nodes, like ``tfos run`` on the
  command line;
* :mod:`tfos.TFNode` gives a program started by tfos its context, with the
  fields TensorFlowOnSpark programs use (``job_name``, ``task_index``,
  ``cluster_spec``, ...).

Importing it also lets ``jax.distributed.initialize()`` run with no arguments
in a tfos node (:mod:`tfos._jax`).
"""
import importlib

from . import _log  # noqa: F401  (first: the runtime's log lines go to the logger "tfos")
from ._launch import ClusterError, agent_path, run
from . import TFNode
from ._tfos import VERSION as __version__
from . import _jax

_jax.install()  # jax.distributed.initialize() with no arguments in a tfos node

# imported on first use (``tfos.TFCluster``, ``from tfos import compat``):
# a node program imports tfos at its start, on cores a first feed shares,
# and needs none of them (they were a third of the package's import time)
_LAZY = ("TFCluster", "TFManager", "TFParallel", "compat", "dfutil", "gpu_info", "models", "reservation", "util")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'tfos' has no attribute %r" % (name,))


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = ["run", "ClusterError", "agent_path", "TFNode", "TFCluster", "TFManager", "TFParallel", "reservation", "compat", "dfutil", "gpu_info", "models", "util",
           "__version__"]
