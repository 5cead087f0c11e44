"""What a PyTorch user has today for issue 41's scenarios, on this machine:
torchrun's elastic agent (``--nnodes=1:2 --max-restarts``, the c10d
rendezvous on 127.0.0.1) with two "nodes" (two agents, one process each,
gloo), against the figures of bench/elastic_spark.py for tfos.

Each rank runs an all_reduce per step (--step-ms apart); rank 0 saves the
step every --every steps (the checkpoint) and records the step it is at.
A round: both agents step; agent 2 is SIGKILLed with its worker (capacity
lost for good, no notice: torchrun has none); agent 1's worker fails on its
collective, the agent restarts it and re-rendezvouses alone after
``last_call_timeout`` (--wait, the counterpart of tfos's elastic_wait);
then agent 2 is started again, and agent 1 restarts its worker once more to
let it in. Reports (medians and ranges over --rounds):

  shrink_s        kill -> the first step at world 1, less --wait
  steps_redone    steps between where rank 0 was at the kill and where the
                  world-1 worker resumed (the checkpoint)
  grow_s          agent 2 started -> both ranks stepping at world 2
  restarted       worker processes restarted over the round (every survivor,
                  each time: torchrun restarts all workers)
  grew            rounds in which the cluster did grow back within 150 s

Run with `.venv/bin/python bench/elastic_torchrun.py`, alone.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

PROG = textwrap.dedent('''
    import json, os, time
    import torch
    import torch.distributed as dist
    out, ckpt = os.environ["BENCH_OUT"], os.environ["BENCH_CKPT"]
    every, step_ms = int(os.environ["BENCH_EVERY"]), float(os.environ["BENCH_STEP_MS"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    start, first, t = step, None, torch.ones(1)

    def record(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

    while not os.path.exists(os.path.join(out, "stop")):
        dist.all_reduce(t)
        step += 1
        if first is None:
            first = time.time()
            record("first-%d" % os.getpid(), {"t": first, "start": start, "world": world, "rank": rank})
        if rank == 0:
            if step % every == 0:
                with open(ckpt + ".tmp", "w") as f:
                    json.dump({"step": step}, f)
                os.replace(ckpt + ".tmp", ckpt)
            record("at", {"step": step, "world": world})
        time.sleep(step_ms / 1000.0)
    dist.destroy_process_group()
''')


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError("gave up after %g s waiting for %s" % (timeout, what))


def firsts(out):
    rows = []
    for p in glob.glob(os.path.join(out, "first-*")):
        try:
            rows.append(json.load(open(p)))
        except (OSError, ValueError):
            pass
    return rows


def agent(opts, out, prog, port, name):
    env = dict(os.environ, BENCH_OUT=out, BENCH_CKPT=os.path.join(out, "ckpt.json"), BENCH_EVERY=str(opts.every),
               BENCH_STEP_MS=str(opts.step_ms), OMP_NUM_THREADS="1")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           "--rdzv-endpoint=127.0.0.1:%d" % port, "--rdzv-id=bench", "--max-restarts=5", "--monitor-interval=1",
           "--rdzv-conf=last_call_timeout=%g,join_timeout=120" % opts.wait, prog]
    log = open(os.path.join(out, "%s.log" % name), "a")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def children(pid):
    """The processes whose parent is pid (torchrun's workers run in sessions
    of their own: a signal to the agent's group misses them)."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def kill(p):
    """The node goes: its agent and the agent's workers, at once."""
    for pid in children(p.pid) + [p.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def one_round(opts, work, rnd):
    out = os.path.join(work, "r%d" % rnd)
    os.makedirs(out)
    prog = os.path.join(out, "train.py")
    with open(prog, "w") as f:
        f.write(PROG)
    port = free_port()
    a1 = agent(opts, out, prog, port, "agent1")
    time.sleep(1.0)   # agent 1 hosts the rendezvous store
    a2 = agent(opts, out, prog, port, "agent2")
    try:
        wait_for(lambda: sum(1 for r in firsts(out) if r["world"] == 2) >= 2, 180, "both ranks at world 2")
        time.sleep(1.0)
        at_kill = json.load(open(os.path.join(out, "at")))["step"]
        killed = time.time()
        kill(a2)
        one = wait_for(lambda: [r for r in firsts(out) if r["world"] == 1 and r["t"] > killed], 300,
                       "a world-1 worker")[0]
        time.sleep(1.0)
        grown = time.time()
        a2 = agent(opts, out, prog, port, "agent2")
        try:
            two = wait_for(lambda: (lambda rs: rs if len(rs) >= 2 else None)(
                [r for r in firsts(out) if r["world"] == 2 and r["t"] > grown]), 150, "both ranks back at world 2")
        except TimeoutError:
            two = None   # the agents' last lines say why (below)
        procs = len(firsts(out))
    finally:
        open(os.path.join(out, "stop"), "w").close()
        for p in (a1, a2):
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                kill(p)
    if two is None:
        lines = [ln.strip() for ln in open(os.path.join(out, "agent1.log"), errors="replace") if "Error" in ln]
        print("round %d: grow failed within 150 s; agent 1's last error: %s" % (rnd, lines[-1][:300] if lines else
                                                                                "(none)"), flush=True)
    return {"shrink_s": one["t"] - killed - opts.wait, "steps_redone": at_kill - one["start"],
            "grow_s": max(r["t"] for r in two) - grown if two else float("nan"), "restarted": procs - 2,
            "grew": 1.0 if two else 0.0}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--wait", type=float, default=5.0, help="last_call_timeout (tfos: elastic_wait), seconds")
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--every", type=int, default=100, help="checkpoint every N steps")
    opts = p.parse_args()
    work = tempfile.mkdtemp(prefix="tfos-bench-torchrun-")
    rows, ok = [], False
    try:
        for rnd in range(opts.rounds):
            r = one_round(opts, work, rnd)
            print("round %d: %s" % (rnd, json.dumps({k: round(v, 3) for k, v in r.items()})), flush=True)
            rows.append(r)
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept %s" % work, file=sys.stderr)
    print("\ntorchrun --nnodes=1:2 --max-restarts, a node killed then back, last_call_timeout %g s, "
          "checkpoint every %d steps, %d rounds (median, range)" % (opts.wait, opts.every, len(rows)))
    for k in ("shrink_s", "steps_redone", "grow_s", "restarted", "grew"):
        v = [r[k] for r in rows if r[k] == r[k]] or [float("nan")]
        print("  %-13s %8.2f   (%.2f - %.2f)" % (k, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
