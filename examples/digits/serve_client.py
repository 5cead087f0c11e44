"""Score the held-out digits through tfos serve, over HTTP.

    python examples/digits/serve_client.py [--url URL] [--batch N] [--clients K]

Sends the held-out split (the same as train.py's, --seed 42) to
URL/v2/models/digits/infer with the Open Inference Protocol's JSON, N rows a
request from K concurrent clients, and prints "served accuracy: 0.97..".
Waits up to 120 s for the server to be ready first. Plain HTTP from the
standard library: any OIP client (KServe's, Triton's) speaks the same.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

import digits_data


def wait_ready(host, port, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection(host, port, timeout=5)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8500")
    p.add_argument("--batch", type=int, default=16, help="rows a request (default 16)")
    p.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    p.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    a = p.parse_args(argv)
    u = urllib.parse.urlparse(a.url)
    if not wait_ready(u.hostname, u.port or 80):
        print(f"serve_client.py: {a.url} did not become ready in 120 s", file=sys.stderr)
        return 1
    _, _, x, y = digits_data.load_split(a.seed)
    chunks = [(lo, x[lo:lo + a.batch]) for lo in range(0, len(x), a.batch)]
    pred = [None] * len(x)
    errors = []

    def client(k):
        c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)  # kept alive
        for lo, rows in chunks[k::a.clients]:
            body = {"inputs": [{"name": "pixels", "shape": list(rows.shape), "datatype": "FP32",
                                "data": rows.ravel().tolist()}]}
            c.request("POST", "/v2/models/digits/infer", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            doc = json.loads(r.read())
            if r.status != 200:
                errors.append(f"HTTP {r.status}: {doc.get('error')}")
                return
            out = doc["outputs"][0]
            width = out["shape"][1]
            for i in range(out["shape"][0]):
                scores = out["data"][i * width:(i + 1) * width]
                pred[lo + i] = max(range(width), key=scores.__getitem__)
        c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("serve_client.py: " + errors[0], file=sys.stderr)
        return 1
    acc = sum(int(p_ == t_) for p_, t_ in zip(pred, y)) / len(y)
    print(f"{len(y)} rows in {len(chunks)} requests, {time.monotonic() - t0:.2f} s")
    print(f"served accuracy: {acc:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
