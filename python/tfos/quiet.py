"""Keep TensorFlow's load-time noise out of a script's stderr on a CPU host.

TensorFlow 2.21 prints, while it loads and before it reads
``TF_CPP_MIN_LOG_LEVEL``, ``WARNING: All log messages before
absl::InitializeLog() ...`` and ``Could not find cuda drivers ...``, and, on
a machine without an NVIDIA driver whose environment has CUDA libraries
(torch's wheels), ``failed call to cuInit`` at ERROR level: lines that look
like failures on every run. tfos's node agents keep them off the console
(they stay in the node's log file); a script you run yourself
(``python predict.py``) is not a node, so it calls::

    import tfos.quiet
    tfos.quiet.tensorflow_noise()   # before importing tensorflow or keras

On a machine with an NVIDIA driver (``/proc/driver/nvidia/version``), or
with ``TF_CPP_MIN_LOG_LEVEL=0``, it does nothing: there these lines may say
something, as the agent decides too. Otherwise the process's file
descriptor 2 becomes a pipe read by a thread that writes every other line
through to the real stderr at once, and those three kinds of line nowhere.
At the interpreter's exit stderr is put back and the pipe drained (2 s at
most). What the pipe holds when the process is killed, or ends by
``os._exit``, may be lost: a script that must keep every byte of stderr
after a crash should not call this.
"""
import atexit
import os
import sys
import threading

__all__ = ["tensorflow_noise", "is_noise", "applies_here"]

_NOISE = (b"before absl::InitializeLog() is called", b"failed call to cuInit")
_state = {}


def is_noise(line):
    """Whether ``line`` (bytes or str) is one of TensorFlow's three
    load-time lines (the agent's rule, src/roles/agent.c tf_noise)."""
    if isinstance(line, str):
        line = line.encode("utf-8", "replace")
    return (any(n in line for n in _NOISE) or
            (b"cudart_stub" in line and b"Could not find cuda drivers" in line))


def applies_here():
    """Whether those lines are noise here: no NVIDIA driver, and
    ``TF_CPP_MIN_LOG_LEVEL`` is not 0 (where they may say something)."""
    return not (os.path.exists("/proc/driver/nvidia/version") or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0")


def _pump(rfd, out):
    buf = b""
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        keep = b"".join(ln + b"\n" for ln in lines if not is_noise(ln))
        if keep:
            os.write(out, keep)
    if buf and not is_noise(buf):
        os.write(out, buf)
    os.close(rfd)


def _restore():
    st = _state.pop("on", None)
    if not st:
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(st["saved"], 2)  # the pipe's last writer here is gone: the thread reads to EOF
    st["thread"].join(2.0)
    os.close(st["saved"])


def tensorflow_noise():
    """Drop TensorFlow's three load-time lines from this process's stderr
    (fd 2, and so Python's ``sys.stderr`` and every C library's), on a host
    without an NVIDIA driver; see the module's text. Call it once, before
    importing TensorFlow or Keras; a second call does nothing. Returns
    whether the filter is on."""
    if "on" in _state:
        return True
    if not applies_here():
        return False
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    saved = os.dup(2)
    os.set_inheritable(saved, False)
    rfd, wfd = os.pipe()
    os.dup2(wfd, 2)
    os.close(wfd)
    t = threading.Thread(target=_pump, args=(rfd, saved), name="tfos-quiet", daemon=True)
    t.start()
    _state["on"] = {"saved": saved, "thread": t}
    atexit.register(_restore)
    return True
