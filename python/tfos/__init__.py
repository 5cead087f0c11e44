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
from . import _log  # noqa: F401  (first: the runtime's log lines go to the logger "tfos")
from ._launch import ClusterError, agent_path, run
from . import TFNode, TFCluster, TFParallel, compat
from . import dfutil, gpu_info, util
from ._tfos import VERSION as __version__
from . import _jax

_jax.install()  # jax.distributed.initialize() with no arguments in a tfos node

__all__ = ["run", "ClusterError", "agent_path", "TFNode", "TFCluster", "TFParallel", "compat", "dfutil", "gpu_info", "util",
           "__version__"]
