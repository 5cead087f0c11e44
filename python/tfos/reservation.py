"""TensorFlowOnSpark's ``reservation`` module: a registry where nodes
register themselves and wait until all have.

tfos's clusters do not use it: their nodes register with the C coordinator
(``tfos._tfos.Coordinator``), which also hands out the cluster spec. This
module keeps TFoS 2.2.5's names and behaviour for programs (and TFoS's own
tests) that use them directly:

* :class:`Reservations` -- a thread-safe list of node metadata dicts, done
  once ``required`` have been added;
* :class:`Server` -- listens (a thread) on ``TFOS_SERVER_HOST`` /
  ``TFOS_SERVER_PORT`` ("9999" or "9997-9999", first free) as TFoS;
* :class:`Client` -- ``register``, ``get_reservations``,
  ``await_reservations``, ``request_stop``.

What differs from TFoS, on purpose: messages are length-prefixed JSON, not
pickles (an unauthenticated peer that can reach the port could otherwise run
code in the driver), a message is at most 1 MiB, at most 256 connections are
held, and every wait is bounded (``timeout``, seconds). Metadata must be JSON
values (dicts, lists, strings, numbers, booleans, None); tuples come back as
lists.
"""
import json
import logging
import os
import select
import socket
import struct
import threading
import time

from . import util

logger = logging.getLogger(__name__)

TFOS_SERVER_PORT = "TFOS_SERVER_PORT"
TFOS_SERVER_HOST = "TFOS_SERVER_HOST"
MAX_RETRIES = 3
MAX_MESSAGE = 1 << 20        #: bytes of one message, at most
MAX_CONNECTIONS = 256        #: connections a Server holds at once, at most
DEFAULT_TIMEOUT = 600.0      #: seconds a wait for reservations lasts, at most (TFCluster's reservation_timeout)
_HEADER = struct.Struct(">I")


class Reservations(object):
    """Thread-safe store of node reservations; ``required`` nodes are expected."""

    def __init__(self, required):
        self.required = required
        self.lock = threading.RLock()
        self.reservations = []

    def add(self, meta):
        with self.lock:
            self.reservations.append(meta)

    def done(self):
        with self.lock:
            return len(self.reservations) >= self.required

    def get(self):
        with self.lock:
            return list(self.reservations)

    def remaining(self):
        with self.lock:
            return self.required - len(self.reservations)


class MessageSocket(object):
    """Length-prefixed JSON messages."""

    def receive(self, sock):
        head = _recv_exact(sock, _HEADER.size)
        (n,) = _HEADER.unpack(head)
        if n > MAX_MESSAGE:
            raise ValueError("reservation message of %d bytes (at most %d)" % (n, MAX_MESSAGE))
        return json.loads(_recv_exact(sock, n).decode("utf-8"))

    def send(self, sock, msg):
        try:
            data = json.dumps(msg).encode("utf-8")
        except TypeError as exc:
            raise TypeError("reservation: node metadata must be JSON values (dict, list, str, number, bool, "
                            "None): %s" % exc) from None
        if len(data) > MAX_MESSAGE:
            raise ValueError("reservation message of %d bytes (at most %d)" % (len(data), MAX_MESSAGE))
        sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("reservation: the peer closed the connection")
        buf += chunk
    return buf


class Server(MessageSocket):
    """Reservation server for ``count`` nodes."""

    reservations = None
    done = False

    def __init__(self, count):
        if count <= 0:
            raise ValueError("reservation.Server: the expected number of reservations must be > 0, got %r"
                             % (count,))
        self.reservations = Reservations(count)
        self._sock = None

    def await_reservations(self, sc=None, status=None, timeout=DEFAULT_TIMEOUT):
        """Block (at most ``timeout`` s) until every reservation is in; an
        'error' in ``status`` cancels the Spark jobs and raises."""
        deadline = time.monotonic() + timeout
        while not self.reservations.done():
            if status and "error" in status:
                if sc is not None:
                    sc.cancelAllJobs()
                raise RuntimeError("reservation: a node failed while waiting for reservations: %s"
                                   % (status["error"],))
            if time.monotonic() >= deadline:
                raise TimeoutError("reservation: timed out after %g s waiting for reservations: %d of %d "
                                   "registered" % (timeout, len(self.reservations.get()),
                                                   self.reservations.required))
            time.sleep(0.1)
        return self.reservations.get()

    def _handle(self, sock, msg):
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "REG":
            if self.reservations.done():
                return self.send(sock, "ERR: all %d reservations are in" % self.reservations.required)
            self.reservations.add(msg.get("data"))
            self.send(sock, "OK")
        elif kind == "QUERY":
            self.send(sock, self.reservations.done())
        elif kind == "QINFO":
            self.send(sock, self.reservations.get())
        elif kind == "STOP":
            self.done = True  # before the answer: a client that has its "OK" sees the server done
            self.send(sock, "OK")
        else:
            self.send(sock, "ERR")

    def start(self):
        """Listen in a background thread; returns the address ``(host, port)``."""
        server_sock = self.start_listening_socket()
        self._sock = server_sock
        addr = (self.get_server_ip(), server_sock.getsockname()[1])
        logger.info("listening for reservations at %s", addr)
        t = threading.Thread(target=self._listen, args=(server_sock,), name="tfos-reservation", daemon=True)
        t.start()
        return addr

    def _listen(self, server_sock):
        conns = []
        try:
            while not self.done:
                readable, _, _ = select.select([server_sock] + conns, [], [], 0.2)
                for sock in readable:
                    if sock is server_sock:
                        client, _ = server_sock.accept()
                        if len(conns) >= MAX_CONNECTIONS:
                            client.close()
                            continue
                        client.settimeout(10.0)  # a peer that sends half a message holds us at most this
                        conns.append(client)
                        continue
                    try:
                        self._handle(sock, self.receive(sock))
                    except Exception as exc:
                        logger.debug("reservation connection closed: %s", exc)
                        sock.close()
                        conns.remove(sock)
        finally:
            for sock in conns:
                sock.close()
            server_sock.close()

    def get_server_ip(self):
        """``TFOS_SERVER_HOST`` if set, else this host's address."""
        return os.getenv(TFOS_SERVER_HOST) or util.get_ip_address()

    def get_server_ports(self):
        """The ports in ``TFOS_SERVER_PORT`` ("8888" or "9997-9999"), else [0] (any)."""
        spec = os.getenv(TFOS_SERVER_PORT, "0").strip()
        try:
            if "-" not in spec:
                return [int(spec)]
            lo, hi = spec.split("-")
            return list(range(int(lo), int(hi) + 1))
        except ValueError:
            raise ValueError("invalid TFOS_SERVER_PORT=%r: give a port (9999) or a range (9997-9999)"
                             % (spec,)) from None

    def start_listening_socket(self):
        """A listening socket on the first free port of get_server_ports()."""
        ports = self.get_server_ports()
        errors = []
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("", port))
                sock.listen(16)
                return sock
            except OSError as exc:
                sock.close()
                errors.append("%d: %s" % (port, exc.strerror or exc))
        raise OSError("reservation server: no port of %s can be bound (%s); free one or set TFOS_SERVER_PORT"
                      % (ports, "; ".join(errors)))

    def stop(self):
        """Stop the listener (its thread closes the socket)."""
        self.done = True


class Client(MessageSocket):
    """A node's connection to a :class:`Server` at ``server_addr`` (host, port)."""

    sock = None
    server_addr = None

    def __init__(self, server_addr, timeout=30.0):
        self.server_addr = tuple(server_addr)
        self.timeout = timeout
        self.sock = socket.create_connection(self.server_addr, timeout)

    def _request(self, kind, data=None):
        msg = {"type": kind}
        if data is not None:
            msg["data"] = data
        for attempt in range(MAX_RETRIES):
            try:
                self.send(self.sock, msg)
                break
            except OSError:
                if attempt + 1 >= MAX_RETRIES:
                    raise
                self.sock.close()
                self.sock = socket.create_connection(self.server_addr, self.timeout)
        return self.receive(self.sock)

    def close(self):
        self.sock.close()

    def register(self, reservation):
        return self._request("REG", reservation)

    def get_reservations(self):
        return self._request("QINFO")

    def await_reservations(self, timeout=DEFAULT_TIMEOUT):
        """Poll until every reservation is in (at most ``timeout`` s); the list."""
        deadline = time.monotonic() + timeout
        while not self._request("QUERY"):
            if time.monotonic() >= deadline:
                raise TimeoutError("reservation: timed out after %g s waiting for the other nodes to register at "
                                   "%s:%s" % (timeout, self.server_addr[0], self.server_addr[1]))
            time.sleep(0.1)
        return self.get_reservations()

    def request_stop(self):
        return self._request("STOP")
