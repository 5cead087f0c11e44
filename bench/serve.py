"""tfos serve against its baselines, on the same model and data, in one run.

The model is the digits classifier of tests/python/progs/serving_model.py
(a Keras SavedModel: 64 -> 32 -> 10), served by `tfos serve --replicas 1
--max-batch 256` on 127.0.0.1 (requests of 64 rows, batched together). With
--hidden, an untrained MLP of --features inputs, those hidden layers (ReLU)
and 10 softmax outputs instead (seeded weights: the model's size is what is
measured, not what it learned), e.g. --features 784 --hidden 1024,1024 (an
MLP of 1.9 M parameters); --replicas sets tfos serve's.

  inprocess     the SavedModel's signature called in this process on batches
                of 64 rows, one after the other: the ceiling of any server
  http          K client processes (keep-alive connections) sending requests
                of 64 rows as Open Inference Protocol JSON for --seconds:
                rows/s, and the p50/p99 latency of a request
  predict_udf   tfos.serve.predict_udf scoring a cached DataFrame of --rows
                rows of 64 floats (an array column made by Spark SQL) on a
                Spark standalone cluster (master
                and 2 workers of 1 core, tests/spark/sparkcluster.py): the
                executors share the host, so the local socket
  predict_batch_udf
                Spark's pyspark.ml.functions.predict_batch_udf with the same
                SavedModel loaded in the tasks (its documented use), same
                batch size

Then, with rounds alternating, the first job of a fresh application
(SparkSession) with each UDF: fresh executors and Python workers, as a
scheduled scoring job has; predict_batch_udf's tasks import TensorFlow and
load the model there, predict_udf's only connect. Every Spark run checks
the sum of the predicted probabilities of class 0 against the in-process
model's, so a lost or wrong row fails the run. Each figure is the median
of --rounds rounds.

Prints `name: value` lines: rows/s, latencies, seconds, and the ratios
http_vs_inprocess (target >= 0.5), predict_udf_vs_predict_batch_udf
(rows/s, warm workers; target >= 2) and
predict_udf_vs_predict_batch_udf_first_job (the first job's time, theirs
over ours). Progress goes to stderr.

Usage: .venv/bin/python bench/serve.py [--rows N] [--clients K] [--max-batch B] [--seconds S] [--rounds R]
       [--http-only] [--features F --hidden W1,W2,...] [--replicas R]
"""
import argparse
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "spark"))

from sparkcluster import SparkCluster  # noqa: E402

BATCH = 64

# --hidden: an MLP made in a fresh Python, exported as the digits model is
MLP = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras
out, features, hidden = sys.argv[1], int(sys.argv[2]), [int(w) for w in sys.argv[3].split(",")]
keras.utils.set_random_seed(1)
layers = [keras.Input((features,), name="pixels")] + [keras.layers.Dense(w, activation="relu") for w in hidden]
m = keras.Sequential(layers + [keras.layers.Dense(10, activation="softmax")])
m.export(os.path.join(out, "digits", "1"), verbose=False)
print(m.count_params())
"""


def pixel_rows(start, stop, features):
    """Rows start..stop-1 of pixels_df's data: pixel i of row j is
    ((j * (i + 7)) % 17) / 16."""
    import numpy as np
    j = np.arange(start, stop, dtype=np.int64)[:, None]
    return (((j * (np.arange(features) + 7)) % 17) / 16.0).astype(np.float32)


def log(msg):
    sys.stderr.write("[bench-serve %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def inprocess(model_dir, x, seconds):
    """rows/s and per-call latencies of the signature on BATCH-row batches."""
    import tensorflow as tf
    fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    batches = [tf.constant(x[i:i + BATCH]) for i in range(0, len(x) - BATCH + 1, BATCH)]
    for b in batches[:5]:
        fn(pixels=b)  # warm-up (tracing)
    lat, rows, t0 = [], 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for b in batches:
            t = time.perf_counter()
            fn(pixels=b)["output_0"].numpy()
            lat.append(time.perf_counter() - t)
            rows += BATCH
    return rows / (time.perf_counter() - t0), lat


def http_client(port, body, seconds, out):
    """One client: a kept-alive connection, the request's bytes made once, the
    answer read by its Content-Length (a load generator, as wrk is: the
    client's own cost stays small beside the server's)."""
    import socket
    req = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat, n, bad = [], 0, 0
    buf = b""
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        s.sendall(req)
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, buf = buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(buf) < length:
            buf += s.recv(65536)
        buf = buf[length:]
        if not head.startswith(b"HTTP/1.1 200"):
            bad += 1
            continue
        lat.append(time.perf_counter() - t)
        n += 1
    s.close()
    out.put((n, bad, lat))


def http_load(port, x, clients, seconds):
    body = json.dumps({"inputs": [{"name": "pixels", "shape": [BATCH, x.shape[1]], "datatype": "FP32",
                                   "data": x[:BATCH].ravel().tolist()}]}).encode()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=http_client, args=(port, body, seconds, q)) for _ in range(clients)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    res = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    secs = time.perf_counter() - t0
    n = sum(r[0] for r in res)
    bad = sum(r[1] for r in res)
    lat = sorted(v for r in res for v in r[2])
    return n * BATCH / secs, lat, bad


def pct(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def batch_udf(opts, model_dir):
    """Spark's predict_batch_udf over the SavedModel, loaded in the tasks."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import ArrayType, FloatType
    return predict_batch_udf(make_predict_fn_for(model_dir), return_type=ArrayType(FloatType()),
                             batch_size=opts.batch_rows, input_tensor_shapes=[[opts.features]])


def make_predict_fn_for(model_dir):
    def make_predict_fn():
        import numpy as np
        import tensorflow as tf
        fn = tf.saved_model.load(model_dir).signatures["serving_default"]

        def predict(pixels):
            return fn(pixels=tf.constant(np.asarray(pixels, dtype=np.float32)))["output_0"].numpy()
        return predict
    return make_predict_fn


def pixels_df(spark, n, partitions, features):
    """n rows of `features` floats made by Spark SQL (the driver holds no
    rows): pixel_rows' formula."""
    pixels = "array(%s)" % ", ".join("CAST(((id * %d) %% 17) / 16.0 AS FLOAT)" % (i + 7) for i in range(features))
    return spark.range(0, n, 1, partitions).selectExpr(pixels + " AS pixels")


def spark_rounds(opts, url, model_dir, expect_fn, results):
    from pyspark.sql import functions as F
    from tfos.serve import predict_udf

    with SparkCluster(n_workers=2, worker_cores=1, worker_memory="2g") as cluster:
        # the cached rows: 0.6 GB at 784 features and 200k rows, in two executors
        memory = "1g" if opts.features <= 64 else "1800m"
        spark = cluster.spark_session("tfos-bench-serve", spark_executor_memory=memory, spark_driver_memory=memory)
        try:
            n = opts.rows
            expect = expect_fn(n)   # the expected sum, from pixels_df's formula
            df = pixels_df(spark, n, opts.partitions, opts.features).cache()
            assert df.count() == n
            ours = predict_udf("digits", url=url, batch_rows=opts.batch_rows)
            theirs = batch_udf(opts, model_dir)

            def run(udf):
                return df.select(udf(F.col("pixels")).getItem(0).alias("p0")).agg(F.sum("p0")).collect()[0][0]
            for name, udf in (("predict_udf", ours), ("predict_batch_udf", theirs)):
                run(udf)  # warm-up: the Python workers start, the model loads (theirs) or connects (ours)
            for rnd in range(opts.rounds):
                for name, udf in (("predict_udf", ours), ("predict_batch_udf", theirs)):
                    t0 = time.perf_counter()
                    got = run(udf)
                    secs = time.perf_counter() - t0
                    assert abs(got - expect) <= 1e-3 * max(1.0, abs(expect)), (name, got, expect)
                    results.setdefault(name, []).append(n / secs)
                log("spark round %d: predict_udf %.0f rows/s, predict_batch_udf %.0f rows/s"
                    % (rnd + 1, results["predict_udf"][-1], results["predict_batch_udf"][-1]))
        finally:
            spark.stop()
        # the first job of an application: fresh executors and Python workers
        # (a scheduled scoring job); predict_batch_udf's tasks import
        # TensorFlow and load the model, predict_udf's connect to the server
        for rnd in range(opts.rounds):
            for name in ("predict_udf", "predict_batch_udf"):
                spark = cluster.spark_session("tfos-bench-serve-cold-%s-%d" % (name, rnd), spark_executor_memory="1g")
                try:
                    df = pixels_df(spark, opts.rows, opts.partitions, opts.features)
                    udf = predict_udf("digits", url=url, batch_rows=opts.batch_rows) if name == "predict_udf" else \
                        batch_udf(opts, model_dir)
                    t0 = time.perf_counter()
                    got = df.select(udf(F.col("pixels")).getItem(0).alias("p0")).agg(F.sum("p0")).collect()[0][0]
                    secs = time.perf_counter() - t0
                    assert abs(got - expect) <= 1e-3 * max(1.0, abs(expect)), (name, got, expect)
                    results.setdefault(name + "_first_job_s", []).append(secs)
                finally:
                    spark.stop()
            log("first job of an application, round %d: predict_udf %.1f s, predict_batch_udf %.1f s"
                % (rnd + 1, results["predict_udf_first_job_s"][-1], results["predict_batch_udf_first_job_s"][-1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--batch-rows", type=int, default=1024, help="rows per UDF batch, both UDFs")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=256, help="the server's --max-batch (requests are 64 rows)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--http-only", action="store_true", help="the in-process and HTTP parts only (no Spark)")
    p.add_argument("--features", type=int, default=64, help="--hidden's model: its inputs")
    p.add_argument("--hidden", default="", help="an MLP of these hidden widths (e.g. 1024,1024), not the digits model")
    p.add_argument("--replicas", type=int, default=1, help="tfos serve's --replicas")
    opts = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tfos
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    if not opts.hidden and opts.features != 64:
        sys.exit("--features is --hidden's: the digits model has 64")
    with tempfile.TemporaryDirectory(prefix="tfos-bench-serve-") as tmp:
        if opts.hidden:
            made = [sys.executable, "-c", MLP, tmp, str(opts.features), opts.hidden]
        else:
            made = [sys.executable, os.path.join(ROOT, "tests", "python", "progs", "serving_model.py"), tmp]
        r = subprocess.run(made, capture_output=True, text=True, timeout=600)
        if r.returncode:
            sys.exit("the model could not be made:\n" + r.stderr[-3000:])
        model_dir = os.path.join(tmp, "digits", "1")
        x = pixel_rows(0, 2048, opts.features) if opts.hidden else np.load(os.path.join(tmp, "x.npy"))
        params = int(r.stdout.split()[-1]) if opts.hidden else 64 * 32 + 32 + 32 * 10 + 10
        log("model ready (%d parameters); in-process ceiling" % params)
        results = {}
        for _ in range(opts.rounds):
            rps, lat = inprocess(model_dir, x, opts.seconds / 2)
            lat.sort()
            results.setdefault("inprocess", []).append(rps)
            results.setdefault("inprocess_p50_ms", []).append(pct(lat, 0.5) * 1000)
        import tensorflow as tf
        sig = tf.saved_model.load(model_dir).signatures["serving_default"]

        def expect_fn(n):
            return float(sum(sig(pixels=tf.constant(pixel_rows(i, min(n, i + 4096), opts.features)))["output_0"]
                             .numpy()[:, 0].sum(dtype=np.float64) for i in range(0, n, 4096)))

        proc = subprocess.Popen([tfos.agent_path(), "serve", "--model", "digits=%s" % os.path.join(tmp, "digits"),
                                 "--port", "0", "--replicas", str(opts.replicas), "--max-batch", str(opts.max_batch),
                                 "--max-delay-ms", "2",
                                 "--python", sys.executable, "--log-dir", os.path.join(tmp, "logs")],
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        err = [proc.stderr.readline()]
        threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
        port = int(re.search(r"127\.0\.0\.1:(\d+)/v2/models", err[0]).group(1))
        url = "http://127.0.0.1:%d" % port
        try:
            deadline = time.monotonic() + 120
            while "is ready" not in "".join(err):
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("tfos serve did not become ready:\n" + "".join(err)[-3000:])
                time.sleep(0.2)
            log("tfos serve ready at %s; HTTP load, %d clients" % (url, opts.clients))
            http_load(port, x, opts.clients, 2.0)  # warm-up
            for rnd in range(opts.rounds):
                rps, lat, bad = http_load(port, x, opts.clients, opts.seconds)
                assert bad == 0, "%d requests refused" % bad
                results.setdefault("http", []).append(rps)
                results.setdefault("http_p50_ms", []).append(pct(lat, 0.5) * 1000)
                results.setdefault("http_p99_ms", []).append(pct(lat, 0.99) * 1000)
                log("http round %d: %.0f rows/s, p50 %.1f ms, p99 %.1f ms" % (rnd + 1, rps, pct(lat, 0.5) * 1000,
                                                                              pct(lat, 0.99) * 1000))
            if not opts.http_only:
                log("Spark: predict_udf vs predict_batch_udf on %d rows" % opts.rows)
                spark_rounds(opts, url, model_dir, expect_fn, results)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    med = {k: statistics.median(v) for k, v in results.items()}
    print("model: %s, %d parameters; tfos serve replicas: %d" % (
        "MLP %d-%s-10" % (opts.features, opts.hidden.replace(",", "-")) if opts.hidden else "digits 64-32-10",
        params, opts.replicas))
    print("rows: %d, partitions: %d, batch rows: %d, http clients: %d, rounds: %d"
          % (opts.rows, opts.partitions, opts.batch_rows, opts.clients, opts.rounds))
    print("inprocess_rows_per_s: %.0f" % med["inprocess"])
    print("inprocess_p50_ms: %.2f" % med["inprocess_p50_ms"])
    print("http_rows_per_s: %.0f" % med["http"])
    print("http_p50_ms: %.2f" % med["http_p50_ms"])
    print("http_p99_ms: %.2f" % med["http_p99_ms"])
    print("http_vs_inprocess: %.2f" % (med["http"] / med["inprocess"]))
    if opts.http_only:
        return
    print("predict_udf_rows_per_s: %.0f" % med["predict_udf"])
    print("predict_batch_udf_rows_per_s: %.0f" % med["predict_batch_udf"])
    print("predict_udf_first_job_s: %.2f" % med["predict_udf_first_job_s"])
    print("predict_batch_udf_first_job_s: %.2f" % med["predict_batch_udf_first_job_s"])
    print("predict_udf_vs_predict_batch_udf: %.2f" % (med["predict_udf"] / med["predict_batch_udf"]))
    print("predict_udf_vs_predict_batch_udf_first_job: %.2f" % (med["predict_batch_udf_first_job_s"] /
                                                               med["predict_udf_first_job_s"]))


if __name__ == "__main__":
    main()
