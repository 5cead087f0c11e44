"""tfos yarn where the setup is not the tests' own (issue 36): a client with
no Hadoop configuration, a ResourceManager that does not answer, and a
cluster configured as one set up from Hadoop's documentation is: no
``yarn.application.classpath``, no log aggregation (the ``plain_cluster``
fixture, conftest.py). This file runs before test_yarn.py, so the plain
cluster is stopped before the session's own starts.
"""

import os
import pwd
import re
import socket
import subprocess
import sys

import pytest

from yarncluster import classpath

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TFOS = os.environ.get("TFOS_CLI", os.path.join(REPO, "build", "tfos"))
APP_RE = re.compile(r"submitted (application_\d+_\d+)")
SMALL = ["--worker-memory", "256m", "--am-memory", "384m"]
ME = pwd.getpwuid(os.getuid()).pw_name


def client_env(**extra):
    """The environment of a user with Hadoop's jars but no cluster configuration."""
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "HADOOP_HOME")}
    env["TFOS_HADOOP_CLASSPATH"] = classpath()
    env.update(extra)
    return env


def test_no_hadoop_conf_dir_fails_at_once_naming_the_variable(tmp_path):
    """Hadoop's client would try 0.0.0.0:8032 for 15 minutes, silently."""
    for args in (["--workers", "1", "--", "prog"], ["status", "application_1_0001"]):
        r = subprocess.run([TFOS, "yarn"] + args, env=client_env(), capture_output=True, text=True, timeout=60,
                           cwd=str(tmp_path))
        assert r.returncode == 1, r.stderr
        assert "HADOOP_CONF_DIR is not set (nor YARN_CONF_DIR)" in r.stderr, r.stderr
        assert "yarn-site.xml" in r.stderr, r.stderr
    # a HADOOP_CONF_DIR without the cluster's yarn-site.xml: named too
    r = subprocess.run([TFOS, "yarn", "status", "application_1_0001"], env=client_env(HADOOP_CONF_DIR=str(tmp_path)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "HADOOP_CONF_DIR=%s holds no yarn-site.xml" % tmp_path in r.stderr, r.stderr


def test_resourcemanager_that_does_not_answer_is_named_within_the_bound(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.address</name><value>127.0.0.1:%d</value></property>"
        "<property><name>yarn.resourcemanager.connect.max-wait.ms</name><value>8000</value></property>"
        "</configuration>" % port)
    r = subprocess.run([TFOS, "yarn", "--workers", "1", "--", "prog"], env=client_env(HADOOP_CONF_DIR=str(tmp_path)),
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 1, r.stderr
    where = "the ResourceManager at 127.0.0.1:%d (yarn.resourcemanager.address, from yarn-site.xml)" % port
    assert "tfos: waiting for %s (up to 8 s)" % where in r.stderr, r.stderr
    assert "tfos yarn: %s did not answer within 8 s" % where in r.stderr, r.stderr
    assert "HADOOP_CONF_DIR=%s" % tmp_path in r.stderr, r.stderr
    assert "\tat org.apache" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def plain_run(plain_cluster):
    """One application on the plain cluster, submitted without $USER or
    $LOGNAME in the environment (a container's, cron's)."""
    env = plain_cluster.env()
    env.pop("USER", None)
    env.pop("LOGNAME", None)
    env.pop("HADOOP_USER_NAME", None)
    r = subprocess.run([TFOS, "yarn", "--workers", "2"] + SMALL +
                       ["--", sys.executable, "-c", "import os; print('PLAIN', os.environ['TFOS_JOB_NAME'], "
                        "os.environ['TFOS_TASK_INDEX'], os.environ['TFOS_CHECKPOINT_DIR'])"],
                       env=env, capture_output=True, text=True, timeout=180, cwd=plain_cluster.tmp_dir)
    return r


def test_application_master_runs_without_yarn_application_classpath(plain_cluster, plain_run):
    """The ApplicationMaster's classpath carries this client's configuration
    and Hadoop jars: without them it died with NoClassDefFoundError
    org/apache/hadoop/conf/Configuration."""
    out = plain_run.stdout + plain_run.stderr
    assert plain_run.returncode == 0, out
    with open(os.path.join(plain_cluster.conf_dir, "yarn-site.xml")) as f:
        assert "yarn.application.classpath" not in f.read()   # the cluster sets none
    app = APP_RE.search(out).group(1)
    # the default checkpoint dir is in Hadoop's user's home, without $USER
    ckpt = "%s/user/%s/tfos-checkpoints/%s" % (plain_cluster.default_fs, ME, app)
    assert "checkpoints in " + ckpt in out, out
    for i in (0, 1):
        assert "[worker:%d] PLAIN worker %d %s" % (i, i, ckpt) in plain_run.stdout, out


def test_hadoop_jars_the_nodes_lack_fail_once_with_the_fix(plain_cluster, tmp_path):
    """Hadoop's jars at paths the nodes do not have (here: relative to the
    client's directory, as for a gateway whose Hadoop lives elsewhere than
    on the nodes): the ApplicationMaster cannot start; YARN's diagnostics
    are shown once, then what to set."""
    jars = tmp_path / "hadoop-jars"
    jars.mkdir()
    for j in classpath().split(":"):
        os.symlink(j, jars / os.path.basename(j))
    r = subprocess.run([TFOS, "yarn", "--workers", "1"] + SMALL + ["--hadoop-classpath", "hadoop-jars/*", "--",
                        sys.executable, "-c", "print('never')"], env=plain_cluster.env(), capture_output=True,
                       text=True, timeout=180, cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "failed before tfos started in its ApplicationMaster's container" in out, out
    assert out.count("NoClassDefFoundError: org/apache/hadoop/conf/Configuration") == 1, out
    assert "the ApplicationMaster's JVM did not find Hadoop's classes" in out, out
    assert "yarn.application.classpath (not set in this configuration" in out, out
    assert "Fix: set yarn.application.classpath in the cluster's yarn-site.xml" in out, out
    assert "never" not in r.stdout, out


def test_logs_of_an_ended_application_without_aggregation_say_where_they_are(plain_cluster, plain_run):
    app = APP_RE.search(plain_run.stderr).group(1)
    r = subprocess.run([TFOS, "yarn", "logs", app], env=plain_cluster.env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "does not exist" not in r.stderr, r.stderr        # Hadoop's "File ... does not exist"
    assert "log aggregation is off on this cluster (yarn.log-aggregation-enable)" in r.stderr, r.stderr
    assert "yarn.nodemanager.log-dirs" in r.stderr and "under %s/<container id>/" % app in r.stderr, r.stderr
    am = "container_%s_01_000001" % app[len("application_"):]
    assert "The ApplicationMaster's container, %s, ran on " % am in r.stderr, r.stderr
    # and they are there: each node's output in its container's stdout
    logs = plain_cluster.container_logs(app)
    assert am in logs and any("PLAIN worker 0" in c.get("stdout", "") for c in logs.values()), logs.keys()


def test_tfos_fs_acts_as_hadoops_user_not_dollar_user(plain_cluster, monkeypatch, tmp_path):
    """Files written through WebHDFS belong to Hadoop's user (the uid's
    name), whatever $USER says."""
    monkeypatch.setenv("HADOOP_CONF_DIR", plain_cluster.conf_dir)
    monkeypatch.delenv("TFOS_WEBHDFS", raising=False)
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("LOGNAME", "someone-else")
    import tfos.fs
    (tmp_path / "f").write_text("x")
    url = "%s/user/%s/owner-test/f" % (plain_cluster.default_fs, ME)
    tfos.fs.put(str(tmp_path / "f"), url)
    fs, path = tfos.fs.filesystem(url)
    assert fs.info(path)["owner"] == ME
