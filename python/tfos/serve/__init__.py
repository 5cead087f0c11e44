"""tfos.serve: clients of ``tfos serve``, and its model server (docs/SERVING.md).

For Spark jobs, :func:`predict_udf` scores a DataFrame's columns with a
served model; :class:`Client` is the same from any Python program. On the
server's host both skip HTTP: they send tfos's columnar batches over the
front end's local socket. Elsewhere they speak the Open Inference Protocol
over HTTP.

The model server: ``tfos serve --model NAME=DIR`` runs ``python -m
tfos.serve --model NAME=DIR`` on each of its nodes (tfos.serve.server):
it loads the models once, dials the front end and runs the batches it is
sent. A model is a TensorFlow SavedModel (``serving_default``), a directory
of numbered versions of one, or, through ``--loader NAME=MODULE:FUNCTION``,
any :class:`Model` a user's function returns.

The package's parts: ``server`` (the model server), ``client``
(:class:`Client`), ``udf`` (:func:`predict_udf`); the names below are
re-exported here, where they have always been imported from.
"""
from ._common import ServeError
from .client import Client
from .server import Model, main, serve, versions_in
from .udf import predict_udf

__all__ = ["Client", "Model", "ServeError", "predict_udf", "versions_in"]
