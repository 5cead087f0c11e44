"""TensorFlowOnSpark's ``compat`` helpers for TensorFlow 2.x, for Keras 2
(tf-keras) and Keras 3 programs. A TFoS program keeps calling them as
``from tfos import compat``; the export writes the SavedModel TFoS writes, so
its inference programs run unchanged on the export (see docs/SPARK.md,
"Exporting models")."""
import os
import shutil
import sys
import tempfile

__all__ = ["export_saved_model", "disable_auto_shard", "is_gpu_available"]


def export_saved_model(model, export_dir, is_chief=False, register_as=None):
    """Export ``model`` as a TensorFlow SavedModel that serves by layer name.

    What lands in ``export_dir`` depends on the Keras that built ``model``:

    - Keras 2 (tf-keras, selected by ``import tf_keras`` or by
      ``TF_USE_LEGACY_KERAS=1`` so that ``tf.keras`` is tf-keras; or the
      ``keras`` 2.x package): ``model.save(export_dir, save_format="tf")``,
      exactly what TensorFlowOnSpark 2.2.5 does. The Keras SavedModel, with
      ``keras_metadata.pb`` and a ``serving_default`` signature whose inputs
      are the input layers' names and whose outputs are keyed by the output
      layers' names (``{"dense_1": ...}``).
    - Keras 3 (what ``tf.keras`` is by default from TensorFlow 2.16): Keras 3
      cannot write that format, so tfos writes the closest equivalent with
      ``tf.saved_model.save``: a ``serving_default`` signature with one input
      per model input, named after its input layer (a Sequential model's is
      ``input_layer``, ``input_layer_1``... unless given
      ``keras.Input(..., name=...)``; Keras 2 said ``input_1`` or
      ``<first layer>_input``), returning
      a dict keyed by the output layers' names (``{"dense_1": ...}``), as
      under Keras 2. Layer names repeated among the outputs get ``_1``,
      ``_2``... suffixes. The object also keeps ``model.export()``'s
      ``serve`` function (``loaded.serve(x)`` returns the model's output
      as it is). There is no ``keras_metadata.pb``: reload the export with
      ``tf.saved_model.load``. A model with no input layers (a subclassed
      ``keras.Model``) has no layer names to give, and is exported with
      ``model.export()`` (outputs ``output_0``...).
    - anything else (a ``tf.Module``): ``tf.saved_model.save(model, export_dir)``.

    Under MultiWorkerMirroredStrategy every worker must call this: only the
    chief's copy goes to ``export_dir``; the others write to a temporary
    directory (``tfos-export-*`` under ``$TMPDIR``) that is removed
    afterwards (TensorFlowOnSpark left theirs in ``./worker_model``).

    ``register_as=NAME``: on the chief, when ``MLFLOW_TRACKING_URI`` is set,
    the export is then registered as a new version of NAME in MLflow's model
    registry (:func:`tfos.models.register`, in the job's run when
    ``MLFLOW_RUN_ID`` names one); without the variable it is not, and a log
    line says so.

    Returns ``export_dir`` on the chief, ``None`` elsewhere.
    """
    import tensorflow as tf
    target = export_dir if is_chief else tempfile.mkdtemp(prefix="tfos-export-")
    try:
        major = _keras_major_version(model)
        if major == 2:
            model.save(target, save_format="tf")
        elif major is not None:
            _save_keras3(model, target)
        else:
            tf.saved_model.save(model, target)
    finally:
        if not is_chief:
            shutil.rmtree(target, ignore_errors=True)
    if is_chief and register_as:
        if os.environ.get("MLFLOW_TRACKING_URI"):
            from . import models
            models.register(export_dir, register_as)
        else:
            import logging
            logging.getLogger("tfos").warning("export_saved_model(register_as=%r): MLFLOW_TRACKING_URI is not set, "
                                              "so %s is not registered", register_as, export_dir)
    return export_dir if is_chief else None


def _keras_major_version(model):
    """2 or 3 for a model of tf-keras or of the ``keras`` package (by its
    version), None for anything that is not a Keras model. Only packages the
    program has already imported are consulted: a model's package is."""
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None and isinstance(model, tf_keras.Model):
        return 2
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, getattr(keras, "Model", ())):
        try:
            return int(str(keras.__version__).split(".")[0])
        except (AttributeError, ValueError):
            return 3
    return None


def _layer_name(keras_tensor):
    """The name of the layer that produced a symbolic Keras 3 tensor."""
    history = getattr(keras_tensor, "_keras_history", None)
    operation = getattr(history, "operation", None)
    return getattr(operation, "name", None) or keras_tensor.name


def _unique(names):
    seen, out = {}, []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = "%s_%d" % (name, seen[name])
        else:
            seen[name] = 0
        out.append(name)
    return out


def _save_keras3(model, target):
    import tensorflow as tf
    from keras import tree
    try:
        inputs, outputs = list(model.inputs or []), list(model.outputs or [])
    except (AttributeError, ValueError):  # subclassed, or never built
        inputs, outputs = [], []
    if not inputs or not outputs:
        model.export(target)
        return
    input_names = _unique([_layer_name(t) for t in inputs])
    output_names = _unique([_layer_name(t) for t in outputs])
    specs = [tf.TensorSpec(t.shape, t.dtype, name=n) for t, n in zip(inputs, input_names)]
    # model.inputs is the flattened input structure (a dict's keys sorted):
    # rebuild the structure the model was built with before calling it
    structure = getattr(model, "_inputs_struct", None)

    def predict(flat):
        if structure is not None:
            args = tree.pack_sequence_as(structure, flat)
        else:
            args = flat[0] if len(flat) == 1 else flat
        return model(args, training=False)

    @tf.function(input_signature=specs)
    def serving_default(*flat):
        return dict(zip(output_names, tree.flatten(predict(list(flat)))))

    @tf.function(input_signature=specs)
    def serve(*flat):
        return predict(list(flat))

    root = tf.Module()
    root.model = model  # tracks every variable and resource (lookup tables) the model uses
    root.serve = serve
    tf.saved_model.save(root, target, signatures={"serving_default": serving_default})


def disable_auto_shard(options):
    """Turn off tf.data auto-sharding on ``options`` (a tf.data.Options): fed
    data is already split between the workers."""
    import tensorflow as tf
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF


def is_gpu_available():
    """True when TensorFlow sees a GPU."""
    import tensorflow as tf
    return len(tf.config.list_physical_devices("GPU")) > 0
