"""PyTorch on tfos without Spark (issue 12): real torch, DDP over gloo between
real processes under `tfos run`, and tfos.torch.TorchDistributor(local_mode=True).

- examples/torch/ddp_digits.py, fed from a file, reaches >= 0.90 held-out;
- a rank killed with SIGKILL mid-training: the cluster is re-formed and
  training resumes from the checkpoint, not from step 0;
- an exception in rank 1 comes back with its traceback (tfos run and
  TorchDistributor);
- TorchDistributor returns rank 0's value; FeedDataset refuses DataLoader
  worker processes; FeedDataset(device=) copies batches straight from the
  ring's records (joined across records, their own memory);
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


def test_feed_dataset_device_reader_joins_records_into_tensors_of_their_own():
    """FeedDataset(device=)'s reader (_ToDevice; here the CPU, as no GPU is
    at hand): batches across records of the ring, taken as views, come out
    as one tensor per column equal to the rows fed, in memory of their own
    (not the ring's mapping, which producers write over after the next
    read); a column of strings stays numpy; the end of the feed is None."""
    import numpy as np
    import torch
    import tfos._tfos as t
    from tfos import feed
    from tfos.torch import _ToDevice
    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 16)
    x = np.arange(6 * 512 * 40, dtype=np.float32).reshape(6, 512, 40)   # 80 KiB records: read as views
    prod = t.Ring(fd_in, t.ROLE_PRODUCER)
    prod.partition_begin(1, 5000)
    for i in range(6):
        prod.write_columns(feed.TAG_COLUMNS, [("x", x[i]), ("i", np.arange(512 * i, 512 * (i + 1)))], 5000)
    prod.partition_end(5000)
    prod.end_feed(5000)
    prod.close()
    mgr = feed.FeedManager(fd_in, fd_out)
    df = feed.DataFeed(mgr, True, timeout=20)
    read = _ToDevice(df, 700, True, torch.device("cpu"))
    lo, hi = mgr.input.views_region
    got = []
    while True:
        b = read()
        if b is None:
            break
        cols = read.hand_out(b)
        assert set(cols) == {"x", "i"} and all(isinstance(c, torch.Tensor) for c in cols.values())
        assert not lo <= cols["x"].data_ptr() < lo + hi
        got.append(cols)
    assert [len(c["x"]) for c in got] == [700, 700, 700, 700, 272]   # 4 of 5 across two records
    assert torch.equal(torch.cat([c["x"] for c in got]), torch.from_numpy(x.reshape(-1, 40)))
    assert torch.equal(torch.cat([c["i"] for c in got]), torch.arange(3072))
    got[0]["x"].add_(1)   # writable: its own memory
    read.close()
    mgr.close()

    fd_in, fd_out = t.ring_create(1 << 20), t.ring_create(1 << 16)
    prod = t.Ring(fd_in, t.ROLE_PRODUCER)
    prod.partition_begin(1, 5000)
    prod.write_rows(feed.TAG_COLUMNS, [("r%d" % k, 1.0) for k in range(2048)], 5000)
    prod.partition_end(5000)
    prod.end_feed(5000)
    prod.close()
    mgr = feed.FeedManager(fd_in, fd_out)
    read = _ToDevice(feed.DataFeed(mgr, True, timeout=20), 1500, False, torch.device("cpu"))
    s, v = read.hand_out(read())
    assert isinstance(s, np.ndarray) and list(s[:2]) == ["r0", "r1"] and v.dtype == torch.float64
    assert len(read.hand_out(read())[0]) == 548 and read() is None
    mgr.close()


DEVICE_READER = (
    "import hashlib, json, sys, torch\n"
    "from torch.utils.data import DataLoader\n"
    "from tfos.torch import FeedDataset\n"
    "prefetch, device = int(sys.argv[1]), (None if sys.argv[2] == 'none' else sys.argv[2])\n"
    "kept = []\n"
    "for (b,) in DataLoader(FeedDataset(1500, prefetch=prefetch, device=device), batch_size=None):\n"
    "    kept.append(b)\n"
    "# hashed once every batch was read: by then the ring went round twice\n"
    "print('read', json.dumps([hashlib.sha1(b.numpy().tobytes()).hexdigest() for b in kept]), flush=True)\n")


def test_feed_dataset_device_batches_are_the_rows_fed_in_order(tmp_path, marker):
    """`tfos run --input` of an .npy file, 3 epochs through a ring of 4 MiB
    (the ring goes round about twice): FeedDataset(1500, device='cpu'),
    with and without prefetch, hands out the file's rows in order, in
    batches across records (of 1000 rows), each its own memory (hashed
    after the whole feed was read), as FeedDataset without a device does."""
    import hashlib
    import json
    import numpy as np
    rows = np.random.default_rng(5).standard_normal((21000, 33)).astype(np.float32)
    path = tmp_path / "rows.npy"
    np.save(str(path), rows)
    stream = np.concatenate([rows] * 3)
    want = [hashlib.sha1(stream[lo:lo + 1500].tobytes()).hexdigest() for lo in range(0, len(stream), 1500)]
    for prefetch, device in ((0, "none"), (0, "cpu"), (2, "cpu")):
        r = run_tfos(["run", "--workers", "1", "--input", str(path), "--epochs", "3", "--batch-rows", "1000",
                      "--quiet", "--log-dir", str(tmp_path / ("logs%d%s" % (prefetch, device))), "--", PY, "-c",
                      DEVICE_READER, str(prefetch), device, marker], timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        line = next(ln for ln in r.stdout.splitlines() if "] read " in ln)
        assert json.loads(line.split("] read ", 1)[1]) == want, (prefetch, device)
    assert wait_for(lambda: not pids_with(marker), 10)
