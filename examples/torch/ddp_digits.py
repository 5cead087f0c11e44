"""Data-parallel PyTorch (DDP) training of a digits classifier on rows tfos feeds.

Under `tfos run`, from a file:

    python examples/digits/make_data.py /tmp/digits.npy
    build/tfos run --workers 2 --input /tmp/digits.npy --epochs 10 -- \\
        python examples/torch/ddp_digits.py

On Spark, from a DataFrame: examples/torch/spark_ddp.py calls `train()`
through `tfos.torch.TorchDistributor.train_on_dataframe`.

Every rank joins the process group with `init_process_group("gloo")` and no
other arguments (tfos set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE),
wraps a 64-128-10 MLP in DistributedDataParallel, and reads its own share of
the rows from its tfos feed through `tfos.torch.FeedDataset` and a
DataLoader. The feed gives the ranks different numbers of rows, so the loop
runs inside `ddp.join()`, which lets a rank whose feed has ended shadow the
others' all-reduces until every rank is done.

Restarts: rank 0 saves the model and optimizer to TFOS_CHECKPOINT_DIR every
`--ckpt-every` steps and every rank records its feed position with it; a
restarted attempt (`tfos run --max-restarts`) loads the checkpoint and the
feed resumes where it stands. Rank 0 prints the held-out accuracy at the end
and `train()` returns it.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "digits"))


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=32, help="rows per rank per step")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--checkpoint-dir", default=os.environ.get("TFOS_CHECKPOINT_DIR"),
                    help="where rank 0 saves ckpt.pt (default: $TFOS_CHECKPOINT_DIR)")
    ap.add_argument("--ckpt-every", type=int, default=40, help="steps between checkpoints")
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="seconds to sleep per step (to watch the status page, or to kill a rank mid-run)")
    return ap.parse_args(argv)


def save_checkpoint(path, state, feed):
    """rank 0's model and optimizer, then every rank's feed position, with
    a stop (SIGTERM) held off so that it cannot split the two."""
    with feed.checkpoint():
        if state is not None:
            import torch
            tmp = path + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, path)


def train(argv=None):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    from tfos import TFNode
    from tfos.torch import FeedDataset
    import digits_data

    a = parse_args(argv)
    dist.init_process_group("gloo")  # no arguments: the tfos node's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = TFNode.get_context()
    print("rank %d of %d, pid %d, attempt %d" % (rank, world, os.getpid(), ctx.attempt), flush=True)

    torch.manual_seed(a.seed)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(64, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    step = 0
    ckpt = os.path.join(a.checkpoint_dir, "ckpt.pt") if a.checkpoint_dir else None
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        print("resumed from %s at step %d" % (ckpt, step), flush=True)
    if ckpt:
        os.makedirs(a.checkpoint_dir, exist_ok=True)
    ddp = DistributedDataParallel(model)
    loss_fn = torch.nn.CrossEntropyLoss()

    data = FeedDataset(a.batch_size)
    start, rows = time.monotonic(), 0
    with ddp.join():
        for cols in DataLoader(data, batch_size=None):
            x, y = digits_data.feed_xy([c.numpy() for c in cols])
            x, y = torch.from_numpy(x), torch.from_numpy(y)
            opt.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            step += 1
            rows += len(y)
            if step % 20 == 0:
                print("step %d loss %.4f" % (step, loss.item()), flush=True)
                ctx.report(step=step, loss=loss.item())
            if ckpt and step % a.ckpt_every == 0:
                save_checkpoint(ckpt, {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
                                if rank == 0 else None, data.feed)
                print("checkpoint at step %d" % step, flush=True)
            if a.step_delay:
                time.sleep(a.step_delay)

    _, _, x_test, y_test = digits_data.load_split(a.seed)
    with torch.no_grad():
        pred = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    acc = float(np.mean(pred == y_test))
    print("trained on %d fed rows, %d steps, %.1f s" % (rows, step, time.monotonic() - start), flush=True)
    if rank == 0:
        print("held-out accuracy: %.4f" % acc, flush=True)
    dist.destroy_process_group()
    return acc


if __name__ == "__main__":
    train()
