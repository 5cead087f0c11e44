"""The TensorFlowOnSpark 2.2.5 baseline venv of bench/spark.py.

``.bench-venv/tfos-baseline`` (under the repository root; gitignored): the
same interpreter as the project's venv, with pyspark, tensorflow-cpu and numpy
at the pins of requirements.txt (read from there) plus the pins of
bench/requirements-baseline.txt (tensorflowonspark==2.2.5 and what it needs
on Python 3.11), and ``_tfos_bench_loopback`` (bench/tfos_baseline_loopback.py,
imported at start by a .pth file) keeping TFoS on 127.0.0.1.

Created once, then reused while its stamp (the requirement lines and the
interpreter version) matches; a venv left incomplete by an interrupted install
has no stamp and is completed by the next run. Run alone to build or check it:
``.venv/bin/python bench/spark_env.py``.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE_VENV = os.path.join(ROOT, ".bench-venv", "tfos-baseline")
BASELINE_REQS = os.path.join(HERE, "requirements-baseline.txt")
PROJECT_REQS = os.path.join(ROOT, "requirements.txt")
SHARED_PINS = ("pyspark", "tensorflow-cpu", "numpy")  # taken from requirements.txt
STAMP = ".tfos-bench-complete"
PATCH_SRC = os.path.join(HERE, "tfos_baseline_loopback.py")
PATCH_MOD = "_tfos_bench_loopback"
INSTALL_TIMEOUT = 1800
CHECK_TIMEOUT = 300


def log(msg):
    print("[spark-bench] " + msg, file=sys.stderr, flush=True)


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines():
    """The baseline's requirement lines: the shared pins from requirements.txt,
    then bench/requirements-baseline.txt."""
    shared = {}
    with open(PROJECT_REQS) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
            if m and _norm(m.group(1)) in SHARED_PINS:
                shared[_norm(m.group(1))] = line
    missing = [n for n in SHARED_PINS if n not in shared]
    if missing:
        raise RuntimeError("requirements.txt pins none of: " + ", ".join(missing))
    lines = [shared[n] for n in SHARED_PINS]
    with open(BASELINE_REQS) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def venv_python(venv=BASELINE_VENV):
    return os.path.join(venv, "bin", "python")


def _stamp_text(lines):
    ver = "%d.%d.%d" % sys.version_info[:3]
    h = hashlib.sha256(("\n".join(lines) + "\npython " + ver + "\n").encode()).hexdigest()
    return h + "\n"


def _site_packages(py):
    out = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def _install_patch(py):
    """Copy the loopback patch into the venv and import it at every start."""
    site = _site_packages(py)
    shutil.copyfile(PATCH_SRC, os.path.join(site, PATCH_MOD + ".py"))
    with open(os.path.join(site, PATCH_MOD + ".pth"), "w") as f:
        f.write("import " + PATCH_MOD + "\n")


def _check(py):
    """The venv imports TFoS (as its executors will) and the patch is active."""
    code = (
        "import os, warnings; warnings.simplefilter('ignore')\n"
        "import pyspark, numpy, tensorflowonspark\n"
        "from tensorflowonspark import TFCluster, TFNode, TFSparkNode, util, reservation\n"
        "assert util.get_ip_address() == os.environ.get('TFOS_BENCH_HOST', '127.0.0.1'), util.get_ip_address()\n"
        "import importlib.metadata as md\n"
        "print('tensorflowonspark', md.version('tensorflowonspark'), 'pyspark', pyspark.__version__,"
        " 'tensorflow-cpu', md.version('tensorflow-cpu'), 'numpy', numpy.__version__)\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=CHECK_TIMEOUT, env=env)
    if out.returncode != 0:
        raise RuntimeError("baseline venv %s does not work:\n%s%s" % (BASELINE_VENV, out.stdout, out.stderr[-4000:]))
    return out.stdout.strip()


def ensure_baseline_env():
    """Create (or complete) the baseline venv if needed; returns its python."""
    lines = requirement_lines()
    stamp_path = os.path.join(BASELINE_VENV, STAMP)
    py = venv_python()
    want = _stamp_text(lines)
    have = None
    if os.path.isfile(stamp_path) and os.access(py, os.X_OK):
        with open(stamp_path) as f:
            have = f.read()
    if have != want:
        log("building the TFoS baseline venv %s (%s)" % (os.path.relpath(BASELINE_VENV, ROOT), ", ".join(lines)))
        if os.path.exists(stamp_path):
            os.unlink(stamp_path)
        if not os.access(py, os.X_OK):
            # From a venv's python, `-m venv` bases the new one on the same
            # base interpreter.
            subprocess.run([sys.executable, "-m", "venv", BASELINE_VENV], check=True, timeout=300)
        req_tmp = os.path.join(BASELINE_VENV, "requirements-bench.txt")
        with open(req_tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        pip = [py, "-m", "pip", "--disable-pip-version-check"]
        subprocess.run(pip + ["install", "-q", "--upgrade", "pip"], check=True, timeout=INSTALL_TIMEOUT)
        subprocess.run(pip + ["install", "-q", "-r", req_tmp], check=True, timeout=INSTALL_TIMEOUT)
        _install_patch(py)
        info = _check(py)
        with open(stamp_path, "w") as f:
            f.write(want)
        log("baseline venv ready: " + info)
    else:
        _install_patch(py)  # cheap; picks up edits of the patch
        info = _check(py)
        log("reusing the baseline venv %s: %s" % (os.path.relpath(BASELINE_VENV, ROOT), info))
    return py


if __name__ == "__main__":
    print(ensure_baseline_env())
