"""A TensorFlowOnSpark-style inference program: loads an exported SavedModel
and looks its predictions up by the last layer's name, as TFoS's inference
examples do, then writes them as JSON.

usage: infer_by_name.py EXPORT_DIR ROWS_JSON OUT_JSON [marker]"""
import json
import sys

import numpy as np
import tensorflow as tf

export_dir, rows_path, out_path = sys.argv[1:4]
with open(rows_path) as f:
    rows = np.array(json.load(f)["rows"], dtype="float32")

saved_model = tf.saved_model.load(export_dir)
infer = saved_model.signatures["serving_default"]
predictions = infer(tf.constant(rows))["dense_1"]
by_keyword = infer(pixels=tf.constant(rows))["dense_1"]
with open(out_path, "w") as f:
    json.dump({"predictions": predictions.numpy().tolist(),
               "by_keyword": by_keyword.numpy().tolist()}, f)
print("predicted %d rows" % len(rows), flush=True)
