"""The status page on Spark's driver (TFCluster.status_url()): /status,
/metrics and the live page in headless Chromium while train() feeds an RDD
to a cluster of two workers; gone after shutdown()."""
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from pyspark import cloudpickle

from tfos import TFCluster, TFNode

from tfoshelpers import wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])

METRIC_LINE = r"[a-z_]+(\{[^}]*\})? -?\d+(\.\d+)?"


def slow_reader(args, ctx):
    """Read the feed slowly, to its end."""
    feed = TFNode.DataFeed(ctx.mgr, True)
    step = 0
    while not feed.should_stop():
        if feed.next_batch(10):
            step += 1
            ctx.report(step=step, loss=1.0 / step)
        time.sleep(args["slow"])


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    return browser


def dump_dom(tmp_path, url):
    """The page's DOM once its script has run (headless Chromium, as in
    tests/python/test_status.py)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=%s" % (tmp_path / "profile"), "--virtual-time-budget=3000"]
    r = subprocess.run([chromium()] + flags + ["--dump-dom", url], capture_output=True, text=True, timeout=90)
    return r.stdout, r.stderr


def test_status_page_while_train_feeds(spark, tmp_path, caplog):
    sc = spark.sparkContext
    caplog.set_level("INFO", logger="tfos")
    cluster = TFCluster.run(sc, slow_reader, {"slow": 0.05}, 2, input_mode=TFCluster.InputMode.SPARK,
                            reservation_timeout=60)
    trained, errors = threading.Event(), []
    try:
        url = cluster.status_url()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), url
        assert any("status page at %s" % url in r.getMessage() for r in caplog.records)

        def train():
            try:
                cluster.train(sc.parallelize(range(2000), 8))  # 250 rows a partition: ~1.25 s each
            except Exception as exc:
                errors.append(exc)
            finally:
                trained.set()

        feeder = threading.Thread(target=train, daemon=True)
        feeder.start()

        def feeding():
            s = json.loads(get(url + "status")[2])
            f = s["feed"]
            return s if f and f["state"] == "feeding" and f["rows"] > 0 else None

        s = wait_for(feeding, 60)
        assert s, json.loads(get(url + "status")[2])
        assert not trained.is_set()
        assert s["attempt"] == 1 and s["max_restarts"] == 3 and s["history"] == []
        assert s["log_dir"] is None and s["node_log_dir"] == "tfos-logs"
        assert s["feed"]["source"] == "spark" and s["feed"]["partitions_expected"] == 8
        assert 0 < s["feed"]["partitions_completed"] < 8 and s["feed"]["rows"] % 250 == 0
        nodes = s["cluster"]["nodes"]
        assert s["cluster"]["state"] == "running"
        assert sorted((n["job"], n["index"]) for n in nodes) == [("worker", 0), ("worker", 1)]
        assert all(n["state"] == "running" and n["host"] and n["pid"] > 0 for n in nodes), nodes

        status, ctype, text = get(url + "metrics")
        assert status == 200 and ctype.startswith("text/plain")
        lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        assert lines and all(re.fullmatch(METRIC_LINE, ln) for ln in lines), text
        assert "tfos_attempt 1" in lines
        assert sum('tfos_node_up{job="worker"' in ln and ln.endswith(" 1") for ln in lines) == 2
        assert re.search(r"^tfos_feed_rows_total [1-9]\d*$", text, re.M)
        assert "tfos_feed_partitions_expected 8" in lines

        hist = json.loads(get(url + "feed/history")[2])
        assert hist["samples"] and hist["samples"][-1]["rows"] > 0
        assert get(url)[1].startswith("text/html")
        with pytest.raises(urllib.error.HTTPError) as e:
            get(url + "logs/worker-0.log")  # the logs are on the executors
        assert e.value.code == 404

        dom, err = dump_dom(tmp_path, url)
        assert "attempt 1 of 4" in dom, dom[-2000:] + err[-2000:]
        rows = re.findall(r'<tr class="running"><td>(worker:\d)</td><td>\d</td><td>[^<]+:\d+</td>'
                          r'<td>running</td><td>(\d+)</td>', dom)
        assert sorted(r[0] for r in rows) == ["worker:0", "worker:1"], dom[-3000:]
        assert all(int(r[1]) > 0 for r in rows)
        assert '<span class="remote"' in dom and ">tfos-logs/worker-1.log</span>" in dom
        assert '<td><a href="/logs/' not in dom  # no log links: the logs are on the executors
        # the feed may have finished by the time the browser rendered it
        feed_line = re.search(r'<p id="feed">([^<]*)</p>', dom)
        assert feed_line and re.match(r"(feeding|done|all written, the trainers are reading): \d+ rows written, \d+ "
                                      r"\(\d+ %\) consumed, partitions \d of 8 written", feed_line.group(1)), \
            feed_line.group(1) if feed_line else dom[:3000]
        assert '<polyline id="feedline"' in dom

        assert trained.wait(120) and not errors, errors
        done = json.loads(get(url + "status")[2])["feed"]
        assert done["state"] == "done" and done["rows"] == 2000 and done["partitions_completed"] == 8

        # what map_fun consumed and reported, per node, from its agent's heartbeats
        # (the feed's total is the meter's, sampled once a second: it
        # reaches the nodes' sum up to a second after them)
        def all_consumed():
            s = json.loads(get(url + "status")[2])
            nodes = s["cluster"]["nodes"]
            return s if (sum(n["feed"]["rows_consumed"] for n in nodes if n["feed"]) == 2000
                         and s["feed"]["rows_consumed"] == 2000) else None

        s = wait_for(all_consumed, 10)
        assert s, get(url + "status")[2]
        for n in s["cluster"]["nodes"]:
            assert n["feed"]["rows_written"] == n["feed"]["rows_consumed"] > 0 and n["feed"]["rows_buffered"] == 0
            assert n["report"]["step"] == n["feed"]["rows_consumed"] // 10
        assert re.search(r'^tfos_node_rows_consumed_total\{job="worker",index="0"\} [1-9]\d*$',
                         get(url + "metrics")[2], re.M)
    finally:
        cluster.shutdown()
    with pytest.raises(OSError):
        get(url + "status")
