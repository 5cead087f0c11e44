"""pyproject.toml's dependency ranges against requirements.txt's pins (the
tested set): a pin outside its declared range fails; the extras against
tfos._extras (which names the missing extra at run time); one version."""
import os
import re
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT
from tfos import _extras

# Declared in pyproject.toml but not installed by requirements.txt, so no test
# here runs them yet (docs/PACKAGING.md says why for each).
NOT_PINNED = {"torch"}
# distribution -> the module it installs, where the names differ
MODULE_OF = {"tensorflow-cpu": "tensorflow", "tf-keras": "tf_keras", "mlflow-skinny": "mlflow"}


def load_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def load_pins(lines):
    """{name: version} of the `name==version` lines of a requirements file."""
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", "requirements.txt pins exactly: %r" % line
        pins[canonicalize_name(req.name)] = specs[0].version
    return pins


def declared(project):
    """[(where, Requirement)] for every dependency and extra of tfos (not the
    extras that name tfos itself, like `all`)."""
    out = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        out += [("extra %r" % extra, Requirement(r)) for r in reqs if canonicalize_name(Requirement(r).name) != "tfos"]
    return out


def range_problems(project, pins):
    """What is wrong between the declared ranges and the pins: a pin outside
    a range, or a dependency neither pinned nor known to be untested here."""
    problems = []
    for where, req in declared(project):
        name = canonicalize_name(req.name)
        if name in pins:
            if not req.specifier.contains(pins[name], prereleases=True):
                problems.append("%s: requirements.txt pins %s==%s, outside %s" % (where, name, pins[name], req))
        elif name not in NOT_PINNED:
            problems.append("%s: %s is not pinned in requirements.txt (so never tested)" % (where, req))
    return problems


def test_every_pin_is_inside_its_declared_range():
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        pins = load_pins(f)
    assert range_problems(load_pyproject()["project"], pins) == []


def test_a_pin_outside_a_range_is_reported():
    project = {"dependencies": ["numpy>=2.0,<3"], "optional-dependencies": {"spark": ["pyspark>=3.5,<3.6"]}}
    pins = load_pins(["numpy==3.0.1", "pyspark==3.5.9"])
    assert range_problems(project, pins) == ["dependencies: requirements.txt pins numpy==3.0.1, outside numpy<3,>=2.0"]
    assert range_problems(project, load_pins(["numpy==2.4.6"])) == [
        "extra 'spark': pyspark<3.6,>=3.5 is not pinned in requirements.txt (so never tested)"]


def test_tf_and_tf_cpu_extras_name_the_same_versions():
    extras = load_pyproject()["project"]["optional-dependencies"]
    tf = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in extras["tf"]}
    cpu = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in extras["tf-cpu"]}
    assert tf["tensorflow"] == cpu["tensorflow-cpu"]        # the tested tensorflow-cpu pin vouches for both
    assert tf["tensorboard"] == cpu["tensorboard"] == tf["tf-keras"]


def test_extras_match_the_runtime_table():
    project = load_pyproject()["project"]
    extras = project["optional-dependencies"]
    assert set(_extras.EXTRAS) == set(extras) - {"all", "test"}
    for extra, modules in _extras.EXTRAS.items():
        names = [canonicalize_name(Requirement(r).name) for r in extras[extra]]
        assert sorted(MODULE_OF.get(n, n.replace("-", "_")) for n in names) == sorted(modules), extra
    core = [canonicalize_name(Requirement(r).name) for r in project["dependencies"]]
    assert sorted(core) == sorted(_extras.CORE)
    everything = Requirement(extras["all"][0])
    assert len(extras["all"]) == 1 and everything.name == "tfos"
    assert everything.extras == set(extras) - {"all", "test", "tf-cpu"}


def test_a_missing_extra_names_its_pip_command(monkeypatch):
    monkeypatch.setitem(_extras.EXTRAS, "serve", ("tfos_test_absent_module",))
    with pytest.raises(ImportError) as info:
        _extras.require("tfos serve", "numpy", "tfos_test_absent_module")
    err = info.value
    assert isinstance(err, _extras.MissingDependency) and isinstance(err, ModuleNotFoundError)
    assert err.modules == ("tfos_test_absent_module",) and err.extras == ("serve",)
    assert str(err) == ("tfos serve needs tfos_test_absent_module, not installed for %s: "
                        "pip install 'tfos[serve]'" % sys.executable)
    _extras.require("TFCluster.run", "pyspark", "pyarrow", "numpy")    # all here: no error
    with pytest.raises(KeyError):
        _extras.extra_of("tfos_test_absent_module_of_no_extra")


def test_version_has_one_source():
    import tfos
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(tfos VERSION ([0-9.]+)", f.read()).group(1)
    assert tfos.__version__ == version
    project = load_pyproject()["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    with open(os.path.join(ROOT, "include", "tfos", "tfos.h")) as f:
        assert re.search(r'#define TFOS_VERSION TFOS_PROJECT_VERSION\b', f.read())
