"""Errors and dead ends that should name their cause (issue 18): /status stays
valid JSON whatever bytes its strings hold, the built-in ps server without
TensorFlow says which interpreter it used and what to do, and DataFeed under
`tfos run` without --input ends at once with a warning instead of waiting
forever."""
import json
import os
import re
import stat
import subprocess
import time
import urllib.request

import pytest

from conftest import PY, run_tfos, tfos_cli, wait_for

WAIT_GO = ("import os, sys, time\n"
           "t0 = time.monotonic()\n"
           "while not os.path.exists(sys.argv[1]) and time.monotonic() - t0 < 60:\n"
           "    time.sleep(0.05)\n")


def test_status_json_stays_valid_with_non_utf8_log_dir(tmp_path, marker):
    # a log dir whose name holds the latin-1 byte 0xe9, not UTF-8
    log_dir = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9")
    go = tmp_path / marker / "go"
    go.parent.mkdir()
    proc = subprocess.Popen([os.fsencode(tfos_cli()), b"run", b"--workers", b"1", b"--status-port", b"0",
                             b"--log-dir", log_dir, b"--", os.fsencode(PY), b"-c", WAIT_GO.encode(),
                             os.fsencode(str(go)), marker.encode()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            m = re.search(r"status (http://127\.0\.0\.1:\d+/)", proc.stderr.readline())
            url = m and m.group(1)
        assert url, "tfos run printed no status URL"

        def fetch():
            with urllib.request.urlopen(url + "status", timeout=5) as r:
                return r.read()

        assert wait_for(lambda: b"running" in fetch(), 30)
        raw = fetch()
        doc = json.loads(raw.decode("utf-8"))  # strict: valid UTF-8 and valid JSON
        assert doc["log_dir"].endswith("caf\ufffd"), doc["log_dir"]
        assert b"\xe9" not in raw
    finally:
        go.write_text("")
        try:
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0


def test_builtin_ps_without_tensorflow_names_the_interpreter(tmp_path, marker):
    bare = tmp_path / "python-bare"
    bare.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % PY)  # no site-packages: no tensorflow
    bare.chmod(bare.stat().st_mode | stat.S_IXUSR)
    r = run_tfos(["run", "--workers", "1", "--ps", "1", "--max-restarts", "0", "--python", str(bare),
                  "--log-dir", str(tmp_path / "logs"), "--", PY, "-c", WAIT_GO, str(tmp_path / "never"), marker],
                 timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    m = re.search(r"tfos: the built-in parameter server needs TensorFlow, but (\S+) cannot import it "
                  r"\(No module named '?tensorflow'?\): pass --python PY with an interpreter that has tensorflow, "
                  r"or --ps-runs-program to run your program on the ps nodes", out)
    assert m, out[-4000:]
    assert os.path.basename(m.group(1)).startswith("python"), m.group(1)
    assert "Traceback" not in out, out[-4000:]


DATAFEED_LOOP = ("from tfos import TFNode\n"
                 "ctx = TFNode.get_context()\n"
                 "feed = TFNode.DataFeed(ctx.mgr)\n"
                 "n = 0\n"
                 "while not feed.should_stop():\n"
                 "    rows = feed.next_batch(10)\n"
                 "    if not rows:\n"
                 "        break\n"
                 "    n += len(rows)\n"
                 "print('read %d rows, should_stop %s, next %r' % (n, feed.should_stop(), feed.next_batch(5)),"
                 " flush=True)\n")


def test_datafeed_without_input_ends_at_once_with_a_warning(tmp_path, marker):
    t0 = time.monotonic()
    r = run_tfos(["run", "--workers", "1", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, "-c", DATAFEED_LOOP, marker], timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[worker:0] read 0 rows, should_stop True, next []" in r.stdout, r.stdout[-3000:]
    out = r.stdout + r.stderr
    assert out.count("tfos: no --input given, so this node's feed is empty") == 1, out[-3000:]
    assert took < 60


def _python_bare(tmp_path):
    bare = tmp_path / "python-bare"
    bare.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % PY)  # no site-packages: no tensorflow, no tfos
    bare.chmod(bare.stat().st_mode | stat.S_IXUSR)
    return str(bare)


def test_builtin_ps_without_tensorflow_fails_before_any_node_starts(tmp_path, marker):
    """The built-in ps's interpreter is checked before the cluster forms:
    the same command ends 1 every time, saying so once (it ended 0 or 1 as
    the workers finished before the ps failed or not, and was retried 4
    times when it failed)."""
    bare = _python_bare(tmp_path)
    for _ in range(3):
        r = run_tfos(["run", "--workers", "1", "--ps", "1", "--python", bare, "--log-dir", str(tmp_path / "logs"),
                      "--", PY, "-c", "pass", marker], timeout=60)
        assert r.returncode == 1, r.stderr
        assert r.stderr == (
            "tfos: the built-in parameter server needs TensorFlow, but %s cannot import it (No module named "
            "'tensorflow'): pass --python PY with an interpreter that has tensorflow, or --ps-runs-program to run "
            "your program on the ps nodes\ntfos: no node was started: a program that cannot start is not retried\n"
            % bare), r.stderr
    # with --ps-runs-program the ps runs the program, which needs no TensorFlow;
    # like a ps's server.join() it runs until the workers are done and it is
    # stopped (a ps that ends first is a failure, whatever its exit code)
    serve_until_stopped = "import os, time; os.environ['TFOS_JOB_NAME'] == 'ps' and time.sleep(60)"
    r = run_tfos(["run", "--workers", "1", "--ps", "1", "--ps-runs-program", "--python", bare, "--log-dir",
                  str(tmp_path / "logs2"), "--", PY, "-c", serve_until_stopped, marker], timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]


def test_serve_with_an_interpreter_without_tfos_fails_before_any_server_starts(tmp_path, marker):
    """tfos serve whose --python lacks tfos: one line naming that
    interpreter and what to do, no model server started (11 attempts in
    3 s, the cause in the last lines)."""
    (tmp_path / "model" / "1").mkdir(parents=True)
    bare = _python_bare(tmp_path)
    t0 = time.monotonic()
    r = run_tfos(["serve", "--model", "m=%s" % (tmp_path / "model"), "--python", bare, "--port", "0", "--log-dir",
                  str(tmp_path / "logs"), "--token", marker], timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr == (
        "tfos: the model servers run python -m tfos.serve, but %s cannot import tfos (No module named 'tfos'): "
        "pass --python PY with an interpreter where tfos is installed\n"
        "tfos: no model server was started: a program that cannot start is not retried\n" % bare), r.stderr
    assert time.monotonic() - t0 < 60
    r = run_tfos(["serve", "--model", "m=%s" % (tmp_path / "model"), "--python", "/nonexistent/python3", "--port",
                  "0", "--log-dir", str(tmp_path / "logs")], timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("tfos: could not start '/nonexistent/python3': No such file or directory\n"), r.stderr


# -- missing extras (issue 36, item 8), as a user of `pip install tfos` meets
# them: a Python whose path has tfos and numpy only (no torch, no pyspark)

def _core_only_python(tmp_path):
    """(argv prefix, env) of this interpreter with ``-S`` and a path of
    tfos and numpy only: what `pip install tfos` alone gives."""
    import numpy
    import tfos
    site = tmp_path / "site-core-only"
    site.mkdir()
    np_dir = os.path.dirname(numpy.__file__)
    for src in (os.path.dirname(tfos.__file__), np_dir, np_dir + ".libs"):
        if os.path.exists(src):
            os.symlink(src, site / os.path.basename(src))
    env = dict(os.environ, PYTHONPATH=str(site))
    return [PY, "-S", "-c"], env


def _run_core_only(tmp_path, code):
    argv, env = _core_only_python(tmp_path)
    out = subprocess.run(argv + [code], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def test_tfos_torch_without_torch_names_the_pip_command(tmp_path):
    out = _run_core_only(tmp_path, "import importlib.util, sys\n"
                                   "assert importlib.util.find_spec('torch') is None\n"
                                   "try:\n"
                                   "    import tfos.torch\n"
                                   "except ModuleNotFoundError as e:\n"
                                   "    print(type(e).__name__, '|', e)\n")
    assert "MissingDependency | tfos.torch needs torch, not installed for %s: pip install 'tfos[torch]'" % PY in out, out


def test_a_connect_client_is_told_the_connect_extra(tmp_path):
    # the session's class is pyspark.sql.connect's: the extra to install is
    # tfos[connect] (pyspark[connect] and its gRPC client), not tfos[spark]
    out = _run_core_only(tmp_path, "import tfos.spark\n"
                                   "Remote = type('SparkSession', (), {'__module__': 'pyspark.sql.connect.session'})\n"
                                   "Classic = type('SparkSession', (), {'__module__': 'pyspark.sql.session'})\n"
                                   "for s in (Remote(), Classic()):\n"
                                   "    try:\n"
                                   "        tfos.spark.Cluster(s, print)\n"
                                   "    except ModuleNotFoundError as e:\n"
                                   "        print(e)\n")
    lines = [ln for ln in out.splitlines() if "tfos.spark.Cluster needs" in ln]
    assert len(lines) == 2, out
    assert lines[0].endswith("pip install 'tfos[connect]'") and lines[1].endswith("pip install 'tfos[spark]'"), out


def test_predict_udf_without_pyspark_names_the_pip_command(tmp_path):
    out = _run_core_only(tmp_path, "from tfos.serve import predict_udf\n"
                                   "try:\n"
                                   "    predict_udf('digits')\n"
                                   "except ModuleNotFoundError as e:\n"
                                   "    print(type(e).__name__, '|', e)\n")
    assert "MissingDependency | tfos.serve.predict_udf needs pyspark" in out and "pip install 'tfos[spark]'" in out, out


def test_a_port_in_use_names_the_way_out(tmp_path):
    """Issue 36: `tfos serve` (and tfos run's status page) on a port another
    process holds says so, how to find it, and to pass 0 for any free port."""
    import socket
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    (tmp_path / "m" / "1").mkdir(parents=True)
    try:
        for args, opt, what in ((["serve", "--model", "m=%s" % (tmp_path / "m"), "--python", PY, "--port", str(port),
                                  "--log-dir", str(tmp_path / "logs")], "--port", "the models"),
                                (["run", "--workers", "1", "--status-port", str(port), "--log-dir",
                                  str(tmp_path / "logs2"), "--", "true"], "--status-port", "the status page")):
            r = run_tfos(args, timeout=60)
            assert r.returncode == 1, r.stderr
            assert ("cannot serve %s on port %d: another process listens there (`ss -ltnp 'sport = :%d'` names it): "
                    "stop it, choose another port, or %s 0 for any free one" % (what, port, port, opt)) in r.stderr, \
                r.stderr
    finally:
        held.close()
