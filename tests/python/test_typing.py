"""Type stubs of the extension (python/tfos/_tfos.pyi): mypy's stubtest
compares them with the built module (every name, class and constant in C
must be in the stub and the other way round), and mypy checks a program
using the API: correct calls pass, a wrong one is reported."""
import os
import subprocess
import sys

from conftest import ROOT

MYPY_INI = "[mypy]\nignore_missing_imports = True\nfollow_imports = silent\n"

GOOD = '''
import tfos
from tfos import _tfos

version: str = tfos.__version__
policy = _tfos.RestartPolicy(max_restarts=2)
decision: int = policy.decide(_tfos.CAUSE_EXIT, node="worker:1", exit_code=3)
history = policy.history
coord = _tfos.Coordinator(2, _tfos.random_secret(), bind_host="127.0.0.1", policy=policy)
port: int = coord.serve_status(port=0)
state: int = coord.state
fd: int = _tfos.ring_create(1 << 16)
ring = _tfos.Ring(fd, _tfos.ROLE_PRODUCER)
ring.write(_tfos.TAG_DATA, b"x", 100)
acked: int = ring.stats()["acked"]
roles: list[tuple[str, int]] = _tfos.layout_roles(0, 2, False, False)
grace: float = _tfos.DEFAULTS["stop_grace"]
try:
    ring.read(10)
except _tfos.FeedEnded:
    pass
'''

BAD = '''
from tfos import _tfos
_tfos.Ring("not an fd", _tfos.ROLE_CONSUMER)
_tfos.DEFAULTS["no_such_default"]
'''


def mypy_env(tmp_path):
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    env = dict(os.environ, MYPYPATH=os.path.join(ROOT, "python"))
    env.pop("PYTHONPATH", None)
    return env


def test_stubtest_matches_the_extension(tmp_path):
    # the stub from the source tree, the runtime module from the installed package
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", str(tmp_path / "mypy.ini"),
                        "tfos._tfos"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                       env=mypy_env(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success" in r.stdout


def run_mypy(tmp_path, code):
    (tmp_path / "snippet.py").write_text(code)
    env = mypy_env(tmp_path)
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental",
                           "snippet.py"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)


def test_mypy_accepts_correct_use(tmp_path):
    r = run_mypy(tmp_path, GOOD)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_reports_wrong_use(tmp_path):
    r = run_mypy(tmp_path, BAD)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'snippet.py:3: error: Argument 1 to "Ring" has incompatible type "str"; expected "int"' in r.stdout
    assert 'snippet.py:4: error: TypedDict "_Defaults" has no key "no_such_default"' in r.stdout
