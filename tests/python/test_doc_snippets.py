"""Every snippet in the README and the docs runs as written, or says why not
(issue 18).

The snippets: every ```python block, and every shell block (```, ```sh,
```bash) whose first command is `tfos`, `python`, `pip`, `make` or
`spark-submit` (as a path too: `build/tfos`, `.venv/bin/python`), in
README.md, docs/*.md and examples/digits/README.md. Each one is either

- run by a test: listed in RUN_BY below with the test that runs it, which
  takes the block out of the markdown and runs that text (from the
  repository root, as the docs say; only the paths of generated data are
  changed where the text says where they go), or
- marked, on the line right before its fence, as not runnable with a
  reason: `<!-- snippet: not run: REASON -->` (it cannot run here: a
  package index, a YARN cluster, CI itself) or `<!-- snippet: fragment:
  REASON -->` (a piece of a program, or a list of calls).

A block that is not a command but starts like one (a diagram of `tfos run`)
gets a language tag such as ```text.

An unmarked block that no test runs fails test_every_snippet_is_run_or_marked,
so a new snippet cannot go in untested. Spark snippets are run in
tests/spark (they need its Spark cluster).
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from conftest import PY, ROOT

DOCS = ["README.md", "examples/digits/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

COMMANDS = {"tfos", "python", "python3", "pip", "pip3", "make", "spark-submit"}

# (file, text only that block has) -> the test that runs it, "path::function".
RUN_BY = {
    ("docs/MODELS.md", "tfos.models.register("):
        "tests/python/test_models.py::test_the_register_snippet_runs_as_written",
    ("README.md", "from tfos import TFNode\nctx = TFNode.get_context()\nfeed = TFNode.DataFeed"):
        "tests/python/test_readme.py::test_feed_snippet_reads_a_fed_file",
    ("README.md", "SparkSession.builder"): "tests/python/test_readme.py::test_spark_snippet_runs_as_written",
    ("README.md", "tfos.run(["): "tests/python/test_readme.py::test_tfos_run_snippet_from_the_repository_root",
    ("README.md", "print(ctx.job_name"): "tests/python/test_readme.py::test_context_snippet_inside_a_program",
    ("README.md", "build/tfos run --workers 2 --ps 1 -- .venv/bin/python examples/digits/train.py"):
        "tests/python/test_doc_snippets.py::test_readme_local_cluster_command",
    ("README.md", "examples/digits/make_data.py /tmp/digits.csv"):
        "tests/python/test_doc_snippets.py::test_readme_feed_commands",
    ("README.md", "examples/jax/train.py"): "tests/python/test_doc_snippets.py::test_readme_jax_commands",
    ("README.md", "examples/torch/ddp_digits.py"): "tests/python/test_doc_snippets.py::test_readme_torch_commands",
    ("examples/digits/README.md", "run --workers 2 -- python examples/digits/train.py"):
        "tests/python/test_doc_snippets.py::test_digits_readme_train_and_predict",
    ("examples/digits/README.md", "--keras legacy -- python examples/digits/train_fit.py"):
        "tests/python/test_doc_snippets.py::test_digits_readme_model_fit",
    ("examples/digits/README.md", "serve_client.py --url"):
        "tests/python/test_doc_snippets.py::test_digits_readme_serve",
    ("docs/MODELS.md", "ctx.report(step=step, loss=loss)"):
        "tests/python/test_tracking.py::test_models_md_tracking_snippets_as_written",
    ("docs/MODELS.md", "tfos run --workers 2 --mlflow"):
        "tests/python/test_tracking.py::test_models_md_tracking_snippets_as_written",
    ("docs/MODELS.md", "MlflowClient("): "tests/python/test_tracking.py::test_models_md_tracking_snippets_as_written",
    ("docs/SPARK.md", "spark-submit --master spark://HOST:7077"):
        "tests/spark/test_doc_snippets.py::test_spark_submit_command_from_spark_md",
}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
MARK = re.compile(r"<!-- snippet: (not run|fragment): (\S.*?) -->\s*$")


def snippets():
    """(file, line, language, text, mark) for every code block of DOCS;
    mark is the `<!-- snippet: ... -->` comment on the line before, or None."""
    found = []
    for name in DOCS:
        with open(os.path.join(ROOT, name)) as f:
            doc = f.read()
        for m in FENCE.finditer(doc):
            before = doc[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            found.append((name, doc[:m.start()].count("\n") + 1, m.group(1), m.group(2),
                          before if before.startswith("<!-- snippet") else None))
    return found


def is_snippet(lang, text):
    """A block a user would run: Python, or shell whose first command is one of COMMANDS."""
    if lang == "python":
        return True
    if lang not in ("", "sh", "bash", "shell"):
        return False
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and os.path.basename(lines[0].split()[0]) in COMMANDS


def block(name, marker):
    found = [s[3] for s in snippets() if s[0] == name and marker in s[3]]
    assert len(found) == 1, "%s should have one code block with %r, has %d" % (name, marker, len(found))
    return found[0]


def test_every_snippet_is_run_or_marked():
    problems = []
    used = set()
    for name, line, lang, text, mark in snippets():
        if mark is not None and not MARK.match(mark):
            problems.append("%s:%d: malformed marker %r (want <!-- snippet: not run: WHY --> or "
                            "<!-- snippet: fragment: WHY -->)" % (name, line, mark))
            continue
        if not is_snippet(lang, text):
            continue
        runs = [key for key in RUN_BY if key[0] == name and key[1] in text]
        used.update(runs)
        if runs and mark:
            problems.append("%s:%d: marked %r but %s runs it" % (name, line, mark, RUN_BY[runs[0]]))
        elif len(runs) > 1:
            problems.append("%s:%d: matched by several RUN_BY entries: %s" % (name, line, runs))
        elif not runs and not mark:
            problems.append("%s:%d: no test runs this ```%s block and it is not marked "
                            "<!-- snippet: not run: WHY --> or <!-- snippet: fragment: WHY -->:\n%s"
                            % (name, line, lang, text))
    for key, test in RUN_BY.items():
        if key not in used:
            problems.append("RUN_BY entry %s (%s) matches no snippet" % (key, test))
        path, func = test.split("::")
        with open(os.path.join(ROOT, path)) as f:
            if not re.search(r"^def %s\(" % re.escape(func), f.read(), re.M):
                problems.append("RUN_BY names %s, which does not exist" % test)
    assert not problems, "\n".join(problems)


def shell(script, env=None, timeout=300):
    """Run a snippet with bash from the repository root, as a user would;
    TensorFlow's log level is left to tfos (the user sets none)."""
    full = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full.pop("TF_CPP_MIN_LOG_LEVEL", None)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=full, capture_output=True,
                       text=True, timeout=timeout)
    # a run without --log-dir logs under ./tfos-logs: remove what this one made
    for d in re.findall(r"logs in (tfos-logs/run-[\w.-]+)", r.stderr):
        shutil.rmtree(os.path.join(ROOT, d), ignore_errors=True)
    return r


def check_console(out, err):
    """What the README promises of the console: one node prefix per line, and
    none of TensorFlow's INFO lines (tfos sets TF_CPP_MIN_LOG_LEVEL=1)."""
    doubled = [ln for ln in out.splitlines() if re.match(r"\[(\w+):(\d+)\] \1:\2\b", ln)]
    assert not doubled, doubled
    info = [ln for ln in (out + err).splitlines()
            if re.match(r"\[\w+:\d+\] I\d{4} ", ln) and "cudart_stub" not in ln
            and not re.search(r"port\.cc:\d+\] oneDNN custom operations are on", ln)]
    # cudart_stub, and oneDNN's notice on CPUs where its custom operations are
    # on: logged while TensorFlow loads, before it reads the level (README.md)
    assert not info, info
    if not os.path.exists("/proc/driver/nvidia/version"):
        # no GPU driver: TensorFlow's load-time lines that look like errors
        # stay in the node logs (README.md; issue 36, item 10)
        noise = [ln for ln in (out + err).splitlines()
                 if re.match(r"\[\w+:\d+\] ", ln) and re.search(r"absl::InitializeLog|cudart_stub|cuInit", ln)]
        assert not noise, noise


def test_readme_local_cluster_command():
    r = shell(block("README.md", "examples/digits/train.py --epochs 5"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^\[worker:0\] test accuracy: 0\.9\d+$", r.stdout, re.M), r.stdout[-3000:]
    assert "[worker:0] saved model to " in r.stdout and "[worker:1] done (held-out accuracy" in r.stdout
    check_console(r.stdout, r.stderr)


def test_readme_feed_commands(tmp_path):
    """The data goes where the text says (/tmp/digits.csv); here into tmp_path."""
    script = block("README.md", "make_data.py /tmp/digits.csv").replace("/tmp/digits.csv",
                                                                        str(tmp_path / "digits.csv"))
    r = shell(script)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("trained on ") == 2, r.stdout[-3000:]
    assert re.search(r"^\[worker:0\] test accuracy: 0\.\d+$", r.stdout, re.M), r.stdout[-3000:]
    check_console(r.stdout, r.stderr)


def venv_active():
    """`source .venv/bin/activate`, as examples/digits/README.md asks: `python` is the venv's."""
    bindir = os.path.dirname(PY)
    return {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "VIRTUAL_ENV": os.path.dirname(bindir)}


def test_digits_readme_train_and_predict():
    r = shell(block("examples/digits/README.md", "run --workers 2 -- python examples/digits/train.py"), env=venv_active())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # train.py's chief, then predict.py on the model it saved
    assert len(re.findall(r"^(\[worker:0\] )?test accuracy: 0\.9\d+$", r.stdout, re.M)) == 2, r.stdout[-3000:]
    check_console(r.stdout, r.stderr)


def test_digits_readme_serve():
    """Export, serve and score, as the digits README says (after its training
    command, which test_digits_readme_train_and_predict runs: run here when
    no model is saved yet)."""
    model = os.path.join(ROOT, "examples", "digits", "model", "digits.keras")
    if not os.path.exists(model):
        r = shell("python examples/digits/train.py --epochs 5", env=venv_active())
        assert r.returncode == 0, r.stderr[-3000:]
    r = shell(block("examples/digits/README.md", "serve_client.py --url"), env=venv_active())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^exported \S+digits\.keras as version \d+: ", r.stdout, re.M), r.stdout
    m = re.search(r"^served accuracy: (0\.\d+)$", r.stdout, re.M)
    assert m and float(m.group(1)) >= 0.9, r.stdout[-3000:]
    assert "model server worker:0 is ready" in r.stderr and "stopped serving (signal 15" in r.stderr, r.stderr[-3000:]
    check_console(r.stdout, r.stderr)


def test_digits_readme_model_fit():
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is NOT installed for %s: the model.fit command is NOT run" % PY)
    r = shell(block("examples/digits/README.md", "train_fit.py"), env=venv_active())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^\[worker:0\] test accuracy: 0\.9\d+$", r.stdout, re.M), r.stdout[-3000:]
    check_console(r.stdout, r.stderr)


def test_readme_jax_commands(tmp_path):
    """`python` is the venv's; the data goes into tmp_path instead of /tmp/digits.npy."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is NOT installed for %s: the README's JAX commands are NOT run" % PY)
    script = block("README.md", "examples/jax/train.py").replace("/tmp/digits.npy", str(tmp_path / "digits.npy"))
    r = shell(script, env=venv_active())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    accs = [float(a) for a in re.findall(r"^\[worker:\d\] held-out accuracy: ([\d.]+)$", r.stdout, re.M)]
    assert len(accs) == 2 and min(accs) >= 0.90, r.stdout[-3000:]
    check_console(r.stdout, r.stderr)


def test_readme_torch_commands(tmp_path):
    """`python` is the venv's; the data goes into tmp_path instead of /tmp/digits.npy."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is NOT installed for %s: the README's PyTorch commands are NOT run" % PY)
    script = block("README.md", "examples/torch/ddp_digits.py").replace("/tmp/digits.npy",
                                                                         str(tmp_path / "digits.npy"))
    r = shell(script, env=venv_active())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    accs = [float(a) for a in re.findall(r"^\[worker:0\] held-out accuracy: ([\d.]+)$", r.stdout, re.M)]
    assert len(accs) == 1 and accs[0] >= 0.90, r.stdout[-3000:]
    check_console(r.stdout, r.stderr)
