"""`pip install .` from the repository root builds the extension and the tfos
binary with scikit-build-core and gives a working package in a fresh venv."""
import os
import subprocess
import sys
import venv

from conftest import ROOT


def test_pip_install_into_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(str(env_dir))
    py = str(env_dir / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", ROOT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = subprocess.run([str(env_dir / "bin" / "tfos"), "version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("tfos 0.1.0")
    code = ("import tfos, sys; "
            "assert tfos.agent_path().startswith(sys.prefix), tfos.agent_path(); "
            "print('exit', tfos.run([sys.executable, '-c', 'import os; print(os.environ[\"TFOS_JOB_NAME\"])'], "
            "workers=2, log_dir=%r))" % str(tmp_path / "logs"))
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "TFOS_AGENT"})
    assert r.returncode == 0, r.stderr
    assert "exit 0" in r.stdout and r.stdout.count("] worker") == 2
