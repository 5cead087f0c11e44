"""Runtime pieces the Spark integration builds on, with real processes: the
driver ending the nodes' feed (Coordinator.end_feed), an agent watching its
executor (--watch-pid), TensorBoard ports in the status, node tasks reporting
that they could not start (report_abort) or asking for the status
(query_status), and handing a ring's consumer role over (Ring.detach)."""
import json
import os
import pickle
import subprocess
import threading
import uuid

import pytest

import tfos._tfos as t
from tfos import feed
from conftest import PY, tfos_cli, wait_for

# A node program that reads its feed until the end and says how much it got.
READ_FEED = ("import sys\n"
             "from tfos import feed\n"
             "df = feed.DataFeed(feed.get_manager(), True, timeout=60)\n"
             "n = 0\n"
             "while not df.should_stop():\n"
             "    n += len(df.next_batch(10))\n"
             "print('consumed', n, flush=True)\n")


def start_agent(coord, secret, executor_id, marker, code, *opts, env=None):
    """A detached-style `tfos node` for executor_id running `python -c code`."""
    env = dict(os.environ, TFOS_SECRET=secret, PYTHONUNBUFFERED="1", **(env or {}))
    argv = [tfos_cli(), "node", "--coord", coord.address, "--executor-id", str(executor_id)] + list(opts)
    argv += ["--", PY, "-c", code, marker]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def nodes(coord):
    return json.loads(coord.status())["nodes"]


def step_until(coord, cond, timeout):
    """Step the coordinator (in this thread) until cond() holds; bounded."""
    return wait_for(lambda: coord.step(20) is not None and cond(), timeout, interval=0)


def finish(procs, timeout=30):
    """Wait for agent processes (bounded); kill what is left. Returns their outputs."""
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((p.returncode, out, err))
    return outs


def wait_done(coord):
    """Step the coordinator until its cluster has ended (30 s at most); it
    must have ended well."""
    assert step_until(coord, lambda: coord.state >= t.STATE_DONE, 30), coord.status()
    assert coord.state == t.STATE_DONE, coord.failure


class Stepper(object):
    """Steps a coordinator in a thread while this one makes blocking calls.
    Nothing else touches the coordinator until stop()."""

    def __init__(self, coord):
        self.coord = coord
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self.coord.step(20)

    def stop(self):
        self.done.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_end_feed_from_the_driver_ends_the_programs(marker):
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    coord = t.Coordinator(2, secret, reservation_timeout=60)
    agents = [start_agent(coord, secret, 0, marker, READ_FEED, "--cluster-id", cid, "--tensorboard-port", "6006"),
              start_agent(coord, secret, 1, marker, READ_FEED, "--cluster-id", cid)]
    try:
        assert step_until(coord, lambda: all(n["state"] == "running" for n in nodes(coord)), 30), coord.status()
        for eid in (0, 1):
            client = feed.FeedClient(eid, cluster_id=cid, secret=secret, timeout=20)
            client.feed_partition([[i, i * 0.5] for i in range(25 + eid)], partition_id=eid + 1)
            client.close()
        coord.end_feed()
        coord.end_feed()  # a repeat is harmless
        wait_done(coord)
        by_id = {n["executor_id"]: n for n in nodes(coord)}
        assert by_id[0]["tensorboard_port"] == 6006 and by_id[1]["tensorboard_port"] == 0
    finally:
        outs = finish(agents)
        coord.close()
    for eid, (rc, out, err) in enumerate(outs):
        assert rc == 0, err
        assert "[worker:%d] consumed %d" % (eid, 25 + eid) in out


def test_a_turn_held_for_a_node_not_heard_to_read_asks_its_agent(marker):
    """Feed turns (core/turns.h): worker:0 asks for its second partition of
    a job while worker:1, which has read rows of it, has begun one; its
    heartbeats (once a second) have not said so yet, so the answer holds
    worker:0 and the coordinator asks worker:1's agent for its progress
    at once (PROGRESS): the agent answers, and worker:0 goes, one ahead."""
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    coord = t.Coordinator(2, secret, reservation_timeout=60)
    debug = {"TFOS_LOG_LEVEL": "debug"}
    agents = [start_agent(coord, secret, eid, marker, READ_FEED, "--cluster-id", cid, env=debug) for eid in (0, 1)]
    stepper = None
    try:
        assert step_until(coord, lambda: all(n["state"] == "running" for n in nodes(coord)), 30), coord.status()
        stepper = Stepper(coord)
        client = feed.FeedClient(1, cluster_id=cid, secret=secret, timeout=20)
        held = None
        for job in range(1, 4):  # a heartbeat between the asks shows nothing: another job
            def ask(partition, node):
                return json.loads(t.feed_turn(coord.address, secret, "stage-%d" % job, 10, 10, partition, node,
                                              [0, 1], 5000))
            assert ask(0, 0)["go"] and ask(1, 1)["go"]  # first partitions go; the job's start is what was heard
            taken = client.input.stats()["rows_out"]
            client.feed_partition([[i, 0.5] for i in range(30)], partition_id=job)  # read in 10s: all taken
            assert wait_for(lambda: client.input.stats()["rows_out"] >= taken + 30, 20)
            ans = ask(2, 0)
            if not ans["go"]:
                held = ans
                break
        assert held is not None, "every job's asks straddled a heartbeat"
        assert held["behind"] == 1 and held["behind_reads"] is False and held["asked"] is True, held
        assert wait_for(lambda: ask(2, 0)["go"], 10)
        client.close()
        stepper.stop()
        stepper = None
        coord.end_feed()
        wait_done(coord)
    finally:
        if stepper is not None:
            stepper.stop()
        outs = finish(agents)
        coord.close()
    assert all(rc == 0 for rc, _, _ in outs), outs
    assert "agent worker:1: the coordinator asks for the node's progress now" in outs[1][2], outs[1][2][-2000:]


def test_end_feed_waits_for_room_in_a_full_ring(tmp_path, marker):
    """The ring is full when END_FEED comes: the agent retries (without
    blocking) until the program makes room, and nothing is lost."""
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    go = tmp_path / "go"
    code = ("import os, time\n"
            "t0 = time.monotonic()\n"
            "while not os.path.exists(%r) and time.monotonic() - t0 < 60:\n"
            "    time.sleep(0.02)\n" % str(go)) + READ_FEED
    coord = t.Coordinator(1, secret, reservation_timeout=60)
    agent = start_agent(coord, secret, 0, marker, code, "--cluster-id", cid, "--feed-mb", "1")
    try:
        assert step_until(coord, lambda: nodes(coord)[0]["state"] == "running", 30), coord.status()
        client = feed.FeedClient(0, cluster_id=cid, secret=secret, timeout=20)
        rows = 0
        # Fill the ring to the last byte, so that not even END_OF_FEED fits:
        # records of 16*k bytes (8-byte header + payload), pickles padded
        # (pickle ignores what follows its STOP), big ones and then the least.
        for size in (40000, 0):
            with pytest.raises(TimeoutError):
                while True:
                    batch = [[rows + i, "x" * 1000] for i in range(size // 1000)]
                    payload = pickle.dumps(batch)
                    payload += b" " * ((8 - len(payload)) % 16)
                    client.feed_encoded(feed.TAG_PICKLE, payload, timeout=0)
                    rows += len(batch)
        stats = client.input.stats()
        assert stats["used"] == stats["capacity"]
        client.close()
        assert rows > 500
        coord.end_feed()
        step_until(coord, lambda: False, 0.3)  # the agent keeps trying meanwhile
        assert agent.poll() is None and coord.state == t.STATE_RUNNING
        go.write_text("go")
        wait_done(coord)
    finally:
        (rc, out, err), = finish([agent])
        coord.close()
    assert rc == 0, err
    assert "[worker:0] consumed %d" % rows in out


def test_watch_pid_stops_the_node_when_its_executor_is_gone(marker):
    owner = subprocess.Popen([PY, "-c", "import time; time.sleep(120)", marker])
    secret = t.random_secret()
    coord = t.Coordinator(1, secret, reservation_timeout=60)
    agent = start_agent(coord, secret, 0, marker, "import time; print('up', flush=True); time.sleep(120)",
                        "--watch-pid", str(owner.pid))
    try:
        assert step_until(coord, lambda: nodes(coord)[0]["state"] == "running", 30), coord.status()
        owner.kill()
        owner.wait(10)
        assert step_until(coord, lambda: coord.state >= t.STATE_DONE, 30), coord.status()
        assert coord.state == t.STATE_FAILED
        assert "worker:0 (executor 0" in coord.failure
        assert "its Spark executor (pid %d) is gone" % owner.pid in coord.failure
        assert nodes(coord)[0]["exit"] == "its Spark executor (pid %d) is gone" % owner.pid
    finally:
        (rc, out, err), = finish([agent])
        coord.close()
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    assert rc != 0
    assert "is gone; stopping the program" in err


def test_watch_pid_before_the_cluster_forms_and_missing_pid(marker):
    owner = subprocess.Popen([PY, "-c", "import time; time.sleep(120)", marker])
    secret = t.random_secret()
    coord = t.Coordinator(2, secret, reservation_timeout=60)  # executor 1 never comes
    agent = start_agent(coord, secret, 0, marker, "print('never runs')", "--watch-pid", str(owner.pid))
    try:
        assert step_until(coord, lambda: nodes(coord)[0]["state"] == "registered", 30), coord.status()
        owner.kill()
        owner.wait(10)
        assert step_until(coord, lambda: agent.poll() is not None, 15)
        # its slot is free again; the cluster still waits for its nodes
        assert step_until(coord, lambda: nodes(coord)[0]["state"] == "waiting", 5)
        assert coord.state == t.STATE_RESERVING
    finally:
        (rc, out, err), = finish([agent])
        coord.close()
    assert rc == 1
    assert "its Spark executor (pid %d) is gone before the cluster formed" % owner.pid in err
    assert "never runs" not in out

    # a pid that is not there at all: refused at once, before anything else
    gone = subprocess.Popen([PY, "-c", "pass"])
    gone.wait()
    r = subprocess.run([tfos_cli(), "node", "--coord", "127.0.0.1:9", "--executor-id", "0", "--watch-pid",
                        str(gone.pid), "--", PY, "-c", "pass", marker], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, TFOS_SECRET=secret))
    assert r.returncode == 1
    assert "--watch-pid %d) does not exist" % gone.pid in r.stderr


def test_report_abort_fails_the_cluster_and_query_status_tells(marker):
    secret = t.random_secret()
    coord = t.Coordinator(2, secret, reservation_timeout=60)
    agent = start_agent(coord, secret, 0, marker, "print('never runs')")
    assert step_until(coord, lambda: nodes(coord)[0]["state"] == "registered", 30), coord.status()
    stepper = Stepper(coord)
    try:
        status = json.loads(t.query_status(coord.address, secret))
        assert status["state"] == "reserving" and status["failure"] == ""
        with pytest.raises(PermissionError, match="refused the cluster secret"):
            t.report_abort(coord.address, "0" * 64, 1, "nope")
        t.report_abort(coord.address, secret, 1, "ImportError: No module named 'tensorflow'\n  (on host h1)",
                       timeout_ms=5000)
        assert wait_for(lambda: agent.poll() is not None, 15)
        assert wait_for(lambda: json.loads(t.query_status(coord.address, secret))["state"] == "failed", 15)
        status = json.loads(t.query_status(coord.address, secret, timeout_ms=5000))
        want = "worker:1 (executor 1) could not start: ImportError: No module named 'tensorflow'\n  (on host h1)"
        assert status["failure"] == want
    finally:
        stepper.stop()
        (rc, out, err), = finish([agent])
    assert coord.state == t.STATE_FAILED and coord.failure_code == t.EFAILED
    assert coord.failure == want
    assert rc == 1 and "could not start: ImportError" in err
    address = coord.address
    coord.close()
    with pytest.raises(ConnectionError, match="cannot reach the coordinator at %s" % address):
        t.query_status(address, secret, timeout_ms=2000)
    with pytest.raises(ValueError, match="bad coordinator address"):
        t.report_abort("nowhere", secret, 0, "x")


def test_ring_detach_hands_the_consumer_role_over():
    fd = t.ring_create(1 << 16)
    try:
        prod = t.Ring(fd, t.ROLE_PRODUCER)
        for i in range(3):
            prod.write(t.TAG_DATA, b"r%d" % i, 1000)
        first = t.Ring(fd, t.ROLE_CONSUMER)
        with pytest.raises(ValueError):
            t.Ring(fd, t.ROLE_CONSUMER)  # one consumer at a time
        assert [r[2] for r in first.read(1000, 1)] == [b"r0"]
        first.detach()
        assert prod.stats()["consumer_pid"] == 0 and not prod.stats()["consumer_closed"]
        for i in range(3, 6):  # nobody consumes meanwhile
            prod.write(t.TAG_DATA, b"r%d" % i, 1000)
        second = t.Ring(fd, t.ROLE_CONSUMER)
        got = []
        while len(got) < 5:
            got += [r[2] for r in second.read(1000)]
        assert got == [b"r%d" % i for i in range(1, 6)]
        second.close()  # a close ends consuming for good
        with pytest.raises(ValueError):
            t.Ring(fd, t.ROLE_CONSUMER)
        with pytest.raises(t.FeedClosed):
            prod.write(t.TAG_DATA, b"late", 1000)
        prod.close()
    finally:
        os.close(fd)


# A node program that reads Arrow batches as numpy columns: rows, their sum,
# the columns' shapes, and whether reading them imported pandas.
READ_ARROW = ("import sys\n"
              "import numpy as np\n"
              "from tfos import feed\n"
              "df = feed.DataFeed(feed.get_manager(), True, timeout=60)\n"
              "ids, total, shapes = [], 0.0, set()\n"
              "while not df.should_stop():\n"
              "    b = df.next_batch_arrays(7, as_dict=True)\n"
              "    if not len(b):\n"
              "        break\n"
              "    ids += b['id'].tolist()\n"
              "    total += float(b['v'].sum())\n"
              "    shapes.add((b['v'].shape[1:], str(b['v'].dtype), str(b['id'].dtype)))\n"
              "print('ids', ids, flush=True)\n"
              "print('total', total, 'shapes', sorted(shapes), 'pandas', 'pandas' in sys.modules, flush=True)\n")


def test_feed_arrow_streams_record_batches(marker):
    """FeedClient.feed_arrow writes an iterator's record batches as they come
    (sliced ones, an empty one skipped): the node gets every row in order,
    list<float> columns as 2-D arrays, without importing pandas."""
    pa = pytest.importorskip("pyarrow")
    import numpy as np
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    ids = np.arange(100, dtype=np.int64)
    vals = np.arange(300, dtype=np.float32).reshape(100, 3)
    whole = pa.record_batch([pa.array(ids), pa.FixedSizeListArray.from_arrays(pa.array(vals.ravel()), 3)
                             .cast(pa.list_(pa.float32()))], names=["id", "v"])
    pulled = []

    def batches():  # slices of one batch: offsets into shared buffers
        for lo, hi in ((0, 33), (33, 33), (33, 90), (90, 100)):
            pulled.append(lo)
            yield whole.slice(lo, hi - lo)

    coord = t.Coordinator(1, secret, reservation_timeout=60)
    agent = start_agent(coord, secret, 0, marker, READ_ARROW, "--cluster-id", cid)
    try:
        assert step_until(coord, lambda: nodes(coord)[0]["state"] == "running", 30), coord.status()
        client = feed.FeedClient(0, cluster_id=cid, secret=secret, timeout=20)
        assert client.feed_arrow(batches(), partition_id=1) == 100
        assert pulled == [0, 33, 33, 90]
        client.close()
        coord.end_feed()
        wait_done(coord)
    finally:
        (rc, out, err), = finish([agent])
        coord.close()
    assert rc == 0, err
    assert "[worker:0] ids %s" % list(range(100)) in out
    assert "[worker:0] total %r shapes [((3,), 'float32', 'int64')] pandas False" % float(vals.sum()) in out


def test_an_agent_whose_program_failed_at_once_had_registered(marker):
    """The agent registers, its program fails at once and the agent exits,
    all between two looks of a node task's wait for the registration: the
    wait must see a registered node (whose failure is the cluster's, reported
    with the program's traceback), not an agent that never registered."""
    from tfos._spark import nodes as spark_nodes
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    coord = t.Coordinator(1, secret, reservation_timeout=60)
    agent = start_agent(coord, secret, 0, marker, "raise SystemExit(3)", "--cluster-id", cid)
    try:
        assert step_until(coord, lambda: agent.poll() is not None, 30), coord.status()
        assert coord.state == t.STATE_FAILED, coord.status()

        class Spec(object):
            coord_addr, reservation_timeout = coord.address, 10

            def label(self, executor_id):
                return "worker:%d" % executor_id

        spec = Spec()
        spec.secret = secret
        stepper = Stepper(coord)
        try:
            why = spark_nodes._wait_registered(spec, 0, agent.pid)
        finally:
            stepper.stop()
        assert why is None
    finally:
        finish([agent])
        coord.close()


# Runs `python -m tfos._sparkprog` on the payload (map_fun, argv[2]) as a node
# agent does: map_fun is defined in the script given before this tail, so it
# pickles by value (its module is __main__); argv[1] is TFOS_INPUT_MODE.
_RUN_SPARKPROG = r"""
import os, subprocess, sys
from tfos import _payload
r = os.memfd_create("payload", 0)  # the agent's TFOS_PAYLOAD_FD is a memfd too
os.write(r, _payload.dumps((map_fun, sys.argv[2])))
env = dict(os.environ, TFOS_PAYLOAD_FD=str(r), TFOS_INPUT_MODE=sys.argv[1], TFOS_JOB_NAME="worker",
           TFOS_TASK_INDEX="0", TFOS_EXECUTOR_ID="0")
sys.exit(subprocess.run([sys.executable, "-m", "tfos._sparkprog"], env=env, pass_fds=(r,), timeout=120).returncode)
"""


def run_sparkprog(map_fun_source, input_mode, arg):
    done = subprocess.run([PY, "-c", map_fun_source + _RUN_SPARKPROG, input_mode, arg], capture_output=True,
                          text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]


# A map_fun that only looks whether numpy is imported.
_SEES_NUMPY = r"""
import sys

def map_fun(args, ctx):
    with open(args, "w") as f:
        f.write(str("numpy" in sys.modules))
"""


@pytest.mark.parametrize("input_mode,imported", [("1", "True"), ("0", "False")])
def test_a_spark_fed_node_imports_numpy_before_map_fun(tmp_path, input_mode, imported):
    """InputMode.SPARK: the feed's decoder needs numpy, imported before
    map_fun reads (so before run() returns), not at the first rows of the
    first train(); InputMode.TENSORFLOW programs are left as they are."""
    out = tmp_path / "seen"
    run_sparkprog(_SEES_NUMPY, input_mode, str(out))
    assert out.read_text() == imported


# A map_fun leaving what a normal exit finishes: a non-daemon thread still
# writing, an atexit function, and a file left open with its data buffered.
_ENDINGS = r"""
import atexit, os, sys, threading, time

def map_fun(out, ctx):
    def late():
        time.sleep(0.5)
        with open(os.path.join(out, "thread"), "w") as f:
            f.write("done")
    threading.Thread(target=late).start()
    atexit.register(lambda: open(os.path.join(out, "atexit"), "w").write("ran"))
    f = open(os.path.join(out, "left-open"), "w")
    f.write("buffered")
    sys.tfos_test_left_open = f  # alive until the teardown, as a module-level file is
"""


def test_a_node_program_ends_as_a_normal_exit_would(tmp_path):
    """After map_fun returns, the program skips the interpreter's teardown
    (tfos._exit) but not what a program sees of an exit: its non-daemon
    threads finish, its atexit functions run, open files are flushed."""
    run_sparkprog(_ENDINGS, "0", str(tmp_path))
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "left-open").read_text() == "buffered"
