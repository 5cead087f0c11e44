"""--keras: which Keras `tf.keras` is in the program (TF_USE_LEGACY_KERAS),
decided once by the node agent (issue 12). The program here only prints the
variable it got; tests/spark/test_keras.py trains a TFoS Keras program with
TFCluster's default, and test_export.py exports under each Keras."""
import importlib.util
import os

import pytest

from conftest import PY, run_tfos

SHOW = "import os; print('TF_USE_LEGACY_KERAS=%s' % os.environ.get('TF_USE_LEGACY_KERAS'))"


def bare_python(tmp_path):
    """A python* executable whose interpreter has no site-packages (so no
    tf_keras): what the agent probes when it is the program's argv[0]."""
    path = tmp_path / "python-bare"
    path.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % PY)
    path.chmod(0o755)
    return str(path)


def run_show(tmp_path, keras, python=PY, inherited=None, known=None):
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("TFOS_HAS_TF_KERAS", None)
    if inherited is not None:
        env["TF_USE_LEGACY_KERAS"] = inherited
    if known is not None:
        env["TFOS_HAS_TF_KERAS"] = known
    args = ["run", "--workers", "1", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs")]
    if keras is not None:
        args += ["--keras", keras]
    return run_tfos(args + ["--", python, "-c", SHOW], env=env, timeout=120)


def seen(r):
    lines = [ln for ln in r.stdout.splitlines() if "TF_USE_LEGACY_KERAS=" in ln]
    assert r.returncode == 0 and len(lines) == 1, r.stdout[-2000:] + r.stderr[-2000:]
    return lines[0].rsplit("=", 1)[1]


@pytest.mark.parametrize("keras, inherited, expected", [
    (None, None, "None"),      # tfos run leaves the environment alone by default
    (None, "1", "1"),
    ("env", "0", "0"),
    ("legacy", None, "1"),
    ("legacy", "0", "1"),      # the flag wins over the inherited value
    ("3", None, "0"),
    ("3", "1", "0"),
    ("auto", "0", "0"),        # auto keeps the user's own choice
])
def test_keras_mode_sets_tf_use_legacy_keras(tmp_path, keras, inherited, expected):
    assert seen(run_show(tmp_path, keras, inherited=inherited)) == expected


def test_auto_selects_tf_keras_where_installed(tmp_path):
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is NOT installed for %s: --keras auto's tf-keras case is NOT tested" % PY)
    assert seen(run_show(tmp_path, "auto")) == "1"


def test_auto_leaves_keras_3_where_tf_keras_is_missing(tmp_path):
    assert seen(run_show(tmp_path, "auto", python=bare_python(tmp_path))) == "None"


def test_legacy_without_tf_keras_fails_at_start_naming_the_interpreter(tmp_path):
    bare = bare_python(tmp_path)
    r = run_show(tmp_path, "legacy", python=bare)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert ("--keras legacy: the tf_keras package (Keras 2) is not installed for %s" % bare) in r.stderr, \
        r.stderr[-3000:]
    assert "TF_USE_LEGACY_KERAS=" not in r.stdout  # the program never ran


def test_a_launchers_answer_replaces_the_probe(tmp_path):
    """TFOS_HAS_TF_KERAS (what TFCluster's node tasks set, having asked the
    program's interpreter themselves): the agent starts no probe and takes
    the answer, here against what a probe of the bare interpreter says."""
    bare = bare_python(tmp_path)
    assert seen(run_show(tmp_path, "auto", python=bare, known="1")) == "1"
    assert seen(run_show(tmp_path, "auto", python=PY, known="0")) == "None"
    r = run_show(tmp_path, "legacy", python=PY, known="0")
    assert r.returncode == 1 and "--keras legacy: the tf_keras package (Keras 2) is not installed" in r.stderr, \
        r.stderr[-3000:]


def test_unknown_mode_is_a_usage_error():
    r = run_tfos(["run", "--workers", "1", "--keras", "2", "--", PY, "-c", "pass"])
    assert r.returncode == 2
    assert "--keras takes env, auto, legacy or 3; got '2'" in r.stderr, r.stderr


def test_digits_model_fit_example_trains_multi_worker_with_legacy_keras(tmp_path):
    """examples/digits/train_fit.py: Keras 2's compile + fit under
    MultiWorkerMirroredStrategy on 2 workers, ModelCheckpoint to
    weights-{epoch:04d}, the SavedModel export; >= 0.90 held-out."""
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is NOT installed for %s: the model.fit example is NOT tested" % PY)
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "digits", "train_fit.py")
    ckpt, model_dir = tmp_path / "ckpt", tmp_path / "model"
    r = run_tfos(["run", "--workers", "2", "--keras", "legacy", "--max-restarts", "0", "--log-dir",
                  str(tmp_path / "logs"), "--checkpoint-dir", str(ckpt), "--", PY, example, "--epochs", "4",
                  "--model-dir", str(model_dir)], env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    acc = [float(ln.rsplit(" ", 1)[1]) for ln in r.stdout.splitlines() if ln.startswith("[worker:0] test accuracy:")]
    assert len(acc) == 1 and acc[0] >= 0.90, r.stdout[-3000:]
    assert sorted(p for p in os.listdir(ckpt / "fit") if p.endswith(".index")) == \
        ["weights-%04d.index" % e for e in range(1, 5)]
    assert {"saved_model.pb", "keras_metadata.pb"} <= set(os.listdir(model_dir / "export"))
