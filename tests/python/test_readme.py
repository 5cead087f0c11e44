"""The README's Python snippets run as written (issue 18): each ```python
block is taken from README.md and run the way the text around it says, from
the repository root. A block this file does not know fails the test, so a
new snippet cannot go in untested."""
import os
import re
import subprocess
import sys

import pytest

from conftest import PY, run_tfos

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def python_blocks(marks=False):
    """The README's ```python blocks; with ``marks``, as (the snippet marker
    line before it or '', block) pairs."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    found = re.findall(r"(^<!-- snippet: [^\n]*-->\n)?^```python\n(.*?)^```$", text, flags=re.S | re.M)
    return found if marks else [b for _, b in found]


def env_with_venv_python():
    """`python` on PATH is the interpreter running the tests (the venv's)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")
    return env


def block(marker):
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, "README.md should have one ```python block with %r, has %d" % (marker, len(found))
    return found[0]


def test_every_python_block_is_covered():
    markers = ("TFNode.DataFeed(ctx.mgr)", "SparkSession.builder", "tfos.run([", "print(ctx.job_name")
    for mark, b in python_blocks(marks=True):
        if mark:  # a fragment, or not run: test_doc_snippets checks it says why
            continue
        assert any(m in b for m in markers), "README.md has a ```python block no test runs:\n" + b


def test_feed_snippet_reads_a_fed_file(tmp_path):
    data = tmp_path / "rows.csv"
    data.write_text("x,y\n" + "".join("%d,%d\n" % (i, i % 10) for i in range(500)))
    program = tmp_path / "reader.py"
    program.write_text(block("TFNode.DataFeed(ctx.mgr)") + "\nprint('read to the end:', feed.should_stop())\n")
    r = run_tfos(["run", "--workers", "2", "--input", str(data), "--log-dir", str(tmp_path / "logs"), "--",
                  PY, str(program)], env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("read to the end: True") == 2, r.stdout[-3000:]


def test_context_snippet_inside_a_program(tmp_path):
    program = tmp_path / "ctx.py"
    program.write_text(block("print(ctx.job_name"))
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--", PY, str(program)],
                 timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[worker:0] worker 0 2" in r.stdout and "[worker:1] worker 1 2" in r.stdout, r.stdout[-3000:]


def test_tfos_run_snippet_from_the_repository_root(tmp_path):
    code = block("tfos.run([")
    r = subprocess.run([PY, "-c", code], cwd=ROOT, env=env_with_venv_python(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"test accuracy: 0\.\d+", r.stdout), r.stdout[-3000:]


def test_spark_snippet_runs_as_written(tmp_path):
    pytest.importorskip("pyspark", reason="the spark extra is not installed: the README's Spark snippet is NOT run")
    env = env_with_venv_python()
    env.pop("PYSPARK_PYTHON", None)  # the snippet sets it itself
    r = subprocess.run([PY, "-c", block("SparkSession.builder")], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[0.0, 2.0, 4.0, 6.0, 8.0]" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
