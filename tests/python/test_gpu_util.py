"""tfos.gpu_info and tfos.util as TensorFlowOnSpark has them, with a fake
nvidia-smi on PATH: TFoS's placement, busy GPUs skipped, and the host-wide
claim that keeps two processes off the same GPU."""
import multiprocessing
import os
import stat

import pytest

from tfos import gpu_info, util

CTX = multiprocessing.get_context("fork")

FAKE_SMI = r"""#!/bin/sh
# a fake nvidia-smi: GPUs from $FAKE_GPUS (count), busy UUIDs listed in $FAKE_BUSY
case "$*" in
  *--list-gpus*)
    i=0
    while [ $i -lt "$FAKE_GPUS" ]; do
      echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)"
      i=$((i+1))
    done ;;
  *--query-compute-apps=gpu_uuid,*) echo "gpu_uuid, pid, process_name, used_gpu_memory [MiB]" ;;
  *--query-compute-apps=gpu_uuid*) for u in $FAKE_BUSY; do echo "$u"; done ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE_SMI)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", "%s%s%s" % (tmp_path, os.pathsep, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_GPUS", "4")
    monkeypatch.setenv("FAKE_BUSY", "")
    monkeypatch.delenv("TFOS_JOB_NAME", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpu_info, "RETRY_WAIT", 0.0)
    yield monkeypatch
    gpu_info._release_all()


def test_constants_and_availability(fake_smi):
    assert (gpu_info.AS_STRING, gpu_info.AS_LIST, gpu_info.MAX_RETRIES) == ("string", "list", 3)
    assert gpu_info.is_gpu_available()
    fake_smi.setenv("PATH", "/nonexistent")
    assert not gpu_info.is_gpu_available()


def test_placement_by_worker_index_and_formats(fake_smi):
    assert gpu_info.get_gpus(1, 0) == "0"
    assert gpu_info.get_gpus(1, 2) == "2"
    assert gpu_info.get_gpus(2, 1) == "2,3"
    assert gpu_info.get_gpus(1, 5) == "1"                      # wraps: 5 % 4
    assert gpu_info.get_gpus(2, 1, format=gpu_info.AS_LIST) == ["2", "3"]
    assert gpu_info.get_gpus(3, 1) == "1,2,3"                  # TFoS returned [] here
    assert len(gpu_info.get_gpus(2).split(",")) == 2            # -1: random, two distinct
    assert len(set(gpu_info.get_gpus(2).split(","))) == 2
    with pytest.raises(ValueError, match="unknown GPU format"):
        gpu_info.get_gpus(1, 0, format="dict")


def test_busy_gpus_are_skipped_and_too_few_is_an_error(fake_smi):
    fake_smi.setenv("FAKE_BUSY", "GPU-fake-0 GPU-fake-2")
    assert gpu_info.get_gpus(2, 0) == "1,3"
    with pytest.raises(RuntimeError, match="unable to find 3 free GPU"):
        gpu_info.get_gpus(3, 0)


def _take(q, go, done):
    go.wait(30)
    q.put(gpu_info.get_gpus(1, 0))      # both ask for the same hint at once
    done.wait(30)                       # hold the claim until the parent has both answers


def test_two_processes_on_one_host_never_share_a_gpu(fake_smi):
    fake_smi.setenv("FAKE_GPUS", "2")
    q, go, done = CTX.Queue(), CTX.Event(), CTX.Event()
    procs = [CTX.Process(target=_take, args=(q, go, done)) for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    got = sorted([q.get(timeout=30), q.get(timeout=30)])
    # while both hold theirs, a third finds none free
    with pytest.raises(RuntimeError, match="claimed by other tfos processes on this host \\['0', '1'\\]"):
        gpu_info.get_gpus(1, 0)
    done.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert got == ["0", "1"]
    assert gpu_info.get_gpus(1, 0) == "0"          # released when their holders exited


def test_a_tfos_node_takes_from_its_assigned_gpus(fake_smi):
    fake_smi.setenv("TFOS_JOB_NAME", "worker")
    fake_smi.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_info.get_gpus(1, 1) == "3"
    fake_smi.setenv("PATH", "/nonexistent")        # no nvidia-smi needed for an assignment
    assert gpu_info.is_gpu_available()
    assert gpu_info.get_gpus(2, 0) == "2,3"


def test_no_gpus_anywhere_is_a_clear_error(fake_smi):
    fake_smi.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="nvidia-smi cannot run"):
        gpu_info.get_gpus(1)


def test_single_node_env(fake_smi):
    util.single_node_env(num_gpus=1, worker_index=1, nodes=["h1:1", "h2:1", "h1:2"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"               # first on its host h2
    util.single_node_env(num_gpus=1, worker_index=2, nodes=["h1:1", "h2:1", "h1:2"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"               # second on h1
    util.single_node_env(num_gpus=2, worker_index=1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    util.single_node_env(num_gpus=0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    fake_smi.setenv("PATH", "/nonexistent")
    util.single_node_env(num_gpus=1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


def test_find_in_path_and_ip(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "f.txt").write_text("x")
    (tmp_path / "a" / "f.txt").mkdir()                           # a directory is not a file
    path = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    assert util.find_in_path(path, "f.txt") == str(tmp_path / "b" / "f.txt")
    assert util.find_in_path(path, "missing") is False
    ip = util.get_ip_address()
    assert len(ip.split(".")) == 4


def test_executor_id_file_and_context(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TFOS_EXECUTOR_ID", raising=False)
    with pytest.raises(RuntimeError, match="use ctx.executor_id"):
        util.read_executor_id()
    monkeypatch.setenv("TFOS_EXECUTOR_ID", "3")
    assert util.read_executor_id() == 3
    util.write_executor_id(7)
    assert (tmp_path / "executor_id").read_text() == "7"
    assert util.read_executor_id() == 7
