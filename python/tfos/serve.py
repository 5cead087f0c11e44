"""tfos.serve: clients of ``tfos serve``, and its model server (docs/SERVING.md).

For Spark jobs, :func:`predict_udf` scores a DataFrame's columns with a
served model; :class:`Client` is the same from any Python program. On the
server's host both skip HTTP: they send tfos's columnar batches over the
front end's local socket. Elsewhere they speak the Open Inference Protocol
over HTTP.

The model server:

``tfos serve --model NAME=DIR`` runs ``python -m tfos.serve --model NAME=DIR``
on each of its nodes. This process loads the models once, connects to the
front end's socket (``TFOS_SERVE_ADDR``, an abstract Unix socket of the
launcher) and says who it is with the cluster secret and the models'
signatures; then it runs the batches the front end sends, one at a time,
and sends their outputs back. The front end (C, in the launcher) does the
HTTP, the Open Inference Protocol, the checks against the signatures and
the batching; see src/serve/serve.h for the frames.

A model is a TensorFlow SavedModel and its ``serving_default`` signature
(what ``model.export(dir)`` and ``tfos.compat.export_saved_model`` write),
or a directory of numbered versions of one (TensorFlow Serving's layout).
Any other model (PyTorch, JAX, scikit-learn, ...) serves through a loader
the user names, ``--loader NAME=MODULE:FUNCTION``: FUNCTION(dir) is called
once per version dir and returns a :class:`Model` (a callable on numpy
arrays and its inputs' and outputs' datatypes and shapes).
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

_DEFAULTS = _tfos.DEFAULTS  # include/tfos/defaults.h
_DEFAULT_URL = "http://127.0.0.1:%d" % _DEFAULTS["serve_port"]

HELLO, BATCH, RESULT, ERROR, MODELS, CLIENT, INFER = 1, 2, 3, 4, 5, 6, 7
_HEAD = struct.Struct("<IIQ")

# TensorFlow's dtype names -> the Open Inference Protocol's
_OIP = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
        "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float32": "FP32", "float64": "FP64"}

__all__ = ["Client", "Model", "ServeError", "predict_udf", "versions_in"]

_NUMPY = {"BOOL": "bool", "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8",
          "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "FP32": "float32", "FP64": "float64"}


class ServeError(RuntimeError):
    """A model tfos serve cannot serve, with what and where."""


def versions_in(path, saved_model=True):
    """The numbered subdirs of ``path`` that hold a SavedModel (any numbered
    subdir with ``saved_model=False``), as ints, ascending (TensorFlow
    Serving's layout)."""
    found = []
    for name in os.listdir(path) if os.path.isdir(path) else ():
        vdir = os.path.join(path, name)
        if name.isdigit() and (os.path.exists(os.path.join(vdir, "saved_model.pb")) if saved_model
                               else os.path.isdir(vdir)):
            found.append(int(name))
    return sorted(found)


def _tensor_spec(model, what, key, spec):
    """A declared input or output: ``(datatype, shape)`` or a dict with
    them, checked; the shape's first dimension is the batch's (-1)."""
    if isinstance(spec, dict):
        spec = (spec.get("datatype"), spec.get("shape"))
    try:
        dt, shape = spec
        shape = [int(d) for d in shape]
    except (TypeError, ValueError):
        raise ServeError("model %s: %s %s: give (datatype, shape), e.g. (\"FP32\", [-1, 64]), not %r"
                         % (model, what, key, spec))
    if dt not in _NUMPY:
        raise ServeError("model %s: %s %s: datatype %r is not one of %s"
                         % (model, what, key, dt, ", ".join(sorted(_NUMPY))))
    if not shape or shape[0] != -1 or any(d < 1 for d in shape[1:]):
        raise ServeError("model %s: %s %s: shape %s: the first dimension is the batch's (-1), the others "
                         "positive sizes" % (model, what, key, shape))
    return {"name": str(key), "datatype": dt, "shape": shape}


class Model(object):
    """A model a loader (``tfos serve --loader NAME=MODULE:FUNCTION``)
    returns for one version dir::

        def load(path):                      # called once per version dir
            net = torch.jit.load(os.path.join(path, "model.pt")).eval()

            def predict(pixels):             # numpy arrays in, the rows on axis 0
                with torch.no_grad():
                    return net(torch.from_numpy(pixels)).softmax(1).numpy()
            return tfos.serve.Model(predict, inputs={"pixels": ("FP32", [-1, 64])},
                                    outputs={"probs": ("FP32", [-1, 10])})

    ``predict`` is called with one keyword argument per input, a numpy array
    of the input's datatype holding a batch's rows; it returns a dict of the
    outputs (or, for one output, the array). ``inputs``/``outputs``: name ->
    ``(datatype, shape)``, in order (the order predict_udf maps columns to
    inputs), datatypes as the Open Inference Protocol names them (``FP32``,
    ``INT64``, ``BOOL``, ...), the first dimension -1 (the batch's). The
    front end checks requests against them before ``predict`` runs, and
    outputs are cast to their datatype."""

    def __init__(self, predict, inputs, outputs, platform="python"):
        if not callable(predict):
            raise ServeError("tfos.serve.Model: predict must be callable, not %r" % (predict,))
        self.predict, self.platform = predict, str(platform)
        self.inputs, self.outputs = dict(inputs or {}), dict(outputs or {})
        if not self.inputs or not self.outputs:
            raise ServeError("tfos.serve.Model: give at least one input and one output")


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

    platform = "tensorflow_savedmodel"

    def run(self, columns):
        out = self.fn(**{k: self._tf.constant(v) for k, v in columns.items()})
        return [(k, out[k].numpy()) for k, _ in self.outputs]


def _import_function(ref):
    """``MODULE:FUNCTION`` (a module on the path, or a file ``dir/f.py``)."""
    import importlib
    import importlib.util
    mod, _, fn = ref.rpartition(":")
    if not mod or not fn:
        raise ServeError("loader %r: give MODULE:FUNCTION or FILE.py:FUNCTION" % ref)
    if mod.endswith(".py") or os.sep in mod:
        if not os.path.isfile(mod):
            raise ServeError("loader %s: no file %s" % (ref, mod))
        spec = importlib.util.spec_from_file_location(
            "tfos_loader_" + os.path.splitext(os.path.basename(mod))[0], mod)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(mod)))  # its siblings import as they would
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(mod)
    f = getattr(module, fn, None)
    if not callable(f):
        raise ServeError("loader %s: %s has no function %s" % (ref, mod, fn))
    return f


class _LoadedModel(object):
    """One version of a model a user's loader made: its Model, called on
    numpy batches."""

    def __init__(self, name, version, path, loader):
        self.name, self.version, self.path = name, version, path
        try:
            m = loader(path)
        except Exception as exc:
            raise ServeError("model %s: the loader %s failed on version %s (%s): %s: %s"
                             % (name, getattr(loader, "__name__", loader), version, path, type(exc).__name__,
                                exc)) from exc
        if not isinstance(m, Model):
            raise ServeError("model %s: the loader returned %s for %s, not a tfos.serve.Model"
                             % (name, type(m).__name__, path))
        self.model, self.platform = m, m.platform
        self.inputs = [(k, _tensor_spec(name, "input", k, v)) for k, v in m.inputs.items()]
        self.outputs = [(k, _tensor_spec(name, "output", k, v)) for k, v in m.outputs.items()]

    def run(self, columns):
        np = _np()
        out = self.model.predict(**columns)
        if not isinstance(out, dict):
            if len(self.outputs) != 1:
                raise ServeError("model %s: predict returned %s; with %d outputs it returns a dict of them"
                                 % (self.name, type(out).__name__, len(self.outputs)))
            out = {self.outputs[0][0]: out}
        res = []
        for k, spec in self.outputs:
            if k not in out:
                raise ServeError("model %s: predict's result has no output %s (it has: %s)"
                                 % (self.name, k, ", ".join(map(str, out)) or "none"))
            res.append((k, np.ascontiguousarray(np.asarray(out[k]), dtype=_NUMPY[spec["datatype"]])))
        return res


class _Versions(object):
    """Where a model's versions are: a local dir, or a remote one (hdfs://,
    webhdfs://, any tfos.fs URL), whose versions are copied into ``cache``
    to be loaded. ``saved_model``: a version is a dir holding saved_model.pb
    (else any numbered dir, for a loader)."""

    def __init__(self, path, saved_model, cache):
        from . import fs as _fs
        self.path, self.saved = str(path), saved_model
        self.remote = _fs.is_remote(self.path)
        self.cache = cache
        if self.remote:
            self.fs, self.root = _fs.filesystem(self.path)
            self.root = self.root.rstrip("/") or "/"

    def join(self, version):
        return self.path.rstrip("/") + "/" + version if self.remote else os.path.join(self.path, version)

    def is_model(self, url):
        """Whether ``url`` (the dir or one of its version dirs) holds a model."""
        if not self.remote:
            return os.path.exists(os.path.join(url, "saved_model.pb")) if self.saved else os.path.isdir(url)
        sub = self.root if url == self.path else self.root + "/" + url.rsplit("/", 1)[1]
        return self.fs.exists(sub + "/saved_model.pb") if self.saved else self.fs.isdir(sub)

    def listing(self):
        """The numbered versions, ascending."""
        if not self.remote:
            return versions_in(self.path, self.saved)
        try:
            names = [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(self.root, detail=True)
                     if e.get("type") == "directory"]
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit() and self.is_model(self.join(n)))

    def latest(self):
        """``(version, url)`` of the newest (the dir itself is version 1
        when it is a SavedModel, or, for a loader, has no numbered dirs)."""
        if self.saved and self.is_model(self.path):
            return "1", self.path
        versions = self.listing()
        if not versions:
            if not self.saved:
                return "1", self.path
            raise ServeError("%s is not a SavedModel (no saved_model.pb) and has no numbered version dirs holding "
                             "one" % self.path)
        return str(versions[-1]), self.join(str(versions[-1]))

    def fetch(self, version, url):
        """A local dir holding version ``version`` (``url``): itself when
        local, else a copy made in the cache (whole, then renamed)."""
        if not self.remote:
            return url
        import shutil
        from . import fs as _fs
        dst = os.path.join(self.cache, version)
        if not os.path.isdir(dst):
            tmp = dst + ".part"
            shutil.rmtree(tmp, ignore_errors=True)
            t0 = time.monotonic()
            _fs.get(url, tmp)
            os.rename(tmp, dst)
            sys.stderr.write("tfos.serve: %s copied here in %.1f s\n" % (url, time.monotonic() - t0))
        return dst

    def forget(self, version):
        """Drop the local copy of a version no longer held."""
        if self.remote:
            import shutil
            shutil.rmtree(os.path.join(self.cache, version), ignore_errors=True)


class _Served(object):
    """A model's versions held here: the newest serves requests that name
    none; the one before stays for requests that name it."""

    KEEP = 2

    def __init__(self, name, path, pinned=None, loader=None, cache=None):
        self.name, self.dir, self.pinned, self.loader = name, path, pinned, loader
        self.held = {}     # version -> _SavedModel or _LoadedModel, oldest first
        self.failed = None  # a newer version that would not load (not tried again)
        self.src = _Versions(path, loader is None, os.path.join(cache or ".", name))
        if pinned is not None:
            vdir = self.src.join(pinned)
            if not self.src.is_model(vdir):
                raise ServeError("model %s: version %s is pinned, but %s holds no %s"
                                 % (name, pinned, vdir, "model" if loader else "SavedModel"))
            self._load(pinned, vdir)
        else:
            self._load(*self.src.latest())

    def _load(self, version, url):
        t0 = time.monotonic()
        vdir = self.src.fetch(version, url)
        m = (_LoadedModel(self.name, version, vdir, self.loader) if self.loader
             else _SavedModel(self.name, version, vdir))
        self.held[version] = m
        while len(self.held) > self.KEEP:
            self.src.forget(self.held.pop(next(iter(self.held))).version)
        sys.stderr.write("tfos.serve: model %s version %s loaded from %s in %.1f s: inputs %s, outputs %s\n"
                         % (self.name, version, url, time.monotonic() - t0,
                            ", ".join("%s %s%s" % (k, s["datatype"], s["shape"]) for k, s in m.inputs),
                            ", ".join("%s %s%s" % (k, s["datatype"], s["shape"]) for k, s in m.outputs)))
        sys.stderr.flush()

    @property
    def current(self):
        return self.held[next(reversed(self.held))]

    def refresh(self):
        """Load a newer version if one has appeared; True if one was."""
        if self.pinned is not None or (self.loader is None and self.src.is_model(self.dir)):
            return False
        try:
            versions = self.src.listing()
        except OSError as exc:  # a remote dir out of reach a while: look again later
            sys.stderr.write("tfos.serve: model %s: cannot list %s: %s\n" % (self.name, self.dir, exc))
            return False
        if not versions or versions[-1] <= int(self.current.version) or versions[-1] == self.failed:
            return False
        try:
            self._load(str(versions[-1]), self.src.join(str(versions[-1])))
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
        return {"name": self.name, "versions": list(reversed(self.held)), "platform": m.platform,
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
    head = _HEAD.pack(len(payload), ftype, fid)
    if len(payload) < 65536:
        sock.sendall(head + payload)  # one write
    else:
        sock.sendall(head)  # a large payload is not copied to join them
        sock.sendall(payload)


def _decode(payload):
    from .feed import _decode_columns
    _, names, cols = _decode_columns(payload)
    return dict(zip(names, cols))


def serve(models, address, secret, node, poll_s=_DEFAULTS["serve_poll"]):
    """Connect to the front end and run its batches until it goes away;
    every ``poll_s`` seconds look for new versions."""
    if address.startswith("@"):  # the front end's abstract socket, on its host
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect("\0" + address[1:])
    else:  # HOST:PORT: the front end on another host (tfos yarn serve)
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=60)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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


# ---- clients ---------------------------------------------------------------------

class Client(object):
    """A connection to a ``tfos serve`` at ``url`` (default: ``$TFOS_SERVE_URL``,
    else http://127.0.0.1:8500). ``token``: the server's (default
    ``$TFOS_SERVE_TOKEN``). With ``local=True`` (the default) a client on the
    server's host sends its batches over the front end's local socket, as
    tfos columnar batches, not JSON; elsewhere, or with ``local=False``, it
    uses HTTP and the Open Inference Protocol. ``timeout``: seconds for any
    one answer.

    ``infer(model, {input: array})`` returns ``(version, {output: array})``;
    ``infer_batches`` sends several requests at once and returns their
    answers in order."""

    def __init__(self, url=None, token=None, local=True, timeout=_DEFAULTS["serve_client_timeout"]):
        import urllib.parse
        self.url = (url or os.environ.get("TFOS_SERVE_URL") or _DEFAULT_URL).rstrip("/")
        u = urllib.parse.urlparse(self.url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("tfos serve URL %r: give http://HOST:PORT" % self.url)
        self.host, self.port = u.hostname, u.port or 80
        self.token = token if token is not None else os.environ.get("TFOS_SERVE_TOKEN") or ""
        self.timeout = float(timeout)
        self._http = None
        self._sock = None
        self._next = 1
        if local:
            self._sock = self._local()

    @property
    def is_local(self):
        """Whether batches go over the local socket (else HTTP)."""
        return self._sock is not None

    # -- HTTP
    def _request(self, method, path, body=None):
        import http.client
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        for attempt in (0, 1):  # a kept-alive connection the server closed: once more on a new one
            if self._http is None:
                self._http = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._http.request(method, path, body=body, headers=headers)
                r = self._http.getresponse()
                return r.status, r.read()
            except (ConnectionError, http.client.HTTPException):
                self._http.close()
                self._http = None
                if attempt:
                    raise

    def _json(self, method, path, body=None):
        status, payload = self._request(method, path, body)
        try:
            doc = json.loads(payload or b"null")
        except ValueError:
            doc = None
        if status != 200:
            why = doc.get("error") if isinstance(doc, dict) else payload[:300]
            raise ServeError("tfos serve at %s: %s %s: HTTP %d: %s" % (self.url, method, path, status, why))
        return doc

    def metadata(self, model):
        """The model's metadata: ``versions``, ``inputs``, ``outputs``."""
        return self._json("GET", "/v2/models/%s" % model)

    # -- the local socket
    def _local(self):
        try:
            address = self._json("GET", "/v2/local")["address"]
        except (ServeError, OSError, KeyError, TypeError):
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect("\0" + address[1:])   # fails off the server's host (its network namespace)
        except OSError:
            sock.close()
            return None
        _send(sock, CLIENT, 0, self.token.encode())
        head = _recv_exact(sock, _HEAD.size)
        if head is None:
            sock.close()
            return None
        length, ftype, _ = _HEAD.unpack(head)
        payload = _recv_exact(sock, length)
        if ftype != CLIENT:
            sock.close()
            raise ServeError("tfos serve at %s refused this client: %s" % (self.url, bytes(payload or b"")[:300]))
        return sock

    def _send_infer(self, model, version, inputs):
        rid = self._next
        self._next += 1
        nb, vb = model.encode(), (version or "").encode()
        cols = _tfos.encode_columns([(k, v) for k, v in inputs.items()])
        _send(self._sock, INFER, rid, struct.pack("<H", len(nb)) + nb + struct.pack("<H", len(vb)) + vb + cols)
        return rid

    def _recv_answer(self):
        head = _recv_exact(self._sock, _HEAD.size)
        if head is None:
            raise ServeError("tfos serve at %s closed the local connection" % self.url)
        length, ftype, rid = _HEAD.unpack(head)
        payload = _recv_exact(self._sock, length)
        if payload is None:
            raise ServeError("tfos serve at %s closed the local connection" % self.url)
        if ftype == ERROR:
            status, _, text = bytes(payload).decode("utf-8", "replace").partition(" ")
            try:
                text = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            return rid, ServeError("tfos serve at %s: HTTP %s: %s" % (self.url, status, text))
        vl = struct.unpack_from("<H", payload, 0)[0]
        version = bytes(payload[2:2 + vl]).decode()
        return rid, (version, _decode(memoryview(payload)[2 + vl:]))

    # -- inference
    def infer(self, model, inputs, version=None):
        """``(version, {output: array})`` for ``inputs`` (``{input: array}``,
        the rows on the first axis)."""
        return self.infer_batches(model, [inputs], version)[0]

    def infer_batches(self, model, batches, version=None):
        """:meth:`infer` for each of ``batches``, sent before any answer is
        awaited (the server batches them with others); answers in order.
        Raises ServeError naming the server and its reason."""
        np = _np()
        batches = [{k: np.ascontiguousarray(v) for k, v in b.items()} for b in batches]
        if self._sock is not None:
            ids = [self._send_infer(model, version, b) for b in batches]
            got = {}
            while len(got) < len(ids):
                rid, ans = self._recv_answer()
                got[rid] = ans
            out = [got[i] for i in ids]
            for ans in out:
                if isinstance(ans, Exception):
                    raise ans
            return out
        path = "/v2/models/%s%s/infer" % (model, "/versions/%s" % version if version else "")
        out = []
        for b in batches:
            body = {"inputs": [{"name": k, "shape": list(v.shape), "datatype": _oip_of(v.dtype),
                                "data": v.ravel().tolist()} for k, v in b.items()]}
            doc = self._json("POST", path, json.dumps(body).encode())
            out.append((doc["model_version"],
                        {o["name"]: np.asarray(o["data"], dtype=_NUMPY[o["datatype"]]).reshape(o["shape"])
                         for o in doc["outputs"]}))
        return out

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._http is not None:
            self._http.close()
            self._http = None


def _np():
    import numpy
    return numpy


def _oip_of(dtype):
    name = _np().dtype(dtype).name
    for k, v in _NUMPY.items():
        if v == name:
            return k
    raise ServeError("tfos serve takes numbers and booleans, not %s" % name)


_clients = {}


def _client(url, token, local, timeout):
    """One client per (url, token, local) in a Spark worker process, kept
    across batches and tasks."""
    key = (url, token, local)
    c = _clients.get(key)
    if c is None:
        c = _clients[key] = Client(url, token, local, timeout)
    return c


def _spark_type(spec):
    from pyspark.sql import types as T
    elem = {"BOOL": T.BooleanType(), "INT8": T.ByteType(), "INT16": T.ShortType(), "INT32": T.IntegerType(),
            "INT64": T.LongType(), "UINT8": T.ShortType(), "UINT16": T.IntegerType(), "UINT32": T.LongType(),
            "UINT64": T.LongType(), "FP32": T.FloatType(), "FP64": T.DoubleType()}[spec["datatype"]]
    return elem if len(spec["shape"]) == 1 else T.ArrayType(elem, containsNull=False)


def predict_udf(model, url=None, version=None, token=None, local=True, batch_rows=1024,
                timeout=_DEFAULTS["serve_client_timeout"]):
    """A Spark UDF (an Arrow UDF on Spark 4.1 and later, else a pandas UDF)
    that scores rows with the model ``model`` of the
    ``tfos serve`` at ``url`` (default ``$TFOS_SERVE_URL``, else
    http://127.0.0.1:8500), as Spark's ``predict_batch_udf`` does with a model
    it loads in every task::

        pred = predict_udf("digits")
        df.withColumn("probs", pred(*feature_cols))

    Columns map to the model's inputs (``GET /v2/models/NAME``, names in
    order): one column per input, a column of arrays for an input with a
    per-row shape; or, for a model with one input of shape [-1, k], k number
    columns stacked into it. Values are cast to the input's datatype. The
    result is one value per row, in order: the output (an array for a per-row
    shape), or a struct of the outputs when there are several.

    On an executor on the server's host the rows go over its local socket as
    columnar batches (``local=True``), elsewhere over HTTP (the Open Inference
    Protocol). On Spark 4.1 and later the UDF takes Spark's Arrow batches as
    they are: a number column is its Arrow buffer, a column of equal-length
    arrays a matrix over its values buffer (no pandas, no per-row objects);
    an output with a per-row shape comes back as one array a row, the row's
    values flattened. ``batch_rows`` rows per request (a Spark Arrow batch is cut so;
    the server batches requests of all tasks together). The model's metadata
    is read here, on the driver, so a model not served fails now, naming
    it."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    url = (url or os.environ.get("TFOS_SERVE_URL") or _DEFAULT_URL).rstrip("/")
    token = token if token is not None else os.environ.get("TFOS_SERVE_TOKEN") or ""
    probe = Client(url, token, local=False, timeout=timeout)
    try:
        meta = probe.metadata(model)
    finally:
        probe.close()
    inputs, outputs = meta["inputs"], meta["outputs"]
    if len(outputs) == 1:
        rtype = _spark_type(outputs[0])
    else:
        rtype = T.StructType([T.StructField(o["name"], _spark_type(o)) for o in outputs])
    batch_rows = int(batch_rows)

    def to_inputs(arrays):
        np = _np()
        if len(arrays) == len(inputs):
            pairs = zip(inputs, arrays)
        elif len(inputs) == 1 and all(a.ndim == 1 for a in arrays):
            pairs = [(inputs[0], np.stack(arrays, axis=1))]
        else:
            raise ServeError("model %s takes %d inputs (%s); predict_udf got %d columns"
                             % (model, len(inputs), ", ".join(i["name"] for i in inputs), len(arrays)))
        return {spec["name"]: np.ascontiguousarray(a, dtype=_NUMPY[spec["datatype"]]) for spec, a in pairs}

    def score(arrays, n):
        """{output: array of n rows} for the columns' arrays."""
        x = to_inputs(arrays)
        chunks = [{k: v[lo:lo + batch_rows] for k, v in x.items()} for lo in range(0, n, batch_rows)]
        try:
            answers = _client(url, token, local, timeout).infer_batches(model, chunks, version)
        except (OSError, ServeError) as exc:
            # a connection kept from an earlier task may be stale (the server
            # restarted): once more on a new one
            stale = _clients.pop((url, token, local), None)
            if stale is not None:
                stale.close()
            if isinstance(exc, ServeError) and "HTTP 4" in str(exc):
                raise
            answers = _client(url, token, local, timeout).infer_batches(model, chunks, version)
        np = _np()
        return {o["name"]: np.concatenate([a[1][o["name"]] for a in answers]) for o in outputs}

    arrow_udf = getattr(F, "arrow_udf", None)  # Spark 4.1 and later
    if arrow_udf is not None:
        def predict_arrow(*cols):
            import pyarrow as pa
            n = len(cols[0])
            if n == 0:
                return pa.array([], type=_arrow_type(rtype))
            outs = score([_arrow_to_numpy(c, i) for i, c in enumerate(cols)], n)
            if len(outputs) == 1:
                return _numpy_to_arrow(outs[outputs[0]["name"]], rtype)
            return pa.StructArray.from_arrays([_numpy_to_arrow(outs[f.name], f.dataType) for f in rtype.fields],
                                              names=[f.name for f in rtype.fields])
        return arrow_udf(predict_arrow, rtype)

    def predict(*cols):
        import pandas as pd
        np = _np()
        n = len(cols[0])
        if n == 0:
            return pd.Series([], dtype=object) if len(outputs) == 1 else pd.DataFrame()
        arrays = []
        for c in cols:
            first = c.iloc[0] if len(c) else None
            arrays.append(np.stack(c.to_numpy()) if isinstance(first, (list, tuple, np.ndarray)) else c.to_numpy())
        outs = score(arrays, n)

        def column(o):
            a = outs[o["name"]]
            return pd.Series(list(a)) if a.ndim > 1 else pd.Series(a)
        if len(outputs) == 1:
            return column(outputs[0])
        return pd.DataFrame({o["name"]: column(o) for o in outputs})

    return F.pandas_udf(predict, rtype)


def _arrow_to_numpy(col, i):
    """A Spark Arrow column as a numpy array with the rows on axis 0: a
    number column as it is, a column of equal-length arrays as a matrix made
    from the list's values buffer (no per-row objects)."""
    import pyarrow as pa
    np = _np()
    if col.null_count:
        raise ServeError("predict_udf: column %d has %d null rows; the model takes numbers" % (i, col.null_count))
    t = col.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        n = len(col)
        if pa.types.is_fixed_size_list(t):
            flat, k = col.flatten(), t.list_size
        else:
            offsets = col.offsets.to_numpy()
            lens = np.diff(offsets)
            k = int(lens[0]) if n else 0
            if n and (lens != k).any():
                bad = int(np.argmax(lens != k))
                raise ServeError("predict_udf: column %d: rows hold arrays of different lengths (%d in the "
                                 "batch's first row, %d in its row %d)" % (i, k, int(lens[bad]), bad))
            flat = col.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        if flat.null_count:
            raise ServeError("predict_udf: column %d: arrays hold null values; the model takes numbers" % i)
        if pa.types.is_list(flat.type) or pa.types.is_large_list(flat.type) or pa.types.is_fixed_size_list(flat.type):
            inner = _arrow_to_numpy(flat, i)  # arrays of arrays: one more axis
            return inner.reshape((n, k) + inner.shape[1:])
        return flat.to_numpy(zero_copy_only=False).reshape(n, k)
    return col.to_numpy(zero_copy_only=False)


_SPARK_NUMPY = {"BooleanType": "bool", "ByteType": "int8", "ShortType": "int16", "IntegerType": "int32",
                "LongType": "int64", "FloatType": "float32", "DoubleType": "float64"}


def _arrow_type(spark_type):
    import pyarrow as pa
    from pyspark.sql import types as T
    if isinstance(spark_type, T.StructType):
        return pa.struct([(f.name, _arrow_type(f.dataType)) for f in spark_type.fields])
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(_arrow_type(spark_type.elementType))
    return pa.from_numpy_dtype(_np().dtype(_SPARK_NUMPY[type(spark_type).__name__]))


def _numpy_to_arrow(a, spark_type):
    """An output's rows as the Arrow array of ``spark_type``: numbers, or
    one array a row (the row's values, flattened) over the output's buffer."""
    import pyarrow as pa
    from pyspark.sql import types as T
    np = _np()
    if isinstance(spark_type, T.ArrayType):
        n = a.shape[0]
        flat = np.ascontiguousarray(a.reshape(n, -1).astype(_SPARK_NUMPY[type(spark_type.elementType).__name__],
                                                             copy=False))
        k = flat.shape[1]
        offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(flat.ravel()))
    return pa.array(a.astype(_SPARK_NUMPY[type(spark_type).__name__], copy=False))


# ---- the model server ----------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tfos.serve",
                                 description="A model server of tfos serve (started by it, one per node).")
    ap.add_argument("--model", action="append", required=True, metavar="NAME[@VERSION]=DIR")
    ap.add_argument("--loader", action="append", default=[], metavar="NAME=MODULE:FUNCTION",
                    help="the model NAME is made by FUNCTION(version_dir), which returns a tfos.serve.Model")
    ap.add_argument("--poll-s", type=float, default=_DEFAULTS["serve_poll"], help="seconds between looks for new versions (0: never)")
    a = ap.parse_args(argv)
    address = os.environ.get("TFOS_SERVE_ADDR")
    secret = os.environ.get("TFOS_SECRET")
    if not address or not secret:
        sys.stderr.write("tfos.serve: TFOS_SERVE_ADDR and TFOS_SECRET are not set: this is started by tfos serve\n")
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import shutil
    import signal
    import tempfile
    # copies of remote versions: removed when this ends, by a stop (SIGTERM) too
    cache = tempfile.mkdtemp(prefix="tfos-serve-models-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        loaders = dict(spec.partition("=")[::2] for spec in a.loader)
        models = []
        for spec in a.model:
            name, _, path = spec.partition("=")
            name, _, pinned = name.partition("@")
            ref = loaders.get(name)
            models.append(_Served(name, path, pinned or None, _import_function(ref) if ref else None, cache))
        return serve(models, address, secret, int(os.environ.get("TFOS_TASK_INDEX", "0")), a.poll_s)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    # run as tfos.serve, not __main__: a loader's tfos.serve.Model is then
    # this module's Model
    from tfos.serve import main as _main
    sys.exit(_main())
