"""Helpers for the TFCluster tests: find tfos processes on this host."""
import os
import time

# Set by conftest to the test Spark cluster's marker (TFOS_SPARKCLUSTER=...,
# in the environment of everything its daemons start): only processes of our
# cluster count, not those of other Spark clusters on the machine.
MARKER = None


def wait_for(cond, timeout, interval=0.1):
    """Poll cond() until truthy or timeout seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        val = cond()
        if val or time.monotonic() >= deadline:
            return val
        time.sleep(interval)


def _read(pid, name):
    try:
        with open("/proc/%d/%s" % (pid, name), "rb") as f:
            return f.read()
    except OSError:
        return None


def live_processes():
    """{pid: (ppid, argv as a list of bytes)} of the live (non-zombie)
    processes on this host, this one excepted."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        pid = int(d)
        stat, argv = _read(pid, "stat"), _read(pid, "cmdline")
        if not stat or argv is None:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] in (b"Z", b"X"):
            continue
        procs[pid] = (int(fields[1]), argv.split(b"\0"))
    return procs


def processes_under(procs, roots):
    """The processes of procs that are roots or descend from one, as (pid,
    command line) pairs."""
    found = []
    for pid, (_ppid, argv) in procs.items():
        p, hops = pid, 0
        while p not in roots and p in procs and hops < 10:
            p, hops = procs[p][0], hops + 1
        if p in roots:
            found.append((pid, b" ".join(argv).decode(errors="replace").strip()))
    return found


def tfos_processes(marker=None):
    """Live (non-zombie) tfos node agents, coordinators (tfos.spark.Cluster
    starts one on an executor) and node programs on this host, as (pid,
    command line) pairs: agents started by the marked cluster, and their
    descendants (programs, TensorBoard)."""
    marker = marker or MARKER
    needle = ("TFOS_SPARKCLUSTER=%s\0" % marker).encode() if marker else None
    procs = live_processes()
    agents = set()
    for pid, (_, argv) in procs.items():
        if len(argv) > 1 and argv[0].endswith(b"/tfos") and argv[1] in (b"node", b"coordinator"):
            env = _read(pid, "environ") or b""
            if needle is None or needle in env + b"\0":
                agents.add(pid)
    return processes_under(procs, agents)


def check_no_leftovers(find, timeout):
    """After a test: wait (bounded) until find() lists nothing, SIGKILL what
    is left so the next test starts clean, and fail naming it."""
    import signal
    left = [] if wait_for(lambda: not find(), timeout) else find()
    for pid, _ in find():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "tfos processes left running after the test: %s" % left


def wait_no_tfos_processes(timeout):
    """Wait (bounded) until no tfos process is left; return what is left."""
    wait_for(lambda: not tfos_processes(), timeout)
    return tfos_processes()


def read_line_starting(proc, prefix, timeout):
    """The first line of proc's stdout (text) that starts with prefix, read
    for at most timeout seconds (checked between lines); '' when proc ends or
    time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            return ""
    return ""
