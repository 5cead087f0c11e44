"""TensorFlowOnSpark's Spark ML pipeline API: ``TFEstimator`` trains through
a tfos cluster and returns a ``TFModel``, whose ``transform`` runs batch
inference with a SavedModel on the executors.

- ``TFEstimator(train_fn, tf_args).fit(df)`` forms a cluster of
  ``cluster_size`` nodes (``TFCluster.run``) running ``train_fn(args, ctx)``,
  where ``args`` is ``tf_args`` merged with the estimator's params; with
  InputMode.SPARK it feeds ``df``'s input-mapping columns (in name order) to
  the nodes through Arrow (``cluster.train(df)``), ``epochs`` times; with
  InputMode.TENSORFLOW it writes them as TFRecords to ``tfrecord_dir``
  (unless ``df`` came from ``dfutil.loadTFRecords``: then ``args.tfrecord_dir``
  is where it was loaded from) for ``train_fn`` to read. A failing node fails
  ``fit`` with its traceback.
- ``TFModel.transform(df)`` loads ``export_dir`` (tags ``tag_set``, signature
  ``signature_def_key``, default ``serving_default``) once per Python worker
  (kept for the next partitions and jobs while the SavedModel and its
  settings are the same), feeds the input-mapping columns by ``mapInArrow``
  in batches of ``batch_size`` as numpy arrays (reshaped to the signature's
  shapes, as TFoS did), and returns a DataFrame of the output-mapping
  columns (in output-tensor name order), one row per input row: a count
  mismatch is an error, never a hang.
- Both are Spark ML stages: they work inside ``pyspark.ml.Pipeline``, and a
  fitted ``TFModel`` (or a ``PipelineModel`` holding one) saves and loads
  as Spark ML stages do (params as JSON, ``tf_args`` beside them).
"""
import argparse
import copy
import json

from pyspark.ml.param.shared import Param, Params, TypeConverters
from pyspark.ml.pipeline import Estimator, Model
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable

from . import TFCluster, dfutil

__all__ = ["TFTypeConverters", "HasBatchSize", "HasClusterSize", "HasEpochs", "HasGraceSecs", "HasInputMapping",
           "HasInputMode", "HasMasterNode", "HasModelDir", "HasNumPS", "HasOutputMapping", "HasProtocol",
           "HasReaders", "HasSteps", "HasTensorboard", "HasTFRecordDir", "HasExportDir", "HasSignatureDefKey",
           "HasTagSet", "Namespace", "TFParams", "TFEstimator", "TFModel"]


class TFTypeConverters(object):
    """Type converters Spark does not provide."""

    @staticmethod
    def toDict(value):
        if isinstance(value, dict):
            return value
        raise TypeError("could not convert %r to a dict" % (value,))


def _mixin(class_name, param, doc, converter, suffix, extra=None):
    """A Params mixin with one Param and its ``set<suffix>``/``get<suffix>``."""
    def setter(self, value):
        return self._set(**{param: value})

    def getter(self):
        return self.getOrDefault(getattr(self, param))

    body = {param: Param(Params._dummy(), param, doc, typeConverter=converter),
            "set" + suffix: setter, "get" + suffix: getter, "__module__": __name__,
            "__doc__": "Params mixin: ``%s`` (%s)." % (param, doc)}
    body.update(extra or {})
    return type(class_name, (Params,), body)


HasBatchSize = _mixin("HasBatchSize", "batch_size", "Number of records per batch", TypeConverters.toInt, "BatchSize")
HasClusterSize = _mixin("HasClusterSize", "cluster_size", "Number of nodes in the cluster", TypeConverters.toInt,
                        "ClusterSize")
HasEpochs = _mixin("HasEpochs", "epochs", "Number of epochs to train", TypeConverters.toInt, "Epochs")
HasGraceSecs = _mixin("HasGraceSecs", "grace_secs", "Seconds to wait after feeding data (final tasks such as an "
                      "export)", TypeConverters.toInt, "GraceSecs")
HasInputMapping = _mixin("HasInputMapping", "input_mapping", "Mapping of input DataFrame column to input tensor",
                         TFTypeConverters.toDict, "InputMapping")
HasInputMode = _mixin("HasInputMode", "input_mode", "Input data feeding mode (0=TENSORFLOW, 1=SPARK)",
                      TypeConverters.toInt, "InputMode")
HasMasterNode = _mixin("HasMasterNode", "master_node", "Job name of the master/chief worker node",
                       TypeConverters.toString, "MasterNode")
HasModelDir = _mixin("HasModelDir", "model_dir", "Path to save/load model checkpoints", TypeConverters.toString,
                     "ModelDir")


def _set_driver_ps_nodes(self, value):
    return self._set(driver_ps_nodes=value)


def _get_driver_ps_nodes(self):
    return self.getOrDefault(self.driver_ps_nodes)


HasNumPS = _mixin("HasNumPS", "num_ps", "Number of PS nodes in the cluster", TypeConverters.toInt, "NumPS", {
    "driver_ps_nodes": Param(Params._dummy(), "driver_ps_nodes", "Run the PS nodes on the driver",
                             typeConverter=TypeConverters.toBoolean),
    "setDriverPSNodes": _set_driver_ps_nodes, "getDriverPSNodes": _get_driver_ps_nodes})
HasOutputMapping = _mixin("HasOutputMapping", "output_mapping", "Mapping of output tensor to output DataFrame column",
                          TFTypeConverters.toDict, "OutputMapping")
HasProtocol = _mixin("HasProtocol", "protocol", "Network protocol for TensorFlow (grpc|rdma)",
                     TypeConverters.toString, "Protocol")
HasReaders = _mixin("HasReaders", "readers", "Number of reader/enqueue threads", TypeConverters.toInt, "Readers")
HasSteps = _mixin("HasSteps", "steps", "Maximum number of steps to train", TypeConverters.toInt, "Steps")
HasTensorboard = _mixin("HasTensorboard", "tensorboard", "Launch TensorBoard", TypeConverters.toBoolean,
                        "Tensorboard")
HasTFRecordDir = _mixin("HasTFRecordDir", "tfrecord_dir", "Path to write a DataFrame as TFRecords (for "
                        "InputMode.TENSORFLOW)", TypeConverters.toString, "TFRecordDir")
HasExportDir = _mixin("HasExportDir", "export_dir", "Directory of the SavedModel", TypeConverters.toString,
                      "ExportDir")
HasSignatureDefKey = _mixin("HasSignatureDefKey", "signature_def_key", "Signature of the SavedModel to run",
                            TypeConverters.toString, "SignatureDefKey")
HasTagSet = _mixin("HasTagSet", "tag_set", "Comma-separated tags of the SavedModel's meta graph",
                   TypeConverters.toString, "TagSet")


class Namespace(object):
    """``tf_args`` as an object: a dict's items (or an argparse.Namespace's,
    or another Namespace's) become attributes; a list is kept as ``argv``
    (the program's command line)."""
    argv = None

    def __init__(self, d):
        if isinstance(d, list):
            self.argv = d
        elif isinstance(d, dict):
            self.__dict__.update(d)
        elif isinstance(d, (argparse.Namespace, Namespace)):
            self.__dict__.update(vars(d))
        else:
            raise TypeError("tf_args must be a dict, a list, an argparse.Namespace or a Namespace; got %r" % (d,))

    def __iter__(self):
        return iter(self.argv) if self.argv else iter(list(self.__dict__.keys()))

    def __contains__(self, key):
        return key in (self.argv or self.__dict__)

    def __repr__(self):
        if self.argv:
            return repr(self.argv)
        return "Namespace(%s)" % ", ".join("%s=%r" % (k, self.__dict__[k]) for k in sorted(self.__dict__))

    def __eq__(self, other):
        if self.argv:
            return self.argv == other
        return isinstance(other, Namespace) and self.__dict__ == other.__dict__

    __hash__ = None


class TFParams(Params):
    """The ``tf_args`` of a stage, merged with its params."""
    args = None

    def merge_args_params(self):
        """A copy of ``args`` with every param (set or default) as an attribute."""
        merged = copy.copy(self.args)
        values = vars(merged)
        for p in self.params:
            values[p.name] = self.getOrDefault(p)
        return merged



class TFEstimator(Estimator, TFParams, HasInputMapping, HasClusterSize, HasNumPS, HasInputMode, HasMasterNode,
                  HasProtocol, HasGraceSecs, HasTensorboard, HasModelDir, HasExportDir, HasTFRecordDir,
                  HasBatchSize, HasEpochs, HasReaders, HasSteps):
    """Trains ``train_fn(args, ctx)`` on a tfos cluster (see the module).
    ``export_fn`` is refused, as under TensorFlowOnSpark 2.x: export from
    ``train_fn`` (``compat.export_saved_model(model, args.export_dir,
    is_chief)``)."""
    train_fn = None
    export_fn = None

    def __init__(self, train_fn, tf_args, export_fn=None):
        super(TFEstimator, self).__init__()
        self.train_fn = train_fn
        self.export_fn = export_fn
        self.args = Namespace(tf_args)
        self._setDefault(input_mapping={}, cluster_size=1, num_ps=0, driver_ps_nodes=False,
                         input_mode=TFCluster.InputMode.SPARK, master_node="chief", protocol="grpc",
                         tensorboard=False, model_dir=None, export_dir=None, tfrecord_dir=None, batch_size=100,
                         epochs=1, readers=1, steps=1000, grace_secs=30)

    def _fit(self, dataset):
        if self.export_fn is not None:
            raise ValueError("TFEstimator(export_fn=...) is for TensorFlow 1 (TensorFlowOnSpark 2.x refused it "
                             "too, after training): export from train_fn with tfos.compat.export_saved_model")
        sc = dataset.sparkSession.sparkContext
        args = self.merge_args_params()
        input_cols = sorted(self.getInputMapping())
        if not input_cols:
            raise ValueError("TFEstimator needs an input mapping (setInputMapping({column: tensor}))")
        data = dataset.select(input_cols)
        mode = args.input_mode
        if mode == TFCluster.InputMode.TENSORFLOW:
            if dfutil.isLoadedDF(dataset):
                args.tfrecord_dir = dfutil.loadedDF[dataset]
            else:
                if not args.tfrecord_dir:
                    raise ValueError("InputMode.TENSORFLOW needs setTFRecordDir(dir): fit writes the DataFrame "
                                     "there as TFRecords for train_fn to read")
                dfutil.saveAsTFRecords(data, args.tfrecord_dir)
        tf_args = args.argv if args.argv else args
        cluster = TFCluster.run(sc, self.train_fn, tf_args, args.cluster_size, args.num_ps, args.tensorboard, mode,
                                master_node=args.master_node, driver_ps_nodes=args.driver_ps_nodes)
        try:
            if mode == TFCluster.InputMode.SPARK:
                cluster.train(data, args.epochs)
        except BaseException:
            try:                # the node's error is the one to raise, not "already shut down"
                cluster.shutdown(grace_secs=0)
            except Exception:
                pass
            raise
        cluster.shutdown(grace_secs=self.getGraceSecs())
        return self._copyValues(TFModel(self.args))


# ---- inference on the executors ----------------------------------------------------

_loaded = {}        # (export_dir, tag_set, signature) -> (model, signature fn), per Python worker


def _signature(export_dir, tag_set, key):
    cache_key = (export_dir, tag_set, key)
    if cache_key not in _loaded:
        import tensorflow as tf
        tags = tag_set.split(",") if tag_set else None
        model = tf.saved_model.load(export_dir, tags=tags)
        sig = key or "serving_default"
        if sig not in model.signatures:
            raise ValueError("the SavedModel at %s has no signature %r (it has: %s)"
                             % (export_dir, sig, ", ".join(sorted(model.signatures)) or "none"))
        _loaded.clear()          # one model per worker: a new one replaces the old
        _loaded[cache_key] = (model, model.signatures[sig])
    return _loaded[cache_key][1]


def _spark_type(dtype, rank):
    """The Spark SQL type of an output tensor of ``dtype`` and rank."""
    from pyspark.sql import types as T
    base = {"float32": T.FloatType(), "float64": T.DoubleType(), "int32": T.IntegerType(), "int64": T.LongType(),
            "bool": T.BooleanType(), "string": T.StringType(), "float16": T.FloatType(), "int8": T.IntegerType(),
            "int16": T.IntegerType(), "uint8": T.IntegerType()}.get(dtype)
    if base is None:
        raise ValueError("an output tensor of type %s has no Spark column type" % dtype)
    for _ in range(max(0, rank - 1)):
        base = T.ArrayType(base)
    return base


def _column(np, values):
    """An Arrow array of ``values`` (numpy, first axis the rows)."""
    import pyarrow as pa
    if values.dtype == object:
        values = np.array([v.decode("utf-8") if isinstance(v, bytes) else v for v in values.tolist()], dtype=object)
        return pa.array(values.tolist(), type=pa.string())
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    if values.ndim <= 1:
        return pa.array(values.reshape(-1))
    inner = _column(np, values.reshape((-1,) + values.shape[2:]))
    offsets = np.arange(0, values.shape[0] * values.shape[1] + 1, values.shape[1], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def _predict_batches(batches, args, input_cols, input_tensors, output_tensors, output_cols):
    import numpy as np
    import pyarrow as pa
    import tensorflow as tf
    from .feed.codec import _is_list, arrow_to_numpy
    pred_fn = _signature(args["export_dir"], args["tag_set"], args["signature_def_key"])
    specs = pred_fn.structured_input_signature[1]
    for batch in batches:
        n = batch.num_rows
        inputs = {}
        for col, name in zip(input_cols, input_tensors):
            spec = specs[name]
            arr = batch.column(batch.schema.get_field_index(col))
            # the feed's one Arrow conversion; arrays must make a matrix
            # (a ragged or null one is refused naming the column and row)
            values = np.asarray(arrow_to_numpy(arr, col, strict=_is_list(arr.type)))
            tensor = tf.constant(values, dtype=spec.dtype)
            shape = [n] + [d if d is not None else -1 for d in spec.shape.as_list()[1:]]
            if tensor.shape.as_list() != shape:
                tensor = tf.reshape(tensor, shape)
            inputs[name] = tensor
        outputs = pred_fn(**inputs)
        cols = []
        for name in output_tensors:
            values = outputs[name].numpy()
            if values.shape[0] != n:
                raise ValueError("the output %r has %d rows for a batch of %d input rows: TFModel needs one "
                                 "output per input row" % (name, values.shape[0], n))
            cols.append(_column(np, values))
        yield pa.RecordBatch.from_arrays(cols, names=output_cols)


class TFModel(Model, TFParams, HasInputMapping, HasOutputMapping, HasBatchSize, HasModelDir, HasExportDir,
              HasSignatureDefKey, HasTagSet, MLWritable, MLReadable):
    """Batch inference with a SavedModel (see the module). ``tf_args`` may
    be left out only by the loader."""

    def __init__(self, tf_args=None):
        super(TFModel, self).__init__()
        self.args = Namespace(tf_args if tf_args is not None else {})
        self._setDefault(input_mapping={}, output_mapping={}, batch_size=100, model_dir=None, export_dir=None,
                         signature_def_key=None, tag_set=None)

    def _transform(self, dataset):
        from pyspark.sql.types import StructField, StructType
        args = self.merge_args_params()
        if not args.export_dir:
            raise ValueError("TFModel needs setExportDir(the SavedModel's directory)")
        in_pairs = sorted(self.getInputMapping().items())      # column -> input tensor
        out_pairs = sorted(self.getOutputMapping().items())    # output tensor -> column
        if not in_pairs or not out_pairs:
            raise ValueError("TFModel needs setInputMapping({column: tensor}) and setOutputMapping({tensor: column})")
        input_cols, input_tensors = [c for c, _ in in_pairs], [t for _, t in in_pairs]
        output_tensors, output_cols = [t for t, _ in out_pairs], [c for _, c in out_pairs]
        # the output schema from the signature, read here on the driver
        pred_fn = _signature(args.export_dir, args.tag_set, args.signature_def_key)
        missing = [t for t in input_tensors if t not in pred_fn.structured_input_signature[1]]
        outs = pred_fn.structured_outputs
        missing += [t for t in output_tensors if t not in outs]
        if missing:
            raise ValueError("the signature of %s has no tensor %s (inputs: %s; outputs: %s)"
                             % (args.export_dir, ", ".join(missing), sorted(pred_fn.structured_input_signature[1]),
                                sorted(outs)))
        schema = StructType([StructField(c, _spark_type(outs[t].dtype.name, outs[t].shape.rank), True)
                             for t, c in zip(output_tensors, output_cols)])
        settings = {"export_dir": args.export_dir, "tag_set": args.tag_set,
                    "signature_def_key": args.signature_def_key}
        batch_size = max(1, int(args.batch_size))

        def predict(batches):
            def rebatch():
                for b in batches:
                    for start in range(0, b.num_rows, batch_size):
                        yield b.slice(start, batch_size)
            return _predict_batches(rebatch(), settings, input_cols, input_tensors, output_tensors, output_cols)

        return dataset.select(input_cols).mapInArrow(predict, schema)

    # -- persistence: params as JSON (Spark ML's metadata), tf_args beside them
    def write(self):
        return _TFModelWriter(self)

    @classmethod
    def read(cls):
        return _TFModelReader(cls)


class _TFModelWriter(DefaultParamsWriter):
    def saveImpl(self, path):
        args = self.instance.args
        saved = {"argv": args.argv} if args.argv else {"dict": dict(vars(args))}
        try:
            json.dumps(saved)
        except TypeError as exc:
            raise ValueError("TFModel.save: tf_args must be JSON-serializable to be saved (%s)" % exc)
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sc, extraMetadata={"tf_args": saved})


class _TFModelReader(MLReader):
    def __init__(self, cls):
        super(_TFModelReader, self).__init__()
        self.cls = cls

    def load(self, path):
        metadata = DefaultParamsReader.loadMetadata(path, self.sc)
        saved = metadata.get("tf_args") or {"dict": {}}
        model = self.cls(saved["argv"] if "argv" in saved else saved["dict"])
        model._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(model, metadata)
        return model
