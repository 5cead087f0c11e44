"""A node program for the YARN tests: prints what it was given, one JSON
line, then exits with $NODEINFO_EXIT on the node named by $NODEINFO_FAIL
(e.g. worker:1), or sleeps $NODEINFO_SLEEP seconds. A ps node serves until
it is stopped, as parameter servers do."""
import json
import os
import socket
import sys
import time

me = "%s:%s" % (os.environ.get("TFOS_JOB_NAME"), os.environ.get("TFOS_TASK_INDEX"))
print("NODEINFO " + json.dumps({
    "node": me,
    "tf_config": json.loads(os.environ.get("TF_CONFIG", "{}")),
    "ps_hosts": os.environ.get("TFOS_PS_HOSTS"),
    "worker_hosts": os.environ.get("TFOS_WORKER_HOSTS"),
    "attempt": os.environ.get("TFOS_ATTEMPT"),
    "container": os.environ.get("CONTAINER_ID"),
    "user_env": os.environ.get("NODEINFO_USER"),
    "cwd_files": sorted(os.listdir(".")),
    "host": socket.gethostname(),
}), flush=True)
if os.environ.get("NODEINFO_FAIL") == me:
    print("nodeinfo: failing on purpose", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("NODEINFO_EXIT", "3")))
if os.environ.get("TFOS_JOB_NAME") == "ps":
    while True:
        time.sleep(1)
time.sleep(float(os.environ.get("NODEINFO_SLEEP", "0")))
