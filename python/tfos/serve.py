"""tfos.serve: the model server behind ``tfos serve`` (docs/SERVING.md).

``tfos serve --model NAME=DIR`` runs ``python -m tfos.serve --model NAME=DIR``
on each of its nodes. This process loads the models once, connects to the
front end's socket (``TFOS_SERVE_ADDR``, an abstract Unix socket of the
launcher) and says who it is with the cluster secret and the models'
signatures; then it runs the batches the front end sends, one at a time,
and sends their outputs back. The front end (C, in the launcher) does the
HTTP, the Open Inference Protocol, the checks against the signatures and
the batching; see src/run/serve.h for the frames.

A model is a TensorFlow SavedModel and its ``serving_default`` signature
(what ``model.export(dir)`` and ``tfos.compat.export_saved_model`` write),
or a directory of numbered versions of one (TensorFlow Serving's layout).
Of a directory of versions the highest is served, and a higher one that
appears later is loaded (while the current one goes on serving) and then
served in its place; the one before stays loaded for requests that name
it. ``NAME@V=DIR`` pins version V: it alone is served, and nothing is
watched.
"""
import argparse
import json
import os
import select
import socket
import struct
import sys
import time

from . import _tfos

HELLO, BATCH, RESULT, ERROR, MODELS = 1, 2, 3, 4, 5
_HEAD = struct.Struct("<IIQ")

# TensorFlow's dtype names -> the Open Inference Protocol's
_OIP = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
        "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float32": "FP32", "float64": "FP64"}

__all__ = ["ServeError", "latest_version", "versions_in"]


class ServeError(RuntimeError):
    """A model tfos serve cannot serve, with what and where."""


def versions_in(path):
    """The numbered subdirs of ``path`` that hold a SavedModel, as ints,
    ascending (TensorFlow Serving's layout)."""
    found = []
    for name in os.listdir(path) if os.path.isdir(path) else ():
        if name.isdigit() and os.path.exists(os.path.join(path, name, "saved_model.pb")):
            found.append(int(name))
    return sorted(found)


def latest_version(path):
    """``(version, dir)``: the highest numbered subdir of ``path`` that holds
    a SavedModel, or ``("1", path)`` when ``path`` is a SavedModel itself."""
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        return "1", path
    versions = versions_in(path)
    if not versions:
        raise ServeError("%s is not a SavedModel (no saved_model.pb) and has no numbered version dirs holding one"
                         % path)
    v = versions[-1]
    return str(v), os.path.join(path, str(v))


class _SavedModel(object):
    """One version of a model: its serving_default signature, called on
    numpy batches."""

    def __init__(self, name, version, path):
        import tensorflow as tf
        self.name, self.version, self.path = name, version, path
        loaded = tf.saved_model.load(self.path)
        sigs = getattr(loaded, "signatures", {}) or {}
        if "serving_default" not in sigs:
            raise ServeError("model %s (%s) has no serving_default signature (it has: %s); export it with "
                             "model.export(dir) or tfos.compat.export_saved_model"
                             % (name, self.path, ", ".join(sorted(sigs)) or "none"))
        self._loaded = loaded  # keeps the functions' variables alive
        self.fn = sigs["serving_default"]
        _, kwargs = self.fn.structured_input_signature
        self.inputs = [(k, self._spec(k, s, "input")) for k, s in sorted(kwargs.items())]
        self.outputs = [(k, self._spec(k, s, "output")) for k, s in sorted(self.fn.structured_outputs.items())]
        self._tf = tf

    def _spec(self, key, spec, what):
        dt = _OIP.get(spec.dtype.name)
        if dt is None:
            raise ServeError("model %s: %s %s is %s; tfos serve takes numbers and booleans (%s)"
                             % (self.name, what, key, spec.dtype.name, ", ".join(sorted(_OIP.values()))))
        dims = spec.shape.as_list() if spec.shape.rank is not None else None
        if not dims:
            raise ServeError("model %s: %s %s has no batch dimension (shape %s)" % (self.name, what, key, spec.shape))
        return {"name": key, "datatype": dt, "shape": [-1 if d is None else int(d) for d in dims]}

    def run(self, columns):
        out = self.fn(**{k: self._tf.constant(v) for k, v in columns.items()})
        return [(k, out[k].numpy()) for k, _ in self.outputs]


class _Served(object):
    """A model's versions held here: the newest serves requests that name
    none; the one before stays for requests that name it."""

    KEEP = 2

    def __init__(self, name, path, pinned=None):
        self.name, self.dir, self.pinned = name, path, pinned
        self.held = {}     # version -> _SavedModel, oldest first
        self.failed = None  # a newer version that would not load (not tried again)
        if pinned is not None:
            vdir = os.path.join(path, pinned)
            if not os.path.exists(os.path.join(vdir, "saved_model.pb")):
                raise ServeError("model %s: version %s is pinned, but %s holds no SavedModel" % (name, pinned, vdir))
            self._load(pinned, vdir)
        else:
            self._load(*latest_version(path))

    def _load(self, version, vdir):
        t0 = time.monotonic()
        m = _SavedModel(self.name, version, vdir)
        self.held[version] = m
        while len(self.held) > self.KEEP:
            self.held.pop(next(iter(self.held)))
        sys.stderr.write("tfos.serve: model %s version %s loaded from %s in %.1f s: inputs %s, outputs %s\n"
                         % (self.name, version, vdir, time.monotonic() - t0,
                            ", ".join("%s %s%s" % (k, s["datatype"], s["shape"]) for k, s in m.inputs),
                            ", ".join("%s %s%s" % (k, s["datatype"], s["shape"]) for k, s in m.outputs)))
        sys.stderr.flush()

    @property
    def current(self):
        return self.held[next(reversed(self.held))]

    def refresh(self):
        """Load a newer version if one has appeared; True if one was."""
        if self.pinned is not None or os.path.exists(os.path.join(self.dir, "saved_model.pb")):
            return False
        versions = versions_in(self.dir)
        if not versions or versions[-1] <= int(self.current.version) or versions[-1] == self.failed:
            return False
        try:
            self._load(str(versions[-1]), os.path.join(self.dir, str(versions[-1])))
        except Exception as exc:  # a bad new version: the current one goes on serving
            sys.stderr.write("tfos.serve: model %s version %s not loaded (still serving %s): %s: %s\n"
                             % (self.name, versions[-1], self.current.version, type(exc).__name__, exc))
            sys.stderr.flush()
            self.failed = versions[-1]
            return False
        return True

    def get(self, version):
        if not version:
            return self.current
        m = self.held.get(version)
        if m is None:
            raise ServeError("model %s version %s is not loaded here (held: %s)"
                             % (self.name, version, ", ".join(self.held)))
        return m

    def metadata(self):
        m = self.current
        return {"name": self.name, "versions": list(reversed(self.held)), "platform": "tensorflow_savedmodel",
                "inputs": [s for _, s in m.inputs], "outputs": [s for _, s in m.outputs]}


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def _send(sock, ftype, fid, payload):
    sock.sendall(_HEAD.pack(len(payload), ftype, fid) + payload if len(payload) < 65536
                 else _HEAD.pack(len(payload), ftype, fid))
    if len(payload) >= 65536:
        sock.sendall(payload)


def _decode(payload):
    from .feed import _decode_columns
    _, names, cols = _decode_columns(payload)
    return dict(zip(names, cols))


def serve(models, address, secret, node, poll_s=2.0):
    """Connect to the front end and run its batches until it goes away;
    every ``poll_s`` seconds look for new versions."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + address[1:] if address.startswith("@") else address)
    by_name = {m.name: m for m in models}

    def meta():
        return json.dumps({"models": [m.metadata() for m in models]}).encode()
    _send(sock, HELLO, node, secret.encode() + b"\n" + meta())
    next_poll = time.monotonic() + poll_s
    while True:
        if poll_s > 0 and time.monotonic() >= next_poll:
            if any([m.refresh() for m in models]):
                _send(sock, MODELS, node, meta())
            next_poll = time.monotonic() + poll_s
        if poll_s > 0 and not select.select([sock], [], [], max(0.0, next_poll - time.monotonic()))[0]:
            continue
        head = _recv_exact(sock, _HEAD.size)
        if head is None:
            return 0  # the front end has gone: tfos serve is stopping
        length, ftype, fid = _HEAD.unpack(head)
        payload = _recv_exact(sock, length)
        if payload is None:
            return 0
        if ftype != BATCH:
            raise ServeError("the front end sent a frame of type %d" % ftype)
        nl = struct.unpack_from("<H", payload, 0)[0]
        name = bytes(payload[2:2 + nl]).decode()
        vl = struct.unpack_from("<H", payload, 2 + nl)[0]
        batch = memoryview(payload)[4 + nl + vl:]
        version = bytes(payload[4 + nl:4 + nl + vl]).decode()
        try:
            model = by_name[name].get(version)
            outs = model.run(_decode(batch))
            v = model.version.encode()
            _send(sock, RESULT, fid, struct.pack("<H", len(v)) + v + _tfos.encode_columns(outs))
        except Exception as exc:  # the model's error goes to the requests that asked
            msg = "%s: %s" % (type(exc).__name__, exc)
            _send(sock, ERROR, fid, msg.encode("utf-8", "replace")[:4000])


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tfos.serve",
                                 description="A model server of tfos serve (started by it, one per node).")
    ap.add_argument("--model", action="append", required=True, metavar="NAME[@VERSION]=DIR")
    ap.add_argument("--poll-s", type=float, default=2.0, help="seconds between looks for new versions (0: never)")
    a = ap.parse_args(argv)
    address = os.environ.get("TFOS_SERVE_ADDR")
    secret = os.environ.get("TFOS_SECRET")
    if not address or not secret:
        sys.stderr.write("tfos.serve: TFOS_SERVE_ADDR and TFOS_SECRET are not set: this is started by tfos serve\n")
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    models = []
    for spec in a.model:
        name, _, path = spec.partition("=")
        name, _, pinned = name.partition("@")
        models.append(_Served(name, path, pinned or None))
    return serve(models, address, secret, int(os.environ.get("TFOS_TASK_INDEX", "0")), a.poll_s)


if __name__ == "__main__":
    sys.exit(main())
