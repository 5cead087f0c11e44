"""HDFS delegation tokens for the nodes of a TFCluster on a Kerberized
Hadoop (Spark-on-YARN under ``spark-submit --principal/--keytab``).

The executors' containers start with the tokens Spark gave them, and Spark
replaces those tokens before they expire (at 75 % of their renewal
interval, ``spark.security.credentials.renewalRatio``) in the driver's and
the executors' JVMs only: the nodes' programs, Python processes beside the
executor JVM, never see the new ones. So the driver publishes them: a
thread reads the driver JVM's current HDFS delegation token every few
seconds and, when it changed, writes it (Hadoop's credentials format) to
``<home>/.tfos/<cluster id>/credentials`` on HDFS, in a 0700 directory,
through the driver's own HDFS client. Each node's ``tfos.fs`` reads that
file with the token it holds, before that token expires
(``tfos._hdfstokens.Keeper``). The nodes of each attempt start with the
driver's newest token of when the attempt was formed (it travels in their
Spark task, as the cluster's secret and Spark's own token updates do) or
a newer one their executor kept, whichever lives longer than their
container's. The directory is removed at shutdown.

Without Kerberos, or without an HDFS default file system, nothing is done.
"""

import threading

from .._log import log as logger  # the "tfos" logger; see tfos/_log.py

HDFS_KIND = "HDFS_DELEGATION_TOKEN"


class Publisher(object):
    """The driver's side (see the module)."""

    def __init__(self, sc, cluster_id, period=1.0):
        self._sc = sc
        self._cid = cluster_id
        self._period = period
        self._stop = threading.Event()
        self._thread = None
        self._published = None
        self.url = None          # hdfs://.../credentials once started
        self.renew_ms = None     # the NameNode's renewal interval, as this client's configuration says

    def start(self):
        """Publish the current token and keep doing so; the file's URL, or
        None where there is nothing to do (no Kerberos, no HDFS)."""
        jvm = self._sc._jvm
        ugi = jvm.org.apache.hadoop.security.UserGroupInformation
        if not ugi.isSecurityEnabled():
            return None
        conf = self._sc._jsc.hadoopConfiguration()
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(conf)
        if fs.getUri().getScheme() != "hdfs":
            return None
        path = jvm.org.apache.hadoop.fs.Path
        self._fs = fs
        self._dir = path(fs.getHomeDirectory(), ".tfos/" + self._cid)
        fs.mkdirs(self._dir, jvm.org.apache.hadoop.fs.permission.FsPermission("700"))
        self._file = path(self._dir, "credentials")
        self.renew_ms = conf.getLong("dfs.namenode.delegation.token.renew-interval", 86400000)
        if not self._publish():
            logger.warning("the driver holds no HDFS delegation token: the nodes use their executors' "
                           "tokens, until those expire")
        self.url = str(fs.makeQualified(self._file).toString())
        self._thread = threading.Thread(target=self._run, name="tfos-hdfs-tokens", daemon=True)
        self._thread.start()
        return self.url

    def _newest(self):
        """The driver JVM's HDFS delegation token issued last, or None."""
        best, best_issue = None, -1
        creds = self._sc._jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getCredentials()
        for t in creds.getAllTokens().toArray():
            if t.getKind().toString() != HDFS_KIND:
                continue
            issue = t.decodeIdentifier().getIssueDate()
            if issue > best_issue:
                best, best_issue = t, issue
        return best

    def current(self):
        """The driver's newest HDFS token now, as a URL string (or None),
        for the nodes an attempt starts (it travels in their Spark task)."""
        try:
            token = self._newest()
        except Exception as e:  # noqa: BLE001 (the nodes fall back to what their executors hold)
            logger.warning("cannot read the driver's HDFS delegation token: %s", str(e).splitlines()[0])
            return None
        return None if token is None else str(token.encodeToUrlString())

    def _publish(self):
        jvm = self._sc._jvm
        token = self._newest()
        if token is None:
            return False
        key = str(token.encodeToUrlString())
        if key == self._published:
            return True
        creds = jvm.org.apache.hadoop.security.Credentials()
        creds.addToken(token.getService(), token)
        tmp = jvm.org.apache.hadoop.fs.Path(self._dir, ".credentials.tmp")
        out = self._fs.create(tmp, True)
        try:
            creds.writeTokenStorageToStream(out)
        finally:
            out.close()
        self._fs.setPermission(tmp, jvm.org.apache.hadoop.fs.permission.FsPermission("600"))
        # one atomic replacement (HDFS's rename with OVERWRITE): a node reading it never finds it missing
        hadoop_fs = jvm.org.apache.hadoop.fs
        overwrite = self._sc._gateway.new_array(hadoop_fs.Options.Rename, 1)
        overwrite[0] = hadoop_fs.Options.Rename.OVERWRITE
        hadoop_fs.FileContext.getFileContext(self._fs.getUri(), self._sc._jsc.hadoopConfiguration()).rename(
            tmp, self._file, overwrite)
        self._published = key
        logger.info("a new HDFS delegation token for the nodes in %s", self._file.toString())
        return True

    def _run(self):
        said = None
        while not self._stop.wait(self._period):
            try:
                self._publish()
                said = None
            except Exception as e:  # noqa: BLE001 (said once, tried again: the nodes' token may still do)
                if str(e) != said:
                    logger.warning("could not publish the driver's HDFS delegation token for the nodes "
                                   "(%s); trying again in %g s", str(e).splitlines()[0], self._period)
                said = str(e)

    def stop(self):
        """Stop publishing and remove the directory (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
            try:
                self._fs.delete(self._dir, True)
            except Exception as e:  # noqa: BLE001 (the JVM may be stopping: the dir is the user's, 0700)
                logger.warning("could not remove %s: %s", self._dir.toString(), e)
