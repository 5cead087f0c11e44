"""Cluster formation at scale: `tfos run --workers N -- true` against N bare
`/bin/true` processes started at once by one shell, for N up to the CLI's limit.

Each N runs the two interleaved, --rounds times (fewer for N >= 256), and
the medians count. Before the timed rounds one checked round runs a program
that prints its task index and port: every node must have run, with a
distinct index and a distinct port, and no process of the run may be left
afterwards (the run's marker in argv, looked for in /proc).

Prints a table: N, formed s (launch -> the spec sent to every node, from
the run's start line), the whole run's s (formed, every program run and
ended, everything stopped), bare s, ratio, overhead per node (ms).

With --simulated 4096,16384 it then forms clusters beyond one machine's
processes with bench/simagents.c (build/tfos-simagents): that many agents'
protocol in one process, each with its own connection and the real HMAC
handshake, against a real `tfos coordinator`; --framework torch (the ranks
spec) unless --sim-framework tf. Each size runs --rounds times (at most 3);
the medians of formed (launch -> every node has its spec) and ended, and
the coordinator's peak RSS and CPU, are printed, with the start line of the
median run (the phases' p50/p99/max).

--framework torch runs the real agents with the ranks form (rank 0's
address and the ranks) instead of every address.

Usage: bench/formation.py --tfos build/tfos [--sizes 2,8,64,256,1024] [--rounds 5] [--framework tf|torch]
                          [--simulated 4096,16384 [--simagents build/tfos-simagents]]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import uuid


def timed(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("benchmark command failed (%d): %s" % (r.returncode, " ".join(cmd[:6])))
    return dt, r.stderr


def formed_s(stderr):
    """Launch -> the spec sent to every node, from tfos run's start line."""
    m = re.search(r"start: spec sent (\d+) ms after launch", stderr)
    if not m:
        sys.exit("no start line in tfos run's output:\n" + stderr[-2000:])
    return int(m.group(1)) / 1000


def left_running(marker):
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(d))
            except OSError:
                pass
    return found


def check(tfos, n, framework):
    marker = "formation-" + uuid.uuid4().hex
    prog = 'echo "NODE $TFOS_TASK_INDEX $TFOS_PORT" # %s' % marker
    r = subprocess.run([tfos, "run", "--workers", str(n), "--max-restarts", "0", "--framework", framework, "--",
                        "sh", "-c", prog],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("tfos run --workers %d failed:\n%s" % (n, r.stderr[-3000:]))
    nodes = re.findall(r"NODE (\d+) (\d+)", r.stdout)
    indexes = {int(i) for i, _ in nodes}
    ports = {int(p) for _, p in nodes}
    if len(nodes) != n or indexes != set(range(n)) or len(ports) != n:
        sys.exit("N=%d: %d nodes printed, %d distinct indexes, %d distinct ports" %
                 (n, len(nodes), len(indexes), len(ports)))
    deadline = time.monotonic() + 10
    while left_running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left_running(marker):
        sys.exit("N=%d: processes left running: %s" % (n, left_running(marker)))


def simulated(simagents, tfos, n, rounds, framework):
    """Median formed/ended seconds, peak RSS (MB), CPU (s) and a start line
    of `tfos-simagents -n N` over `rounds` runs."""
    runs = []
    for _ in range(rounds):
        r = subprocess.run([simagents, "--tfos", tfos, "-n", str(n), "--framework", framework], capture_output=True,
                           text=True, timeout=900)
        if r.returncode != 0:
            sys.exit("tfos-simagents -n %d failed:\n%s%s" % (n, r.stdout[-2000:], r.stderr[-2000:]))
        m = re.search(r"formed_s=([\d.]+) ended_s=([\d.]+) redials=(\d+) failed=0 coord_peak_rss_mb=([\d.]+) "
                      r"coord_cpu_s=([\d.]+)", r.stdout)
        start = next((ln for ln in r.stdout.splitlines() if "start: spec sent" in ln), "")
        runs.append((float(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5)),
                     start))
    runs.sort()
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfos", required=True)
    ap.add_argument("--sizes", default="2,8,64,256,1024")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--simulated", default="", help="sizes of simulated clusters, e.g. 4096,16384")
    ap.add_argument("--simagents", default=None, help="the tfos-simagents binary (default: beside --tfos)")
    ap.add_argument("--sim-framework", default="torch", choices=["torch", "jax", "tf"])
    ap.add_argument("--framework", default="tf", choices=["torch", "jax", "tf"],
                    help="what the real agents are sent: tf, every address (the default); torch, the ranks form")
    a = ap.parse_args()
    rows = []
    for n in [int(s) for s in a.sizes.split(",") if s]:
        check(a.tfos, n, a.framework)
        rounds = a.rounds if n < 256 else max(1, min(a.rounds, 3))
        tf, formed, bare = [], [], []
        for _ in range(rounds):
            dt, err = timed([a.tfos, "run", "--workers", str(n), "--max-restarts", "0", "--framework", a.framework,
                             "--", "true"])
            tf.append(dt)
            formed.append(formed_s(err))
            bare.append(timed(["sh", "-c", "i=0; while [ $i -lt %d ]; do /bin/true & i=$((i+1)); done; wait" % n])[0])
        t, f, b = statistics.median(tf), statistics.median(formed), statistics.median(bare)
        rows.append((n, f, t, b))
        print("N=%d tfos formed %.3f s, whole run %.3f s, bare %.3f s (%d rounds, --framework %s; checked: "
              "distinct indexes and ports, nothing left)" % (n, f, t, b, rounds, a.framework), flush=True)
    print()
    print("| nodes | formed (s) | whole run (s) | N bare processes (s) | ratio | overhead per node (ms) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, f, t, b in rows:
        print("| %d | %.2f | %.2f | %.2f | %.1f | %.1f |" % (n, f, t, b, t / b, (t - b) / n * 1000))
    if a.simulated:
        sim = a.simagents or os.path.join(os.path.dirname(os.path.abspath(a.tfos)), "tfos-simagents")
        srows = []
        for n in [int(s) for s in a.simulated.split(",") if s]:
            formed, ended, redials, rss, cpu, start = simulated(sim, a.tfos, n, max(1, min(a.rounds, 3)),
                                                                a.sim_framework)
            srows.append((n, formed, ended, rss, cpu))
            print("N=%d simulated: formed %.3f s, ended %.3f s, %d redials, coordinator %.1f MB peak, %.2f s CPU"
                  % (n, formed, ended, redials, rss, cpu), flush=True)
            print("  " + start.strip(), flush=True)
        print()
        print("| simulated nodes | formed (s) | ended (s) | coordinator peak RSS (MB) | coordinator CPU (s) | "
              "per node (us CPU, KB) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n, formed, ended, rss, cpu in srows:
            print("| %d | %.2f | %.2f | %.0f | %.2f | %.0f, %.1f |" % (n, formed, ended, rss, cpu, cpu / n * 1e6,
                                                                    rss * 1024 / n))


if __name__ == "__main__":
    main()
