"""TensorFlowOnSpark's TFCluster API on tfos's runtime.

``TFCluster.run(sc, map_fun, tf_args, num_executors, num_ps, ...)`` starts the
coordinator (C, in this driver process), then one Spark task per node that
starts a tfos node agent (C) on its executor; the agent reserves a port,
registers, and runs ``map_fun(tf_args, ctx)`` in a supervised process with
TF_CONFIG set. With ``InputMode.SPARK``, ``cluster.train(rdd)`` and
``cluster.inference(rdd)`` stream partitions into the node on the same
executor through its shared-memory feed. ``cluster.shutdown()`` ends the feed,
waits for the programs, and raises the first failure as an exception.

Behaviour differences from TensorFlowOnSpark (same signatures):

- a failure in ``map_fun`` raises :class:`TFClusterError` on the driver with the
  node's name and traceback, from ``train()``, ``inference()`` or
  ``shutdown()`` -- never a feed timeout, never ``sys.exit``;
- ``grace_secs`` is accepted and not slept: shutdown joins the programs;
- ``queues`` is accepted and ignored (tfos has no Manager queues); with
  ``release_port=True`` (the default) the agent holds each node's port until
  the program starts and hands it over then (no race); with
  ``release_port=False`` map_fun holds it in ``ctx.tmp_socket`` until
  ``ctx.release_port()``, exactly as TensorFlowOnSpark's contract;
- no process is left on any executor after ``shutdown()`` or after the driver
  dies (agents end with the coordinator, or with their executor).

The code lives in tfos._spark (cluster.py; driver.py, the driver engine of
the attempt loop in attempts.py, which tfos.spark.Cluster and
TorchDistributor share); this module keeps TensorFlowOnSpark's name.
"""
from . import TFSparkNode  # noqa: F401 (tfos.TFCluster.TFSparkNode, as before)
from ._spark.cluster import CANCEL_AFTER_S, InputMode, TFCluster, run  # noqa: F401
from ._spark.driver import (TFClusterError, _bind_host, _check_executors, _Driver, _Outcomes,  # noqa: F401
                            _Progress)

__all__ = ["InputMode", "TFCluster", "TFClusterError", "run"]

# Tracebacks, reprs and pickles name the classes as TensorFlowOnSpark does.
for _cls in (InputMode, TFCluster, TFClusterError):
    _cls.__module__ = __name__
del _cls
