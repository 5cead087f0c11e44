"""tfos.spark.Cluster, the API that needs only a SparkSession, on a classic
session and on a real Spark Connect server (SparkConnectServer started by
spark-submit on this test cluster, on 127.0.0.1): every test runs with both.
The Connect server is an application that holds both workers' cores, so the
classic session of this module is stopped before it starts."""
import contextlib
import os
import signal
import subprocess
import sys

import pytest
from pyspark import cloudpickle

from sparkcluster import restore_env
from tfoshelpers import read_line_starting, tfos_processes, wait_for, wait_no_tfos_processes

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "digits"))

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the node functions below travel by value

CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")


@pytest.fixture(scope="module", params=["classic", "connect"])
def session(request, spark_cluster):
    """(kind, SparkSession, Connect server or None)."""
    if request.param == "classic":
        spark = spark_cluster.spark_session("tfos-test-cluster-api")
        try:
            yield "classic", spark, None
        finally:
            spark.stop()
        return
    server = spark_cluster.connect_server("tfos-test-connect")
    saved = {k: os.environ.get(k) for k in CONNECT_ENV}
    try:
        spark = server.session()
        try:
            yield "connect", spark, server
        finally:
            spark.stop()
    finally:
        # a Connect session marks the process as a Connect client: later
        # modules' classic sessions must not be
        restore_env(saved)
        server.stop()


def double_fun(args, ctx):
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        batch = feed.next_batch(100)
        if batch:
            feed.batch_results([(r[0] * 2, "n%d" % r[0]) for r in batch])  # rows: (id, k)


def failing_fun(args, ctx):
    raise ValueError("no model for %s" % args)


def fail_after_a_batch(args, ctx):
    """Reads a batch, then raises: the same ValueError at the same place on
    every attempt (a bug in the program, not a lost node)."""
    from tfos import TFNode
    TFNode.DataFeed(ctx.mgr).next_batch(10)
    raise ValueError("bad batch on %s" % ctx.job_name)


def predict_then_fail(args, ctx):
    """Answers the first batch, then dies: the other rows never get results."""
    from tfos import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    batch = feed.next_batch(50)
    feed.batch_results([r[0] for r in batch])
    raise RuntimeError("the model server crashed on %s" % ctx.job_name)


def connect_covers_it(session):
    """Cluster's code is the same on both sessions: these tests run over
    Connect only, to keep the suite's time (the classic session keeps the
    session and predict-order tests; TFCluster's restart tests cover a
    killed node on classic sessions)."""
    if session[0] != "connect":
        pytest.skip("the same Cluster code runs in this test's Connect variant (suite time)")


def test_session_kind(session):
    kind, spark, _ = session
    is_connect = type(spark).__module__.startswith("pyspark.sql.connect")
    assert is_connect == (kind == "connect")


def test_predict_returns_every_row_in_order(session):
    from tfos.spark import Cluster
    _, spark, _ = session
    df = spark.range(0, 5000, 1, 3).selectExpr("id", "id % 7 AS k")
    with Cluster(spark, double_fun, None, 2) as cluster:
        out = cluster.predict(df, "twice long, name string").collect()
    assert [tuple(r) for r in out] == [(i, i % 7, 2 * i, "n%d" % i) for i in range(5000)]


def test_exception_in_main_fun_comes_back(session):
    connect_covers_it(session)
    from tfos.spark import Cluster, ClusterError
    _, spark, _ = session
    df = spark.range(0, 1000, 1, 2)
    with pytest.raises(ClusterError) as err:
        with Cluster(spark, failing_fun, "digits-v7", 2) as cluster:
            cluster.train(df)
    text = str(err.value)
    assert "failed: exit code 1" in text and "worker:" in text, text
    assert "Traceback (most recent call last)" in text, text
    assert "ValueError: no model for digits-v7" in text, text
    assert wait_no_tfos_processes(30) == []


def test_the_same_exception_again_is_not_retried(session):
    """The coordinator's status carries the failure record (node, exception,
    where): the client's restart policy sees the same ValueError at the same
    place on attempts 1 and 2 and stops there, not after the whole budget
    (issue 35: before, over Connect, every attempt ran)."""
    connect_covers_it(session)
    from tfos.spark import Cluster, ClusterError
    _, spark, _ = session
    df = spark.range(0, 1000, 1, 2)
    with pytest.raises(ClusterError) as err:
        with Cluster(spark, fail_after_a_batch, None, 2, max_restarts=3) as cluster:
            cluster.train(df)
    text = str(err.value)
    assert "ValueError: bad batch on worker" in text, text
    assert "the failure is deterministic" in text, text
    assert "attempts (1 restarts)" in text, text
    assert wait_no_tfos_processes(30) == []


def test_node_failing_during_predict_fails_the_job_with_its_traceback(session):
    """The predict tasks stop waiting for results once the cluster failed
    (they watch the coordinator), rather than for feed_timeout."""
    connect_covers_it(session)
    from tfos.spark import Cluster
    _, spark, _ = session
    df = spark.range(0, 4000, 1, 2)
    with pytest.raises(Exception) as err:
        with Cluster(spark, predict_then_fail, None, 2, max_restarts=0) as cluster:
            cluster.predict(df, "y long", feed_timeout=600).collect()
    text = str(err.value)
    assert "RuntimeError: the model server crashed on worker" in text, text[:3000]
    assert wait_no_tfos_processes(30) == []


def test_digits_train_and_predict(session, tmp_path, capsys):
    connect_covers_it(session)
    import digits_data
    import spark_connect_digits
    _, spark, _ = session
    rows = spark_connect_digits.main(["--model-dir", str(tmp_path / "model"), "--num-nodes", "2"], spark=spark)
    x_test = digits_data.load_split(digits_data.DEFAULT_SEED)[2]
    assert sorted(r["id"] for r in rows) == list(range(len(x_test)))
    accuracy = sum(r["label"] == r["prediction"] for r in rows) / len(rows)
    assert accuracy >= 0.90, accuracy
    assert "test accuracy: %.4f" % accuracy in capsys.readouterr().out
    assert wait_no_tfos_processes(30) == []


def test_tensorboard_url(session, spark_cluster, tmp_path):
    connect_covers_it(session)
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed in this Python (pip install tensorboard)")
    from test_tfcluster_extras import _http_status, tensorboard_processes
    from tfos.spark import Cluster
    _, spark, _ = session
    log_dir = tmp_path / "tb-logs"
    with Cluster(spark, double_fun, None, 2, tensorboard=True, tensorboard_log_dir=str(log_dir)) as cluster:
        url = cluster.tensorboard_url()
        assert url and url.startswith("http://127.0.0.1:"), url
        port = int(url.rsplit(":", 1)[1])
        # TensorBoard takes a few seconds (more on a busy machine) to serve
        assert wait_for(lambda: _http_status(url) == 200, 150, interval=0.5), url
        procs = tensorboard_processes(spark_cluster.tmp_dir, port)
        assert len(procs) == 1 and "--logdir %s " % log_dir in procs[0][1] + " ", procs
    assert cluster.tensorboard_url() == url
    assert wait_for(lambda: not tensorboard_processes(None, port), 15), tensorboard_processes(None, port)


@pytest.mark.parametrize("how", ["sigkill", "session-ends"])
def test_client_gone_leaves_nothing(session, how):
    """A Connect client SIGKILLed, or one whose session ends without
    shutting its cluster down: the lease runs out and nothing stays."""
    kind, _, server = session
    if kind != "connect":
        pytest.skip("a classic client owns its driver: tests/spark/test_driver_killed.py kills one")
    client = subprocess.Popen([sys.executable, os.path.join(HERE, "progs", "connect_client.py"), server.url, "8",
                               how], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    try:
        line = read_line_starting(client, "FORMED", 120)
        assert line, "the client did not form its cluster"
        cluster_id, agents = line.split()[1], [int(p) for p in line.split()[2:]]
        assert all(os.path.exists("/proc/%d" % p) for p in agents)
        assert any(cluster_id in cmd for _, cmd in tfos_processes()), "no coordinator for %s" % cluster_id
        if how == "session-ends":
            assert client.wait(60) == 0  # spark.stop(), then the process ends: no shutdown()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(client.pid, signal.SIGKILL)
        client.wait(30)
    # the lease (8 s) runs out, the coordinator stops the nodes, then lingers 8 s
    left = wait_no_tfos_processes(60)
    assert left == [], left
    assert wait_for(lambda: all(not os.path.exists("/proc/%d" % p) for p in agents), 5)


def test_killed_node_restarts_and_resumes(session, tmp_path, mlflow_server):
    """kill -9 of a node's program mid-feed: the cluster is formed again
    (attempt 2, a new coordinator), the feed resumes where the surviving
    checkpoint stands, and the model state has every row once per epoch.
    With mlflow= (issue 39) the job is one MLflow run: both attempts in it,
    the kill in its restart history, each rank's reports, FINISHED."""
    connect_covers_it(session)
    import collections
    import json
    from test_tfcluster import checkpointing_reader
    from tfos.spark import Cluster
    _, spark, _ = session
    n, epochs = 3000, 2
    df = spark.range(0, n, 1, 15)
    out = tmp_path / "out"
    out.mkdir()
    args = {"out": str(out), "every": 2, "die_after": 5, "slow": 0.01}
    # failure_grace: the survivor's SIGTERM waits until its checkpoint and feed position are both written
    experiment = "session-" + os.path.basename(str(tmp_path))
    with Cluster(spark, checkpointing_reader, args, 2, max_restarts=2, checkpoint_dir=str(tmp_path / "ckpt"),
                 reservation_timeout=60, failure_grace=10, mlflow=mlflow_server.url,
                 mlflow_experiment=experiment) as cluster:
        cluster.train(df, epochs=epochs, feed_timeout=300)
        attempt, refed = cluster.attempt, cluster.partitions_refed
    assert attempt == 2
    counts = collections.Counter()
    for p in out.glob("final-2-*.json"):
        counts.update(json.loads(p.read_text()))
    wrong = {i: c for i, c in counts.items() if c != epochs}
    missing = [i for i in range(n) if i not in counts]
    assert (out / "lost-worker-1.txt").exists()
    assert not missing and not wrong, (missing[:5], list(wrong.items())[:5], refed)
    client = pytest.importorskip("mlflow.tracking").MlflowClient(mlflow_server.url)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1  # both attempts in one run
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["tfos.attempts"] == "2" and run.data.tags["tfos.attempt.1.cause"] == "signal"
    assert "-> restarted" in run.data.tags["tfos.restart_history"]
    assert "rank0/rows" in run.data.metrics and "rank1/rows" in run.data.metrics
    assert run.data.metrics["tfos.feed.rows"] > 0
    assert wait_no_tfos_processes(30) == []


# ---- TorchDistributor(local_mode=False) over Spark Connect ---------------------------

def torch_over_connect(session):
    """TorchDistributor on a classic session is tests/spark/test_torch.py's;
    here it runs over Connect, on tfos.spark.Cluster's session engine."""
    if session[0] != "connect":
        pytest.skip("TorchDistributor on a classic session: tests/spark/test_torch.py")
    pytest.importorskip("torch", reason="torch is not installed in this Python")


def torch_ranks(scale):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    ranks = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(ranks)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return {"world": world, "rank_sum": int(ranks.item()) * scale, "pid": os.getpid(),
            "tf_config": "TF_CONFIG" in os.environ}


def torch_count_feed(batch):
    """Every rank reads its feed (train_on_dataframe's rows) through
    FeedDataset; rank 0 returns the totals of all ranks."""
    import torch
    import torch.distributed as dist
    from tfos.torch import FeedDataset
    dist.init_process_group("gloo")
    rows = total = 0
    for ids, _ in FeedDataset(batch):
        rows += len(ids)
        total += int(ids.sum())
    sums = torch.tensor([float(rows), float(total)], dtype=torch.float64)
    dist.all_reduce(sums)
    dist.destroy_process_group()
    return {"rows": int(sums[0].item()), "sum": int(sums[1].item()), "mine": rows}


def torch_rank1_fails():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank one cannot go on over connect")
    dist.barrier()


def test_torch_distributor_runs_a_function_and_a_script_over_connect(session, tmp_path):
    """run(fn) returns rank 0's value (fetched by a DataFrame job: a Connect
    client has no SparkContext); run(script, *args) runs it on every rank."""
    torch_over_connect(session)
    from tfos.spark import Cluster
    from tfos.torch import TorchDistributor
    _, spark, _ = session
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, spark=spark)
    out = dist.run(torch_ranks, 3)
    assert out["world"] == 2 and out["rank_sum"] == 3, out
    assert out["tf_config"] is False, out  # the ranks form: rank 0's address and the ranks, not every address
    assert isinstance(dist.cluster, Cluster) and dist.cluster.attempt == 1
    script = os.path.join(HERE, "progs", "torch_doc_script.py")
    out_dir = tmp_path / "out"
    assert dist.run(script, "--learning-rate=1e-3", "--out=%s" % out_dir) is None
    for rank in (0, 1):
        assert (out_dir / ("rank-%d.txt" % rank)).read_text() == "rank %d of 2, learning rate 0.001\n" % rank
    assert wait_no_tfos_processes(30) == []


def test_torch_train_on_dataframe_over_connect(session):
    torch_over_connect(session)
    from tfos.torch import TorchDistributor
    _, spark, _ = session
    n = 3000
    df = spark.range(0, n, 1, 4).selectExpr("id", "id % 10 AS label")
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, spark=spark)
    out = dist.train_on_dataframe(torch_count_feed, df, 64, epochs=2)
    assert out["rows"] == 2 * n and out["sum"] == 2 * sum(range(n)), out
    assert 0 < out["mine"] < 2 * n, out  # both ranks were fed: the partitions go to the rank on their executor
    assert wait_no_tfos_processes(30) == []


def test_torch_rank_failure_over_connect_raises_its_traceback(session):
    torch_over_connect(session)
    from tfos.TFCluster import TFClusterError
    from tfos.torch import TorchDistributor
    _, spark, _ = session
    with pytest.raises(TFClusterError) as info:
        TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, max_restarts=0,
                         spark=spark).run(torch_rank1_fails)
    text = str(info.value)
    assert "worker:1" in text and "ValueError: rank one cannot go on over connect" in text, text
    assert "Traceback (most recent call last)" in text, text
    assert wait_no_tfos_processes(30) == []


def slow_starter(args, ctx):
    """Prints, takes a few seconds before its first read (a framework's
    import), reads its feed, printing once it has its first rows, and prints
    a last line just before it returns."""
    import time
    from tfos import TFNode
    print("hello from %s:%d" % (ctx.job_name, ctx.task_index), flush=True)
    # what TensorFlow prints at load on a machine without a GPU driver
    print("E0000 00:00:1.2 42 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)", flush=True)
    time.sleep(args)
    feed = TFNode.DataFeed(ctx.mgr)
    rows = 0
    while not feed.should_stop():
        got = len(feed.next_batch(100))
        if got and not rows:
            print("%s:%d has its first rows" % (ctx.job_name, ctx.task_index), flush=True)
            time.sleep(0.5)  # its agent writes the line to the log before the feed task ends
        rows += got
    print("last line of %s:%d after %d rows" % (ctx.job_name, ctx.task_index, rows), flush=True)


def test_connect_client_sees_the_nodes_output_and_what_it_waits_for(session, capsys, caplog):
    """On a Connect client the nodes' output went to the server's stdout and
    train() printed one line at the end (issue 36, items 4 and 6): every
    node's lines now come to the client with its name, the last one before
    shutdown() returns, and a wait of more than a few seconds says what it
    waits for."""
    connect_covers_it(session)
    from tfos.spark import Cluster
    _, spark, _ = session
    caplog.set_level("INFO", logger="tfos")
    df = spark.range(0, 2000, 1, 4)
    with Cluster(spark, slow_starter, 12, 2) as cluster:
        assert cluster.train(df) == 2000
        # a line the program printed during the feed comes before train() returns
        # (the feed tasks saw its log grow: the client read it)
        during = capsys.readouterr().out
        assert "[worker:0] worker:0 has its first rows" in during or \
            "[worker:1] worker:1 has its first rows" in during, during
    out = during + capsys.readouterr().out
    for node in ("worker:0", "worker:1"):
        assert "[%s] hello from %s" % (node, node) in out, out
        assert "[%s] last line of %s after " % (node, node) in out, out
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert "failed call to cuInit" not in out, out  # TensorFlow's noise stays in the node logs
    waits = [r.getMessage() for r in caplog.records if r.name == "tfos"]
    assert any(m.startswith("feeding (attempt 1): ") and "programs are still starting" in m for m in waits), waits
    assert wait_no_tfos_processes(30) == []


# ---- an elastic size over Spark Connect (issue 41) -----------------------------------

def wait_executors_over_connect(spark, n, timeout=90):
    """Until the session's jobs run on n executors (a worker restarted by the
    test before has its executor back), counted as Cluster counts them."""
    from tfos._spark import session as stages

    def enough():
        rows = spark.range(0, 3 * n, 1, 3 * n).mapInArrow(stages.probe_stage(0.3),
                                                          stages.ddl(stages.PROBE_FIELDS)).collect()
        return len({(r["host"], r["key"]) for r in rows}) >= n

    assert wait_for(enough, timeout, interval=1), "the Connect server has fewer than %d executors" % n


def elastic_reader(args, ctx):
    """checkpointing_reader's model (its state: the row ids it trained on,
    checkpointed with its feed position every few batches), drain-aware: at
    the drain step it checkpoints and ends. Alone, it reads slower, so that
    the feed outlasts the capacity's return."""
    import json
    import os
    import time
    from tfos import TFNode
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    ckpt = os.path.join(ctx.checkpoint_dir, "state-%s.json" % node)
    state = json.load(open(ckpt)) if os.path.exists(ckpt) else []
    feed = TFNode.DataFeed(ctx.mgr, True)
    fresh, step = [], 0

    def checkpoint():
        with feed.checkpoint():  # the state and its feed position together
            state.extend(fresh)
            del fresh[:]
            with open(ckpt + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(ckpt + ".tmp", ckpt)

    def record(name, obj):
        with open(os.path.join(args["out"], name), "w") as f:
            json.dump(obj, f)

    while not feed.should_stop():
        fresh.extend(int(r[0]) for r in feed.next_batch(20))
        step += 1
        ctx.report(step=step)
        if step == 1:
            record("reading-%d-%s" % (ctx.attempt, node), {"world": ctx.num_workers})
        if ctx.should_checkpoint(step):
            checkpoint()
            record("drained-%d-%s" % (ctx.attempt, node), {"step": step})
            return
        if step % args["every"] == 0:
            checkpoint()
        time.sleep(args["slow"] if ctx.num_workers > 1 else args["alone"])
    state.extend(fresh)
    record("final-%d-%s.json" % (ctx.attempt, node), state)


def test_an_elastic_cluster_over_connect_shrinks_and_grows_back(session, spark_cluster, tmp_path, caplog):
    """Cluster(min_nodes=1) of 2 over Spark Connect, whose client cannot
    list executors: worker 1 killed with its executor mid-feed restarts the
    cluster on the one executor a probe job finds (one restart); when the
    worker returns, a feed task on its executor, which has no node, asks
    for a drain, and the cluster grows back to 2 (a resize). The surviving
    state has every row once."""
    connect_covers_it(session)
    import collections
    import json
    import threading
    from tfos.spark import Cluster
    _, spark, _ = session
    caplog.set_level("INFO", logger="tfos")
    n = 3000
    df = spark.range(0, n, 1, 15)
    out = tmp_path / "out"
    out.mkdir()
    args = {"out": str(out), "every": 3, "slow": 0.1, "alone": 0.4}
    wait_executors_over_connect(spark, 2)

    def capacity_goes_and_comes_back():
        if wait_for(lambda: all((out / ("reading-1-worker-%d" % i)).exists() for i in (0, 1)), 120):
            os.killpg(spark_cluster.worker_pid(1), signal.SIGKILL)   # the worker, its executor, its node
        if wait_for(lambda: (out / "reading-2-worker-0").exists(), 120):
            spark_cluster.restart_worker(1)

    with Cluster(spark, elastic_reader, args, 2, max_restarts=1, checkpoint_dir=str(tmp_path / "ckpt"),
                 reservation_timeout=60, min_nodes=1, elastic_wait=5) as cluster:
        mover = threading.Thread(target=capacity_goes_and_comes_back, daemon=True)
        mover.start()
        cluster.train(df, feed_timeout=300)
        mover.join(120)
        history = cluster.policy.history
    made = sorted(p.name for p in out.glob("reading-*"))
    assert made == ["reading-1-worker-0", "reading-1-worker-1", "reading-2-worker-0", "reading-3-worker-0",
                    "reading-3-worker-1"], made
    assert [json.loads((out / ("reading-%d-worker-0" % a)).read_text())["world"] for a in (1, 2, 3)] == [2, 1, 2]
    assert [h["decision"] for h in history] == ["restart", "resize"], history
    assert "resized from 1 to 2 nodes" in history[1]["summary"], history
    assert "with no node ran a feed task" in history[1]["summary"], history
    counts = collections.Counter()
    for p in out.glob("final-3-*.json"):
        counts.update(json.loads(p.read_text()))
    wrong = {i: c for i, c in counts.items() if c != 1}
    missing = [i for i in range(n) if i not in counts]
    assert not missing and not wrong, (missing[:5], list(wrong.items())[:5])
    said = [r.getMessage() for r in caplog.records]
    assert any("1 of 2 executors usable after 5 s (elastic_wait): forming 1 of 2 nodes" in m for m in said), said
    assert any("formed in" in m and "1 of 2 nodes (elastic: min 1)" in m for m in said), said
    assert wait_no_tfos_processes(30) == []


def elastic_torch_steps(out, steps):
    """gloo all_reduce every step; rank 0 checkpoints every 25 steps and at
    the drain step, where every rank ends. Alone, it steps until the drain
    that grows it (at most 240 s, then it ends at world 1: the test fails
    saying so), whatever the machine's speed; at 2 ranks, to the last step
    and at least 50 steps."""
    import json
    import os
    import time
    import torch
    import torch.distributed as dist
    from tfos import TFNode
    ctx = TFNode.get_context()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    ckpt = os.path.join(os.environ["TFOS_CHECKPOINT_DIR"], "step.json")
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    record("start-%d-%d" % (ctx.attempt, rank), {"step": step, "world": world})
    t = torch.ones(1)
    alone_until = time.monotonic() + 240
    last = max(steps, step + 50)
    while (step < last) if world > 1 else (time.monotonic() < alone_until):
        dist.all_reduce(t)
        step += 1
        ctx.report(step=step)
        drain = ctx.should_checkpoint(step)
        if rank == 0 and (step % 25 == 0 or drain):
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(ckpt + ".tmp", ckpt)
            record("saved-%d" % ctx.attempt, {"step": step})
        if step >= 30:
            record("mark-%d-%d" % (ctx.attempt, rank), {})
        if drain:
            return None
        time.sleep(0.03 if world > 1 else 0.2)
    return world


def test_an_elastic_torchdistributor_over_connect_goes_on_with_one_rank_and_grows_back(session, spark_cluster,
                                                                                      tmp_path):
    """TorchDistributor(min_nodes=1) of 2 over Connect: worker 1 killed for
    good, the ranks re-form at WORLD_SIZE 1 from rank 0's checkpoint; the
    ranks read no feed, so the client's keepalive looks for executors (the
    probe job) and, finding the worker back, drains: WORLD_SIZE 2 again, at
    the drain step."""
    torch_over_connect(session)
    import json
    import threading
    from tfos.torch import TorchDistributor
    _, spark, _ = session
    out = tmp_path / "out"
    out.mkdir()

    def capacity_lost_then_back():
        if wait_for(lambda: all((out / ("mark-1-%d" % r)).exists() for r in (0, 1)), 120):
            os.killpg(spark_cluster.worker_pid(1), signal.SIGKILL)   # the worker, its executor, its rank
            wait_for(lambda: (out / "mark-2-0").exists(), 180)
            spark_cluster.restart_worker(1)

    wait_executors_over_connect(spark, 2)
    mover = threading.Thread(target=capacity_lost_then_back, daemon=True)
    mover.start()
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, max_restarts=1, spark=spark,
                            checkpoint_dir=str(tmp_path / "ckpt"), min_nodes=1, elastic_wait=5)
    world = dist.run(elastic_torch_steps, str(out), 400)
    mover.join(60)
    assert world == 2, "the one rank left stepped 240 s and was never grown back: %s" % sorted(
        p.name for p in out.iterdir())
    starts = {p.name: json.loads(p.read_text()) for p in out.glob("start-*")}
    assert sorted(starts) == ["start-1-0", "start-1-1", "start-2-0", "start-3-0", "start-3-1"], sorted(starts)
    assert [starts["start-%d-0" % a]["world"] for a in (1, 2, 3)] == [2, 1, 2]
    drained = json.loads((out / "saved-2").read_text())["step"]
    assert starts["start-3-0"]["step"] == starts["start-3-1"]["step"] == drained   # grown at the drain step
    history = dist.cluster.policy.history
    assert [h["decision"] for h in history] == ["restart", "resize"], history
    assert "run tasks for 1 of 2 nodes: growing to 2" in history[1]["summary"], history
    assert wait_no_tfos_processes(30) == []
