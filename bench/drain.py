"""Drain on notice: from the notice (SIGTERM to `tfos run`) to every rank's
checkpoint written, with --state-mib MiB of state per rank (default 1024,
issue 41's 1 GiB) at --ranks ranks (default 2).

Each rank holds its state in memory (a numpy array it touches every step),
steps at about --step-ms per step, reports its step (ctx.report(step=)) and
checks ctx.should_checkpoint(step) every step; at the drain step it writes
the state to the checkpoint dir (np.save, then fsync: on the disk, not in
the page cache), records when that ended, and exits 0. The bench sends
SIGTERM once every rank has stepped for --warmup seconds, and reports:

  drain_step_s   notice -> the coordinator has sent the drain step (the line
                 "checkpoint at step D" on tfos run's stderr)
  written_s      notice -> the last rank's checkpoint fsynced (the target:
                 <= 5 s for 1 GiB, inside the shortest cloud notice)
  exit_s         notice -> tfos run exited (75)
  steps_lost     ranks whose checkpoint step differs from the drain step
                 (0: every rank checkpointed at the same step)

Each round is a fresh run; --rounds (default 3) rounds, the best and the
median of each time. Times use time.time() across processes (one machine).
Run with `make bench-drain`; never while other work runs if the figure is
to be kept.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

PROG = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    from tfos import TFNode
    out, mib, step_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    ctx = TFNode.get_context()
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    state = np.ones(mib << 20, dtype=np.uint8)       # the model and optimizer state
    step, began = 0, time.time()
    with open(os.path.join(out, "ready-" + node), "w") as f:
        f.write(str(began))
    while True:
        step += 1
        state[(step * 4096) % state.size] = step & 0xff  # touch it: it is resident
        ctx.report(step=step)
        if ctx.should_checkpoint(step):
            path = os.path.join(ctx.checkpoint_dir, "state-%s.npy" % node)
            with open(path, "wb") as f:
                np.save(f, state)
                f.flush()
                os.fsync(f.fileno())
            with open(os.path.join(out, "written-" + node), "w") as f:
                json.dump({"t": time.time(), "step": step, "drain_step": ctx.drain_step()}, f)
            sys.exit(0)
        time.sleep(step_ms / 1000.0)
''')


def one_round(tfos, ranks, mib, step_ms, warmup, work):
    out = os.path.join(work, "out")
    os.makedirs(out)
    prog = os.path.join(work, "prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    cmd = [tfos, "run", "--workers", str(ranks), "--log-dir", os.path.join(work, "logs"),
           "--checkpoint-dir", os.path.join(work, "ckpt"), "--", sys.executable, prog, out, str(mib), str(step_ms)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while len([n for n in os.listdir(out) if n.startswith("ready-")]) < ranks:
            if p.poll() is not None or time.time() > deadline:
                raise SystemExit("the ranks did not start: %s" % p.stderr.read()[-2000:])
            time.sleep(0.05)
        time.sleep(warmup)   # reports reach the coordinator, the rate is known
        notice = time.time()
        p.send_signal(signal.SIGTERM)
        sent_at = None
        lines = []
        for line in p.stderr:
            lines.append(line)
            if sent_at is None and "checkpoint at step" in line:
                sent_at = time.time()
        rc = p.wait(timeout=120)
        exited = time.time()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if rc != 75:
        raise SystemExit("tfos run exited %d, not 75 (drained):\n%s" % (rc, "".join(lines)[-3000:]))
    written = [json.load(open(os.path.join(out, n))) for n in os.listdir(out) if n.startswith("written-")]
    assert len(written) == ranks, written
    return {"drain_step_s": (sent_at or exited) - notice, "written_s": max(w["t"] for w in written) - notice,
            "exit_s": exited - notice, "steps_lost": sum(w["step"] != w["drain_step"] for w in written)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfos", default="tfos")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--state-mib", type=int, default=1024)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where checkpoints go (default: a temporary dir)")
    a = ap.parse_args()
    rounds = []
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory(dir=a.dir, prefix="tfos-bench-drain-") as work:
            rounds.append(one_round(a.tfos, a.ranks, a.state_mib, a.step_ms, a.warmup, work))
    summary = {"ranks": a.ranks, "state_mib_per_rank": a.state_mib, "rounds": len(rounds)}
    for k in ("drain_step_s", "written_s", "exit_s"):
        vals = [r[k] for r in rounds]
        summary[k + "_best"] = round(min(vals), 3)
        summary[k + "_median"] = round(statistics.median(vals), 3)
    summary["steps_lost"] = sum(r["steps_lost"] for r in rounds)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
