"""Hardening against floods and stuck peers (issue 15): idle connections
cannot keep a cluster from forming, junk cannot flood the log, and silent
producers on a node's feed socket cannot block its agent."""
import os
import socket
import subprocess
import textwrap
import time

from conftest import PY, pids_with, run_tfos, tfos_cli, wait_for


def _coordinator(args, secret):
    return subprocess.Popen([tfos_cli(), "coordinator"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, TFOS_SECRET=secret))


def _address(coord):
    line = coord.stdout.readline()
    if line.startswith("TFOS_SECRET="):
        line = coord.stdout.readline()
    assert line.startswith("TFOS_COORD_ADDR="), line
    return line.strip().split("=", 1)[1]


def test_idle_connection_flood_does_not_stop_the_cluster_forming(tmp_path, marker):
    secret = "5a" * 32
    coord = _coordinator(["--workers", "1", "--reservation-timeout", "60"], secret)
    host, port = _address(coord).rsplit(":", 1)
    idle = []
    try:
        # more idle, unauthenticated connections than the coordinator has slots
        for _ in range(1100):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect((host, int(port)))
            except BlockingIOError:
                pass
            idle.append(s)
        node = subprocess.run([tfos_cli(), "node", "--coord", "%s:%s" % (host, port), "--executor-id", "0",
                               "--", "sh", "-c", "echo formed", marker], env=dict(os.environ, TFOS_SECRET=secret),
                              capture_output=True, text=True, timeout=90)
    finally:
        for s in idle:
            s.close()
    _, err = coord.communicate(timeout=60)
    assert node.returncode == 0, node.stderr[-3000:]
    assert "[worker:0] formed" in node.stdout
    assert coord.returncode == 0, err[-3000:]
    # the junk is summed up, not written out line by line
    warnings = [ln for ln in err.splitlines() if "dropped peer" in ln or "refused" in ln]
    assert len(warnings) <= 30, "%d warning lines" % len(warnings)
    assert "were not shown" in err or len(warnings) < 10
    assert wait_for(lambda: not pids_with(marker), 10)


SILENT_FEED = textwrap.dedent('''
    import os, sys, time
    from tfos import TFNode
    ctx = TFNode.get_context()
    with open(sys.argv[2], "w") as f:
        f.write("%s %s" % (os.environ["TFOS_CLUSTER_ID"], os.environ["TFOS_SECRET"]))
    feed = TFNode.DataFeed(ctx.mgr, True)
    rows = 0
    while not feed.should_stop():
        rows += len(feed.next_batch(100))
        if rows >= 300:
            break
    print("rows %d" % rows, flush=True)
''')


def test_silent_feed_producers_do_not_block_the_agent(tmp_path, marker):
    from tfos.feed import FeedClient
    prog = tmp_path / "reader.py"
    prog.write_text(SILENT_FEED)
    info = tmp_path / "info"
    p = subprocess.Popen([tfos_cli(), "run", "--workers", "1", "--max-restarts", "0", "--log-dir",
                          str(tmp_path / "logs"), "--", PY, str(prog), marker, str(info)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    silent = []
    try:
        assert wait_for(lambda: info.exists() and info.read_text().count(" ") == 1, 60)
        cluster_id, secret = info.read_text().split()
        for _ in range(40):  # more than the agent handles at once, each saying nothing
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\0tfos-feed-%s-0" % cluster_id)
            silent.append(s)
        t0 = time.monotonic()
        client = FeedClient(0, cluster_id, secret, timeout=20)
        client.feed_partition(([i] for i in range(300)), 0)
        client.close()
        took = time.monotonic() - t0
        out, err = p.communicate(timeout=60)
    finally:
        for s in silent:
            s.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-3000:]
    assert "[worker:0] rows 300" in out
    assert took < 20  # the producer got through while the silent ones waited
    assert wait_for(lambda: not pids_with(marker), 10)
