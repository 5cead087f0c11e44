"""tfos.pipeline on the real Spark cluster: Pipeline([TFEstimator]).fit(df)
trains on a tfos cluster, transform(df) predicts every row as the exported
model does in-process, and the fitted pipeline saves and loads."""
import os
import sys

import pytest

from pyspark import cloudpickle
from pyspark.ml import Pipeline, PipelineModel

from tfos import pipeline
from tfos.TFCluster import InputMode, TFClusterError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train_fn(args, ctx):
    """Fit y = 3x - 1 from the fed rows; the chief exports."""
    import numpy as np
    import keras
    from tfos import compat
    feed = ctx.get_data_feed(train_mode=True, input_mapping=args.input_mapping)
    xs, ys = [], []
    while not feed.should_stop():
        batch = feed.next_batch(args.batch_size)
        if not batch or not batch["x"]:
            break
        xs.extend(batch["x"])
        ys.extend(batch["label"])
    assert args.extra == "kept" and args.epochs == 2
    inputs = keras.Input(shape=(1,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(1, name="y")(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(np.array(xs, dtype="float32").reshape(-1, 1), np.array(ys, dtype="float32"), epochs=3, verbose=0)
    compat.export_saved_model(model, args.export_dir, is_chief=ctx.job_name == "chief")


def failing_fn(args, ctx):
    raise RuntimeError("pipeline train_fn failed on purpose")


def _data(spark, n=120):
    rows = [(i / 10.0, 3 * (i / 10.0) - 1) for i in range(n)]
    return spark.createDataFrame(rows, "x double, label double").repartition(4)


def test_pipeline_fit_transform_save_load(spark, tmp_path):
    tf = pytest.importorskip("tensorflow")
    df = _data(spark).cache()
    export_dir = str(tmp_path / "export")
    est = pipeline.TFEstimator(train_fn, {"extra": "kept"}) \
        .setInputMapping({"x": "x", "label": "label"}).setClusterSize(2).setEpochs(2).setBatchSize(16) \
        .setExportDir(export_dir).setGraceSecs(0)
    assert est.getInputMode() == InputMode.SPARK and est.getMasterNode() == "chief"
    fitted = Pipeline(stages=[est]).fit(df)
    assert os.path.isdir(export_dir)
    (model,) = fitted.stages
    assert isinstance(model, pipeline.TFModel) and model.getExportDir() == export_dir
    model.setInputMapping({"x": "x"}).setOutputMapping({"y": "pred"}).setBatchSize(7)

    out = fitted.transform(df)
    assert out.columns == ["pred"]
    preds = [r.pred[0] for r in out.collect()]
    xs = [r.x for r in df.select("x").collect()]
    assert len(preds) == 120
    loaded = tf.saved_model.load(export_dir).signatures["serving_default"]
    want = loaded(x=tf.constant([[x] for x in xs], tf.float32))["y"].numpy().reshape(-1).tolist()
    # one prediction per row; compared as sorted lists, since a shuffled
    # DataFrame's row order is not fixed from one job to the next
    assert sorted(preds) == pytest.approx(sorted(want), rel=1e-5, abs=1e-5)

    path = str(tmp_path / "fitted")
    fitted.save(path)
    again = PipelineModel.load(path)
    (stage,) = again.stages
    assert isinstance(stage, pipeline.TFModel)
    assert stage.getOutputMapping() == {"y": "pred"} and stage.getBatchSize() == 7
    assert stage.args.extra == "kept"
    assert sorted(r.pred[0] for r in again.transform(df).collect()) == pytest.approx(sorted(want), rel=1e-5,
                                                                                       abs=1e-5)


def test_failing_train_fn_fails_fit_with_its_traceback(spark):
    est = pipeline.TFEstimator(failing_fn, {}).setInputMapping({"x": "x"}).setClusterSize(2).setGraceSecs(0)
    with pytest.raises(TFClusterError, match="pipeline train_fn failed on purpose"):
        est.fit(_data(spark, 20))


def test_namespace_and_params_as_tfos():
    ns = pipeline.Namespace({"a": 1})
    assert ns.a == 1 and "a" in ns and list(ns) == ["a"]
    argv = pipeline.Namespace(["--x", "1"])
    assert argv.argv == ["--x", "1"] and list(argv) == ["--x", "1"]
    assert pipeline.Namespace(ns) == ns
    est = pipeline.TFEstimator(train_fn, {"a": 1})
    merged = est.setSteps(5).setReaders(2).setTensorboard(True).merge_args_params()
    assert (merged.a, merged.steps, merged.readers, merged.tensorboard, merged.cluster_size) == (1, 5, 2, True, 1)
    assert est.args.__dict__ == {"a": 1}            # the args themselves untouched
    model = pipeline.TFModel({"a": 1}).setSignatureDefKey("serving_default").setTagSet("serve")
    assert (model.getSignatureDefKey(), model.getTagSet(), model.getBatchSize()) == ("serving_default", "serve", 100)
