"""tfos.serve.predict_udf in a Spark job on the real standalone cluster: a
DataFrame scored by a model that tfos serve holds, on the executors' host
(the local socket) and over HTTP. Every row, in order, with the model's own
predictions."""
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import tfos
from tfoshelpers import wait_for

PROGS = os.path.join(os.path.dirname(__file__), "..", "python", "progs")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """tfos serve with the digits model; yields (url, held-out rows, the
    model's predictions)."""
    d = tmp_path_factory.mktemp("served")
    r = subprocess.run([sys.executable, os.path.join(PROGS, "serving_model.py"), str(d)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    proc = subprocess.Popen([tfos.agent_path(), "serve", "--model", "digits=%s" % (d / "digits"), "--port", "0",
                             "--python", sys.executable, "--log-dir", str(d / "logs")],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    err = [proc.stderr.readline()]
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    port = int(re.search(r"127\.0\.0\.1:(\d+)/v2/models/digits/infer", err[0]).group(1))
    url = "http://127.0.0.1:%d" % port
    try:
        from tfos.serve import Client
        assert wait_for(lambda: Client(url, local=False).metadata("digits") if "is ready" in "".join(err) else None,
                        120), "".join(err)[-3000:]
        yield url, np.load(d / "x.npy"), np.load(d / "pred1.npy")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(err)[-3000:]


def local_requests(url):
    import urllib.request
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return int(re.search(r'^tfos_serve_local_requests_total\{model="digits"\} (\d+)$', text, re.M).group(1))


@pytest.mark.parametrize("local", [True, False], ids=["local-socket", "http"])
def test_predict_udf_scores_every_row_in_order(spark, served, local):
    from pyspark.sql import functions as F
    from tfos.serve import predict_udf
    url, x, pred = served
    cols = ["p%d" % i for i in range(64)]
    rows = [(i,) + tuple(float(v) for v in x[i]) for i in range(len(x))]
    df = spark.createDataFrame(rows, ["id"] + cols).repartition(3)   # rows spread over both executors
    before = local_requests(url)
    probs = predict_udf("digits", url=url, local=local, batch_rows=50)
    out = df.withColumn("probs", probs(*[F.col(c) for c in cols])).select("id", "probs").collect()
    assert len(out) == len(x) and sorted(r.id for r in out) == list(range(len(x)))
    got = np.array([r.probs for r in sorted(out, key=lambda r: r.id)], dtype=np.float32)
    np.testing.assert_allclose(got, pred, atol=1e-5)
    # the executors share this host with the server: the local socket, or
    # HTTP when asked
    taken = local_requests(url) - before
    assert (taken > 0) if local else (taken == 0), taken


def test_predict_udf_takes_an_array_column_and_names_bad_input(spark, served):
    from pyspark.sql import functions as F
    from tfos.serve import predict_udf
    url, x, pred = served
    df = spark.createDataFrame([(i, [float(v) for v in x[i]]) for i in range(40)], ["id", "pixels"])
    out = df.withColumn("probs", predict_udf("digits", url=url)(F.col("pixels"))).orderBy("id").collect()
    np.testing.assert_allclose(np.array([r.probs for r in out], dtype=np.float32), pred[:40], atol=1e-5)
    short = spark.createDataFrame([(i, [0.5] * 10) for i in range(4)], ["id", "pixels"])
    with pytest.raises(Exception) as e:
        short.withColumn("probs", predict_udf("digits", url=url)(F.col("pixels"))).collect()
    assert "shape[1] is 10, the model takes 64" in str(e.value), str(e.value)[-2000:]
    with pytest.raises(tfos.serve.ServeError) as e:
        predict_udf("nope", url=url)
    assert "no model nope" in str(e.value)
