package tfos.test;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.ResourceScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler;

/**
 * A YARN (1 ResourceManager, 2 NodeManagers) and HDFS (1 NameNode, 1 DataNode)
 * cluster in this JVM, every port on localhost, sized for a 2-core test machine.
 *
 * Usage: MiniCluster BASE_DIR CONF_DIR [--plain]. Writes the client
 * configuration (only the keys that differ from Hadoop's defaults) to
 * CONF_DIR, prints "READY fs.defaultFS rm-webapp" on stdout and runs until
 * stdin closes or the JVM gets SIGTERM, then stops both clusters.
 *
 * --plain: configured as a cluster set up from Hadoop's documentation is,
 * not for the tests' convenience: no yarn.application.classpath (the
 * ApplicationMaster gets Hadoop's default, $HADOOP_COMMON_HOME/... entries
 * that nothing here sets) and no log aggregation (the NodeManagers keep
 * the containers' logs in their own log dirs).
 */
public final class MiniCluster {
    /** Keys that would break or mislead clients outside this JVM. */
    private static final String[] DROP_PREFIXES = {
        "net.topology.node.switch.mapping.impl", "mapreduce.", "rpc.engine.",
        "hadoop.http.filter.initializers", "test.", "hdfs.minidfs.",
    };

    private MiniCluster() {
    }

    public static void main(String[] args) throws Exception {
        boolean plain = args.length == 3 && args[2].equals("--plain");
        boolean secure = args.length == 3 && args[2].equals("--secure");
        if (args.length != 2 && !plain && !secure) {
            System.err.println("usage: MiniCluster BASE_DIR CONF_DIR [--plain|--secure]");
            System.exit(2);
        }
        File base = new File(args[0]).getAbsoluteFile();
        File confDir = new File(args[1]).getAbsoluteFile();
        System.setProperty("test.build.data", new File(base, "data").getPath());
        System.setProperty("hadoop.log.dir", new File(base, "logs").getPath());

        Configuration hdfsConf = new Configuration();
        if (secure) {
            Kerberos.setUp(base, confDir, hdfsConf);
        }
        hdfsConf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(base, "dfs").getPath());
        hdfsConf.setInt("dfs.replication", 1);
        // the Kerberized cluster checks HDFS permissions, as a real one does (a user's files are not
        // another's): its users get their homes as an administrator gives them
        hdfsConf.setBoolean("dfs.permissions.enabled", secure);
        MiniDFSCluster dfs = new MiniDFSCluster.Builder(hdfsConf).numDataNodes(1).build();
        dfs.waitActive();
        if (secure) {
            org.apache.hadoop.fs.FileSystem admin = dfs.getFileSystem();
            for (String user : new String[] {"tfos", "other"}) {
                org.apache.hadoop.fs.Path home = new org.apache.hadoop.fs.Path("/user/" + user);
                admin.mkdirs(home);
                admin.setOwner(home, user, user);
            }
            org.apache.hadoop.fs.Path tmp = new org.apache.hadoop.fs.Path("/tmp");
            admin.mkdirs(tmp);
            admin.setPermission(tmp, new org.apache.hadoop.fs.permission.FsPermission((short) 01777));
        }
        String defaultFs = dfs.getFileSystem().getUri().toString();

        YarnConfiguration conf = new YarnConfiguration(hdfsConf);
        conf.set("fs.defaultFS", defaultFs);
        if (secure) {
            // YARN's web endpoints (the ResourceManager's UI, REST API and web proxy, the NodeManagers')
            // take SPNEGO, as a secure cluster's administrator sets them: without this filter they serve
            // anyone as the static user dr.who. HDFS's WebHDFS has SPNEGO of its own
            conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer");
        }
        // the CapacityScheduler with the DominantResourceCalculator: the FIFO scheduler allocates by
        // memory alone and gives no GPUs. Two queues, default and urgent, each guaranteed half the
        // cluster and allowed all of it (a user too: user-limit-factor 2), AMs may take all of it
        conf.setClass(YarnConfiguration.RM_SCHEDULER, CapacityScheduler.class, ResourceScheduler.class);
        conf.set("yarn.scheduler.capacity.resource-calculator",
                "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator");
        conf.set("yarn.scheduler.capacity.root.queues", "default,urgent");
        for (String q : new String[] {"default", "urgent"}) {
            conf.set("yarn.scheduler.capacity.root." + q + ".capacity", "50");
            conf.set("yarn.scheduler.capacity.root." + q + ".maximum-capacity", "100");
            conf.set("yarn.scheduler.capacity.root." + q + ".user-limit-factor", "2");
        }
        // and its preemption monitor: an application of urgent below its guarantee takes the capacity
        // back from default's (the AM is told at once, its containers are killed 30 s later). Nothing
        // is preempted while only one queue asks for containers, as every test but that of preemption
        // does. Each round may take all that is owed (the defaults take 10 % of the cluster, a fifth of
        // what is owed, and ignore the first 10 % over the guarantee: slow on a cluster this small).
        conf.setBoolean(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS, true);
        conf.set(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES, "org.apache.hadoop.yarn.server."
                + "resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy");
        conf.setLong("yarn.resourcemanager.monitor.capacity.preemption.monitoring_interval", 500);
        conf.setLong("yarn.resourcemanager.monitor.capacity.preemption.max_wait_before_kill", 30000);
        conf.setFloat("yarn.resourcemanager.monitor.capacity.preemption.total_preemption_per_round", 1.0f);
        conf.setFloat("yarn.resourcemanager.monitor.capacity.preemption.natural_termination_factor", 1.0f);
        conf.setFloat("yarn.resourcemanager.monitor.capacity.preemption.max_ignored_over_capacity", 0f);
        conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
        conf.set("yarn.scheduler.capacity.node-locality-delay", "-1");
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, 2048);
        conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", 2048);
        conf.setInt(YarnConfiguration.NM_PMEM_MB, 2048);
        conf.setInt(YarnConfiguration.NM_VCORES, 4);
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.0f);
        // YARN's default: an application may ask for a second ApplicationMaster attempt (--am-attempts 2)
        conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 2);
        // GPUs as a countable resource, 2 per NodeManager, declared rather than discovered (no GPU,
        // no nvidia-smi here): what tfos yarn --worker-gpus asks for is then scheduled and allocated
        conf.set("yarn.resource-types", "yarn.io/gpu");
        conf.set("yarn.nodemanager.resource-type.yarn.io/gpu", "2");
        // keep the containers' logs after the application, for the tests to read
        conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 3600);
        if (!plain) {
            // and aggregate them to HDFS when it ends, for `yarn logs` (tfos yarn logs)
            conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, true);
            conf.set(YarnConfiguration.NM_REMOTE_APP_LOG_DIR, "/tmp/logs");
            // ApplicationMasters find this configuration and Hadoop's classes where this JVM found them
            conf.set(YarnConfiguration.YARN_APPLICATION_CLASSPATH,
                    confDir.getPath() + File.pathSeparator + System.getProperty("java.class.path"));
        } else {
            conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
        }
        org.apache.hadoop.yarn.util.resource.ResourceUtils.resetResourceTypes(conf);
        MiniYARNCluster yarn = new MiniYARNCluster("tfos", 2, 1, 1);
        yarn.init(conf);
        yarn.start();
        if (!yarn.waitForNodeManagersToConnect(60000)) {
            throw new IOException("the NodeManagers did not connect within 60 s");
        }

        Configuration live = new Configuration(yarn.getConfig());
        live.addResource(dfs.getConfiguration(0));
        live.set("fs.defaultFS", defaultFs);
        writeConf(live, confDir);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(yarn, dfs)));
        System.out.println("READY " + defaultFs + " " + live.get(YarnConfiguration.RM_WEBAPP_ADDRESS));
        System.out.flush();
        while (System.in.read() >= 0) {
            // runs until the test closes stdin
        }
        System.exit(0);
    }

    private static void stop(MiniYARNCluster yarn, MiniDFSCluster dfs) {
        try {
            yarn.stop();
        } finally {
            dfs.shutdown();
        }
    }

    private static boolean dropped(String key) {
        for (String p : DROP_PREFIXES) {
            if (key.startsWith(p)) {
                return true;
            }
        }
        return false;
    }

    /** One site file holding every key whose value differs from the defaults. */
    private static void writeConf(Configuration live, File dir) throws IOException {
        // --secure's early core-site.xml (Kerberos.java) is on the classpath: not a default
        new File(dir, "core-site.xml").delete();
        Configuration defaults = new YarnConfiguration(new org.apache.hadoop.hdfs.HdfsConfiguration());
        Map<String, String> changed = new TreeMap<>();
        for (Map.Entry<String, String> e : live) {
            String key = e.getKey();
            String value = live.get(key);
            if (value != null && !dropped(key) && !value.equals(defaults.get(key))) {
                changed.put(key, value);
            }
        }
        Files.createDirectories(dir.toPath());
        Configuration out = new Configuration(false);
        for (Map.Entry<String, String> e : changed.entrySet()) {
            out.set(e.getKey(), e.getValue());
        }
        for (String name : Set.of("core-site.xml", "yarn-site.xml", "hdfs-site.xml")) {
            Path tmp = dir.toPath().resolve(name + ".tmp");
            // every key in every site file: yarn-default.xml is read after core-site.xml
            try (OutputStream os = new FileOutputStream(tmp.toFile())) {
                out.writeXml(os);
            }
            Files.move(tmp, dir.toPath().resolve(name), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
