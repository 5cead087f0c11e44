"""Keeps TensorFlowOnSpark 2.2.5 on 127.0.0.1 (installed into the baseline
venv of bench/spark.py as ``_tfos_bench_loopback``, imported at every
interpreter start by a ``.pth`` file, so it is active in the benchmark's TFoS
driver and in the Spark executors' Python workers alike).

TFoS advertises the host's non-loopback address: ``util.get_ip_address()``
"connects" a UDP socket to 8.8.8.8 and takes its local address, and uses it as
the key of each executor's queue manager, the reservation server's address and
the nodes' hosts. The benchmark cluster lives on 127.0.0.1, so once
``tensorflowonspark.util`` is imported its ``get_ip_address`` returns
127.0.0.1 (or $TFOS_BENCH_HOST), and the reservation server
(``tensorflowonspark.reservation.Server``) listens on that address instead
of on all interfaces. Nothing else of TFoS changes.
"""
import importlib.abc
import os
import socket
import sys

HOST = os.environ.get("TFOS_BENCH_HOST", "127.0.0.1")


def _get_ip_address():
    return HOST


def _patch_util(module):
    module.get_ip_address = _get_ip_address


def _patch_reservation(module):
    server = module.Server

    def start_listening_socket(self):
        """TFoS's Server.start_listening_socket, bound to HOST instead of ''."""
        port_list = self.get_server_ports()
        server_sock = None
        for port in port_list:
            try:
                server_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                server_sock.bind((HOST, port))
                server_sock.listen(10)
                break
            except Exception:
                server_sock = None
        if not server_sock:
            raise Exception("Reservation server unable to bind to any ports, port_list = {}".format(port_list))
        return server_sock

    server.start_listening_socket = start_listening_socket


_PATCHES = {
    "tensorflowonspark.util": _patch_util,
    "tensorflowonspark.reservation": _patch_reservation,
}


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the modules in _PATCHES with the other finders, and patches each
    right after its code has run (before anything can use it)."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            patch(module)

        loader.exec_module = exec_module  # this spec's loader instance only
        return spec


if not any(isinstance(f, _PatchingFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchingFinder())
