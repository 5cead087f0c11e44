"""Starts a real TensorFlow gRPC server for this node's task on its reserved
port, serves briefly, exits 0. Used to show two clusters at once do not collide."""
import json
import os
import sys
import time

import tensorflow as tf

cfg = json.loads(os.environ["TF_CONFIG"])
server = tf.distribute.Server(tf.train.ClusterSpec(cfg["cluster"]), job_name=cfg["task"]["type"],
                              task_index=cfg["task"]["index"], protocol="grpc", start=True)
print("serving %s:%d on %s" % (cfg["task"]["type"], cfg["task"]["index"], server.target), flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 2)
