"""`jax.distributed.initialize()` with no arguments in a tfos node.

tfos sets JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID on
every trainer (src/core/spec.c). JAX (checked with 0.10.2) reads only the
first of them itself; the process count and id come from a "cluster
environment", a subclass of jax._src.clusters.ClusterEnv, which JAX
registers when the subclass is defined. This module defines one for tfos
(named "tfos") that answers from those variables, and puts it first, so that
the variables of the tfos node win over, say, a Slurm allocation tfos runs
in.

It must be defined before `initialize()` runs, without importing JAX into
programs that never use it: `install()` (called by `import tfos`) registers it
at once when JAX's cluster module is already loaded, and otherwise adds an
import hook that registers it right after JAX loads that module. Outside a
tfos node (no JAX_PROCESS_ID), the environment says it is absent and JAX
behaves as without tfos.
"""
import importlib.machinery
import os
import sys

_CLUSTERS = "jax._src.clusters"
_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def _register(clusters):
    base = clusters.ClusterEnv
    if any(getattr(c, "name", "") == "tfos" for c in base._cluster_types):
        return

    class TfosCluster(base):
        """The tfos node's JAX variables (a trainer: ps nodes have no id)."""
        name = "tfos"

        @classmethod
        def is_env_present(cls):
            return all(os.environ.get(v) for v in _VARS)

        @classmethod
        def get_coordinator_address(cls, timeout_secs, override_coordinator_port):
            addr = os.environ["JAX_COORDINATOR_ADDRESS"]
            if override_coordinator_port:
                addr = "%s:%s" % (addr.rsplit(":", 1)[0], override_coordinator_port)
            return addr

        @classmethod
        def get_process_count(cls):
            return int(os.environ["JAX_NUM_PROCESSES"])

        @classmethod
        def get_process_id(cls):
            return int(os.environ["JAX_PROCESS_ID"])

        @classmethod
        def get_local_process_id(cls):
            return None  # every device the node sees (tfos already set CUDA_VISIBLE_DEVICES)

    # defining the class appended it; JAX takes the first environment present
    base._cluster_types.remove(TfosCluster)
    base._cluster_types.insert(0, TfosCluster)


class _Loader(object):
    """JAX's own loader for the cluster module, then the registration (a
    loader and a finder by protocol: importlib.abc costs a program 12 ms of
    imports at ``import tfos``)."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _register(module)


class _Finder(object):
    def find_spec(self, fullname, path, target=None):
        if fullname != _CLUSTERS:
            return None
        sys.meta_path.remove(self)  # once is enough
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install():
    """Make tfos's JAX cluster environment known to JAX (idempotent, cheap)."""
    if _CLUSTERS in sys.modules:
        _register(sys.modules[_CLUSTERS])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
