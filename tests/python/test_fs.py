"""tfos.fs on local paths and its WebHDFS address lookup (the hdfs:// side
runs against a real NameNode in tests/yarn/test_yarn.py)."""
import os

import pytest

import tfos.fs


def test_urls_and_paths():
    assert tfos.fs.is_remote("hdfs://nn:8020/x") and tfos.fs.is_remote("hdfs:///x")
    assert tfos.fs.is_remote("webhdfs://nn:9870/x") and tfos.fs.is_remote("s3://b/k")
    assert not tfos.fs.is_remote("/a/b") and not tfos.fs.is_remote("rel/x")
    assert not tfos.fs.is_remote("file:///a/b") and not tfos.fs.is_remote("C:\\x")


def test_webhdfs_address_from_the_environment_then_hdfs_site(tmp_path, monkeypatch):
    monkeypatch.delenv("TFOS_WEBHDFS", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    with pytest.raises(tfos.fs.FileSystemError, match="dfs.namenode.http-address"):
        tfos.fs.webhdfs_address()
    (tmp_path / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.namenode.http-address</name>"
        "<value>0.0.0.0:9870</value></property></configuration>")
    assert tfos.fs.webhdfs_address(default_host="nn1") == "http://nn1:9870"
    (tmp_path / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.http.policy</name><value>HTTPS_ONLY</value></property>"
        "<property><name>dfs.namenode.https-address</name><value>nn2:9871</value></property></configuration>")
    assert tfos.fs.webhdfs_address() == "https://nn2:9871"
    # a lookup given by the caller (TFCluster: Spark's Hadoop configuration)
    conf = {"dfs.namenode.http-address": "nn3:50070"}
    assert tfos.fs.webhdfs_address(conf=conf.get) == "http://nn3:50070"
    monkeypatch.setenv("TFOS_WEBHDFS", "http://nn4:9870/")
    assert tfos.fs.webhdfs_address() == "http://nn4:9870"
    (tmp_path / "hdfs-site.xml").write_text("<configuration><property>")
    monkeypatch.delenv("TFOS_WEBHDFS")
    with pytest.raises(tfos.fs.FileSystemError, match="hdfs-site.xml"):
        tfos.fs.webhdfs_address()


def test_hadoop_user_is_hadoop_users_not_dollar_user(monkeypatch):
    """HDFS home paths use the user Hadoop's client acts as (HADOOP_USER_NAME,
    else the uid's name), not $USER, which a container or sudo leaves unset
    or set to someone else; /user/$USER/ written without $USER is refused."""
    import pwd
    from tfos import TFNode
    me = pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("LOGNAME", "someone-else")
    assert tfos.fs.hadoop_user() == me
    ctx = TFNode.NodeContext("worker", 0, 0, {}, 1, defaultFS="hdfs://nn:8020", working_dir="/w")
    assert TFNode.hdfs_path(ctx, "m") == "hdfs://nn:8020/user/%s/m" % me
    monkeypatch.delenv("USER")
    monkeypatch.delenv("LOGNAME")
    assert tfos.fs.hadoop_user() == me
    monkeypatch.setenv("HADOOP_USER_NAME", "hdfsuser")
    assert tfos.fs.hadoop_user() == "hdfsuser"
    assert TFNode.hdfs_path(ctx, "m") == "hdfs://nn:8020/user/hdfsuser/m"
    monkeypatch.setenv("TFOS_WEBHDFS", "http://127.0.0.1:1")
    with pytest.raises(tfos.fs.FileSystemError, match=r"the user in /user/<user>/ is empty .*/user/hdfsuser"):
        tfos.fs.exists("hdfs:///user//digits-model")


def test_put_get_and_a_local_mirror(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    tfos.fs.put(str(src), "file://" + str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "sub" / "b.txt").read_text() == "b"
    tfos.fs.put(str(src / "a.txt"), str(tmp_path / "one" / "a.txt"))
    assert tfos.fs.exists(str(tmp_path / "one" / "a.txt"))
    with tfos.fs.open(str(tmp_path / "one" / "a.txt"), "r") as f:
        assert f.read() == "a"
    with pytest.raises(FileNotFoundError, match="nope"):
        tfos.fs.put(str(tmp_path / "nope"), str(tmp_path / "x"))
    # a local directory is its own mirror: used in place, nothing to push
    m = tfos.fs.Mirror(str(tmp_path / "ckpt"))
    assert m.path == str(tmp_path / "ckpt") and os.path.isdir(m.path)
    (tmp_path / "ckpt" / "checkpoint").write_text("x")
    assert m.push() == 0
    m.close()
    assert (tmp_path / "ckpt" / "checkpoint").exists()


def test_site_files_are_parsed_once_while_unchanged(tmp_path, monkeypatch):
    # filesystem() asks for settings at every call (Mirror.push, serve's model dirs): one parse per file
    # while it is unchanged, a new one when it changes
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    site = tmp_path / "core-site.xml"
    site.write_text("<configuration><property><name>hadoop.security.authentication</name>"
                    "<value>kerberos</value></property></configuration>")
    parsed = []
    real = tfos.fs.ElementTree.parse
    monkeypatch.setattr(tfos.fs.ElementTree, "parse", lambda p: parsed.append(p) or real(p))
    for _ in range(5):
        assert tfos.fs._conf_value("hadoop.security.authentication") == "kerberos"
        assert tfos.fs._conf_value("dfs.namenode.http-address") is None
    assert parsed == [str(site)]
    site.write_text("<configuration><property><name>hadoop.security.authentication</name>"
                    "<value>simple</value></property></configuration>")
    assert tfos.fs._conf_value("hadoop.security.authentication") == "simple"
    assert len(parsed) == 2


def test_tensorboard_follower_appends_the_new_bytes_of_grown_files(tmp_path, monkeypatch):
    # tfos.tensorboard's copy of a log dir: new files whole, a grown file's new bytes appended in place (the
    # file TensorBoard holds open keeps its inode), a file that shrank fetched whole, uploads in progress
    # (.names) skipped; what was fetched is counted
    from tfos import tensorboard
    remote, local = tmp_path / "remote", tmp_path / "local"
    (remote / "train").mkdir(parents=True)
    local.mkdir()
    (remote / "train" / "events.1").write_bytes(b"abc")
    (remote / "train" / ".events.2.tfos-tmp-7").write_bytes(b"partial")
    sizes = {}
    assert tensorboard.sync(str(remote), str(local), sizes) == 3
    held = local / "train" / "events.1"
    inode = held.stat().st_ino
    assert held.read_bytes() == b"abc" and sizes == {"train/events.1": 3}
    assert not (local / "train" / ".events.2.tfos-tmp-7").exists()
    fetched = []
    real = tfos.fs.filesystem

    def spy(url):
        fsys, root = real(url)
        orig = fsys.cat_file
        fsys.cat_file = lambda p, start=None, end=None: fetched.append((p, start, end)) or orig(p, start, end)
        return fsys, root
    monkeypatch.setattr(tfos.fs, "filesystem", spy)
    (remote / "train" / "events.1").write_bytes(b"abcdef")
    (remote / "eval").mkdir()
    (remote / "eval" / "events.9").write_bytes(b"xy")
    assert tensorboard.sync(str(remote), str(local), sizes) == 5
    assert held.read_bytes() == b"abcdef" and held.stat().st_ino == inode
    assert (str(remote / "train" / "events.1"), 3, 6) in fetched
    assert (local / "eval" / "events.9").read_bytes() == b"xy"
    assert tensorboard.sync(str(remote), str(local), sizes) == 0   # nothing changed: nothing fetched
    (remote / "train" / "events.1").write_bytes(b"z")
    assert tensorboard.sync(str(remote), str(local), sizes) == 1 and held.read_bytes() == b"z"
    assert sizes == {"train/events.1": 1, "eval/events.9": 2}


def test_tensorboard_follower_refuses_a_bad_sync_period():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "tfos.tensorboard", "--logdir", "hdfs:///x", "--sync", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--sync must be a positive number of seconds" in r.stderr, r.stderr
