"""TensorFlowOnSpark's ``compat`` helpers, for TensorFlow 2.x / Keras 3."""
import tempfile

__all__ = ["export_saved_model", "disable_auto_shard", "is_gpu_available"]


def export_saved_model(model, export_dir, is_chief=False):
    """Export ``model`` as a TensorFlow SavedModel. Under
    MultiWorkerMirroredStrategy every worker must take part in the save; only
    the chief's copy goes to ``export_dir``, the others write to a temporary
    directory that is removed afterwards (TensorFlowOnSpark's contract)."""
    import tensorflow as tf
    target = export_dir if is_chief else tempfile.mkdtemp(prefix="tfos-export-")
    try:
        if hasattr(model, "export"):  # Keras 3: inference SavedModel
            model.export(target)
        else:
            tf.saved_model.save(model, target)
    finally:
        if not is_chief:
            import shutil
            shutil.rmtree(target, ignore_errors=True)
    return export_dir if is_chief else None


def disable_auto_shard(options):
    """Turn off tf.data auto-sharding on ``options`` (a tf.data.Options): fed
    data is already split between the workers."""
    import tensorflow as tf
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF


def is_gpu_available():
    """True when TensorFlow sees a GPU."""
    import tensorflow as tf
    return len(tf.config.list_physical_devices("GPU")) > 0
