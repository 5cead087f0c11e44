"""A worker that uses the parameter server tfos started for it: connects to
the ps job as a client, places a variable on /job:ps/task:0, updates it
remotely, and reads it back."""
import json
import os
import sys

import tensorflow as tf

cfg = json.loads(os.environ["TF_CONFIG"])
if cfg["task"]["type"] != "worker":
    sys.exit("use_ps.py only runs on workers; ps nodes get tfos's built-in server")
tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec({"ps": cfg["cluster"]["ps"]}), job_name="localhost")
with tf.device("/job:ps/task:0"):
    v = tf.Variable(40.0)
v.assign_add(2.0)
print("value on ps: %.1f (variable on %s)" % (v.numpy(), v.device), flush=True)
