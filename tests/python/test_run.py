"""`tfos run` end to end with real processes: the environment contract, output
relaying, failure detection and reporting, signals, and no orphans."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import PY, coordinator_address, pids_with, prog, run_tfos, start_coordinator, tfos_cli, wait_for


def test_env_contract_every_role(tmp_path, marker):
    out = tmp_path / "ctx"
    out.mkdir()
    r = run_tfos(["run", "--workers", "2", "--ps", "1", "--chief", "--evaluator", "--ps-runs-program",
                  "--log-dir", str(tmp_path / "logs"), "--", PY, prog("dump_env.py"), str(out), marker])
    assert r.returncode == 0, r.stderr
    recs = {p.stem: json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(recs) == ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"]
    cluster = json.loads(recs["worker-1"]["env"]["TF_CONFIG"])["cluster"]
    assert list(cluster) == ["chief", "worker", "ps", "evaluator"]
    assert [len(cluster[j]) for j in cluster] == [1, 2, 1, 1]
    addrs = [a for j in cluster for a in cluster[j]]
    assert len(set(addrs)) == 5, "every node has its own port"
    for name, rec in recs.items():
        job, index = name.rsplit("-", 1)
        env, ctx = rec["env"], rec["ctx"]
        tfc = json.loads(env["TF_CONFIG"])
        assert tfc == {"cluster": cluster, "task": {"type": job, "index": int(index)}}
        assert ctx["job_name"] == job and ctx["task_index"] == int(index)
        assert ctx["cluster_spec"] == cluster
        assert ctx["num_workers"] == 3
        assert ctx["attempt"] == 1
        assert "%s:%d" % ("127.0.0.1", ctx["port"]) == cluster[job][int(index)]
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert int(env["MASTER_PORT"]) == int(cluster["chief"][0].split(":")[1])
        assert env["WORLD_SIZE"] == "3" and env["JAX_NUM_PROCESSES"] == "3"
        assert env["JAX_COORDINATOR_ADDRESS"] == cluster["chief"][0]
    # executor ids follow TFoS's order: ps, chief, evaluator, workers
    assert [recs[n]["ctx"]["executor_id"] for n in ("ps-0", "chief-0", "evaluator-0", "worker-0", "worker-1")] \
        == [0, 1, 2, 3, 4]
    assert [recs[n]["env"].get("RANK") for n in ("chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0")] \
        == ["0", "1", "2", None, None]
    assert recs["worker-1"]["env"]["LOCAL_RANK"] == "2"


def test_tf_config_without_chief(tmp_path, marker):
    out = tmp_path / "ctx"
    out.mkdir()
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("dump_env.py"), str(out), marker])
    assert r.returncode == 0, r.stderr
    for i in range(2):
        rec = json.loads((out / ("worker-%d.json" % i)).read_text())
        tfc = json.loads(rec["env"]["TF_CONFIG"])
        assert list(tfc["cluster"]) == ["worker"] and len(tfc["cluster"]["worker"]) == 2
        assert tfc["task"] == {"type": "worker", "index": i}
        assert rec["env"]["RANK"] == str(i)


def test_output_is_prefixed_and_logged(tmp_path, marker):
    logs = tmp_path / "logs"
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(logs), "--", "sh", "-c",
                  'echo "out of $TFOS_JOB_NAME $TFOS_TASK_INDEX"; echo "err of $TFOS_TASK_INDEX" >&2; printf "no newline"',
                  marker])
    assert r.returncode == 0, r.stderr
    for i in range(2):
        assert "[worker:%d] out of worker %d\n" % (i, i) in r.stdout
        assert "[worker:%d] no newline\n" % i in r.stdout
        assert "[worker:%d] err of %d\n" % (i, i) in r.stderr
        text = (logs / ("worker-%d.log" % i)).read_text()
        assert "out of worker %d\n" % i in text and "err of %d\n" % i in text
    assert "all nodes finished successfully" in r.stderr


# what TensorFlow 2.21 printed at load in every process of a CPU machine
# whose environment had torch's CUDA wheels (issue 36, item 10)
TF_NOISE = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1764150000.123456 4242 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.",
    "E0000 00:00:1764150000.223456 4242 cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
)


def test_tensorflow_load_noise_stays_in_the_node_logs(tmp_path, marker):
    """TensorFlow's absl notice, "Could not find cuda drivers" and the ERROR
    "failed call to cuInit" reached the console from every node of a CPU
    machine; they now stay in the node's log file, the program's own
    lines, warnings and errors pass, and TF_CPP_MIN_LOG_LEVEL=0 shows them."""
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("a machine with an NVIDIA driver: a failed cuInit there is a real error, shown")
    script = "; ".join("echo '%s' >&2" % line for line in TF_NOISE)
    script += "; echo 'E0000 real.cc:1] a real error' >&2; echo 'epoch 1'"
    logs = tmp_path / "logs"
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(logs), "--", "sh", "-c", script, marker],
                 env={"TF_CPP_MIN_LOG_LEVEL": "1"})
    assert r.returncode == 0, r.stderr
    assert "[worker:0] epoch 1\n" in r.stdout, r.stdout
    assert "[worker:0] E0000 real.cc:1] a real error\n" in r.stderr, r.stderr
    for line in TF_NOISE:
        assert line not in r.stderr and line not in r.stdout, r.stderr
        assert line + "\n" in (logs / "worker-0.log").read_text()
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs0"), "--", "sh", "-c", script, marker],
                 env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert r.returncode == 0, r.stderr
    for line in TF_NOISE:
        assert "[worker:0] %s\n" % line in r.stderr, r.stderr


def test_failing_node_stops_the_cluster_with_a_summary(tmp_path, marker):
    pids = tmp_path / "pids"
    pids.mkdir()
    t0 = time.monotonic()
    r = run_tfos(["run", "--workers", "3", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("behave.py"), marker, str(pids), "worker:1=exit3", "default=sleep"])
    elapsed = time.monotonic() - t0
    assert r.returncode == 1, r.stderr
    # the other workers sleep for 300 s: the run ended because worker:1's exit was seen
    assert elapsed < 60
    assert "worker:1 (executor 1, host 127.0.0.1, pid " in r.stderr
    assert "failed: exit code 3" in r.stderr
    assert "last lines of worker:1" in r.stderr
    assert "ValueError: bad batch" in r.stderr  # its last lines are in the summary
    assert "worker:0 stopped: signal 15 (Terminated)" in r.stderr
    assert "logs of every node are in %s" % (tmp_path / "logs") in r.stderr


def test_the_node_that_failed_first_is_reported_not_the_first_report(tmp_path, marker):
    """Both workers catch their failures and say when (TFOS_ERROR_FILE, as
    tfos's Python wrapper does). worker:1 catches its own first but takes its
    time to end; worker:0 catches its 0.7 s later and ends at once, so its
    report comes first. The run's failure is worker:1's."""
    script = """
    if [ "$TFOS_TASK_INDEX" = 1 ]; then
      trap "" TERM
      date +%s.%N > "$TFOS_ERROR_FILE"
      echo "ValueError: rank one cannot go on" >&2
      sleep 2; exit 3
    fi
    sleep 0.7; date +%s.%N > "$TFOS_ERROR_FILE"
    echo "RuntimeError: Connection closed by peer" >&2; exit 1
    """
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "0", "--failure-grace", "20", "--", "sh", "-c",
                  script, marker])
    assert r.returncode == 1, r.stderr
    summary = r.stderr[r.stderr.index("worker:0 (executor 0"):]  # the failure as first reported
    assert "failed: exit code 1" in summary, r.stderr
    assert re.search(r"worker:1 \(executor 1, host 127.0.0.1, pid \d+\) failed: exit code 3, 0\.\d+ s before "
                     r"worker:0's failure, which was reported first", r.stderr), r.stderr
    final = r.stderr[r.stderr.rindex("the cluster failed:"):]
    assert "worker:1" in final and "ValueError: rank one cannot go on" in final, r.stderr
    assert "RuntimeError" not in final, r.stderr


def test_detection_latency_under_2s(tmp_path, marker):
    """Time from the program's death to the coordinator knowing, read live from
    the launcher's stderr while the surviving workers are still running."""
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", "2", "--max-restarts", "0", "--log-dir",
                             str(tmp_path / "logs"), "--",
                             PY, prog("behave.py"), marker, str(pids), "worker:1=kill9", "default=sleep"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    seen_at = None
    try:
        for line in proc.stderr:
            if "worker:1" in line and "failed: signal 9 (Killed)" in line:
                seen_at = time.time()
                break
        proc.wait(timeout=60)
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen_at is not None
    killed_at = float(re.search(r"about to be killed at ([\d.]+)", out).group(1))
    assert seen_at - killed_at < 2.0, "detected %.3f s after the kill" % (seen_at - killed_at)
    assert proc.returncode == 1


def test_program_not_found(tmp_path):
    r = run_tfos(["run", "--workers", "1", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs"), "--",
                  "/nonexistent/program"])
    assert r.returncode == 1
    assert "could not start '/nonexistent/program': No such file or directory" in r.stderr


def _start_and_wait_for_pids(tmp_path, marker, n, extra=()):
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([tfos_cli(), "run", "--workers", str(n), "--grace", "2", "--max-restarts", "0", "--log-dir",
                             str(tmp_path / "logs"), "--", PY, prog("behave.py"), marker, str(pids)] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # a file is there before its pid is written in it (behave.py writes it in place): wait for n pids
    def written():
        texts = [p.read_text() for p in pids.iterdir()]
        return len(texts) == n and all(t.strip().isdigit() for t in texts)
    assert wait_for(written, 30), "programs did not start"
    prog_pids = [int(p.read_text()) for p in pids.iterdir()]
    return proc, prog_pids


def test_sigkill_of_launcher_leaves_no_process(tmp_path, marker):
    proc, prog_pids = _start_and_wait_for_pids(tmp_path, marker, 3, ["default=sleep"])
    assert all(pid in pids_with(marker) for pid in prog_pids)
    proc.kill()  # SIGKILL: no chance to clean up in the launcher itself
    proc.communicate(timeout=30)
    assert wait_for(lambda: not pids_with(marker), 10), "left running: %s" % pids_with(marker)
    assert wait_for(lambda: not pids_with(tfos_cli() + " node"), 10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_everything_cleanly(tmp_path, marker, sig):
    proc, _ = _start_and_wait_for_pids(tmp_path, marker, 2, ["default=sleep"])
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert "interrupted by signal %d" % sig in err
    assert wait_for(lambda: not pids_with(marker), 10)


def test_program_ignoring_sigterm_is_killed_after_grace(tmp_path, marker):
    proc, _ = _start_and_wait_for_pids(tmp_path, marker, 2, ["worker:0=hang", "worker:1=exit3_when_all_up"])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "program did not stop after SIGTERM; sending SIGKILL" in err
    assert "worker:0 stopped: signal 9 (Killed)" in err


def test_reserved_port_is_free_for_the_program(tmp_path, marker):
    r = run_tfos(["run", "--workers", "3", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("bind_port.py"), marker])
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"\] bound \d+", r.stdout)) == 3, r.stdout + r.stderr  # no attempt restarted


def test_port_held_until_program_starts(tmp_path, marker):
    secret = "ab" * 32
    coord = start_coordinator(["--workers", "2", "--reservation-timeout", "60"], {"TFOS_SECRET": secret})
    addr = coordinator_address(coord)
    env = dict(os.environ, TFOS_SECRET=secret)
    node0 = subprocess.Popen([tfos_cli(), "node", "--coord", addr, "--executor-id", "0", "--", PY,
                              prog("bind_port.py"), marker], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        port = None
        while port is None:
            line = coord.stderr.readline()
            assert line, "coordinator ended early: %s" % "".join(lines)
            lines.append(line)
            m = re.search(r"registered executor 0 as worker:0 at 127.0.0.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        # registered, cluster not yet formed: nobody else may take that port
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError):
            s.bind(("0.0.0.0", port))
        s.close()
        node1 = subprocess.Popen([tfos_cli(), "node", "--coord", addr, "--executor-id", "1", "--", PY,
                                  prog("bind_port.py"), marker], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        out0, err0 = node0.communicate(timeout=60)
        node1.communicate(timeout=60)
        # ...and the program itself could bind it at once
        assert "bound %d" % port in out0, (node0.returncode, out0, err0[-3000:], "".join(lines))
        assert node0.returncode == 0 and node1.returncode == 0
        assert coord.wait(timeout=30) == 0
    finally:
        for p in (coord, node0):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_reservation_timeout_names_missing_nodes(tmp_path, marker):
    secret = "cd" * 32
    coord = start_coordinator(["--workers", "3", "--ps", "1", "--reservation-timeout", "2"], {"TFOS_SECRET": secret})
    addr = coordinator_address(coord)
    node = subprocess.Popen([tfos_cli(), "node", "--coord", addr, "--executor-id", "1", "--", "sleep", "60",
                             marker], env=dict(os.environ, TFOS_SECRET=secret), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        _, err = coord.communicate(timeout=30)
        waited = time.monotonic() - t0
        _, nerr = node.communicate(timeout=30)
    finally:
        for p in (coord, node):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert coord.returncode == 124
    assert "reservation timed out after 2 s: 1 of 4 nodes registered" in err
    assert "missing: executor 0 (ps:0), executor 2 (worker:1), executor 3 (worker:2)" in err
    assert waited < 20
    assert node.returncode != 0
    assert "reservation timed out" in nerr  # the waiting node is told why, and leaves


def test_wrong_secret_is_rejected(tmp_path, marker):
    coord = start_coordinator(["--workers", "1", "--reservation-timeout", "5"], {"TFOS_SECRET": "ef" * 32})
    addr = coordinator_address(coord)
    node = subprocess.run([tfos_cli(), "node", "--coord", addr, "--executor-id", "0", "--", "true", marker],
                          env=dict(os.environ, TFOS_SECRET="00" * 32), capture_output=True, text=True, timeout=30)
    _, err = coord.communicate(timeout=30)
    assert node.returncode != 0
    assert "authentication failed: wrong cluster secret" in node.stderr
    assert "does not know the cluster secret" in err
    assert coord.returncode == 124  # the impostor never took the slot


def _frame(mtype, payload=b"", version=None, length=None):
    from tfos import _tfos
    version = _tfos.PROTOCOL_VERSION if version is None else version
    n = len(payload) if length is None else length
    return b"TFOS" + bytes([version, mtype, 0, 0]) + n.to_bytes(4, "big") + payload


def test_coordinator_survives_hostile_peers(tmp_path, marker):
    secret = "12" * 32
    coord = start_coordinator(["--workers", "1", "--reservation-timeout", "60"], {"TFOS_SECRET": secret})
    addr = coordinator_address(coord)
    host, port = addr.rsplit(":", 1)
    attacks = [
        b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n",            # not our protocol
        _frame(2, length=0x7FFFFFFF),                            # oversized
        _frame(2, b"mac=00\nexecutor_id=0\n", length=500),       # truncated, then closed
        _frame(2, b"\xff\xfe\x00garbage"),                       # malformed payload
        _frame(2, b"mac=" + b"0" * 64 + b"\nexecutor_id=0\nhost=127.0.0.1\nport=1\npid=1\n"),  # bad mac
        _frame(6, b"x=1\n"),                                     # heartbeat before auth
        b"",                                                     # connect and say nothing, then close
    ]
    for data in attacks:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.recv(4096)  # the greeting
            if data:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
    # still alive and able to form the cluster
    node = subprocess.run([tfos_cli(), "node", "--coord", addr, "--executor-id", "0", "--", "sh", "-c",
                           "echo formed", marker], env=dict(os.environ, TFOS_SECRET=secret),
                          capture_output=True, text=True, timeout=60)
    _, err = coord.communicate(timeout=30)
    assert node.returncode == 0, node.stderr
    assert "[worker:0] formed" in node.stdout
    assert coord.returncode == 0, err
    for expected in ("bad magic", "oversized frame", "truncated", "malformed frame",
                     "does not know the cluster secret", "not an authenticated REGISTER",
                     "closed before authenticating"):
        assert expected in err, "no log line for %r in:\n%s" % (expected, err)


def test_tensorboard_runs_beside_worker_0_and_ends_with_it(tmp_path, marker):
    """--tensorboard: TensorBoard starts beside worker 0's program (no chief),
    on the port and log dir the program is told, answers while the program
    runs, and is gone once the run is over."""
    tb_dir = tmp_path / ("tb-" + marker)
    r = run_tfos(["run", "--workers", "2", "--tensorboard", "--tensorboard-logdir", str(tb_dir), "--log-dir",
                  str(tmp_path / "logs"), "--", PY, prog("tb_probe.py")], timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the URL on the node's stderr, as tfos's own lines are
    m = re.search(r"^\[worker:0\] tfos: TensorBoard at http://127\.0\.0\.1:(\d+)/ \(logdir (.*)\)$", r.stderr, re.M)
    assert m and m.group(2) == str(tb_dir), r.stderr
    assert "[worker:0] TBPROBE worker:0 port=%s logdir=%s" % (m.group(1), tb_dir) in r.stdout, r.stdout
    assert "[worker:1] TBPROBE worker:1 port=None logdir=None" in r.stdout, r.stdout
    assert '[worker:0] TB answered {"logdir": "%s"}' % tb_dir in r.stdout, r.stdout
    assert tb_dir.is_dir() and (tmp_path / "logs" / "tensorboard.log").is_file()
    assert wait_for(lambda: not pids_with(str(tb_dir)), 10), pids_with(str(tb_dir))


def test_tensorboard_goes_on_the_chief_when_there_is_one(tmp_path):
    r = run_tfos(["run", "--chief", "--workers", "1", "--tensorboard", "--log-dir", str(tmp_path / "logs"), "--",
                  PY, prog("tb_probe.py")], timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    logdir = str(tmp_path / "logs" / "tensorboard")
    assert "[chief:0] tfos: TensorBoard at http://127.0.0.1:" in r.stderr, r.stderr
    assert '[chief:0] TB answered {"logdir": "%s"}' % logdir in r.stdout, r.stdout
    assert "[worker:0] TBPROBE worker:0 port=None" in r.stdout, r.stdout
