"""Which optional part of tfos needs which packages, and the check that fails
at once, on the driver, naming the ``pip install 'tfos[...]'`` that is missing.

The extras are declared in pyproject.toml; this table maps each to the modules
its distributions provide (tests/python/test_packaging.py keeps the two in
step). A launcher calls :func:`require` before it forms a cluster, so a missing
package is an ImportError on the driver, not a ModuleNotFoundError on an
executor after the cluster has formed and restarted.
"""
import importlib.util
import sys

#: extra -> the top-level modules its distributions install
EXTRAS = {
    "spark": ("pyspark", "pyarrow", "pandas", "cloudpickle"),
    "connect": ("pyspark", "pyarrow", "pandas", "cloudpickle"),  # pyspark[connect]: Spark Connect's client too
    "tf": ("tensorflow", "tensorboard", "tf_keras"),
    "tf-cpu": ("tensorflow", "tensorboard"),
    "torch": ("torch",),
    "jax": ("jax",),
    "hdfs": ("fsspec", "requests"),
    "serve": (),
    "mlflow": ("mlflow",),  # mlflow-skinny
}
#: modules of tfos's own dependencies (``pip install tfos`` brings them)
CORE = ("numpy",)


class MissingDependency(ModuleNotFoundError):
    """A package that a tfos feature needs is not installed. ``modules`` are
    the missing modules, ``extras`` the extras that bring them (empty when
    they are tfos's own dependencies) and ``command`` the pip command."""

    def __init__(self, feature, modules, extras):
        self.feature = feature
        self.modules = tuple(modules)
        self.extras = tuple(extras)
        self.command = "pip install 'tfos[%s]'" % ",".join(extras) if extras else "pip install tfos"
        super().__init__("%s needs %s, not installed for %s: %s" % (
            feature, ", ".join(self.modules), sys.executable, self.command), name=self.modules[0])


def extra_of(module):
    """The extra that brings ``module`` (None for tfos's own dependencies).
    Raises KeyError for a module no extra declares."""
    if module in CORE:
        return None
    for extra, modules in EXTRAS.items():
        if module in modules:
            return extra
    raise KeyError("no tfos extra provides %r" % module)


def missing(*modules):
    """The modules among ``modules`` that cannot be imported here (found
    without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(feature, *modules, extra=None):
    """Raise :class:`MissingDependency` naming ``feature``, the missing
    modules and the pip command that installs them, unless every one of
    ``modules`` can be imported. ``extra``: the extra to name for the
    missing modules it brings, where more than one extra brings them (a
    Spark Connect client needs ``connect``, not ``spark``)."""
    absent = missing(*modules)
    if absent:
        hinted = EXTRAS.get(extra, ())
        extras = sorted({extra if m in hinted else extra_of(m) for m in absent} - {None})
        raise MissingDependency(feature, absent, extras)


def spark_extra(spark):
    """The extra a launcher on the SparkSession ``spark`` needs: ``connect``
    for a Spark Connect session, else ``spark``."""
    return "connect" if type(spark).__module__.startswith("pyspark.sql.connect") else "spark"


def has_extra(extra):
    """Whether every module of ``extra`` can be imported here."""
    return not missing(*EXTRAS[extra])
