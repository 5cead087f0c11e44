"""A TorchDistributor program in the shape Spark's documentation gives one
(a train function that sets up DDP from the environment torchrun would give
it and returns a value; then a training script run with its arguments),
with its import pointing at tfos.torch instead of pyspark.ml.torch.distributor.

    spark-submit --master spark://... torch_distributor_doc.py SCRIPT OUT_DIR
"""
import os
import sys

from pyspark.sql import SparkSession

from tfos.torch import TorchDistributor


def train(learning_rate, use_gpu):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("nccl" if use_gpu else "gloo")
    device = int(os.environ["LOCAL_RANK"]) if use_gpu else "cpu"
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x.sum(dim=1) > 0).long()
    dataset = TensorDataset(x, y)
    model = DDP(torch.nn.Linear(8, 2).to(device))
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate)
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb.to(device)), yb.to(device)).backward()
        opt.step()
    ranks = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(ranks)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return {"world": world, "rank_sum": int(ranks.item())}


if __name__ == "__main__":
    script, out_dir = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("torch distributor, as documented").getOrCreate()
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    out = distributor.run(train, 1e-3, False)
    print("function returned: world %d, sum of ranks %d" % (out["world"], out["rank_sum"]), flush=True)
    distributor.run(script, "--learning-rate=1e-3", "--out=" + out_dir)
    spark.stop()
