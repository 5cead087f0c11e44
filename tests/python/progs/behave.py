"""A program whose behaviour per node is set on its command line:
   behave.py MARKER PIDDIR [job:index=action ...] [default=action]
actions: ok | sleep | exit3 | kill9 | hang (ignores SIGTERM) |
         exit3_when_all_up (exit 3 once every node has written its pid)
Every node writes its pid to PIDDIR/<job>-<index>.pid first. MARKER only
tags the command line so tests can find stray processes."""
import os
import signal
import sys
import time

job, index = os.environ["TFOS_JOB_NAME"], os.environ["TFOS_TASK_INDEX"]
me = "%s:%s" % (job, index)
piddir = sys.argv[2]
actions = dict(a.split("=", 1) for a in sys.argv[3:])
action = actions.get(me, actions.get("default", "ok"))
with open(os.path.join(piddir, "%s-%s.pid" % (job, index)), "w") as f:
    f.write(str(os.getpid()))
print("node %s pid %d action %s" % (me, os.getpid(), action), flush=True)
if action == "ok":
    sys.exit(0)
if action == "exit3_when_all_up":
    n = int(os.environ["TFOS_NUM_NODES"])
    up_by = time.monotonic() + 60
    while len(os.listdir(piddir)) < n and time.monotonic() < up_by:
        time.sleep(0.05)
    action = "exit3"
if action == "exit3":
    print("about to fail with exit code 3 at %.6f" % time.time(), flush=True)
    print("Traceback (most recent call last): ValueError: bad batch", file=sys.stderr, flush=True)
    sys.exit(3)
if action == "kill9":
    print("about to be killed at %.6f" % time.time(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if action == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    time.sleep(0.1)
sys.exit(0)
