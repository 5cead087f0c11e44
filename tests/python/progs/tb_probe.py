"""A node program for the --tensorboard tests (tests/python/test_run.py,
tests/yarn/test_yarn.py): prints its node and what it was told of
TensorBoard; on the node that has it, asks TensorBoard for its log dir
(waiting up to 90 s for it to listen) and prints "TB answered <json>"."""
import os
import time
import urllib.request

port = os.environ.get("TFOS_TENSORBOARD_PORT")
print("TBPROBE %s:%s port=%s logdir=%s" % (os.environ["TFOS_JOB_NAME"], os.environ["TFOS_TASK_INDEX"], port,
                                           os.environ.get("TFOS_TENSORBOARD_LOGDIR")), flush=True)
if port:
    host = os.environ.get("TFOS_HOST") or "127.0.0.1"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen("http://%s:%s/data/logdir" % (host, port), timeout=5) as r:
                print("TB answered %s" % r.read().decode(), flush=True)
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
