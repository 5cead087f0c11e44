"""Feed throughput: a Python producer into a Python consumer that gets numpy
batches, through tfos's shared-memory ring, against TensorFlowOnSpark's
mechanism and multiprocessing.Queue, measured in the same run.

Three row shapes:
  small_rows   a 1-element row [x] (x an int; 8 bytes as int64)
  mnist_rows   an MNIST-like row: [784 small ints] (784 bytes as uint8)
  tensor_150k  a 150 KiB float tensor per row: [float32 array (200, 192)]

Four measurements:
  tfos           producer and consumer processes on one tfos ring (64 MiB).
                 The producer writes batches of rows as records, by the
                 fastest path the extension has: numpy columns through
                 _tfos.encode_columns (no per-row Python objects at all) when
                 it exists, else lists of rows through feed.encode_rows (the
                 C row encoder when present, pickle otherwise). The consumer is
                 feed.DataFeed.next_batch_arrays (numpy arrays by column).
                 Tensors also as tfos_views: next_batch_arrays(copy=False),
                 arrays that view the ring's records (no copy out of it).
  manager_queue  TFoS's mechanism: a multiprocessing BaseManager in its own
                 server process serving a queue (registered as get_queue);
                 the producer puts one row per call, the consumer does
                 get() + task_done() per row (as TFoS's DataFeed does) and
                 makes numpy batches of the rows (np.asarray per column).
  mp_queue       multiprocessing.Queue, put/get per row, same consumer.
  memcpy         np.copyto of a large buffer in this process, best of N.

Each run is time-boxed: the producer feeds for --seconds (default 1), then
ends the feed; each kind runs --rounds times (default 3), interleaved with the
others, and its best rate counts (the development box is shared: outside load
only ever slows a run). The rate is rows the consumer received *and verified*
over the time from the start signal to the consumer having verified the last
row. Every consumer
checks every row: the count against the producer's, the order and value of
every small row, every MNIST row against the expected pixels, and for tensors
the row index stamped into each tensor's first and last element plus one
whole tensor per batch. Queues are bounded (1024 rows, 64 tensors) so no
producer runs far ahead; this does not slow them.

MB/s counts the row's payload as the consumer's numpy array holds it in the
tfos columns path: 8, 784 and 153600 bytes per row; ratios are of rows/s.

Prints `name: value` lines. Usage:
  bench/feed.py [--quick] [--shape small|mnist|tensor|all] [--seconds S] [--rounds N]
                [--profile DIR] [--skip-baselines] [--encoding auto|columns|rows|pickle]
                [--manager-queue queue|joinable]
"""
import argparse
import ctypes
import multiprocessing
import multiprocessing.managers
import multiprocessing.queues
import os
import pickle
import queue
import signal
import sys
import time
import traceback

import numpy as np

import tfos._tfos as _tfos
from tfos import feed

CTX = multiprocessing.get_context("fork")
MB = 1e6

# ---- the rows ---------------------------------------------------------------

MNIST_POOL = 4096          # distinct MNIST rows, cycled (row i is pool[i % MNIST_POOL])
TENSOR_POOL = 128          # distinct tensors, cycled, each stamped with its row index
TENSOR_SHAPE = (200, 192)  # float32: 153600 bytes


class Shape(object):
    def __init__(self, key, name, row_bytes, rows_per_record, columns_per_record, consumer_batch, queue_max):
        self.key = key
        self.name = name
        self.row_bytes = row_bytes
        self.rows_per_record = rows_per_record        # rows / pickle paths (FeedClient's default: 1024)
        self.columns_per_record = columns_per_record  # numpy column path
        self.consumer_batch = consumer_batch
        self.queue_max = queue_max


SHAPES = {
    "small": Shape("small", "small_rows", 8, 1024, 65536, 1024, 1024),
    "mnist": Shape("mnist", "mnist_rows", 784, 1024, 1024, 1024, 1024),
    "tensor": Shape("tensor", "tensor_150k", 4 * TENSOR_SHAPE[0] * TENSOR_SHAPE[1], 32, 32, 32, 64),
}

# made in the parent before forking; the children inherit them
_mnist_arr = None    # (MNIST_POOL, 784) uint8
_mnist_lists = None  # the same as lists of Python ints
_tensors = None      # (TENSOR_POOL,) + TENSOR_SHAPE float32, pristine in every process but the producer's


def make_data(keys):
    global _mnist_arr, _mnist_lists, _tensors
    rng = np.random.default_rng(20261122)
    if "mnist" in keys and _mnist_arr is None:
        _mnist_arr = rng.integers(0, 256, size=(MNIST_POOL, 784), dtype=np.uint8)
        _mnist_lists = _mnist_arr.tolist()
    if "tensor" in keys and _tensors is None:
        _tensors = rng.standard_normal((TENSOR_POOL,) + TENSOR_SHAPE, dtype=np.float32)


def stamp_tensor(i):
    t = _tensors[i % TENSOR_POOL]
    t[0, 0] = i
    t[-1, -1] = i
    return t


def row_at(key, i):
    """Row i as a Python producer hands it over: a list of column values."""
    if key == "small":
        return [i]
    if key == "mnist":
        return [_mnist_lists[i % MNIST_POOL]]
    return [stamp_tensor(i)]


def rows_at(key, lo, hi):
    if key == "small":
        return [[x] for x in range(lo, hi)]
    if key == "mnist":
        pool = _mnist_lists
        return [[pool[x % MNIST_POOL]] for x in range(lo, hi)]
    return [[stamp_tensor(x)] for x in range(lo, hi)]


def column_at(key, lo, hi):
    """Rows lo..hi as one numpy column (no copy where the source allows)."""
    if key == "small":
        return np.arange(lo, hi, dtype=np.int64)
    if key == "mnist":
        return _pool_slice(_mnist_arr, lo, hi)
    s = lo % TENSOR_POOL
    if s + (hi - lo) > TENSOR_POOL:
        raise ValueError("tensor records must not wrap the pool")
    block = _tensors[s:s + (hi - lo)]
    idx = np.arange(lo, hi, dtype=np.float32)
    block[:, 0, 0] = idx
    block[:, -1, -1] = idx
    return block


def _pool_slice(pool, lo, k_hi):
    n = len(pool)
    k = k_hi - lo
    s = lo % n
    if s + k <= n:
        return pool[s:s + k]
    return np.take(pool, np.arange(lo, k_hi) % n, axis=0)


def verify(key, cols, pos):
    """Check one consumer batch (a tuple of numpy columns) starting at row pos;
    returns its row count."""
    if len(cols) != 1:
        raise AssertionError("row %d: expected 1 column, got %d" % (pos, len(cols)))
    c = cols[0]
    k = len(c)
    if key == "small":
        c = c.reshape(k)
        if not np.array_equal(c, np.arange(pos, pos + k)):
            bad = int(np.nonzero(c != np.arange(pos, pos + k))[0][0])
            raise AssertionError("small row %d: got %r" % (pos + bad, c[bad]))
    elif key == "mnist":
        if c.shape != (k, 784) or not np.array_equal(c, _pool_slice(_mnist_arr, pos, pos + k)):
            raise AssertionError("mnist rows %d..%d: wrong pixels (shape %s)" % (pos, pos + k, c.shape))
    else:
        if c.shape != (k,) + TENSOR_SHAPE:
            raise AssertionError("tensor rows %d..%d: shape %s" % (pos, pos + k, c.shape))
        idx = np.arange(pos, pos + k, dtype=np.float32)
        if not (np.array_equal(c[:, 0, 0], idx) and np.array_equal(c[:, -1, -1], idx)):
            raise AssertionError("tensor rows %d..%d: wrong row stamps" % (pos, pos + k))
        r = k // 2
        got = c[r].reshape(-1)[1:-1]
        want = _tensors[(pos + r) % TENSOR_POOL].reshape(-1)[1:-1]
        if not np.array_equal(got, want):
            raise AssertionError("tensor row %d: wrong values" % (pos + r))
    return k


# ---- processes ----------------------------------------------------------------

def _child_setup():
    """In every child: die with the parent, leave Ctrl-C to the parent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getppid() == 1:
        os._exit(1)


_profile_dir = None  # --profile: each child's run under cProfile, stats written there


def _child(fn, conn, go, args):
    _child_setup()
    try:
        state = fn("setup", None, *args)
        conn.send(("ready",))
        if not go.wait(60):
            raise TimeoutError("no start signal in 60 s")
        if _profile_dir:
            import cProfile
            prof = cProfile.Profile()
            result = prof.runcall(fn, "run", state, *args)
            prof.dump_stats(os.path.join(_profile_dir, "%s-%s.prof" % (fn.__name__, args[0])))
        else:
            result = fn("run", state, *args)
        conn.send(("done",) + tuple(result))
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass
        os._exit(1)
    os._exit(0)


class Runner(object):
    """Starts the processes of one measurement and cleans them all up."""

    def __init__(self):
        self.procs = []

    def start(self, fn, go, *args):
        r, w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=_child, args=(fn, w, go, args), daemon=True)
        p.start()
        w.close()
        self.procs.append(p)
        return p, r

    def cleanup(self):
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join(2)
        self.procs = []


def _recv(conn, proc, what, timeout):
    if not conn.poll(timeout):
        raise RuntimeError("%s: no answer in %.0f s (alive: %s)" % (what, timeout, proc.is_alive()))
    try:
        msg = conn.recv()
    except EOFError:
        raise RuntimeError("%s exited (code %s) without an answer" % (what, proc.exitcode))
    if msg[0] == "error":
        raise RuntimeError("%s failed:\n%s" % (what, msg[1]))
    return msg


def measure(producer, consumer, pargs, cargs, timeout):
    """Run one producer/consumer pair; returns (rows, seconds, producer extra)."""
    run = Runner()
    try:
        go = CTX.Event()
        cp, cconn = run.start(consumer, go, *cargs)
        pp, pconn = run.start(producer, go, *pargs)
        _recv(cconn, cp, "consumer", 60)
        _recv(pconn, pp, "producer", 60)
        t0 = time.perf_counter()
        go.set()
        try:
            pmsg = _recv(pconn, pp, "producer", timeout)
        except RuntimeError:
            if cconn.poll(5):  # the consumer's failure is the cause (a producer sees the feed closed)
                _recv(cconn, cp, "consumer", 0)
            raise
        cmsg = _recv(cconn, cp, "consumer", timeout)
        produced, extra = pmsg[1], pmsg[2]
        consumed, t_end = cmsg[1], cmsg[2]
        if consumed != produced:
            raise RuntimeError("consumer verified %d rows, producer wrote %d" % (consumed, produced))
        for p in (cp, pp):
            p.join(10)
        return consumed, t_end - t0, extra
    finally:
        run.cleanup()


# -- tfos

def tfos_producer(phase, state, key, fd, seconds, encoding):
    shape = SHAPES[key]
    if phase == "setup":
        return _tfos.Ring(fd, _tfos.ROLE_PRODUCER)
    ring = state
    deadline = time.perf_counter() + seconds
    tmo = 60000
    n, used = 0, set()
    ring.partition_begin(1, tmo)
    if encoding == "columns":
        step = shape.columns_per_record
        while time.perf_counter() < deadline:
            # encoded straight into the reserved ring slot: one memcpy
            ring.write_columns(feed.TAG_COLUMNS, [("x", column_at(key, n, n + step))], tmo)
            n += step
        used.add("columns")
    else:
        step = shape.rows_per_record
        while time.perf_counter() < deadline:
            rows = rows_at(key, n, n + step)
            if encoding == "pickle":
                ring.write(feed.TAG_PICKLE, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), tmo)
                used.add("pickle")
            else:
                ring.write_rows(feed.TAG_COLUMNS, rows, tmo)  # the C row encoder, into the ring
                used.add("rows")
            n += step
    ring.partition_end(tmo)
    ring.end_feed(tmo)
    ring.close()
    return n, ",".join(sorted(used))


def tfos_consumer(phase, state, key, in_fd, out_fd, copy=True):
    if phase == "setup":
        mgr = feed.FeedManager(in_fd=in_fd, out_fd=out_fd)
        return mgr, feed.DataFeed(mgr, train_mode=True, timeout=60)
    mgr, df = state
    batch = SHAPES[key].consumer_batch
    pos = 0
    while True:
        cols = df.next_batch_arrays(batch, copy=copy)
        if not len(cols) or not len(cols[0]):
            break
        pos += verify(key, cols, pos)
    t_end = time.perf_counter()
    if not df.should_stop():
        raise AssertionError("the feed ended but should_stop() is False")
    mgr.close()
    return pos, t_end


def run_tfos(key, seconds, encoding, copy=True):
    in_fd = _tfos.ring_create(64 << 20)
    out_fd = _tfos.ring_create(1 << 16)
    try:
        return measure(tfos_producer, tfos_consumer, (key, in_fd, seconds, encoding), (key, in_fd, out_fd, copy),
                       seconds + 120)
    finally:
        os.close(in_fd)
        os.close(out_fd)


# -- queues

class QueueManager(multiprocessing.managers.BaseManager):
    pass


_served = {}


def _get_queue(name):
    return _served[name]


QueueManager.register("get_queue", callable=_get_queue)


def manager_server(conn, kind, maxsize, authkey):
    """The manager's server process (BaseManager.start() does the same)."""
    _child_setup()
    _served["input"] = CTX.JoinableQueue(maxsize) if kind == "joinable" else queue.Queue(maxsize)
    server = QueueManager(authkey=authkey).get_server()
    conn.send(server.address)
    conn.close()
    server.serve_forever()


def _connect(address, authkey):
    m = QueueManager(address=address, authkey=authkey)
    m.connect()
    return m.get_queue("input")


def queue_producer(phase, state, key, q, seconds):
    if phase == "setup":
        if isinstance(q, tuple):  # a manager's address: connect as TFoS's feed task does
            q = _connect(*q)
        return q
    q = state
    deadline = time.perf_counter() + seconds
    n = 0
    while True:
        if (n & 63) == 0 and time.perf_counter() >= deadline:
            break
        q.put(row_at(key, n))
        n += 1
    q.put(None)
    if isinstance(q, multiprocessing.queues.Queue):  # flush its feeder thread before exiting
        q.close()
        q.join_thread()
    return n, ""


def queue_consumer(phase, state, key, q, task_done):
    if phase == "setup":
        if isinstance(q, tuple):
            q = _connect(*q)
        return q
    q = state
    batch = SHAPES[key].consumer_batch
    pos, done = 0, False
    while not done:
        rows = []
        while len(rows) < batch:
            item = q.get(True, 60)
            if task_done:
                q.task_done()
            if item is None:
                done = True
                break
            rows.append(item)
        if rows:
            cols = tuple(np.asarray(c) for c in zip(*rows))  # what DataFeed + the user's np.array do
            pos += verify(key, cols, pos)
    return pos, time.perf_counter()


def run_manager_queue(key, seconds, kind):
    authkey = os.urandom(16)
    run = Runner()  # the manager's server process
    try:
        r, w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=manager_server, args=(w, kind, SHAPES[key].queue_max, authkey), daemon=True)
        p.start()
        w.close()
        run.procs.append(p)
        if not r.poll(30):
            raise RuntimeError("the manager process did not start")
        a = (r.recv(), authkey)
        return measure(queue_producer, queue_consumer, (key, a, seconds), (key, a, True), seconds + 300)
    finally:
        run.cleanup()


def run_mp_queue(key, seconds):
    q = CTX.Queue(SHAPES[key].queue_max)
    try:
        return measure(queue_producer, queue_consumer, (key, q, seconds), (key, q, False), seconds + 300)
    finally:
        q.close()
        q.cancel_join_thread()


# -- memcpy

def memcpy_bandwidth(nbytes, repeat):
    src = np.full(nbytes // 8, 7, dtype=np.int64)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    if dst[-1] != 7:
        raise RuntimeError("memcpy check failed")
    return nbytes / best


# ---- main ---------------------------------------------------------------------

def pick_encoding(requested):
    if requested != "auto":
        if requested == "columns" and not hasattr(_tfos, "encode_columns"):
            sys.exit("--encoding columns: this tfos._tfos has no encode_columns")
        return requested
    if hasattr(_tfos, "encode_columns"):
        return "columns"
    if hasattr(_tfos, "encode_rows"):
        return "rows"
    return "pickle"


def out(name, value):
    print("%s: %s" % (name, value), flush=True)


def fmt(x):
    if x >= 100:
        return "%.0f" % x
    if x >= 1:
        return "%.2f" % x
    return "%.3f" % x


def _on_term(signo, frame):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round of 0.3 s runs and a smaller memcpy")
    ap.add_argument("--shape", choices=["small", "mnist", "tensor", "all"], default="all")
    ap.add_argument("--seconds", type=float, default=None, help="feeding time per measurement (default 1, quick 0.3)")
    ap.add_argument("--rounds", type=int, default=None, help="measurements of each kind, interleaved; the best "
                                                             "counts (default 3, quick 1)")
    ap.add_argument("--encoding", choices=["auto", "columns", "rows", "pickle"], default="auto",
                    help="the tfos producer's path (auto: the fastest the extension has)")
    ap.add_argument("--manager-queue", choices=["queue", "joinable"], default="queue",
                    help="the queue the manager serves: queue.Queue, or multiprocessing.JoinableQueue as "
                         "TFoS's TFManager does (slower still)")
    ap.add_argument("--skip-baselines", action="store_true", help="tfos only (for profiling)")
    ap.add_argument("--profile", metavar="DIR", help="run every producer and consumer under cProfile, writing "
                                                      "DIR/<function>-<shape>.prof")
    a = ap.parse_args()
    seconds = a.seconds if a.seconds is not None else (0.3 if a.quick else 1.0)
    rounds = a.rounds if a.rounds is not None else (1 if a.quick else 3)
    keys = ["small", "mnist", "tensor"] if a.shape == "all" else [a.shape]
    encoding = pick_encoding(a.encoding)
    signal.signal(signal.SIGTERM, _on_term)
    if a.profile:
        global _profile_dir
        os.makedirs(a.profile, exist_ok=True)
        _profile_dir = os.path.abspath(a.profile)
    make_data(keys)

    out("feed_cpu_cores", os.cpu_count())
    out("feed_load_avg_1m", "%.2f" % os.getloadavg()[0])
    out("feed_seconds_per_run", fmt(seconds))
    out("feed_rounds", rounds)
    out("tfos_encoding", encoding)
    memcpy = memcpy_bandwidth((64 if a.quick else 256) << 20, 5 if a.quick else 7)
    out("memcpy_mb_per_s", fmt(memcpy / MB))
    methods = ["tfos"] if a.skip_baselines else ["tfos", "manager_queue", "mp_queue"]
    for key in keys:
        shape = SHAPES[key]
        name = shape.name
        out(name + "_row_bytes", shape.row_bytes)
        # tensors: also next_batch_arrays(copy=False), arrays viewing the ring
        ms = methods + ["tfos_views"] if key == "tensor" else methods
        best = dict.fromkeys(ms, 0.0)
        verified = dict.fromkeys(ms, 0)
        used = set()
        for _ in range(rounds):  # interleaved, best of each: the box is shared, noise only slows
            for m in ms:
                if m.startswith("tfos"):
                    n, dt, u = run_tfos(key, seconds, encoding, copy=m == "tfos")
                    used.update(u.split(","))
                elif m == "manager_queue":
                    n, dt, _ = run_manager_queue(key, seconds, a.manager_queue)
                else:
                    n, dt, _ = run_mp_queue(key, seconds)
                best[m] = max(best[m], n / dt)
                verified[m] += n
        if used != {encoding}:
            out(name + "_tfos_encoding", ",".join(sorted(used)))
        for m in ms:
            out("%s_%s_rows_verified" % (name, m), verified[m])
        for m in ms:
            out("%s_%s_rows_per_s" % (name, m), fmt(best[m]))
            out("%s_%s_mb_per_s" % (name, m), fmt(best[m] * shape.row_bytes / MB))
        if not a.skip_baselines:
            out(name + "_vs_manager_queue", fmt(best["tfos"] / best["manager_queue"]))
            out(name + "_vs_mp_queue", fmt(best["tfos"] / best["mp_queue"]))
        if key == "small":
            out("small_rows_target_vs_manager_queue", ">= 100")
        if key == "tensor":
            out("tensor_150k_vs_memcpy", "%.3f" % (best["tfos"] * shape.row_bytes / memcpy))
            out("tensor_150k_views_vs_memcpy", "%.3f" % (best["tfos_views"] * shape.row_bytes / memcpy))
            out("tensor_150k_target_vs_memcpy", ">= 0.500")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
