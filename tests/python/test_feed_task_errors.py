"""A feed task's error carries its cause (issue 34, item 2): the ring's
reason for the failed write, what the ring says of the node's program
(shut, closed, terminated, rows taken) and the coordinator's view; and a
task whose node's program is gone is an outcome for the driver, not an
exception Spark would run 4 times. Real rings; the Spark task around
_feed_one is stood in for."""
import types

import pytest

from tfos import _tfos as t
from tfos._spark import feeding
from tfos.feed.codec import write_rows


class _Outcomes(object):
    def __init__(self):
        self.got = {}

    def add(self, d):
        self.got.update(d)


class _Spec(object):
    coord_addr = "127.0.0.1:1"   # no coordinator: its view is missing, never a hang
    secret = "ab" * 32

    def label(self, executor_id):
        return "chief:0"


def _ring_with_rows():
    fd = t.ring_create(1 << 20)
    cons = t.Ring(fd, t.ROLE_CONSUMER)
    prod = t.Ring(fd, t.ROLE_PRODUCER)
    prod.partition_begin(3, 1000)
    write_rows(prod, [[1], [2], [3]], 1000)
    return cons, prod


def _write_error():
    exc = t.FeedError("writing to the feed ring")
    exc.reason = "protocol error (malformed or unexpected frame)"
    return exc


def _feed_with(monkeypatch, prod, failure, drain=None, feed_partition=None):
    def write_fails(rows, partition, key=0):
        raise _write_error()

    client = types.SimpleNamespace(input=prod, feed_partition=feed_partition or write_fails, close=lambda **kw: None)
    monkeypatch.setattr(feeding, "_pick_node", lambda spec, partition: 0)
    monkeypatch.setattr(feeding, "_open_client", lambda spec, e, p, timeout: client)
    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: failure)
    monkeypatch.setattr(feeding, "_cluster_drain", lambda spec: drain)
    outcomes = _Outcomes()
    feeding._feed_one(_Spec(), iter([[1]]), 5, outcomes, False)
    return outcomes.got


def test_the_error_names_the_rings_reason_and_the_programs_state(monkeypatch):
    cons, prod = _ring_with_rows()
    cons.read(1000)
    cons.count_taken(2)
    with pytest.raises(feeding.FeedTaskError) as ei:   # program alive, cause not final: Spark may retry
        _feed_with(monkeypatch, prod, None)
    text = str(ei.value)
    assert "feeding partition 0 to chief:0 (executor 0) failed: writing to the feed ring (protocol error" in text
    assert "the node's feed: the program took 2 of the 3 rows written" in text
    assert not feeding._program_gone(types.SimpleNamespace(input=prod))


def test_a_feed_to_a_program_that_is_gone_is_not_raised_to_spark(monkeypatch):
    cons, prod = _ring_with_rows()
    cons.shut()   # what the agent does when the program ends
    assert feeding._program_gone(types.SimpleNamespace(input=prod))
    # the coordinator has the node's failure: an outcome the driver raises with it
    got = _feed_with(monkeypatch, prod, "chief:0 failed: ValueError: Your input ran out of data")
    state, text = got[0]
    assert state == "aborted"
    assert "its agent shut the feed (the program ended)" in text and "protocol error" in text
    assert "the cluster failed: chief:0 failed: ValueError" in text
    # no failure recorded: the program ended without reading on
    assert _feed_with(monkeypatch, prod, None) == {0: ("terminated", None)}


def _fed_whole(prod):
    """feed_partition of a client whose rows all go into the ring."""
    def feed_partition(rows, partition, key=0):
        prod.partition_begin(partition, 1000)
        write_rows(prod, list(rows), 1000)
        prod.partition_end(1000)
        return 1
    return feed_partition


DRAIN = {"step": 31, "drained": True, "age_s": 1.2}


def test_a_program_that_ended_at_a_drain_gets_its_partition_again(monkeypatch):
    """A program that checkpoints at the drain step and returns closes its
    ring, which marks it terminated as terminate() does: the partition it
    left unread is fed to the next attempt ('aborted'), not dropped as not
    wanted -- whichever way the feed task meets the end (issue 41: a whole
    partition was lost under load when the ring was shut before it was
    closed)."""
    # the program ended before the feed task waited for its read
    cons, prod = _ring_with_rows()
    cons.read(1000)
    cons.close()
    state, text = _feed_with(monkeypatch, prod, None, DRAIN, _fed_whole(prod))[0]
    assert state == "aborted" and "ended at the drain step 31 before reading all of it" in text
    # ... and the same end without a drain: the rest is not wanted
    cons, prod = _ring_with_rows()
    cons.close()
    assert _feed_with(monkeypatch, prod, None, None, _fed_whole(prod))[0][0] in ("done", "terminated")
    # the agent shut the ring (the program ended) before the feed task wrote
    cons, prod = _ring_with_rows()
    cons.shut()
    state, text = _feed_with(monkeypatch, prod, None, DRAIN)[0]
    assert state == "aborted" and "drain step 31" in text
    # shut and then closed by the program's exit: terminated, still at a drain
    cons, prod = _ring_with_rows()
    cons.shut()
    cons.close()
    state, text = _feed_with(monkeypatch, prod, None, DRAIN)[0]
    assert state == "aborted" and "drain step 31" in text
    assert _feed_with(monkeypatch, prod, None, None)[0] == ("terminated", None)


def test_a_feed_task_does_not_wait_for_the_socket_of_a_drained_node(monkeypatch):
    """A feed task that begins just as its node ends at a drain finds no
    feed socket: it asks the coordinator between tries and hands the
    partition to the next attempt (NodeLost: 'skipped') instead of waiting
    out feed_timeout; with no drain nor failure it waits for the agent (an
    attempt that is starting) until the timeout, then says so."""
    spec = _Spec()
    spec.cluster_id = "nosuchcluster"
    monkeypatch.setattr(feeding, "CONNECT_SLICE_S", 0.1)
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: {"failure": None, "drain": DRAIN})
    with pytest.raises(feeding.NodeLost) as ei:
        feeding._open_client(spec, 7, 5, 60)
    assert "partition 5: the node on executor 7 is gone: the cluster drained at step 31" in str(ei.value)
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: {"failure": None})
    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: None)
    with pytest.raises(feeding.FeedTaskError) as ei:
        feeding._open_client(spec, 7, 5, 0.5)
    assert "no feed socket for executor 7 of cluster nosuchcluster" in str(ei.value)


def test_the_connect_slices_leave_the_clients_own_timeout_whole(monkeypatch):
    """Only the wait for the socket is sliced: the client's writes and
    result collection keep feed_timeout (a 2 s bound there failed every
    inference task that waited longer for its results)."""
    seen = []

    class Client(object):
        def __init__(self, executor_id, cluster_id, secret, timeout, connect_timeout):
            seen.append((timeout, connect_timeout))

    monkeypatch.setattr(feeding._feed, "FeedClient", Client)
    spec = _Spec()
    spec.cluster_id = "c"
    feeding._open_client(spec, 0, 0, 300)
    assert seen == [(300, feeding.CONNECT_SLICE_S)]


def test_no_node_here_after_one_on_this_host_ended_is_not_wanted(monkeypatch):
    """No node's tag on this executor: when the coordinator says a feed node
    on this host ended with exit code 0 (its agent went with it), the
    partition is not wanted (NodeEnded: "terminated"); a node that ended on
    another host, or failed, leaves the executor-without-a-node error."""
    spec = _Spec()
    spec.cluster_id = "nosuchcluster"
    spec.feed_ids = lambda: [0, 1]
    spec.total = lambda: 2
    here = feeding.host_address(spec.coord_addr)

    def status(host, code):
        return {"failure": None, "nodes": [
            {"executor_id": 0, "host": host, "state": "exited", "exit_code": code},
            {"executor_id": 1, "host": host, "state": "running", "exit_code": -1}]}

    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: None)
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: status(here, 0))
    with pytest.raises(feeding.NodeEnded):
        feeding._pick_node(spec, 5)
    for other in (status("192.0.2.1", 0), status(here, 1)):
        monkeypatch.setattr(feeding, "_coord_status", lambda spec, st=other: st)
        with pytest.raises(feeding.FeedTaskError) as ei:
            feeding._pick_node(spec, 5)  # after 2 s of asking
        assert "that has no tfos node of this cluster" in str(ei.value)


def test_a_node_that_ended_on_another_executor_of_the_host_leaves_the_error(monkeypatch):
    """Nodes register their executor's key: an executor that never had a
    node (one more than num_executors) gets the configuration error even
    when another executor's node on the same host ended with exit code 0,
    and does not drop its partitions as not wanted; its own node's end is
    still NodeEnded."""
    spec = _Spec()
    spec.cluster_id = "nosuchcluster"
    spec.feed_ids = lambda: [0, 1]
    spec.total = lambda: 2
    here = feeding.host_address(spec.coord_addr)
    mine = feeding.executor_key()

    def status(key):
        return {"failure": None, "nodes": [
            {"executor_id": 0, "host": here, "executor_key": key, "state": "exited", "exit_code": 0},
            {"executor_id": 1, "host": here, "executor_key": "other", "state": "running", "exit_code": -1}]}

    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: None)
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: status(mine))
    with pytest.raises(feeding.NodeEnded):
        feeding._pick_node(spec, 5)
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: status(mine + "0"))
    with pytest.raises(feeding.FeedTaskError) as ei:
        feeding._pick_node(spec, 5)  # after 2 s of asking
    assert "that has no tfos node of this cluster" in str(ei.value)


class _NoFeedSpec(_Spec):
    cluster_id = "no-such-cluster-feed"   # no agent listens: FeedClient finds no feed socket


@pytest.mark.parametrize("node, raised", [
    ({"executor_id": 0, "state": "exited", "exit_code": 0}, feeding.NodeEnded),
    ({"executor_id": 0, "state": "exited", "exit_code": 1, "exit": "exit code 1"}, feeding.NodeLost),
])
def test_a_feed_socket_gone_with_its_ended_node_is_not_waited_for(monkeypatch, node, raised):
    """A node's agent closes its feed socket a moment before the tag that
    led a feed task to it goes; a task in between tried the socket again
    until feed_timeout (600 s), since the cluster neither failed nor
    drained. The coordinator's word that the node exited ends the wait at
    its first look."""
    looks = []

    def status(spec):
        looks.append(1)
        return {"failure": None, "drain": None, "nodes": [node]}

    monkeypatch.setattr(feeding, "_coord_status", status)
    monkeypatch.setattr(feeding, "CONNECT_SLICE_S", 0.05)
    with pytest.raises(raised) as ei:
        feeding._open_client(_NoFeedSpec(), 0, 7, 600)
    assert len(looks) == 1
    if raised is feeding.NodeLost:
        assert "partition 7: the node on executor 0 has exited (exit code 1)" in str(ei.value)


def test_a_feed_socket_of_a_running_node_is_waited_for_until_the_timeout(monkeypatch):
    """A node still starting (no feed socket yet): tried again until the
    timeout, then an error naming the node and partition."""
    monkeypatch.setattr(feeding, "_coord_status", lambda spec: {
        "failure": None, "drain": None, "nodes": [{"executor_id": 0, "state": "registered", "exit_code": -1}]})
    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: None)
    monkeypatch.setattr(feeding, "CONNECT_SLICE_S", 0.05)
    with pytest.raises(feeding.FeedTaskError) as ei:
        feeding._open_client(_NoFeedSpec(), 0, 7, 0.5)
    assert "feeding partition 7 to chief:0 (executor 0) failed" in str(ei.value)
