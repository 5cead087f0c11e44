"""How a program that tfos starts for a Python function ends once the
function returned (``tfos._sparkprog``, ``tfos._torchprog``): as a
multiprocessing child ends, without the interpreter's teardown of every
module and object."""
import atexit
import gc
import io
import os
import sys

_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


def exit_now(code=0):
    """End this process with ``code`` after all that a normal exit does that
    a program can see, in the same order: wait for its non-daemon threads
    (and run what concurrent.futures registered), run its atexit functions
    (logging, weakref.finalize, the frameworks' own), flush every file still
    open for writing, then stdout and stderr. Left out is the teardown of
    every module and object, which took 0.7-0.9 s in a program that imported
    torch and 1.1-1.5 s once DistributedDataParallel had imported
    torch._dynamo (2026-11-29, docs/BENCHMARKS.md): time that every
    ``shutdown()`` and TorchDistributor call waited for."""
    import threading
    shutdown = getattr(threading, "_shutdown", None)  # what Python and multiprocessing's children call
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    # a file left open at module level (or in a cycle) is flushed when the
    # teardown frees it; 0.1 s to find them in a torch program
    for f in [o for o in gc.get_objects() if type(o) in _FILES]:
        try:
            if not f.closed and f.writable():
                f.flush()
        except (OSError, ValueError):
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)
