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
"""
import pickle
import sys


def dumps(obj):
    """``obj`` pickled for a node program (see the module's text)."""
    try:
        import cloudpickle
    except ImportError:
        try:
            from pyspark import cloudpickle
        except ImportError:  # neither: functions travel by reference
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    spark_cp = sys.modules.get("pyspark.cloudpickle")
    listed = getattr(spark_cp, "list_registry_pickle_by_value", None)
    own = cloudpickle.list_registry_pickle_by_value()
    for name in sorted(listed() if listed else ()):
        mod = sys.modules.get(name)
        if mod is not None and name not in own:
            cloudpickle.register_pickle_by_value(mod)
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


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
