"""The payload a driver ships to its node programs (tfos._payload): pickled
with the standalone cloudpickle, so that loading it does not import pyspark;
modules registered by value with pyspark's copy still travel by value; a
node without cloudpickle gets an error that says what to install."""
import subprocess
import sys

import pytest

from tfos import _payload

cloudpickle = pytest.importorskip("cloudpickle")


def load_in_child(tmp_path, data, code, cwd=None):
    """Run `code` in a fresh Python where `data` (a payload) is in file P."""
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return subprocess.run([sys.executable, "-c", "P = %r\n" % str(path) + code], capture_output=True, text=True,
                          timeout=120, cwd=cwd or str(tmp_path))


def test_a_closure_loads_without_importing_spark(tmp_path):
    k = 41
    data = _payload.dumps((lambda x: x + k, {"args": [1]}))
    assert b"pyspark" not in data
    r = load_in_child(tmp_path, data, "import sys\n"
                      "from tfos import _payload\n"
                      "fn, kw = _payload.loads(open(P, 'rb').read(), 'the function')\n"
                      "print(fn(kw['args'][0]), 'pyspark' in sys.modules)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["42", "False"]


def test_modules_registered_with_pyspark_travel_by_value(tmp_path, monkeypatch):
    pytest.importorskip("pyspark")
    from pyspark import cloudpickle as spark_cp
    src = tmp_path / "src"
    src.mkdir()
    (src / "userlib_tfos_payload.py").write_text("def triple(x):\n    return 3 * x\n")
    monkeypatch.syspath_prepend(str(src))
    import userlib_tfos_payload as lib
    spark_cp.register_pickle_by_value(lib)
    try:
        data = _payload.dumps(lib.triple)
    finally:
        spark_cp.unregister_pickle_by_value(lib)
        if "userlib_tfos_payload" in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(lib)
    # the child has no userlib_tfos_payload on its path: by value or nothing
    r = load_in_child(tmp_path, data, "from tfos import _payload\n"
                      "print(_payload.loads(open(P, 'rb').read(), 'the function')(5))\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "15"


def test_a_node_without_cloudpickle_is_told_what_to_install(tmp_path):
    k = 1
    data = _payload.dumps(lambda: k)
    r = load_in_child(tmp_path, data, "import sys\n"
                      "sys.modules['cloudpickle'] = None  # as if it were not installed\n"
                      "from tfos import _payload\n"
                      "_payload.loads(open(P, 'rb').read(), 'the map_fun payload')\n")
    assert r.returncode != 0
    assert ("ModuleNotFoundError: the map_fun payload was pickled by the driver with the cloudpickle package, "
            "which %s on this node does not have: pip install cloudpickle (tfos[spark] installs it) in the "
            "executors' Python" % sys.executable) in r.stderr
