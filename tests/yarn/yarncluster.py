"""A real YARN + HDFS minicluster for the tests, on 127.0.0.1.

One JVM (tests/yarn/minicluster, Hadoop 3.5's minicluster artifacts from
Maven Central) runs a MiniDFSCluster (1 NameNode, 1 DataNode) and a
MiniYARNCluster (1 ResourceManager, 2 NodeManagers of 2 GiB, 4 vcores and 2
declared GPUs, CapacityScheduler with the DominantResourceCalculator, queues
default and urgent guaranteed half each, its preemption monitor on). It
writes the client configuration to ``conf_dir`` and
prints ``READY``; it stops when its stdin closes (or on SIGTERM). Its stdin
is a pipe only this process holds, so if pytest dies the pipe closes and the
JVM stops itself.

``make yarn-minicluster`` builds the jar and its classpath file, which this
module reads.

``YarnCluster(plain=True)`` starts it configured as a cluster set up from
Hadoop's documentation is (MiniCluster.java's --plain): no
``yarn.application.classpath`` and no log aggregation.
"""

import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# the process-tree helpers the Spark tests use
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark"))
from tfoshelpers import _read, live_processes, processes_under  # noqa: E402
# the JVMs' options (C1 only), the minicluster's and the Spark-on-YARN tests' as the Spark cluster's
from sparkcluster import JVM_OPTS  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "minicluster", "target")
REPO = os.path.dirname(os.path.dirname(HERE))


def classpath() -> str:
    with open(os.path.join(TARGET, "classpath.txt")) as f:
        deps = f.read().strip()
    return os.path.join(TARGET, "tfos-minicluster.jar") + ":" + deps


class YarnCluster:
    def __init__(self, plain: bool = False, secure: bool = False, token_renew_s: float = 60,
                 token_max_s: float = 120):
        self.plain = plain
        self.secure = secure  # MiniCluster.java --secure: a MiniKdc and Kerberos everywhere
        # --secure: the HDFS delegation tokens' renewal interval and maximum lifetime
        self.token_props = ["-Dtfos.token.renew.ms=%d" % (token_renew_s * 1000),
                            "-Dtfos.token.max.ms=%d" % (token_max_s * 1000)] if secure else []
        self.tmp_dir = tempfile.mkdtemp(prefix="tfos-yarn-")
        self.conf_dir = os.path.join(self.tmp_dir, "conf")
        self.log_path = os.path.join(self.tmp_dir, "minicluster.log")
        self.proc = None
        self.default_fs = None
        self.rm_webapp = None
        self.start_seconds = None

    def start(self, timeout: float = 120.0) -> None:
        java = shutil.which("java")
        assert java, "java is needed for the YARN tests"
        t0 = time.monotonic()
        os.makedirs(self.conf_dir, exist_ok=True)  # --secure: on the JVM's classpath
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [java, "-Xmx1g", JVM_OPTS] + self.token_props
            + ["-cp", (self.conf_dir + ":" if self.secure else "") + classpath(), "tfos.test.MiniCluster",
             os.path.join(self.tmp_dir, "base"), self.conf_dir] + (["--plain"] if self.plain else [])
            + (["--secure"] if self.secure else []),
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the minicluster exited with %s; see %s:\n%s"
                                   % (self.proc.returncode, self.log_path, self.log_tail()))
            with open(self.log_path, "rb") as f:
                for line in f:
                    if line.startswith(b"READY "):
                        _, self.default_fs, self.rm_webapp = line.decode().split()
                        self.start_seconds = time.monotonic() - t0
                        return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("the minicluster was not ready within %.0f s; see %s" % (timeout, self.log_path))

    def log_tail(self, n: int = 30) -> str:
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace")

    def env(self) -> dict:
        """The environment tfos yarn needs to reach this cluster."""
        env = dict(os.environ)
        env["HADOOP_CONF_DIR"] = self.conf_dir
        env["TFOS_HADOOP_CLASSPATH"] = classpath()
        env.pop("YARN_CONF_DIR", None)
        if self.secure:
            # the KDC's krb5.conf (tfos yarn hands it to Java); an empty ticket cache of our own
            env["KRB5_CONFIG"] = os.path.join(self.conf_dir, "krb5.conf")
            env["KRB5CCNAME"] = "FILE:" + os.path.join(self.tmp_dir, "krb5cc")
        return env

    @property
    def user(self) -> str:
        """The Hadoop user the tests act as: the principal's short name on the
        Kerberized cluster, the uid's name (simple authentication) otherwise."""
        return self.principal.split("@")[0] if self.secure else getpass.getuser()

    def kinit(self) -> None:
        """--secure: log the test user in (kinit -kt) into env()'s ticket cache,
        as a user of a Kerberized cluster has done before anything else."""
        kinit = shutil.which("kinit")
        assert kinit, "kinit is needed for the Kerberized cluster (Debian's krb5-user; scripts/install-deps.sh --test)"
        subprocess.run([kinit, "-kt", self.keytab, self.principal], env=self.env(), check=True, timeout=30)

    def use(self, monkeypatch) -> None:
        """Point this process (tfos.fs in the test itself) at the cluster, as env() does subprocesses."""
        env = self.env()
        for key in ("HADOOP_CONF_DIR", "KRB5_CONFIG", "KRB5CCNAME"):
            if key in env:
                monkeypatch.setenv(key, env[key])
        monkeypatch.delenv("TFOS_WEBHDFS", raising=False)

    @property
    def keytab(self) -> str:
        """--secure: the keytab of the test user, principal :attr:`principal`."""
        return os.path.join(self.conf_dir, "user.keytab")

    principal = "tfos@EXAMPLE.COM"
    other_principal = "other@EXAMPLE.COM"  # a second user; keytab other.keytab in conf_dir

    def container_logs(self, app_id: str) -> dict:
        """{container id: {file name: text}} of an application's containers,
        from the NodeManagers' log dirs (kept: debug-delay-sec)."""
        out = {}
        for root, _dirs, files in os.walk(os.path.join(self.tmp_dir, "base")):
            parts = root.split(os.sep)
            # the NodeManagers' log dirs (their local dirs hold containers' working dirs of the same names)
            if len(parts) >= 2 and parts[-2] == app_id and parts[-1].startswith("container_") and \
                    any("logDir" in p for p in parts):
                logs = {}
                for name in files:
                    if name in ("stdout", "stderr"):
                        with open(os.path.join(root, name), errors="replace") as f:
                            logs[name] = f.read()
                out[parts[-1]] = logs
        return out

    def all_container_logs(self) -> dict:
        """container_logs of every application the cluster has run."""
        out = {}
        for root, _dirs, _files in os.walk(os.path.join(self.tmp_dir, "base")):
            name = os.path.basename(root)
            if name.startswith("application_") and any("logDir" in p for p in root.split(os.sep)):
                out.update(self.container_logs(name))
        return out

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            # a graceful stop takes ~35 s; the tests have checked that no
            # container process is left, so the rest is the JVM's own
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
        if not os.environ.get("TFOS_YARN_KEEP_TMP"):
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


def tfos_yarn_processes():
    """Live processes of tfos on YARN on this host, as (pid, command line):
    the Java client and ApplicationMaster, tfos yarn / yarn-am /
    yarn-container / node, and every descendant of those (the programs).
    A node agent counts only in a YARN container (CONTAINER_ID in its
    environment): the agents of tfos run elsewhere on the host are not ours."""
    procs = live_processes()
    roots = set()
    for pid, (_, argv) in procs.items():
        if any(a.startswith(b"io.tfos.yarn.") for a in argv):
            roots.add(pid)
        elif len(argv) > 1 and argv[0].endswith(b"tfos") and argv[1] in (b"yarn", b"yarn-am", b"yarn-container"):
            roots.add(pid)
        elif len(argv) > 1 and argv[0].endswith(b"tfos") and argv[1] == b"node" and \
                b"\0CONTAINER_ID=" in b"\0" + (_read(pid, "environ") or b""):
            roots.add(pid)
    return processes_under(procs, roots)
