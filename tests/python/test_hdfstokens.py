"""Unit tests for tfos._hdfstokens: Hadoop's vlong and credentials formats
(Writable and protobuf), token URL strings, and Keeper's refresh rules, on
bytes built here by hand from Hadoop's encoding rules."""
import base64
import os
import subprocess
import sys
import time

import pytest

from tfos import _hdfstokens

REAL_IDENT = (b"\x00\x10tfos@EXAMPLE.COM\x04tfos\x00\x8a\x01\xa2\x1d\x16\x86\xb9"
              b"\x8a\x01\xa2\x1d\x16\xfb\xe9\x04\x02")
HDFS = b"HDFS_DELEGATION_TOKEN"


def vlong(v):
    """WritableUtils.writeVLong, written from its rules."""
    if -112 <= v <= 127:
        return bytes([v & 0xFF])
    length, v = (-120, v ^ -1) if v < 0 else (-112, v)  # negative: one's complement
    n, tmp = 0, v
    while tmp:
        tmp, n = tmp >> 8, n + 1
    return bytes([(length - n) & 0xFF]) + v.to_bytes(n, "big")


def text(b):  # Text, and the vint-length byte fields of a Writable token
    return vlong(len(b)) + b


def ident(issue, maximum, owner=b"tfos@EXAMPLE.COM", seq=4):
    return b"\x00" + text(owner) + text(b"tfos") + text(b"") + vlong(issue) + vlong(maximum) + vlong(seq) + vlong(2)


def varint(v):
    return bytes([v]) if v < 0x80 else bytes([v & 0x7F | 0x80]) + varint(v >> 7)


def field(num, value):
    return varint(num << 3 | 2) + varint(len(value)) + value


def cred_v0(tokens, secrets=()):
    body = vlong(len(tokens)) + b"".join(text(a) + b"".join(map(text, (t.identifier, t.password, t.kind, t.service)))
                                         for a, t in tokens)
    return b"HDTS\x00" + body + vlong(len(secrets)) + b"".join(text(a) + text(k) for a, k in secrets)


def cred_v1(tokens, secrets=()):
    msg = b""
    for alias, t in tokens:
        tok = field(1, t.identifier) + field(2, t.password) + field(3, t.kind) + field(4, t.service)
        msg += field(1, field(1, alias) + field(2, tok))
    for alias, key in secrets:
        msg += field(2, field(1, alias) + field(3, key))  # CredentialsProto.secrets: ignored
    return b"HDTS\x01" + varint(len(msg)) + msg


def tok(issue, maximum, kind=HDFS, pw=b"pw", service=b"ha-hdfs:nn"):
    return _hdfstokens.Token(kind, service, ident(issue, maximum), pw)


VALUES = [0, 1, -1, 127, -112, 128, 255, 256, 65535, 1795784345273, -113, -120, -121, -1000, -(2 ** 63), 2 ** 63 - 1]


@pytest.mark.parametrize("v", VALUES)
def test_vlong_reads_writevlong(v):
    b = b"\xff" + vlong(v) + b"\x07"
    assert _hdfstokens._vlong(b, 1) == (v, len(b) - 1)


@pytest.mark.parametrize("v,raw", [(0, b"\x00"), (127, b"\x7f"), (-112, b"\x90"), (128, b"\x8f\x80"),
                                   (255, b"\x8f\xff"), (256, b"\x8e\x01\x00"), (-113, b"\x87\x70"),
                                   (-1000, b"\x86\x03\xe7"), (1795784345273, b"\x8a\x01\xa2\x1d\x16\x86\xb9")])
def test_vlong_literal_bytes(v, raw):
    assert vlong(v) == raw
    assert _hdfstokens._vlong(raw, 0) == (v, len(raw))
    if len(raw) > 1:
        with pytest.raises(ValueError):  # cut short
            _hdfstokens._vlong(raw[:-1], 0)


def test_dates_of_a_real_nodemanager_identifier():
    t = _hdfstokens.Token(HDFS, b"svc", REAL_IDENT, b"pw")
    assert t.dates() == (1795784345273, 1795784375273)
    assert _hdfstokens.Token(HDFS, b"", b"\x00\x10tf", b"").dates() == (0, 0)  # truncated


@pytest.mark.parametrize("write", [cred_v0, cred_v1])
def test_read_credentials(write):
    am = _hdfstokens.Token(b"YARN_AM_RM_TOKEN", b"10.0.0.1:8030", b"\x01\x02am-ident", b"am-pw")
    hd = tok(1795784345273, 1795784375273, pw=b"p" * 120)  # v1: a message over 127 bytes, a 2-byte length
    data = write([(b"appattempt", am), (b"ha-hdfs:nn", hd)], secrets=[(b"k", b"secret-bytes")])
    assert data[:5] == b"HDTS" + bytes([write is cred_v1]) and (write is cred_v0 or data[5] & 0x80)
    assert _hdfstokens.read_credentials(data) == [am, hd]


@pytest.mark.parametrize("data,says", [(b"", "HDTS"), (b"HDTS", "HDTS"), (b"HDTX\x00\x00", "HDTS"),
                                       (b"WRONGHEADER", "HDTS"), (b"HDTS\x02\x00", "version 2 is unknown")])
def test_bad_header_or_version(data, says):
    with pytest.raises(ValueError, match=says):
        _hdfstokens.read_credentials(data)


@pytest.mark.parametrize("n", [200, 201, 202])  # all three paddings; a password over 127 bytes: a 2-byte vint
def test_url_string(n):
    t = tok(1795784345273, 1795784375273, pw=bytes(range(n)))
    raw = (vlong(len(t.identifier)) + t.identifier + b"\x8f" + bytes([n]) + t.password + vlong(len(HDFS)) + HDFS
           + vlong(len(t.service)) + t.service)
    s = t.url_string()
    assert s == base64.urlsafe_b64encode(raw).rstrip(b"=").decode() and not set(s) & set("=+/")
    assert base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)) == raw


def test_best_hdfs_token():
    a, b = tok(1000, 5000, pw=b"a"), tok(2000, 9000, pw=b"b", kind=b"WEBHDFS delegation")
    other = tok(3000, 99999, kind=b"YARN_AM_RM_TOKEN")
    assert _hdfstokens.best_hdfs_token([a, other, b]) == b
    assert _hdfstokens.best_hdfs_token([b, tok(4000, 6000, pw=b"later issue, earlier max")]) == b
    assert _hdfstokens.best_hdfs_token([b, a]) == b
    assert _hdfstokens.best_hdfs_token([other]) is None
    assert _hdfstokens.best_hdfs_token([]) is None


ISSUE, LIFE = 1_700_000_000_000, 1_000_000  # ms; a check at most every LIFE / 20
FRESH = "hdfs://nn:8020/user/tfos/.staging/app/fresh.creds"


@pytest.fixture
def env(tmp_path, monkeypatch):
    held = tok(ISSUE, ISSUE + LIFE, pw=b"held")
    path = tmp_path / "container_tokens"
    path.write_bytes(cred_v0([(b"am", tok(0, 1, kind=b"YARN_AM_RM_TOKEN")), (b"hdfs", held)]))
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(path))
    monkeypatch.setenv("TFOS_HDFS_CREDENTIALS", FRESH)
    clock = [ISSUE / 1000]
    monkeypatch.setattr(_hdfstokens.time, "time", lambda: clock[0])
    return held, lambda frac: clock.__setitem__(0, (ISSUE + frac * LIFE) / 1000), []


def remote(calls, answer):
    def read(url, token):
        calls.append((url, token))
        return answer() if callable(answer) else answer
    return read


def fail():
    raise OSError("403 Forbidden")


def test_keeper_no_token_file(monkeypatch, tmp_path):
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(tmp_path / "absent"))
    monkeypatch.setenv("TFOS_HDFS_CREDENTIALS", FRESH)
    calls = []
    assert _hdfstokens.Keeper().token(remote(calls, b"")) is None
    monkeypatch.delenv("HADOOP_TOKEN_FILE_LOCATION")
    assert _hdfstokens.Keeper().token(remote(calls, b"")) is None
    assert calls == []


def test_keeper_before_60_percent(env):
    held, at, calls = env
    k = _hdfstokens.Keeper()
    for frac in (0, 0.5, 0.59):
        at(frac)
        assert k.token(remote(calls, b"")) == held.url_string()
    assert calls == []


def test_keeper_switches_to_a_newer_token(env):
    held, at, calls = env
    newer = tok(ISSUE + LIFE // 2, ISSUE + 2 * LIFE, pw=b"newer")
    at(0.61)
    assert _hdfstokens.Keeper().token(remote(calls, cred_v1([(b"hdfs", newer)]))) == newer.url_string()
    assert calls == [(FRESH, held.url_string())]


@pytest.mark.parametrize("maximum", [ISSUE + LIFE, ISSUE + LIFE - 1])
def test_keeper_keeps_held_over_older_or_equal(env, maximum):
    held, at, calls = env
    at(0.7)
    other = cred_v0([(b"hdfs", tok(ISSUE + 1, maximum, pw=b"other"))])
    assert _hdfstokens.Keeper().token(remote(calls, other)) == held.url_string()
    assert len(calls) == 1


def test_keeper_read_failure_keeps_held(env, capsys):
    held, at, calls = env
    at(0.8)
    assert _hdfstokens.Keeper().token(remote(calls, fail)) == held.url_string()
    assert len(calls) == 1
    err = capsys.readouterr().err
    assert "could not read fresh HDFS delegation tokens" in err and FRESH in err


def test_keeper_checks_at_most_every_life_over_20(env):
    held, at, calls = env
    newer = tok(ISSUE, ISSUE + 2 * LIFE, pw=b"newer")
    k = _hdfstokens.Keeper()
    at(0.7)
    assert k.token(remote(calls, cred_v0([(b"hdfs", held)]))) == held.url_string()
    at(0.7 + 0.049)  # within LIFE / 20 of the check
    assert k.token(remote(calls, cred_v0([(b"hdfs", newer)]))) == held.url_string()
    assert len(calls) == 1
    at(0.7 + 0.051)
    assert k.token(remote(calls, cred_v0([(b"hdfs", newer)]))) == newer.url_string()
    assert len(calls) == 2


def test_keeper_checks_at_most_every_second(env, tmp_path, monkeypatch):
    _, at, calls = env
    short = tok(ISSUE, ISSUE + 10_000, pw=b"short")  # LIFE / 20 = 0.5 s: the 1 s floor rules
    path = tmp_path / "short_tokens"
    path.write_bytes(cred_v0([(b"hdfs", short)]))
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(path))
    k = _hdfstokens.Keeper()
    for ms, n in [(7000, 1), (7900, 1), (8100, 2)]:
        at(ms / LIFE)
        assert k.token(remote(calls, cred_v0([(b"hdfs", short)]))) == short.url_string()
        assert len(calls) == n


def test_keeper_gets_a_token_with_a_ticket_outside_containers(monkeypatch):
    # no container token, a Kerberized cluster: the getter (SPNEGO in tfos's C library) is asked once,
    # then again once 60 % of the time from getting it to its expiry has passed; a container token wins
    monkeypatch.delenv("HADOOP_TOKEN_FILE_LOCATION", raising=False)
    clock = [1000.0]
    monkeypatch.setattr(_hdfstokens.time, "time", lambda: clock[0])
    got = []

    def get():
        got.append(clock[0])
        return "tok%d" % len(got), clock[0] * 1000 + 100_000

    k = _hdfstokens.Keeper()
    assert k.token(remote([], b""), get) == "tok1"
    clock[0] += 59
    assert k.token(remote([], b""), get) == "tok1" and len(got) == 1
    clock[0] += 2
    assert k.token(remote([], b""), get) == "tok2" and got == [1000.0, 1061.0]
    assert _hdfstokens.Keeper().token(remote([], b"")) is None  # simple authentication: no getter, no token
    # another NameNode: a token of its own, the first one's kept
    assert k.token(remote([], b""), lambda: ("other", clock[0] * 1000 + 100_000), "http://nn2:9870") == "other"
    assert k.token(remote([], b""), get) == "tok2" and len(got) == 2


def test_keeper_prefers_the_container_token_to_a_ticket(env):
    held, _at, _calls = env
    assert _hdfstokens.Keeper().token(remote([], b""), lambda: pytest.fail("asked the ticket")) == held.url_string()


def test_written_credentials_read_back():
    tokens = [tok(ISSUE, ISSUE + LIFE, pw=b"a"), tok(ISSUE + 5, ISSUE + 2 * LIFE, pw=b"b", service=b"nn2:8020")]
    data = _hdfstokens.write_credentials(tokens)
    assert data[:5] == b"HDTS\x00"
    assert _hdfstokens.read_credentials(data) == tokens


def test_keeper_caps_the_life_of_a_token_nobody_renews(env, monkeypatch):
    # Spark's tokens are replaced, not renewed: they expire at the renewal interval, so the Keeper looks for a
    # newer one at 60 % of that interval when TFOS_HDFS_TOKEN_RENEW_MS gives it (here a tenth of the life)
    held, at, calls = env
    monkeypatch.setenv("TFOS_HDFS_TOKEN_RENEW_MS", str(LIFE // 10))
    newer = tok(ISSUE + LIFE // 20, ISSUE + LIFE + LIFE // 20, pw=b"newer")
    at(0.05)
    assert _hdfstokens.Keeper().token(remote(calls, cred_v0([(b"hdfs", newer)]))) == held.url_string()
    assert calls == []
    at(0.07)
    assert _hdfstokens.Keeper().token(remote(calls, cred_v0([(b"hdfs", newer)]))) == newer.url_string()
    assert len(calls) == 1


def test_keeper_keeps_a_newer_token_for_the_next_program(env, monkeypatch, tmp_path):
    # a program restarted on the same executor starts from the newest token a program before it got, not from
    # its container's (which may be dead by then); the file is the node's alone
    held, at, calls = env
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFOS_HDFS_TOKEN_CACHE", str(cache))
    newer = tok(ISSUE + LIFE // 2, ISSUE + 2 * LIFE, pw=b"newer")
    at(0.61)
    assert _hdfstokens.Keeper().token(remote(calls, cred_v1([(b"hdfs", newer)]))) == newer.url_string()
    assert cache.stat().st_mode & 0o777 == 0o600
    assert _hdfstokens.read_credentials(cache.read_bytes()) == [newer]
    calls.clear()
    assert _hdfstokens.Keeper().token(remote(calls, fail)) == newer.url_string()   # a new program
    assert calls == []
    # an older cache loses to the container's token
    cache.write_bytes(_hdfstokens.write_credentials([tok(ISSUE - LIFE, ISSUE, pw=b"old")]))
    assert _hdfstokens.Keeper().token(remote(calls, fail)) == held.url_string()


def test_url_string_reads_back(monkeypatch, tmp_path):
    t = tok(ISSUE, ISSUE + LIFE, pw=b"p" * 20)
    assert _hdfstokens.Token.from_url_string(t.url_string()) == t
    # the node's start keeps the driver's token unless the cache holds one that lives as long
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFOS_HDFS_TOKEN_CACHE", str(cache))
    _hdfstokens.keep_if_newer(t)
    assert _hdfstokens.read_credentials(cache.read_bytes()) == [t]
    _hdfstokens.keep_if_newer(tok(ISSUE - 1, ISSUE + LIFE - 1, pw=b"older"))
    assert _hdfstokens.read_credentials(cache.read_bytes()) == [t]
    later = tok(ISSUE + 1, ISSUE + LIFE + 1, pw=b"later")
    _hdfstokens.keep_if_newer(later)
    assert _hdfstokens.read_credentials(cache.read_bytes()) == [later]


def test_keeper_kept_fresh_refreshes_a_token_the_program_does_not_use(env):
    # a node's program may compute for longer than its token lives without touching HDFS; a dead token cannot
    # read its successor, so keep_fresh refreshes it on time from a thread, with no call to token()
    held, at, calls = env
    newer = tok(ISSUE + LIFE // 2, ISSUE + 2 * LIFE, pw=b"newer")
    k = _hdfstokens.Keeper()
    k.WAKE_S = 0.1  # the clock here jumps; a real one moves as the thread waits
    at(0.5)
    k.keep_fresh(remote(calls, cred_v1([(b"hdfs", newer)])))
    try:
        time.sleep(0.5)
        assert calls == []  # before 60 % of its life: nothing read
        at(0.61)
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.1)
        assert calls[:1] == [(FRESH, held.url_string())]
        assert k.token(remote([], fail)) == newer.url_string()
    finally:
        k.stop()


def test_keeper_kept_fresh_does_nothing_without_a_credentials_file(env, monkeypatch):
    monkeypatch.delenv("TFOS_HDFS_CREDENTIALS")
    k = _hdfstokens.Keeper()
    k.keep_fresh(remote([], fail))
    assert k._refresher is None


@pytest.mark.parametrize("credentials, token_file, threads", [
    (FRESH, "good", ["tfos-hdfs-token"]),  # a node's program: from the import on
    (None, "good", []),  # not a node under tfos yarn --keytab: nothing to refresh
    (FRESH, "corrupt", []),  # the first HDFS call says what is wrong with the file, not the import
])
def test_importing_tfos_fs_in_a_node_keeps_its_token_fresh(tmp_path, credentials, token_file, threads):
    # a program may take longer to import TensorFlow than its token lives, before its first HDFS call
    path = tmp_path / "container_tokens"
    now = int(time.time() * 1000)
    path.write_bytes(cred_v0([(b"hdfs", tok(now, now + 3_600_000))]) if token_file == "good" else b"HDTS\x07")
    env = dict(os.environ, HADOOP_TOKEN_FILE_LOCATION=str(path))
    env.pop("TFOS_HDFS_CREDENTIALS", None)
    if credentials:
        env["TFOS_HDFS_CREDENTIALS"] = credentials
    prog = """import threading, tfos.fs
print(sorted(t.name for t in threading.enumerate() if t.name.startswith('tfos-hdfs')))
try:
    print('token' if tfos.fs._tokens.token(None) else 'none')
except ValueError as e:
    print('ValueError: %s' % e)
"""
    out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    shown, used = out.stdout.strip().split("\n")
    assert shown == repr(threads)
    # an unreadable token file still fails each call that needs it, not only the import's try
    assert used == ("token" if token_file == "good" else "ValueError: Hadoop credentials format version 7 is unknown")
