"""A node program for the YARN restart tests: counts steps 0..$STEPS_TOTAL
(default 8), half a second each, keeping its last step in
$TFOS_CHECKPOINT_DIR/<job>-<index>.step (its checkpoint), and starts from
there after a restart. A checkpoint dir on HDFS (tfos yarn's default) goes
through a tfos.fs.Mirror: pulled at the start, pushed after every step. Prints "STEPS <node> attempt=<n> from=<step>
container=<id>" when it starts, "STEPS <node> past <n>" once its checkpoint is
$STEPS_AT + 2, and "STEPS <node> done" at the end.

On attempt 1, at step $STEPS_AT (default 3), the node named by $STEPS_NODE
(e.g. worker:1) does $STEPS_DO: "kill9" SIGKILLs itself (a crashed
program), "wait" sleeps until it is ended from outside (the test kills its
container through YARN). A ps node serves until it is stopped."""
import os
import signal
import sys
import time

import tfos.fs

job, index = os.environ["TFOS_JOB_NAME"], os.environ["TFOS_TASK_INDEX"]
me = "%s:%s" % (job, index)
attempt = int(os.environ["TFOS_ATTEMPT"])
if job == "ps":
    while True:
        time.sleep(1)
mirror = tfos.fs.Mirror(os.environ["TFOS_CHECKPOINT_DIR"])
path = os.path.join(mirror.path, "%s-%s.step" % (job, index))
start = int(open(path).read()) if os.path.exists(path) else 0
print("STEPS %s attempt=%d from=%d container=%s" % (me, attempt, start, os.environ.get("CONTAINER_ID")),
      flush=True)
for step in range(start, int(os.environ.get("STEPS_TOTAL", "8"))):
    if attempt == 1 and me == os.environ.get("STEPS_NODE") and step == int(os.environ.get("STEPS_AT", "3")):
        if os.environ.get("STEPS_DO") == "kill9":
            os.kill(os.getpid(), signal.SIGKILL)
        print("STEPS %s waiting at %d" % (me, step), flush=True)
        while True:
            time.sleep(1)
    time.sleep(0.5)
    with open(path + ".tmp", "w") as f:
        f.write(str(step + 1))
    os.replace(path + ".tmp", path)
    mirror.push()
    if step + 1 == int(os.environ.get("STEPS_AT", "3")) + 2:  # checkpointed past the failure point
        print("STEPS %s past %d" % (me, step + 1), flush=True)
print("STEPS %s done" % me, flush=True)
sys.exit(0)
