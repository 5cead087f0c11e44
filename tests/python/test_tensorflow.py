"""Real TensorFlow under `tfos run`: servers on the reserved ports, two clusters
at once, the built-in parameter server, and the digits example."""
import os
import re

from conftest import PY, ROOT, pids_with, prog, run_tfos, wait_for

EXAMPLE = os.path.join(ROOT, "examples", "digits")


def test_two_clusters_at_once_do_not_collide(tmp_path, marker):
    import subprocess
    from conftest import tfos_cli
    procs = [subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--log-dir", str(tmp_path / ("logs%d" % i)),
                               "--", PY, prog("tf_server.py"), marker, "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    ports = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        ports += re.findall(r"serving worker:\d on grpc://[\w.]+:(\d+)", out)
    assert len(ports) == 4 and len(set(ports)) == 4


def test_builtin_parameter_server(tmp_path, marker):
    r = run_tfos(["run", "--workers", "1", "--ps", "1", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("use_ps.py"), marker], timeout=300)
    assert r.returncode == 0, r.stderr
    assert "[worker:0] value on ps: 42.0" in r.stdout
    assert "[ps:0] tfos: serving ps task 0" in r.stdout
    assert "ps:0 stopped" in r.stderr  # stopped by tfos once the worker was done
    assert wait_for(lambda: not pids_with(marker), 10)


def test_digits_example_trains_saves_and_predicts(tmp_path, marker):
    model_dir = tmp_path / marker / "model"  # the marker rides on every node's command line
    r = run_tfos(["run", "--workers", "2", "--ps", "1", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, os.path.join(EXAMPLE, "train.py"), "--epochs", "8", "--model-dir", str(model_dir)],
                 timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    accs = [float(a) for a in re.findall(r"test accuracy: ([\d.]+)", r.stdout)]
    assert accs and min(accs) >= 0.90, r.stdout[-2000:]
    assert any(model_dir.iterdir())
    import subprocess
    p = subprocess.run([PY, os.path.join(EXAMPLE, "predict.py"), "--model-dir", str(model_dir)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert float(re.search(r"test accuracy: ([\d.]+)", p.stdout).group(1)) >= 0.90
    if not os.path.exists("/proc/driver/nvidia/version"):  # issue 36: tfos.quiet keeps TF's load noise off
        for noise in ("absl::InitializeLog", "cudart_stub", "failed call to cuInit"):
            assert noise not in p.stderr, p.stderr[-3000:]
