"""The launcher's status endpoints while a cluster runs and after a restart:
/status (JSON), /metrics (Prometheus text), the live page, node logs."""
import json
import os
import re
import subprocess
import time
import urllib.request

from conftest import PY, pids_with, tfos_cli, wait_for

PROGRAM = ("import os, sys, time\n"
           "a = int(os.environ['TFOS_ATTEMPT'])\n"
           "print('node %s:%s attempt %d' % (os.environ['TFOS_JOB_NAME'], os.environ['TFOS_TASK_INDEX'], a), "
           "flush=True)\n"
           "if a == 1 and os.environ['TFOS_TASK_INDEX'] == '1':\n"
           "    os.kill(os.getpid(), 9)\n"
           "go = sys.argv[1]\n"
           "t0 = time.monotonic()\n"
           "while not os.path.exists(go) and time.monotonic() - t0 < 120:\n"
           "    time.sleep(0.05)\n")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def test_status_metrics_and_page_show_the_restart(tmp_path, marker):
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--",
                             PY, "-c", PROGRAM, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            m = re.search(r"status (http://127\.0\.0\.1:\d+/)", proc.stderr.readline())
            url = m.group(1) if m else None
        assert url

        def restarted():
            s = json.loads(get(url + "status")[2])
            nodes = s["cluster"]["nodes"] if s["cluster"] else []
            return s if s["attempt"] == 2 and nodes and all(n["state"] == "running" for n in nodes) else None

        st = wait_for(restarted, 60, interval=0.1)
        assert st, get(url + "status")[2]
        assert st["max_restarts"] == 3
        assert len(st["history"]) == 1 and "worker:1" in st["history"][0] and "signal 9" in st["history"][0]
        assert [(n["job"], n["index"]) for n in st["cluster"]["nodes"]] == [("worker", 0), ("worker", 1)]
        assert all(n["pid"] > 0 and n["port"] > 0 for n in st["cluster"]["nodes"])

        code, ctype, text = get(url + "metrics")
        assert code == 200 and ctype.startswith("text/plain")
        assert "tfos_attempt 2\n" in text and "tfos_restarts_total 1\n" in text
        assert 'tfos_node_up{job="worker",index="1",executor="1"} 1\n' in text
        assert 'tfos_cluster_state{state="running"} 1\n' in text
        for line in text.splitlines():  # every sample line is "name{labels} value" or "name value"
            assert line.startswith("#") or re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?\d+", line), line

        code, ctype, html = get(url)
        assert code == 200 and ctype.startswith("text/html") and "<table" in html and "fetch('/status')" in html
        code, _, log = get(url + "logs/worker-1.log")
        assert "node worker:1 attempt 1" in log and "node worker:1 attempt 2" in log
        try:
            get(url + "logs/..%2f..%2fetc%2fpasswd")
            assert False, "traversal must not be served"
        except urllib.error.HTTPError as e:
            assert e.code == 404
        go.write_text("go")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_for(lambda: not pids_with(marker), 10)
