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


def _feed_with(monkeypatch, prod, failure):
    def feed_partition(rows, partition, key=0):
        raise _write_error()

    client = types.SimpleNamespace(input=prod, feed_partition=feed_partition, close=lambda **kw: None)
    monkeypatch.setattr(feeding, "_pick_node", lambda spec, partition: 0)
    monkeypatch.setattr(feeding, "_open_client", lambda spec, e, p, timeout: client)
    monkeypatch.setattr(feeding, "_cluster_failure", lambda spec, wait=0: failure)
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
