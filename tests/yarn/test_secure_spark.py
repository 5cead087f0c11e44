"""TFCluster on Spark-on-YARN under Kerberos: spark-submit --principal/--keytab
against the Kerberized minicluster (MiniCluster.java --secure).

Its HDFS delegation tokens are renewable for 30 s and live 40 s at most:
Spark replaces its tokens at 75 % of the renewal interval (every ~22 s) in
its JVMs only, so the nodes (Python programs beside the executors) keep
HDFS only if the driver's publishing (tfos._spark.tokens) and their
tfos.fs's refresh work. A cluster of its own (the other secure tests want
shorter tokens; Spark's replacement at 22 s, the nodes' look from 18 s
and the token's end at 30 s leave room on a loaded 2-core machine).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from test_yarn import HERE, spark_on_yarn_env
from yarncluster import YarnCluster


@pytest.fixture(scope="module")
def spark_secure_cluster():
    cluster = YarnCluster(secure=True, token_renew_s=30, token_max_s=40)
    cluster.start(timeout=float(os.environ.get("TFOS_YARN_START_TIMEOUT", "180")))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_tfcluster_outlives_its_tokens_and_a_node_restart_under_spark_submit_keytab(spark_secure_cluster,
                                                                                     tmp_path):
    # 2 nodes checkpoint to HDFS every ~0.5 s for ~50 s (past the first tokens' renewal expiry and maximum
    # lifetime); worker:1 kills itself at step 60, ~35 s in, past the tokens the executors started with:
    # the restarted programs must start from a token kept on their executor, and every node resumes
    c = spark_secure_cluster
    # its spark-defaults.conf: --principal/--keytab and krb5.conf for every JVM; Spark's own 75 %
    env = spark_on_yarn_env(c, renewal_ratio=None)
    jars = os.path.join(os.path.dirname(__import__("pyspark").__file__), "jars", "*")
    conf = {"spark.yarn.jars": "local:" + jars, "spark.yarn.am.memory": "512m",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0", "spark.yarn.maxAppAttempts": "1",
            "spark.pyspark.python": sys.executable}
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"), "--master", "yarn",
           "--num-executors", "2", "--executor-cores", "1", "--executor-memory", "512m"]
    for k, v in conf.items():
        cmd += ["--conf", "%s=%s" % (k, v)]
    steps = 100
    cmd += [os.path.join(HERE, "progs", "tfcluster_secure.py"), str(tmp_path), str(steps), "0.5", "60"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=str(tmp_path))
    causes = [ln for ln in r.stderr.splitlines() if "Exception" in ln or "Error" in ln][:10]
    assert r.returncode == 0, "\n".join(causes) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    lines = (tmp_path / "steps.log").read_text().splitlines()
    when = [float(ln.rsplit(" t=", 1)[1]) for ln in lines]
    lines = [ln.rsplit(" t=", 1)[0] for ln in lines]
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines
    assert max(when) - min(when) > 40, when   # past the maximum lifetime of every token the nodes began with
    starts = [ln for ln in lines if " from=" in ln]
    # the nodes act as the principal's user (tfos), not as the executors' uid (root here)
    assert all(ln.endswith("home=%s/user/tfos/" % c.default_fs) for ln in starts), starts
    resumed = [ln for ln in starts if " attempt=2 " in ln]
    assert sorted(ln.split()[1] for ln in resumed) == ["worker:0", "worker:1"], lines
    # each from its own checkpoint: worker:1 pushed step 60 and killed itself there; worker:0, a step of
    # its own it had pushed (how far it got depends on when it started)
    froms = {ln.split()[1]: int(re.search(r"from=(\d+)", ln).group(1)) for ln in resumed}
    assert froms["worker:1"] == 60 and froms["worker:0"] > 0, resumed
    assert result["checkpoints"].startswith("%s/user/tfos/tfos-checkpoints/" % c.default_fs), result
    logs = r.stderr + "\n".join(t for cont in c.container_logs(result["app"]).values() for t in cont.values())
    for bad in ("InvalidToken", "token is expired", "could not read fresh", "could not publish"):
        assert bad not in logs, logs[-4000:]
