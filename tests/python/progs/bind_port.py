"""Binds this node's reserved port (TFOS_PORT) the way a TF/gRPC server
would, proving the reservation was released at exec, then holds it a moment."""
import os
import socket
import sys
import time

port = int(os.environ["TFOS_PORT"])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("0.0.0.0", port))
s.listen(1)
print("bound %d" % port, flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.5)
