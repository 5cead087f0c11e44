"""Cluster start overhead and agent memory.

1. start overhead: wall time of `tfos run --workers 8 -- true` against
   launching the same 8 programs by hand (`sh -c 'true & ... & wait'`),
   interleaved, median of N rounds each. Overhead = difference of medians.
2. agent memory: a live node agent (`tfos node`) against the per-executor
   process TensorFlowOnSpark starts for its queues (a multiprocessing
   BaseManager serving queues, as TFManager does), measured the same way:
   RSS (/proc/<pid>/status VmRSS, which counts shared library pages such as
   libc and libcrypto) and USS (private pages only, /proc/<pid>/smaps_rollup),
   what one more process really costs the machine.

Prints `name: value` lines. Usage: bench/start_overhead.py --tfos build/tfos [--rounds 30]
"""
import argparse
import multiprocessing
import multiprocessing.managers
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("benchmark command failed: %s" % " ".join(cmd))
    return dt


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def uss_kib(pid):
    """Unique set size: memory only this process holds (private pages)."""
    total = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


class QueueManager(multiprocessing.managers.BaseManager):
    pass


_queues = {"input": queue.Queue(), "output": queue.Queue(), "error": queue.Queue(), "control": queue.Queue()}


def _get_queue(name):
    return _queues[name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tfos", required=True)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=8)
    a = ap.parse_args()
    n = a.nodes
    logs = tempfile.mkdtemp(prefix="tfos-bench-")
    tfos_cmd = [a.tfos, "run", "--workers", str(n), "--log-dir", logs, "--", "true"]
    hand_cmd = ["sh", "-c", " ".join(["true &"] * n) + " wait"]
    timed(tfos_cmd), timed(hand_cmd)  # warm caches
    t_tfos, t_hand = [], []
    for _ in range(a.rounds):
        t_tfos.append(timed(tfos_cmd))
        t_hand.append(timed(hand_cmd))
    m_tfos, m_hand = statistics.median(t_tfos), statistics.median(t_hand)
    print("start_nodes: %d" % n)
    print("start_rounds: %d" % a.rounds)
    print("start_by_hand_ms: %.2f" % (m_hand * 1000))
    print("start_tfos_run_ms: %.2f" % (m_tfos * 1000))
    print("start_overhead_ms: %.2f" % ((m_tfos - m_hand) * 1000))
    print("start_overhead_target_ms: 100")

    # agent RSS: a 2-node cluster whose programs sleep; measure the agents
    p = subprocess.Popen([a.tfos, "run", "--workers", "2", "--log-dir", logs, "--", "sleep", "3"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agents = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (len(agents) < 2 or any(not children(x) for x in agents)):
        agents = children(p.pid)
        time.sleep(0.05)
    agent_rss = max(rss_kib(x) for x in agents)
    agent_uss = max(uss_kib(x) for x in agents)
    p.wait(timeout=30)

    # TFoS's mechanism: a manager process serving its queues
    QueueManager.register("get_queue", callable=_get_queue)
    mgr = QueueManager(address=("127.0.0.1", 0), authkey=b"bench")
    mgr.start()
    mgr_pid = mgr._process.pid
    q = mgr.get_queue("input")
    q.put(1)
    q.get()
    mgr_rss = rss_kib(mgr_pid)
    mgr_uss = uss_kib(mgr_pid)
    mgr.shutdown()
    print("agent_rss_kib: %d" % agent_rss)
    print("python_manager_rss_kib: %d" % mgr_rss)
    print("agent_rss_vs_manager: %.3f" % (agent_rss / mgr_rss))
    print("agent_uss_kib: %d" % agent_uss)
    print("python_manager_uss_kib: %d" % mgr_uss)
    print("agent_uss_vs_manager: %.3f" % (agent_uss / mgr_uss))
    print("agent_memory_target: < 0.100")


if __name__ == "__main__":
    main()
