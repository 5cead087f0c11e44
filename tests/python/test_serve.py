"""tfos serve: real model servers (a digits SavedModel trained here), real
HTTP clients, real signals. The Open Inference Protocol's JSON over HTTP is
spoken by hand (http.client): no OIP client from PyPI is pinned."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from conftest import PY, ROOT, pids_with, prog, tfos_cli, wait_for


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory):
    """A digits classifier exported as a SavedModel (version 1; a second one,
    trained apart, as version 2 elsewhere), with held-out rows and each
    version's predictions for them."""
    d = tmp_path_factory.mktemp("serve-model")
    r = subprocess.run([PY, prog("serving_model.py"), str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"dir": d / "digits", "v1": d / "digits" / "1", "v2": d / "v2", "x": np.load(d / "x.npy"),
            "pred": np.load(d / "pred1.npy"), "pred2": np.load(d / "pred2.npy")}


class Server(object):
    """`tfos serve` as a process, on a free port."""

    def __init__(self, model_dir, tmp_path, marker, *args, name="digits"):
        # the marker rides on the model servers' command lines through the
        # model's path (a link), and on the agents' through the log dir
        link = tmp_path / ("%s-%s" % (marker, name))
        if not link.exists():
            link.symlink_to(model_dir)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        self.proc = subprocess.Popen([tfos_cli(), "serve", "--model", "%s=%s" % (name, link), "--port", "0",
                                      "--python", PY, "--log-dir", str(tmp_path / ("logs-" + marker))] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.err = []
        self.port = None
        first = self.proc.stderr.readline()
        self.err.append(first)
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v2/models/%s/infer" % name, first)
        assert m, first + self.proc.stderr.read()
        self.port = int(m.group(1))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        assert wait_for(lambda: self.get("/v2/health/ready")[0] == 200, 120, 0.2), self.text()

    def _read(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def text(self):
        return "".join(self.err)

    def request(self, method, path, body=None, headers=None, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers=headers or {})
            r = c.getresponse()
            payload = r.read()
            return r.status, payload
        finally:
            if conn is None:
                c.close()

    def get(self, path):
        try:
            return self.request("GET", path)
        except OSError:
            return None, b""

    def infer(self, x, conn=None, **extra):
        body = dict({"inputs": [{"name": "pixels", "shape": list(x.shape), "datatype": "FP32",
                                 "data": x.ravel().tolist()}]}, **extra)
        return self.request("POST", "/v2/models/digits/infer", body, conn=conn)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(10)
        return self.proc.returncode


def outputs(payload):
    doc = json.loads(payload)
    o = doc["outputs"][0]
    return doc, np.array(o["data"], dtype=np.float32).reshape(o["shape"])


def test_oip_answers_with_the_models_predictions(digits_model, tmp_path, marker):
    s = Server(digits_model["dir"], tmp_path, marker)
    try:
        x, pred = digits_model["x"], digits_model["pred"]
        assert s.get("/v2/health/live")[0] == 200
        st, body = s.get("/v2")
        assert st == 200 and json.loads(body)["name"] == "tfos"
        st, body = s.get("/v2/models/digits")
        meta = json.loads(body)
        assert st == 200 and meta["versions"] == ["1"] and meta["platform"] == "tensorflow_savedmodel"
        assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}], meta
        assert meta["outputs"][0]["datatype"] == "FP32" and meta["outputs"][0]["shape"] == [-1, 10], meta
        assert s.get("/v2/models/digits/ready")[0] == 200
        assert s.get("/v2/models/digits/versions/1")[0] == 200
        # many requests on one kept-alive connection: flat data, then nested
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        for lo, n in ((0, 1), (1, 7), (8, 64), (72, 200)):
            st, body = s.infer(x[lo:lo + n], conn=conn, id="req-%d" % lo)
            assert st == 200, body
            doc, out = outputs(body)
            assert doc["model_name"] == "digits" and doc["model_version"] == "1" and doc["id"] == "req-%d" % lo
            np.testing.assert_allclose(out, pred[lo:lo + n], atol=1e-5)
        nested = {"inputs": [{"name": "pixels", "shape": [2, 64], "datatype": "FP32", "data": x[:2].tolist()}],
                  "outputs": [{"name": meta["outputs"][0]["name"]}]}
        st, body = s.request("POST", "/v2/models/digits/versions/1/infer", nested, conn=conn)
        assert st == 200, body
        np.testing.assert_allclose(outputs(body)[1], pred[:2], atol=1e-5)
        conn.close()
        # the status page and the model metrics share the port
        st, body = s.get("/metrics")
        text = body.decode()
        assert st == 200 and "tfos_serve_servers_ready 1" in text
        assert re.search(r'^tfos_serve_requests_total\{model="digits",outcome="ok"\} 5$', text, re.M), text
        assert re.search(r'^tfos_serve_version_requests_total\{model="digits",version="1"\} 5$', text, re.M), text
        assert re.search(r'^tfos_serve_rows_total\{model="digits"\} 274$', text, re.M), text
        assert json.loads(s.get("/status")[1])["cluster"]["nodes"][0]["state"] == "running"
    finally:
        code = s.stop()
    assert code == 128 + signal.SIGTERM, s.text()[-3000:]
    assert wait_for(lambda: not pids_with(marker), 15), pids_with(marker)


BAD = [
    (b"{not json", 400, "not JSON"),
    ({"inputs": []}, 400, "inputs"),
    ({"inputs": [{"name": "pixels", "shape": [1, 63], "datatype": "FP32", "data": [0.0] * 63}]}, 400,
     "shape[1] is 63, the model takes 64"),
    ({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "INT32", "data": [0] * 64}]}, 400,
     "datatype INT32, but model digits takes FP32"),
    ({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 60}]}, 400,
     "data has 60 elements, its shape holds 64"),
    ({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64}]}, 400,
     "data[0] is not a FP32 value"),
    ({"inputs": [{"name": "image", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}, 400,
     "has no input image (its inputs: pixels)"),
    ({"inputs": [{"name": "pixels", "shape": [1], "datatype": "FP32", "data": [0.0]}]}, 400,
     "shape must have 2 dimensions"),
    ({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}],
      "outputs": [{"name": "nope"}]}, 400, "has no output nope"),
]


def test_bad_requests_get_4xx_naming_what_is_wrong(digits_model, tmp_path, marker):
    s = Server(digits_model["dir"], tmp_path, marker, "--max-body", "100000")
    try:
        for body, status, text in BAD:
            st, got = s.request("POST", "/v2/models/digits/infer", body)
            assert st == status and text in json.loads(got)["error"], (body, st, got)
        st, got = s.request("POST", "/v2/models/nope/infer", {"inputs": []})
        assert st == 404 and "no model nope" in json.loads(got)["error"]
        st, got = s.request("POST", "/v2/models/digits/versions/7/infer", {"inputs": []})
        assert st == 404 and "no version 7 loaded (versions: 1)" in json.loads(got)["error"]
        assert s.request("GET", "/v2/models/digits/infer")[0] == 405
        assert s.request("POST", "/v2/models/digits/infer", b"x" * 200000)[0] == 413
        assert s.request("PUT", "/status")[0] == 405
        # a valid body with random bytes changed, cut or repeated: every
        # answer is 200 or 4xx with a JSON error, and the server stays up
        import random
        rng = random.Random(7)
        valid = json.dumps({"inputs": [{"name": "pixels", "shape": [2, 64], "datatype": "FP32",
                                        "data": digits_model["x"][:2].ravel().tolist()}]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        statuses = set()
        for _ in range(300):
            b = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                k = rng.randrange(len(b))
                op = rng.randrange(3)
                if op == 0:
                    b[k] = rng.choice(b'{}[]":,0123456789-eE.x \\')
                elif op == 1:
                    del b[k:k + rng.randint(1, 40)]
                else:
                    b[k:k] = b[max(0, k - 30):k]
            st, got = s.request("POST", "/v2/models/digits/infer", bytes(b), conn=conn)
            statuses.add(st)
            assert st == 200 or (400 <= st < 500 and "error" in json.loads(got)), (bytes(b), st, got)
        conn.close()
        assert 400 in statuses, statuses
        # still serving, and the bad bodies are counted as failed (a wrong
        # path or version, or a body too large, never reached the model)
        st, body = s.infer(digits_model["x"][:3])
        assert st == 200, body
        text = s.get("/metrics")[1].decode()
        failed = int(re.search(r'outcome="failed"\} (\d+)$', text, re.M).group(1))
        ok = int(re.search(r'outcome="ok"\} (\d+)$', text, re.M).group(1))
        assert failed >= len(BAD) and ok + failed == len(BAD) + 300 + 1, text
    finally:
        s.stop()


def test_concurrent_clients_are_batched_and_every_answer_is_theirs(digits_model, tmp_path, marker):
    s = Server(digits_model["dir"], tmp_path, marker, "--max-batch", "32", "--max-delay-ms", "20",
               "--replicas", "2")
    x, pred = digits_model["x"], digits_model["pred"]
    wrong, errors = [], []

    def client(k):
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        try:
            for j in range(25):
                lo = (k * 25 + j) % (len(x) - 3)
                st, body = s.infer(x[lo:lo + 1 + j % 3], conn=conn)
                if st != 200:
                    errors.append((st, body))
                elif not np.allclose(outputs(body)[1], pred[lo:lo + 1 + j % 3], atol=1e-5):
                    wrong.append(lo)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(repr(exc))
        finally:
            conn.close()
    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not errors and not wrong, (errors[:3], wrong[:5])
        text = s.get("/metrics")[1].decode()
        ok = int(re.search(r'outcome="ok"\} (\d+)', text).group(1))
        batches = int(re.search(r'tfos_serve_batches_total\{[^}]*\} (\d+)', text).group(1))
        assert ok == 300 and batches < ok, (ok, batches)  # concurrent requests shared batches
    finally:
        s.stop()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def test_overload_is_answered_or_refused_and_leaks_nothing(digits_model, tmp_path, marker):
    # 16 clients of 8-row requests against batches of 8 (2 at a time on the
    # server) and a queue of 64 rows: at most 10 requests fit, so some are
    # refused; every request is answered (right) or refused at once (429),
    # and the front end's memory does not grow from one round to the next
    s = Server(digits_model["dir"], tmp_path, marker, "--max-batch", "8", "--max-queue-rows", "64")
    x, pred = digits_model["x"], digits_model["pred"]

    def round_of_load():
        counts, wrong = {}, []

        def client(k):
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            for j in range(40):
                lo = (k * 40 + j) % (len(x) - 8)
                st, body = s.infer(x[lo:lo + 8], conn=conn)
                counts[st] = counts.get(st, 0) + 1
                if st == 200 and not np.allclose(outputs(body)[1], pred[lo:lo + 8], atol=1e-5):
                    wrong.append(lo)
            conn.close()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        return counts, wrong
    try:
        round_of_load()  # warm-up: buffers grown to their working size
        before = rss_kb(s.proc.pid)
        refused = 0
        for _ in range(3):
            counts, wrong = round_of_load()
            assert not wrong and set(counts) <= {200, 429} and sum(counts.values()) == 640, (counts, wrong)
            refused += counts.get(429, 0)
        assert refused > 0, refused  # (the 429 text is checked by test_a_full_queue_answers_429_at_once)
        grown = rss_kb(s.proc.pid) - before
        print("statuses of the last round: %s; front end RSS %d kB, grew %d kB over 3 rounds" % (counts, before, grown))
        with open("/proc/%d/maps" % s.proc.pid) as f:
            asan = "libasan" in f.read()
        # AddressSanitizer keeps freed memory in quarantine (its RSS grows
        # by design): there, LeakSanitizer at the front end's exit checks
        assert asan or grown < 4096, grown
        assert s.get("/v2/health/ready")[0] == 200
        # a clean exit (under ASan, LeakSanitizer found no leak at exit)
        assert s.stop() == 128 + signal.SIGTERM, s.text()[-3000:]
    finally:
        s.stop()


def test_a_full_queue_answers_429_at_once(digits_model, tmp_path, marker):
    # a request waits up to 1.5 s for others to batch with: a second one
    # finds the queue full (8 rows) and is refused at once
    s = Server(digits_model["dir"], tmp_path, marker, "--max-delay-ms", "1500", "--max-queue-rows", "8")
    x = digits_model["x"]
    try:
        first = {}
        t = threading.Thread(target=lambda: first.update(r=s.infer(x[:8])))
        t.start()
        assert wait_for(lambda: re.search(r"tfos_serve_queue_rows\{[^}]*\} 8$", s.get("/metrics")[1].decode(), re.M),
                        10, 0.02)
        t0 = time.monotonic()
        st, body = s.infer(x[8:9])
        refused_in = time.monotonic() - t0
        assert st == 429 and "is busy" in json.loads(body)["error"], body
        t.join(30)
        assert first["r"][0] == 200, first
        print("429 answered in %.3f s while the first request waited to batch" % refused_in)
    finally:
        s.stop()


class Load(object):
    """4 client threads, each on a kept-alive connection, sending requests of
    `rows` rows of x until finish(); every answer's version goes to .seen,
    and a failed request or an answer unlike preds[version] to .bad."""

    def __init__(self, s, x, preds, rows, timeout=60):
        self.s, self.x, self.preds, self.rows, self.timeout = s, x, preds, rows, timeout
        self.seen, self.bad, self.stop = [], [], threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(k,)) for k in range(4)]
        for t in self.threads:
            t.start()

    def _client(self, k):
        conn = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=self.timeout)
        j, n = 0, self.rows
        while not self.stop.is_set():
            lo = (k * 37 + j) % (len(self.x) - n)
            j += 1
            st, body = self.s.infer(self.x[lo:lo + n], conn=conn)
            if st != 200:
                self.bad.append((st, body))
                continue
            doc, out = outputs(body)
            v = doc["model_version"]
            self.seen.append(v)
            if not np.allclose(out, self.preds[v][lo:lo + n], atol=1e-5):
                self.bad.append(("version %s gave another model's answer" % v, lo))
        conn.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout)


def uptime_s(pid):
    """Seconds since process pid started."""
    with open("/proc/%d/stat" % pid) as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) - start / os.sysconf("SC_CLK_TCK")


def server_pids(s):
    st, body = s.get("/status")
    nodes = json.loads(body)["cluster"]["nodes"] if st == 200 else []
    return {"%s:%d" % (n["job"], n["index"]): n["pid"] or None for n in nodes}


def test_a_killed_model_server_is_restarted_alone_and_no_request_fails(digits_model, tmp_path, marker):
    """kill -9 of one of two model servers while 4 clients send: its agent
    starts it again, alone; the other goes on; every request is answered.
    Killed again before it has run 5 s, it fails its node: the set restarts
    (the restart policy), and requests sent meanwhile are answered too."""
    s = Server(digits_model["dir"], tmp_path, marker, "--timeout", "120", "--replicas", "2")
    load = None
    try:
        pids = server_pids(s)
        assert len(pids) == 2, pids
        # past the 5 s a program must run to be restarted alone
        assert wait_for(lambda: min(uptime_s(p) for p in pids.values()) > 5.5, 30)
        load = Load(s, digits_model["x"], {"1": digits_model["pred"]}, 3, timeout=120)
        assert wait_for(lambda: len(load.seen) > 50, 60)
        os.kill(pids["worker:0"], signal.SIGKILL)
        assert wait_for(lambda: server_pids(s).get("worker:0") not in (pids["worker:0"], None), 60, 0.05), s.text()
        before = len(load.seen)
        assert wait_for(lambda: "tfos_serve_servers_ready 2" in s.get("/metrics")[1].decode(), 120), s.text()
        assert wait_for(lambda: len(load.seen) > before + 50, 60)
        assert not load.bad, load.bad[:3]
        assert server_pids(s)["worker:1"] == pids["worker:1"]  # the other was never stopped
        assert "[worker:0] tfos: the program failed (signal 9 (Killed)) after" in s.text(), s.text()[-3000:]
        assert "starting it again here, alone (1 of 10)" in s.text()
        assert "restarting every node" not in s.text()
        # killed again: if it had run 5 s by now (a slow machine: loading the
        # model alone can take that long), it is started alone once more, and
        # that one is killed as soon as it shows up, before it has run 5 s
        second = server_pids(s)["worker:0"]
        os.kill(second, signal.SIGKILL)
        assert wait_for(lambda: "restarting every node (attempt 2" in s.text() or
                        "alone (2 of 10)" in s.text(), 60), s.text()[-3000:]
        if "restarting every node (attempt 2" not in s.text():
            assert wait_for(lambda: server_pids(s).get("worker:0") not in (second, None), 60, 0.05), s.text()
            third = server_pids(s)["worker:0"]
            assert uptime_s(third) < 4, uptime_s(third)
            os.kill(third, signal.SIGKILL)
        # one that has not run 5 s fails its node: the set restarts
        assert wait_for(lambda: "restarting every node (attempt 2" in s.text(), 60), s.text()[-3000:]
        before = len(load.seen)
        assert wait_for(lambda: len(load.seen) > before + 50, 120), s.text()[-3000:]
        load.finish()
        assert not load.bad, load.bad[:3]
    finally:
        if load:
            load.finish()
        s.stop()
    assert wait_for(lambda: not pids_with(marker), 15), pids_with(marker)


RELAY_WRAPPER = """#!/bin/sh
# --python for tfos serve: its model server runs behind a recording TCP relay
if [ "$1" = "-m" ] && [ "$2" = "tfos.serve" ]; then shift 2; exec %(py)s %(relay)s %(capture)s "$@"; fi
exec %(py)s "$@"
"""

RELAY = """
import os, runpy, socket, sys, threading
capture, target = sys.argv[1], os.environ["TFOS_SERVE_ADDR"]
with open(capture + ".secret", "w") as f:
    f.write(os.environ["TFOS_SECRET"])
log, lock = open(capture, "ab", buffering=0), threading.Lock()
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(4)

def pump(src, dst):
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        with lock:
            log.write(data)
        dst.sendall(data)

def accept():
    while True:
        c, _ = lsock.accept()
        u = socket.socket(socket.AF_UNIX)
        u.connect("\\0" + target[1:])
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()

threading.Thread(target=accept, daemon=True).start()
# the model server dials the relay over TCP, as under tfos yarn serve
os.environ["TFOS_SERVE_ADDR"] = "127.0.0.1:%d" % lsock.getsockname()[1]
sys.argv = ["tfos.serve"] + sys.argv[2:]
runpy.run_module("tfos.serve", run_name="__main__", alter_sys=True)
"""

DOUBLER = """
import tfos.serve

def load(path):
    return tfos.serve.Model(lambda pixels: pixels * 2, inputs={"pixels": ("FP32", [-1, 64])},
                            outputs={"twice": ("FP32", [-1, 64])})
"""


def test_the_serve_link_never_carries_the_secret(tmp_path, marker):
    """The model server's link to the front end over TCP (as under tfos yarn
    serve), through a relay that records every byte both ways: the cluster
    secret is in none of them (the hello carries an HMAC of a nonce), the
    requests are answered through it, and a model server that does not know
    the secret is refused."""
    from tfos import _tfos
    capture = tmp_path / "capture"
    (tmp_path / "relay.py").write_text(RELAY)
    (tmp_path / "doubler.py").write_text(DOUBLER)
    wrapper = tmp_path / "py-behind-relay"
    wrapper.write_text(RELAY_WRAPPER % {"py": PY, "relay": tmp_path / "relay.py", "capture": capture})
    wrapper.chmod(0o755)
    models = tmp_path / "doubler-model"
    models.mkdir()
    s = Server(models, tmp_path, marker, "--python", str(wrapper), "--loader",
               "digits=%s:load" % (tmp_path / "doubler.py"))
    try:
        x = np.random.RandomState(3).rand(5, 64).astype(np.float32)
        st, body = s.infer(x)
        assert st == 200, body
        np.testing.assert_allclose(outputs(body)[1], 2 * x)
        secret = (tmp_path / "capture.secret").read_text()
        assert len(secret) == 64, secret
        data = capture.read_bytes()
        assert secret.encode() not in data and bytes.fromhex(secret) not in data
        assert data.count(b"TFOS") >= 4 and b"mac=" in data, data[:200]  # the link's frames went this way
        # the front end's local socket, dialed as a model server with a wrong secret
        addr = json.loads(s.get("/v2/local")[1])["address"]
        with pytest.raises(PermissionError, match="wrong cluster secret"):
            _tfos.Link(addr, "00" * 32, "model_server", timeout=10)
        assert wait_for(lambda: "does not know the cluster secret" in s.text(), 10), s.text()[-2000:]
        assert "tfos_serve_servers_ready 1" in s.get("/metrics")[1].decode()
    finally:
        s.stop()


def test_a_token_is_required_when_given(digits_model, tmp_path, marker):
    token = "t0ken-" + marker
    # Server() polls readiness without the token: started by hand here
    link = tmp_path / ("%s-digits" % marker)
    link.symlink_to(digits_model["dir"])
    proc = subprocess.Popen([tfos_cli(), "serve", "--model", "digits=%s" % link, "--port", "0", "--python", PY,
                             "--token", token, "--log-dir", str(tmp_path / "logs")],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r":(\d+)/v2/models", proc.stderr.readline()).group(1))

        def ask(headers):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                c.request("GET", "/v2/health/live", headers=headers)
                return c.getresponse().status
            except OSError:
                return None
            finally:
                c.close()
        assert wait_for(lambda: ask({}) == 401, 30, 0.1)
        assert ask({"Authorization": "Bearer " + token}) == 200
        assert ask({"Authorization": "Bearer wrong-token-0000000"}) == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_new_version_is_switched_to_under_load_dropping_nothing(digits_model, tmp_path, marker):
    serving = tmp_path / "serving"
    serving.mkdir()
    (serving / "1").symlink_to(digits_model["v1"])
    x, preds = digits_model["x"], {"1": digits_model["pred"], "2": digits_model["pred2"]}
    assert not np.allclose(preds["1"], preds["2"], atol=1e-3)  # the versions tell apart
    s = Server(serving, tmp_path, marker, "--poll", "0.3", "--replicas", "2")
    load = Load(s, x, preds, 4)
    seen = load.seen
    try:
        assert wait_for(lambda: len(seen) > 50, 60)
        os.symlink(digits_model["v2"], serving / ".new")
        os.rename(serving / ".new", serving / "2")   # as examples/digits/export.py: whole, at once
        assert wait_for(lambda: seen.count("2") > 50, 120), (len(seen), s.text()[-3000:])
        load.finish()
        assert not load.bad, load.bad[:3]
        first2 = seen.index("2")
        print("%d answers, %d by version 1 before the switch" % (len(seen), first2))
        # every server switched: only version 2 answers a request that names none now
        for _ in range(10):
            assert outputs(s.infer(x[:2])[1])[0]["model_version"] == "2"
        meta = json.loads(s.get("/v2/models/digits")[1])
        assert meta["versions"] == ["2", "1"], meta
        # the version before stays for requests that name it
        st, body = s.request("POST", "/v2/models/digits/versions/1/infer",
                             {"inputs": [{"name": "pixels", "shape": [3, 64], "datatype": "FP32",
                                          "data": x[:3].ravel().tolist()}]})
        assert st == 200 and outputs(body)[0]["model_version"] == "1", body
        np.testing.assert_allclose(outputs(body)[1], preds["1"][:3], atol=1e-5)
        assert "model digits version 2 loaded" in s.text()
    finally:
        load.finish()
        s.stop()


def test_a_pinned_version_is_the_only_one_served(digits_model, tmp_path, marker):
    serving = tmp_path / "serving"
    serving.mkdir()
    (serving / "1").symlink_to(digits_model["v1"])
    (serving / "2").symlink_to(digits_model["v2"])
    link = tmp_path / ("%s-pinned" % marker)
    link.symlink_to(serving)
    proc = subprocess.Popen([tfos_cli(), "serve", "--model", "digits@1=%s" % link, "--port", "0", "--python", PY,
                             "--log-dir", str(tmp_path / "logs")], stderr=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r":(\d+)/v2/models", proc.stderr.readline()).group(1))

        def infer(path):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                c.request("POST", path, json.dumps({"inputs": [{"name": "pixels", "shape": [2, 64], "datatype": "FP32",
                                                                "data": digits_model["x"][:2].ravel().tolist()}]}))
                r = c.getresponse()
                return r.status, json.loads(r.read())
            except OSError:
                return None, None
            finally:
                c.close()
        assert wait_for(lambda: infer("/v2/models/digits/infer")[0] == 200, 120, 0.2)
        st, doc = infer("/v2/models/digits/infer")
        assert doc["model_version"] == "1"
        np.testing.assert_allclose(np.array(doc["outputs"][0]["data"]).reshape(2, 10), digits_model["pred"][:2],
                                   atol=1e-5)
        st, doc = infer("/v2/models/digits/versions/2/infer")
        assert st == 404 and "no version 2 loaded (versions: 1)" in doc["error"], doc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


# ---- issue 35: serving under abuse ----------------------------------------------

BEHAVE = '''"""A model for the abuse tests (loaded by tfos serve's --loader): y = factor
* x, factor the version dir's file "factor" (else 2). A row x = -1 makes
predict raise, -2 sleep 25 s, -3 never return, -4 sleep 1 s."""
import os
import time

import numpy as np
import tfos.serve


def load(path):
    factor = 2.0
    if os.path.exists(os.path.join(path, "factor")):
        with open(os.path.join(path, "factor")) as f:
            factor = float(f.read())  # a file still being written: ValueError

    def predict(x):
        v = x[:, 0]
        if (v == -1).any():
            raise ValueError("row %d is bad" % int(np.argmax(v == -1)))
        if (v == -2).any():
            time.sleep(25)
        while (v == -3).any():
            time.sleep(1)
        if (v == -4).any():
            time.sleep(1)
        return x * factor
    return tfos.serve.Model(predict, inputs={"x": ("FP32", [-1, 1])}, outputs={'y"q': ("FP32", [-1, 1])})


def load_types(path):
    return tfos.serve.Model(lambda a, b, c: {"a2": a, "b2": b, "c2": c},
                            inputs={"a": ("UINT64", [-1, 1]), "b": ("FP64", [-1, 1]), "c": ("FP32", [-1, 1])},
                            outputs={"a2": ("UINT64", [-1, 1]), "b2": ("FP64", [-1, 1]), "c2": ("FP32", [-1, 1])})
'''


def behave_server(tmp_path, marker, *args, versions=None):
    """tfos serve of BEHAVE's model as "m", from `versions` (else an empty
    dir: version 1)."""
    (tmp_path / "behave.py").write_text(BEHAVE)
    d = versions or tmp_path / "behave-model"
    d.mkdir(exist_ok=True)
    return Server(d, tmp_path, marker, "--loader", "m=%s:load" % (tmp_path / "behave.py"), *args, name="m")


def post(s, model, body, conn=None, version=None):
    """POST an infer request: (status, the answer's JSON)."""
    path = "/v2/models/%s%s/infer" % (model, "/versions/%s" % version if version else "")
    st, payload = s.request("POST", path, body, conn=conn)
    return st, json.loads(payload)


def xbody(values, **extra):
    return dict({"inputs": [{"name": "x", "shape": [len(values), 1], "datatype": "FP32", "data": list(values)}]},
                **extra)


def wait_uptime(s, seconds=5.5):
    """Until both model servers have run `seconds` (one that fails sooner
    fails its node, and the whole set restarts); their pids."""
    def ran():
        pids = server_pids(s)
        try:
            return len(pids) == 2 and None not in pids.values() and min(uptime_s(p) for p in pids.values()) > seconds
        except OSError:
            return False
    assert wait_for(ran, 60), s.text()[-3000:]
    return server_pids(s)


def under_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


PEER_PROBE = """
import socket, sys
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[1].replace("@", "\\0", 1))
c.settimeout(5)
try:
    print("hello" if c.recv(64)[:4] == b"TFOS" else "closed")
except OSError as e:
    print("closed" if isinstance(e, ConnectionError) else "silent: %r" % e)
"""


def test_the_local_socket_under_abuse(tmp_path, marker):
    """Issue 35, item 1: the front end's abstract socket (its name is in
    /proc/net/unix). Another user's process is refused before a greeting; a
    1 GiB frame announced before authenticating is refused from its header
    (the launcher's memory does not grow); same-uid peers that hold every
    waiting place idle cannot keep a model server out: one killed comes back
    and the other serves on, tfos serve does not exit; a local client that
    never reads its answers is dropped at its bound."""
    s = behave_server(tmp_path, marker, "--replicas", "2", "--max-batch", "65536", "--max-queue-rows", "100000000")
    launcher = s.proc.pid
    try:
        addr = json.loads(s.get("/v2/local")[1])["address"]
        if os.geteuid() == 0:
            r = subprocess.run(["/usr/bin/python3", "-c", PEER_PROBE, addr], user=65534, group=65534,
                               capture_output=True, text=True, timeout=30)
            assert r.stdout.strip() == "closed", (r.stdout, r.stderr)
            assert wait_for(lambda: "it runs as another user" in s.text(), 10), s.text()[-2000:]
        # 1 GiB announced, 512 MiB sent, before authenticating
        before = rss_kb(launcher)
        c = socket.socket(socket.AF_UNIX)
        c.connect(addr.replace("@", "\0", 1))
        c.settimeout(10)
        assert c.recv(256)[:4] == b"TFOS"
        sent, chunk = 0, bytes(1 << 20)
        try:
            from tfos import _tfos  # SERVE_JOIN (17) in this build's protocol
            c.sendall(b"TFOS" + bytes([_tfos.PROTOCOL_VERSION, 17, 0, 0]) + (1 << 30).to_bytes(4, "big"))
            while sent < 512 << 20:
                sent += c.send(chunk)
        except OSError:
            pass
        c.close()
        grown = rss_kb(launcher) - before
        print("1 GiB frame announced: %d bytes of it taken, launcher RSS grew %d kB" % (sent, grown))
        assert sent < 64 << 20 and grown < 16 * 1024, (sent, grown)
        assert wait_for(lambda: "at most 65536 before authenticating" in s.text(), 10), s.text()[-2000:]
        # idle same-uid peers hold every waiting place, over and over, while
        # a model server is killed and comes back
        pids = wait_uptime(s)
        stop, held = threading.Event(), []

        def hold():
            while not stop.is_set():
                fresh = []
                for _ in range(300):
                    h = socket.socket(socket.AF_UNIX)
                    try:
                        h.connect(addr.replace("@", "\0", 1))
                    except OSError:
                        h.close()
                        continue
                    fresh.append(h)
                for h in held:
                    h.close()
                held[:] = fresh
                stop.wait(0.5)
        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        x = np.arange(64, dtype=np.float32).reshape(-1, 1)
        s.infer = lambda rows, conn=None: s.request("POST", "/v2/models/m/infer", xbody(rows.ravel().tolist()),
                                                    conn=conn)
        load = Load(s, x, {"1": 2 * x}, 2)
        try:
            assert wait_for(lambda: len(load.seen) > 20, 60), load.bad[:3]
            os.kill(pids["worker:0"], signal.SIGKILL)
            assert wait_for(lambda: server_pids(s).get("worker:0") not in (pids["worker:0"], None), 60), s.text()
            assert wait_for(lambda: "tfos_serve_servers_ready 2" in s.get("/metrics")[1].decode(), 120), \
                s.text()[-3000:]
            before = len(load.seen)
            assert wait_for(lambda: len(load.seen) > before + 20, 60)
        finally:
            load.finish()
            stop.set()
            holder.join(10)
            for h in held:
                h.close()
        assert not load.bad, load.bad[:3]
        assert s.proc.poll() is None and "starting it again here, alone (1 of 10)" in s.text(), s.text()[-3000:]
        # a local client that sends and never reads
        from tfos import _tfos
        link = _tfos.Link(addr, None, "serve_client", timeout=10)
        cols = _tfos.encode_columns([("x", np.ones((65536, 1), np.float32))])  # 256 KiB a request and an answer
        before = rss_kb(launcher)
        n = 0
        # its requests waiting are bounded (64 MiB: then 429s), and its
        # answers unread (64 MiB: then it is dropped, its sends fail)
        deadline = time.monotonic() + 120
        with pytest.raises(OSError):
            while time.monotonic() < deadline:
                n += 1
                link.send(_tfos.Link.SERVE_INFER, cols, n, {"model": "m", "version": ""}, timeout=30)
                if n > 300:
                    time.sleep(0.01)
        link.close()
        grown = rss_kb(launcher) - before
        print("a client that never reads: dropped after %d requests of 256 KiB; launcher RSS grew %d kB" % (n, grown))
        assert wait_for(lambda: "a local client left: it does not read its answers" in s.text(), 10), \
            s.text()[-2000:]
        assert under_asan(launcher) or grown < 160 * 1024, grown  # its bound is 64 MiB of answers
        assert post(s, "m", xbody([1.0]))[0] == 200
    finally:
        s.stop()
    assert wait_for(lambda: not pids_with(marker), 15), pids_with(marker)


def test_timeout_bounds_every_request_and_ends_a_hung_server(tmp_path, marker):
    """Issue 35, item 5, with --timeout 4: requests batched with a predict
    that sleeps 25 s, in a batch on a SIGSTOPped model server, or with a
    predict that never returns, get 504 at their deadline, not when (if
    ever) the model answers. The hung server is ended (its own watchdog
    dumps its stacks and exits; a stopped one is killed by the front end)
    and started again alone by its agent; the other serves on."""
    s = behave_server(tmp_path, marker, "--replicas", "2", "--timeout", "4", "--max-delay-ms", "300")
    done = {}

    def ask(key, values):
        t0 = time.monotonic()
        st, doc = post(s, "m", xbody(values))
        done[key] = (st, doc, time.monotonic() - t0)

    def together(requests):
        threads = [threading.Thread(target=ask, args=kv) for kv in requests]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    try:
        # a predict that sleeps 25 s and three requests batched with it
        wait_uptime(s)
        together([("sleep", [-2.0])] + [("n%d" % i, [float(i)]) for i in range(3)])
        assert len(done) == 4, done
        for key, (st, doc, took) in done.items():
            assert st == 504 and "has not answered the batch holding this request" in doc["error"], (key, doc)
            assert took < 15, (key, took)  # at the 4 s deadline, not after the model's 25 s
        assert wait_for(lambda: "Timeout (0:00:04)!" in s.text(), 30), s.text()[-3000:]
        assert wait_for(lambda: s.text().count("starting it again here, alone") >= 1, 30), s.text()[-3000:]
        assert post(s, "m", xbody([1.0]))[0] == 200  # the other serves meanwhile
        # a stopped model server: its requests 504 at the deadline, then it
        # is killed and started again
        pids = wait_uptime(s)
        stopped = max(pids.values(), key=uptime_s)
        os.kill(stopped, signal.SIGSTOP)
        try:
            done.clear()
            for k in range(3):
                # a batch that runs 1 s on one server, then two requests:
                # they go to the other, so one of the batches is on the
                # stopped server, whichever it is
                slow = threading.Thread(target=ask, args=("slow%d" % k, [-4.0]))
                slow.start()
                time.sleep(0.6)
                together([("s%d-%d" % (k, i), [float(i)]) for i in range(2)])
                slow.join(60)
            for key, (st, doc, took) in done.items():
                assert st == 200 or (st == 504 and took < 15), (key, st, doc, took)
            assert any(st == 504 for st, _, _ in done.values()), done  # it had taken batches
            assert wait_for(lambda: "it is hung; ended it (pid %d): its agent starts it again" % stopped in s.text(),
                            30), s.text()[-3000:]
            assert wait_for(lambda: s.text().count("starting it again here, alone") >= 2, 30), s.text()[-3000:]
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        # a predict that never returns
        wait_uptime(s)
        done.clear()
        together([("forever", [-3.0])])
        st, doc, took = done["forever"]
        assert st == 504 and took < 15, done
        assert wait_for(lambda: s.text().count("Timeout (0:00:04)!") >= 2, 30), s.text()[-3000:]
        assert wait_for(lambda: s.text().count("starting it again here, alone") >= 3, 30), s.text()[-3000:]
        assert wait_for(lambda: "tfos_serve_servers_ready 2" in s.get("/metrics")[1].decode(), 60)
        assert post(s, "m", xbody([1.0, 2.0]))[0] == 200
        assert s.proc.poll() is None
    finally:
        s.stop()
    assert wait_for(lambda: not pids_with(marker), 15), pids_with(marker)


def test_a_row_that_makes_predict_raise_fails_only_its_request(tmp_path, marker):
    """Issue 35, item 6: one client sends a row that makes predict raise
    every 50 ms while four others send good rows, batched together: only the
    bad requests get 500 (naming the model's error), every other is
    answered."""
    s = behave_server(tmp_path, marker, "--max-delay-ms", "20")
    stop, ok, wrong, bad = threading.Event(), [], [], []

    def good(k):
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        while not stop.is_set():
            st, doc = post(s, "m", xbody([k + 1.0, k + 2.0]), conn=conn)
            if st == 200 and doc["outputs"][0]["data"] == [2 * (k + 1.0), 2 * (k + 2.0)]:
                ok.append(k)
            else:
                wrong.append((st, doc))
        conn.close()

    def poison():
        while not stop.is_set():
            bad.append(post(s, "m", xbody([5.0, -1.0])))
            time.sleep(0.05)
    threads = [threading.Thread(target=good, args=(k,)) for k in range(4)] + [threading.Thread(target=poison)]
    try:
        for t in threads:
            t.start()
        time.sleep(4)
        stop.set()
        for t in threads:
            t.join(60)
        text = s.get("/metrics")[1].decode()
        batches = int(re.search(r'tfos_serve_batches_total\{[^}]*\} (\d+)', text).group(1))
        print("%d good answers, %d bad requests, %d batches" % (len(ok), len(bad), batches))
        assert not wrong, wrong[:3]
        assert len(ok) > 50 and len(bad) > 10, (len(ok), len(bad))
        for st, doc in bad:
            assert st == 500 and "model m failed on this request" in doc["error"] and \
                "ValueError: row 1 is bad" in doc["error"], doc
    finally:
        stop.set()
        s.stop()


def test_numbers_names_and_keys_at_the_edges_of_the_protocol(tmp_path, marker):
    """Issue 35, items 10 and 4: UINT64 up to 2^64 - 1 and a 521-digit FP64
    literal are taken; 1e39 as FP32 and 1e400 are refused naming the input
    and element (never answered as null); a duplicate "inputs" key and an
    "id" over the limit are refused; an output named with a quote is valid
    JSON; a local request for a version no server holds is 404 at once."""
    import tfos.serve
    s = behave_server(tmp_path, marker, "--timeout", "20", "--model", "types=%s" % (tmp_path / "behave-model"),
                      "--loader", "types=%s:load_types" % (tmp_path / "behave.py"))
    try:
        def types(a, b, c):
            return ('{"inputs": [{"name": "a", "shape": [1, 1], "datatype": "UINT64", "data": [%s]}, '
                    '{"name": "b", "shape": [1, 1], "datatype": "FP64", "data": [%s]}, '
                    '{"name": "c", "shape": [1, 1], "datatype": "FP32", "data": [%s]}]}' % (a, b, c)).encode()
        assert wait_for(lambda: s.get("/v2/models/types/ready")[0] == 200, 60)
        digits521 = "1." + "".join(str(i * 7 % 10) for i in range(520))
        st, doc = post(s, "types", types(2 ** 64 - 1, digits521, "3.4028235e38"))
        assert st == 200, doc
        out = {o["name"]: o["data"] for o in doc["outputs"]}
        assert out["a2"] == [2 ** 64 - 1] and out["b2"] == [float(digits521)], out
        assert np.float32(out["c2"][0]) == np.finfo(np.float32).max, out
        for b, c, text in (("1e400", "0", "input b: data[0] is not a FP64 value"),
                           ("-1e400", "0", "input b: data[0] is not a FP64 value"),
                           ("0", "1e39", "input c: data[0] is not a FP32 value (a number within +-3.4028235e38)")):
            st, doc = post(s, "types", types(1, b, c))
            assert st == 400 and text in doc["error"], (b, c, doc)
        st, doc = post(s, "types", types(2 ** 64, 0, 0))
        assert st == 400 and "input a: data[0] is not a UINT64 value" in doc["error"], doc
        body = json.dumps(xbody([1.0]))
        st, doc = post(s, "m", (body[:-1] + ', "inputs": []}').encode())
        assert st == 400 and 'the key "inputs" is given twice in one object' in doc["error"], doc
        st, doc = post(s, "m", xbody([1.0], id="i" * (1 << 20)))
        assert st == 400 and "\"id\" is longer than 255 bytes" in doc["error"], doc["error"][:300]
        st, doc = post(s, "m", xbody([1.0, 2.5], id="i" * 255))
        assert st == 200 and doc["id"] == "i" * 255, doc
        assert doc["outputs"][0]["name"] == 'y"q' and doc["outputs"][0]["data"] == [2.0, 5.0], doc
        # a local client: a version no server holds is 404 at once, not a
        # wait in the queue until --timeout
        c = tfos.serve.Client("http://127.0.0.1:%d" % s.port)
        try:
            assert c.is_local
            t0 = time.monotonic()
            with pytest.raises(tfos.serve.ServeError, match="model m has no version 7 loaded") as e:
                c.infer("m", {"x": np.ones((2, 1), np.float32)}, version="7")
            assert e.value.status == 404 and time.monotonic() - t0 < 10
            version, out = c.infer("m", {"x": np.ones((2, 1), np.float32)}, version="1")
            assert version == "1" and out['y"q'].tolist() == [[2.0], [2.0]]
        finally:
            c.close()
    finally:
        s.stop()


def test_a_version_written_in_place_is_loaded_once_whole(tmp_path, marker):
    """Issue 35, item 10: a version dir written in place fails to load while
    it is incomplete; each model server tries it again (bounded, and says
    so), so both replicas end up on it."""
    versions = tmp_path / "versions"
    (versions / "1").mkdir(parents=True)
    s = behave_server(tmp_path, marker, "--replicas", "2", "--poll", "0.3", versions=versions)
    try:
        st, doc = post(s, "m", xbody([1.0]))
        assert st == 200 and doc["model_version"] == "1" and doc["outputs"][0]["data"] == [2.0], doc
        assert wait_for(lambda: "tfos_serve_servers_ready 2" in s.get("/metrics")[1].decode(), 60), s.text()[-3000:]
        (versions / "2").mkdir()
        (versions / "2" / "factor").write_text("")  # being written
        for w in (0, 1):
            assert wait_for(lambda: re.search(r"\[worker:%d\].*model m version 2 not loaded \(attempt 1 of 5; "
                                              r"trying again in 1 s" % w, s.text()), 30), s.text()[-3000:]
        # a model server that starts meanwhile serves the version before
        # (it failed to start before: the newest would not load)
        pids = wait_uptime(s)
        os.kill(pids["worker:0"], signal.SIGKILL)
        assert wait_for(lambda: "version 2 not loaded (attempt 1 of 5; trying again in 1 s; serving 1 meanwhile)"
                        in s.text(), 60), s.text()[-3000:]
        assert wait_for(lambda: "tfos_serve_servers_ready 2" in s.get("/metrics")[1].decode(), 60), s.text()[-3000:]
        (versions / "2" / "factor").write_text("3")
        for w in (0, 1):
            assert wait_for(lambda: re.search(r"\[worker:%d\].*model m version 2 loaded at attempt" % w, s.text()),
                            30), s.text()[-3000:]
        st, doc = post(s, "m", xbody([1.0]))
        assert st == 200 and doc["model_version"] == "2" and doc["outputs"][0]["data"] == [3.0], doc
    finally:
        s.stop()


@pytest.fixture(scope="module")
def torch_model(tmp_path_factory):
    """examples/torch/serve_digits.py's PyTorch classifier (version 1, and a
    second trained apart), made by tests/python/progs/torch_loader.py."""
    d = tmp_path_factory.mktemp("serve-torch")
    r = subprocess.run([PY, prog("torch_loader.py"), str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"v1": d / "digits" / "1", "v2": d / "other" / "1", "x": np.load(d / "x.npy"),
            "pred": np.load(d / "pred1.npy"), "pred2": np.load(d / "pred2.npy")}


def test_a_pytorch_model_serves_through_its_loader_with_versions(torch_model, tmp_path, marker):
    serving = tmp_path / "serving"
    serving.mkdir()
    (serving / "1").symlink_to(torch_model["v1"])
    x = torch_model["x"]
    loader = os.path.join(ROOT, "examples", "torch", "serve_digits.py")
    s = Server(serving, tmp_path, marker, "--loader", "digits=%s:load" % loader, "--poll", "0.3")
    try:
        meta = json.loads(s.get("/v2/models/digits")[1])
        assert meta["platform"] == "pytorch_torchscript" and meta["versions"] == ["1"], meta
        assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}], meta
        assert meta["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 10]}], meta
        st, body = s.infer(x[:50])
        assert st == 200, body
        doc, out = outputs(body)
        assert doc["outputs"][0]["name"] == "probs" and doc["model_version"] == "1"
        np.testing.assert_allclose(out, torch_model["pred"][:50], atol=1e-5)
        # the declared signature is checked before the callable runs
        st, body = s.request("POST", "/v2/models/digits/infer",
                             {"inputs": [{"name": "pixels", "shape": [1, 63], "datatype": "FP32",
                                          "data": [0.0] * 63}]})
        assert st == 400 and "pixels" in json.loads(body)["error"], body
        # a new version dir (whole, by a rename) is loaded, then served
        os.symlink(torch_model["v2"], serving / ".new")
        os.rename(serving / ".new", serving / "2")
        assert wait_for(lambda: json.loads(s.get("/v2/models/digits")[1])["versions"] == ["2", "1"], 120), s.text()
        doc, out = outputs(s.infer(x[:20])[1])
        assert doc["model_version"] == "2"
        np.testing.assert_allclose(out, torch_model["pred2"][:20], atol=1e-5)
        assert "model digits version 2 loaded" in s.text()
    finally:
        s.stop()


@pytest.mark.parametrize("loader,text", [
    ("load_bad_type", "the loader returned str for"),
    ("load_raises", "model digits: the loader load_raises failed on version 1"),
    ("no_such_function", "has no function no_such_function"),
])
def test_a_loader_that_fails_ends_serve_naming_the_model(torch_model, tmp_path, loader, text):
    r = subprocess.run([tfos_cli(), "serve", "--model", "digits=%s" % torch_model["v1"], "--port", "0",
                        "--loader", "digits=%s:%s" % (prog("torch_loader.py"), loader), "--python", PY,
                        "--max-restarts", "1", "--log-dir", str(tmp_path / "logs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and text in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("args,text", [
    ([], "serve needs --model NAME=DIR"),
    (["--model", "digits"], "--model takes NAME=DIR"),
    (["--model", "a b=/tmp"], "a name is up to 100 letters"),
    (["--model", "d=/nonexistent-dir"], "/nonexistent-dir: No such file or directory"),
    (["--model", "d=/tmp", "--listen", "0.0.0.0"], "give --token T"),
    (["--model", "d=/tmp", "--replicas", "0"], "--replicas: '0' is out of range"),
    (["--model", "d@x=/tmp"], "the pinned version (NAME@VERSION=DIR) is a number"),
    (["--model", "d@3=/tmp"], "version 3 is pinned, but there is no /tmp/3/saved_model.pb"),
    (["--model", "d@3=/tmp", "--loader", "d=m:f"], "version 3 is pinned, but there is no /tmp/3:"),
    (["--model", "d=/tmp", "--loader", "d=nofunction"], "--loader takes NAME=MODULE:FUNCTION"),
    (["--model", "d=/tmp", "--loader", "e=m:f"], "--loader e=m:f: no --model has that name"),
])
def test_usage_errors_name_the_option(args, text):
    r = subprocess.run([tfos_cli(), "serve"] + args, capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, TFOS_SERVE_TOKEN=""))
    assert r.returncode == 2 and text in r.stderr, r.stderr
