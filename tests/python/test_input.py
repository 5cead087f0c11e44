"""`tfos run --input`: files fed into the trainers (InputMode.SPARK without
Spark): a real TensorFlow program trains on a fed file; epochs re-feed;
bad files stop the cluster with the file, line and column."""
import os
import re
import signal
import subprocess

import numpy as np
import pytest

from conftest import PY, ROOT, pids_with, run_tfos, tfos_cli, wait_for

EXAMPLE = os.path.join(ROOT, "examples", "digits")

COUNT = ("import sys\n"
         "from tfos import TFNode\n"
         "ctx = TFNode.get_context()\n"
         "df = TFNode.DataFeed(ctx.mgr)\n"
         "n = 0\n"
         "first = None\n"
         "while not df.should_stop():\n"
         "    rows = df.next_batch(100)\n"
         "    if not rows: break\n"
         "    first = first if first is not None else rows[0]\n"
         "    n += len(rows)\n"
         "print('node %s:%d rows %d first %r' % (ctx.job_name, ctx.task_index, n, first), flush=True)\n")


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "npy"])
def test_tensorflow_trains_on_a_fed_file(tmp_path, marker, fmt):
    data = tmp_path / marker / ("digits." + fmt)
    data.parent.mkdir()
    subprocess.run([PY, os.path.join(EXAMPLE, "make_data.py"), str(data)], check=True, capture_output=True,
                   timeout=120)
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--input", str(data), "--epochs",
                  "15", "--partition-rows", "500", "--", PY, os.path.join(EXAMPLE, "train_feed.py"),
                  "--model-dir", str(tmp_path / "model")], timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    fed = re.search(r"fed (\d+) rows \((\d+) partitions", r.stderr)
    assert fed and int(fed.group(1)) == 1437 * 15 and int(fed.group(2)) == 45
    trained = [int(n) for n in re.findall(r"trained on (\d+) fed rows", r.stdout)]
    assert len(trained) == 2 and sum(trained) == 1437 * 15  # every row reached exactly one worker
    assert float(re.search(r"test accuracy: ([\d.]+)", r.stdout).group(1)) >= 0.90


def test_partitions_alternate_between_workers_and_epochs_refeed(tmp_path, marker):
    path = tmp_path / "n.npy"
    np.save(path, np.arange(2500, dtype=np.int64))
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--input", str(path),
                  "--partition-rows", "1000", "--epochs", "2", "--", PY, "-c", COUNT, marker])
    assert r.returncode == 0, r.stderr
    rows = dict(re.findall(r"node (worker:\d) rows (\d+)", r.stdout))
    # epoch 1: 1000 -> w0, 1000 -> w1, 500 -> w0; epoch 2 continues the turn: 1000 -> w1, 1000 -> w0, 500 -> w1
    assert rows == {"worker:0": "2500", "worker:1": "2500"}
    assert "node worker:0:0 rows" not in r.stdout
    assert "first 0" in r.stdout and "first 1000" in r.stdout


@pytest.mark.parametrize("name,text,message", [
    ("bad.csv", "a,b\n1,2.5\n2,3.5\n3,abc\n", "bad.csv line 4, column 2: 'abc' is not a number"),
    ("ragged.csv", "1,2\n3,4\n5\n", "ragged.csv line 3: 1 fields where the first row has 2"),
    ("bad.jsonl", '{"a": 1}\n{"a": null}\n', "bad.jsonl line 2: null in column 1"),
    ("keys.jsonl", '{"a": 1}\n{"b": 2}\n', "keys.jsonl line 2: key 'b' where the first row has 'a'"),
    # issue 35: Latin-1 in a text column was taken and failed in the program ("column '' is not UTF-8")
    ("latin1.csv", b"a,b\n1,x\n2,caf\xe9\n", "latin1.csv line 3, column 2: byte 4 of the field is 0xe9, which is "
     "not UTF-8"),
])
def test_bad_input_names_file_line_and_column(tmp_path, marker, name, text, message):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path), "--",
                  PY, "-c", COUNT, marker])
    assert r.returncode == 1
    assert "the feed failed: %s" % os.path.join(str(tmp_path), message) in r.stderr
    assert wait_for(lambda: not pids_with(marker), 10)


def test_truncated_npy_and_missing_file(tmp_path, marker):
    path = tmp_path / "t.npy"
    np.save(path, np.zeros((1000, 8), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:2000])
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path), "--",
                  PY, "-c", COUNT, marker])
    assert r.returncode == 1
    assert re.search(r"t\.npy: truncated: the header promises 1000 rows, the data ends in row \d+", r.stderr)
    r = run_tfos(["run", "--workers", "1", "--input", str(tmp_path / "nope.csv"), "--", "true"])
    assert r.returncode == 2 and "nope.csv: No such file or directory" in r.stderr


def test_program_that_stops_reading_early_does_not_hang_the_feed(tmp_path, marker):
    path = tmp_path / "big.npy"
    np.save(path, np.zeros((200000, 64), dtype=np.float32))  # 51 MB: more than the 4 MiB ring holds
    code = ("from tfos import TFNode\n"
            "ctx = TFNode.get_context()\n"
            "df = TFNode.DataFeed(ctx.mgr)\n"
            "print('got', len(df.next_batch(10)), flush=True)\n"
            "df.terminate()\n")
    r = run_tfos(["run", "--workers", "1", "--feed-mb", "4", "--log-dir", str(tmp_path / "logs"), "--input",
                  str(path), "--", PY, "-c", code, marker], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "[worker:0] got 10" in r.stdout
    assert "some nodes terminated their feed early" in r.stderr


def test_c_program_reads_the_feed(tmp_path, marker):
    """examples/c/feed_sum.c: a C consumer (include/tfos/feed.h) under tfos run --input."""
    feed_sum = os.path.join(ROOT, "build", "feed_sum")
    data = np.arange(6000 * 3, dtype=np.float32).reshape(6000, 3)
    path = tmp_path / marker / "d.npy"
    path.parent.mkdir()
    np.save(path, data)
    csv = tmp_path / "e.csv"
    csv.write_text("a,b,s\n" + "".join("%d,%.1f,x%d\n" % (i, i * 0.5, i) for i in range(1000)))
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--input", str(path), "--input",
                  str(csv), "--partition-rows", "2500", "--", feed_sum])
    assert r.returncode == 0, r.stderr
    got = re.findall(r"\[worker:\d\] rows (\d+) batches \d+ sum ([\d.]+) aborted 0", r.stdout)
    assert len(got) == 2
    assert sum(int(n) for n, _ in got) == 7000
    want = float(data.sum(dtype=np.float64)) + sum(i + i * 0.5 for i in range(1000))
    assert abs(sum(float(s) for _, s in got) - want) < 1e-6 * want


def test_npy_input_ring_is_sized_for_its_records(tmp_path, marker):
    """Without --batch-rows, .npy records take 1024 rows or 2 MiB, whichever
    is less (at least one row); without --feed-mb, a .npy input gets a ring
    of 8 records (at least 4 MiB), grown past the 64 MiB default only as far
    as one record needs; an explicit --feed-mb is kept, and a record too big
    for it is refused."""
    feed_sum = os.path.join(ROOT, "build", "feed_sum")
    small = tmp_path / marker / "small.npy"
    small.parent.mkdir()
    np.save(small, np.ones((6000, 3), dtype=np.float32))  # records of 1024 rows: 12 KB
    big = tmp_path / "big.npy"
    np.save(big, np.ones((40, 512, 512), dtype=np.float32))  # 1 MiB rows: one record of 40 MiB

    def run(path, *extra):
        return run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path)]
                        + list(extra) + ["--", feed_sum], timeout=120)

    r = run(small)
    assert r.returncode == 0, r.stderr
    assert "input ring: 4 MiB per node" in r.stderr
    assert "[worker:0] rows 6000 batches 6 sum 18000.0 aborted 0" in r.stdout
    r = run(big)  # records of one 1 MiB row: two and their header would pass 2 MiB
    assert r.returncode == 0, r.stderr
    assert "input ring: 16 MiB per node" in r.stderr
    assert "[worker:0] rows 40 batches 40 sum 10485760.0 aborted 0" in r.stdout
    mid = tmp_path / "mid.npy"
    np.save(mid, np.ones((100, 64, 64), dtype=np.float32))  # 16 KiB rows: 127 to a record of 2 MiB
    r = run(mid)
    assert r.returncode == 0, r.stderr
    assert "input ring: 16 MiB per node" in r.stderr
    assert "[worker:0] rows 100 batches 1 sum 409600.0 aborted 0" in r.stdout
    np.save(mid, np.ones((300, 64, 64), dtype=np.float32))
    r = run(mid)
    assert r.returncode == 0, r.stderr
    assert "[worker:0] rows 300 batches 3 sum 1228800.0 aborted 0" in r.stdout  # 127 + 127 + 46
    r = run(big, "--batch-rows", "40")  # as asked: one record of 40 MiB
    assert r.returncode == 0, r.stderr
    assert "input ring: 128 MiB per node" in r.stderr
    assert "[worker:0] rows 40 batches 1 sum 10485760.0 aborted 0" in r.stdout
    r = run(big, "--batch-rows", "40", "--feed-mb", "64")
    assert r.returncode != 0
    assert "input ring:" not in r.stderr
    assert "does not fit worker:0's feed ring" in r.stderr and "--feed-mb" in r.stderr


def test_parquet_and_arrow_inputs_pass_through(tmp_path, marker):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    t = pa.table({"x": np.arange(5000, dtype=np.float64), "label": np.arange(5000) % 10})
    pq.write_table(t, tmp_path / "t.parquet")
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f:
        with pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--input", str(tmp_path / "t.parquet"),
                  "--input", str(tmp_path / "t.arrow"), "--partition-rows", "2000", "--", PY, "-c", COUNT, marker])
    assert r.returncode == 0, r.stderr
    assert "fed 10000 rows (6 partitions) from Arrow/Parquet" in r.stderr
    rows = re.findall(r"node worker:\d rows (\d+) first \((\d+\.0), (\d)\)", r.stdout)
    assert sum(int(n) for n, _, _ in rows) == 10000
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "l2"), "--input", str(tmp_path / "t.parquet"),
                  "--input", str(tmp_path / "x.npy"), "--", "true"])
    assert r.returncode == 2  # x.npy does not exist: refused before starting
    np.save(tmp_path / "x.npy", np.zeros(3))
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "l3"), "--input", str(tmp_path / "t.parquet"),
                  "--input", str(tmp_path / "x.npy"), "--", PY, "-c", COUNT, marker])
    assert r.returncode == 1
    assert "Arrow/Parquet inputs cannot be mixed" in r.stderr


def test_oversized_line_is_refused_with_its_line_number(tmp_path, marker):
    path = tmp_path / "huge.csv"
    with open(path, "w") as f:
        f.write("a,b\n1,x\n2,")
        f.write("y" * (17 << 20))
        f.write("\n")
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path), "--",
                  PY, "-c", COUNT, marker], timeout=120)
    assert r.returncode == 1
    assert "huge.csv line 3: a record over 16777216 bytes" in r.stderr


def _writer(fifo, marker, text):
    """A process that opens fifo for writing (blocking until the feeder opens
    it to read), writes text and then holds the FIFO open, writing nothing."""
    code = "import sys, time\nsys.stdout.write(sys.argv[2])\nsys.stdout.flush()\ntime.sleep(600)\n"
    return subprocess.Popen(["sh", "-c", 'exec "$0" -c "$1" "$2" "$3" > "$4"', PY, code, marker, text, fifo])


@pytest.mark.parametrize("case", ["fifo-no-writer", "fifo-silent-writer", "fifo-writer-mid-file", "pipe"])
def test_sigterm_stops_a_run_whose_input_blocks(tmp_path, marker, case):
    """The feeder waits on an input that never comes (a FIFO nobody opens, a
    writer that stays silent, a pipe on stdin): SIGTERM still ends the run,
    with 143 and no process left."""
    fifo = tmp_path / "in.csv"
    args = ["run", "--workers", "1", "--log-dir", str(tmp_path / "logs")]
    stdin, writer = subprocess.DEVNULL, None
    if case == "pipe":
        args += ["--input", "/dev/stdin", "--input-format", "csv"]
        stdin = subprocess.PIPE
    else:
        os.mkfifo(fifo)
        args += ["--input", str(fifo)]
        if case == "fifo-silent-writer":
            writer = _writer(str(fifo), marker, "")
        elif case == "fifo-writer-mid-file":
            writer = _writer(str(fifo), marker, "1,2\n3,4\n5,")
    err = open(tmp_path / "stderr", "w+")
    p = subprocess.Popen([tfos_cli()] + args + ["--", PY, "-c", COUNT, marker], stdin=stdin,
                         stdout=subprocess.DEVNULL, stderr=err)
    try:
        started = wait_for(lambda: "feeding 1 file(s)" in (tmp_path / "stderr").read_text()
                           and pids_with("-c " + COUNT[:20]), 60)
        assert started, (tmp_path / "stderr").read_text()
        if writer is not None:  # the feeder has the FIFO open: the writer's open returned
            assert wait_for(lambda: any(os.readlink("/proc/%d/fd/1" % pid).endswith("in.csv")
                                        for pid in pids_with(marker) if pid == writer.pid), 30)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            rc = "still running 30 s after SIGTERM"
        # (the FIFO nobody opens once left the feeder retrying its connection to the stopped node for 30 s)
        assert rc == 128 + signal.SIGTERM, "tfos run did not end on SIGTERM (rc %r): %s" % (
            rc, (tmp_path / "stderr").read_text())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if writer is not None:
            writer.kill()
            writer.wait()
        if p.stdin:
            p.stdin.close()
        err.close()
    assert wait_for(lambda: not pids_with(marker), 15)


def test_a_pipe_and_a_fifo_are_read_whole(tmp_path, marker):
    text = "a,b\n" + "".join("%d,%d.5\n" % (i, i) for i in range(5000))
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "l1"), "--input", "/dev/stdin",
                  "--input-format", "csv", "--", PY, "-c", COUNT, marker], input=text)
    assert r.returncode == 0, r.stderr
    assert "node worker:0 rows 5000 first (0, 0.5)" in r.stdout
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", 'cat "$0" > "$1"', "/dev/stdin", str(fifo)], stdin=subprocess.PIPE,
                              text=True)
    writer.stdin.write(text)
    writer.stdin.close()
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "l2"), "--input", str(fifo), "--", PY, "-c",
                  COUNT, marker])
    assert writer.wait(30) == 0
    assert r.returncode == 0, r.stderr
    assert "node worker:0 rows 5000 first (0, 0.5)" in r.stdout


def _npy_with_header(path, header, data):
    head = header.encode()
    pad = 64 - (10 + len(head) + 1) % 64
    head += b" " * (pad % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + data.tobytes())


@pytest.mark.parametrize("name,text,message", [
    ("h.csv", "a,b\n", "h.csv line 1: cannot tell whether this row is a header"),
    ("t.csv", "name,city\nbob,paris\n", "t.csv line 1: cannot tell whether this row is a header"),
    ("semi.csv", "a;b\n1;2\n", "semi.csv line 1, column 1: 'a;b' holds a ';'"),
    ("e.csv", "1,,3\n4,5,6\n", "e.csv line 1, column 2: an empty value in a column of numbers"),
    ("big.csv", "x\n1.5\n1e400\n", "big.csv line 3, column 1: '1e400' is out of range for a float64"),
    ("hex.csv", "x\n1.5\n0x10\n", "hex.csv line 3, column 1: '0x10' is not a number"),
    ("dup.jsonl", '{"a": 1, "a": 2}\n', "dup.jsonl line 1: a key appears twice"),
    ("dup.npy", None, "dup.npy: the header has key 'descr' twice"),
    ("dir.csv", None, "dir.csv: is a directory"),
])
def test_input_once_read_wrong_is_refused(tmp_path, marker, name, text, message):
    path = tmp_path / name
    if name == "dup.npy":  # numpy reads the last descr ('<f8'); the first says '<f4'
        _npy_with_header(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'descr': '<f8', }",
                         np.arange(4, dtype="<f8"))
    elif name == "dir.csv":
        path.mkdir()
        (path / "x.csv").write_text("1,2\n")
    else:
        path.write_text(text)
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path), "--",
                  PY, "-c", COUNT, marker])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the feed failed: %s" % os.path.join(str(tmp_path), message) in r.stderr


@pytest.mark.parametrize("name,text,args,want", [
    # a byte order mark is skipped: no header taken, no row dropped
    ("bom.csv", "\ufeff" + "".join("%d,%d\n" % (i, i) for i in range(300)), [], "rows 300 first (0, 0)"),
    ("bomh.csv", "\ufeffa,b\n" + "".join("%d,%d\n" % (i, i) for i in range(300)), [], "rows 300 first (0, 0)"),
    ("semi.csv", "a;b\n" + "".join("%d;%d.5\n" % (i, i) for i in range(300)), ["--csv-delimiter", ";"],
     "rows 300 first (0, 0.5)"),
    ("tab.tsv", "".join("%d\tx%d\n" % (i, i) for i in range(300)), ["--csv-delimiter", "tab", "--input-format",
                                                                     "csv"], "rows 300 first (0, 'x0')"),
    ("t.csv", "name,city\nbob,paris\nann,rome\n", ["--csv-header"], "rows 2 first ('bob', 'paris')"),
    ("t.csv", "name,city\nbob,paris\nann,rome\n", ["--no-csv-header"], "rows 3 first ('name', 'city')"),
])
def test_csv_dialects_are_read_whole(tmp_path, marker, name, text, args, want):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    r = run_tfos(["run", "--workers", "1", "--log-dir", str(tmp_path / "logs"), "--input", str(path)] + args +
                 ["--", PY, "-c", COUNT, marker])
    assert r.returncode == 0, r.stderr
    assert "node worker:0 %s" % want in r.stdout
