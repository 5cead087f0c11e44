"""Keras 3 objects that a map_fun takes from the driver (issue 34, item 3):
with the nodes on tf-keras (keras="auto"/"legacy"), classes, functions and
the tf.keras module travel by their public name and are looked up in the
node's tf.keras; a Keras 3 instance made on the driver is refused before
the cluster starts, naming it and the fixes. The node side under tf-keras
runs in tests/spark/test_tfos_pipeline_keras.py."""
import pickle
import sys

import cloudpickle
import pytest

from tfos import _payload

keras = pytest.importorskip("keras")
if int(keras.__version__.split(".")[0]) < 3:
    pytest.skip("Keras 3 is not this Python's keras", allow_module_level=True)

from keras.models import Sequential  # noqa: E402  (as a TFoS module imports it: at its top)
from keras.layers import Dense  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # map_fun by value, as a driver's __main__


def map_fun(args, ctx):
    return Sequential, Dense, keras.activations.relu


def test_keras3_classes_travel_by_public_name():
    assert _payload._keras_reduce(Sequential) == (_payload._node_keras, (["keras.models.Sequential",
                                                                          "keras.Sequential"],))
    assert _payload._keras_reduce(Dense)[1][0][0] == "keras.layers.Dense"
    assert _payload._keras_reduce(pickle) is None and _payload._keras_reduce(map_fun) is None
    data = _payload.dumps((map_fun, {}), keras="auto")
    assert b"_node_keras" in data and b"keras.src.models" not in data
    fn, _ = pickle.loads(data)   # here tf.keras is Keras 3: the same classes come back
    import tensorflow as tf
    assert fn(None, None)[:2] == (tf.keras.models.Sequential, tf.keras.layers.Dense)
    # keras="3" or "env": by reference, as before
    assert b"keras.src.models" in _payload.dumps((map_fun, {}), keras="3")


def test_keras3_instance_from_the_driver_is_refused():
    opt = keras.optimizers.Adam(learning_rate=0.2)

    def fn(args, ctx):
        return opt

    with pytest.raises(_payload.KerasMismatch, match="an instance of keras.src.optimizers.adam.Adam made on the "
                                                     "driver with Keras 3.*TF_USE_LEGACY_KERAS=1.*keras='3'"):
        _payload.dumps((fn, {}), keras="auto")
    assert _payload.dumps((fn, {}), keras="3")


_LR = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
if sys.argv[1] == "install":
    from tfos import _tfkeras
    _tfkeras.install()
import tensorflow as tf
o = tf.keras.optimizers
print([round(float(x.learning_rate), 4) for x in
       (o.Adam(lr=0.2), o.SGD(lr=0.3), o.Adam(lr=0.2, learning_rate=0.05), o.Adam(), o.SGD())])
"""


def test_tf_keras_nodes_take_tfos_lr_again():
    """TFoS programs compile with Adam(lr=0.2); tf-keras drops lr (0.001).
    On tf-keras nodes, _sparkprog installs tfos._tfkeras: lr is the rate
    again where learning_rate is not given. Without it: the defaults."""
    import os
    import subprocess
    import sys
    pytest.importorskip("tf_keras")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", _LR, "install"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[0.2, 0.3, 0.05, 0.001, 0.01]", out.stderr[-2000:]
