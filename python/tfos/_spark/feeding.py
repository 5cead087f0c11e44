"""Feed and inference tasks: a Spark task streams its partition into the
node on its own executor (found by the tag names of nodes.py) through the
node's shared-memory feed, and a partition counts as delivered once the
node's program has read it. Runs on executors, as nodes.py."""
import errno
import json
import logging
import pickle
import socket
import time

from .. import _tfos
from .. import feed as _feed
from ..feed.producer import skip_arrow_rows
from .nodes import _bind_name, _task_context, executor_key, host_address, local_nodes, status_node
from .wait import LOCAL, NODE, WaitTimeout, wait_until

logger = logging.getLogger(__name__)

def _coord_status(spec):
    """The coordinator's /status document (raises when it cannot be reached)."""
    return json.loads(_tfos.query_status(spec.coord_addr, spec.secret, 5000))


def _cluster_failure(spec, wait=5.0):
    """The coordinator's failure text (None while nothing failed). A feed
    task sees a dead node a moment before its agent has reported why, so
    wait (bounded) for the report."""
    def failure():
        try:
            st = _coord_status(spec)
        except Exception as exc:
            return "the coordinator at %s cannot be reached (%s)" % (spec.coord_addr, exc)
        return st.get("failure")

    try:
        return wait_until(failure, wait, "the coordinator at %s to record a failure" % spec.coord_addr, NODE)
    except WaitTimeout:
        return None


def _cluster_drain(spec):
    """The coordinator's drain ({"step", "drained", ...}) when one is under way
    or done, else None (also when it cannot be reached: a coordinator is
    closed after its programs finished, and never during a drain). Asked of
    a node's program that ended before it read the whole partition: one
    that ended at a drain must not be taken for one that wanted no more
    data (its ring says "terminated" either way: the consumer's close marks
    it so), which would drop the rest of the partition for good."""
    try:
        return _coord_status(spec).get("drain")
    except Exception:  # noqa: BLE001 -- unreachable: no drain to tell of
        return None


def _drained_text(partition, drain):
    return "partition %d: its node ended at the drain step %s before reading all of it" % (
        partition, drain.get("step"))


def _ask_to_grow(spec, partition, key):
    """Capacity came back where the client cannot see it (Spark Connect):
    ask the coordinator to drain, so that the next attempt forms on every
    executor there is. Once per cluster drain (the coordinator ignores the
    ask while one is under way); a failure here only leaves the size as it is."""
    reason = ("a Spark executor with no node ran a feed task (partition %d, host %s, JVM pid %s): growing onto it" %
              (partition, socket.gethostname(), key))
    try:
        _tfos.query_status(spec.coord_addr, spec.secret, 5000, "drain", reason)
    except Exception as exc:  # noqa: BLE001 -- the partition is fed again either way
        logger.warning("partition %d: could not ask the coordinator to grow the cluster: %s", partition, exc)


class FeedTaskError(RuntimeError):
    pass


class NodeLost(Exception):
    """The node this partition was going to failed (or its cluster did)."""


class NodeEnded(Exception):
    """The node on this executor has ended well (its program returned, as
    after ``terminate()``) and its agent with it: the partition is not
    wanted, as when the node's ring says so."""


def _ended_here(spec, wait=2.0):
    """Whether this executor's feed node of this cluster has ended with exit
    code 0 (a node's agent, and the tag a feed task looks for, go with its
    program). The coordinator knows each Spark node's executor (its agent
    registers the executor's key): so an executor that never had a node
    gets its error even where another executor's node on the host ended. A
    node registered without a key is matched by host. Waits (bounded) for
    the agent's last report, which can reach the coordinator after its tag
    is gone."""
    feed = set(spec.feed_ids())
    key = executor_key()
    try:
        here = host_address(spec.coord_addr)
    except OSError:  # unknown: the caller's error stands
        return False

    def mine(n):
        return n.get("executor_key") == key if n.get("executor_key") else n.get("host") == here

    def ended():
        try:
            nodes = _coord_status(spec).get("nodes", [])
        except Exception:  # noqa: BLE001 -- unknown: the caller's error stands
            return False
        return any(n.get("executor_id") in feed and mine(n) and n.get("state") == "exited"
                   and n.get("exit_code") == 0 for n in nodes)

    try:
        return wait_until(ended, wait, "a node on this host to have ended", NODE)
    except WaitTimeout:
        return False


def _pick_node(spec, partition):
    key = executor_key()
    ids = local_nodes(spec, key)
    if not ids:
        failure = _cluster_failure(spec, wait=0)
        if failure:  # its node was stopped with the rest of the cluster
            raise NodeLost("feeding partition %d failed: the cluster failed: %s" % (partition, failure))
        if getattr(spec, "elastic", False):
            # an elastic cluster smaller than its executors: this one came
            # back, and the cluster grows onto it at its next drain
            if getattr(spec, "grow_by_feed", False):
                _ask_to_grow(spec, partition, key)
            raise NodeLost("partition %d: no node on this executor yet (the elastic cluster grows onto it at its "
                           "next drain)" % partition)
        if _ended_here(spec):
            if _cluster_drain(spec) is not None:  # it ended at a drain: the next attempt reads the partition
                raise NodeLost("partition %d: its node ended at a drain" % partition)
            raise NodeEnded(partition)
        raise FeedTaskError(
            "partition %d: the Spark task feeding it runs on an executor (host %s, JVM pid %s) that has no tfos "
            "node of this cluster. Every executor of the application must run one node: give it exactly "
            "num_executors=%d executors (spark.executor.instances, or spark.cores.max with spark.executor.cores "
            "in standalone; no dynamic allocation) and make ps nodes run on the driver (driver_ps_nodes=True) or "
            "count them in num_executors" % (partition, socket.gethostname(), key, spec.total()))
    return ids[partition % len(ids)]


class _NodeLock(object):
    """One inference task at a time per node (the output ring has one reader):
    an abstract socket name held while collecting results. Bounded wait."""

    def __init__(self, spec, executor_id, timeout):
        self.name = "tfos-infer-%s-%d" % (spec.cluster_id, executor_id)
        self.timeout = timeout
        self.sock = None

    def __enter__(self):
        def bound():
            try:
                return _bind_name(self.name)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                return None

        try:
            self.sock = wait_until(bound, self.timeout, "the inference task before this one on the node to end "
                                   "(%s)" % self.name, LOCAL)
        except WaitTimeout as exc:
            raise OSError(errno.EADDRINUSE, str(exc)) from None
        return self

    def __exit__(self, *exc):
        self.sock.close()


def _cause(exc):
    """The exception's text with the ring's reason for it (``.reason``, from
    the libtfos code), which the bare text ("writing to the feed ring") lacks."""
    reason = getattr(exc, "reason", None)
    text = str(exc) or type(exc).__name__
    return "%s (%s)" % (text, reason) if reason and reason not in text else text


def _ring_state(client):
    """What the node's input ring says of its reader, in words (None if it
    cannot be read)."""
    try:
        st = client.input.stats()
    except Exception:
        return None
    said = []
    if st.get("shut"):
        said.append("its agent shut the feed (the program ended)")
    if st.get("consumer_terminated"):
        said.append("the program called terminate()")
    elif st.get("consumer_closed"):
        said.append("the program closed its feed")
    if st.get("feed_ended"):
        said.append("the feed was ended")
    said.append("the program took %d of the %d rows written" % (st.get("rows_out", 0), st.get("rows_in", 0)))
    return ", ".join(said)


def _node_words(spec, executor_id):
    """The coordinator's view of the node, in words (None if unknown)."""
    try:
        st = _coord_status(spec)
    except Exception:
        return None
    nd = status_node(st, executor_id)
    if nd is None:
        return None
    words = "state %s" % nd.get("state")
    if nd.get("exit"):
        words += ", " + nd["exit"]
    return words


def _program_gone(client):
    """True where the node's program can read no more of its feed: its
    agent shut the ring, or the program closed or terminated it. A feed
    task that meets this cannot succeed by being run again."""
    try:
        st = client.input.stats()
    except Exception:
        return False
    return bool(st.get("shut") or st.get("consumer_closed") or st.get("consumer_terminated"))


def _explain(spec, executor_id, partition, exc, client=None):
    """A FeedTaskError for a failed feed, carrying its cause: the ring's
    reason, the ring's view of its reader and the coordinator's of the node;
    ``cluster_failed`` tells whether the coordinator has recorded a failure
    (the node went with its cluster). A node that is alive but sent no
    results (ResultsMissing) has nothing for its agent to report: the
    coordinator is asked once, not for 5 s (each of Spark's attempts of the
    task waited them out)."""
    failure = _cluster_failure(spec, wait=0 if isinstance(exc, _feed.ResultsMissing) else 5.0)
    what = "feeding partition %d to %s (executor %d) failed: %s" % (partition, spec.label(executor_id),
                                                                     executor_id, _cause(exc))
    ring = _ring_state(client) if client is not None else None
    if ring:
        what += "\nthe node's feed: " + ring
    node = _node_words(spec, executor_id)
    if node:
        what += "\nthe node: " + node
    if failure:
        what += "\nthe cluster failed: " + failure
    err = FeedTaskError(what)
    err.cluster_failed = bool(failure)
    return err


CONNECT_SLICE_S = 2.0


def _open_client(spec, executor_id, partition, timeout):
    """The node's feed, within ``timeout`` s. Its agent may not listen yet
    (its attempt is starting), so a missing feed socket is tried again; between
    tries (every CONNECT_SLICE_S) the coordinator is asked whether the
    cluster failed or drained meanwhile: then the node's agent has gone,
    or is going, and the partition is the next attempt's (NodeLost), not a
    wait of the whole ``timeout``. Nor is a node that has ended waited
    for: its agent closes the feed socket a moment before the tag that
    led here goes (NodeEnded when its program returned, as after
    ``terminate()``; else NodeLost)."""
    deadline = time.monotonic() + timeout
    whole = False  # a socket that answered, but not in a slice (a slow greeting): then the rest at once
    while True:
        left = deadline - time.monotonic()
        try:
            return _feed.FeedClient(executor_id, spec.cluster_id, spec.secret, timeout=timeout,
                                    connect_timeout=max(0.05, left if whole else min(left, CONNECT_SLICE_S)))
        except _feed.FeedClosed as exc:   # no feed socket (yet)
            if time.monotonic() < deadline:
                try:
                    st = _coord_status(spec)
                except Exception:  # noqa: BLE001 -- not an answer: wait on, as for a node still starting
                    st = {}
                failure, drain = st.get("failure"), st.get("drain")
                if failure or drain is not None:
                    raise NodeLost("partition %d: the node on executor %d is gone: %s" % (
                        partition, executor_id, "the cluster failed: %s" % failure if failure else
                        "the cluster drained at step %s" % drain.get("step"))) from None
                node = status_node(st, executor_id) or {}
                if node.get("state") == "exited":
                    if node.get("exit_code") == 0:
                        raise NodeEnded(partition) from None
                    raise NodeLost("partition %d: the node on executor %d has exited (%s)" % (
                        partition, executor_id, node.get("exit") or "exit code %s" % node.get("exit_code"))) from None
                continue
            last = exc
        except (_feed.FeedError, OSError) as exc:
            last = exc
            if not whole and time.monotonic() < deadline:
                whole = True
                continue
        err = _explain(spec, executor_id, partition, last)
        if err.cluster_failed:
            raise NodeLost(str(err))
        raise err


def _terminated(client):
    try:
        return bool(client.input.stats().get("consumer_terminated"))
    except Exception:
        return False


def _wait_consumed(client, timeout, failed=None):
    """Wait until the program has taken every row of our partition (its
    DataFeed acknowledges each partition end it passes, in ring order): a
    partition counts as delivered only then, so a node that dies with rows
    still in its ring or its DataFeed gets them again (at-least-once).
    Returns True when the program ended its feed (terminate(), or its end,
    which closes its ring) before it took them, else None. A
    blocking call into the ring (a futex wait, GIL released); with
    ``failed`` (a callable: None while the cluster runs, else why it is
    over), in slices of a second, asking it in between (a node stopped with
    its cluster may not have closed the ring)."""
    st = client.input.stats()
    target = st["partitions_completed"] + st["partitions_aborted"]  # our END is at or before this place
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            client.input.wait_acked(target, int(max(0.0, min(left, 1.0) if failed else left) * 1000))
            return
        except _feed.FeedEnded:
            return True  # the program ended its feed: not wanted, unless it ended at a drain
        except _feed.FeedClosed:
            raise _feed.FeedClosed("the node's program died before it read the whole partition")
        except TimeoutError:
            if failed is not None and failed():
                raise _feed.FeedClosed("the cluster failed before the node read the whole partition")
            if time.monotonic() >= deadline:
                raise TimeoutError("the node did not read the partition within %g s" % timeout)


_TURN_ASKED_S = 0.005  # the coordinator's PROGRESS to an agent and its heartbeat back: well under this


def _await_turn(spec, turn, stage, partition, executor_id, feed_timeout, failed):
    """Wait for this node's turn to begin the partition (core/turns.h, the
    coordinator's call). A feed task lasts until its node has read the
    partition, so when one node's program starts late the other executors
    would take the rest of the job, and a program that computes its steps
    from rows / workers (the TensorFlowOnSpark examples) ran out of data.
    A node's first partition always goes; then a node waits, holding its
    executor so that Spark gives the next partition to another, while a
    node that has read nothing of the job yet has begun fewer partitions,
    or while one that reads has begun two fewer (and has not stopped
    reading with rows unread). ``turn``: (partitions of the job's RDD,
    partitions the job feeds), or None (no turns). Bounded: at most
    ``feed_timeout``, and not once the cluster has failed; then the
    partition is fed anyway (a warning in the executor's log)."""
    if turn is None:
        return
    nodes = spec.feed_ids()
    if len(nodes) < 2 or len(local_nodes(spec)) != 1:
        return  # one fed node, or several on this executor: nothing to even out here
    nparts, nfed = turn
    t0 = time.monotonic()
    pause, asked_failed, asked = 0.01, t0, False
    while True:
        try:
            ans = json.loads(_tfos.feed_turn(spec.coord_addr, spec.secret, "stage-%d" % stage, nparts, nfed,
                                             partition, executor_id, nodes, 5000))
        except Exception as exc:  # the coordinator cannot answer: the feed itself will say why
            logger.warning("partition %d: could not ask the coordinator for %s's turn (%s); feeding it now",
                           partition, spec.label(executor_id), exc)
            return
        if ans.get("go", True):
            return
        now = time.monotonic()
        if now - t0 >= feed_timeout:
            logger.warning("partition %d: %s has begun %d partitions of this feed and %s only %d (%s) after %g s "
                           "(feed_timeout); feeding it anyway", partition, spec.label(executor_id), ans["begun"],
                           spec.label(ans["behind"]), ans["behind_begun"],
                           "reading" if ans.get("behind_reads") else "it has read nothing yet", now - t0)
            return
        if failed is not None and now - asked_failed >= 1.0:
            asked_failed = now
            if failed():
                return  # the cluster failed: the feed reports it
        if ans.get("asked") and not asked:
            # the node waited for was asked to say now whether it reads
            # (its heartbeats say it once a second): ask again once it has
            asked = True
            time.sleep(_TURN_ASKED_S)
            continue
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def pickled_batches(rdd):
    """``rdd`` read as its pickled batches (an RDD whose partitions give
    bytes, one pickled list of rows each), or None when its rows are not
    held that way: its data come from Python code pipelined into the same
    task (an uncached map: there is nothing pickled to pass on), or Spark
    holds them in another format (text, marshal, Arrow). A feed task over
    it hands the batches to FeedClient.feed_pickled."""
    from pyspark.rdd import RDD, PipelinedRDD
    from pyspark.serializers import (AutoBatchedSerializer, BatchedSerializer, CloudPickleSerializer,
                                     NoOpSerializer, PickleSerializer)
    if isinstance(rdd, PipelinedRDD) and rdd._is_pipelinable():
        return None
    ser = rdd._jrdd_deserializer
    if type(ser) not in (AutoBatchedSerializer, BatchedSerializer) or \
            type(ser.serializer) not in (PickleSerializer, CloudPickleSerializer):
        return None
    return RDD(rdd._jrdd, rdd.ctx, NoOpSerializer())


def _feed_one(spec, iterator, feed_timeout, outcomes, arrow, failed=None, turn=None, pickled=False, skip=0):
    """Feed this task's partition to the node on this executor and wait until
    it is consumed. Records the outcome in ``outcomes`` (an accumulator of
    {partition: (state, message)}): 'done', 'terminated' (the node did not
    want more data), 'aborted' (its node failed while it was being fed) or
    'skipped' (the cluster had failed before it began). Returns the rows fed
    (Arrow) or None. Errors that are not a node failure are raised.
    ``failed``: see _wait_consumed; ``turn``: see _await_turn; ``pickled``:
    the iterator gives pickled batches (pickled_batches), of which the
    first ``skip`` rows are not fed."""
    tc = _task_context()
    partition = tc.partitionId() if tc is not None else 0
    # Spark's retry of this task (its Python worker died in the middle of
    # the partition) feeds it under the same key: when it lands on the same
    # executor, the node's ring skips the rows it already took (exactly
    # once); a later job's feed of the same partition id has another stage
    key = tc.stageId() if tc is not None else 0
    rows = None
    try:
        executor_id = _pick_node(spec, partition)
        _await_turn(spec, turn, key, partition, executor_id, feed_timeout, failed)
        client = _open_client(spec, executor_id, partition, feed_timeout)
    except NodeLost as exc:
        outcomes.add({partition: ("skipped", str(exc))})
        return rows
    except NodeEnded:
        outcomes.add({partition: ("terminated", None)})
        return rows
    try:
        if arrow:
            # streamed: each record batch goes into the ring as Spark hands
            # it over, so the node reads while the rest is converted
            rows = client.feed_arrow(iterator, partition, key=key)
        elif pickled:
            rows = client.feed_pickled(iterator, partition, key=key, skip=skip)
        else:
            rows = client.feed_partition(iterator, partition, key=key)
        ended = _wait_consumed(client, feed_timeout, failed)
        drain = _cluster_drain(spec) if ended else None
        if drain is not None:
            # the program ended at a drain (checkpoint now, then end) with
            # this partition unread: fed to the next attempt, not dropped
            outcomes.add({partition: ("aborted", _drained_text(partition, drain))})
        else:
            outcomes.add({partition: ("done", rows)})
    except _feed.FeedClosed as exc:
        # the node called terminate(), or its program ended without reading
        # on (not a failure): the rest of the feed is not wanted -- unless it
        # ended at a drain (its ring says "terminated" then too)
        drain = _cluster_drain(spec)
        if drain is not None:
            # the program ended at a drain (checkpoint now, then end): the
            # rest of the partition is fed to the next attempt, not dropped
            outcomes.add({partition: ("aborted", _drained_text(partition, drain))})
        elif _terminated(client) or _cluster_failure(spec, wait=2.0) is None:
            outcomes.add({partition: ("terminated", None)})
            for _ in iterator:
                pass
        else:
            outcomes.add({partition: ("aborted", str(_explain(spec, executor_id, partition, exc, client)))})
    except (_feed.FeedError, TimeoutError) as exc:
        # the node's program is gone (its agent shut the ring): no retry of
        # this task can succeed, so it is not raised to Spark (which ran it
        # 4 times); it is an outcome the driver raises with the node's
        # failure, once the coordinator has it (up to 5 s), or a
        # "terminated" when the program ended without reading on
        gone = _program_gone(client)
        drain = _cluster_drain(spec) if gone else None
        failure = None if drain is not None else _cluster_failure(spec, wait=5.0 if gone else 1.0)
        err = _explain(spec, executor_id, partition, exc, client)
        if drain is not None:
            outcomes.add({partition: ("aborted", _drained_text(partition, drain))})
        elif failure is None and not gone:
            raise err
        elif failure is None:
            outcomes.add({partition: ("terminated", None)})
        else:
            outcomes.add({partition: ("aborted", str(err))})
    finally:
        client.close()
    return rows


def _skip_rows(iterator, n):
    """The rows of a partition after its first n (already in a checkpoint)."""
    import itertools
    return itertools.islice(iterator, n, None) if n else iterator


_skip_arrow_rows = skip_arrow_rows  # record batches after the first n rows (session.py)

def _failed(spec):
    """For _wait_consumed: the cluster's failure, asked of the coordinator
    (once a second while a node has not read the partition). A node whose
    program failed before it took the consumer's role leaves no one in the
    ring whose death the ring could see: without it, the feed task waited
    until the driver cancelled the job (10 s)."""
    return lambda: _cluster_failure(spec, wait=0)


def feed_task(spec, feed_timeout, outcomes, skip=(), offsets=None, nparts=None, pickled=False):
    """The function of a train() stage on an RDD (foreachPartition over
    mapPartitionsWithIndex): partitions in ``skip`` were delivered before
    (or are in the checkpoint); of those in ``offsets``, the first rows are.
    With ``nparts`` (the RDD's partitions), nodes take turns (_await_turn).
    ``pickled``: the stage runs over pickled_batches(rdd)."""
    skip = frozenset(skip)
    offsets = dict(offsets or {})
    turn = (nparts, nparts - len(skip)) if nparts else None

    def run(index, iterator):
        if index in skip:
            pass
        elif pickled:
            _feed_one(spec, iterator, feed_timeout, outcomes, False, _failed(spec), turn, True, offsets.get(index, 0))
        else:
            _feed_one(spec, _skip_rows(iterator, offsets.get(index, 0)), feed_timeout, outcomes, False,
                      _failed(spec), turn)
        return iter(())

    return run


def feed_task_arrow(spec, feed_timeout, outcomes, skip=(), offsets=None, nparts=None):
    """The function of a train() stage on a DataFrame (mapInArrow): record
    batches pass through as Arrow IPC, with no per-row work. ``nparts``:
    as feed_task."""
    skip = frozenset(skip)
    offsets = dict(offsets or {})
    turn = (nparts, nparts - len(skip)) if nparts else None

    def run(iterator):
        import pyarrow as pa
        tc = _task_context()
        rows = None
        part = tc.partitionId() if tc is not None else 0
        if part not in skip:
            rows = _feed_one(spec, _skip_arrow_rows(iterator, offsets.get(part, 0)), feed_timeout, outcomes, True,
                             _failed(spec), turn)
        yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))

    return run


def infer_partition(spec, rows, feed_timeout, results_timeout=None, arrow=False, abort=None, chunks=False,
                    pickled=False):
    """Feed this task's partition (rows, or an iterable of Arrow record
    batches, fed as they come) to the node on this executor and return its
    results, one per row, in order (``chunks``: as the program's
    ``batch_results`` calls gave them, see FeedClient.collect_results). A
    node that read the whole partition and sends no result for
    ``results_timeout`` seconds fails the task, naming itself and the
    partition; ``abort``: see FeedClient.collect_results; ``pickled``: rows
    are pickled batches (pickled_batches)."""
    tc = _task_context()
    partition = tc.partitionId() if tc is not None else 0
    ended = ("partition %d: the node on this executor (host %s) has ended (its program returned), so nothing would "
             "answer its rows: an inference map_fun reads until the feed ends" % (partition, socket.gethostname()))
    try:
        executor_id = _pick_node(spec, partition)
    except NodeEnded:
        raise FeedTaskError(ended) from None
    with _NodeLock(spec, executor_id, feed_timeout):
        try:
            client = _open_client(spec, executor_id, partition, feed_timeout)
        except NodeEnded:
            raise FeedTaskError(ended) from None
        try:
            # key=None: a retry feeds the whole partition again (its results
            # are collected anew; the dead task's results went with it)
            if arrow:
                count = client.feed_arrow(rows, partition, key=None)
            elif pickled:  # rows: pickled batches (pickled_batches)
                count = client.feed_pickled(rows, partition, key=None)
            else:
                count = client.feed_partition(rows, partition, key=None)
            return client.collect_results(partition, count, results_timeout=results_timeout, abort=abort,
                                          chunks=chunks) if count else []
        except (_feed.FeedError, TimeoutError) as exc:
            raise _explain(spec, executor_id, partition, exc, client)
        finally:
            client.close(detach_output=True)


def inference_task(spec, feed_timeout, arrow=False, results_timeout=None, pickled=False):
    """The function of an inference() stage: the results of
    :func:`infer_partition`, one per row (Arrow: pickled in one row).
    ``pickled``: the stage runs over pickled_batches(rdd)."""

    def run(iterator):
        results = infer_partition(spec, iterator, feed_timeout, results_timeout, arrow, pickled=pickled)
        if arrow:
            import pyarrow as pa
            # mapInArrow wants an iterator
            return iter([pa.RecordBatch.from_pydict(
                {"results": [pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)]},
                schema=pa.schema([("results", pa.binary())]))])
        return iter(results)  # iterated in C (a generator cost 15 ns a row)

    return run
