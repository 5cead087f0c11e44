"""compat.export_saved_model writes the SavedModel TensorFlowOnSpark 2.2.5
writes, so TFoS inference programs run on it (issue 19).

A Keras model is trained on tfos (`tfos run`, two workers,
MultiWorkerMirroredStrategy) and exported by every worker, once with tf-keras
(Keras 2, TF_USE_LEGACY_KERAS=1) and once with Keras 3. The export's
serving_default signature must name its input and output after the model's
layers, and a TFoS-style inference program that looks its output up by the
last layer's name (`infer(x)["dense_1"]`) must get the trained model's own
predictions. In-process tests cover the other model shapes."""
import importlib.util
import json
import os

import numpy as np
import pytest

from conftest import PY, prog, run_tfos

# the Keras a TFoS program gets as tf.keras, chosen by its environment
KERAS_ENV = {"tf-keras": {"TF_USE_LEGACY_KERAS": "1"}, "keras3": {"TF_USE_LEGACY_KERAS": "0"}}


def require_tf_keras():
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is NOT installed for %s, so the Keras 2 export (model.save, "
                    "keras_metadata.pb) is NOT tested: install requirements.txt's pin "
                    "(make venv, or pip install tf-keras==2.21.0)" % PY)


def signature_names(export_dir):
    """(input names, output names, the loaded SavedModel) of serving_default.
    Keep the loaded object while calling its functions: they use its variables."""
    import tensorflow as tf
    loaded = tf.saved_model.load(export_dir)
    sig = loaded.signatures["serving_default"]
    args, kwargs = sig.structured_input_signature
    assert args == (), "inputs are passed by name, as Keras's own signatures do"
    return sorted(kwargs), sorted(sig.structured_outputs), loaded


@pytest.mark.parametrize("keras", ["tf-keras", "keras3"])
def test_trained_on_tfos_export_serves_by_layer_name(keras, tmp_path, marker):
    if keras == "tf-keras":
        require_tf_keras()
    export_dir, meta_path = str(tmp_path / "export"), str(tmp_path / "meta.json")
    scratch = tmp_path / "tmp"  # where the non-chief worker's temporary copy goes
    scratch.mkdir()
    env = dict(KERAS_ENV[keras], TMPDIR=str(scratch), TF_CPP_MIN_LOG_LEVEL="2")
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("export_keras.py"), export_dir, meta_path, marker], env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # every worker took part; only the chief's copy is kept
    assert "[worker:0] worker 0 exported: %s\n" % export_dir in r.stdout, r.stdout[-3000:]
    assert "[worker:1] worker 1 exported: None\n" in r.stdout, r.stdout[-3000:]
    assert [p for p in os.listdir(scratch) if p.startswith("tfos-export-")] == []

    with open(meta_path) as f:
        meta = json.load(f)
    if keras == "tf-keras":
        assert meta["keras_package"] == "tf_keras" and meta["keras_version"].startswith("2."), meta["keras_package"]
    else:
        assert meta["keras_package"] == "keras" and meta["keras_version"].startswith("3."), meta["keras_package"]
    assert meta["input_layers"] == ["pixels"] and meta["output_layers"] == ["dense_1"]

    files = set(os.listdir(export_dir))
    assert "saved_model.pb" in files and "variables" in files
    # the Keras SavedModel under Keras 2 (what TFoS's model.save(save_format="tf") writes);
    # Keras 3 has no such format
    assert ("keras_metadata.pb" in files) == (keras == "tf-keras"), files

    inputs, outputs, loaded = signature_names(export_dir)
    sig = loaded.signatures["serving_default"]
    assert inputs == meta["input_layers"] and outputs == meta["output_layers"]
    assert sig.structured_input_signature[1]["pixels"].shape.as_list() == [None, 64]
    assert sig.structured_outputs["dense_1"].shape.as_list() == [None, 10]

    # a TFoS inference program, run on tfos, on the export
    out_path = str(tmp_path / "predictions.json")
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "infer-logs"), "--",
                  PY, prog("infer_by_name.py"), export_dir, meta_path, out_path, marker],
                 env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(out_path) as f:
        got = json.load(f)
    want = np.array(meta["predictions"])
    assert want.shape == (20, 10)
    np.testing.assert_allclose(got["predictions"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["by_keyword"], want, rtol=1e-5, atol=1e-5)


def test_tf_keras_imported_directly_gives_the_keras_savedmodel(tmp_path):
    """`import tf_keras` (no TF_USE_LEGACY_KERAS) selects the Keras 2 export too."""
    require_tf_keras()
    import tensorflow as tf
    import tf_keras
    inputs = tf_keras.Input(shape=(3,), name="features")
    outputs = tf_keras.layers.Dense(2, name="scores")(tf_keras.layers.Dense(4, name="hidden")(inputs))
    model = tf_keras.Model(inputs, outputs)
    from tfos import compat
    export_dir = str(tmp_path / "export")
    assert compat.export_saved_model(model, export_dir, is_chief=True) == export_dir
    assert os.path.isfile(os.path.join(export_dir, "keras_metadata.pb"))
    inputs, outputs, loaded = signature_names(export_dir)
    sig = loaded.signatures["serving_default"]
    assert (inputs, outputs) == (["features"], ["scores"])
    x = np.random.default_rng(1).random((5, 3), dtype="float32")
    np.testing.assert_allclose(sig(tf.constant(x))["scores"].numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    # and Keras 2 reloads it as a Keras model
    np.testing.assert_allclose(tf_keras.models.load_model(export_dir)(x).numpy(), model(x).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_keras3_several_inputs_and_outputs_are_named_after_their_layers(tmp_path):
    import keras
    import tensorflow as tf
    from tfos import compat
    a = keras.Input((2,), name="age")
    b = keras.Input((3,), name="bands")
    joined = keras.layers.Concatenate()([a, b])
    score = keras.layers.Dense(1, name="score")(joined)
    label = keras.layers.Dense(4, name="label")(joined)
    # dict inputs given out of order, dict outputs keyed by other names
    model = keras.Model({"bands": b, "age": a}, {"s": score, "l": label})
    export_dir = str(tmp_path / "export")
    compat.export_saved_model(model, export_dir, is_chief=True)
    assert not os.path.exists(os.path.join(export_dir, "keras_metadata.pb"))
    inputs, outputs, loaded = signature_names(export_dir)
    sig = loaded.signatures["serving_default"]
    assert inputs == ["age", "bands"] and outputs == ["label", "score"]
    rng = np.random.default_rng(2)
    x = {"age": rng.random((6, 2), dtype="float32"), "bands": rng.random((6, 3), dtype="float32")}
    want = model(x)
    got = sig(age=tf.constant(x["age"]), bands=tf.constant(x["bands"]))
    np.testing.assert_allclose(got["score"].numpy(), want["s"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["label"].numpy(), want["l"].numpy(), rtol=1e-5, atol=1e-6)
    # model.export()'s `serve` function is kept: the model's own output structure
    served = loaded.serve(tf.constant(x["age"]), tf.constant(x["bands"]))
    np.testing.assert_allclose(served["l"].numpy(), want["l"].numpy(), rtol=1e-5, atol=1e-6)


def test_keras3_sequential_output_is_its_last_layer(tmp_path):
    import keras
    import tensorflow as tf
    from tfos import compat
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
                              keras.layers.Dense(2, name="logits")])
    export_dir = str(tmp_path / "export")
    compat.export_saved_model(model, export_dir, is_chief=True)
    inputs, outputs, loaded = signature_names(export_dir)
    sig = loaded.signatures["serving_default"]
    assert len(inputs) == 1 and inputs[0].startswith("input_layer"), inputs  # Keras 3 names it so
    assert outputs == ["logits"]
    x = np.random.default_rng(3).random((2, 4), dtype="float32")
    np.testing.assert_allclose(sig(tf.constant(x))["logits"].numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_keras3_subclassed_model_has_no_layer_names_and_uses_model_export(tmp_path):
    import keras
    import tensorflow as tf
    from tfos import compat

    class Scale(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    model = Scale()
    x = np.ones((1, 3), dtype="float32")
    want = model(x).numpy()
    export_dir = str(tmp_path / "export")
    compat.export_saved_model(model, export_dir, is_chief=True)
    loaded = tf.saved_model.load(export_dir)
    sig = loaded.signatures["serving_default"]
    assert list(sig.structured_outputs) == ["output_0"]
    np.testing.assert_allclose(sig(tf.constant(x))["output_0"].numpy(), want, rtol=1e-6)


def test_keras3_off_the_chief_writes_a_temporary_copy_and_removes_it(tmp_path, monkeypatch):
    import tempfile

    import keras
    import tensorflow as tf
    from tfos import compat
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    inputs = keras.Input((3,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(2, name="y")(inputs))
    # the non-chief still saves (MultiWorkerMirroredStrategy needs every
    # worker): record what tf.saved_model.save wrote before it was removed
    written = []
    real_save = tf.saved_model.save

    def recording_save(obj, target, *a, **kw):
        real_save(obj, target, *a, **kw)
        written.append((target, sorted(os.listdir(target))))

    monkeypatch.setattr(tf.saved_model, "save", recording_save)
    export_dir = tmp_path / "export"
    assert compat.export_saved_model(model, str(export_dir), is_chief=False) is None
    assert len(written) == 1 and "saved_model.pb" in written[0][1], written
    assert os.path.dirname(written[0][0]) == str(scratch)
    assert os.path.basename(written[0][0]).startswith("tfos-export-")
    assert os.listdir(scratch) == [] and not export_dir.exists()
