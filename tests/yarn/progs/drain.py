"""A node program that reports its steps and drains on notice
(docs/RELIABILITY.md, "Drain on notice"): it checkpoints at the step the
coordinator announces and ends with exit 0. "training" once a few
heartbeats have carried a step to the coordinator."""
import sys
import time

import tfos

ctx = tfos.TFNode.get_context()
for step in range(1, 100000):
    time.sleep(0.05)
    ctx.report(step=step)
    if step == 40:
        print("training", flush=True)
    if ctx.should_checkpoint(step):
        print("checkpoint at drain step %d" % step, flush=True)
        sys.exit(0)
