"""The Python package: tfos.run, tfos.TFNode's context and path helpers."""
import os
import sys

import pytest

import tfos
from tfos import TFNode
from conftest import PY, pids_with, prog, wait_for


def test_run_returns_zero_and_raises_on_failure(tmp_path, marker):
    assert tfos.run([PY, "-c", "print('hi')", marker], workers=2, log_dir=tmp_path / "ok") == 0
    pids = tmp_path / "pids"
    pids.mkdir()
    with pytest.raises(tfos.ClusterError) as info:
        tfos.run([PY, prog("behave.py"), marker, str(pids), "worker:0=exit3"], workers=1,
                 log_dir=tmp_path / "bad", max_restarts=0)
    err = info.value
    assert err.exit_code == 1
    assert err.log_dir == str(tmp_path / "bad")
    assert "worker:0" in str(err) and "exit code 3" in str(err) and "ValueError: bad batch" in str(err)
    assert tfos.run([PY, prog("behave.py"), marker, str(pids), "worker:0=exit3"], workers=1,
                    log_dir=tmp_path / "bad2", check=False, max_restarts=0) == 1
    assert wait_for(lambda: not pids_with(marker), 10)


def test_native_coordinator_object():
    c = tfos._tfos.Coordinator(2, tfos._tfos.random_secret(), ps=1, reservation_timeout=0.3)
    assert c.address.startswith("127.0.0.1:")
    assert c.state == tfos._tfos.STATE_RESERVING
    assert wait_for(lambda: c.step(50) >= tfos._tfos.STATE_DONE, 10)
    assert c.state == tfos._tfos.STATE_FAILED
    assert c.failure_code == tfos._tfos.ETIMEDOUT
    assert "missing: executor 0 (ps:0), executor 1 (worker:0), executor 2 (worker:1)" in c.failure
    assert '"state": "failed"' in c.status()
    c.close()
    with pytest.raises(RuntimeError):
        c.step()
    with pytest.raises(ValueError):
        tfos._tfos.Coordinator(0, "s")  # no nodes
    # what each node is sent: every address (tf), or the ranks form (torch, jax)
    for framework, form in (("tf", "full"), ("torch", "ranks"), ("jax", "ranks")):
        c = tfos._tfos.Coordinator(2, tfos._tfos.random_secret(), framework=framework)
        assert '"spec_form": "%s"' % form in c.status(), c.status()
        c.close()
    with pytest.raises(ValueError, match="framework='mxnet': use 'tf', 'torch' or 'jax'"):
        tfos._tfos.Coordinator(2, "s", framework="mxnet")
    # an in-place resize keeps at least M of the workers, in a cluster of workers only
    for bad in (dict(resize_in_place=3), dict(resize_in_place=-1), dict(resize_in_place=1, ps=1)):
        with pytest.raises(ValueError, match="resize_in_place=-?[0-9]+: the least workers to go on with"):
            tfos._tfos.Coordinator(2, "s", framework="torch", **bad)
    tfos._tfos.Coordinator(2, tfos._tfos.random_secret(), framework="torch", resize_in_place=1).close()


def test_get_context_outside_tfos(monkeypatch):
    monkeypatch.delenv("TFOS_JOB_NAME", raising=False)
    with pytest.raises(RuntimeError, match="not started by tfos"):
        TFNode.get_context()


def test_hdfs_path_resolution():
    ctx = TFNode.NodeContext("worker", 0, 0, {}, 1, defaultFS="hdfs://nn:8020", working_dir="/home/u/job")
    user = __import__("tfos.fs").fs.hadoop_user()  # HADOOP_USER_NAME, else the uid's name
    assert TFNode.hdfs_path(ctx, "hdfs://other/x") == "hdfs://other/x"
    assert TFNode.hdfs_path(ctx, "viewfs://cluster/x") == "viewfs://cluster/x"
    assert TFNode.hdfs_path(ctx, "file:///tmp/x") == "file:///tmp/x"
    assert TFNode.hdfs_path(ctx, "/data/x") == "hdfs://nn:8020/data/x"
    assert TFNode.hdfs_path(ctx, "models/m1") == "hdfs://nn:8020/user/%s/models/m1" % user
    local = TFNode.NodeContext("worker", 0, 0, {}, 1, defaultFS="file://", working_dir="/home/u/job")
    assert TFNode.hdfs_path(local, "/data/x") == "file:///data/x"
    assert TFNode.hdfs_path(local, "models/m1") == "file:///home/u/job/models/m1"
    assert local.absolute_path("m") == "file:///home/u/job/m"
    assert local.release_port() is None
    assert local.worker_num == 0 and local.tmp_socket is None


def test_run_takes_the_cli_feed_options(tmp_path):
    """tfos.run(input=, epochs=, quiet=, status_port=, keras=) as `tfos run`
    --input/--epochs/--quiet/--status-port/--keras (issue 18)."""
    import tfos
    data = tmp_path / "rows.csv"
    data.write_text("x,y\n" + "".join("%d,%d\n" % (i, i % 3) for i in range(300)))
    out = tmp_path / "seen"
    out.mkdir()
    program = tmp_path / "count.py"
    program.write_text(
        "import os\nfrom tfos import TFNode\nctx = TFNode.get_context()\nfeed = TFNode.DataFeed(ctx.mgr)\n"
        "n = 0\nwhile not feed.should_stop():\n    n += len(feed.next_batch(50))\n"
        "open(os.path.join(%r, ctx.job_name + str(ctx.task_index)), 'w').write('%%d %%s' %% "
        "(n, os.environ.get('TF_USE_LEGACY_KERAS')))\n" % str(out))
    code = tfos.run([sys.executable, str(program)], workers=2, log_dir=str(tmp_path / "logs"), input=str(data),
                    epochs=2, quiet=True, status_port=-1, keras="3")
    assert code == 0
    seen = [(tmp_path / "seen" / n).read_text().split() for n in sorted(os.listdir(out))]
    assert len(seen) == 2 and sum(int(n) for n, _ in seen) == 600, seen  # every row, twice
    assert {k for _, k in seen} == {"0"}, seen
    with pytest.raises(ValueError, match="keras='2'"):
        tfos.run([sys.executable, "-c", "pass"], keras="2")
