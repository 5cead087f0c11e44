"""TensorFlowOnSpark 2.2.5's public API, module by module, imported from
tfos: every name tfos provides is there, and its signature takes the same
arguments, in the same order, with the same defaults.

TFOS_225 is written down from reading TFoS 2.2.5's source (the signatures
exactly as there). tfos may add parameters after TFoS's (each with a
default) and may give a default where TFoS required an argument; it never
drops, renames, reorders or changes a default. The few deliberate
differences are listed, each with its reason, in DIFFERENT.
"""
import importlib
import inspect

import pytest

REQUIRED = object()     # a parameter with no default

# module -> {name: [(parameter, default or REQUIRED), ...]}; "Class.method"
# names the method (self left out); a value that is not a list is a constant.
TFOS_225 = {
    "TFCluster": {
        "run": [("sc", REQUIRED), ("map_fun", REQUIRED), ("tf_args", REQUIRED), ("num_executors", REQUIRED),
                ("num_ps", REQUIRED), ("tensorboard", False), ("input_mode", 0), ("log_dir", None),
                ("driver_ps_nodes", False), ("master_node", None), ("reservation_timeout", 600),
                ("queues", ["input", "output", "error"]), ("eval_node", False), ("release_port", True)],
        "InputMode.TENSORFLOW": 0,
        "InputMode.SPARK": 1,
        "TFCluster.train": [("dataRDD", REQUIRED), ("num_epochs", 0), ("feed_timeout", 600), ("qname", "input")],
        "TFCluster.inference": [("dataRDD", REQUIRED), ("feed_timeout", 600), ("qname", "input")],
        "TFCluster.shutdown": [("ssc", None), ("grace_secs", 0), ("timeout", 259200)],
        "TFCluster.tensorboard_url": [],
    },
    "TFNode": {
        "hdfs_path": [("ctx", REQUIRED), ("path", REQUIRED)],
        "start_cluster_server": [("ctx", REQUIRED), ("num_gpus", 1), ("rdma", False)],
        "next_batch": [("mgr", REQUIRED), ("batch_size", REQUIRED), ("qname", "input")],
        "export_saved_model": [("sess", REQUIRED), ("export_dir", REQUIRED), ("tag_set", REQUIRED),
                               ("signatures", REQUIRED)],
        "release_port": [("ctx", REQUIRED)],
        "batch_results": [("mgr", REQUIRED), ("results", REQUIRED), ("qname", "output")],
        "terminate": [("mgr", REQUIRED), ("qname", "input")],
        "DataFeed.__init__": [("mgr", REQUIRED), ("train_mode", True), ("qname_in", "input"),
                              ("qname_out", "output"), ("input_mapping", None)],
        "DataFeed.next_batch": [("batch_size", REQUIRED)],
        "DataFeed.should_stop": [],
        "DataFeed.batch_results": [("results", REQUIRED)],
        "DataFeed.terminate": [],
    },
    "TFParallel": {
        "run": [("sc", REQUIRED), ("map_fn", REQUIRED), ("tf_args", REQUIRED), ("num_executors", REQUIRED),
                ("use_barrier", True)],
    },
    "compat": {
        "export_saved_model": [("model", REQUIRED), ("export_dir", REQUIRED), ("is_chief", False)],
        "disable_auto_shard": [("options", REQUIRED)],
        "is_gpu_available": [],
    },
    "util": {
        "single_node_env": [("num_gpus", 1), ("worker_index", -1), ("nodes", [])],
        "get_ip_address": [],
        "find_in_path": [("path", REQUIRED), ("file", REQUIRED)],
        "write_executor_id": [("num", REQUIRED)],
        "read_executor_id": [],
    },
    "gpu_info": {
        "MAX_RETRIES": 3,
        "AS_STRING": "string",
        "AS_LIST": "list",
        "is_gpu_available": [],
        "get_gpus": [("num_gpu", 1), ("worker_index", -1), ("format", "string")],
    },
    "dfutil": {
        "loadedDF": {},
        "isLoadedDF": [("df", REQUIRED)],
        "saveAsTFRecords": [("df", REQUIRED), ("output_dir", REQUIRED)],
        "loadTFRecords": [("sc", REQUIRED), ("input_dir", REQUIRED), ("binary_features", [])],
        "toTFExample": [("dtypes", REQUIRED)],
        "infer_schema": [("example", REQUIRED), ("binary_features", [])],
        "fromTFExample": [("iter", REQUIRED), ("binary_features", [])],
    },
    "pipeline": {
        "TFEstimator.__init__": [("train_fn", REQUIRED), ("tf_args", REQUIRED), ("export_fn", None)],
        "TFModel.__init__": [("tf_args", REQUIRED)],
        "Namespace.__init__": [("d", REQUIRED)],
        "TFParams.merge_args_params": [],
        "TFTypeConverters.toDict": [("value", REQUIRED)],
    },
}

# the pipeline's Params mixins: class -> the suffixes of its set*/get* methods
PIPELINE_PARAMS = {
    "HasBatchSize": ["BatchSize"], "HasClusterSize": ["ClusterSize"], "HasEpochs": ["Epochs"],
    "HasGraceSecs": ["GraceSecs"], "HasInputMapping": ["InputMapping"], "HasInputMode": ["InputMode"],
    "HasMasterNode": ["MasterNode"], "HasModelDir": ["ModelDir"], "HasNumPS": ["NumPS", "DriverPSNodes"],
    "HasOutputMapping": ["OutputMapping"], "HasProtocol": ["Protocol"], "HasReaders": ["Readers"],
    "HasSteps": ["Steps"], "HasTensorboard": ["Tensorboard"], "HasTFRecordDir": ["TFRecordDir"],
    "HasExportDir": ["ExportDir"], "HasSignatureDefKey": ["SignatureDefKey"], "HasTagSet": ["TagSet"],
}
for _cls, _suffixes in PIPELINE_PARAMS.items():
    for _suffix in _suffixes:
        TFOS_225["pipeline"]["%s.set%s" % (_cls, _suffix)] = [("value", REQUIRED)]
        TFOS_225["pipeline"]["%s.get%s" % (_cls, _suffix)] = []

# (module, name) -> (tfos's signature, why it differs)
DIFFERENT = {
    ("TFNode", "export_saved_model"): (
        [("model", REQUIRED), ("export_dir", REQUIRED), ("is_chief", False)],
        "TFoS's took a TF1 Session and raised under TensorFlow 2; tfos's is compat.export_saved_model"),
    ("TFParallel", "run"): (
        [("sc", REQUIRED), ("map_fun", REQUIRED), ("tf_args", REQUIRED), ("num_executors", REQUIRED),
         ("use_barrier", True)],
        "the function is named map_fun as in TFCluster.run (TFoS: map_fn); positional calls are the same"),
}


def _lookup(module, dotted):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _params(func, dotted):
    params = list(inspect.signature(func).parameters.values())
    if "." in dotted and params and params[0].name == "self":
        params = params[1:]
    return params


def _same_default(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b and type(a) in (type(b), int, float) and type(b) in (type(a), int, float)


def _check(params, expected, where):
    assert len(params) >= len(expected), "%s: tfos takes %s, TFoS %s" % (where, params, expected)
    for p, (name, default) in zip(params, expected):
        assert p.name == name, "%s: parameter %r where TFoS has %r" % (where, p.name, name)
        assert p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY), "%s: %s is not positional" % (where, name)
        if default is not REQUIRED:
            assert p.default is not p.empty and _same_default(p.default, default), \
                "%s: %s defaults to %r, TFoS %r" % (where, name, p.default, default)
    for p in params[len(expected):]:
        assert p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD), \
            "%s: the added parameter %s needs a default" % (where, p.name)


CASES = [(m, n) for m, names in TFOS_225.items() for n in names]


@pytest.mark.parametrize("module_name,name", CASES, ids=["%s.%s" % c for c in CASES])
def test_tfos_name_matches_tensorflowonspark(module_name, name):
    if module_name == "pipeline":
        pytest.importorskip("pyspark")
    module = importlib.import_module("tfos." + module_name)
    tfos = importlib.import_module("tfos")
    assert getattr(tfos, module_name) is module      # `from tfos import <module>` as a TFoS program does
    obj = _lookup(module, name)
    expected = TFOS_225[module_name][name]
    where = "tfos.%s.%s" % (module_name, name)
    if not isinstance(expected, list):
        assert obj == expected and type(obj) is type(expected), "%s is %r, TFoS %r" % (where, obj, expected)
        return
    assert callable(obj), where
    if (module_name, name) in DIFFERENT:
        ours, _why = DIFFERENT[(module_name, name)]
        _check(_params(obj, name), ours, where)
        return
    _check(_params(obj, name), expected, where)


def test_every_module_is_importable_the_tfos_way():
    from tfos import TFCluster, TFNode, TFParallel, compat, dfutil, gpu_info, util
    from tfos.TFCluster import InputMode
    from tfos.TFNode import DataFeed
    modules = [TFCluster, TFNode, TFParallel, compat, dfutil, gpu_info, util]
    assert [m.__name__ for m in modules] == ["tfos." + n for n in
                                             ("TFCluster", "TFNode", "TFParallel", "compat", "dfutil", "gpu_info",
                                              "util")]
    assert (InputMode.TENSORFLOW, InputMode.SPARK) == (0, 1) and DataFeed is TFNode.DataFeed
