"""tfos against TensorFlowOnSpark 2.2.5 on the same Spark cluster, same data,
same program, in one run.

Starts one Spark standalone cluster (tests/spark/sparkcluster.py: a master
and 2 workers of 1 core and 1 GiB, on 127.0.0.1), then runs
bench/spark_driver.py as a separate driver process per side and round, each
with its own SparkContext on that cluster and its executors on that side's
python:

  tensorflowonspark  .bench-venv/tfos-baseline/bin/python (built here on first
                     use, see bench/spark_env.py): tensorflowonspark==2.2.5,
                     kept on 127.0.0.1 by a small import-time patch
  tfos               this interpreter (the project's .venv, tfos installed)

The driver source is the same for both; only its import line differs
(``from tensorflowonspark import TFCluster, TFNode`` / ``from tfos import
TFCluster, TFNode``). Workloads, each a 2-node cluster (num_executors=2,
num_ps=0, InputMode.SPARK), see bench/spark_driver.py: feed throughput
(cluster.train of N small rows), inference throughput (cluster.inference of N
rows, results checked in order) and the wall time of training a small Keras
model on the digits; and, as context, the rate of a plain Spark job that only
iterates the same RDD (the ceiling for any feed through Spark's Python
workers). Rounds alternate which side goes first; each figure is the median
over the rounds. Every run checks its row counts: rows lost (or
results out of order) make the benchmark fail, not report.

Each tfos path is also measured against its ceiling, the plain Spark job
over the same cached data (by default 1,000,000 rows in 8 partitions for
each workload: with 300,000 rows in 4, as until 2026-11-29, a job's own
costs -- its tasks' launch, their Python workers -- held the plain job to
about half its rate over 1 M rows, 0.8 against 1.6-1.8 M rows/s here, a
ceiling below the fastest plain job (issue 40)), run in the same driver before and after the
cluster (one warm-up run, then two runs before and two after: the median of
the four). tfos runs each workload four times on one cluster: the first
run, right after run(), also pays for the node programs' start
(*_first_run_vs_ceiling); the median of the other three is the steady rate,
against the ceiling (*_vs_ceiling):

  spark_rdd_vs_ceiling         train(rdd), nodes counting next_batch(1000)
                               (TFoS's API, as in the TFoS comparison),
                               against a foreachPartition that only
                               iterates the rows
  spark_rdd_arrays_vs_ceiling  the same RDD into nodes counting
                               next_batch_arrays(1000) (tfos only)
  spark_df_vs_ceiling          train(DataFrame), the `dataframe` workload
                               (tfos only), nodes counting
                               next_batch_arrays(1000), against a mapInArrow
                               stage that only counts its batches
  spark_inference_vs_ceiling   inference(rdd).count() against
                               rdd.map(identity).count() (neither sends
                               the results to the driver)
  spark_inference_collect_vs_ceiling
                               inference(rdd).collect() against
                               rdd.map(label).collect() (both do); the
                               first run is a collect()
  spark_inference_collect_vs_fastest_ceiling
                               collect() against the faster of the two
                               (the measure until 2026-11-24)
  spark_inference_arrays_vs_ceiling (and _collect_, _first_run_)
                               the same through tfos's fast path (tfos
                               only): nodes reading next_batch_arrays(1000,
                               copy=False) and answering with the labels'
                               column as one array per batch

Each warm run also follows a run of its plain job on the same cluster:
*_interleaved_vs_ceiling (and spark_inference*_interleaved_collect_vs_ceiling)
is, round by round, the median of each warm run's rate over the rate of the
plain job right before it, then the median over the rounds. The pairs cancel
the drift between the blocks before and after the cluster (JVM warm-up, the
machine's speed).

*_first_run_vs_plain_first_run is the first run against the plain job's
own first run (its warm-up, one per workload; for rdd_arrays the same RDD's
plain job has run before): a job of a new plan pays Spark's start of it
(code generation, its Python workers) on either side, which the warm
ceilings leave out.

*_cpu_us_per_row and *_cpu_bound (the rdd, rdd arrays, DataFrame and, over
their count() runs, inference workloads): the host's CPU by process kind over
each warm run and the plain run before it (see print_cpu).

spark_feed_<side>_keeper_kib and spark_agent_vs_tfos_manager: the memory of
the process that keeps a node's feed on its executor, read by the node
program once its 4 feed runs are over: TensorFlowOnSpark's manager (forked
by TFManager.start from the PySpark worker that ran the node's task), tfos's
agent (`tfos node`); RSS and USS (private pages).

Prints `name: value` lines on stdout (ratios: tfos over TensorFlowOnSpark for
rows/s; TensorFlowOnSpark seconds over tfos seconds for the digits wall time,
so above 1 means tfos is faster everywhere); progress on stderr.

Usage: .venv/bin/python bench/spark.py [--rounds 3] [--feed-rows N]
       [--inference-rows N] [--partitions P] [--digits-epochs K]
       [--only tfos|tensorflowonspark] [--workloads feed,inference,digits]
       [--keep-logs]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "spark"))

import spark_env  # noqa: E402
from spark_env import log  # noqa: E402
from sparkcluster import SparkCluster  # noqa: E402

DRIVER = os.path.join(HERE, "spark_driver.py")
SIDES = ("tensorflowonspark", "tfos")
TARGET_FEED = 20.0
TARGET_CEILING = 0.8


def check_tfos(py):
    """The tfos side can run at all: tfos.TFCluster imports in its venv."""
    out = subprocess.run([py, "-c", "import tfos, tfos.TFCluster, tfos.TFNode; print(tfos.__version__)"],
                         capture_output=True, text=True, timeout=120, cwd="/")
    if out.returncode != 0:
        raise RuntimeError("the tfos side cannot run: `%s -c 'import tfos.TFCluster'` failed (run `make install`):\n%s"
                           % (py, out.stderr.strip()[-3000:]))
    return out.stdout.strip()


def write_digits(path):
    from sklearn.datasets import load_digits
    import numpy as np
    d = load_digits()
    np.savez(path, x=(d.data / 16.0).astype(np.float32), y=d.target.astype(np.int64))
    return len(d.target)


def run_driver(side, py, cluster, work, rnd, opts):
    """One driver process; returns its JSON result. Its output goes to a log
    file; its progress lines are passed on to stderr."""
    out = os.path.join(work, "result-%s-r%d.json" % (side, rnd))
    logf = os.path.join(work, "driver-%s-r%d.log" % (side, rnd))
    cmd = [py, DRIVER, "--impl", side, "--master", cluster.master_url, "--cluster-tmp", cluster.tmp_dir,
           "--work", work, "--out", out, "--round", str(rnd), "--workloads", opts.workloads,
           "--feed-rows", str(opts.feed_rows), "--inference-rows", str(opts.inference_rows),
           "--partitions", str(opts.partitions), "--digits-npz", os.path.join(work, "digits.npz"),
           "--digits-epochs", str(opts.digits_epochs)]
    if opts.ready_timeout is not None:
        cmd += ["--ready-timeout", str(opts.ready_timeout)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env["TMPDIR"] = os.path.join(work, "tmp-driver-%s-r%d" % (side, rnd))
    os.makedirs(env["TMPDIR"], exist_ok=True)
    env.pop("PYTHONPATH", None)
    env.pop("SPARK_HOME", None)  # sparkcluster sets the driver's, from its own pyspark
    log("round %d: %s driver (%s)" % (rnd, side, py))
    t0 = time.monotonic()
    with open(logf, "w") as lf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, cwd=ROOT, start_new_session=True, text=True, bufsize=1)

        def pump():
            for line in p.stdout:
                lf.write(line)
                if line.startswith("[spark-bench"):
                    sys.stderr.write(line)
                    sys.stderr.flush()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            rc = p.wait(timeout=opts.driver_timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            end_group(p)
            t.join(10)
    if rc is None:
        raise RuntimeError("%s driver (round %d) did not finish within %d s; log: %s\n%s"
                           % (side, rnd, opts.driver_timeout, logf, tail(logf)))
    if rc != 0 or not os.path.exists(out):
        raise RuntimeError("%s driver (round %d) failed with exit status %s; log: %s\n%s"
                           % (side, rnd, rc, logf, tail(logf)))
    with open(out) as f:
        res = json.load(f)
    res["driver_s"] = time.monotonic() - t0
    for w in opts.workloads.split(","):
        if w not in res:
            raise RuntimeError("%s driver (round %d) has no %s result; log: %s\n%s" % (side, rnd, w, logf, tail(logf)))
    return res


def end_group(p, term_s=15.0):
    """End the driver's process group (the driver and its gateway JVM):
    SIGTERM, then SIGKILL whatever is left after term_s."""
    def alive():
        try:
            os.killpg(p.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, 10.0)):
        if not alive():
            break
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait_s
        while alive() and time.monotonic() < deadline:
            try:
                p.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "<%s>" % e


def med(xs):
    return statistics.median(xs)


def fmt(x):
    if x >= 1000:
        return "%.0f" % x
    if x >= 100:
        return "%.1f" % x
    return "%.3f" % x if x < 10 else "%.2f" % x


def spread(xs):
    return "(median of %d; min %s, max %s)" % (len(xs), fmt(min(xs)), fmt(max(xs))) if len(xs) > 1 else ""


def vs_ceiling(rounds, w, *keys, rate="warm_rows_per_s"):
    """(median, spread) of tfos's rate (warm: the median of the runs after
    the first on one cluster) over its ceiling, round by round (the ceiling
    of a round: the fastest of its plain Spark jobs ``keys``)."""
    xs = [r[w][rate] / max(r[w][k] for k in keys) for r in rounds]
    return fmt(med(xs)), spread(xs)


def print_ceiling(name, rounds, w, *keys):
    """<name>_vs_ceiling (warm runs) and <name>_first_run_vs_ceiling (the
    run right after run(), while the node programs start), and the target."""
    print("%s_vs_ceiling: %s %s" % ((name,) + vs_ceiling(rounds, w, *keys)))
    print("%s_first_run_vs_ceiling: %s %s" % ((name,) + vs_ceiling(rounds, w, *keys, rate="rows_per_s")))
    print_first_vs_plain_first(name, rounds, w)
    print_interleaved(name, rounds, w, "interleaved_vs_ceiling")
    print_cpu(name, rounds, w)
    print("%s_target_vs_ceiling: >= %g" % (name, TARGET_CEILING))


def print_cpu(name, rounds, w):
    """<name>_cpu_us_per_row: the host's CPU per row over the warm runs and
    the plain runs paired with them (medians over every run of every round),
    by kind (spark_driver.cpu_seconds); <name>_cpu_bound: plain over tfos, the
    most the warm ratio can be on a host whose cores both keep busy (2 here).
    The plain job spends its CPU in Spark's Python workers and the JVMs;
    tfos also in the node programs, which read what the workers encode."""
    runs = [(p, t) for r in rounds if "cpu_tfos_s" in r[w] for p, t in zip(r[w]["cpu_plain_s"], r[w]["cpu_tfos_s"])]
    if not runs:
        return
    n = rounds[0][w]["rows"]

    def per_row(side):
        kinds = {k: med([run[side][k] for run in runs]) * 1e6 / n for k in runs[0][side]}
        total = med([sum(run[side].values()) for run in runs]) * 1e6 / n
        return total, "%.2f (%s)" % (total, ", ".join("%s %.2f" % kv for kv in kinds.items() if kv[1] >= 0.005))
    plain, plain_text = per_row(0)
    tfos, tfos_text = per_row(1)
    print("%s_cpu_us_per_row: tfos %s; plain %s" % (name, tfos_text, plain_text))
    print("%s_cpu_bound: %s" % (name, fmt(plain / tfos)))


def print_first_vs_plain_first(name, rounds, w):
    """<name>_first_run_vs_plain_first_run: tfos's first run on its cluster
    over the plain job's own first run (the warm-up before its ceiling
    runs): a job of a new plan pays Spark's start of it (code generation,
    its Python workers) on either side."""
    xs = [r[w]["rows_per_s"] / r[w]["plain_first_rows_per_s"] for r in rounds if "plain_first_rows_per_s" in r[w]]
    if xs:
        print("%s_first_run_vs_plain_first_run: %s %s" % (name, fmt(med(xs)), spread(xs)))


def print_interleaved(name, rounds, w, key):
    """<name>_<key>: the median over the rounds of each round's interleaved
    ratio (spark_driver.interleaved: warm runs, each against the plain job
    run right before it)."""
    xs = [r[w][key] for r in rounds if key in r[w]]
    if xs:
        print("%s_%s: %s %s" % (name, key, fmt(med(xs)), spread(xs)))


def print_inference_ceiling(name, rounds, w):
    """Inference like for like: <name>_vs_ceiling is inference(rdd).count()
    (warm) against the issue's ceiling rdd.map(identity).count();
    <name>_collect_vs_ceiling and <name>_first_run_vs_ceiling are
    inference(rdd).collect() (warm; the run right after run()) against
    rdd.map(label).collect()."""
    for what, key in (("warm", "warm_rows_per_s"), ("warm_count", "warm_count_rows_per_s")):
        xs = [r[w][key] for r in rounds]
        print("%s_tfos_%s_rows_per_s: %s %s" % (name, what, fmt(med(xs)), spread(xs)))
    print("%s_vs_ceiling: %s %s" % ((name,) + vs_ceiling(rounds, w, "plain_map_count_rows_per_s",
                                                        rate="warm_count_rows_per_s")))
    print("%s_collect_vs_ceiling: %s %s" % ((name,) + vs_ceiling(rounds, w, "plain_map_collect_rows_per_s")))
    print("%s_first_run_vs_ceiling: %s %s" % ((name,) + vs_ceiling(rounds, w, "plain_map_collect_rows_per_s",
                                                                  rate="rows_per_s")))
    print_first_vs_plain_first(name, rounds, w)
    print_interleaved(name, rounds, w, "interleaved_vs_ceiling")
    print_interleaved(name, rounds, w, "interleaved_collect_vs_ceiling")
    print_cpu(name, rounds, w)  # the counts
    print("%s_target_vs_ceiling: >= %g" % (name, TARGET_CEILING))


def report(results, opts, sides):
    """results: side -> list of per-round dicts."""
    print("spark_cpu_cores: %d" % os.cpu_count())
    print("spark_cluster: standalone, 2 workers x 1 core x 1 GiB, 127.0.0.1")
    print("spark_rounds: %d" % opts.rounds)
    print("spark_num_executors: 2")
    print("spark_partitions: %d" % opts.partitions)
    wl = opts.workloads.split(",")

    def series(side, w, key):
        return [r[w][key] for r in results[side]]

    if "feed" in wl:
        print("spark_feed_rows: %d" % opts.feed_rows)
        rate, rss, uss = {}, {}, {}
        for side in sides:
            rate[side] = med(series(side, "feed", "rows_per_s"))
            print("spark_feed_%s_rows_per_s: %s %s" % (side, fmt(rate[side]), spread(series(side, "feed", "rows_per_s"))))
            print("spark_feed_%s_feed_s: %s" % (side, fmt(med(series(side, "feed", "feed_s")))))
            print("spark_feed_%s_train_returned_s: %s" % (side, fmt(med(series(side, "feed", "train_s")))))
            print("spark_feed_%s_last_row_read_s: %s" % (side, fmt(med(series(side, "feed", "consumed_s")))))
            print("spark_feed_%s_start_s: %s" % (side, fmt(med(series(side, "feed", "start_s")))))
            print("spark_feed_%s_shutdown_s: %s" % (side, fmt(med(series(side, "feed", "shutdown_s")))))
            print("spark_feed_%s_total_s: %s" % (side, fmt(med(series(side, "feed", "total_s")))))
            print("spark_feed_%s_rows_per_node: %s" % (side, " ".join(
                "/".join(str(x) for x in r["feed"]["per_node_rows"]) for r in results[side])))
            keepers = [k for r in results[side] for k in r["feed"].get("keepers", []) if k]
            if keepers:
                # what keeps a node's feed, read on the executor after the
                # feed's 4 runs: TFoS's manager, tfos's agent
                rss[side] = med([k["rss_kib"] for k in keepers])
                uss[side] = med([k["uss_kib"] for k in keepers])
                print("spark_feed_%s_keeper_kib: %s RSS %d, USS %d (medians over nodes and rounds; RSS %d-%d)" % (
                    side, "/".join(sorted({k["comm"] for k in keepers})), rss[side], uss[side],
                    min(k["rss_kib"] for k in keepers), max(k["rss_kib"] for k in keepers)))
        plain = [r["feed"]["plain_spark_rows_per_s"] for side in sides for r in results[side]]
        print("spark_feed_plain_spark_job_rows_per_s: %s %s" % (fmt(med(plain)), spread(plain)))
        if "tfos" in sides:
            warm = series("tfos", "feed", "warm_rows_per_s")
            print("spark_feed_tfos_warm_rows_per_s: %s %s" % (fmt(med(warm)), spread(warm)))
            print_ceiling("spark_rdd", results["tfos"], "feed", "plain_spark_rows_per_s")
            warm = series("tfos", "feed_arrays", "warm_rows_per_s")
            print("spark_feed_arrays_tfos_warm_rows_per_s: %s %s" % (fmt(med(warm)), spread(warm)))
            print_ceiling("spark_rdd_arrays", results["tfos"], "feed_arrays", "plain_spark_rows_per_s")
        if len(sides) == 2:
            print("spark_feed_vs_tfos: %s" % fmt(rate["tfos"] / rate["tensorflowonspark"]))
            if len(rss) == 2:
                print("spark_agent_vs_tfos_manager: RSS %.3f, USS %.3f (target RSS < 0.10)" % (
                    rss["tfos"] / rss["tensorflowonspark"], uss["tfos"] / uss["tensorflowonspark"]))
            print("spark_feed_target_vs_tfos: >= %g" % TARGET_FEED)
    if "dataframe" in wl and "tfos" in sides:
        rs = results["tfos"]
        print("spark_dataframe_rows: %d" % opts.feed_rows)
        rates = series("tfos", "dataframe", "rows_per_s")
        print("spark_dataframe_tfos_rows_per_s: %s %s" % (fmt(med(rates)), spread(rates)))
        print("spark_dataframe_tfos_train_returned_s: %s" % fmt(med(series("tfos", "dataframe", "train_s"))))
        print("spark_dataframe_tfos_rows_per_node: %s" % " ".join(
            "/".join(str(x) for x in r["dataframe"]["per_node_rows"]) for r in rs))
        plain = series("tfos", "dataframe", "plain_spark_rows_per_s")
        print("spark_dataframe_plain_mapinarrow_rows_per_s: %s %s" % (fmt(med(plain)), spread(plain)))
        warm = series("tfos", "dataframe", "warm_rows_per_s")
        print("spark_dataframe_tfos_warm_rows_per_s: %s %s" % (fmt(med(warm)), spread(warm)))
        print_ceiling("spark_df", rs, "dataframe", "plain_spark_rows_per_s")
    if "inference" in wl:
        print("spark_inference_rows: %d" % opts.inference_rows)
        rate = {}
        for side in sides:
            rate[side] = med(series(side, "inference", "rows_per_s"))
            print("spark_inference_%s_rows_per_s: %s %s" % (side, fmt(rate[side]),
                                                            spread(series(side, "inference", "rows_per_s"))))
            print("spark_inference_%s_inference_s: %s" % (side, fmt(med(series(side, "inference", "inference_s")))))
            print("spark_inference_%s_total_s: %s" % (side, fmt(med(series(side, "inference", "total_s")))))
        if "tfos" in sides:
            for key, what in (("plain_map_count_rows_per_s", "map_count"), ("plain_map_collect_rows_per_s",
                                                                          "map_collect")):
                xs = series("tfos", "inference", key)
                print("spark_inference_plain_%s_rows_per_s: %s %s" % (what, fmt(med(xs)), spread(xs)))
            print_inference_ceiling("spark_inference", results["tfos"], "inference")
            # the measure until 2026-11-24, collect() against the faster of
            # the two plain jobs (map+count), kept to compare with earlier runs
            print("spark_inference_collect_vs_fastest_ceiling: %s %s" % vs_ceiling(
                results["tfos"], "inference", "plain_map_count_rows_per_s", "plain_map_collect_rows_per_s"))
            # the same RDD through tfos's fast path: numpy views in, one
            # array of results out per batch
            print_inference_ceiling("spark_inference_arrays", results["tfos"], "inference_arrays")
        if len(sides) == 2:
            print("spark_inference_vs_tfos: %s" % fmt(rate["tfos"] / rate["tensorflowonspark"]))
    if "digits" in wl:
        print("spark_digits_rows: 1797")
        print("spark_digits_epochs: %d" % opts.digits_epochs)
        wall = {}
        for side in sides:
            wall[side] = med(series(side, "digits", "wall_s"))
            print("spark_digits_%s_wall_s: %s %s" % (side, fmt(wall[side]), spread(series(side, "digits", "wall_s"))))
            print("spark_digits_%s_start_s: %s" % (side, fmt(med(series(side, "digits", "start_s")))))
            print("spark_digits_%s_train_s: %s" % (side, fmt(med(series(side, "digits", "train_s")))))
            print("spark_digits_%s_shutdown_s: %s" % (side, fmt(med(series(side, "digits", "shutdown_s")))))
            print("spark_digits_%s_steps_per_node: %s" % (side, " ".join(
                "/".join(str(x) for x in r["digits"]["steps"]) for r in results[side])))
            accs = [a for r in results[side] for a in r["digits"]["accuracy"]]
            print("spark_digits_%s_accuracy: %.3f (min over nodes and rounds; max %.3f)" % (side, min(accs), max(accs)))
        if len(sides) == 2:
            print("spark_digits_vs_tfos: %s" % fmt(wall["tensorflowonspark"] / wall["tfos"]))
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--feed-rows", type=int, default=1000000)
    p.add_argument("--inference-rows", type=int, default=1000000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--digits-epochs", type=int, default=10)
    p.add_argument("--workloads", default="feed,dataframe,inference,digits")
    p.add_argument("--only", choices=SIDES, default=None, help="run one side only (no ratios)")
    p.add_argument("--ready-timeout", type=float, default=None,
                   help="tfos: TFCluster.run(ready_timeout=) (0: run() returns at registration, as before "
                        "2026-11-28); default: run()'s own")
    p.add_argument("--driver-timeout", type=int, default=900, help="seconds per driver process")
    p.add_argument("--keep-logs", action="store_true", help="keep the work dir (driver logs, results)")
    opts = p.parse_args()
    for w in opts.workloads.split(","):
        if w not in ("feed", "dataframe", "inference", "digits"):
            p.error("unknown workload %r" % w)
    sides = (opts.only,) if opts.only else SIDES

    pythons = {}
    if "tensorflowonspark" in sides:
        pythons["tensorflowonspark"] = spark_env.ensure_baseline_env()
    if "tfos" in sides:
        pythons["tfos"] = sys.executable
        log("tfos %s (%s)" % (check_tfos(sys.executable), sys.executable))

    work = tempfile.mkdtemp(prefix="tfos-bench-spark-")
    ok = False
    cluster = SparkCluster(n_workers=2, worker_cores=1, worker_memory="1g")
    try:
        write_digits(os.path.join(work, "digits.npz"))
        log("starting the Spark cluster")
        cluster.start()
        log("cluster up at %s in %.1f s" % (cluster.master_url, cluster.start_seconds))
        results = {s: [] for s in sides}
        for rnd in range(opts.rounds):
            order = sides if rnd % 2 == 0 else tuple(reversed(sides))
            for side in order:
                results[side].append(run_driver(side, pythons[side], cluster, work, rnd, opts))
        report(results, opts, sides)
        ok = True
    finally:
        log("stopping the Spark cluster")
        cluster.stop()
        left = cluster.remaining_processes()
        if left:
            log("processes of the cluster left after stop: %s" % left)
            ok = False
        if opts.keep_logs or not ok:
            log("driver logs and results kept in %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
