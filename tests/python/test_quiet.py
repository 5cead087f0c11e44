"""tfos.quiet (issue 36, item 10): TensorFlow's three load-time lines kept
off the stderr of a script a user runs (python predict.py) on a host without
an NVIDIA driver, every other line passed through in order."""
import os
import subprocess

import pytest

from conftest import PY

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1.1 1 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
    "E0000 00:00:1.2 1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: (303)",
]
SCRIPT = """
import os, sys
import tfos.quiet
print("on", tfos.quiet.tensorflow_noise(), flush=True)
print("python before", file=sys.stderr, flush=True)
os.write(2, (%r + "\\n").encode())          # as TensorFlow's C++ writes: fd 2
os.write(2, b"a real error from C\\n")
print("python after", file=sys.stderr)
os.write(2, b"no newline at the end")
"""


def run(env_extra):
    code = SCRIPT % "\n".join(NOISE)
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.update(env_extra)
    return subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="a host with an NVIDIA driver shows them")
def test_the_three_lines_are_dropped_and_the_rest_kept_in_order():
    r = run({})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "on True\n"
    assert r.stderr == "python before\na real error from C\npython after\nno newline at the end", repr(r.stderr)


def test_with_tf_cpp_min_log_level_0_nothing_is_dropped():
    r = run({"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "on False\n"
    for line in NOISE:
        assert line in r.stderr, r.stderr
