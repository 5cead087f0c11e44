package tfos.test;

import java.io.File;
import java.nio.file.Files;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * --secure mode: a MiniKdc in this JVM, service principals for HDFS and YARN
 * with their keytab, and the settings a Kerberized cluster has (authentication,
 * authorization, block tokens, SASL on data transfer). Writes CONF_DIR/krb5.conf
 * and CONF_DIR/user.keytab for the test principal "tfos@REALM" (other.keytab: "other@REALM", a
 * second user). Application ACLs are enforced (yarn.acl.enable; the admin is the JVM's user).
 */
final class Kerberos {
    private Kerberos() {
    }

    static void setUp(File base, File confDir, Configuration conf) throws Exception {
        Properties kdcConf = MiniKdc.createConf();
        File kdcDir = new File(base, "kdc");
        Files.createDirectories(kdcDir.toPath());
        MiniKdc kdc = new MiniKdc(kdcConf, kdcDir);
        kdc.start();
        Runtime.getRuntime().addShutdownHook(new Thread(kdc::stop));
        String realm = kdc.getRealm();
        File keytab = new File(kdcDir, "service.keytab");
        kdc.createPrincipal(keytab, "hdfs/localhost", "yarn/localhost", "HTTP/localhost");
        Files.createDirectories(confDir.toPath());
        kdc.createPrincipal(new File(confDir, "user.keytab"), "tfos");
        kdc.createPrincipal(new File(confDir, "other.keytab"), "other"); // a second user of the cluster
        Files.copy(kdc.getKrb5conf().toPath(), new File(confDir, "krb5.conf").toPath(),
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        String svc = keytab.getAbsolutePath();
        conf.set("hadoop.security.authentication", "kerberos");
        conf.setBoolean("hadoop.security.authorization", true);
        conf.set("dfs.namenode.kerberos.principal", "hdfs/localhost@" + realm);
        conf.set("dfs.namenode.keytab.file", svc);
        conf.set("dfs.datanode.kerberos.principal", "hdfs/localhost@" + realm);
        conf.set("dfs.datanode.keytab.file", svc);
        conf.set("dfs.web.authentication.kerberos.principal", "HTTP/localhost@" + realm);
        conf.set("dfs.web.authentication.kerberos.keytab", svc);
        // WebHDFS (and the other web endpoints) take SPNEGO or a delegation token, never user.name=
        conf.set("hadoop.http.authentication.type", "kerberos");
        conf.set("hadoop.http.authentication.simple.anonymous.allowed", "false");
        conf.set("hadoop.http.authentication.kerberos.principal", "HTTP/localhost@" + realm);
        conf.set("hadoop.http.authentication.kerberos.keytab", svc);
        conf.setBoolean("dfs.block.access.token.enable", true);
        conf.set("dfs.data.transfer.protection", "authentication");
        conf.set("dfs.http.policy", "HTTP_ONLY");
        conf.setBoolean("ignore.secure.ports.for.testing", true);
        // short token lifetimes: renewal has to work for a test to pass
        conf.setLong("dfs.namenode.delegation.token.renew-interval",
                Long.getLong("tfos.token.renew.ms", 60000L));
        conf.setLong("dfs.namenode.delegation.token.max-lifetime",
                Long.getLong("tfos.token.max.ms", 120000L));
        // one JVM, one login: the ResourceManager and NodeManagers run as the JVM's user, hdfs/localhost
        // (a real cluster has yarn/HOST for them), and clients must expect that principal
        conf.set("yarn.resourcemanager.principal", "hdfs/localhost@" + realm);
        conf.set("yarn.resourcemanager.keytab", svc);
        conf.set("yarn.nodemanager.principal", "hdfs/localhost@" + realm);
        conf.set("yarn.nodemanager.keytab", svc);
        // applications' ACLs enforced: only the owner, whom it names, and the admins (this JVM's user)
        conf.setBoolean("yarn.acl.enable", true);
        conf.set("yarn.admin.acl", "hdfs");
        // the CapacityScheduler lets a queue's administrators see and kill its applications, and without
        // these settings that is everyone: a shared cluster names them
        conf.set("yarn.scheduler.capacity.root.acl_administer_queue", "hdfs");
        for (String q : new String[] {"default", "urgent"}) {
            conf.set("yarn.scheduler.capacity.root." + q + ".acl_administer_queue", " ");
        }
        conf.set("hadoop.proxyuser.yarn.hosts", "*");
        conf.set("hadoop.proxyuser.yarn.groups", "*");
        // a long-running application's tokens outlive their maximum lifetime where it matters to YARN itself
        // (localizing a new ApplicationMaster attempt's files, aggregating logs): the ResourceManager gets new
        // HDFS tokens for it as a proxy user of its owner. Its principal's user here is hdfs
        conf.setBoolean("yarn.resourcemanager.proxy-user-privileges.enabled", true);
        conf.set("hadoop.proxyuser.hdfs.hosts", "*");
        conf.set("hadoop.proxyuser.hdfs.groups", "*");
        // what this JVM's own clients read (a NodeManager's localizer makes a new Configuration): the
        // same settings, in CONF_DIR/core-site.xml, on this JVM's classpath in --secure mode (yarncluster.py);
        // the whole configuration replaces it when the cluster is up
        Configuration site = new Configuration(false);
        for (java.util.Map.Entry<String, String> e : conf) {
            site.set(e.getKey(), e.getValue());
        }
        try (java.io.OutputStream out = new java.io.FileOutputStream(new File(confDir, "core-site.xml"))) {
            site.writeXml(out);
        }
        UserGroupInformation.setConfiguration(conf);
        UserGroupInformation.loginUserFromKeytab("hdfs/localhost@" + realm, svc);
        System.out.println("KDC " + realm + " " + kdc.getHost() + ":" + kdc.getPort());
    }
}
