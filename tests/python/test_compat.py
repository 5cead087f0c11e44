"""tfos.compat, TensorFlowOnSpark's helpers for TF 2.x: export_saved_model
writes a SavedModel on the chief only; non-chief workers leave nothing."""
import glob
import os
import tempfile

import numpy as np
import pytest


@pytest.fixture(scope="module")
def model():
    import keras
    inputs = keras.Input(shape=(3,), name="x")
    outputs = keras.layers.Dense(2, name="dense")(inputs)
    m = keras.Model(inputs, outputs)
    m.get_layer("dense").set_weights([np.arange(6, dtype="float32").reshape(3, 2), np.array([1.0, -1.0], "float32")])
    return m


def test_export_saved_model_on_the_chief_is_loadable(model, tmp_path):
    import tensorflow as tf
    from tfos import compat
    export_dir = str(tmp_path / "export")
    assert compat.export_saved_model(model, export_dir, is_chief=True) == export_dir
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
    loaded = tf.saved_model.load(export_dir)
    x = np.array([[1.0, 2.0, 3.0]], dtype="float32")
    got = loaded.serve(tf.constant(x)).numpy()
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got, [[17.0, 21.0]], rtol=1e-6)  # x @ W + b


def test_export_saved_model_off_the_chief_leaves_nothing(model, tmp_path, monkeypatch):
    from tfos import compat
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # the temporary copy goes to (and is removed from) TMPDIR
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    # the non-chief still takes part in the save (MultiWorkerMirroredStrategy
    # needs every worker): see where it wrote and that it was a SavedModel.
    # A Keras 3 functional model is exported with tf.saved_model.save (its
    # serving signature named after the layers, see test_export.py).
    import tensorflow as tf
    written = []
    real_save = tf.saved_model.save

    def spy(obj, target, *a, **kw):
        real_save(obj, target, *a, **kw)
        written.append((target, os.path.isfile(os.path.join(target, "saved_model.pb"))))

    monkeypatch.setattr(tf.saved_model, "save", spy)
    export_dir = tmp_path / "export"
    assert compat.export_saved_model(model, str(export_dir), is_chief=False) is None
    assert len(written) == 1 and written[0][1], written
    target = written[0][0]
    assert os.path.dirname(target) == str(scratch) and os.path.basename(target).startswith("tfos-export-")
    assert not os.path.exists(target)
    assert not export_dir.exists() or not os.listdir(export_dir)
    assert os.listdir(scratch) == []
