"""Recovery time after a killed worker, under `tfos run --max-restarts`.

Trains the digits example on 2 workers, SIGKILLs worker:1's TensorFlow
process once worker:0 has printed epoch 3, and stamps every line of the
launcher's output as it arrives (monotonic clock). Splits the time from the
kill to the first training epoch of the new attempt into:

  detection      kill -> the coordinator reports the node's failure
  re-formation   failure -> the new attempt's cluster spec is published
                 (stopping the survivors, new coordinator, agents, ports)
  framework      spec published -> first epoch finished by the new attempt
                 (Python + TensorFlow start, MWMS rendezvous, checkpoint
                 restore, one epoch)

Prints `name: value` lines. Usage: bench/recovery.py --tfos build/tfos [--rounds 3]
"""
import argparse
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "examples", "digits", "train.py")


def one_round(tfos, grace):
    logs = tempfile.mkdtemp(prefix="tfos-recovery-")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    p = subprocess.Popen([tfos, "run", "--workers", "2", "--grace", str(grace), "--log-dir", logs, "--",
                          sys.executable, TRAIN,
                          "--epochs", "12", "--model-dir", os.path.join(logs, "model")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    lines = queue.Queue()

    def pump(stream):
        for line in stream:
            lines.put((time.monotonic(), line))
        lines.put((time.monotonic(), None))

    for s in (p.stdout, p.stderr):
        threading.Thread(target=pump, args=(s,), daemon=True).start()
    t = {}
    victim, open_streams = None, 2
    deadline = time.monotonic() + 300
    try:
        while open_streams and time.monotonic() < deadline:
            try:
                ts, line = lines.get(timeout=5)
            except queue.Empty:
                continue
            if line is None:
                open_streams -= 1
                continue
            m = re.search(r"\[worker:1\] pid (\d+), attempt 1", line)
            if m:
                victim = int(m.group(1))
            if "kill" not in t and victim and "[worker:0] epoch 3/12" in line:
                t["kill"] = time.monotonic()
                os.kill(victim, signal.SIGKILL)
            elif "kill" in t and "detected" not in t and "failed: signal 9" in line:
                t["detected"] = ts
            elif "detected" in t and "formed" not in t and "all 2 nodes registered" in line:
                t["formed"] = ts
            elif "formed" in t and "epoch" not in t and re.search(r"\[worker:0\] epoch \d+/12", line):
                t["epoch"] = ts
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0 or len(t) < 4:
        sys.exit("recovery round failed (exit %s, got %s)" % (p.returncode, sorted(t)))
    return (t["detected"] - t["kill"], t["formed"] - t["detected"], t["epoch"] - t["formed"],
            t["epoch"] - t["kill"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tfos", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grace", type=float, default=5.0, help="tfos run --grace (SIGTERM to SIGKILL)")
    a = ap.parse_args()
    rounds = [one_round(a.tfos, a.grace) for _ in range(a.rounds)]
    names = ["detection", "reformation", "framework_start_and_first_epoch", "total_to_first_epoch"]
    print("recovery_rounds: %d" % a.rounds)
    print("recovery_grace_s: %g" % a.grace)
    for i, n in enumerate(names):
        vals = [r[i] for r in rounds]
        print("recovery_%s_s: %.3f (median; min %.3f, max %.3f)" % (n, statistics.median(vals), min(vals), max(vals)))
    print("recovery_target: training resumed < 3 s after the kill, plus framework start")


if __name__ == "__main__":
    main()
