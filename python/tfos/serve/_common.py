"""What the model server, the client and the UDF of tfos.serve share: the
error type, the defaults, the datatypes (derived from the one table in C,
``_tfos.DTYPES``) and the decoding of a columnar batch."""
from .. import _tfos

_DEFAULTS = _tfos.DEFAULTS  # include/tfos/defaults.h
_DEFAULT_URL = "http://127.0.0.1:%d" % _DEFAULTS["serve_port"]


class ServeError(RuntimeError):
    """A model tfos serve cannot serve, or a request it refused, with what and
    where; ``status``: the HTTP status of a refused request (None: none)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


def _dtype_name(numpy_str):
    """numpy's name of a DTYPES entry's type string: '<f4' -> 'float32'."""
    kind, size = numpy_str[1], int(numpy_str[2:])
    return "bool" if kind == "b" else {"i": "int", "u": "uint", "f": "float"}[kind] + str(8 * size)


# the Open Inference Protocol's datatype -> numpy's name, and back (a
# TensorFlow dtype's name is numpy's)
_NUMPY = {oip: _dtype_name(np_str) for _, np_str, oip, _ in _tfos.DTYPES}
_OIP = {name: oip for oip, name in _NUMPY.items()}


def _np():
    import numpy
    return numpy


def _oip_of(dtype):
    """The OIP datatype of a numpy dtype; ServeError for one tfos serve does not take."""
    name = _np().dtype(dtype).name
    if name not in _OIP:
        raise ServeError("tfos serve takes numbers and booleans, not %s" % name)
    return _OIP[name]


def _decode(payload):
    """A columnar batch (core/batch.h) as {name: numpy array}, viewing payload."""
    from ..feed import _decode_columns
    _, names, cols = _decode_columns(payload)
    return dict(zip(names, cols))
