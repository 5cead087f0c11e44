"""A training script for TorchDistributor.run(path, *args): it reads its
arguments, joins the process group from the environment and writes what it
saw to OUT/rank-R.txt."""
import argparse
import os

import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--learning-rate", type=float, required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
dist.init_process_group("gloo")
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "rank-%d.txt" % dist.get_rank()), "w") as f:
    f.write("rank %d of %d, learning rate %g\n" % (dist.get_rank(), dist.get_world_size(), a.learning_rate))
dist.barrier()
dist.destroy_process_group()
