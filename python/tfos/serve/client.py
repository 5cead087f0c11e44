"""tfos.serve's client: a ``tfos serve`` over HTTP (the Open Inference
Protocol), or, on the server's host, over the front end's local socket as
columnar batches (a link of the extension, ``tfos._tfos.Link``)."""
import json
import os

from .. import _tfos
from ._common import _DEFAULT_URL, _DEFAULTS, _NUMPY, ServeError, _decode, _np, _oip_of

_Link = _tfos.Link


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
        self._link = None
        self._max_local = 0
        self._next = 1
        if local:
            self._link = self._local()

    @property
    def is_local(self):
        """Whether batches go over the local socket (else HTTP)."""
        return self._link is not None

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
            raise ServeError("tfos serve at %s: %s %s: HTTP %d: %s" % (self.url, method, path, status, why), status)
        return doc

    def metadata(self, model):
        """The model's metadata: ``versions``, ``inputs``, ``outputs``."""
        return self._json("GET", "/v2/models/%s" % model)

    # -- the local socket
    def _local(self):
        """A link to the front end's local socket, or None where there is
        none to have (another host, another user without a token, no place
        left): then HTTP."""
        try:
            doc = self._json("GET", "/v2/local")
            address = doc["address"]
            # a request over the local socket is bounded as HTTP's body is
            self._max_local = int(doc.get("max_request_bytes") or 0)
        except (ServeError, OSError, KeyError, TypeError, ValueError):
            return None
        try:
            # the token's HMAC answers the front end's nonce (None: no token:
            # the socket's peer uid is the check)
            return _Link(address, self.token or None, "serve_client", timeout=self.timeout)
        except PermissionError as exc:
            if not self.token:
                return None  # another user's process: HTTP takes it as it is
            raise ServeError("tfos serve at %s refused this client: %s" % (self.url, exc), 401)
        except OSError:
            return None  # off the server's host (its network namespace), or no place left

    def _encode(self, inputs):
        cols = _tfos.encode_columns([(k, v) for k, v in inputs.items()])
        if self._max_local and len(cols) > self._max_local:
            raise ServeError("tfos serve at %s: a request of %d bytes is over the server's --max-body (%d bytes): "
                             "send fewer rows a request (predict_udf's batch_rows)" % (self.url, len(cols),
                                                                                       self._max_local), 413)
        return cols

    def _send_infer(self, model, version, cols):
        rid = self._next
        self._next += 1
        self._link.send(_Link.SERVE_INFER, cols, rid, {"model": model, "version": version or ""})
        return rid

    def _recv_answer(self, timeout=None):
        frame = self._link.recv(self.timeout if timeout is None else timeout)
        if frame is None:
            raise ServeError("tfos serve at %s closed the local connection" % self.url)
        ftype, rid, meta, body = frame
        if ftype == _Link.SERVE_FAIL:
            status = int(meta.get("status", "500"))
            text = bytes(body).decode("utf-8", "replace")
            try:
                text = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            return rid, ServeError("tfos serve at %s: HTTP %d: %s" % (self.url, status, text), status)
        if ftype != _Link.SERVE_RESULT:
            raise ServeError("tfos serve at %s sent a frame of type %d" % (self.url, ftype))
        return rid, (meta.get("version", ""), _decode(body))

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
        if self._link is not None:
            ids, got = [], {}
            encoded = [self._encode(b) for b in batches]  # all checked before any is sent
            for cols in encoded:
                ids.append(self._send_infer(model, version, cols))
                while True:  # answers already here are read now: they never pile up at the front end
                    try:
                        rid, ans = self._recv_answer(0)
                    except TimeoutError:
                        break
                    got[rid] = ans
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
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._http is not None:
            self._http.close()
            self._http = None
