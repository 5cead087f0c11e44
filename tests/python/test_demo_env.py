"""`make demo`'s environment (issue 36, item 3): requirements-demo.txt, the
lean set the digits example needs under tfos run and on local Spark, not
requirements.txt's 9 GB (tensorflow and tensorflow-cpu both, torch with its
CUDA libraries, JAX, the test and packaging tools). Checked statically: the
pins, what the demo's programs import, and what `make demo` would install."""
import ast
import importlib.metadata as md
import os
import re
import subprocess
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

# what `make demo` runs (the Makefile's demo target) and what they import at run time
DEMO_PROGRAMS = ["examples/digits/train.py", "examples/digits/predict.py", "examples/digits/spark_digits.py",
                 "examples/digits/digits_data.py"]
# never in the lean set: the big ones the demo does not use
HEAVY = {"torch", "jax", "jaxlib", "tensorflow", "tf-keras"}


def pins(name):
    out = {}
    with open(os.path.join(ROOT, name)) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                req = Requirement(line)
                out[canonicalize_name(req.name)] = str(req.specifier)
    return out


def closure(names):
    """The installed distributions names need, with their own requirements
    (no extras), as canonical names."""
    seen, todo = set(), list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def imported_modules(path):
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_demo_pins_are_requirements_pins_without_the_heavy_ones():
    demo, full = pins("requirements-demo.txt"), pins("requirements.txt")
    assert demo, "requirements-demo.txt pins nothing"
    for name, spec in demo.items():
        assert spec.startswith("=="), "requirements-demo.txt pins exactly: %s%s" % (name, spec)
        assert full.get(name) == spec, "%s%s: requirements.txt has %s" % (name, spec, full.get(name))
    assert not HEAVY & set(demo), HEAVY & set(demo)
    assert not HEAVY & closure(demo), "the demo set pulls in %s" % (HEAVY & closure(demo))
    assert not any(n.startswith("nvidia-") for n in closure(demo)), closure(demo)


def test_every_module_the_demo_imports_comes_with_the_demo_set():
    have = closure(pins("requirements-demo.txt")) | {"tfos"}
    by_module = md.packages_distributions()
    local = {os.path.splitext(os.path.basename(p))[0] for p in DEMO_PROGRAMS}
    missing = []
    for path in DEMO_PROGRAMS:
        for mod in sorted(imported_modules(path) - local - set(sys.stdlib_module_names)):
            dists = {canonicalize_name(d) for d in by_module.get(mod, [])} or {canonicalize_name(mod)}
            if not dists & have:
                missing.append("%s imports %s (%s)" % (path, mod, ", ".join(sorted(dists))))
    # and what tfos itself needs (pyproject's dependencies, tfos[spark] for spark_digits.py)
    for extra in (["numpy"], ["pyspark", "pyarrow", "pandas", "cloudpickle"]):
        missing += ["tfos needs %s" % n for n in extra if n not in have]
    assert not missing, missing


def test_make_demo_installs_the_demo_set_not_the_whole_one(tmp_path):
    venv = str(tmp_path / "venv")   # a fresh machine: no venv yet
    r = subprocess.run(["make", "-n", "demo", "VENV=" + venv], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.search(r"pip install -q -r requirements-demo\.txt", r.stdout), r.stdout
    assert "-r requirements.txt" not in r.stdout, r.stdout
    assert "examples/digits/train.py" in r.stdout and "examples/digits/spark_digits.py" in r.stdout, r.stdout
