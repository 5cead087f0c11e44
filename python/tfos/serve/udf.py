"""tfos.serve.predict_udf: a Spark UDF scoring a DataFrame's columns with a
model of a ``tfos serve``, over its local socket on the server's host (a
:class:`~tfos.serve.client.Client` kept per worker process), else over HTTP."""
import os

from ._common import _DEFAULT_URL, _DEFAULTS, _NUMPY, ServeError, _np
from .client import Client

# numpy's type -> Spark's; an unsigned type goes into the signed type twice
# its width (at most 64 bits), and Spark's types back to numpy's
_SPARK = {"bool": "BooleanType", "int8": "ByteType", "int16": "ShortType", "int32": "IntegerType",
          "int64": "LongType", "float32": "FloatType", "float64": "DoubleType"}
_SPARK_NUMPY = {v: k for k, v in _SPARK.items()}

_clients: dict = {}


def _client(url, token, local, timeout):
    """One client per (url, token, local) in a Spark worker process, kept
    across batches and tasks."""
    key = (url, token, local)
    c = _clients.get(key)
    if c is None:
        c = _clients[key] = Client(url, token, local, timeout)
    return c


def _spark_type(spec):
    from pyspark.sql import types as T
    name = _NUMPY[spec["datatype"]]
    if name.startswith("uint"):
        name = "int%d" % min(2 * int(name[4:]), 64)
    elem = getattr(T, _SPARK[name])()
    return elem if len(spec["shape"]) == 1 else T.ArrayType(elem, containsNull=False)


def predict_udf(model, url=None, version=None, token=None, local=True, batch_rows=1024,
                timeout=_DEFAULTS["serve_client_timeout"]):
    """A Spark UDF (an Arrow UDF on Spark 4.1 and later, else a pandas UDF)
    that scores rows with the model ``model`` of the
    ``tfos serve`` at ``url`` (default ``$TFOS_SERVE_URL``, else
    http://127.0.0.1:8500), as Spark's ``predict_batch_udf`` does with a model
    it loads in every task::

        pred = predict_udf("digits")
        df.withColumn("probs", pred(*feature_cols))

    Columns map to the model's inputs (``GET /v2/models/NAME``, names in
    order): one column per input, a column of arrays for an input with a
    per-row shape; or, for a model with one input of shape [-1, k], k number
    columns stacked into it. Values are cast to the input's datatype. The
    result is one value per row, in order: the output (an array for a per-row
    shape), or a struct of the outputs when there are several.

    On an executor on the server's host the rows go over its local socket as
    columnar batches (``local=True``), elsewhere over HTTP (the Open Inference
    Protocol). On Spark 4.1 and later the UDF takes Spark's Arrow batches as
    they are: a number column is its Arrow buffer, a column of equal-length
    arrays a matrix over its values buffer (no pandas, no per-row objects);
    an output with a per-row shape comes back as one array a row, the row's
    values flattened. ``batch_rows`` rows per request (a Spark Arrow batch is cut so;
    the server batches requests of all tasks together). The model's metadata
    is read here, on the driver, so a model not served fails now, naming
    it."""
    from .._extras import require
    # the README's promise: a missing package names the pip command (issue 36)
    require("tfos.serve.predict_udf", "pyspark", "pyarrow", extra="spark")
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    url = (url or os.environ.get("TFOS_SERVE_URL") or _DEFAULT_URL).rstrip("/")
    token = token if token is not None else os.environ.get("TFOS_SERVE_TOKEN") or ""
    probe = Client(url, token, local=False, timeout=timeout)
    try:
        meta = probe.metadata(model)
    finally:
        probe.close()
    inputs, outputs = meta["inputs"], meta["outputs"]
    if len(outputs) == 1:
        rtype = _spark_type(outputs[0])
    else:
        rtype = T.StructType([T.StructField(o["name"], _spark_type(o)) for o in outputs])
    batch_rows = int(batch_rows)

    def to_inputs(arrays):
        np = _np()
        if len(arrays) == len(inputs):
            pairs = zip(inputs, arrays)
        elif len(inputs) == 1 and all(a.ndim == 1 for a in arrays):
            pairs = [(inputs[0], np.stack(arrays, axis=1))]
        else:
            raise ServeError("model %s takes %d inputs (%s); predict_udf got %d columns"
                             % (model, len(inputs), ", ".join(i["name"] for i in inputs), len(arrays)))
        return {spec["name"]: np.ascontiguousarray(a, dtype=_NUMPY[spec["datatype"]]) for spec, a in pairs}

    def score(arrays, n):
        """{output: array of n rows} for the columns' arrays."""
        x = to_inputs(arrays)
        chunks = [{k: v[lo:lo + batch_rows] for k, v in x.items()} for lo in range(0, n, batch_rows)]
        try:
            answers = _client(url, token, local, timeout).infer_batches(model, chunks, version)
        except (OSError, ServeError) as exc:
            # a connection kept from an earlier task may be stale (the server
            # restarted): once more on a new one
            stale = _clients.pop((url, token, local), None)
            if stale is not None:
                stale.close()
            if isinstance(exc, ServeError) and exc.status is not None and 400 <= exc.status < 500:
                raise  # the request itself was refused: again would not help
            answers = _client(url, token, local, timeout).infer_batches(model, chunks, version)
        np = _np()
        return {o["name"]: np.concatenate([a[1][o["name"]] for a in answers]) for o in outputs}

    arrow_udf = getattr(F, "arrow_udf", None)  # Spark 4.1 and later
    if arrow_udf is not None:
        def predict_arrow(*cols):
            import pyarrow as pa
            n = len(cols[0])
            if n == 0:
                return pa.array([], type=_arrow_type(rtype))
            outs = score([_arrow_to_numpy(c, i) for i, c in enumerate(cols)], n)
            if len(outputs) == 1:
                return _numpy_to_arrow(outs[outputs[0]["name"]], rtype)
            return pa.StructArray.from_arrays([_numpy_to_arrow(outs[f.name], f.dataType) for f in rtype.fields],
                                              names=[f.name for f in rtype.fields])
        return arrow_udf(predict_arrow, rtype)

    def predict(*cols):
        import pandas as pd
        np = _np()
        n = len(cols[0])
        if n == 0:
            return pd.Series([], dtype=object) if len(outputs) == 1 else pd.DataFrame()
        arrays = []
        for c in cols:
            first = c.iloc[0] if len(c) else None
            arrays.append(np.stack(c.to_numpy()) if isinstance(first, (list, tuple, np.ndarray)) else c.to_numpy())
        outs = score(arrays, n)

        def column(o):
            a = outs[o["name"]]
            return pd.Series(list(a)) if a.ndim > 1 else pd.Series(a)
        if len(outputs) == 1:
            return column(outputs[0])
        return pd.DataFrame({o["name"]: column(o) for o in outputs})

    return F.pandas_udf(predict, rtype)


def _arrow_to_numpy(col, i):
    """A Spark Arrow column as a numpy array with the rows on axis 0: the
    feed's one Arrow conversion (tfos.feed.arrow_to_numpy), strict: a model
    takes numbers, so a null, a ragged row or arrays of text are refused,
    naming the column, the row and the fix."""
    from ..feed import ColumnError, arrow_to_numpy
    try:
        return arrow_to_numpy(col, i, strict=True)
    except ColumnError as exc:
        raise ServeError("predict_udf: %s" % exc) from exc


def _arrow_type(spark_type):
    import pyarrow as pa
    from pyspark.sql import types as T
    if isinstance(spark_type, T.StructType):
        return pa.struct([(f.name, _arrow_type(f.dataType)) for f in spark_type.fields])
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(_arrow_type(spark_type.elementType))
    return pa.from_numpy_dtype(_np().dtype(_SPARK_NUMPY[type(spark_type).__name__]))


def _numpy_to_arrow(a, spark_type):
    """An output's rows as the Arrow array of ``spark_type``: numbers, or
    one array a row (the row's values, flattened) over the output's buffer."""
    import pyarrow as pa
    from pyspark.sql import types as T
    np = _np()
    if isinstance(spark_type, T.ArrayType):
        n = a.shape[0]
        flat = np.ascontiguousarray(a.reshape(n, -1).astype(_SPARK_NUMPY[type(spark_type.elementType).__name__],
                                                             copy=False))
        k = flat.shape[1]
        offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(flat.ravel()))
    return pa.array(a.astype(_SPARK_NUMPY[type(spark_type).__name__], copy=False))
