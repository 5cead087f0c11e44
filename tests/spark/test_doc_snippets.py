"""The Spark snippets of the docs, run as written against the test Spark
cluster (issue 18; tests/python/test_doc_snippets.py lists which snippet runs
where and fails on one that nothing runs or marks).

docs/SPARK.md's spark-submit command runs from the repository root with
the test cluster's master in place of spark://HOST:7077 and a temporary
directory in place of /shared/digits-model (the text says both are yours to
pick). The environment is what the text asks of a user: the executors run a
Python with tfos (PYSPARK_PYTHON), spark-submit is the venv's (pyspark).
"""
import os
import re
import subprocess
import sys

from sparkcluster import write_jvm_defaults

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def code_block(doc, marker):
    with open(os.path.join(ROOT, doc)) as f:
        blocks = re.findall(r"^```\w*\n(.*?)^```$", f.read(), flags=re.S | re.M)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, "%s should have one code block with %r, has %d" % (doc, marker, len(found))
    return found[0]


def test_spark_submit_command_from_spark_md(spark_cluster, tmp_path):
    command = code_block("docs/SPARK.md", "spark-submit --master spark://HOST:7077")
    master = spark_cluster.master_url[len("spark://"):]
    command = command.replace("HOST:7077", master).replace("/shared/digits-model", str(tmp_path / "model"))
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    write_jvm_defaults(conf_dir)   # the test clusters' JVM options (sparkcluster.JVM_OPTS)
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), JAVA_HOME=spark_cluster.java_home,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_CONF_DIR=str(conf_dir),
               SPARK_LOCAL_IP="127.0.0.1", PYTHONUNBUFFERED="1")
    for k in ("PYSPARK_SUBMIT_ARGS", "SPARK_HOME"):
        env.pop(k, None)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    acc = re.findall(r"^test accuracy: (0\.\d+)$", r.stdout, re.M)
    assert len(acc) == 1 and float(acc[0]) >= 0.85, r.stdout[-4000:]
    assert (tmp_path / "model" / "digits.keras").is_file(), os.listdir(tmp_path / "model")
