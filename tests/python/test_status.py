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


def status_url(proc):
    """The status URL from the first lines `tfos run` writes to stderr."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"status (http://127\.0\.0\.1:\d+/)", proc.stderr.readline())
        if m:
            return m.group(1)
    raise AssertionError("tfos run printed no status URL")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def test_status_metrics_and_page_show_the_restart(tmp_path, marker):
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--",
                             PY, "-c", PROGRAM, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = status_url(proc)

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


def test_live_page_in_headless_chromium(tmp_path, marker):
    """The page as a person sees it: Chromium runs its script and renders the table."""
    import shutil
    import pytest
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    wait_go = ("import os, sys, time\n"
               "t0 = time.monotonic()\n"
               "while not os.path.exists(sys.argv[1]) and time.monotonic() - t0 < 120:\n"
               "    time.sleep(0.05)\n")
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--",
                             PY, "-c", wait_go, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = status_url(proc)
        assert wait_for(lambda: all(n["state"] == "running" for n in
                                    json.loads(get(url + "status")[2])["cluster"]["nodes"]), 30)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--user-data-dir=%s" % (tmp_path / "profile"), "--virtual-time-budget=3000"]
        dom = subprocess.run([browser] + flags + ["--dump-dom", url], capture_output=True, text=True, timeout=90)
        assert "attempt 1 of 4" in dom.stdout, dom.stdout[-2000:] + dom.stderr[-2000:]
        rows = re.findall(r'<tr class="running"><td>(worker:\d)</td><td>(\d)</td><td>127\.0\.0\.1:\d+</td>'
                          r'<td>running</td><td>(\d+)</td>', dom.stdout)
        assert sorted(r[0] for r in rows) == ["worker:0", "worker:1"]
        assert all(int(r[2]) > 0 for r in rows)
        assert '<a href="/logs/worker-1.log">log</a>' in dom.stdout
        shot = tmp_path / "page.png"
        subprocess.run([browser] + flags + ["--window-size=900,400", "--screenshot=%s" % shot, url],
                       capture_output=True, timeout=90)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        go.write_text("go")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tfos_status_and_logs_commands(tmp_path, marker):
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    logs = tmp_path / "logs"
    code = ("import os, sys, time\n"
            "print('hello from', os.environ['TFOS_JOB_NAME'], os.environ['TFOS_TASK_INDEX'], flush=True)\n"
            "t0 = time.monotonic()\n"
            "while not os.path.exists(sys.argv[1]) and time.monotonic() - t0 < 120:\n"
            "    time.sleep(0.05)\n"
            "print('bye', flush=True)\n")
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--log-dir", str(logs), "--", PY, "-c", code,
                             str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    follow = None
    try:
        assert wait_for(lambda: (logs / "worker-1.log").exists() and "hello" in (logs / "worker-1.log").read_text(),
                        30)
        st = subprocess.run([tfos_cli(), "status", str(logs)], capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        assert re.search(r"cluster running, attempt 1 of 4", st.stdout)
        assert re.search(r"worker:1\s+1\s+127\.0\.0\.1:\d+\s+running\s+\d+", st.stdout)
        js = subprocess.run([tfos_cli(), "status", "--json", str(logs)], capture_output=True, text=True, timeout=30)
        assert json.loads(js.stdout)["cluster"]["state"] == "running"
        lg = subprocess.run([tfos_cli(), "logs", "worker:1", "--log-dir", str(logs)], capture_output=True, text=True,
                            timeout=30)
        assert lg.stdout == "[worker:1] hello from worker 1\n"
        follow = subprocess.Popen([tfos_cli(), "logs", "-f", "--log-dir", str(logs)], stdout=subprocess.PIPE,
                                  text=True)
        time.sleep(0.5)
        go.write_text("go")
        assert proc.wait(timeout=60) == 0
        out, _ = follow.communicate(timeout=30)  # -f ends by itself once the run has ended
        assert "[worker:0] bye\n" in out and "[worker:1] bye\n" in out
        gone = subprocess.run([tfos_cli(), "status", str(logs)], capture_output=True, text=True, timeout=30)
        assert gone.returncode == 1 and "does not answer: the run has ended" in gone.stderr
    finally:
        for p in (proc, follow):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
