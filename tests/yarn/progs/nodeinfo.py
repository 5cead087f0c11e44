"""A node program for the YARN tests: prints what it was given, one JSON
line, then exits with $NODEINFO_EXIT on the node named by $NODEINFO_FAIL
(e.g. worker:1), or sleeps $NODEINFO_SLEEP seconds. A ps node serves until
it is stopped, as parameter servers do: it listens on its address after it
has printed, and with $NODEINFO_WAIT_PS set a worker connects to every ps
before it ends (as a TF worker would), so no ps is stopped before its line
is out."""
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
cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
if os.environ.get("TFOS_JOB_NAME") == "ps":
    port = int(cluster["ps"][int(os.environ["TFOS_TASK_INDEX"])].rsplit(":", 1)[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)
    while True:
        conn, _ = srv.accept()
        conn.close()
if os.environ.get("NODEINFO_WAIT_PS"):
    for addr in cluster.get("ps", []):
        host, port = addr.rsplit(":", 1)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("nodeinfo: no ps listening at %s after 120 s" % addr)
                time.sleep(0.2)
time.sleep(float(os.environ.get("NODEINFO_SLEEP", "0")))
