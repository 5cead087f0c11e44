"""The C runtime's log lines inside Python reach the `logging` logger "tfos"
(python/tfos/_log.py, src/python/logsink.c): from a thread holding the GIL
and from the coordinator's loop thread that never takes it, with their
levels, under TFOS_LOG_LEVEL, after a fork and at interpreter exit; what a
script that configured nothing sees; and tfos.run's failure shown once.

Every case runs in a fresh interpreter (TFOS_LOG_LEVEL is read once per
process) with a bound on how long it may take: a hang at exit fails."""
import os
import re
import subprocess
import sys
import textwrap
import time

from conftest import PY

# A handler that collects the records of "tfos" and prints them at exit as
# "REC <level> <thread> <message>", one line each.
PRELUDE = textwrap.dedent("""
    import atexit, logging, os, sys, threading, time
    records = []
    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)
    def report():
        for r in records:
            sys.stdout.write("REC %s %s %s\\n" % (r.levelname, r.threadName, r.getMessage().replace("\\n", " | ")))
        sys.stdout.flush()
    atexit.register(report)  # before tfos is imported: runs after tfos's own exit handler
    import tfos
    from tfos import _tfos
    log = logging.getLogger("tfos")
    log.addHandler(Collect())
    log.setLevel(logging.DEBUG)
    def coordinator():
        c = _tfos.Coordinator(1, "right-secret")
        t = threading.Thread(target=c.run, name="coord-loop", daemon=True)
        t.start()
        return c, t
    def wrong_secret(c):
        try:
            _tfos.query_status(c.address, "wrong-secret", 5000)
        except PermissionError:
            pass
        else:
            raise SystemExit("the coordinator accepted a wrong secret")
""")


def run_py(body, env=None, timeout=60):
    full = dict(os.environ)
    full.pop("TFOS_LOG_LEVEL", None)
    full.update(env or {})
    return subprocess.run([PY, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=timeout, env=full)


def recs(stdout):
    return [line.split(" ", 3)[1:] for line in stdout.splitlines() if line.startswith("REC ")]


def test_warning_from_a_thread_holding_the_gil():
    # Coordinator.stop() runs tfos_coord_stop with the GIL held: it logs a
    # warning in the calling thread.
    r = run_py("""
        c, t = coordinator()
        c.stop("stopped by test_logging")
        c.close()
    """)
    assert r.returncode == 0, r.stderr
    got = [x for x in recs(r.stdout) if "stopped by test_logging" in x[2]]
    assert got == [["WARNING", "MainThread", "coordinator: stopping: stopped by test_logging"]], r.stdout
    assert "stopped by test_logging" not in r.stderr, "a configured handler takes the line, not stderr"


def test_lines_from_the_loop_thread_without_the_gil():
    # The coordinator's loop runs in run() with the GIL released: its lines
    # are queued and delivered by the thread tfos-log. A wrong secret is a
    # warning, a node's report_abort an error.
    r = run_py("""
        c, t = coordinator()
        wrong_secret(c)
        _tfos.report_abort(c.address, "right-secret", 0, "no GPU here (test_logging)")
        deadline = time.monotonic() + 20
        while not any(r.levelno == logging.ERROR for r in records) and time.monotonic() < deadline:
            time.sleep(0.05)
        c.close()
    """)
    assert r.returncode == 0, r.stderr
    got = recs(r.stdout)
    warn = [x for x in got if "does not know the cluster secret" in x[2]]
    assert len(warn) == 1 and warn[0][:2] == ["WARNING", "tfos-log"], got
    err = [x for x in got if "no GPU here (test_logging)" in x[2]]
    assert err and err[0][:2] == ["ERROR", "tfos-log"], got


def test_tfos_log_level_error_suppresses_warnings():
    r = run_py("""
        c, t = coordinator()
        wrong_secret(c)
        c.stop("stopped by test_logging")
        c2, t2 = coordinator()  # an error still passes
        _tfos.report_abort(c2.address, "right-secret", 0, "no GPU here (test_logging)")
        deadline = time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            time.sleep(0.05)
        c.close(); c2.close()
    """, env={"TFOS_LOG_LEVEL": "error"})
    assert r.returncode == 0, r.stderr
    got = recs(r.stdout)
    assert got and all(x[0] == "ERROR" for x in got), got
    assert any("no GPU here (test_logging)" in x[2] for x in got), got
    assert "cluster secret" not in r.stdout + r.stderr
    assert "stopped by test_logging" not in r.stdout + r.stderr


def test_queued_lines_are_delivered_at_exit_without_a_hang():
    # A slow handler keeps lines in the queue; the program exits at once.
    # tfos's exit handler stops the pump and delivers the rest; nothing is
    # lost and the interpreter exits. Each wrong secret is one warning of
    # the coordinator: "rejected status query ... does not know the cluster
    # secret", or, when the client found the coordinator's proof wrong
    # first and closed (the handshake is mutual), "closed before
    # authenticating". One the loop thread logs after the pump stopped at
    # exit goes to stderr, as a line: delivered too.
    r = run_py("""
        class Slow(logging.Handler):
            def emit(self, record):
                time.sleep(0.3)
        log.addHandler(Slow())
        c, t = coordinator()
        for _ in range(5):
            wrong_secret(c)
        sys.stdout.write("QUEUED\\n")
    """, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "QUEUED" in r.stdout
    said = re.compile(r"rejected status query from (\S+): it does not know the cluster secret")
    got = {m.group(1) for x in recs(r.stdout) for m in [said.search(x[2])] if m}
    late = {m.group(1) for ln in r.stderr.splitlines() for m in [said.search(ln)] if m}
    assert got and len(got | late) == 5, (got, late, r.stdout, r.stderr)


def test_lines_after_fork_reach_the_childs_logger():
    # pyspark's daemon forks its Python workers: the pump thread does not
    # survive a fork, the child starts its own.
    r = run_py("""
        pid = os.fork()
        if pid == 0:
            records.clear()
            c, t = coordinator()
            wrong_secret(c)
            deadline = time.monotonic() + 20
            while not records and time.monotonic() < deadline:
                time.sleep(0.05)
            for x in records:
                sys.stdout.write("CHILD %s %s\\n" % (x.threadName, x.getMessage()))
            sys.stdout.flush()
            os._exit(0 if records else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "CHILD tfos-log coordinator: rejected" in r.stdout, r.stdout


UNCONFIGURED = textwrap.dedent("""
    import logging, sys
    {config}
    import tfos
    code = tfos.run([sys.executable, "-c", {prog!r}], workers=1, log_dir={log_dir!r}, max_restarts=0,
                    check={check})
    print("CODE", code)
""")


def run_script(tmp_path, prog, config="", check=True, env=None):
    src = UNCONFIGURED.format(config=config, prog=prog, log_dir=str(tmp_path / "logs"), check=check)
    full = dict(os.environ)
    full.pop("TFOS_LOG_LEVEL", None)
    full.update(env or {})
    return subprocess.run([PY, "-c", src], capture_output=True, text=True, timeout=90, env=full)


def test_a_script_without_logging_config_sees_the_clis_lines(tmp_path):
    r = run_script(tmp_path, "print('hello from the node')")
    assert r.returncode == 0, r.stderr
    assert "CODE 0" in r.stdout
    # INFO lines as `tfos run` shows them, from the default handler
    assert "tfos: cluster of 1 nodes starting" in r.stderr, r.stderr
    assert "tfos: all nodes finished successfully" in r.stderr, r.stderr
    # configured at WARNING: the program's logging decides, INFO lines go
    cfg = "logging.basicConfig(level=logging.WARNING, format='CFG %(levelname)s %(name)s %(message)s')"
    r = run_script(tmp_path, "print('hello from the node')", config=cfg)
    assert r.returncode == 0, r.stderr
    assert "cluster of 1 nodes starting" not in r.stderr, r.stderr
    # TFOS_LOG_LEVEL=warn: no INFO lines either
    r = run_script(tmp_path, "print('hello from the node')", env={"TFOS_LOG_LEVEL": "warn"})
    assert r.returncode == 0, r.stderr
    assert "nodes starting" not in r.stderr and "finished successfully" not in r.stderr, r.stderr


def test_tfos_run_failure_is_shown_once(tmp_path):
    prog = "import sys; print('BOOM-7f3a', file=sys.stderr); sys.exit(3)"
    r = run_script(tmp_path, prog)
    assert r.returncode == 1, r.stderr
    out = r.stderr
    assert "ClusterError: the cluster failed (exit code 1)" in out, out
    # the summary (the node's last lines and where the logs are) once: in the exception
    assert out.count("last lines of worker:0") == 1, out
    assert "tfos: error: the cluster failed" not in out, out
    assert out.count("  | BOOM-7f3a") == 1, out
    # the coordinator's event line stays, as in `tfos run`
    assert "tfos: error: coordinator: worker:0" in out, out
    # check=False: nothing is raised, so the launcher's error line is the report
    r = run_script(tmp_path, prog, check=False)
    assert r.returncode == 0 and "CODE 1" in r.stdout, r.stderr
    assert r.stderr.count("tfos: error: the cluster failed:") == 1, r.stderr
    assert r.stderr.count("last lines of worker:0") == 1, r.stderr


# Spark's console progress bar: drawn with a carriage return and no newline
BAR = "[Stage 3:>                                                          (0 + 2) / 2]"


def test_a_line_on_a_terminal_does_not_start_inside_spark_progress_bar():
    """Issue 36, item 11: a tfos line written while Spark's progress bar was
    on the terminal began in the bar's middle ("[Stage 3:> ...]tfos: ...").
    On a terminal the line now clears the bar first; on a pipe or file it is
    written as it is."""
    import pty
    body = """
        import logging, sys
        for h in list(logging.getLogger("tfos").handlers):
            if type(h).__name__ == "Collect":
                logging.getLogger("tfos").removeHandler(h)
        logging.getLogger("tfos").setLevel(logging.INFO)
        sys.stderr.write("\\r%s" % {bar!r}); sys.stderr.flush()
        logging.getLogger("tfos").warning("feeding (attempt 1): 12 s")
    """.format(bar=BAR)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([PY, "-c", PRELUDE + textwrap.dedent(body)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=slave, env=dict(os.environ))
        os.close(slave)
        slave = None
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0, out
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    text = out.decode("utf-8", "replace")
    assert BAR + "\r\x1b[Ktfos: warning: feeding (attempt 1): 12 s" in text, repr(text)
    # not a terminal: the line as it is, no control characters in a log file
    r = run_py(body)
    assert r.returncode == 0, r.stderr
    assert r.stderr.endswith(BAR + "tfos: warning: feeding (attempt 1): 12 s\n"), repr(r.stderr)


def test_a_wait_says_what_it_waits_for_until_it_ends():
    """The Spark clients' progress lines (_spark/progress.Ticker): a line
    while a blocking call runs, none once it returned."""
    import logging
    import threading
    from tfos._spark.progress import Ticker

    seen = []
    first = threading.Event()

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
            first.set()

    log = logging.getLogger("tfos")
    grab, level = Grab(), log.level
    log.addHandler(grab)
    log.setLevel(logging.INFO)
    try:
        with Ticker(lambda secs: "waiting for the node stage, %.0f s" % secs, first=0.01, every=0.01):
            assert first.wait(30), "no progress line in 30 s"
        after = len(seen)
        time.sleep(0.2)
        assert len(seen) == after, seen[after:]
        assert seen[0].startswith("waiting for the node stage, "), seen
        with Ticker(lambda secs: "never", first=0.01, every=0.01, quiet=True):
            time.sleep(0.2)
        assert "never" not in seen
    finally:
        log.removeHandler(grab)
        log.setLevel(level)
