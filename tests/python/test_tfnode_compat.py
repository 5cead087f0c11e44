"""TFNode as TensorFlowOnSpark 2.2.5 has it: hdfs_path for every scheme and
form, and the module-level functions (next_batch, batch_results, terminate,
release_port, export_saved_model, start_cluster_server)."""
import multiprocessing
import pickle
import socket

import pytest

import tfos._tfos as t
import tfos.fs
from tfos import TFNode, feed

from conftest import join_child, produce, start_child

CTX = multiprocessing.get_context("fork")
USER = tfos.fs.hadoop_user()  # Hadoop's user: HADOOP_USER_NAME, else the uid's name

# (defaultFS, working_dir, path, what TFoS 2.2.5's hdfs_path returns); worked
# out from its source: scheme paths as they are, "/x" -> defaultFS + "/x",
# relative -> defaultFS/user/<user>/x on hdfs/viewfs, defaultFS/<cwd>/x on file.
HDFS_PATH_CASES = [
    ("hdfs://", "/w", "/foo/bar", "hdfs:///foo/bar"),
    ("hdfs://", "/w", "foo/bar", "hdfs:///user/%s/foo/bar" % USER),
    ("viewfs://", "/w", "/foo/bar", "viewfs:///foo/bar"),
    ("viewfs://", "/w", "foo/bar", "viewfs:///user/%s/foo/bar" % USER),
    ("hdfs://nn:8020", "/w", "/foo/bar", "hdfs://nn:8020/foo/bar"),
    ("hdfs://nn:8020", "/w", "foo/bar", "hdfs://nn:8020/user/%s/foo/bar" % USER),
    ("hdfs://nn:8020/", "/w", "/foo/bar", "hdfs://nn:8020//foo/bar"),
    ("hdfs://nn:8020/", "/w", "foo", "hdfs://nn:8020//user/%s/foo" % USER),
    ("viewfs://cluster", "/w", "foo", "viewfs://cluster/user/%s/foo" % USER),
    ("file://", "/home/u/job", "/foo/bar", "file:///foo/bar"),
    ("file://", "/home/u/job", "foo/bar", "file:///home/u/job/foo/bar"),
    # Spark's fs.defaultFS is file:/// locally; TFoS's driver made it file://
    ("file:///", "/home/u/job", "/foo/bar", "file:///foo/bar"),
    ("file:///", "/home/u/job", "foo/bar", "file:///home/u/job/foo/bar"),
    ("s3a://bucket", "/w", "/foo", "s3a://bucket/foo"),
    ("s3a://bucket", "/w", "foo", "s3a://bucket/foo"),
    ("gs://bucket", "/w", "foo", "gs://bucket/foo"),
] + [
    (fs, "/w", qualified, qualified)
    for fs in ("hdfs://", "hdfs://nn:8020", "file://", "viewfs://")
    for qualified in ("adl://a/x", "file:///x", "hdfs://other/x", "hdfs:///x", "oss://b/x", "s3://b/x",
                      "s3a://b/x", "s3n://b/x", "swift://c/x", "viewfs://c/x", "wasb://c/x")
]


@pytest.mark.parametrize("default_fs,working_dir,path,expected", HDFS_PATH_CASES)
def test_hdfs_path_matches_tfos(default_fs, working_dir, path, expected):
    ctx = TFNode.NodeContext("worker", 0, 0, {}, 1, defaultFS=default_fs, working_dir=working_dir)
    assert TFNode.hdfs_path(ctx, path) == expected
    assert ctx.absolute_path(path) == expected


@pytest.mark.parametrize("path", ["gs://bucket/x", "abfss://c@acct.dfs.core.windows.net/x", "hf://m/x"])
def test_hdfs_path_keeps_other_schemes(path):
    # TFoS knew only Hadoop's schemes and made these <defaultFS>/user/<user>/gs://...
    ctx = TFNode.NodeContext("worker", 0, 0, {}, 1, defaultFS="hdfs://nn:8020", working_dir="/w")
    assert TFNode.hdfs_path(ctx, path) == path


# ---- next_batch / batch_results / terminate on a real ring -----------------------

def test_module_level_feed_functions_train_and_results():
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    mgr = feed.FeedManager(fd_in, fd_out)
    p = start_child(produce, fd_in, {3: [[i] for i in range(5)], 4: [[i] for i in range(5, 8)]})
    got = []
    while True:
        batch = TFNode.next_batch(mgr, 3)
        if not batch:
            break
        got.extend(batch)
        TFNode.batch_results(mgr, [row[0] * 2 for row in batch])
    assert got == [[i] for i in range(8)]
    with pytest.raises(ValueError, match="qname"):
        TFNode.next_batch(mgr, 3, qname="other")
    assert join_child(p) == 0
    out = t.Ring(fd_out, t.ROLE_CONSUMER)
    results = {}
    while sum(len(v) for v in results.values()) < 8:
        for _, _, payload in out.read(5000):
            part, res = pickle.loads(payload)
            results.setdefault(part, []).extend(res)
    assert results == {3: [0, 2, 4, 6, 8], 4: [10, 12, 14]}


def test_module_level_batch_results_count_mismatch_is_an_error():
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 20)
    mgr = feed.FeedManager(fd_in, fd_out)
    p = start_child(produce, fd_in, {1: [[1], [2]]})
    assert TFNode.next_batch(mgr, 2) == [[1], [2]]
    with pytest.raises(ValueError, match="1 results for a batch of 2 rows"):
        TFNode.batch_results(mgr, [1])
    assert join_child(p) == 0


def _fill_until_closed(fd, q):
    ring = t.Ring(fd, t.ROLE_PRODUCER)
    ring.partition_begin(1, 10000)
    try:
        while True:
            feed.write_rows(ring, [[0] * 64] * 64, 20000)
    except Exception as exc:
        q.put(type(exc).__name__)


def test_module_level_terminate_stops_the_producer():
    fd_in, fd_out = t.ring_create(64 << 10), t.ring_create(64 << 10)
    mgr = feed.FeedManager(fd_in, fd_out)
    q = CTX.Queue()
    p = start_child(_fill_until_closed, fd_in, q)
    assert len(TFNode.next_batch(mgr, 1)) == 1
    TFNode.terminate(mgr)
    assert mgr.terminated
    assert q.get(timeout=30) == "FeedClosed"
    assert join_child(p) == 0


# ---- release_port, export_saved_model, start_cluster_server -----------------------

def test_release_port_closes_the_held_socket():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    ctx = TFNode.NodeContext("worker", 0, 0, {}, 1)
    ctx.tmp_socket = s
    TFNode.release_port(ctx)
    assert ctx.tmp_socket is None
    again = socket.socket()
    again.bind(("127.0.0.1", port))        # the port is free again
    again.close()
    TFNode.release_port(ctx)               # nothing held: a warning, no error


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _server_child(port, q):
    import os
    ctx = TFNode.NodeContext("worker", 0, 0, {"worker": ["localhost:%d" % port]}, 1)
    cluster, server = TFNode.start_cluster_server(ctx, num_gpus=0)
    q.put((cluster.as_dict(), server.target, os.environ["CUDA_VISIBLE_DEVICES"]))
    with pytest.raises(ValueError, match="grpc\\+verbs"):
        TFNode.start_cluster_server(ctx, rdma=True)
    q.put("rdma refused")


def test_start_cluster_server_returns_cluster_and_started_server():
    port = _free_port()
    spawn = multiprocessing.get_context("spawn")    # TensorFlow in a fresh process
    q = spawn.Queue()
    p = spawn.Process(target=_server_child, args=(port, q))
    p.start()
    spec, target, visible = q.get(timeout=120)
    assert spec == {"worker": ["localhost:%d" % port]}
    assert target == "grpc://localhost:%d" % port
    assert visible == ""
    assert q.get(timeout=60) == "rdma refused"
    join_child(p)


def test_export_saved_model_delegates_to_compat(tmp_path):
    tf = pytest.importorskip("tensorflow")

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return x * 2

    out = str(tmp_path / "m")
    assert TFNode.export_saved_model(Doubler(), out, is_chief=True) == out
    assert TFNode.export_saved_model(Doubler(), str(tmp_path / "other")) is None
    assert not (tmp_path / "other").exists()
    loaded = tf.saved_model.load(out)
    assert loaded(tf.constant([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
