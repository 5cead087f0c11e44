"""Helpers for the TFCluster tests: find tfos processes on this host."""
import os
import time


def wait_for(cond, timeout, interval=0.1):
    """Poll cond() until truthy or timeout seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        val = cond()
        if val or time.monotonic() >= deadline:
            return val
        time.sleep(interval)


def tfos_processes():
    """Live (non-zombie) tfos node agents and node programs on this host, as
    (pid, command line) pairs."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:].split()[0] in (b"Z", b"X"):
            continue
        cmd = b" ".join(argv).decode(errors="replace")
        is_agent = len(argv) > 1 and argv[0].endswith(b"/tfos") and argv[1] == b"node"
        if is_agent or "tfos._sparkprog" in cmd:
            found.append((int(d), cmd.strip()))
    return found


def wait_no_tfos_processes(timeout):
    """Wait (bounded) until no tfos process is left; return what is left."""
    wait_for(lambda: not tfos_processes(), timeout)
    return tfos_processes()
