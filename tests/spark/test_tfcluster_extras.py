"""TFParallel, TensorBoard and Spark Streaming on a real Spark standalone
cluster (master + 2 workers, 1 core each)."""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from pyspark import cloudpickle

from tfos import TFCluster, TFParallel
from tfos.TFCluster import TFClusterError

from tfoshelpers import tfos_processes, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---- TensorBoard processes ------------------------------------------------------

def tensorboard_processes(marker, port=None):
    """TensorBoard servers (on ``port``) among this cluster's processes
    (tfoshelpers: agents carrying the cluster's marker and their descendants),
    or, with ``marker`` None, anywhere on the host (orphans included)."""
    if marker is not None:
        return [(pid, cmd) for pid, cmd in tfos_processes(marker)
                if "tensorboard.main" in cmd.split() and (port is None or str(port) in cmd.split())]
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:].split()[0] in (b"Z", b"X"):
            continue
        if "tensorboard.main" in argv and (port is None or str(port) in argv):
            found.append((int(d), " ".join(argv)))
    return found


# ---- functions run on the executors ----------------------------------------------

def whoami(args, ctx):
    """TFParallel: runs in the Spark task itself."""
    import os
    from tfos.TFSparkNode import executor_jvm_pid
    return {"executor_id": ctx.executor_id, "worker_num": ctx.worker_num, "task_index": ctx.task_index,
            "job_name": ctx.job_name, "num_workers": ctx.num_workers, "working_dir": ctx.working_dir,
            "cwd": os.getcwd(), "jvm": executor_jvm_pid(), "pid": os.getpid(), "args": args}


def fail_on_one(args, ctx):
    if ctx.executor_id == 1:
        raise ValueError("tfparallel boom on instance %d" % ctx.executor_id)
    return ctx.executor_id


def wait_for_stop_file(args, ctx):
    """Keep the node (and its TensorBoard) up until the test says stop."""
    import os
    import time
    deadline = time.monotonic() + args["max_s"]
    while time.monotonic() < deadline and not os.path.exists(args["stop"]):
        time.sleep(0.2)


def _write_json(path, obj):
    import json
    import os
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def read_stream_until_all_seen(args, ctx):
    """Streaming: read rows one at a time (1 s waits) and publish them; stop
    (terminate the feed and return) once the nodes together have seen
    args['expect'] rows."""
    import json
    import os
    import time
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, True, timeout=1.0)
    out = args["out"]
    mine = os.path.join(out, "stream-%d.json" % ctx.executor_id)
    values = []

    def seen_by_all():
        total = 0
        for name in os.listdir(out):
            if name.startswith("stream-") and name.endswith(".json"):
                try:
                    with open(os.path.join(out, name)) as f:
                        total += len(json.load(f)["values"])
                except (OSError, ValueError):
                    pass
        return total

    _write_json(mine, {"values": values, "terminated": False})
    deadline = time.monotonic() + args["max_s"]
    while time.monotonic() < deadline and not feed.should_stop():
        try:
            batch = feed.next_batch(1)
        except TimeoutError:
            batch = []
        if batch:
            values.extend(int(r[0]) for r in batch)
            _write_json(mine, {"values": values, "terminated": False})
        if seen_by_all() >= args["expect"]:
            break
    if ctx.executor_id == args.get("linger_id"):
        # one node ends a few seconds after the other, still reading: (empty)
        # micro-batches keep coming meanwhile, and may land on the finished
        # node's executor
        until = time.monotonic() + args["linger_s"]
        while time.monotonic() < until and not feed.should_stop():
            try:
                values.extend(int(r[0]) for r in feed.next_batch(1))
            except TimeoutError:
                pass
    feed.terminate()
    _write_json(mine, {"values": values, "terminated": True})


def terminate_then_linger(args, ctx):
    """Streaming: take one row, terminate() the feed, and stay alive (as if
    saving a model) until the test releases the node (bounded)."""
    import json
    import os
    import time
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, True, timeout=1.0)
    got = None
    deadline = time.monotonic() + args["max_s"]
    while time.monotonic() < deadline and not feed.should_stop():
        try:
            batch = feed.next_batch(1)
        except TimeoutError:
            continue
        if batch:
            got = int(batch[0][0])
            feed.terminate()
            break
    with open(os.path.join(args["out"], "node-%d.json" % ctx.executor_id), "w") as f:
        json.dump({"row": got, "terminated": got is not None, "t": time.time()}, f)
    while time.monotonic() < deadline and not os.path.exists(args["release"]):
        time.sleep(0.2)


def fail_on_first_row(args, ctx):
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, True)
    feed.next_batch(1)
    raise ValueError("bad streamed record on executor %d" % ctx.executor_id)


# ---- TFParallel -----------------------------------------------------------------------

def test_tfparallel_barrier_one_call_per_executor(spark):
    sc = spark.sparkContext
    got = TFParallel.run(sc, whoami, {"k": "v"}, num_executors=2, use_barrier=True)
    assert [g["executor_id"] for g in got] == [0, 1]
    for i, g in enumerate(got):
        assert g["worker_num"] == i and g["task_index"] == i
        assert g["job_name"] == "default" and g["num_workers"] == 2
        assert g["args"] == {"k": "v"}
        assert g["working_dir"] == g["cwd"]
    # a barrier stage gangs one task per slot: two executors (1 core each)
    assert got[0]["jvm"] and got[1]["jvm"] and got[0]["jvm"] != got[1]["jvm"], got
    assert got[0]["cwd"] != got[1]["cwd"], got


def test_tfparallel_without_barrier(spark):
    sc = spark.sparkContext
    got = TFParallel.run(sc, whoami, [1, 2], num_executors=2, use_barrier=False)
    assert [(g["executor_id"], g["job_name"], g["num_workers"], g["args"]) for g in got] == \
        [(0, "default", 2, [1, 2]), (1, "default", 2, [1, 2])]
    assert all(g["jvm"] for g in got)


@pytest.mark.parametrize("use_barrier", [True, False])
def test_tfparallel_exception_carries_the_traceback(spark, use_barrier):
    sc = spark.sparkContext
    with pytest.raises(Exception) as err:
        TFParallel.run(sc, fail_on_one, None, num_executors=2, use_barrier=use_barrier)
    msg = str(err.value)
    assert "Traceback (most recent call last)" in msg, msg[-3000:]
    assert "ValueError: tfparallel boom on instance 1" in msg, msg[-3000:]
    assert "fail_on_one" in msg, msg[-3000:]
    # the context is usable afterwards
    assert TFParallel.run(sc, whoami, None, num_executors=2)[1]["executor_id"] == 1


# ---- TensorBoard ------------------------------------------------------------------------

def _http_status(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def test_tensorboard_url_serves_until_shutdown(spark, spark_cluster, tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed in this Python (pip install tensorboard)")
    sc = spark.sparkContext
    log_dir = tmp_path / "tb-logs"
    stop = tmp_path / "stop"
    cluster = TFCluster.run(sc, wait_for_stop_file, {"stop": str(stop), "max_s": 240}, num_executors=2, num_ps=0,
                            tensorboard=True, log_dir=str(log_dir), input_mode=TFCluster.InputMode.TENSORFLOW,
                            reservation_timeout=60)
    try:
        url = cluster.tensorboard_url()
        assert url and url.startswith("http://127.0.0.1:"), url
        port = int(url.rsplit(":", 1)[1])
        # TensorBoard takes a few seconds (more on a busy machine) to serve
        status = wait_for(lambda: _http_status(url) or cluster.status()["state"] != "running", 150, interval=0.5)
        assert status == 200, (url, status, cluster.status())
        procs = tensorboard_processes(spark_cluster.tmp_dir, port)
        assert len(procs) == 1, procs
        # on worker 0 (no chief), serving the log_dir it was given
        assert "--logdir %s " % log_dir in procs[0][1] + " ", procs
        assert log_dir.is_dir()
        node0 = [n for n in cluster.status()["nodes"] if n["executor_id"] == 0][0]
        assert node0["tensorboard_port"] == port
    except BaseException:
        stop.touch()
        try:
            cluster.shutdown(timeout=60)
        except TFClusterError:
            pass
        raise
    stop.touch()
    cluster.shutdown(timeout=120)
    assert _http_status(url, timeout=2.0) is None  # nothing listens there any more
    # none on that port, whoever its parent is now (an orphan has lost the
    # cluster's marker with its ancestors)
    assert wait_for(lambda: not tensorboard_processes(None, port), 15), tensorboard_processes(None, port)
    # still answers after shutdown (TFoS computed it once)
    assert cluster.tensorboard_url() == url


# ---- Spark Streaming ------------------------------------------------------------------

def _shutdown_in_thread(cluster, ssc, timeout):
    """cluster.shutdown(ssc) on another thread; returns (thread, result box)."""
    box = {}

    def run():
        try:
            cluster.shutdown(ssc, timeout=timeout)
            box["ok"] = True
        except BaseException as exc:  # noqa: B902 -- handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, name="test-shutdown", daemon=True)
    t.start()
    return t, box


def _ssc_state(ssc):
    return str(ssc._jssc.getState().toString())


def _failed_jobs(sc, before):
    """Jobs (not in a job group: streaming micro-batches) that failed, among
    those not in ``before``."""
    tracker = sc.statusTracker()
    failed = []
    for job_id in tracker.getJobIdsForGroup(None):
        info = tracker.getJobInfo(job_id)
        if job_id not in before and info is not None and str(info.status) == "FAILED":
            failed.append(job_id)
    return failed


def test_streaming_every_row_delivered_then_shutdown_returns(spark, tmp_path):
    from pyspark.streaming import StreamingContext
    sc = spark.sparkContext
    rdds = [sc.parallelize([(i,) for i in range(k * 100, (k + 1) * 100)], 2) for k in range(3)]
    ssc = StreamingContext(sc, 1)
    stream = ssc.queueStream(rdds)
    args = {"out": str(tmp_path), "expect": 300, "max_s": 150, "linger_id": 1, "linger_s": 4}
    cluster = TFCluster.run(sc, read_stream_until_all_seen, args, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    assert cluster.tensorboard_url() is None  # no tensorboard=True
    try:
        cluster.train(stream, feed_timeout=120)
        ssc.start()
        t, box = _shutdown_in_thread(cluster, ssc, 120)

        def node0_done():
            try:
                return json.load(open(tmp_path / "stream-0.json"))["terminated"]
            except (OSError, ValueError):
                return False

        assert wait_for(node0_done, 150, interval=0.2), "worker:0 never saw every row"
        time.sleep(1.5)  # worker:0's program has ended and the coordinator knows
        jobs_then = set(sc.statusTracker().getJobIdsForGroup(None))
        t.join(180)
        assert not t.is_alive(), "cluster.shutdown(ssc) did not return within 180 s"
        assert box.get("ok"), box
        assert _ssc_state(ssc) == "STOPPED"  # shutdown(ssc) stopped it
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    # no micro-batch failed once a node had finished: the (empty) batches
    # that came after were not fed to an executor whose node is gone
    assert _failed_jobs(sc, jobs_then) == []
    seen = [json.load(open(tmp_path / ("stream-%d.json" % i))) for i in range(2)]
    assert all(s["terminated"] for s in seen), seen
    values = sorted(v for s in seen for v in s["values"])
    assert values == list(range(300))  # every row, exactly once


def test_streaming_terminate_stops_the_streaming_context(spark, tmp_path):
    """A node's terminate() ends the streaming context while the programs are
    still running (batches keep coming: a default RDD after the queue)."""
    from pyspark.streaming import StreamingContext
    sc = spark.sparkContext
    ssc = StreamingContext(sc, 1)
    stream = ssc.queueStream([sc.parallelize([(i,) for i in range(20)], 2)],
                             default=sc.parallelize([(-1,)] * 10, 2))
    release = tmp_path / "release"
    cluster = TFCluster.run(sc, terminate_then_linger, {"out": str(tmp_path), "release": str(release), "max_s": 150},
                            num_executors=2, num_ps=0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    try:
        cluster.train(stream, feed_timeout=120)
        ssc.start()
        t, box = _shutdown_in_thread(cluster, ssc, 150)
        # the streaming context stops although both programs are still alive
        stopped = wait_for(lambda: _ssc_state(ssc) == "STOPPED", 90, interval=0.5)
        assert stopped, "the streaming context was not stopped after terminate() (%s)" % box
        assert not release.exists()
        assert t.is_alive() and not box, box  # shutdown still waits for the programs
        running = [n for n in cluster.status()["nodes"] if n["state"] == "running"]
        assert running, cluster.status()
        release.touch()
        t.join(120)
        assert not t.is_alive(), "cluster.shutdown(ssc) did not return after the programs ended"
    finally:
        release.touch()
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert box.get("ok"), box
    nodes = [json.load(open(tmp_path / ("node-%d.json" % i))) for i in range(2)]
    assert any(n["terminated"] for n in nodes), nodes


def test_streaming_failure_in_map_fun_raises_from_shutdown(spark, tmp_path):
    from pyspark.streaming import StreamingContext
    sc = spark.sparkContext
    ssc = StreamingContext(sc, 1)
    stream = ssc.queueStream([sc.parallelize([(i,) for i in range(40)], 2)] * 3)
    cluster = TFCluster.run(sc, fail_on_first_row, {}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    try:
        cluster.train(stream, feed_timeout=120)
        ssc.start()
        t, box = _shutdown_in_thread(cluster, ssc, 120)
        t.join(60)  # the failure stops the stream at once: no graceful wait, no feed timeout
        assert not t.is_alive(), "cluster.shutdown(ssc) did not return within 60 s"
        err = box.get("error")
        assert isinstance(err, TFClusterError), box
        assert "ValueError: bad streamed record" in str(err), str(err)
        assert _ssc_state(ssc) == "STOPPED"  # shutdown(ssc) stopped it
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)

