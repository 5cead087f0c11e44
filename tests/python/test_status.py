"""The launcher's status endpoints while a cluster runs and after a restart:
/status (JSON), /metrics (Prometheus text), the live page, node logs; and
while `tfos run --input` feeds: feed statistics, /feed/history, the chart,
TensorBoard links and the console progress lines."""
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import PY, pids_with, run_tfos, tfos_cli, wait_for

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


def chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    return browser


def chromium_flags(tmp_path):
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--user-data-dir=%s" % (tmp_path / "profile"), "--virtual-time-budget=3000"]


def dump_dom(tmp_path, url):
    """The page's DOM once its script has run (Chromium, headless)."""
    r = subprocess.run([chromium()] + chromium_flags(tmp_path) + ["--dump-dom", url], capture_output=True, text=True,
                       timeout=90)
    return r.stdout, r.stderr


METRIC_LINE = r"[a-z_]+(\{[^}]*\})? -?\d+(\.\d+)?"


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
            assert line.startswith("#") or re.fullmatch(METRIC_LINE, line), line
        assert "tfos_feed_" not in text  # no --input: no feed series
        assert json.loads(get(url + "status")[2])["feed"] is None

        code, ctype, html = get(url)
        assert code == 200 and ctype.startswith("text/html") and "<table" in html and "fetch('/status')" in html
        # "running" means started: its first line may be a moment behind
        wait_for(lambda: "node worker:1 attempt 2" in get(url + "logs/worker-1.log")[2], 30, interval=0.1)
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
    browser = chromium()
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
        flags = chromium_flags(tmp_path)
        dom = subprocess.run([browser] + flags + ["--dump-dom", url], capture_output=True, text=True, timeout=90)
        assert "attempt 1 of 4" in dom.stdout, dom.stdout[-2000:] + dom.stderr[-2000:]
        rows = re.findall(r'<tr class="running"><td>(worker:\d)</td><td>(\d)</td><td>127\.0\.0\.1:\d+</td>'
                          r'<td>running</td><td>(\d+)</td>', dom.stdout)
        assert sorted(r[0] for r in rows) == ["worker:0", "worker:1"]
        assert all(int(r[2]) > 0 for r in rows)
        assert '<a href="/logs/worker-1.log">log</a>' in dom.stdout
        assert '<svg id="feedchart"' in dom.stdout and "no feed yet" in dom.stdout  # no --input: an empty chart
        assert '<a class="tb" href="http' not in dom.stdout  # no node announced TensorBoard
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
        # ended: its final state from the log dir
        assert gone.returncode == 0, gone.stderr
        assert "the run has ended; its final state, from %s/status.json:" % logs in gone.stdout
        assert re.search(r"^cluster done, attempt 1 of 4", gone.stdout, re.M), gone.stdout
        assert re.search(r"^worker:1\s+1\s+127\.0\.0\.1:\d+\s+exited\s+\d+\s+0\b", gone.stdout, re.M), gone.stdout
        (logs / "status.json").unlink()
        gone = subprocess.run([tfos_cli(), "status", str(logs)], capture_output=True, text=True, timeout=30)
        assert gone.returncode == 1 and "does not answer: the run has ended" in gone.stderr
    finally:
        for p in (proc, follow):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# Reads its feed at `rate` rows/s, then waits for the go file: the feed lasts
# several seconds (the 1 MiB rings fill up) and the status page stays up
# after it, for the final counts.
SLOW_READER = ("import os, sys, time\n"
               "from tfos import TFNode\n"
               "rate, go = float(sys.argv[1]), sys.argv[2]\n"
               "ctx = TFNode.get_context()\n"
               "df = TFNode.DataFeed(ctx.mgr)\n"
               "n = 0\n"
               "t0 = time.monotonic()\n"
               "while not df.should_stop():\n"
               "    cols = df.next_batch_arrays(500)\n"
               "    if not cols or len(cols[0]) == 0:\n"
               "        break\n"
               "    n += len(cols[0])\n"
               "    while n > rate * (time.monotonic() - t0):\n"
               "        time.sleep(0.01)\n"
               "print('node %s:%d read %d' % (ctx.job_name, ctx.task_index, n), flush=True)\n"
               "t0 = time.monotonic()\n"
               "while not os.path.exists(go) and time.monotonic() - t0 < 120:\n"
               "    time.sleep(0.05)\n")

PROGRESS = re.compile(r"tfos: feed: partitions (\d+)/~?(\d+), (\d+) rows \([\d.]+ [kMG]?B\), (\d+) rows/s "
                      r"\([\d.]+ [kMG]?B/s\)(?:, \d+ consumed)?, (\d+)% of the input read(, ETA [\dminhs ]+)?\n")


def test_feed_statistics_history_chart_and_progress(tmp_path, marker):
    rows = 300000
    data = tmp_path / marker / "d.csv"
    data.parent.mkdir()
    with open(data, "w") as f:
        f.write("a,b,c\n")
        f.writelines("%d,%.1f,%d\n" % (i, i * 0.5, i % 7) for i in range(rows))
    go = tmp_path / "go"
    logs = tmp_path / "logs"
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--feed-mb", "1", "--batch-rows", "500",
                             "--partition-rows", "10000", "--log-dir", str(logs), "--input", str(data), "--",
                             PY, "-c", SLOW_READER, "10000", str(go)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = status_url(proc)

        def feeding():
            s = json.loads(get(url + "status")[2])
            f = s["feed"]
            return s if f and f["state"] == "feeding" and f["rows"] > 0 and f["rows_per_s"] > 0 else None

        mid = wait_for(feeding, 60, interval=0.2)
        assert mid, get(url + "status")[2]
        f = mid["feed"]
        assert f["source"] == "files" and f["bytes"] > 0 and f["records"] > 0 and f["input_bytes"] == data.stat().st_size
        assert f["rows_expected"] is None and f["partitions_expected"] is None  # CSV: not counted in advance
        assert [n["node"] for n in f["nodes"]] == ["worker:0", "worker:1"]
        assert sum(n["rows"] for n in f["nodes"]) == f["rows"]

        code, _, text = get(url + "metrics")
        assert code == 200
        for line in text.splitlines():
            assert line.startswith("#") or re.fullmatch(METRIC_LINE, line), line
        for name, kind in [("tfos_feed_rows_total", "counter"), ("tfos_feed_bytes_total", "counter"),
                           ("tfos_feed_records_total", "counter"), ("tfos_feed_partitions_completed_total", "counter"),
                           ("tfos_feed_partitions_aborted_total", "counter"), ("tfos_feed_rows_per_second", "gauge"),
                           ("tfos_feed_bytes_per_second", "gauge")]:
            assert "# TYPE %s %s\n" % (name, kind) in text and "# HELP %s " % name in text
            assert re.search(r'^%s\{node="worker:0"\} \d' % name, text, re.M)
            assert re.search(r'^%s\{node="worker:1"\} \d' % name, text, re.M)
        assert 'tfos_feed_state{state="feeding"} 1\n' in text
        assert "tfos_feed_input_bytes %d\n" % data.stat().st_size in text

        st = subprocess.run([tfos_cli(), "status", str(logs)], capture_output=True, text=True, timeout=30)
        assert re.search(r"^feed (feeding|done): \d+ rows written, \d+ consumed, [\d.]+ MB, \d+ partitions", st.stdout,
                         re.M), st.stdout

        # the live page while it feeds: the chart is drawn from /feed/history
        dom, err = dump_dom(tmp_path, url)
        assert '<svg id="feedchart"' in dom, dom[-2000:] + err[-2000:]
        points = re.search(r'<polyline id="feedline"[^>]* points="([^"]+)"', dom)
        assert points and len(points.group(1).split()) >= 2, dom[-3000:]
        assert re.search(r'<p id="feed">(feeding|all written, the trainers are reading): [\d.]+k? rows written, ', dom)
        assert re.search(r"<td>worker:0</td>.*?<td class=\"n\">[\d.]+k?</td><td class=\"n\">[\d.]+k?</td>", dom)

        def done():
            s = json.loads(get(url + "status")[2])
            return s if s["feed"]["state"] == "done" else None

        end = wait_for(done, 120, interval=0.2)
        assert end, get(url + "status")[2]
        f = end["feed"]
        assert f["rows"] == rows and sum(n["rows"] for n in f["nodes"]) == rows
        assert f["partitions_completed"] == 30 and sum(n["partitions_completed"] for n in f["nodes"]) == 30
        assert f["partitions_aborted"] == 0
        assert f["bytes"] == sum(n["bytes"] for n in f["nodes"]) and f["records"] == rows // 500
        assert f["input_bytes_read"] == f["input_bytes"] and f["eta_s"] is None
        assert all(n["rows"] == 150000 for n in f["nodes"])  # 30 partitions of 10000 rows, in turn
        metrics = get(url + "metrics")[2]
        assert sum(int(v) for v in re.findall(r'^tfos_feed_rows_total\{node="worker:\d"\} (\d+)$', metrics,
                                              re.M)) == rows

        hist = json.loads(get(url + "feed/history")[2])
        samples = hist["samples"]
        assert hist["interval_s"] == 1 and len(samples) >= 5
        assert all(b["t"] > a["t"] for a, b in zip(samples, samples[1:])), samples
        assert max(s["rows_per_s"] for s in samples) > 0
        assert wait_for(lambda: json.loads(get(url + "feed/history")[2])["samples"][-1]["rows"] == rows, 5)

        go.write_text("go")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert "[worker:0] node worker:0 read 150000" in out and "[worker:1] node worker:1 read 150000" in out
        fed = re.search(r"fed 300000 rows \(30 partitions, [\d.]+ MB\) in ([\d.]+) s", err)
        assert fed, err
        lines = PROGRESS.findall(err)
        assert lines, err  # the feed lasted over 5 s: at least one progress line
        assert len(lines) <= float(fed.group(1)) / 5 + 1, err  # about every 5 s, not more often
        assert all(0 < int(n) <= rows and 0 < int(pct) <= 100 for _, _, n, _, pct, _ in lines)
        assert any(eta for *_, eta in lines)  # CSV: an ETA from the share of the input read
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CANNED_STATUS = {
    "attempt": 1, "max_restarts": 3, "log_dir": "/tmp/x", "history": [],
    "feed": {"state": "feeding", "source": "files", "rows": 4000, "bytes": 96000, "records": 8,
             "partitions_completed": 3, "partitions_aborted": 1, "rows_per_s": 1500.0, "bytes_per_s": 36000.0,
             "input_bytes": 100000, "input_bytes_read": 40000, "rows_expected": None, "partitions_expected": None,
             "eta_s": 12.0, "elapsed_s": 3.0, "rows_consumed": 1200, "consumed_per_s": 800.0,
             "nodes": [{"node": "chief:0", "executor_id": 0, "rows": 2500, "bytes": 60000, "records": 5,
                        "partitions_completed": 2, "partitions_aborted": 0, "rows_per_s": 900.0,
                        "bytes_per_s": 21600.0},
                       {"node": "worker:0", "executor_id": 1, "rows": 1500, "bytes": 36000, "records": 3,
                        "partitions_completed": 1, "partitions_aborted": 1, "rows_per_s": 600.0,
                        "bytes_per_s": 14400.0}]},
    "cluster": {"state": "running", "address": "127.0.0.1:5000", "attempt": 1, "registered": 2, "size": 2,
                "failure": "",
                "nodes": [{"executor_id": 0, "job": "chief", "index": 0, "host": "127.0.0.1", "port": 5001,
                           "state": "running", "pid": 101, "exit_code": -1, "tensorboard_port": 6006,
                           "feed": {"rows_written": 2500, "rows_consumed": 700, "rows_buffered": 1800,
                                    "ring_bytes": 1048576, "ring_used": 943718, "ring_fill": 0.9, "wait_data": 0.0,
                                    "wait_trainer": 0.97, "ended": False, "age_s": 0.4},
                           "report": {"step": 35, "loss": 0.3125, "acc": "nan"}, "report_age_s": 0.5},
                          {"executor_id": 1, "job": "worker", "index": 0, "host": "127.0.0.1", "port": 5002,
                           "state": "running", "pid": 102, "exit_code": -1, "tensorboard_port": 0,
                           "feed": {"rows_written": 15000, "rows_consumed": 15000, "rows_buffered": 0,
                                    "ring_bytes": 1048576, "ring_used": 0, "ring_fill": 0.0, "wait_data": 0.82,
                                    "wait_trainer": 0.0, "ended": False, "age_s": 0.4},
                           "report": None, "report_age_s": None}],
                # a page of a larger cluster, and how its nodes started
                "nodes_page": {"first": 0, "last": 1, "total": 600},
                "start": {"spec_ms": 812, "slowest_phase": "start_program",
                          "phases": [{"phase": "spawn", "until": "agent", "nodes": 600, "p50_ms": 40, "p99_ms": 90,
                                      "max_ms": 95, "slowest": ["worker:7", "worker:3"]},
                                     {"phase": "start_program", "until": "program", "nodes": 600, "p50_ms": 30,
                                      "p99_ms": 400, "max_ms": 1200, "slowest": ["worker:511", "chief:0"]},
                                     {"phase": "first_io", "until": "first_io", "nodes": 0, "p50_ms": None,
                                      "p99_ms": None, "max_ms": None, "slowest": []}]}},
}
CANNED_HISTORY = {"interval_s": 1, "window_s": 5, "now": 4.0,
                  "samples": [{"t": float(t), "rows": 1000 * t, "rows_per_s": 1000.0 + 100 * t, "bytes": 24000 * t,
                               "bytes_per_s": 24000.0, "consumed": 300 * t, "consumed_per_s": 300.0}
                              for t in range(5)]}


def test_page_renders_tensorboard_links_and_chart_from_status_json(tmp_path, marker):
    """The page's data path with a node that announced TensorBoard. `tfos run`
    starts its agents without --tensorboard-port (only Spark's nodes announce
    one), so the real page from a running launcher is served here beside
    canned /status and /feed/history, and Chromium renders it."""
    chromium()
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    wait_go = ("import os, sys, time\n"
               "t0 = time.monotonic()\n"
               "while not os.path.exists(sys.argv[1]) and time.monotonic() - t0 < 120:\n"
               "    time.sleep(0.05)\n")
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--",
                             PY, "-c", wait_go, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = status_url(proc)
        page = get(url)[2]
        hist = json.loads(get(url + "feed/history")[2])
        assert hist["samples"] == [] and hist["interval_s"] == 1  # no --input: nothing sampled
        assert all(n["tensorboard_port"] == 0 for n in json.loads(get(url + "status")[2])["cluster"]["nodes"])
        go.write_text("go")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    class Canned(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, ctype = {"/": (page, "text/html; charset=utf-8"),
                           "/status": (json.dumps(CANNED_STATUS), "application/json"),
                           "/feed/history": (json.dumps(CANNED_HISTORY), "application/json")}.get(
                self.path, ("not found", "text/plain"))
            data = body.encode()
            self.send_response(200 if body != "not found" else 404)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        dom, err = dump_dom(tmp_path, "http://127.0.0.1:%d/" % server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert "attempt 1 of 4" in dom, dom[-2000:] + err[-2000:]
    # the chief announced TensorBoard on 6006: a link in its row and above the table; the worker has none
    link = '<a class="tb" href="http://127.0.0.1:6006/">http://127.0.0.1:6006/</a>'
    assert re.search(r'<td>chief:0</td>.*?<td><a href="/logs/chief-0.log">log</a></td><td>%s</td>' % re.escape(link),
                     dom)
    assert re.search(r'<td>worker:0</td>.*?<td><a href="/logs/worker-0.log">log</a></td><td></td>', dom)
    assert dom.count(link) == 2 and "TensorBoard (chief:0): " in dom
    # per node: rows written, consumed, buffered with the ring's fill, who waits, the program's report
    assert re.search(r'<td>chief:0</td>.*?<td class="n">2500</td><td class="n">700</td>'
                     r'<td class="n">1800 rows, ring 90&nbsp;%</td><td><span class="busy">data waits on trainer 97&nbsp;%'
                     r'</span></td><td>step 35 · loss 0.3125 · acc nan</td>', dom), dom[-3000:]
    assert re.search(r'<td>worker:0</td>.*?<td class="n">15.0k</td><td class="n">15.0k</td>'
                     r'<td class="n">0 rows, ring 0&nbsp;%</td><td><span class="starved">trainer waits on data 82&nbsp;%'
                     r'</span></td><td></td>', dom), dom[-3000:]
    assert ("feeding: 4000 rows written, 1200 (30 %) consumed, 96.0 kB, partitions 3 written, 1 aborted | "
            "writing 1500 rows/s (36.0 kB/s) | consuming 800 rows/s | 40% of the input read | ETA 12 s") in dom
    # the chart: one point per sample for each series, axes in human units
    points = re.search(r'<polyline id="feedline"[^>]* points="([^"]+)"', dom)
    assert points and len(points.group(1).split()) == 5
    consumed = re.search(r'<polyline id="feedline-consumed"[^>]* points="([^"]+)"', dom)
    assert consumed and len(consumed.group(1).split()) == 5
    assert ">1400 rows/s</text>" in dom and ">700 rows/s</text>" in dom  # the y axis's top and middle
    assert ">-60 s</text>" in dom and ">now</text>" in dom and "— consumed</text>" in dom
    # a large cluster's page: which nodes it shows, a link to the next page; the start phases known
    assert re.search(r'<p id="paging">nodes 0\u20131 of 600 <a href="#" id="next"', dom), dom[-3000:]
    assert ('<tr class="failed"><td>start_program</td><td class="n">30</td><td class="n">400</td>'
            '<td class="n">1200</td><td>worker:511, chief:0</td></tr>') in dom
    assert "<td>first_io</td>" not in dom
    assert "every node had its spec 812 ms after launch; slowest phase: start_program" in dom


def test_quiet_run_prints_no_feed_progress(tmp_path, marker):
    """--quiet: a feed that lasts well over the 5 s progress interval prints
    no progress line (the same feed without --quiet prints some: above)."""
    rows = 150000
    data = tmp_path / marker / "d.csv"
    data.parent.mkdir()
    with open(data, "w") as f:
        f.write("a,b,c\n")
        f.writelines("%d,%.1f,%d\n" % (i, i * 0.5, i % 7) for i in range(rows))
    go = tmp_path / "go"
    go.write_text("")
    start = time.monotonic()
    res = run_tfos(["run", "--quiet", "--workers", "1", "--feed-mb", "1", "--batch-rows", "500",
                    "--partition-rows", "10000", "--log-dir", str(tmp_path / "logs"), "--input", str(data), "--",
                    PY, "-c", SLOW_READER, "20000", str(go)], timeout=120)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - start > 6  # long enough for a progress line
    assert "tfos: feed:" not in res.stderr, res.stderr


# Reads its feed 100 rows at a time, `delay` s per batch (`late_delay` after
# `late_step` batches), reporting each step (ctx.report), then waits for the
# go file.
REPORTING_READER = ("import os, sys, time\n"
                    "from tfos import TFNode\n"
                    "ctx = TFNode.get_context()\n"
                    "feed = TFNode.DataFeed(ctx.mgr)\n"
                    "delay, late_step, late_delay, go = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), "
                    "sys.argv[4]\n"
                    "step = 0\n"
                    "while not feed.should_stop():\n"
                    "    batch = feed.next_batch(100)\n"
                    "    if not batch:\n"
                    "        break\n"
                    "    step += 1\n"
                    "    ctx.report(step=step, loss=1.0 / step)\n"
                    "    time.sleep(delay if step < late_step else late_delay)\n"
                    "print('node %s:%d took %d batches' % (ctx.job_name, ctx.task_index, step), flush=True)\n"
                    "t0 = time.monotonic()\n"
                    "while not os.path.exists(go) and time.monotonic() - t0 < 120:\n"
                    "    time.sleep(0.05)\n")


def test_page_shows_consumed_rows_and_who_waits_against_a_slow_consumer(tmp_path, marker):
    """Issue 18: the status page, /status, /metrics, the console and `tfos
    status` show rows consumed by the trainers (not only written into their
    rings), what is buffered, that the data waits on a slow trainer, and each
    node's ctx.report(); after the run, `tfos status` shows its final state.
    The page is rendered in headless Chromium (and a screenshot taken)."""
    import numpy as np
    # 256-byte rows, 12.8 MB a node: 12 times its 1 MiB ring, so the feeder
    # waits on the trainers for seconds; the trainers slow down for their last
    # 5000 rows (0.1 s a batch), whose last 4000 or so are read after the feed
    # is written: the console's line waits for their agents' first report
    # after that (within a heartbeat), so they must still be reading then
    rows = 100000
    data = tmp_path / marker / "x.npy"
    data.parent.mkdir()
    np.save(data, np.arange(rows * 64, dtype=np.float32).reshape(rows, 64))
    go = tmp_path / "go"
    logs = tmp_path / "logs"
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--feed-mb", "1", "--batch-rows", "100",
                             "--log-dir", str(logs), "--input", str(data), "--", PY, "-c", REPORTING_READER, "0.02",
                             "450", "0.1", str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = status_url(proc)

        def slow_trainers():
            s = json.loads(get(url + "status")[2])
            nodes = s["cluster"]["nodes"] if s["cluster"] else []
            ok = len(nodes) == 2 and all(n["feed"] and n["feed"]["wait_trainer"] >= 0.25 and n["report"]
                                         and 0 < n["feed"]["rows_consumed"] < n["feed"]["rows_written"]
                                         for n in nodes)
            return s if ok else None

        mid = wait_for(slow_trainers, 60, interval=0.2)
        assert mid, get(url + "status")[2]
        for n in mid["cluster"]["nodes"]:
            f = n["feed"]
            assert f["rows_buffered"] == f["rows_written"] - f["rows_consumed"] > 0
            assert f["ring_bytes"] == 1 << 20 and 0 <= f["ring_fill"] <= 1 and f["wait_data"] < 0.5
            assert set(n["report"]) == {"step", "loss"} and n["report"]["step"] >= 1
            assert n["report"]["loss"] == pytest.approx(1.0 / n["report"]["step"], rel=1e-6)
            assert n["report_age_s"] < 5
        metrics = get(url + "metrics")[2]
        for node in ("worker\",index=\"0", "worker\",index=\"1"):
            assert re.search(r'^tfos_node_rows_consumed_total\{job="%s"\} [1-9]\d*$' % node, metrics, re.M), metrics
            assert re.search(r'^tfos_node_rows_buffered\{job="%s"\} \d+$' % node, metrics, re.M), metrics

        dom, err = dump_dom(tmp_path, url)
        assert re.search(r'<span class="busy">data waits on trainer \d+&nbsp;%</span>', dom), dom[-3000:] + err[-2000:]
        assert re.search(r"<td>step \d+ · loss [\d.]+</td>", dom), dom[-3000:]
        assert '<polyline id="feedline-consumed"' in dom
        shot = tmp_path / "page.png"
        subprocess.run([chromium()] + chromium_flags(tmp_path) + ["--window-size=1400,700", "--screenshot=%s" % shot,
                                                                  url], capture_output=True, timeout=90)
        assert shot.exists() and shot.stat().st_size > 10000
        if os.environ.get("TFOS_TEST_SHOTS"):  # where a person looks at it
            shutil.copy(shot, os.path.join(os.environ["TFOS_TEST_SHOTS"], "consumed-rows.png"))

        # the feed is written long before the trainers have read it: the page
        # says so instead of "done", and the console says how far they are
        def written_not_read():
            s = json.loads(get(url + "status")[2])
            f = s["feed"]
            return s if f["state"] == "done" and f["rows_consumed"] < f["rows"] else None

        late = wait_for(written_not_read, 60, interval=0.2)
        assert late, get(url + "status")[2]
        dom, err = dump_dom(tmp_path, url)
        assert re.search(r'<p id="feed">all written, the trainers are reading: 100.0k of 100.0k rows written, [\d.]+k? \(\d+ %\) '
                         r'consumed', dom), re.findall(r'<p id="feed">[^<]*', dom) or dom[-3000:] + err[-2000:]

        def all_read():
            s = json.loads(get(url + "status")[2])
            return s if s["feed"]["rows_consumed"] == rows else None

        assert wait_for(all_read, 60, interval=0.2), get(url + "status")[2]
        dom = dump_dom(tmp_path, url)[0]
        assert "done: 100.0k of 100.0k rows written, 100.0k (100 %) consumed" in dom, re.findall(r'<p id="feed">[^<]*', dom)
        go.write_text("go")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert "node worker:0 took 500 batches" in out and "node worker:1 took 500 batches" in out
        assert re.search(r"tfos: feed: all written, 100000 rows written; the trainers have consumed \d+ \(\d+%\)", err), err

        st = subprocess.run([tfos_cli(), "status", str(logs)], capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        assert "the run has ended; its final state, from %s/status.json:" % logs in st.stdout
        assert re.search(r"^cluster done, attempt 1 of 4", st.stdout, re.M), st.stdout
        for i in (0, 1):
            assert re.search(r"^worker:%d\s+%d\s+127\.0\.0\.1:\d+\s+exited\s+\d+\s+0\s+50000\s+50000\s+step 500 loss 0\.002$"
                             % (i, i), st.stdout, re.M), st.stdout
        assert re.search(r"^feed done: 100000 rows written, 100000 consumed, ", st.stdout, re.M), st.stdout
        final = json.loads(subprocess.run([tfos_cli(), "status", "--json", str(logs)], capture_output=True, text=True,
                                          timeout=30).stdout)
        assert final["cluster"]["state"] == "done" and final["feed"]["rows_consumed"] == rows
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Sleeps `wait` s, reads its whole feed at once, then sleeps `wait` s more.
LATE_FAST_READER = ("import sys, time\n"
                    "from tfos import TFNode\n"
                    "ctx = TFNode.get_context()\n"
                    "wait = float(sys.argv[1])\n"
                    "time.sleep(wait)\n"
                    "feed = TFNode.DataFeed(ctx.mgr)\n"
                    "rows = 0\n"
                    "while not feed.should_stop():\n"
                    "    rows += len(feed.next_batch(1000))\n"
                    "print('node %s:%d took %d rows' % (ctx.job_name, ctx.task_index, rows), flush=True)\n"
                    "time.sleep(wait)\n")


def test_console_does_not_report_a_count_from_before_the_feed_ended(tmp_path, marker):
    """A trainer that starts reading late and then reads its whole feed in a
    moment: the feed ends right after the last heartbeat said it had taken
    nothing. The console's "the trainers have consumed" line waits for the
    agents' first count after the feed's end (which has every row taken), so
    it is not printed; it used to say "consumed 0 (0%)" of a feed already
    read."""
    import numpy as np
    rows = 20000  # 5 MB of 256-byte rows: 5 times the 1 MiB ring
    data = tmp_path / marker / "x.npy"
    data.parent.mkdir()
    np.save(data, np.arange(rows * 64, dtype=np.float32).reshape(rows, 64))
    res = run_tfos(["run", "--workers", "1", "--feed-mb", "1", "--batch-rows", "100", "--log-dir",
                    str(tmp_path / "logs"), "--input", str(data), "--", PY, "-c", LATE_FAST_READER, "2.5"], timeout=120)
    assert res.returncode == 0, res.stderr
    assert "node worker:0 took %d rows" % rows in res.stdout, res.stdout
    assert "tfos: fed %d rows" % rows in res.stderr, res.stderr
    assert "the trainers have consumed" not in res.stderr, res.stderr


def test_page_shows_a_trainer_waiting_on_data(tmp_path, marker):
    """A trainer asleep on an empty feed (its producers are slow, here absent)
    shows as waiting on data."""
    reader = ("import os, sys\n"
              "from tfos import _tfos\n"
              "ring = _tfos.Ring(int(os.environ['TFOS_FEED_FDS'].split(',')[0]), _tfos.ROLE_CONSUMER)\n"
              "try:\n"
              "    ring.read(8000)\n"
              "except TimeoutError:\n"
              "    print('no data in 8 s', flush=True)\n")
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--",
                             PY, "-c", reader, marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TFOS_FEED_PRODUCERS="1"))
    try:
        url = status_url(proc)

        def starved():
            s = json.loads(get(url + "status")[2])
            n = s["cluster"]["nodes"][0] if s["cluster"] else None
            return n if n and n["feed"] and n["feed"]["wait_data"] >= 0.5 else None

        node = wait_for(starved, 30, interval=0.2)
        assert node, get(url + "status")[2]
        assert node["feed"]["wait_trainer"] == 0 and node["feed"]["rows_consumed"] == 0 and node["report"] is None
        dom, err = dump_dom(tmp_path, url)
        assert re.search(r'<span class="starved">trainer waits on data \d+&nbsp;%</span>', dom), dom[-3000:] + err[-2000:]
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "no data in 8 s" in out, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


REPORTER = ("import os\n"
            "from tfos import TFNode\n"
            "assert 'TF_CONFIG' not in os.environ and os.environ['WORLD_SIZE'] == '2', dict(os.environ)\n"
            "TFNode.get_context().report(step=1, loss=0.5)\n")


def test_start_telemetry_of_a_two_node_run(tmp_path, marker):
    """Each node's start, stamp by stamp, and the phases' distribution: in
    the final status, `tfos status` and the run's last lines, which name the
    slowest phase and its slowest nodes."""
    logs = tmp_path / "logs"
    r = run_tfos(["run", "--workers", "2", "--framework", "torch", "--max-restarts", "0", "--log-dir", str(logs),
                  "--", PY, "-c", REPORTER, marker], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    c = json.loads((logs / "status.json").read_text())["cluster"]
    stamps = ["agent", "connected", "registered", "spec", "program", "first_io"]
    for n in c["nodes"]:
        st = n["start"]
        assert list(st) == stamps, st
        values = [st[k] for k in stamps]
        assert all(isinstance(v, int) and v >= 0 for v in values), st  # ctx.report made first_io known
        assert values == sorted(values), st
        assert st["spec"] == c["start"]["spec_ms"]
    phases = c["start"]["phases"]
    assert [p["phase"] for p in phases] == ["spawn", "connect", "register", "wait_cluster", "start_program",
                                            "first_io"]
    for p in phases:
        assert p["nodes"] == 2 and 0 <= p["p50_ms"] <= p["p99_ms"] <= p["max_ms"], p
        assert sorted(p["slowest"]) == ["worker:0", "worker:1"]
    slowest = c["start"]["slowest_phase"]
    assert slowest in {p["phase"] for p in phases} and slowest != "wait_cluster"
    worst = max((p for p in phases if p["phase"] != "wait_cluster"), key=lambda p: p["max_ms"])
    assert worst["max_ms"] == next(p for p in phases if p["phase"] == slowest)["max_ms"]
    line = next(ln for ln in r.stderr.splitlines() if "start: spec sent" in ln)
    assert "slowest phase: %s (%d ms at %s" % (slowest, worst["max_ms"], worst["slowest"][0]) in line, line
    out = run_tfos(["status", str(logs)], timeout=30)
    assert out.returncode == 0, out.stderr
    assert "slowest start phase: %s" % slowest in out.stdout
    assert re.search(r"^  start_program +\d+ +\d+ +\d+ +worker:\d, worker:\d$", out.stdout, re.M), out.stdout
