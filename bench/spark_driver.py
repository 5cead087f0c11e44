"""One side of bench/spark.py: a TensorFlowOnSpark program, run as its own
Spark driver on the benchmark's standalone cluster.

The same source runs both sides; the only difference is the import below,
chosen by --impl:

    from tensorflowonspark import TFCluster, TFNode     # --impl tensorflowonspark
    from tfos import TFCluster, TFNode                  # --impl tfos

run with the python of that side's venv (which its executors use too). Each
workload forms a cluster of 2 nodes (num_executors=2, num_ps=0,
InputMode.SPARK), feeds it, and shuts it down, in this order:

  digits     a small Keras model trained on scikit-learn's digits (1797 rows,
             from the npz the orchestrator wrote), fed with
             cluster.train(rdd, num_epochs=K); each node trains its own
             replica on the rows it gets (train_on_batch, no gradient sync)
             and writes its row count and its accuracy on all 1797 digits;
             the driver checks the row counts (sum == 1797 * K). It runs
             first, on a fresh application, so that both sides pay their
             TensorFlow import (TFoS in its executors' Python workers at
             run(), tfos in the node programs) in its wall time.
  feed       cluster.train(rdd, num_epochs=1) of N small rows (10 floats and
             an int label); map_fun only counts the rows of
             DataFeed(ctx.mgr, True).next_batch(1000) (and notes when the
             last ones came) and writes its count to a file, which the driver
             checks (sum == N). The time is end to end: until train() has
             returned and the nodes have read every row. Before it, a plain
             Spark job that only iterates the same RDD gives Spark's own rate.
  inference  cluster.inference(rdd) of N rows, map_fun answering each row with
             its label (batch_results); the driver collects the results and
             checks that they are exactly the N labels, in order. tfos's warm
             runs alternate collect() and count() of the results (count() is
             checked to give N). tfos runs it a second time on a cluster of
             its own through its fast path (inference_arrays: numpy views
             of the ring in, the labels' column answered as one array per
             batch).

The input RDDs are cached (and counted) before any clock starts;
spark.locality.wait is 0 so feed tasks go to whichever executor is free
(else tfos's short tasks follow the cache placement). Writes one JSON object
with the measurements to --out; progress goes to stderr. Exits
non-zero on any error or failed check.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time

IMPL = "tfos"
if "--impl" in sys.argv[1:-1]:
    IMPL = sys.argv[sys.argv.index("--impl") + 1]

# ---- the one line that differs between the two sides ------------------------
if IMPL == "tensorflowonspark":
    from tensorflowonspark import TFCluster, TFNode
else:
    from tfos import TFCluster, TFNode
# ------------------------------------------------------------------------------

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "spark"))
from sparkcluster import SparkCluster  # noqa: E402

NUM_EXECUTORS = 2
RESULT_WAIT_S = 60.0


def log(msg):
    print("[spark-bench %s] %s" % (IMPL, msg), file=sys.stderr, flush=True)


# ---- map_funs (identical for both sides; shipped to the executors by value) ---

def keeper_memory(ctx):
    """The memory of the process that keeps this node's feed, read once the
    feed is over: TensorFlowOnSpark's manager (ctx.mgr's server process,
    which TFManager.start forks from the PySpark worker that ran the node's
    task) or tfos's agent (the program's parent, `tfos node`). {"comm",
    "rss_kib", "uss_kib"} (USS: its private pages), or None where /proc
    cannot tell."""
    import os
    proc = getattr(getattr(ctx, "mgr", None), "_process", None)
    pid = proc.pid if proc is not None and getattr(proc, "pid", None) else os.getppid()
    try:
        with open("/proc/%d/comm" % pid) as f:
            comm = f.read().strip()
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        with open("/proc/%d/smaps_rollup" % pid) as f:
            uss = sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except (OSError, StopIteration, ValueError):
        return None
    return {"comm": comm, "rss_kib": rss, "uss_kib": uss}


def count_feed(args, ctx, arrays):
    """Count the rows of this node's feed, in batches of 1000: next_batch
    (TFoS's API, lists of rows) or, with ``arrays``, next_batch_arrays
    (tfos's fast path); write the count and when the last rows came."""
    import json
    import os
    import time
    feed = TFNode.DataFeed(ctx.mgr, True)
    rows = 0
    last = None  # wall clock when the last rows arrived
    while not feed.should_stop():
        if arrays:
            cols = feed.next_batch_arrays(1000)
            got = len(cols[0]) if len(cols) else 0
        else:
            got = len(feed.next_batch(1000))
        if got:
            rows += got
            last = time.time()
    path = os.path.join(args.out_dir, "feed-%d.json" % ctx.executor_id)
    with open(path + ".tmp", "w") as f:
        json.dump({"executor_id": ctx.executor_id, "rows": rows, "last_rows_at": last,
                   "keeper": keeper_memory(ctx)}, f)
    os.rename(path + ".tmp", path)


def feed_fun(args, ctx):
    count_feed(args, ctx, False)


def feed_arrays_fun(args, ctx):
    """The consumer of the dataframe and feed_arrays runs (tfos only)."""
    count_feed(args, ctx, True)


def inference_fun(args, ctx):
    import json
    import os
    feed = TFNode.DataFeed(ctx.mgr, False)
    rows = 0
    while not feed.should_stop():
        batch = feed.next_batch(1000)
        if len(batch):
            feed.batch_results([r[-1] for r in batch])
            rows += len(batch)
    path = os.path.join(args.out_dir, "inference-%d.json" % ctx.executor_id)
    with open(path + ".tmp", "w") as f:
        json.dump({"executor_id": ctx.executor_id, "rows": rows}, f)
    os.rename(path + ".tmp", path)


def inference_arrays_fun(args, ctx):
    """tfos's fast path of inference_fun: columns as numpy views into the
    ring, the labels' column answered as one array per batch."""
    import json
    import os
    feed = TFNode.DataFeed(ctx.mgr, False)
    rows = 0
    while not feed.should_stop():
        cols = feed.next_batch_arrays(1000, copy=False)
        if len(cols) and len(cols[-1]):
            feed.batch_results(cols[-1])
            rows += len(cols[-1])
    path = os.path.join(args.out_dir, "inference-%d.json" % ctx.executor_id)
    with open(path + ".tmp", "w") as f:
        json.dump({"executor_id": ctx.executor_id, "rows": rows}, f)
    os.rename(path + ".tmp", path)


def digits_fun(args, ctx):
    import json
    import os
    import time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.time()
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)  # one core per executor
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(args.seed + ctx.executor_id)
    keras = tf.keras
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    t_ready = time.time()
    feed = TFNode.DataFeed(ctx.mgr, True)
    rows = steps = 0
    wait_s = 0.0  # time in next_batch (waiting for the feed)
    while not feed.should_stop():
        t = time.time()
        batch = feed.next_batch(args.batch_size)
        wait_s += time.time() - t
        if not len(batch):
            continue
        x = np.asarray([r[0] for r in batch], dtype=np.float32)
        y = np.asarray([r[1] for r in batch], dtype=np.int64)
        model.train_on_batch(x, y)
        rows += len(batch)
        steps += 1
    t_fed = time.time()
    data = np.load(args.digits_npz)
    _, acc = model.evaluate(data["x"], data["y"], verbose=0, batch_size=256)
    path = os.path.join(args.out_dir, "digits-%d.json" % ctx.executor_id)
    with open(path + ".tmp", "w") as f:
        json.dump({"executor_id": ctx.executor_id, "rows": rows, "steps": steps, "accuracy": float(acc),
                   "tf_setup_s": t_ready - t0, "train_s": t_fed - t_ready,
                   "feed_wait_s": wait_s}, f)
    os.rename(path + ".tmp", path)


# ---- driver side ----------------------------------------------------------------

def feed_row(i):
    base = float(i % 1000)
    return (base, base + 0.5, base + 1.0, base + 1.5, base + 2.0,
            base + 2.5, base + 3.0, base + 3.5, base + 4.0, base + 4.5, i)


def cached(rdd, name):
    """Persist and materialise ``rdd`` before any clock starts; returns (rdd,
    cached partitions, partitions)."""
    from pyspark import StorageLevel
    rdd = rdd.setName(name).persist(StorageLevel.MEMORY_ONLY)
    n = rdd.count()
    infos = [i for i in rdd.context._jsc.sc().getRDDStorageInfo() if i.id() == rdd.id()]
    cached_parts = infos[0].numCachedPartitions() if infos else 0
    return rdd, n, cached_parts


def wait_files(out_dir, prefix, n, timeout=RESULT_WAIT_S):
    """The n result files (prefix-<executor_id>.json) written by the map_funs."""
    deadline = time.monotonic() + timeout
    while True:
        names = sorted(f for f in os.listdir(out_dir) if f.startswith(prefix + "-") and f.endswith(".json"))
        if len(names) >= n:
            out = []
            for name in names:
                with open(os.path.join(out_dir, name)) as f:
                    out.append(json.load(f))
            return out
        if time.monotonic() > deadline:
            raise RuntimeError("after %.0f s, %d of the %d nodes wrote their %s result (%s)"
                               % (timeout, len(names), n, prefix, names))
        time.sleep(0.02)


def fresh_dir(base, name):
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    return d


READY_TIMEOUT = None  # --ready-timeout (tfos only): run()'s wait for the programs to read; None: its default


def run_cluster(sc, fun, tf_args):
    extra = {} if READY_TIMEOUT is None else {"ready_timeout": READY_TIMEOUT}
    return TFCluster.run(sc, fun, tf_args, NUM_EXECUTORS, 0, False, TFCluster.InputMode.SPARK, **extra)


def _drain(iterator):
    for _ in iterator:
        pass


def plain_spark_rate(rdd, n):
    """Rows/s of a plain Spark job that only iterates the same cached RDD in
    the Python workers: the most any feed through Spark's Python workers
    could reach on this cluster."""
    t0 = time.monotonic()
    rdd.foreachPartition(_drain)
    return n / (time.monotonic() - t0)


def _count_arrow(batches):
    import pyarrow as pa
    n = 0
    for rb in batches:
        n += rb.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))


def plain_arrow_rate(df, n):
    """Rows/s of a mapInArrow stage over the same cached DataFrame that only
    counts its record batches: the ceiling of the DataFrame (Arrow) feed."""
    t0 = time.monotonic()
    got = sum(r[0] for r in df.mapInArrow(_count_arrow, "n long").collect())
    dt = time.monotonic() - t0
    if got != n:
        raise RuntimeError("the mapInArrow ceiling counted %d rows of %d" % (got, n))
    return n / dt


def _label(row):
    return row[-1]


def plain_inference_rates(rdd, n, cpu=None):
    """Rows/s of the plain Spark jobs that inference() stands in for:
    rdd.map(identity).count() (the issue's ceiling) and rdd.map(label)
    .collect() (the same answers delivered to the driver, as inference()
    does). ``cpu``: a list to which the host's CPU seconds by kind over the
    count go."""
    c0 = cpu_seconds() if cpu is not None else None
    t0 = time.monotonic()
    got = rdd.map(lambda r: r).count()
    t1 = time.monotonic()
    if cpu is not None:
        cpu.append(cpu_delta(c0, cpu_seconds()))
    labels = rdd.map(_label).collect()
    t2 = time.monotonic()
    if got != n or len(labels) != n:
        raise RuntimeError("the inference ceilings counted %d and %d rows of %d" % (got, len(labels), n))
    return n / (t1 - t0), n / (t2 - t1)


FIRST_PLAIN = []  # the rate of each warm-up run of ceiling_runs: the plain job's own first run


def ceiling_runs(measure, runs=2, warm_up=True):
    """``runs`` runs of a plain Spark job (its rates), after one run to warm
    it up (the JVM's code paths, the Python workers) unless ``warm_up`` is
    false; that run's rate, the plain job's first, goes to FIRST_PLAIN. Its
    jobs last 0.2-0.6 s, so single runs scatter: the ceiling is the median
    of the runs before and after the cluster, as tfos's warm rate is the
    median of its warm runs."""
    if warm_up:
        FIRST_PLAIN.append(measure())
    return [measure() for _ in range(runs)]


def warm_trains():
    """How many more times a workload runs on its cluster after the first
    (tfos only: the first run includes the node programs' start, which the
    warm runs against warm ceilings leave out; the baseline's 30 s feed
    runs once, as before). Each warm run follows a run of its plain job
    (interleaved())."""
    return 3 if IMPL == "tfos" else 0


def interleaved(n, seconds, plain_rates):
    """The median, over the warm runs, of each run's rate over the rate of
    the plain job run right before it on the same cluster. Pairs cancel
    what drifts between the blocks of runs before and after the cluster (the
    JVMs' warm-up, the machine's speed), which moved the block medians'
    ratio by up to 0.15 from one run of the benchmark to the next."""
    return statistics.median((n / s) / p for s, p in zip(seconds, plain_rates))


CPU_KINDS = ("workers", "programs", "jvms", "agents")


def cpu_seconds():
    """CPU seconds so far of this host's processes, by kind: ``workers``
    (Spark's Python workers and their daemon), ``programs`` (tfos's node
    programs), ``jvms`` (the executors, this driver's JVM) and ``agents``
    (tfos's agents and coordinator); anything else on the host is left out.
    Linux /proc: the benchmark's cluster runs on this host. A process that
    ends between two readings takes its time with it (none does within a
    warm run)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(CPU_KINDS, 0.0)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cmd = b" ".join(argv)
        if b"tfos._sparkprog" in cmd:
            kind = "programs"
        elif b"pyspark.daemon" in cmd or b"pyspark/worker" in cmd:
            kind = "workers"
        elif argv[0].endswith(b"java"):
            kind = "jvms"
        elif argv[0].endswith(b"/bin/tfos"):
            kind = "agents"
        else:
            continue
        out[kind] += (int(fields[11]) + int(fields[12])) / hz  # utime + stime
    return out


def cpu_delta(before, after):
    return {k: max(0.0, after[k] - before[k]) for k in CPU_KINDS}


def workload_feed(sc, rdd, n, opts, fun=None, name="feed", ceiling=None):
    """cluster.train(rdd or DataFrame) of n rows, once right after run() and
    then warm_trains() more times on the same cluster; ``ceiling`` measures
    the plain Spark job over the same data (the median of 2 warm runs before
    the cluster and 2 after it)."""
    out_dir = fresh_dir(opts.work, "%s-%s-r%d" % (IMPL, name, opts.round))
    tf_args = argparse.Namespace(out_dir=out_dir)
    ceiling = ceiling or (lambda: plain_spark_rate(rdd, n))
    plain_runs = ceiling_runs(ceiling)
    plain_first = FIRST_PLAIN[-1]
    t0 = time.monotonic()
    cluster = run_cluster(sc, fun or feed_fun, tf_args)
    t1 = time.monotonic()
    w1 = time.time()
    cluster.train(rdd, num_epochs=1)
    t2 = time.monotonic()
    warm, paired, cpu_plain, cpu_tfos = [], [], [], []
    for _ in range(warm_trains()):
        # the host's CPU seconds by kind over each run: on a host whose
        # cores both jobs keep busy, rate ratios follow CPU ratios
        c0 = cpu_seconds()
        paired.append(ceiling())  # the plain job right before each warm run
        c1 = cpu_seconds()
        tw = time.monotonic()
        cluster.train(rdd, num_epochs=1)
        warm.append(time.monotonic() - tw)
        cpu_plain.append(cpu_delta(c0, c1))
        cpu_tfos.append(cpu_delta(c1, cpu_seconds()))
    t2w = time.monotonic()
    cluster.shutdown()
    t3 = time.monotonic()
    res = wait_files(out_dir, "feed", NUM_EXECUTORS)
    t4 = time.monotonic()
    plain_runs += ceiling_runs(ceiling, warm_up=False)
    plain = statistics.median(plain_runs)
    rows = sum(r["rows"] for r in res)
    runs = 1 + len(warm)
    if rows != n * runs:
        raise RuntimeError("%s: the nodes consumed %d rows, %d runs of the data have %d (per node: %s)"
                           % (name, rows, runs, n * runs, [(r["executor_id"], r["rows"]) for r in res]))
    # End to end: until train() has returned *and* the nodes have every row
    # (TFoS's train() returns once its queues are drained; tfos's once the
    # nodes acknowledged every partition; the nodes' last row is the check
    # for a feed that would return early).
    last = max(r["last_rows_at"] for r in res if r["last_rows_at"] is not None)
    feed_s = max(t2 - t1, last - w1) if not warm else t2 - t1
    out = {"rows": n, "start_s": t1 - t0, "train_s": t2 - t1, "consumed_s": last - w1, "feed_s": feed_s,
           "shutdown_s": t3 - t2w, "total_s": t3 - t0, "results_after_shutdown_s": t4 - t3,
           "rows_per_s": n / feed_s, "per_node_rows": sorted(r["rows"] for r in res),
           "plain_spark_rows_per_s": plain, "plain_spark_runs_rows_per_s": plain_runs,
           "plain_first_rows_per_s": plain_first, "keepers": [r.get("keeper") for r in res]}
    if warm:
        out["warm_train_s"] = warm
        out["warm_rows_per_s"] = n / statistics.median(warm)
        out["last_row_after_warm_s"] = last - (w1 + t2w - t1)
        out["interleaved_plain_rows_per_s"] = paired
        out["interleaved_vs_ceiling"] = interleaved(n, warm, paired)
        out["cpu_plain_s"], out["cpu_tfos_s"] = cpu_plain, cpu_tfos
    log("%s: %d rows in %.2f s: %.0f rows/s (train() returned after %.2f s, last row read after %.2f s; "
        "start %.2f s, shutdown %.2f s; rows per node %s; plain Spark job over the same data: %.0f rows/s)%s"
        % (name, n, feed_s, out["rows_per_s"], out["train_s"], out["consumed_s"], out["start_s"], out["shutdown_s"],
           out["per_node_rows"], plain, "; warm runs: %s s, %.0f rows/s" % (
               ", ".join("%.2f" % w for w in warm), out["warm_rows_per_s"]) if warm else ""))
    return out


def workload_inference(sc, rdd, n, opts, fun=None, name="inference"):
    out_dir = fresh_dir(opts.work, "%s-%s-r%d" % (IMPL, name, opts.round))
    tf_args = argparse.Namespace(out_dir=out_dir)
    plain_first = plain_inference_rates(rdd, n)  # warm-up: the plain jobs' own first runs
    runs = [plain_inference_rates(rdd, n) for _ in range(2)]
    t0 = time.monotonic()
    cluster = run_cluster(sc, fun or inference_fun, tf_args)
    t1 = time.monotonic()
    results = cluster.inference(rdd).collect()
    t2 = time.monotonic()
    # warm runs (tfos): count() and collect() in turn; count() is what the
    # issue's ceiling, rdd.map(identity).count(), does (no results to the
    # driver), collect() what rdd.map(label).collect() does. Each pair
    # follows the plain pair, in the same order: each count comes after a
    # collect, as the plain count does.
    warm, warm_count, paired, cpu_plain, cpu_tfos = [], [], [], [], []
    for _ in range(warm_trains()):
        paired.append(plain_inference_rates(rdd, n, cpu_plain))
        c0 = cpu_seconds()
        tw = time.monotonic()
        counted = cluster.inference(rdd).count()
        warm_count.append(time.monotonic() - tw)
        cpu_tfos.append(cpu_delta(c0, cpu_seconds()))
        if counted != n:
            raise RuntimeError(name + ": count() of the results gave %d for %d rows" % (counted, n))
        tw = time.monotonic()
        again = cluster.inference(rdd).collect()
        warm.append(time.monotonic() - tw)
        if again != results:
            raise RuntimeError(name + ": a warm run returned other results than the first")
    t2w = time.monotonic()
    cluster.shutdown()
    t3 = time.monotonic()
    res = wait_files(out_dir, "inference", NUM_EXECUTORS)
    runs += [plain_inference_rates(rdd, n) for _ in range(2)]
    # each ceiling: the median of its 4 runs (2 before the cluster, 2 after)
    ceilings = [statistics.median(kind) for kind in zip(*runs)]
    if len(results) != n:
        raise RuntimeError(name + ": %d results for %d rows" % (len(results), n))
    bad = next((i for i, r in enumerate(results) if r != i), None)
    if bad is not None:
        raise RuntimeError(name + ": result %d is %r, expected %d (results out of order or wrong)"
                           % (bad, results[bad], bad))
    rows = sum(r["rows"] for r in res)
    if IMPL == "tfos" and rows != n * (1 + len(warm) + len(warm_count)):
        raise RuntimeError(name + ": the nodes answered %d rows in %d runs of %d"
                           % (rows, 1 + len(warm) + len(warm_count), n))
    out = {"rows": n, "start_s": t1 - t0, "inference_s": t2 - t1, "shutdown_s": t3 - t2w, "total_s": t3 - t0,
           "rows_per_s": n / (t2 - t1), "rows_answered_by_nodes": rows,
           "plain_map_count_rows_per_s": ceilings[0], "plain_map_collect_rows_per_s": ceilings[1],
           "plain_first_rows_per_s": plain_first[1]}  # collect(), as tfos's first run
    if warm:
        out["warm_inference_s"] = warm
        out["warm_rows_per_s"] = n / statistics.median(warm)
        out["warm_count_s"] = warm_count
        out["warm_count_rows_per_s"] = n / statistics.median(warm_count)
        out["interleaved_plain_rows_per_s"] = paired
        out["interleaved_vs_ceiling"] = interleaved(n, warm_count, [p[0] for p in paired])
        out["interleaved_collect_vs_ceiling"] = interleaved(n, warm, [p[1] for p in paired])
        out["cpu_plain_s"], out["cpu_tfos_s"] = cpu_plain, cpu_tfos  # the counts
    log(name + ": %d rows in %.2f s: %.0f rows/s (start %.2f s, shutdown %.2f s; plain Spark jobs over the same "
        "RDD: map+count %.0f rows/s, map+collect %.0f rows/s)%s"
        % (n, out["inference_s"], out["rows_per_s"], out["start_s"], out["shutdown_s"], ceilings[0], ceilings[1],
           "; warm runs: collect %s s, %.0f rows/s; count %s s, %.0f rows/s"
           % (", ".join("%.2f" % w for w in warm), out["warm_rows_per_s"],
              ", ".join("%.2f" % w for w in warm_count), out["warm_count_rows_per_s"]) if warm else ""))
    return out


def workload_digits(sc, rdd, n, opts):
    out_dir = fresh_dir(opts.work, "%s-digits-r%d" % (IMPL, opts.round))
    tf_args = argparse.Namespace(out_dir=out_dir, digits_npz=opts.digits_npz, batch_size=opts.digits_batch,
                                 seed=42)
    t0 = time.monotonic()
    cluster = run_cluster(sc, digits_fun, tf_args)
    t1 = time.monotonic()
    cluster.train(rdd, num_epochs=opts.digits_epochs)
    t2 = time.monotonic()
    cluster.shutdown()
    t3 = time.monotonic()
    res = wait_files(out_dir, "digits", NUM_EXECUTORS)
    t4 = time.monotonic()
    rows = sum(r["rows"] for r in res)
    if rows != n * opts.digits_epochs:
        raise RuntimeError("digits: the nodes trained on %d rows, expected %d x %d epochs = %d"
                           % (rows, n, opts.digits_epochs, n * opts.digits_epochs))
    out = {"rows": n, "epochs": opts.digits_epochs, "start_s": t1 - t0, "train_s": t2 - t1,
           "shutdown_s": t3 - t2, "wall_s": t3 - t0, "results_after_shutdown_s": t4 - t3,
           "accuracy": sorted(r["accuracy"] for r in res),
           "node_tf_setup_s": sorted(r["tf_setup_s"] for r in res),
           "node_train_s": sorted(r["train_s"] for r in res), "node_feed_wait_s": sorted(r["feed_wait_s"] for r in res),
           "steps": sorted(r["steps"] for r in res)}
    log("digits: %d rows x %d epochs, wall %.2f s (start %.2f, train %.2f, shutdown %.2f), accuracy %s"
        % (n, opts.digits_epochs, out["wall_s"], out["start_s"], out["train_s"], out["shutdown_s"],
           ", ".join("%.3f" % a for a in out["accuracy"])))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=("tensorflowonspark", "tfos"), required=True)
    p.add_argument("--master", required=True, help="spark://127.0.0.1:PORT of the benchmark's cluster")
    p.add_argument("--cluster-tmp", default=None, help="the cluster's tmp dir (SparkCluster.tmp_dir)")
    p.add_argument("--work", required=True, help="shared directory for the nodes' result files")
    p.add_argument("--out", required=True, help="JSON file for the measurements")
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--workloads", default="feed,inference,digits")
    p.add_argument("--feed-rows", type=int, default=1000000)
    p.add_argument("--inference-rows", type=int, default=1000000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--digits-npz", default=None)
    p.add_argument("--digits-epochs", type=int, default=10)
    p.add_argument("--digits-batch", type=int, default=32)
    p.add_argument("--digits-partitions", type=int, default=4)
    p.add_argument("--ready-timeout", type=float, default=None,
                   help="tfos: TFCluster.run(ready_timeout=); 0: return at registration, as TFoS does")
    opts = p.parse_args()
    global READY_TIMEOUT
    READY_TIMEOUT = opts.ready_timeout if IMPL == "tfos" else None
    workloads = [w for w in opts.workloads.split(",") if w]

    import numpy as np
    result = {"impl": IMPL, "round": opts.round, "python": sys.executable}
    cluster = SparkCluster.attach(opts.master, opts.cluster_tmp, n_workers=NUM_EXECUTORS)
    exec_tmp = os.path.join(opts.work, "tmp-%s-r%d" % (IMPL, opts.round))
    os.makedirs(exec_tmp, exist_ok=True)
    t0 = time.monotonic()
    spark = cluster.spark_session("tfos-bench-%s-r%d" % (IMPL, opts.round), **{
        "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
        "spark.executorEnv.PYTHONUNBUFFERED": "1",
        # the nodes' temporary files (TFoS's manager sockets, TF's autograph
        # files) go to a directory of this run, removed with it
        "spark.executorEnv.TMPDIR": exec_tmp,
        # Feed tasks go to whichever executor is free, not (up to 3 s later)
        # to the one that cached their partition: else tfos's short feed
        # tasks follow the cache placement (3 of 4 partitions on one node
        # happens) while TFoS's long ones spread; 0 treats both alike.
        "spark.locality.wait": "0s",
    })
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    result["spark_session_s"] = time.monotonic() - t0
    log("SparkContext %s up in %.1f s" % (sc.applicationId, result["spark_session_s"]))
    try:
        if "digits" in workloads:
            data = np.load(opts.digits_npz)
            rows = [(x.tolist(), int(y)) for x, y in zip(data["x"], data["y"])]
            rdd, n, cp = cached(sc.parallelize(rows, opts.digits_partitions), "digits")
            result["digits_cached_partitions"] = cp
            result["digits"] = workload_digits(sc, rdd, n, opts)
            rdd.unpersist()
        if "feed" in workloads:
            rdd, n, cp = cached(sc.parallelize(range(opts.feed_rows), opts.partitions).map(feed_row), "feed")
            result["feed_cached_partitions"] = cp
            result["feed"] = workload_feed(sc, rdd, n, opts)
            if IMPL == "tfos":
                # the same RDD into tfos's fast path (numpy columns), on a
                # cluster of its own, against the same ceiling
                result["feed_arrays"] = workload_feed(sc, rdd, n, opts, fun=feed_arrays_fun, name="feed_arrays")
            rdd.unpersist()
        if "dataframe" in workloads and IMPL == "tfos":
            # TensorFlowOnSpark feeds DataFrames as RDDs of Rows; tfos takes
            # their Arrow batches (mapInArrow): measured against a mapInArrow
            # stage that only counts
            rdd = sc.parallelize(range(opts.feed_rows), opts.partitions).map(feed_row)
            schema = ", ".join(["f%d double" % i for i in range(10)] + ["label long"])
            df = spark.createDataFrame(rdd, schema).cache()
            n = df.count()
            result["dataframe"] = workload_feed(sc, df, n, opts, fun=feed_arrays_fun, name="dataframe",
                                                ceiling=lambda: plain_arrow_rate(df, n))
            df.unpersist()
        elif "dataframe" in workloads:
            result["dataframe"] = None
        if "inference" in workloads:
            rdd, n, cp = cached(sc.parallelize(range(opts.inference_rows), opts.partitions).map(feed_row),
                                "inference")
            result["inference_cached_partitions"] = cp
            result["inference"] = workload_inference(sc, rdd, n, opts)
            if IMPL == "tfos":
                # the same RDD through tfos's fast path, on a cluster of its
                # own, against the same ceilings
                result["inference_arrays"] = workload_inference(sc, rdd, n, opts, fun=inference_arrays_fun,
                                                                name="inference_arrays")
            rdd.unpersist()
    finally:
        signal.alarm(0)  # TFoS's shutdown() leaves a SIGALRM armed (its timeout)
        with open(opts.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.rename(opts.out + ".tmp", opts.out)
        spark.stop()
    log("done")


if __name__ == "__main__":
    main()
