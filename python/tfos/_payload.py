"""The payload a driver ships to its node programs: the user's function and
its arguments, pickled with cloudpickle (functions of ``__main__`` and
closures travel by value).

The standalone ``cloudpickle`` package (in tfos's ``spark`` extra) is used
where the driver has it, pyspark's bundled copy otherwise (and plain pickle
where there is neither: functions then travel by reference). A pickle made by
``pyspark.cloudpickle`` imports the whole pyspark package in the process
that loads it: 0.6-0.8 s of CPU in each node program before its function
runs, measured on the bench cluster (docs/BENCHMARKS.md, issue 16). Modules a
user registered with pyspark's copy (``register_pickle_by_value``) are
registered with the standalone one too, so they still travel by value.

Keras made on the driver (issue 34): a TensorFlowOnSpark module imports
``from tensorflow.keras.models import Sequential`` at its top, where the
driver's ``tf.keras`` is Keras 3, while its nodes run tf-keras
(``keras="auto"``). Pickled by reference, that ``Sequential`` would be Keras
3's on the nodes too, beside tf-keras's optimizers: "Could not interpret
optimizer identifier". With ``keras`` "auto" or "legacy", a Keras 3 class,
function or ``tf.keras`` module that map_fun carries travels by its public
name (``keras.models.Sequential``) and is looked up in the node's own
``tf.keras`` (:func:`_node_keras`): driver and nodes agree on the node's
Keras. A Keras 3 *instance* made on the driver (a model, an optimizer)
cannot change Keras: it is refused before the cluster starts
(:class:`KerasMismatch`), naming it and the fixes.
"""
import io
import pickle
import sys
import types


class KerasMismatch(ValueError):
    """map_fun carries a Keras 3 object that the nodes' tf-keras cannot take."""


def _node_keras(paths):
    """On a node: the object of ``tf.keras`` at the first of ``paths``
    (Keras 3 public names, "keras.models.Sequential") that it has."""
    import tensorflow as tf
    for path in paths:
        obj = tf.keras
        try:
            for part in path.split(".")[1:]:
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    raise ImportError("map_fun uses %s, made on the driver with Keras 3, and this node's tf.keras (%s) has none "
                      "of those names: import it inside map_fun, or pass TFCluster.run(..., keras='3')"
                      % (" / ".join(paths), getattr(tf.keras, "__name__", "?")))


def _keras3_paths(obj):
    """Keras 3's public names of a class or function of Keras 3, else None."""
    mod = getattr(obj, "__module__", None) or ""
    if mod != "keras" and not mod.startswith("keras."):
        return None
    paths = obj.__dict__.get("_api_export_path") if isinstance(obj, type) else \
        getattr(obj, "_api_export_path", None)
    if isinstance(paths, str):
        paths = [paths]
    # the longest first: keras.models.Sequential before keras.Sequential
    return sorted(paths, key=lambda p: -p.count(".")) if paths else []


_TF_KERAS_MODULE = "keras._tf_keras.keras"   # what the driver's Keras 3 tf.keras is


def _keras_reduce(obj):
    """The reduction of a Keras 3 object for a tf-keras node, None for any
    other object; raises KerasMismatch for what cannot be moved."""
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
        if name == _TF_KERAS_MODULE or name.startswith(_TF_KERAS_MODULE + "."):
            return _node_keras, (["keras" + name[len(_TF_KERAS_MODULE):]],)
        return None
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        paths = _keras3_paths(obj)
        if paths is None:
            return None
        if paths:
            return _node_keras, (paths,)
        what = "%s.%s (no public Keras name)" % (obj.__module__, getattr(obj, "__qualname__", obj))
    else:
        mod = type(obj).__module__ or ""
        if mod != "keras" and not mod.startswith("keras."):
            return None
        what = "an instance of %s.%s" % (mod, type(obj).__qualname__)
    raise KerasMismatch(
        "map_fun carries %s made on the driver with Keras 3, but its nodes run tf-keras (Keras 2: "
        "TFCluster.run's keras='auto' or 'legacy'), which cannot use it. Build it inside map_fun, or start the "
        "driver with TF_USE_LEGACY_KERAS=1 (so that its tf.keras is tf-keras too), or pass keras='3' to run "
        "Keras 3 on the nodes" % what)


def _keras3_on_driver():
    mod = sys.modules.get("keras")
    version = getattr(mod, "__version__", "") or ""
    return version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 3


def dumps(obj, keras=None):
    """``obj`` pickled for a node program (see the module's text); ``keras``:
    TFCluster.run's Keras mode of the nodes."""
    try:
        import cloudpickle
    except ImportError:
        try:
            from pyspark import cloudpickle
        except ImportError:  # neither: functions travel by reference
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return _dumps(cloudpickle, obj, keras)
    spark_cp = sys.modules.get("pyspark.cloudpickle")
    listed = getattr(spark_cp, "list_registry_pickle_by_value", None)
    own = cloudpickle.list_registry_pickle_by_value()
    for name in sorted(listed() if listed else ()):
        mod = sys.modules.get(name)
        if mod is not None and name not in own:
            cloudpickle.register_pickle_by_value(mod)
    return _dumps(cloudpickle, obj, keras)


def _dumps(cloudpickle, obj, keras):
    if keras not in ("auto", "legacy") or not _keras3_on_driver():
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, o):
            rv = _keras_reduce(o)
            return rv if rv is not None else super().reducer_override(o)

    buf = io.BytesIO()
    Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def loads(data, what):
    """The payload back, in a node program; ``what`` names it for the error
    when this Python lacks a module the pickle needs."""
    try:
        return pickle.loads(data)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "cloudpickle":
            raise ModuleNotFoundError(
                "%s was pickled by the driver with the cloudpickle package, which %s on this node does not have: "
                "pip install cloudpickle (tfos[spark] installs it) in the executors' Python" % (what, sys.executable),
                name=exc.name) from None
        raise
