"""The model server of tfos serve: ``python -m tfos.serve`` (docs/SERVING.md).

``tfos serve --model NAME=DIR`` runs ``python -m tfos.serve --model NAME=DIR``
on each of its nodes. This process loads the models once, dials the front
end (``TFOS_SERVE_ADDR``: the launcher's abstract Unix socket, or HOST:PORT
under ``tfos yarn serve``) over a link of the extension (``tfos._tfos.Link``:
the hello answers the front end's nonce with an HMAC of the cluster secret,
which never crosses the wire), says which models it holds and their
signatures, then runs the batches the front end sends, one at a time, and
sends their outputs back. The front end (C, in the launcher) does the HTTP,
the Open Inference Protocol, the checks against the signatures and the
batching; see src/serve/serve.h for the frames.

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
import sys
import time

from .. import _tfos
from ._common import _DEFAULTS, _NUMPY, _OIP, ServeError, _decode, _np

_Link = _tfos.Link


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
        from .. import fs as _fs
        self.path, self.saved = str(path), saved_model
        self.remote = _fs.is_remote(self.path)
        self.cache = cache
        if self.remote:
            self.root = _fs.filesystem(self.path)[1].rstrip("/") or "/"

    @property
    def fs(self):
        """The remote dir's filesystem, asked each time: on a Kerberized
        cluster its delegation token is renewed (tfos.fs)."""
        from .. import fs as _fs
        return _fs.filesystem(self.path)[0]

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
        from .. import fs as _fs
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
    # a new version that fails to load may be a dir still being written in
    # place: tried this many times, 1, 2, 4, 8 s apart, so that replicas end
    # up on the same version; then left (the current one goes on serving)
    LOAD_TRIES = 5

    def __init__(self, name, path, pinned=None, loader=None, cache=None):
        self.name, self.dir, self.pinned, self.loader = name, path, pinned, loader
        self.held = {}     # version -> _SavedModel or _LoadedModel, oldest first
        self.failed = None  # [version, tries, when the next try is due] of a newer version that would not load
        self.src = _Versions(path, loader is None, os.path.join(cache or ".", name))
        if pinned is not None:
            vdir = self.src.join(pinned)
            if not self.src.is_model(vdir):
                raise ServeError("model %s: version %s is pinned, but %s holds no %s"
                                 % (name, pinned, vdir, "model" if loader else "SavedModel"))
            self._load(pinned, vdir)
        else:
            self._load_newest()

    def _load_newest(self):
        """At start: the newest version, or, when it does not load (a dir
        still being written in place), the newest before it that does; the
        one that failed is tried again as a new version is (poll)."""
        version, url = self.src.latest()
        try:
            self._load(version, url)
            return
        except Exception as exc:
            first = exc
        try:
            older = [v for v in self.src.listing() if v < int(version)]
        except (OSError, ValueError):
            older = []
        for v in reversed(older):
            try:
                self._load(str(v), self.src.join(str(v)))
            except Exception:
                continue
            self.src.forget(version)
            self.failed = [int(version), 1, time.monotonic() + 1]
            sys.stderr.write("tfos.serve: model %s version %s not loaded (attempt 1 of %d; trying again in 1 s; "
                             "serving %s meanwhile): %s\n" % (self.name, version, self.LOAD_TRIES, v, first))
            sys.stderr.flush()
            return
        raise first

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
        if not versions or versions[-1] <= int(self.current.version):
            return False
        newest = versions[-1]
        if self.failed is not None and self.failed[0] != newest:
            self.failed = None  # a newer one still: its own tries
        if self.failed is not None and (self.failed[1] >= self.LOAD_TRIES or time.monotonic() < self.failed[2]):
            return False
        try:
            self._load(str(newest), self.src.join(str(newest)))
        except Exception as exc:  # a bad new version: the current one goes on serving
            self.src.forget(str(newest))  # a remote one is copied again at the next try
            tries = (self.failed[1] if self.failed else 0) + 1
            wait = 2 ** (tries - 1)
            self.failed = [newest, tries, time.monotonic() + wait]
            if tries < self.LOAD_TRIES:
                what = "trying again in %d s (a version dir still being written fails so)" % wait
            else:
                what = "not tried again; still serving %s" % self.current.version
            sys.stderr.write("tfos.serve: model %s version %s not loaded (attempt %d of %d; %s): %s: %s\n"
                             % (self.name, newest, tries, self.LOAD_TRIES, what, type(exc).__name__, exc))
            sys.stderr.flush()
            return False
        if self.failed is not None:
            sys.stderr.write("tfos.serve: model %s version %s loaded at attempt %d\n"
                             % (self.name, newest, self.failed[1] + 1))
            sys.stderr.flush()
            self.failed = None
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


def _dial(address, secret, node, timeout=60.0):
    """The link to the front end. A refusal of the secret (PermissionError)
    is final; anything else is tried again with backoff until ``timeout``
    seconds have passed: a front end whose waiting places are taken by idle
    connections drops the oldest for a new one, so a dial can lose its place
    before its hello is read (BrokenPipeError, ConnectionError)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return _Link(address, secret, "model_server", timeout=max(1.0, deadline - time.monotonic()),
                         fields={"node": str(node)})
        except PermissionError:
            raise
        except (OSError, TimeoutError) as exc:
            if time.monotonic() + delay >= deadline:
                raise ServeError("tfos.serve: cannot join the front end at %s within %.0f s: %s: %s"
                                 % (address, timeout, type(exc).__name__, exc)) from exc
            time.sleep(delay)
            delay = min(2 * delay, 1.0)


def serve(models, address, secret, node, poll_s=_DEFAULTS["serve_poll"]):
    """Dial the front end and run its batches until it goes away; every
    ``poll_s`` seconds look for new versions. PermissionError when the front
    end refuses the secret; 1 when it dropped this server (its agent starts
    it again).

    Each batch runs under a watchdog (faulthandler's, a C thread that needs
    no GIL): a batch still running ``timeout_ms`` (the front end's
    --timeout) after it arrived dumps every thread's stack to the log and
    ends this process, so that its agent starts it again; the front end has
    answered its requests 504 by then, and ends a server that holds a batch
    longer (a stopped one) itself where it can."""
    import faulthandler
    link = _dial(address, secret, node)
    by_name = {m.name: m for m in models}

    def meta():
        return json.dumps({"models": [m.metadata() for m in models]}).encode()
    try:
        link.send(_Link.SERVE_MODELS, meta())
        next_poll = time.monotonic() + poll_s
        while True:
            if poll_s > 0 and time.monotonic() >= next_poll:
                if any([m.refresh() for m in models]):
                    link.send(_Link.SERVE_MODELS, meta())
                next_poll = time.monotonic() + poll_s
            try:
                frame = link.recv(max(0.0, next_poll - time.monotonic()) if poll_s > 0 else None)
            except TimeoutError:
                continue
            except ConnectionError as exc:  # an ERROR frame: the front end dropped this server
                sys.stderr.write("tfos.serve: %s\n" % exc)
                return 1
            if frame is None:
                return 0  # the front end has gone: tfos serve is stopping
            ftype, fid, fmeta, body = frame
            if ftype != _Link.SERVE_BATCH:
                raise ServeError("the front end sent a frame of type %d" % ftype)
            budget = int(fmeta.get("timeout_ms") or 0) / 1000.0
            if budget > 0:
                sys.stderr.flush()
                faulthandler.dump_traceback_later(budget, exit=True)
            try:
                model = by_name[fmeta.get("model", "")].get(fmeta.get("version", ""))
                outs = model.run(_decode(body))
                reply = (_Link.SERVE_RESULT, _tfos.encode_columns(outs), fid, {"version": model.version})
            except Exception as exc:  # the model's error goes to the requests that asked
                msg = "%s: %s" % (type(exc).__name__, exc)
                reply = (_Link.SERVE_FAIL, msg.encode("utf-8", "replace")[:4000], fid)
            finally:
                if budget > 0:
                    faulthandler.cancel_dump_traceback_later()
            try:
                link.send(*reply)
            except ConnectionError as exc:
                sys.stderr.write("tfos.serve: the front end is gone or dropped this model server: %s\n" % exc)
                return 1
    finally:
        link.close()


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
