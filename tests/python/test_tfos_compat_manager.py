"""TensorFlowOnSpark's TFManager and reservation modules on tfos: the
scenarios TFoS 2.2.5's test_TFNode/test_reservation cover, written for
tfos (a manager's queues feed TFNode.DataFeed through real rings; a
reservation server with concurrent clients over TCP)."""
import os
import queue
import socket
import struct
import threading
from unittest import mock

import pytest

from tfos import TFManager, TFNode, reservation, util


def test_manager_queues_feed_a_datafeed_and_carry_results_back():
    mgr = TFManager.start(b"key", ["input", "output"], "local")
    try:
        q = mgr.get_queue("input")
        for i in range(7):
            q.put([i, i * i])
        q.put(None)                                   # TFoS's end-of-feed marker
        feed = TFNode.DataFeed(mgr, train_mode=False)
        assert not feed.done_feeding
        assert feed.next_batch(3) == [[0, 0], [1, 1], [2, 4]]
        feed.batch_results([r * 10 for r in range(3)])
        assert not feed.should_stop()
        assert feed.next_batch(10) == [[3, 9], [4, 16], [5, 25], [6, 36]]  # fewer than asked: the feed ended
        feed.batch_results(["a", "b", "c", "d"])
        assert feed.next_batch(1) == []               # a batch ends at its partition's end in inference
        assert feed.done_feeding and feed.should_stop()
        out = mgr.get_queue("output")
        assert [out.get(timeout=10) for _ in range(7)] == [0, 10, 20, "a", "b", "c", "d"]
        with pytest.raises(queue.Empty):
            out.get(timeout=0.1)
        with pytest.raises(Exception, match="end-of-feed"):
            q.put([8, 64])
        assert mgr.get_queue("error") is None        # not asked for: None, as TFoS
        assert mgr.get("state") == "running"
        mgr.set("state", "terminating")
        assert mgr.get("state") == "terminating"
        assert TFManager.connect(mgr.address, b"key") is mgr
        with pytest.raises(PermissionError, match="authkey"):
            TFManager.connect(mgr.address, b"other")
    finally:
        mgr.shutdown()
    with pytest.raises(ConnectionRefusedError, match="ctx.mgr"):
        TFManager.connect(mgr.address, b"key")
    with pytest.raises(ValueError, match="unknown queue 'control'"):
        TFManager.start(b"key", ["input", "control"])


def test_reservations_count_down():
    r = reservation.Reservations(2)
    assert not r.done() and r.remaining() == 2
    r.add({"node": 1})
    assert not r.done() and r.remaining() == 1
    r.add({"node": 2})
    assert r.done() and r.remaining() == 0 and r.get() == [{"node": 1}, {"node": 2}]


def test_reservation_server_with_concurrent_clients():
    server = reservation.Server(4)
    addr = server.start()
    assert addr[0] == util.get_ip_address()
    errors, got = [], []

    def node(i):
        try:
            c = reservation.Client(addr)
            assert c.register({"node": i, "port": 2222 + i}) == "OK"
            got.append(c.await_reservations(timeout=60))
            c.close()
        except Exception as exc:  # reported below: an assert in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(got) == 4 and all(sorted(x["node"] for x in g) == [0, 1, 2, 3] for g in got)
    assert sorted(m["node"] for m in server.await_reservations(timeout=5)) == [0, 1, 2, 3]

    # a peer that sends a pickle, or a length over the cap, is dropped; the server still answers
    for junk in (b"\x80\x05\x95" + b"\x00" * 16, struct.pack(">I", (1 << 20) + 1) + b"x"):
        with socket.create_connection(addr, 5) as s:
            s.sendall(struct.pack(">I", len(junk)) + junk if junk[:1] == b"\x80" else junk)
            s.settimeout(5)
            try:
                assert s.recv(16) == b""               # closed, no answer
            except ConnectionResetError:
                pass                                   # closed with our bytes unread: no answer either
    c = reservation.Client(addr)
    assert len(c.get_reservations()) == 4
    assert c.register({"node": 5}).startswith("ERR")  # all 4 are in
    assert c.request_stop() == "OK"
    c.close()
    assert server.done


def test_reservation_server_ports_from_the_environment():
    s1, s2, s3 = reservation.Server(1), reservation.Server(1), reservation.Server(1)
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    with mock.patch.dict(os.environ, {"TFOS_SERVER_PORT": "%d-%d" % (port, port + 1),
                                      "TFOS_SERVER_HOST": "my-host"}):
        assert s1.get_server_ports() == [port, port + 1]
        assert s1.get_server_ip() == "my-host"
        a = s1.start_listening_socket()
        b = s2.start_listening_socket()
        assert {a.getsockname()[1], b.getsockname()[1]} == {port, port + 1}
        with pytest.raises(OSError, match="no port of .* can be bound.*TFOS_SERVER_PORT"):
            s3.start_listening_socket()
        a.close()
        b.close()
    with mock.patch.dict(os.environ, {"TFOS_SERVER_PORT": "99x"}):
        with pytest.raises(ValueError, match="invalid TFOS_SERVER_PORT='99x'"):
            s1.get_server_ports()
    with pytest.raises(ValueError, match="> 0"):
        reservation.Server(0)
    with pytest.raises(TimeoutError, match="0 of 1 registered"):
        s1.await_reservations(timeout=0.2)


def test_tfsparknode_run_registers_nodes_and_runs_fn_with_their_context():
    """TFoS's node function by hand: two nodes (chief, worker) register with
    one reservation server, each runs fn with its ctx (the cluster spec from
    both reservations, a feed manager), GPUs by TFoS's rules."""
    import argparse
    from tfos import TFSparkNode, gpu_info
    server = reservation.Server(2)
    addr = server.start()
    meta = {"id": 7, "cluster_template": {"chief": [0], "worker": [1]}, "num_executors": 2,
            "default_fs": "file://", "working_dir": ".", "server_addr": addr}
    seen, errors = {}, []

    def fn(args, ctx):
        seen[ctx.executor_id] = (ctx.job_name, ctx.task_index, ctx.cluster_spec, ctx.num_workers,
                                 isinstance(ctx.mgr, TFManager.TFManager))

    args = argparse.Namespace()

    def node(i):
        try:
            TFSparkNode.run(fn, args, meta, False, None, ["input"], False)([i])
        except Exception as exc:
            errors.append(exc)

    with mock.patch.object(gpu_info, "is_gpu_available", return_value=False), \
            mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": "x"}):
        threads = [threading.Thread(target=node, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ""            # no GPU: none visible, as TFoS
    assert not errors
    spec = seen[0][2]
    assert sorted(spec) == ["chief", "worker"] and len(spec["chief"]) == len(spec["worker"]) == 1
    assert seen == {0: ("chief", 0, spec, 2, True), 1: ("worker", 0, spec, 2, True)}
    reservation.Client(addr).request_stop()

    # GPUs: num_gpus asked for and found (index among this host's nodes), or not found: an error
    server = reservation.Server(1)
    meta = dict(meta, cluster_template={"chief": [0]}, server_addr=server.start())
    with mock.patch.object(gpu_info, "is_gpu_available", return_value=True), \
            mock.patch.object(gpu_info, "get_gpus", return_value=["3", "4"]) as get_gpus, \
            mock.patch.dict(os.environ, {}):
        TFSparkNode.run(fn, argparse.Namespace(num_gpus=2), meta, False, None, ["input"], False)([0])
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,4"
        get_gpus.assert_called_with(2, 0, format=gpu_info.AS_LIST)
        get_gpus.return_value = []
        with pytest.raises(RuntimeError, match="2 GPU.*asked for"):
            TFSparkNode.run(fn, argparse.Namespace(num_gpus=2), meta, False, None, ["input"], False)([0])
    with pytest.raises(ValueError, match="background=True.*TFCluster.run"):
        TFSparkNode.run(fn, args, meta, False, None, ["input"], True)
    reservation.Client(meta["server_addr"]).request_stop()
