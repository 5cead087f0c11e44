"""Real JAX under `tfos run`: `jax.distributed.initialize()` with no arguments
forms one JAX cluster of the trainers (CPU, gloo collectives), and the
data-parallel digits example trains on fed rows to >= 0.90 held-out accuracy."""
import os
import re
import subprocess

import pytest

from conftest import PY, ROOT, run_tfos

pytest.importorskip("jax")

EXAMPLE = os.path.join(ROOT, "examples", "jax", "train.py")
MAKE_DATA = os.path.join(ROOT, "examples", "digits", "make_data.py")


def test_jax_example_two_processes(tmp_path, marker):
    data = tmp_path / "digits.npy"
    subprocess.run([PY, MAKE_DATA, str(data)], check=True, capture_output=True, timeout=120,
                   cwd=os.path.dirname(MAKE_DATA))
    # the marker rides on every node's command line as an -X option Python ignores
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--input", str(data),
                  "--epochs", "10", "--", PY, "-X", marker, EXAMPLE], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for rank in (0, 1):
        # one cluster: each process knows both, and sees both processes' devices
        assert "[worker:%d] jax process %d of 2, 2 devices in the cluster (1 local)" % (rank, rank) in r.stdout, \
            r.stdout[-3000:]
    accs = [float(a) for a in re.findall(r"\[worker:\d\] held-out accuracy: ([\d.]+)", r.stdout)]
    assert len(accs) == 2 and min(accs) >= 0.90, r.stdout[-3000:]
    steps = re.findall(r"in (\d+) global steps", r.stdout)
    assert len(steps) == 2 and steps[0] == steps[1]  # every step was collective
