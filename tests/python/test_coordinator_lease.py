"""`tfos coordinator` as tfos.spark.Cluster runs it on an executor: its
address in a file, a lease that its client's queries renew (no query for
--lease seconds: the client is gone and the cluster is stopped), commands
carried by queries (end_feed, stop, release, drain), and --linger: the outcome stays
readable until the client releases it."""
import json
import os
import subprocess
import time

import pytest

from conftest import tfos_cli, wait_for

from tfos import _tfos

SECRET = "ab" * 32


def start(tmp_path, *args):
    path = tmp_path / "address"
    proc = subprocess.Popen([tfos_cli(), "coordinator", "--workers", "1", "--address-file", str(path)] + list(args),
                            env=dict(os.environ, TFOS_SECRET=SECRET), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_for(path.exists, 10), "no address file"
    addr = path.read_text().strip()
    assert addr.startswith("127.0.0.1:") and not (tmp_path / "address.tmp").exists()
    return proc, addr


def query(addr, command=None, reason=None):
    return json.loads(_tfos.query_status(addr, SECRET, 5000, command, reason))


def test_lease_renewed_by_queries_then_runs_out(tmp_path):
    proc, addr = start(tmp_path, "--lease", "2", "--attempt", "3")
    try:
        t0 = time.monotonic()
        for _ in range(4):  # 4 s of queries, one a second: the 2 s lease holds
            time.sleep(1)
            st = query(addr)
            assert st["state"] == "reserving" and not st["failure"], st
        assert st["attempt"] == 3
        # no more queries: the lease runs out, the cluster is stopped, the process ends
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.wait()
    assert time.monotonic() - t0 >= 5.5
    assert proc.returncode == 1
    assert "the client's lease ran out: no word from it for 2 s" in err, err


def test_stop_command_records_its_reason_and_linger_ends_on_release(tmp_path):
    proc, addr = start(tmp_path, "--linger", "60")
    try:
        st = query(addr, "stop", "the user asked\nto stop")
        assert st["failure"] == "the user asked to stop", st
        assert wait_for(lambda: query(addr)["state"] == "failed", 10)
        time.sleep(1)
        assert proc.poll() is None  # lingering: the outcome is still readable
        assert query(addr)["failure"] == "the user asked to stop"
        query(addr, "release")
        proc.communicate(timeout=10)  # released: it exits at once, not after 60 s
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1


def test_end_feed_without_nodes_and_unknown_commands(tmp_path):
    proc, addr = start(tmp_path)
    try:
        assert query(addr, "end_feed")["state"] == "reserving"
        # a drain before any program runs cannot start: no error, and the status shows none under way
        st = query(addr, "drain", "capacity came back")
        assert st["state"] == "reserving" and "drain" not in st, st
        with pytest.raises(ValueError, match="unknown command 'frobnicate'"):
            query(addr, "frobnicate")
        with pytest.raises(Exception, match="secret|auth"):
            _tfos.query_status(addr, "cd" * 32, 5000)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


@pytest.mark.parametrize("args,flag", [
    (["--lease", "0"], "--lease"),
    (["--linger", "-1"], "--linger"),
    (["--attempt", "0"], "--attempt"),
    (["--address-file"], "--address-file"),
])
def test_usage_errors(args, flag):
    r = subprocess.run([tfos_cli(), "coordinator", "--workers", "1"] + args, capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 2 and flag in r.stderr.splitlines()[0], r.stderr


def test_address_file_that_cannot_be_written(tmp_path):
    r = subprocess.run([tfos_cli(), "coordinator", "--workers", "1", "--address-file",
                        str(tmp_path / "no" / "such" / "dir" / "address")], capture_output=True, text=True,
                       timeout=10, env=dict(os.environ, TFOS_SECRET=SECRET))
    assert r.returncode == 1 and "cannot write" in r.stderr and "No such file" in r.stderr, r.stderr
