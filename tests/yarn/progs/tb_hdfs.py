"""A node program for TensorBoard with its log dir on HDFS
(tests/yarn/test_secure.py): writes a scalar `loss` at every step into a
local event file (TensorBoard's own writer, no TensorFlow), uploads it to
$TFOS_TENSORBOARD_LOGDIR (hdfs://...) with tfos.fs.Mirror after each step,
TB_STEPS steps TB_PAUSE s apart. On the node that runs TensorBoard, it then
asks TensorBoard (which follows the HDFS dir) for the run's scalars until
it has all of them (90 s at most) and prints "TB-HDFS saw <steps>"."""
import json
import os
import time
import urllib.request

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

import tfos.fs

steps, pause = int(os.environ.get("TB_STEPS", "10")), float(os.environ.get("TB_PAUSE", "0.5"))
node = "%s:%s" % (os.environ["TFOS_JOB_NAME"], os.environ["TFOS_TASK_INDEX"])
port = os.environ.get("TFOS_TENSORBOARD_PORT")
if port:  # the node with TensorBoard writes the summaries, as a chief does
    mirror = tfos.fs.Mirror(os.environ["TFOS_TENSORBOARD_LOGDIR"])
    writer = EventFileWriter(os.path.join(mirror.path, "train"))
    for step in range(steps):
        value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
        writer.flush()
        mirror.push()
        time.sleep(pause)
    writer.close()
    mirror.push()
    print("TB-HDFS wrote %d steps" % steps, flush=True)
    url = "http://%s:%s/data/plugin/scalars/scalars?run=train&tag=loss" % (
        os.environ.get("TFOS_HOST") or "127.0.0.1", port)
    deadline, seen = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                seen = [int(s) for _, s, _ in json.loads(r.read())]
        except OSError:
            pass
        if len(seen) == steps:
            break
        time.sleep(0.5)
    print("TB-HDFS saw %s" % ",".join(map(str, seen)), flush=True)
print("TB-HDFS %s done" % node, flush=True)
