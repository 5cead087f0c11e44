"""HDFS delegation tokens for tfos.fs on a Kerberized cluster.

A program in a YARN container has no Kerberos ticket: YARN gives it the
application's delegation tokens in a file (``$HADOOP_TOKEN_FILE_LOCATION``,
Hadoop's credentials format). WebHDFS takes an HDFS delegation token as the
``delegation=`` parameter, in Hadoop's "URL string" form. This module reads
that file and keeps the token fresh: ``tfos yarn --principal/--keytab``'s
ApplicationMaster writes new tokens before the old ones reach their maximum
lifetime to ``$TFOS_HDFS_CREDENTIALS`` (an hdfs:// file in the application's
staging dir, readable by its user only), which is read, with the token still
held, once that token is past 60 % of its lifetime, by a thread (a token
left to die unused could not read its successor). On Spark-on-YARN the
driver publishes the token Spark renewed there (tfos._spark.tokens); those
tokens are replaced rather than renewed, so their lifetime is also capped at
the NameNode's renewal interval when ``$TFOS_HDFS_TOKEN_RENEW_MS`` gives it.
A newer token is also kept in ``$TFOS_HDFS_TOKEN_CACHE`` (a 0600 file of the
node's), which a restarted program on the same executor starts from: its
container's token may be dead by then.

The credentials format (Hadoop's ``Credentials``): ``HDTS``, a version byte,
then either (0) Writable fields: a vint count of (alias Text, token) pairs,
each token being vint-length identifier, vint-length password, kind Text,
service Text, then the secret keys; or (1) a length-delimited protobuf
``CredentialsProto`` (tokens: field 1, each with alias 1 and TokenProto 2:
identifier 1, password 2, kind 3, service 4). A delegation token's identifier
is: a version byte, owner, renewer and real user (Text), issue and maximum
date (vlong, ms), sequence number and master key id (vint).
"""
import base64
import collections
import os
import sys
import threading
import time

HDFS_KINDS = (b"HDFS_DELEGATION_TOKEN", b"WEBHDFS delegation", b"SWEBHDFS delegation")


class Token(collections.namedtuple("Token", "kind service identifier password")):
    def url_string(self) -> str:
        """Hadoop's Token.encodeToUrlString: URL-safe base64, unpadded, of
        the token's Writable form."""
        raw = b"".join((_vint_bytes(len(self.identifier)), self.identifier, _vint_bytes(len(self.password)),
                        self.password, _vint_bytes(len(self.kind)), self.kind, _vint_bytes(len(self.service)),
                        self.service))
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def from_url_string(cls, s):
        """The token of Hadoop's URL string ``s`` (url_string's inverse)."""
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
        ident, pos = _text(raw, 0)
        pw, pos = _text(raw, pos)
        kind, pos = _text(raw, pos)
        service, pos = _text(raw, pos)
        return cls(kind, service, ident, pw)

    def dates(self):
        """(issue date, maximum date) in ms since the epoch, from the
        delegation token's identifier; (0, 0) when it cannot be read."""
        try:
            b = self.identifier
            pos = 1  # the identifier's version
            for _ in range(3):  # owner, renewer, real user
                n, pos = _vlong(b, pos)
                pos += n
            issue, pos = _vlong(b, pos)
            maximum, pos = _vlong(b, pos)
            return issue, maximum
        except (IndexError, ValueError):
            return 0, 0


def _vlong(b, pos):
    """Hadoop's WritableUtils.readVLong at b[pos]: (value, next position)."""
    first = b[pos] - 256 if b[pos] > 127 else b[pos]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)
    if pos + size > len(b):
        raise ValueError("a vlong past the end")
    v = 0
    for i in range(1, size):
        v = (v << 8) | b[pos + i]
    return (v ^ -1 if negative else v), pos + size


def _vint_bytes(v):
    """WritableUtils.writeVLong for a non-negative v."""
    if -112 <= v <= 127:
        return bytes([v & 0xFF])
    n = (v.bit_length() + 7) // 8
    return bytes([(-112 - n) & 0xFF]) + v.to_bytes(n, "big")


def _text(b, pos):
    n, pos = _vlong(b, pos)
    if n < 0 or pos + n > len(b):
        raise ValueError("a field past the end")
    return bytes(b[pos:pos + n]), pos + n


def _varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, pos
        shift += 7


def _proto_fields(b):
    """(field number, value) of a protobuf message's length-delimited and
    varint fields."""
    pos = 0
    while pos < len(b):
        key, pos = _varint(b, pos)
        wire = key & 7
        if wire == 0:
            v, pos = _varint(b, pos)
        elif wire == 2:
            n, pos = _varint(b, pos)
            v, pos = bytes(b[pos:pos + n]), pos + n
        elif wire == 1:
            v, pos = bytes(b[pos:pos + 8]), pos + 8
        elif wire == 5:
            v, pos = bytes(b[pos:pos + 4]), pos + 4
        else:
            raise ValueError("protobuf wire type %d" % wire)
        yield key >> 3, v


def read_credentials(data: bytes):
    """The tokens in a Hadoop credentials file's bytes."""
    if data[:4] != b"HDTS" or len(data) < 5:
        raise ValueError("not a Hadoop credentials file (no HDTS header)")
    version, b = data[4], data[5:]
    tokens = []
    if version == 0:
        count, pos = _vlong(b, 0)
        for _ in range(count):
            _alias, pos = _text(b, pos)
            ident, pos = _text(b, pos)
            pw, pos = _text(b, pos)
            kind, pos = _text(b, pos)
            service, pos = _text(b, pos)
            tokens.append(Token(kind, service, ident, pw))
        return tokens
    if version == 1:
        n, pos = _varint(b, 0)
        for field, kv in _proto_fields(b[pos:pos + n]):
            if field != 1:
                continue
            for f2, tok in _proto_fields(kv):
                if f2 == 2:
                    t = dict(_proto_fields(tok))
                    tokens.append(Token(t.get(3, b""), t.get(4, b""), t.get(1, b""), t.get(2, b"")))
        return tokens
    raise ValueError("Hadoop credentials format version %d is unknown" % version)


def best_hdfs_token(tokens):
    """The HDFS delegation token that lives longest, or None."""
    hdfs = [t for t in tokens if t.kind in HDFS_KINDS]
    return max(hdfs, key=lambda t: t.dates()[1]) if hdfs else None


def write_credentials(tokens) -> bytes:
    """Hadoop's credentials file (format 0) holding ``tokens``, no secret keys."""
    def text(b):
        return _vint_bytes(len(b)) + b
    out = b"HDTS\x00" + _vint_bytes(len(tokens))
    for i, t in enumerate(tokens):
        out += text(b"tfos-%d" % i) + text(t.identifier) + text(t.password) + text(t.kind) + text(t.service)
    return out + _vint_bytes(0)


def keep_if_newer(token, path=None):
    """_keep ``token`` unless ``path`` ($TFOS_HDFS_TOKEN_CACHE) already holds
    one that lives as long (a node's start, with the driver's token then)."""
    path = path or os.environ.get("TFOS_HDFS_TOKEN_CACHE")
    if path and os.path.isfile(path):
        try:
            with open(path, "rb") as f:
                held = best_hdfs_token(read_credentials(f.read()))
            if held is not None and held.dates()[1] >= token.dates()[1]:
                return
        except (OSError, ValueError, IndexError):
            pass
    _keep(token, path)


def _keep(token, path=None):
    """The newest token into ``path``, $TFOS_HDFS_TOKEN_CACHE (0600, renamed
    into place), for the next program on this executor; nothing when unset."""
    path = path or os.environ.get("TFOS_HDFS_TOKEN_CACHE")
    if not path:
        return
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(write_credentials([token]))
        os.replace(tmp, path)
    except OSError as e:
        sys.stderr.write("tfos.fs: could not keep the new HDFS delegation token in %s (%s): a program restarted "
                         "here starts from its container's\n" % (path, e))


class Keeper:
    """The token this process uses, refreshed as the module says."""

    WAKE_S = 5.0  # keep_fresh's thread looks at the clock at least this often

    def __init__(self):
        self._lock = threading.Lock()
        self._token = None
        self._loaded = False
        self._checked_ms = 0
        self._refresher = None  # the thread refreshing the token (keep_fresh)
        self._stopped = threading.Event()
        self._spnego = {}  # NameNode -> (URL string, got at ms, expires ms) of a token got with a ticket

    def token(self, read_remote, kerberos=None, namenode=None):
        """The URL string of the token to use, or None (no token: simple
        authentication). ``read_remote(url, token)``: the bytes of an
        hdfs:// file read with that token. ``kerberos``: for a process with
        no container token on a Kerberized cluster, ``() -> (URL string,
        expiry in ms)`` of a token got with its ticket (SPNEGO) from
        ``namenode`` (one kept for each), asked again once 60 % of the time
        to that expiry has passed."""
        with self._lock:
            self._load()
            if self._token is None:
                return None if kerberos is None else self._kerberos(kerberos, namenode)
            if os.environ.get("TFOS_HDFS_CREDENTIALS"):
                self._refresh(read_remote)
            return self._token.url_string()

    def keep_fresh(self, read_remote):
        """Refresh the token from now on whether or not this process uses
        HDFS meanwhile (a node's program, from its start): a token read
        only when the program first needs HDFS, minutes in, may have died
        unused, and a dead token cannot read its successor."""
        if not os.environ.get("TFOS_HDFS_CREDENTIALS"):
            return
        with self._lock:
            self._load()
            if self._token is not None:
                self._start_refresher(read_remote)

    def _load(self):
        if self._loaded:
            return
        held = []
        for path in (os.environ.get("HADOOP_TOKEN_FILE_LOCATION"), os.environ.get("TFOS_HDFS_TOKEN_CACHE")):
            if path and os.path.isfile(path):
                with open(path, "rb") as f:
                    held.append(best_hdfs_token(read_credentials(f.read())))
        held = [t for t in held if t is not None]
        self._token = max(held, key=lambda t: t.dates()[1]) if held else None  # the longest-lived
        self._loaded = True  # not before: a file that cannot be read says so at every call

    def _life(self):
        """(issue, maximum, life) of the token held, in ms; life capped at
        the renewal interval where $TFOS_HDFS_TOKEN_RENEW_MS gives it."""
        issue, maximum = self._token.dates()
        life = max(maximum - issue, 0)
        renew = os.environ.get("TFOS_HDFS_TOKEN_RENEW_MS")
        if renew and renew.isdigit() and int(renew) > 0:
            life = min(life, int(renew))  # a token nobody renews expires then
        return issue, maximum, life

    def _refresh(self, read_remote):
        """Read $TFOS_HDFS_CREDENTIALS with the token held once that token
        is past 60 % of its life (at most every 1/20 of it); lock held."""
        issue, maximum, life = self._life()
        now = time.time() * 1000
        if not (now > issue + 0.6 * life and now - self._checked_ms > max(1000, life / 20)):
            return
        self._checked_ms = now
        fresh = os.environ.get("TFOS_HDFS_CREDENTIALS")
        try:
            newer = best_hdfs_token(read_credentials(read_remote(fresh, self._token.url_string())))
            if newer is not None and newer.dates()[1] > maximum:
                self._token = newer
                _keep(newer)
        except Exception as e:  # noqa: BLE001 (kept, and said: the held token may still do)
            sys.stderr.write("tfos.fs: could not read fresh HDFS delegation tokens from %s (%s); the token "
                             "held is used while it lasts\n" % (fresh, e))

    def _start_refresher(self, read_remote):
        """A daemon thread that refreshes the token on time (lock held)."""
        if self._refresher is not None:
            return

        def run():
            while True:
                with self._lock:
                    issue, _, life = self._life()
                    due = max(issue + 0.6 * life, self._checked_ms + max(1000, life / 20)) + 1
                if self._stopped.wait(min(max(0.1, (due - time.time() * 1000) / 1000.0), self.WAKE_S)):
                    return
                with self._lock:
                    self._refresh(read_remote)

        self._refresher = threading.Thread(target=run, name="tfos-hdfs-token", daemon=True)
        self._refresher.start()

    def stop(self):
        """End the refreshing thread, if any (keep_fresh)."""
        self._stopped.set()
        if self._refresher is not None:
            self._refresher.join(5)

    def _kerberos(self, get, namenode):
        now = time.time() * 1000
        t = self._spnego.get(namenode)
        if t is None or now > t[1] + 0.6 * (t[2] - t[1]):
            url, expires = get()
            self._spnego[namenode] = t = (url, now, expires)
        return t[0]
