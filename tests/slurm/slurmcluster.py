"""A real Slurm cluster on this host for the tests: munged, slurmctld and
one slurmd per node name (docs/TESTING.md, "Slurm").

Debian's slurm-wlm (22.05) runs several slurmd on one host when each is
started with -N NAME and each node has its own Port in slurm.conf (every
node is NodeHostname=localhost, NodeAddr=127.0.0.1); the build needs no
--enable-multiple-slurmd for that. Everything lives in one temporary
directory: the munge key and socket, the configuration, the state and spool
directories and the logs. Nothing is installed system-wide and the daemons
are this process's children: stop() ends every job, then every daemon, and
says what it could not.

Root is needed (slurmd starts tasks as the submitting user); Slurm's
commands find the cluster through SLURM_CONF, in env(), never in
os.environ (other tests' processes must not see it).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NODES = ("n1", "n2")
CPUS = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing():
    """Why Slurm cannot run here, or ''."""
    if os.geteuid() != 0:
        return "the Slurm fixture runs slurmd, which needs root"
    for exe in ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "sinfo"):
        if not shutil.which(exe):
            return "%s not found: apt-get install slurm-wlm munge (scripts/install-deps.sh)" % exe
    return ""


class SlurmCluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tfos-slurm-", dir="/tmp")  # short: the munge socket's path
        self.procs = {}
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.started_s = None

    def env(self, **extra):
        e = dict(os.environ)
        e["SLURM_CONF"] = self.conf
        e.update(extra)
        return e

    def _write_conf(self):
        d = self.dir
        ports = [free_port() for _ in range(2 + len(NODES))]
        nodes = "\n".join(
            "NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=2000 State=UNKNOWN"
            % (n, ports[2 + i], CPUS) for i, n in enumerate(NODES))
        with open(self.conf, "w") as f:
            f.write("""ClusterName=tfostest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={p0}
SlurmdPort={p1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
# proctrack/linuxproc: a step's processes are its tasks' descendants (no
# cgroup hierarchy is needed, which a container may not delegate); what the
# tests check of "nothing outlives the step" holds under proctrack/cgroup too
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
{nodes}
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
""".format(p0=ports[0], p1=ports[1], d=d, nodes=nodes, names=",".join(NODES)))
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=autodetect\nConstrainCores=no\nConstrainDevices=no\n")

    def _spawn(self, name, argv):
        log = open(os.path.join(self.dir, "log", name + ".out"), "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.env(), start_new_session=True)
        log.close()

    def start(self, timeout=60):
        t0 = time.monotonic()
        d = self.dir
        os.chmod(d, 0o711)  # munged wants its socket's directories searchable by all
        for sub in ("munge", "state", "log") + tuple("spool/" + n for n in NODES):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(os.path.join(d, "munge"), 0o711)
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self._write_conf()
        self._spawn("munged", ["munged", "-F", "--key-file=" + key, "--socket=" + d + "/munge/sock",
                               "--pid-file=" + d + "/munge/munged.pid", "--log-file=" + d + "/log/munged.log",
                               "--seed-file=" + d + "/munge/seed"])
        self._wait(lambda: os.path.exists(d + "/munge/sock"), t0 + timeout, "munged's socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for n in NODES:
            self._spawn("slurmd-" + n, ["slurmd", "-D", "-N", n, "-f", self.conf])
        self._wait(self._all_idle, t0 + timeout, "every node idle in sinfo")
        self.started_s = time.monotonic() - t0

    def _all_idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=self.env())
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return r.returncode == 0 and all(states.get(n) == "idle" for n in NODES)

    def _wait(self, ok, deadline, what):
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError("%s exited (%s) while waiting for %s: %s" % (name, p.returncode, what,
                                                                                     self.logs_tail()))
            if ok():
                return
            time.sleep(0.1)
        raise RuntimeError("Slurm: no %s in time: %s" % (what, self.logs_tail()))

    def logs_tail(self, n=15):
        out = []
        logdir = os.path.join(self.dir, "log")
        for f in sorted(os.listdir(logdir)):
            with open(os.path.join(logdir, f), errors="replace") as fh:
                out.append("== %s\n%s" % (f, "".join(fh.readlines()[-n:])))
        return "\n".join(out)

    def run(self, argv, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(argv, env=kw.pop("env", None) or self.env(), **kw)

    def jobs(self):
        """squeue's jobs (pending, running, completing), as 'ID STATE' lines."""
        r = self.run(["squeue", "-h", "-o", "%i %T"])
        return [line for line in r.stdout.splitlines() if line.strip()]

    def processes(self, daemons=False):
        """Processes started for this cluster's jobs (with daemons: its
        daemons too): every process whose environment names this cluster's
        SLURM_CONF, as (pid, command line)."""
        mine = {os.getpid()} | (set() if daemons else {p.pid for p in self.procs.values()})
        want = ("SLURM_CONF=" + self.conf).encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in mine:
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                with open("/proc/%s/stat" % pid) as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                continue
            if not daemons and cmd.startswith(": slurmscriptd"):  # slurmctld's helper
                continue
            if want in env and cmd and not zombie:
                found.append((int(pid), cmd))
        # slurmstepd inherits slurmd's environment (ours): it is a job's too
        return found

    def stop(self):
        """End every job, then every daemon; what would not end (the
        daemons' names and the processes left: none, normally)."""
        if not self.procs:
            return []
        try:
            self.run(["scancel", "--full", "--user", "root"], timeout=20)
        except Exception:
            pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (self.jobs() or self.processes()):
            time.sleep(0.2)
        stubborn = []
        # the nodes first, then the controller, munge last (they use it)
        order = [n for n in self.procs if n.startswith("slurmd")] + [n for n in ("slurmctld", "munged")
                                                                      if n in self.procs]
        for name in order:
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    stubborn.append(name)
                    p.kill()
                    p.wait(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.processes(daemons=True):
            time.sleep(0.1)
        left = self.processes(daemons=True)
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.procs = {}
        if not os.environ.get("TFOS_SLURM_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return stubborn + ["%d %s" % x for x in left]
