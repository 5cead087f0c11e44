"""PyTorch on tfos without Spark (issue 12): real torch, DDP over gloo between
real processes under `tfos run`, and tfos.torch.TorchDistributor(local_mode=True).

- examples/torch/ddp_digits.py, fed from a file, reaches >= 0.90 held-out;
- a rank killed with SIGKILL mid-training: the cluster is re-formed and
  training resumes from the checkpoint, not from step 0;
- an exception in rank 1 comes back with its traceback (tfos run and
  TorchDistributor);
- TorchDistributor returns rank 0's value; FeedDataset refuses DataLoader
  worker processes;
- nothing is left running.
"""
import importlib.util
import os
import re
import subprocess

import pytest

from conftest import PY, ROOT, pids_with, run_and_kill, run_tfos, wait_for

if importlib.util.find_spec("torch") is None:  # pragma: no cover - torch is pinned in requirements.txt
    pytest.skip("torch is NOT installed for %s: the PyTorch tests are NOT run" % PY, allow_module_level=True)

EXAMPLE = os.path.join(ROOT, "examples", "torch", "ddp_digits.py")


@pytest.fixture(scope="module")
def digits_npy(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "digits.npy"
    subprocess.run([PY, os.path.join(ROOT, "examples", "digits", "make_data.py"), str(path)], check=True,
                   capture_output=True)
    return path


def test_ddp_fed_from_a_file_and_a_killed_rank_resumes(tmp_path, marker, digits_npy):
    ckpt = tmp_path / marker / "ckpt"
    code, text, err, victim = run_and_kill(
        ["run", "--workers", "2", "--max-restarts", "1", "--input", str(digits_npy), "--epochs", "10", "--log-dir",
         str(tmp_path / "logs"), "--quiet", "--", PY, EXAMPLE, "--checkpoint-dir", str(ckpt), "--step-delay", "0.01"],
        r"\[worker:1\] rank 1 of 2, pid (\d+), attempt 1", r"\[worker:0\] checkpoint at step 80$", timeout=300)
    assert victim, text[-3000:]
    assert code == 0, text[-3000:] + err[-3000:]
    assert "worker:1 (executor 1, host 127.0.0.1, pid %d) failed: signal 9 (Killed)" % victim in err, err[-3000:]
    assert "all nodes finished successfully on attempt 2" in err, err[-3000:]
    assert re.search(r"\[worker:1\] rank 1 of 2, pid \d+, attempt 2", text)
    resumed = [int(s) for s in re.findall(r"\[worker:\d\] resumed from \S+ckpt.pt at step (\d+)", text)]
    assert len(resumed) == 2 and min(resumed) >= 80, text[-3000:]  # both ranks, not from step 0
    acc = float(re.search(r"^\[worker:0\] held-out accuracy: ([\d.]+)$", text, re.M).group(1))
    assert acc >= 0.90, text[-3000:]
    assert wait_for(lambda: not pids_with(marker), 10)


def test_exception_in_rank_1_comes_back_with_its_traceback(tmp_path, marker):
    code = ("import sys, torch.distributed as dist\n"
            "dist.init_process_group('gloo')\n"
            "def step(rank):\n"
            "    if rank == 1:\n"
            "        raise ValueError('rank 1 met a bad batch')\n"
            "step(dist.get_rank())\n"
            "dist.barrier()\n")
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--", PY, "-c", code, marker],
                 timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert re.search(r"worker:1 \(executor 1, host 127.0.0.1, pid \d+\) failed: exit code 1", r.stderr), r.stderr
    assert "ValueError: rank 1 met a bad batch" in r.stderr and 'line 5, in step' in r.stderr, r.stderr[-3000:]
    assert wait_for(lambda: not pids_with(marker), 10)


def _run_driver(tmp_path, marker, body):
    """Run ``body`` as a driver program (TorchDistributor imported, the log
    dir, which carries the marker, in sys.argv[1]); it must exit 0."""
    path = tmp_path / "driver.py"
    path.write_text("import sys\nfrom tfos.torch import TorchDistributor\n" + body)
    r = subprocess.run([PY, str(path), str(tmp_path / marker / "logs")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_torch_distributor_local_mode_returns_rank_0_value(tmp_path, marker):
    r = _run_driver(tmp_path, marker, (
        "def train(scale):\n"
        "    import os, torch, torch.distributed as dist\n"
        "    dist.init_process_group('gloo')\n"
        "    t = torch.tensor([float(dist.get_rank() + 1)])\n"
        "    dist.all_reduce(t)\n"
        "    return {'rank': dist.get_rank(), 'sum': t.item() * scale, 'world': int(os.environ['WORLD_SIZE'])}\n"
        "out = TorchDistributor(num_processes=3, local_mode=True, use_gpu=False, log_dir=sys.argv[1]).run(train, 10)\n"
        "print('RESULT', out)\n"))
    assert "RESULT {'rank': 0, 'sum': 60.0, 'world': 3}" in r.stdout, r.stdout + r.stderr[-3000:]
    assert wait_for(lambda: not pids_with(marker), 10)


def test_torch_distributor_local_mode_failure_names_the_rank(tmp_path, marker):
    r = _run_driver(tmp_path, marker, (
        "def train():\n"
        "    import torch.distributed as dist\n"
        "    dist.init_process_group('gloo')\n"
        "    if dist.get_rank() == 1:\n"
        "        raise KeyError('missing column')\n"
        "    dist.barrier()\n"
        "import tfos\n"
        "try:\n"
        "    TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, max_restarts=0,\n"
        "                     log_dir=sys.argv[1]).run(train)\n"
        "except tfos.ClusterError as exc:\n"
        "    print('FAILED', exc.exit_code)\n"
        "    print(exc)\n"))
    assert "FAILED 1" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "worker:1" in r.stdout and "KeyError: 'missing column'" in r.stdout, r.stdout
    assert wait_for(lambda: not pids_with(marker), 10)


def test_torch_distributor_checks_its_arguments(tmp_path):
    from tfos.torch import TorchDistributor
    with pytest.raises(ValueError, match="num_processes must be a positive int"):
        TorchDistributor(num_processes=0)
    with pytest.raises(FileNotFoundError, match="no-such-script.py does not exist"):
        TorchDistributor(use_gpu=False).run(str(tmp_path / "no-such-script.py"))
    with pytest.raises(TypeError, match="must be a function or the path of a Python script"):
        TorchDistributor(use_gpu=False).run(42)
    with pytest.raises(ValueError, match="train_on_dataframe needs local_mode=False"):
        TorchDistributor(use_gpu=False).train_on_dataframe(print, None)


def test_feed_dataset_refuses_dataloader_workers(tmp_path, marker, digits_npy):
    code = ("import torch\n"
            "from torch.utils.data import DataLoader\n"
            "from tfos.torch import FeedDataset\n"
            "ds = FeedDataset(16)\n"
            "first = next(iter(DataLoader(ds, batch_size=None)))\n"
            "print('batch', tuple(first[0].shape), first[0].dtype, flush=True)\n"
            "try:\n"
            "    next(iter(DataLoader(ds, batch_size=None, num_workers=1)))\n"
            "except RuntimeError as exc:\n"
            "    print('refused:', 'num_workers=0' in str(exc), flush=True)\n"
            "ds.feed.terminate()\n")
    r = run_tfos(["run", "--workers", "1", "--input", str(digits_npy), "--quiet", "--log-dir",
                  str(tmp_path / "logs"), "--", PY, "-c", code, marker], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[worker:0] batch (16, 65) torch.float32" in r.stdout, r.stdout
    assert "[worker:0] refused: True" in r.stdout, r.stdout + r.stderr[-2000:]
    assert wait_for(lambda: not pids_with(marker), 10)


PREFETCH_READER = (
    "import json, sys, torch\n"
    "from torch.utils.data import DataLoader\n"
    "from tfos.torch import FeedDataset\n"
    "prefetch, ckpt = int(sys.argv[1]), sys.argv[2]\n"
    "ds = FeedDataset(16, prefetch=prefetch)\n"
    "sizes, total = [], 0.0\n"
    "for i, (b,) in enumerate(DataLoader(ds, batch_size=None)):\n"
    "    sizes.append(len(b))\n"
    "    total += float(b.double().sum())\n"
    "    if i == 9:  # a checkpoint after 10 batches: the position of 160 rows\n"
    "        with ds.feed.checkpoint(ckpt):\n"
    "            pass\n"
    "print('read', json.dumps({'sizes': sizes, 'total': total}), flush=True)\n")


def test_feed_dataset_prefetch_gives_the_same_batches_and_position(tmp_path, marker, digits_npy):
    """prefetch=3 (a thread reading ahead) and prefetch=0 (reading on the
    training thread) give the same batches, and a checkpoint taken after 10
    batches records the same feed position: that of the 160 rows taken."""
    import json
    seen = {}
    for prefetch in (0, 3):
        ckpt = tmp_path / ("ckpt%d" % prefetch)
        r = run_tfos(["run", "--workers", "1", "--input", str(digits_npy), "--quiet", "--log-dir",
                      str(tmp_path / ("logs%d" % prefetch)), "--", PY, "-c", PREFETCH_READER, str(prefetch),
                      str(ckpt), marker], timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        line = next(ln for ln in r.stdout.splitlines() if "] read " in ln)
        (pos_file,) = (ckpt / "tfos-feed-position").iterdir()
        pos = json.loads(pos_file.read_text())
        seen[prefetch] = (json.loads(line.split("] read ", 1)[1]), pos["partitions"], pos["partial"])
    assert seen[0] == seen[3]
    got, partitions, partial = seen[3]
    import numpy as np
    rows = len(np.load(str(digits_npy), mmap_mode="r"))
    assert sum(got["sizes"]) == rows and got["sizes"][:-1] == [16] * (len(got["sizes"]) - 1)
    assert partitions == [] and partial == {"1": 160}   # the file is partition 1: its first 160 rows
    assert wait_for(lambda: not pids_with(marker), 10)
