"""Spark setups a user gets wrong, as they meet them (issue 36): executors
whose Python lacks tfos. Its own module: the driver is another process with
another spark.pyspark.python, which needs the cluster's cores (the other
modules' SparkSession holds them while their module runs)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bare_python(tmp_path):
    """An interpreter of this Python's version without tfos (nor any
    site-packages): the base interpreter of the venv with -S; Spark puts
    its own pyspark.zip on the executors' PYTHONPATH."""
    base = os.path.join(sys.base_prefix, "bin", "python%d.%d" % sys.version_info[:2])
    wrapper = tmp_path / "python-without-tfos"
    wrapper.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % base)
    wrapper.chmod(0o755)
    out = subprocess.run([str(wrapper), "-c", "import tfos"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "No module named 'tfos'" in out.stderr, out
    return str(wrapper), base


def test_executors_without_tfos_get_one_paragraph_with_the_fix(spark_cluster, tmp_path):
    wrapper, base = bare_python(tmp_path)
    conf = spark_cluster.spark_conf("tfos-no-tfos-on-executors")
    conf.update({"spark.pyspark.python": wrapper, "spark.executorEnv.PYSPARK_PYTHON": wrapper,
                 "spark.pyspark.driver.python": sys.executable})
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=wrapper, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_HOME=spark_cluster.spark_home, JAVA_HOME=spark_cluster.java_home)
    out = subprocess.run([sys.executable, os.path.join(HERE, "progs", "driver_setup_error.py"), json.dumps(conf)],
                         capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    error = out.stdout.split("ERROR-BEGIN\n", 1)[1].split("\nERROR-END", 1)[0]
    first = error.splitlines()[0]
    # one paragraph at the top: what is wrong, on which Python, and the fix
    assert first.startswith("TFClusterError: Spark's executors cannot run tfos: the executors' Python (%s)"
                            % base), error
    assert "has no module 'tfos'" in first and "spark.pyspark.python" in first and "--archives" in first, first
    assert "docs/SPARK.md" in first, first
    # not Spark's 159 lines of Java and Python traces
    assert len(error.splitlines()) <= 3 and "at org.apache" not in error, error


def test_local_cluster_masters_get_advice_that_fits_them(spark_cluster):
    # local-cluster[N,C,M] starts N executor JVMs on this machine: one node
    # each, as on a cluster; the advice names that master, not local[N]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_HOME=spark_cluster.spark_home, JAVA_HOME=spark_cluster.java_home)
    out = subprocess.run([sys.executable, os.path.join(HERE, "progs", "driver_masters.py"), "2",
                          "local-cluster[1,1,512]", "local-cluster[3,1,512]@120"],
                         capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("MASTER", "ERROR", "FORMED"))]
    assert len(lines) == 4, (out.stdout[-3000:], out.stderr[-3000:])
    few, many = lines[1], lines[3]
    assert few.startswith("ERROR TFCluster.run needs 2 Spark executors") and "has 1" in few, few
    assert "use the master local-cluster[2,1,512]" in few and "local[" not in few, few
    assert many.startswith("ERROR InputMode.SPARK feeds each partition") and "has 3 executors" in many, many
    assert "use the master local-cluster[2,1,512]" in many, many


def test_make_demo_keeps_its_checkpoints_under_build(tmp_path, monkeypatch):
    # `make demo` runs spark_digits.py --model-dir build/digits-spark-model
    # from the repository root: TFCluster's default checkpoint dir was
    # tfos-checkpoints/<cluster> there, outside build/
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(os.path.join(HERE, "..", "..", "examples", "digits"))
    import spark_digits
    args = spark_digits.parse_args(["--master", "local[2]", "--model-dir", "build/digits-spark-model"])
    assert args.checkpoint_dir.startswith(str(tmp_path / "build" / "tfos-checkpoints") + os.sep), args.checkpoint_dir
    assert not (tmp_path / "tfos-checkpoints").exists()
