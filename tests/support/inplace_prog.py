"""A torch program of workers that go on in place (tests/python/test_elastic.py,
tests/slurm): python inplace_prog.py MARKER STEPS.

Every step, each rank sums the row ids it reads (global step s is rows
(s-1)*8..s*8-1, rank r of W takes every W-th) and the ranks all_reduce the
sums into `total`, state held in memory only. A lost peer breaks the
collective: the rank rejoins the group at its new rank and world size,
takes rank 0's step and total (a survivor may have finished the step the
others lost) and goes on. At the end every rank's total is the sum of all
ids read once each.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from tfos.torch import ElasticGroup

marker, steps = sys.argv[1], int(sys.argv[2])  # the marker tags the test's processes
g = ElasticGroup()
print("pid %d rank %d of %d" % (os.getpid(), g.rank, g.world), flush=True)
step, total = 1, torch.zeros(1, dtype=torch.float64)
while step <= steps:
    t = torch.tensor([float(sum(i for i in range((step - 1) * 8, step * 8) if i % g.world == g.rank))],
                     dtype=torch.float64)
    try:
        dist.all_reduce(t)
    except g.errors as e:
        print("lost a peer at step %d (%s)" % (step, type(e).__name__), flush=True)
        g.rejoin(timeout=30)
        state = torch.tensor([float(step), total.item()], dtype=torch.float64)
        dist.broadcast(state, 0)
        step, total = int(state[0].item()), state[1:].clone()
        print("rejoined as rank %d of %d (generation %d) at step %d" % (g.rank, g.world, g.generation, step),
              flush=True)
        continue
    total += t
    if step == 20:
        print("stepping at %d" % g.world, flush=True)
    time.sleep(0.02)
    step += 1
print("pid %d done at world %d: total %d" % (os.getpid(), g.world, int(total.item())), flush=True)
