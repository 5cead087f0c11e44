"""A torch program of workers that go on in place (tests/python/test_elastic.py,
tests/slurm): python inplace_prog.py MARKER STEPS [FULL].

Every step, each rank sums the row ids it reads (global step s is rows
(s-1)*8..s*8-1, rank r of W takes every W-th) and the ranks all_reduce the
sums into `total`, state held in memory only. A lost peer breaks the
collective: the rank rejoins the group at its new rank and world size,
takes rank 0's step and total (a survivor may have finished the step the
others lost) and goes on. At the end every rank's total is the sum of all
ids read once each.

With FULL (tfos run --grow-in-place), the ranks also look for a resize at
each step (a worker that joined in a lost one's place) and re-form with it;
a joiner takes rank 0's step and total when it starts. The run then goes on
past STEPS until the cluster is back at FULL workers, and each rank says
after which step it ended.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from tfos.torch import ElasticGroup

marker, steps = sys.argv[1], int(sys.argv[2])  # the marker tags the test's processes
full = int(sys.argv[3]) if len(sys.argv) > 3 else 0
g = ElasticGroup()
step, total = 1, torch.zeros(1, dtype=torch.float64)


def take_state():
    """rank 0's step and total, after the group was formed again"""
    state = torch.tensor([float(step), total.item()], dtype=torch.float64)
    dist.broadcast(state, 0)
    return int(state[0].item()), state[1:].clone()


if g.joined:
    step, total = take_state()
    print("pid %d joined as rank %d of %d (generation %d) at step %d" % (os.getpid(), g.rank, g.world, g.generation,
                                                                          step), flush=True)
else:
    print("pid %d rank %d of %d" % (os.getpid(), g.rank, g.world), flush=True)
while True:
    if full and g.resized():
        g.rejoin(timeout=60)
        step, total = take_state()
        print("re-formed as rank %d of %d (generation %d) at step %d" % (g.rank, g.world, g.generation, step),
              flush=True)
        continue
    if step > steps and (not full or g.world == full):
        break
    t = torch.tensor([float(sum(i for i in range((step - 1) * 8, step * 8) if i % g.world == g.rank))],
                     dtype=torch.float64)
    try:
        dist.all_reduce(t)
    except g.errors as e:
        print("lost a peer at step %d (%s)" % (step, type(e).__name__), flush=True)
        g.rejoin(timeout=30 if not full else 60)
        step, total = take_state()
        print("rejoined as rank %d of %d (generation %d) at step %d" % (g.rank, g.world, g.generation, step),
              flush=True)
        continue
    total += t
    if step == 20:
        print("stepping at %d" % g.world, flush=True)
    time.sleep(0.02)
    step += 1
if full:
    print("pid %d done at world %d after step %d: total %d" % (os.getpid(), g.world, step - 1, int(total.item())),
          flush=True)
else:
    print("pid %d done at world %d: total %d" % (os.getpid(), g.world, int(total.item())), flush=True)
