"""tf-keras taking TensorFlowOnSpark's ``lr=`` again, in TFCluster's nodes.

TFoS programs (and TFoS 2.2.5's own tests) compile with
``tf.keras.optimizers.Adam(lr=0.2)``: Keras 2 up to TensorFlow 2.10 took
``lr`` for ``learning_rate``. tf-keras's optimizers since then drop it with
a warning and train at their default rate (0.001), so such a program
trains, slowly, and its results are off with nothing failing. On nodes
whose ``tf.keras`` is tf-keras (``TFCluster.run(keras="auto"|"legacy")``),
:func:`install` makes ``lr`` mean ``learning_rate`` again where
``learning_rate`` is not given, as tf-keras's own legacy optimizers do.

It patches two methods of tf-keras's optimizer base class, when that module
is first imported (an import hook: nothing is imported for programs that do
not use tf-keras): ``_process_kwargs`` keeps the ``lr`` it drops, and
``_build_learning_rate``, which every optimizer's ``__init__`` calls after
it, uses that ``lr`` in place of the default.
"""
import importlib.abc
import importlib.util
import sys

_MODULE = "tf_keras.src.optimizers.optimizer"


def _default_rate(cls):
    import inspect
    try:
        return inspect.signature(cls.__init__).parameters["learning_rate"].default
    except (KeyError, TypeError, ValueError):
        return None


def _patch(mod):
    base = getattr(mod, "_BaseOptimizer", None)
    if base is None or getattr(base, "_tfos_lr_alias", False):
        return
    process, build = base._process_kwargs, base._build_learning_rate

    def _process_kwargs(self, kwargs):
        lr = kwargs.get("lr")
        if lr is not None:
            self._tfos_lr = lr
        return process(self, kwargs)

    def _build_learning_rate(self, learning_rate):
        lr = self.__dict__.pop("_tfos_lr", None)
        # an optimizer built with lr= alone gets its class's default here;
        # an explicit learning_rate= beside lr= wins, as in Keras 2
        if lr is not None and learning_rate == _default_rate(type(self)):
            learning_rate = lr
        return build(self, learning_rate)

    base._process_kwargs = _process_kwargs
    base._build_learning_rate = _build_learning_rate
    base._tfos_lr_alias = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            try:
                _patch(module)
            except Exception:  # a tf-keras whose internals moved: left as it is
                pass

        loader.exec_module = exec_and_patch
        return spec


def install():
    """Make tf-keras's optimizers take ``lr`` (see the module's text)."""
    mod = sys.modules.get(_MODULE)
    if mod is not None:
        _patch(mod)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
