"""The wheel that `make dist` builds, installed into a fresh venv with no
build step: its contents (manylinux tag, the tfos executable, the extension,
libjansson bundled, stubs), one version everywhere, `tfos run`, the check for a
missing extra, and TFCluster on local[2] Spark with tfos[spark].

`make test-dist` builds dist/ and runs this with TFOS_DIST set. Third-party
packages come through pip with requirements.txt as constraints, so they are
the pinned set (from pip's cache when it has them); tfos comes only from the
wheel.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from conftest import PROGS, ROOT

DIST = os.environ.get("TFOS_DIST")
pytestmark = pytest.mark.skipif(not DIST, reason="needs a built wheel: `make test-dist` builds dist/ and runs this")

# what the fresh venv must not inherit from the test's environment
SCRUB = ("TFOS_AGENT", "TFOS_CLI", "PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME", "PYSPARK_PYTHON",
         "PYSPARK_DRIVER_PYTHON")


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(tfos VERSION ([0-9.]+)", f.read()).group(1)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env.update(extra)
    return env


def the_wheel():
    wheels = glob.glob(os.path.join(DIST, "tfos-*.whl"))
    assert len(wheels) == 1, "expected one wheel in %s, found %s" % (DIST, wheels)
    return wheels[0]


def pip_install(py, *args):
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-c", os.path.join(ROOT, "requirements.txt")] + list(args),
                       capture_output=True, text=True, timeout=600, env=clean_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory):
    """A fresh venv with the wheel and its own dependencies only."""
    d = tmp_path_factory.mktemp("wheel") / "venv"
    venv.EnvBuilder(with_pip=True).create(str(d))
    pip_install(str(d / "bin" / "python"), "--only-binary", "tfos", the_wheel())
    return d


@pytest.fixture(scope="module")
def spark_env(env_dir):
    """The same venv with tfos[spark] (installed after the bare tests ran)."""
    pip_install(str(env_dir / "bin" / "python"), the_wheel() + "[spark]")
    return env_dir


def run(argv, timeout=60, env=None, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env or clean_env(), **kw)


def test_wheel_is_manylinux_with_binaries_and_stubs():
    wheel = the_wheel()
    assert re.search(r"-manylinux_\d+_\d+_x86_64\.whl$", wheel), wheel
    names = zipfile.ZipFile(wheel).namelist()
    for want in ("tfos/bin/tfos", "tfos/py.typed", "tfos/_tfos.pyi", "tfos/_extras.py"):
        assert want in names, want
    assert any(re.match(r"tfos/_tfos\.cpython-.*\.so$", n) for n in names), names
    assert any(re.match(r"tfos\.libs/libjansson.*\.so", n) for n in names), "libjansson not bundled: %s" % names
    assert glob.glob(os.path.join(DIST, "tfos-%s.tar.gz" % project_version())), os.listdir(DIST)
    show = run([os.path.join(os.path.dirname(sys.executable), "auditwheel"), "show", wheel])
    assert show.returncode == 0, show.stderr
    assert re.search(r'consistent with\s+the following platform tag:\s+"manylinux_', show.stdout), show.stdout


def test_import_needs_only_the_core_dependencies(env_dir):
    py = str(env_dir / "bin" / "python")
    r = run([py, "-c", "import tfos, numpy, importlib.util as u; print(tfos.__file__); "
             "print(u.find_spec('pyspark') is None, u.find_spec('tensorflow') is None)"])
    assert r.returncode == 0, r.stderr
    where, absent = r.stdout.split("\n")[:2]
    assert where.startswith(str(env_dir)), where   # the wheel's tfos, not the source tree's
    assert absent == "True True"


def test_missing_extra_fails_on_the_driver_naming_it(env_dir):
    code = ("from tfos import TFCluster\n"
            "try:\n"
            "    TFCluster.run(None, print, None, 2)\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e.extras, e.modules); print(e)\n")
    r = run([str(env_dir / "bin" / "python"), "-c", code])
    assert r.returncode == 0, r.stderr
    kind, message = r.stdout.strip().split("\n")
    assert kind == "MissingDependency ('spark',) ('pyspark', 'pyarrow')"
    assert message.startswith("TFCluster.run needs pyspark, pyarrow") and "pip install 'tfos[spark]'" in message


def test_one_version_everywhere(env_dir):
    v = project_version()
    bindir = env_dir / "bin"
    for argv in ([str(bindir / "tfos"), "--version"], [str(bindir / "tfos"), "-V"],
                 [str(bindir / "tfos"), "version"], [str(bindir / "python"), "-m", "tfos", "--version"]):
        r = run(argv)
        assert r.returncode == 0 and r.stdout.startswith("tfos %s (protocol " % v), (argv, r.stdout, r.stderr)
    r = run([str(bindir / "python"), "-c",
             "import tfos, importlib.metadata as m; print(tfos.__version__, m.version('tfos'))"])
    assert r.stdout.split() == [v, v], r.stdout + r.stderr


def test_tfos_yarn_finds_its_client_jar_in_the_wheel(env_dir, tmp_path):
    """Where the wheel was built with a JDK and Maven (make dist, .ci/run),
    it carries tfos yarn's client jar beside both tfos binaries."""
    if not (shutil.which("mvn") and shutil.which("javac") and shutil.which("java")):
        pytest.skip("no JDK and Maven here: the wheel was built without tfos-yarn.jar")
    names = zipfile.ZipFile(the_wheel()).namelist()
    assert "tfos/bin/tfos-yarn.jar" in names, names
    assert any(n.endswith(".data/data/share/tfos/tfos-yarn.jar") for n in names), names
    assert (env_dir / "share" / "tfos" / "tfos-yarn.jar").is_file()
    # a client configuration (tfos yarn refuses to start without one), for a
    # ResourceManager nobody runs
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.address</name><value>127.0.0.1:1</value>"
        "</property></configuration>\n")
    for argv in ([str(env_dir / "bin" / "tfos")], [str(env_dir / "bin" / "python"), "-m", "tfos"]):
        # no Hadoop on the classpath: the client's own class loads from the jar, then misses Hadoop's
        r = run(argv + ["yarn", "status", "application_1_1"],
                env=clean_env(TFOS_HADOOP_CLASSPATH="/nonexistent/hadoop.jar", HADOOP_CONF_DIR=str(tmp_path)))
        assert r.returncode != 0 and "cannot read the YARN client jar" not in r.stderr, (argv, r.stderr)
        assert "Could not find or load main class" not in r.stderr and "org/apache/hadoop" in r.stderr, r.stderr


def test_tfos_run_from_the_wheel(env_dir, tmp_path, marker):
    py = str(env_dir / "bin" / "python")
    code = "import os, tfos; print('%s', os.environ['TFOS_JOB_NAME'], os.environ['TFOS_TASK_INDEX'], tfos.__file__)"
    r = run([str(env_dir / "bin" / "tfos"), "run", "--workers", "2", "--log-dir", str(tmp_path / "logs"),
             "--status-port", "-1", "--", py, "-c", code % marker], timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    seen = sorted(tuple(line.split(marker, 1)[1].split()) for line in r.stdout.splitlines() if marker in line)
    init = os.path.join(str(env_dir), "lib", "python%d.%d" % sys.version_info[:2], "site-packages", "tfos",
                        "__init__.py")
    assert seen == [("worker", "0", init), ("worker", "1", init)], r.stdout


def test_spark_train_and_inference_with_the_spark_extra(spark_env, tmp_path):
    out = tmp_path / "fed"
    out.mkdir()
    r = run([str(spark_env / "bin" / "python"), os.path.join(PROGS, "wheel_spark.py"), str(out)],
            timeout=400, cwd=str(tmp_path))
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["tfos"].startswith(str(spark_env)), result["tfos"]
    fed = result["fed"]
    assert sorted(fed) == ["worker-0.json", "worker-1.json"], fed
    assert sum(n["rows"] for n in fed.values()) == 100 and all(n["rows"] > 0 for n in fed.values()), fed
    assert sum(n["sum"] for n in fed.values()) == sum(range(100)), fed
    assert result["preds"] == [2.0 * i for i in range(10)], result["preds"]
