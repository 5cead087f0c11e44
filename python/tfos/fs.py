"""Files on HDFS for programs run by tfos, under TensorFlow 2.21.

TensorFlow no longer reads or writes ``hdfs://`` itself: its HDFS filesystem
moved to tensorflow-io, which has no build for TensorFlow 2.21. So
``model.save``, ``tf.train.Checkpoint`` and ``tf.io.gfile`` take local paths
only. This module reaches HDFS over WebHDFS, the NameNode's REST API (on by
default in Hadoop 3), with fsspec's client: no JVM, no libhdfs, nothing
native. pyarrow's ``HadoopFileSystem`` is the other route; it needs libhdfs
and a JVM on every node, which Hadoop's tarball has but Maven Central and
PyPI do not.

- :func:`put` and :func:`get` copy a file or a directory tree.
- :class:`Mirror` is a local copy of a remote directory: pulled when it is
  made, pushed after each save. A checkpoint dir on HDFS goes through one.
- :func:`open`, :func:`exists` and :func:`filesystem` are for anything else.

Where the NameNode's web address comes from, first found:

1. ``TFOS_WEBHDFS`` (``http://host:port``). ``tfos yarn`` and ``TFCluster``
   set it from the cluster's configuration for every node.
2. ``dfs.namenode.http-address`` in ``$HADOOP_CONF_DIR/hdfs-site.xml``
   (``https-address`` when ``dfs.http.policy`` is ``HTTPS_ONLY``).

On a Kerberized cluster, in a YARN container (``tfos yarn``, Spark on YARN),
the NameNode is asked with the application's HDFS delegation token, from
``$HADOOP_TOKEN_FILE_LOCATION``; under ``tfos yarn --principal/--keytab`` it
is replaced by the fresh one the ApplicationMaster writes before it expires
(``tfos._hdfstokens``), by a thread from the import of this module on, so
a token the program leaves unused while it computes does not die. Outside
a container (a Spark driver, a laptop), on a cluster whose
``hadoop.security.authentication`` is ``kerberos``, the process's
Kerberos ticket (``kinit``) gets a delegation token over SPNEGO
(through libcurl, in tfos's C library), renewed by getting a new one.

Otherwise the user is Hadoop's (simple authentication), as ``hdfs dfs`` and
``tfos yarn`` have it: ``HADOOP_USER_NAME``, else the name of the process's
uid (:func:`hadoop_user`), never ``$USER``, which a container, cron or
``sudo`` may leave unset or set to someone else. Home directories are
``/user/<that name>``; a path whose user is empty (``hdfs:///user//x``, what
``hdfs:///user/$USER/x`` becomes without ``$USER``) is refused.
``webhdfs://host:port/path`` URLs work as they are, and
other schemes fsspec knows (``s3://`` with s3fs installed, ...) go to
fsspec. A path with no scheme, or ``file://``, is local.

Needs ``pip install tfos[hdfs]`` (fsspec and requests).
"""
import builtins
import stat
import os
import posixpath
import shutil
import tempfile
import urllib.parse
import xml.etree.ElementTree as ElementTree

from . import _extras, _hdfstokens

__all__ = ["FileSystemError", "is_remote", "filesystem", "webhdfs_address", "hadoop_user", "put", "get", "exists",
           "open", "Mirror"]


class FileSystemError(RuntimeError):
    """hdfs:// cannot be reached: no WebHDFS address is known. (Without
    fsspec and requests: tfos._extras.MissingDependency.)"""


def is_remote(path) -> bool:
    """True for a URL with a scheme other than ``file``."""
    scheme = urllib.parse.urlsplit(str(path)).scheme
    return len(scheme) > 1 and scheme != "file"  # "C:" is a drive, not a scheme


def _local(path) -> str:
    path = str(path)
    return path[len("file://"):] if path.startswith("file://") else path


_sites = {}  # site file -> ((inode, mtime_ns, size), {name: value}): parsed once while it is unchanged


def _site(p):
    """The properties of the Hadoop site file ``p``, or None if there is none."""
    try:
        st = os.stat(p)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    got = _sites.get(p)
    if got and got[0] == key:
        return got[1]
    try:
        root = ElementTree.parse(p).getroot()
    except ElementTree.ParseError as e:
        raise FileSystemError("cannot read %s: %s" % (p, e)) from None
    props = {}
    for prop in root.iter("property"):
        props.setdefault((prop.findtext("name") or "").strip(), (prop.findtext("value") or "").strip())
    _sites[p] = (key, props)
    return props


def _conf_value(name):
    """``name`` from the Hadoop site files in $HADOOP_CONF_DIR (or
    $YARN_CONF_DIR), or None. Each file is parsed once while it is
    unchanged (filesystem() asks at every call)."""
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        d = os.environ.get(var)
        if not d:
            continue
        for site in ("hdfs-site.xml", "core-site.xml"):
            props = _site(os.path.join(d, site))
            if props is not None and name in props:
                return props[name]
    return None


def webhdfs_address(default_host=None, conf=None) -> str:
    """The NameNode's WebHDFS base, ``http://host:port`` (see the module).
    ``conf``: a lookup of Hadoop settings (name -> value or None) to use
    instead of $HADOOP_CONF_DIR's files (TFCluster passes Spark's Hadoop
    configuration); ``default_host`` replaces a wildcard address's host."""
    env = os.environ.get("TFOS_WEBHDFS")
    if env and conf is None:
        return env.rstrip("/")
    conf = conf or _conf_value
    https = (conf("dfs.http.policy") or "").upper() == "HTTPS_ONLY"
    addr = conf("dfs.namenode.https-address" if https else "dfs.namenode.http-address")
    if not addr:
        raise FileSystemError(
            "no WebHDFS address for hdfs:// paths: set TFOS_WEBHDFS=http://NAMENODE:PORT, or HADOOP_CONF_DIR to a "
            "directory whose hdfs-site.xml has dfs.namenode.http-address")
    host, _, port = addr.rpartition(":")
    if host in ("", "0.0.0.0") and default_host:
        host = default_host
    return "%s://%s:%s" % ("https" if https else "http", host, port)


def hadoop_user() -> str:
    """The user Hadoop's client acts as with simple authentication:
    ``HADOOP_USER_NAME``, else the name of this process's uid (as Hadoop's
    UnixLoginModule finds it, whatever ``$USER`` says). HDFS home paths are
    ``/user/<it>``."""
    name = os.environ.get("HADOOP_USER_NAME")
    if name:
        return name
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        raise FileSystemError("uid %d has no user name (no entry in the password database), so Hadoop's user is "
                              "unknown: set HADOOP_USER_NAME" % os.getuid()) from None


_tokens = _hdfstokens.Keeper()


def keep_tokens_fresh():
    """From now on, keep this process's HDFS delegation token fresh whether
    or not it uses HDFS meanwhile (done when this module is imported in a
    node's program; nothing to do off a Kerberized cluster)."""
    _tokens.keep_fresh(_read_with)


# what the NameNode says of a delegation token it no longer takes
_TOKEN_GONE = ("InvalidToken", " is expired", "can't be found in cache")
_WebHDFS = None


def _webhdfs_class():
    """fsspec's WebHDFS, whose refusals of a dead token say what to do."""
    global _WebHDFS
    if _WebHDFS is None:
        from fsspec.implementations.webhdfs import WebHDFS
        from . import _tfos

        class TfosWebHDFS(WebHDFS):
            def _call(self, *args, **kwargs):
                try:
                    return super()._call(*args, **kwargs)
                except (PermissionError, RuntimeError) as e:
                    fix = _tfos.WEBHDFS_TOKEN_FIX
                    if any(s in str(e) for s in _TOKEN_GONE) and fix not in str(e):
                        raise type(e)("%s (tfos.fs: %s)" % (e, fix)) from None
                    raise

        _WebHDFS = TfosWebHDFS
    return _WebHDFS


def _webhdfs_as(base, token):
    WebHDFS = _webhdfs_class()
    u = urllib.parse.urlsplit(base)
    where = dict(host=u.hostname, port=u.port or (9871 if u.scheme == "https" else 9870),
                 use_https=u.scheme in ("https", "swebhdfs"))
    if token:
        return WebHDFS(token=token, **where)  # the user is the token's
    return WebHDFS(user=hadoop_user(), **where)


def _read_with(url, token):
    u = urllib.parse.urlsplit(url)
    return _webhdfs_as(webhdfs_address(default_host=u.hostname), token).cat_file(u.path)


def _kerberos_token(base):
    """For a Kerberized cluster (``hadoop.security.authentication`` in the
    Hadoop configuration), the getter of a delegation token with this
    process's ticket; else None."""
    if (_conf_value("hadoop.security.authentication") or "").strip().lower() != "kerberos":
        return None
    from . import _tfos
    return lambda: _tfos.webhdfs_kerberos_token(base)


def _webhdfs(base):
    return _webhdfs_as(base, _tokens.token(_read_with, _kerberos_token(base), base))


def filesystem(url):
    """``(fsspec filesystem, path in it)`` for ``url``."""
    _extras.require("tfos.fs", "fsspec", "requests")
    import fsspec
    if not is_remote(url):
        return fsspec.filesystem("file"), os.path.abspath(_local(url))
    u = urllib.parse.urlsplit(str(url))
    path = u.path or "/"
    if u.scheme in ("hdfs", "webhdfs", "swebhdfs") and (path + "/").startswith("/user//"):
        raise FileSystemError(
            "%s: the user in /user/<user>/ is empty (a path written as /user/$USER/... where $USER is not set?); "
            "your HDFS home is /user/%s (HADOOP_USER_NAME, else the uid's name; in a shell: "
            "/user/${HADOOP_USER_NAME:-$(id -un)})" % (url, hadoop_user()))
    if u.scheme == "hdfs":
        return _webhdfs(webhdfs_address(default_host=u.hostname)), path
    if u.scheme in ("webhdfs", "swebhdfs"):
        return _webhdfs("%s://%s" % ("https" if u.scheme == "swebhdfs" else "http", u.netloc)), path
    return fsspec.core.url_to_fs(str(url))


def exists(url) -> bool:
    if not is_remote(url):
        return os.path.exists(_local(url))
    fs, path = filesystem(url)
    return fs.exists(path)


def open(url, mode="rb"):  # noqa: A001 (the module's own open, as fsspec's)
    """A file object for ``url`` (local paths: the builtin open)."""
    if not is_remote(url):
        return builtins.open(_local(url), mode)
    fs, path = filesystem(url)
    return fs.open(path, mode)


def _put_file(fs, local, path):
    """Upload under a temporary name, then rename into place: a reader never
    sees half a file. (WebHDFS renames onto nothing: an old file goes first.)"""
    parent = posixpath.dirname(path)
    fs.makedirs(parent, exist_ok=True)
    tmp = posixpath.join(parent, ".%s.tfos-tmp-%d" % (posixpath.basename(path), os.getpid()))
    fs.put_file(local, tmp)
    if fs.exists(path):
        fs.rm(path)
    fs.mv(tmp, path)


def put(local, url) -> None:
    """Copy the local file or directory tree ``local`` to ``url`` (a file
    becomes ``url``; a directory's files go under ``url``)."""
    local = _local(local)
    if not os.path.exists(local):
        raise FileNotFoundError("tfos.fs.put: no such file or directory: %s" % local)
    if not is_remote(url):
        if os.path.isdir(local):
            shutil.copytree(local, _local(url), dirs_exist_ok=True)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(_local(url))), exist_ok=True)
            shutil.copyfile(local, _local(url))
        return
    fs, path = filesystem(url)
    if not os.path.isdir(local):
        _put_file(fs, local, path)
        return
    fs.makedirs(path, exist_ok=True)
    for rel in _files_under(local):
        _put_file(fs, os.path.join(local, rel), posixpath.join(path, rel.replace(os.sep, "/")))


def get(url, local) -> None:
    """Copy the remote file or directory tree ``url`` to ``local``."""
    local = _local(local)
    fs, path = filesystem(url)
    if not fs.exists(path):
        raise FileNotFoundError("tfos.fs.get: no such file or directory: %s" % url)
    if not fs.isdir(path):
        os.makedirs(os.path.dirname(os.path.abspath(local)) or ".", exist_ok=True)
        fs.get_file(path, local)
        return
    os.makedirs(local, exist_ok=True)
    root = path.rstrip("/")
    for f in fs.find(path):
        rel = f[len(root):].lstrip("/") if f.startswith(root) else posixpath.relpath(f, root)
        dst = os.path.join(local, *rel.split("/"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        fs.get_file(f, dst)


def _files_under(root):
    out = []
    for d, _dirs, files in os.walk(root):
        for name in files:
            out.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(out)


def _push_order(rel):
    """Files named ``checkpoint`` (TensorFlow's pointer to the latest
    checkpoint) go last, after the files they name."""
    return (os.path.basename(rel) == "checkpoint", rel)


class Mirror:
    """A local directory that stands for a remote one, for libraries that
    take local paths only.

    ``Mirror(url)`` downloads what ``url`` holds into ``mirror.path`` (a new
    directory under ``dir``, default the working directory: a YARN
    container's, removed with it). :meth:`push` uploads the files that are
    new or changed since, ``checkpoint`` files last, and removes remote files
    that were removed here (``CheckpointManager(max_to_keep=...)``), so a
    program killed between two pushes leaves the previous complete
    checkpoint. A local ``url`` is used in place: ``path`` is the URL's path
    and push does nothing.

    Only one node should push to a directory (the chief, as TensorFlow's
    multi-worker checkpointing has it); every node may pull.
    """

    def __init__(self, url, dir=None):
        self.url = str(url)
        self.remote = is_remote(self.url)
        if not self.remote:
            self.path = os.path.abspath(_local(self.url))
            os.makedirs(self.path, exist_ok=True)
            self._synced = {}
            return
        self._fs, self._root = filesystem(self.url)
        self.path = tempfile.mkdtemp(prefix="tfos-mirror-", dir=dir or os.getcwd())
        self._synced = {}  # relative path -> (size, mtime_ns) as last pulled or pushed
        if self._fs.exists(self._root):
            get(self.url, self.path)
        self._synced = self._local_state()

    def _local_state(self):
        state = {}
        for rel in _files_under(self.path):
            st = os.stat(os.path.join(self.path, rel))
            state[rel] = (st.st_size, st.st_mtime_ns)
        return state

    def push(self) -> int:
        """Uploads what changed; returns the number of files uploaded."""
        if not self.remote:
            return 0
        now = self._local_state()
        changed = sorted((rel for rel, st in now.items() if self._synced.get(rel) != st), key=_push_order)
        self._fs, self._root = filesystem(self.url)  # a fresh delegation token, if it changed
        self._fs.makedirs(self._root, exist_ok=True)
        for rel in changed:
            _put_file(self._fs, os.path.join(self.path, rel), posixpath.join(self._root, rel.replace(os.sep, "/")))
        for rel in set(self._synced) - set(now):
            remote = posixpath.join(self._root, rel.replace(os.sep, "/"))
            if self._fs.exists(remote):
                self._fs.rm(remote)
        self._synced = now
        return len(changed)

    def close(self) -> None:
        """Removes the local copy (not pushed: call :meth:`push` first)."""
        if self.remote:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if os.environ.get("TFOS_HDFS_CREDENTIALS"):
    # a node's program: its token must not die while the program imports TensorFlow or computes, unused
    try:
        keep_tokens_fresh()
    except (OSError, ValueError, IndexError) as _e:  # an unreadable token file: the first HDFS call says so, with its path
        del _e
