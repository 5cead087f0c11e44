"""The ``tfos`` logger: where the runtime's lines go inside Python.

Everything tfos logs inside a Python process, the C runtime's lines (the
coordinator, the local launcher of :func:`tfos.run`, feeds) and the Python
driver's (``TFCluster``), goes to the :mod:`logging` logger ``"tfos"`` with
its level (C's debug, info, warn and error are DEBUG, INFO, WARNING and
ERROR). The CLI and the node agents are separate C processes and keep writing
to stderr.

What passes:

* ``TFOS_LOG_LEVEL`` (debug, info, warn, error; default info) is a floor,
  applied first, in C, for the C runtime's lines, and here for the Python
  ones;
* when the program configured logging (a handler on ``"tfos"``, or on the
  root logger that ``"tfos"`` propagates to), the logger's effective level
  decides as for any logger, and the program's handlers show the lines;
* when it did not, the lines from INFO up (or the level set on ``"tfos"``
  with ``setLevel``) are written to stderr by a handler of tfos's own, as
  the CLI writes them (``tfos: warning: ...``), so a script sees the same
  lines as ``tfos run`` shows. That handler stays on ``"tfos"`` and steps
  aside as soon as the program configures logging.

Lines logged by C threads that do not hold the GIL are queued and delivered
by the thread ``tfos-log`` (src/python/logsink.c); at interpreter exit it is
stopped and what is left is delivered, and after a fork the child starts its
own.
"""
import atexit
import logging
import os
import sys
import threading

from . import _tfos

logger = logging.getLogger("tfos")

_PREFIX = {logging.DEBUG: "debug: ", logging.INFO: "", logging.WARNING: "warning: ", logging.ERROR: "error: ",
           logging.CRITICAL: "error: "}


def _env_level():
    value = os.environ.get("TFOS_LOG_LEVEL", "").strip().lower()
    return {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING,
            "error": logging.ERROR}.get(value, logging.INFO if value else 0)


_FLOOR = _env_level()  # read once, as libtfos reads it


#: at the start of a line on a terminal: back to its first column and clear
#: it. Spark's console progress bar ("[Stage 3:>   (0 + 2) / 2]", from the
#: driver's JVM, and Spark Connect's from its client) is drawn with a
#: carriage return and no newline, so a line written after it would start in
#: the bar's middle; cleared first, the line stands alone and the bar draws
#: itself again below it at its next update.
_CLEAR_LINE = "\r\x1b[K"


def console_write(stream, line):
    """Write ``line`` and a newline to ``stream`` in one write, starting on
    a cleared line when ``stream`` is a terminal (see _CLEAR_LINE)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    stream.write((_CLEAR_LINE if tty else "") + line + "\n")
    stream.flush()


class _StderrHandler(logging.Handler):
    """The lines on stderr as the CLI writes them, while the program has not
    configured logging."""

    def emit(self, record):
        if _configured():
            return
        try:
            prefix = _PREFIX.get(record.levelno, record.levelname.lower() + ": ")
            console_write(sys.stderr, "tfos: %s%s" % (prefix, record.getMessage()))
        except Exception:
            self.handleError(record)


_default = _StderrHandler()


def _configured():
    """Whether the program set up logging for tfos's records: a handler of
    its own on "tfos", or root handlers that the records propagate to."""
    if any(h is not _default for h in logger.handlers):
        return True
    return bool(logger.propagate and logging.root.handlers)


def threshold():
    """The level from which tfos's lines are logged (see the module's doc)."""
    if _configured() or logger.level != logging.NOTSET:
        level = logger.getEffectiveLevel()
    else:
        level = logging.DEBUG if _FLOOR == logging.DEBUG else logging.INFO
    return max(_FLOOR, level)


class _Logger(logging.LoggerAdapter):
    """``logger`` with :func:`threshold` as its level: what tfos's Python code
    logs with (``log.info(...)``)."""

    def isEnabledFor(self, level):
        return level >= threshold()

    def log(self, level, msg, *args, **kwargs):
        if self.isEnabledFor(level):
            self.logger._log(level, msg, args, **kwargs)


log = _Logger(logger, {})


def _emit(level, msg):
    """A line of libtfos (called from C, src/python/logsink.c); C has applied
    TFOS_LOG_LEVEL already. ``msg`` is not a format string."""
    if level >= threshold():
        logger._log(level, msg, ())


_pump = None


def _start_pump():
    global _pump
    _pump = threading.Thread(target=_tfos._log_pump, name="tfos-log", daemon=True)
    _pump.start()


def _at_exit():
    """Stop the pump and deliver what is still queued; C lines logged later
    without the GIL go straight to stderr."""
    _tfos._log_stop()
    if _pump is not None and _pump.is_alive():
        _pump.join(5)
    _tfos._log_flush()


def _install():
    if _default not in logger.handlers:
        logger.addHandler(_default)
    _tfos._log_install(_emit)
    _start_pump()
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_start_pump)


_install()
