"""Baselines for cluster formation, on the same machine as bench/formation.py:
torch.distributed's own ways of bringing N ranks together.

  tcpstore  a TCPStore server and N client processes, each doing a
            rendezvous: add() a counter for its rank, set() its address,
            wait() for every rank's address and get() rank 0's: what a
            torchrun-style rendezvous costs in messages (no agents, no
            programs started: the clients are forked from this process with
            torch already imported, so no import is timed)
  gloo      init_process_group("gloo") at N ranks (forked as above) and one
            barrier: the collective's own start, which a torch program pays
            after tfos (or torchrun) has given it its rank

Each is timed from the first fork to the last rank done; medians of
--rounds. Compare with `tfos-simagents -n N --framework torch` (formation
only) and `tfos run --workers N --framework torch -- true` (with processes).

Usage: bench/rendezvous.py [--tcpstore 64,256,1024] [--gloo 64,128] [--rounds 3]
"""
import argparse
import os
import socket
import statistics
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fork_all(n, child, after=None):
    """Fork n children running child(i); wait for all (bounded); return
    seconds from the first fork to the last exit. A child that fails fails
    the benchmark."""
    t0 = time.perf_counter()
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child(i)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    kept = after() if after else None  # noqa: F841 (a server, kept alive until the ranks are done)
    deadline = time.monotonic() + 600
    bad = 0
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                bad += status != 0
                break
            if time.monotonic() > deadline:
                for p in pids:
                    try:
                        os.kill(p, 9)
                    except OSError:
                        pass
                sys.exit("ranks did not finish within 600 s")
            time.sleep(0.001)
    if bad:
        sys.exit("%d of %d ranks failed" % (bad, n))
    return time.perf_counter() - t0


def tcpstore_round(n):
    from torch.distributed import TCPStore
    port = free_port()
    # the server starts after the forks: a process forked while the
    # server's thread runs can deadlock in torch's locks

    def client(_):
        from datetime import timedelta
        st = TCPStore("127.0.0.1", port, n + 1, False, timeout=timedelta(seconds=300))
        rank = st.add("joined", 1) - 1
        st.set("addr/%d" % rank, "127.0.0.1:%d" % (20000 + rank))
        st.wait(["addr/%d" % r for r in range(n)])
        assert st.get("addr/0").startswith(b"127.0.0.1:")

    return fork_all(n, client, lambda: TCPStore("127.0.0.1", port, n + 1, True, wait_for_workers=False))


def gloo_round(n):
    port = free_port()

    def rank(i):
        import torch.distributed as dist
        from datetime import timedelta
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=i, world_size=n,
                                timeout=timedelta(seconds=300))
        dist.barrier()
        dist.destroy_process_group()

    return fork_all(n, rank)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcpstore", default="64,256,1024")
    ap.add_argument("--gloo", default="64,128")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import torch  # noqa: F401 (imported once, before the forks)
    rows = []
    for kind, sizes, fn in (("TCPStore rendezvous", a.tcpstore, tcpstore_round),
                            ("gloo init_process_group + barrier", a.gloo, gloo_round)):
        for n in [int(s) for s in sizes.split(",") if s]:
            t = statistics.median(fn(n) for _ in range(a.rounds))
            rows.append((kind, n, t))
            print("%s N=%d: %.3f s (median of %d)" % (kind, n, t, a.rounds), flush=True)
    print()
    print("| baseline | N | seconds | per rank (ms) |")
    print("|---|---:|---:|---:|")
    for kind, n, t in rows:
        print("| %s | %d | %.2f | %.2f |" % (kind, n, t, t / n * 1000))


if __name__ == "__main__":
    main()
