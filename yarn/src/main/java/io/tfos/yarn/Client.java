package io.tfos.yarn;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.records.ApplicationAccessType;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LogAggregationStatus;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.SignalContainerCommand;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.exceptions.YarnException;
import org.apache.hadoop.yarn.util.Apps;

/**
 * The YARN client behind {@code tfos yarn} (the C command validates the options
 * and runs this with the cluster's Hadoop classpath).
 *
 * <pre>
 * Client submit --tfos BIN --name N --queue Q --am-memory MB --am-attempts N --accept-timeout S
 *               [--archive PATH[#ALIAS]]... [--file PATH[#ALIAS]]... [--env K=V]... -- AM_ARGS...
 * Client status APPLICATION_ID
 * Client kill APPLICATION_ID
 * </pre>
 *
 * submit uploads what it ships to the user's staging directory on the default
 * FileSystem, submits the ApplicationMaster and follows the application to its
 * end, printing its state changes and tracking URL on stderr; it exits with the
 * launcher's exit code (read from the diagnostics), 124 when YARN does not
 * start the ApplicationMaster within the accept timeout, 143 when killed. On
 * SIGINT/SIGTERM it kills the application. The per-cluster secret comes from
 * $TFOS_SECRET and travels in the application's credentials, never on a
 * command line.
 */
public final class Client {
    /** tfos yarn's stand-in for the default checkpoint dir, which needs the application id. */
    static final String DEFAULT_CHECKPOINT_DIR = "<DEFAULT_CHECKPOINT_DIR>";

    static final Text SECRET_KEY = new Text("tfos.secret");

    private Client() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage("a command: submit, status, logs or kill");
        }
        YarnConfiguration conf = new YarnConfiguration();
        // -Dtfos.principal/-Dtfos.keytab: tfos yarn --principal/--keytab (else the ticket cache)
        Kerberos.login(conf, System.getProperty("tfos.principal"), System.getProperty("tfos.keytab"));
        YarnClient yarn = YarnClient.createYarnClient();
        yarn.init(conf);
        yarn.start();
        int code;
        try {
            connect(yarn, conf);
            switch (args[0]) {
                case "submit":
                    code = submit(yarn, conf, List.of(args).subList(1, args.length));
                    break;
                case "status":
                    code = status(yarn, appId(args));
                    break;
                case "logs":
                    code = logs(yarn, conf, args);
                    break;
                case "kill":
                    if (args.length > 2 && "--graceful".equals(args[2])) {
                        code = killGracefully(yarn, appId(args));
                    } else {
                        yarn.killApplication(appId(args));
                        System.err.println("tfos: killed " + args[1]);
                        code = 0;
                    }
                    break;
                default:
                    usage("submit, status, logs or kill, not '" + args[0] + "'");
                    code = 2;
            }
        } catch (org.apache.hadoop.security.AccessControlException | YarnException e) {
            // another user's application, not shared with this one (tfos yarn --view-acl/--modify-acl)
            String msg = String.valueOf(e.getMessage()).split("\n")[0].strip();
            if (e instanceof YarnException && !msg.contains("AccessControlException")) {
                throw e;
            }
            System.err.println("tfos yarn: " + msg.replaceFirst("^.*AccessControlException: ", "")
                    + ": its owner may allow it (tfos yarn --modify-acl, --view-acl)");
            code = 1;
        } finally {
            yarn.stop();
        }
        System.exit(code);
    }

    /**
     * How long `kill --graceful` waits for a drained application to end before it kills it: the
     * launcher's drain grace (25 s by default, --drain-grace), the nodes' stop grace and the
     * ApplicationMaster's unregistering, with room to spare.
     */
    static final long GRACEFUL_WAIT_S = 120;

    /**
     * `tfos yarn kill --graceful APP`: YARN's GRACEFUL_SHUTDOWN signal to the ApplicationMaster's
     * container (SIGTERM to its process group, nothing killed), which the launcher in it takes as a
     * notice: every node checkpoints at one step and the application ends with exit code 75. Waits for
     * it to end, bounded, then kills it. An application whose ApplicationMaster has not started is
     * killed at once (there is nothing to drain).
     */
    private static int killGracefully(YarnClient yarn, ApplicationId id)
            throws IOException, YarnException, InterruptedException {
        ApplicationReport r = yarn.getApplicationReport(id);
        if (finished(r.getYarnApplicationState())) {
            System.err.println("tfos: " + id + " has already ended (" + r.getYarnApplicationState() + ")");
            return 0;
        }
        ContainerId am = null;
        if (r.getCurrentApplicationAttemptId() != null) {
            am = yarn.getApplicationAttemptReport(r.getCurrentApplicationAttemptId()).getAMContainerId();
        }
        if (am == null || r.getYarnApplicationState() != YarnApplicationState.RUNNING) {
            yarn.killApplication(id);
            System.err.println("tfos: killed " + id + " (" + r.getYarnApplicationState().name().toLowerCase()
                    + ": its ApplicationMaster has not started, there is nothing to drain)");
            return 0;
        }
        yarn.signalToContainer(am, SignalContainerCommand.GRACEFUL_SHUTDOWN);
        System.err.println("tfos: asked " + id + " to drain (SIGTERM to its ApplicationMaster, container " + am
                + "): every node checkpoints at one step, then it ends; waiting up to " + GRACEFUL_WAIT_S
                + " s for that");
        long deadline = System.nanoTime() + GRACEFUL_WAIT_S * 1_000_000_000L;
        while (System.nanoTime() < deadline) {
            r = yarn.getApplicationReport(id);
            if (finished(r.getYarnApplicationState())) {
                boolean drained = r.getDiagnostics() != null
                        && r.getDiagnostics().contains(ApplicationMaster.EXIT_MARK + ApplicationMaster.DRAINED_EXIT);
                System.err.println("tfos: " + id + (drained ? " drained and ended: submit the same command again "
                        + "to continue from its checkpoint" : " ended (" + r.getFinalApplicationStatus() + ")"));
                return 0;
            }
            Thread.sleep(1000);
        }
        yarn.killApplication(id);
        System.err.println("tfos: " + id + " did not end within " + GRACEFUL_WAIT_S + " s of the drain request: "
                + "killed it (its last checkpoint stands)");
        return 1;
    }

    /** How long the client tries a service that does not answer, unless the configuration says. */
    static final long CONNECT_TIMEOUT_MS = 30000;

    /**
     * A first call to a service of the cluster, bounded. Hadoop's clients retry an address that does not
     * answer for long (the ResourceManager's, yarn.resourcemanager.connect.max-wait.ms: 15 minutes by
     * default), saying nothing at WARN. After 5 s this says what it waits for; past the bound it says what
     * did not answer, and from where its address came, and exits 1 (nothing has been submitted yet).
     */
    static final class Watch implements AutoCloseable {
        private final Thread thread;

        Watch(String what, long boundMs, String hint) {
            thread = new Thread(() -> {
                try {
                    Thread.sleep(Math.min(5000, boundMs));
                    if (boundMs > 5000) {
                        System.err.println("tfos: waiting for " + what + " (up to " + boundMs / 1000 + " s)");
                        Thread.sleep(boundMs - 5000);
                    }
                } catch (InterruptedException e) {
                    return;
                }
                System.err.println("tfos yarn: " + what + " did not answer within " + boundMs / 1000 + " s. "
                        + hint);
                Runtime.getRuntime().halt(1);
            }, "tfos-watch");
            thread.setDaemon(true);
            thread.start();
        }

        @Override
        public void close() {
            thread.interrupt();
        }
    }

    /** The ResourceManager answers (bounded: {@link Watch}), or this exits saying so. */
    private static void connect(YarnClient yarn, YarnConfiguration conf) throws IOException, YarnException {
        String key = YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS;
        String[] src = conf.getPropertySources(key);
        boolean set = src != null && src.length > 0 && !src[src.length - 1].endsWith("-default.xml");
        long bound = set ? conf.getLong(key, CONNECT_TIMEOUT_MS) : CONNECT_TIMEOUT_MS;
        String what = "the ResourceManager at " + rmAddresses(conf);
        String hint = "Is it running, and is this the cluster's configuration? " + configSources()
                + (set ? "" : " (" + key + " in yarn-site.xml sets how long to try)");
        try (Watch w = new Watch(what, bound, hint)) {
            yarn.getYarnClusterMetrics();
        } catch (IOException e) {
            // Hadoop gave up first (its own bound is shorter): the same, with its reason, without its stack
            String why = String.valueOf(e.getMessage());
            System.err.println("tfos yarn: " + what + " did not answer (" + why.split("\n")[0].strip() + "). "
                    + hint);
            System.exit(1);
        }
    }

    /** The ResourceManager's address(es) this configuration gives, and where each came from. */
    static String rmAddresses(YarnConfiguration conf) {
        List<String> keys = new ArrayList<>();
        if (conf.getBoolean(YarnConfiguration.RM_HA_ENABLED, false)) {
            for (String id : conf.getTrimmedStringCollection(YarnConfiguration.RM_HA_IDS)) {
                keys.add(YarnConfiguration.RM_ADDRESS + "." + id);
            }
        }
        if (keys.isEmpty()) {
            keys.add(YarnConfiguration.RM_ADDRESS);
        }
        List<String> out = new ArrayList<>();
        for (String key : keys) {
            InetSocketAddress a = conf.getSocketAddr(key, YarnConfiguration.DEFAULT_RM_ADDRESS,
                    YarnConfiguration.DEFAULT_RM_PORT);
            String[] src = conf.getPropertySources(key);
            String[] hsrc = conf.getPropertySources(YarnConfiguration.RM_HOSTNAME);
            boolean fromDefaults = (src == null || src[src.length - 1].endsWith("-default.xml"))
                    && (hsrc == null || hsrc[hsrc.length - 1].endsWith("-default.xml"));
            out.add(a.getHostString() + ":" + a.getPort() + " (" + key + (fromDefaults
                    ? ": Hadoop's default; no yarn-site.xml on the classpath sets it or yarn.resourcemanager.hostname)"
                    : ", from " + String.join(", ", src != null ? src : hsrc) + ")"));
        }
        return String.join(", ", out);
    }

    /** Where this client's configuration comes from: the environment tfos yarn read it from. */
    static String configSources() {
        StringBuilder sb = new StringBuilder("The configuration comes from");
        boolean any = false;
        for (String var : new String[] {"HADOOP_CONF_DIR", "YARN_CONF_DIR"}) {
            String v = System.getenv(var);
            if (v != null && !v.isEmpty()) {
                sb.append(any ? " and " : " ").append(var).append('=').append(v);
                any = true;
            }
        }
        if (!any) {
            sb.append(" the Hadoop classpath (neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set)");
        }
        return sb.append('.').toString();
    }

    private static void usage(String what) {
        System.err.println("tfos yarn: expected " + what);
        System.exit(2);
    }

    private static ApplicationId appId(String[] args) {
        boolean graceful = args.length == 3 && args[0].equals("kill") && args[2].equals("--graceful");
        if (args.length != 2 && !graceful) {
            usage("one application id");
        }
        try {
            return ApplicationId.fromString(args[1]);
        } catch (IllegalArgumentException e) {
            usage("an application id like application_1700000000000_0001, not '" + args[1] + "'");
            return null;
        }
    }

    /**
     * logs APP [--follow]. A running application: its status page's URL, from which tfos yarn prints the
     * nodes' output so far (the launcher keeps the newest lines); with --follow, followed to the end. An
     * ended one: YARN's aggregated container logs, through Hadoop's own LogsCLI (yarn logs).
     */
    private static int logs(YarnClient yarn, YarnConfiguration conf, String[] args) throws Exception {
        boolean followIt = args.length == 3 && args[2].equals("--follow");
        ApplicationId id = appId(followIt ? new String[] {args[0], args[1]} : args);
        ApplicationReport r = yarn.getApplicationReport(id);
        YarnApplicationState s = r.getYarnApplicationState();
        String original = r.getOriginalTrackingUrl();
        if (s == YarnApplicationState.RUNNING && "N/A".equals(original) && "N/A".equals(r.getHost())) {
            // what the ResourceManager reports to a user without VIEW_APP access (yarn.acl.enable)
            System.err.println("tfos: " + UserGroupInformation.getCurrentUser().getShortUserName()
                    + " may not see the logs of " + id + ", which is " + r.getUser()
                    + "'s: its owner may share them (tfos yarn --view-acl)");
            return 1;
        }
        if (s == YarnApplicationState.RUNNING && original != null && original.startsWith("http")) {
            announceStatusPage(r);
            // following never kills the application: no accept timeout
            return followIt ? follow(yarn, conf, id, Double.POSITIVE_INFINITY) : 0;
        }
        if (!finished(s)) {
            System.err.println("tfos: " + id + " is " + s.name().toLowerCase() + ": no output yet");
            return 1;
        }
        // what YARN's aggregation of the logs has come to, as the ResourceManager knows it from the nodes
        LogAggregationStatus agg = r.getLogAggregationStatus();
        if (agg == LogAggregationStatus.DISABLED) {
            notAggregated(yarn, conf, r);
            return 1;
        }
        long until = System.nanoTime() + 60_000_000_000L;
        if (agg == LogAggregationStatus.NOT_START || agg == LogAggregationStatus.RUNNING) {
            System.err.println("tfos: waiting for YARN to aggregate the logs of " + id + " (up to 60 s)");
            while ((agg == LogAggregationStatus.NOT_START || agg == LogAggregationStatus.RUNNING)
                    && System.nanoTime() < until) {
                Thread.sleep(1000);
                agg = yarn.getApplicationReport(id).getLogAggregationStatus();
            }
            if (agg == LogAggregationStatus.NOT_START || agg == LogAggregationStatus.RUNNING) {
                System.err.println("tfos: YARN has not finished aggregating the logs of " + id
                        + " in 60 s (" + agg + "): what it has so far");
            }
        }
        Object cli;
        try {
            cli = Class.forName("org.apache.hadoop.yarn.client.cli.LogsCLI").getDeclaredConstructor().newInstance();
            // as `yarn logs` (LogsCLI.main) sets up the web client it reads running containers' logs with
            Class.forName("org.apache.hadoop.yarn.webapp.util.WebServiceClient")
                    .getMethod("initialize", org.apache.hadoop.conf.Configuration.class).invoke(null, conf);
        } catch (ReflectiveOperationException e) {
            System.err.println("tfos: " + id + " has ended, and its status page with it; Hadoop's LogsCLI is not on "
                    + "the classpath (hadoop-yarn-client): use yarn logs -applicationId " + id);
            return 1;
        }
        return org.apache.hadoop.util.ToolRunner.run(conf, (org.apache.hadoop.util.Tool) cli,
                new String[] {"-applicationId", id.toString()});
    }

    /**
     * tfos yarn logs of an ended application on a cluster without log aggregation: Hadoop's LogsCLI would
     * say only that a directory on HDFS does not exist. Say where the logs are instead.
     */
    private static void notAggregated(YarnClient yarn, YarnConfiguration conf, ApplicationReport r) {
        ApplicationId id = r.getApplicationId();
        String am = "";
        try {
            org.apache.hadoop.yarn.api.records.ApplicationAttemptReport a =
                    yarn.getApplicationAttemptReport(r.getCurrentApplicationAttemptId());
            if (a.getAMContainerId() != null) {
                am = " The ApplicationMaster's container, " + a.getAMContainerId() + (a.getHost() == null
                        || a.getHost().equals("N/A") ? "" : ", ran on " + a.getHost())
                        + "; its stderr names the host of every node's container (\"tfos: worker: container ...\").";
            }
        } catch (IOException | YarnException e) {
            // an application the ResourceManager no longer keeps: the rest still holds
        }
        String dirs = conf.getRaw(YarnConfiguration.NM_LOG_DIRS);
        System.err.println("tfos: " + id + " has ended (" + r.getYarnApplicationState().name().toLowerCase()
                + "), and its status page with it, and log aggregation is off on this cluster "
                + "(yarn.log-aggregation-enable): YARN has not collected its containers' logs.\n"
                + "tfos: they stay on the nodes that ran them, for yarn.nodemanager.log.retain-seconds ("
                + conf.get(YarnConfiguration.NM_LOG_RETAIN_SECONDS, "10800") + " s) after the end, in each "
                + "NodeManager's yarn.nodemanager.log-dirs (" + dirs
                + (dirs != null && dirs.contains("${yarn.log.dir}")
                        ? ", ${yarn.log.dir} being the NodeManager's log directory, $HADOOP_LOG_DIR" : "")
                + "), under " + id + "/<container id>/: stdout holds a node's output, the ApplicationMaster's "
                + "stderr the launcher's lines." + (am.isEmpty() ? "" : "\ntfos:" + am)
                + "\ntfos: (while an application runs, tfos yarn logs prints its nodes' output from its status page)");
    }

    /**
     * What this client tells tfos yarn (src/cli/yarn.c, client_line), one machine-readable line on stderr
     * each: EVENT, a kind, a value. tfos yarn takes these lines and passes every other line on to the user;
     * it never reads the user's lines for meaning.
     */
    static final String EVENT = "@tfos-yarn ";

    private static void event(String kind, String value) {
        System.err.println(EVENT + kind + " " + value);
    }

    /** The status page's URL: for the user, and as an event (tfos yarn follows the nodes' output there). */
    private static void announceStatusPage(ApplicationReport r) {
        System.err.println("tfos: status page " + r.getOriginalTrackingUrl() + " (coordinator " + r.getHost() + ":"
                + r.getRpcPort() + ")");
        event("status-page", r.getOriginalTrackingUrl());
    }

    private static int status(YarnClient yarn, ApplicationId id) throws IOException, YarnException {
        ApplicationReport r = yarn.getApplicationReport(id);
        System.out.println("application " + id);
        System.out.println("name        " + r.getName());
        System.out.println("state       " + r.getYarnApplicationState() + " (" + r.getFinalApplicationStatus() + ")");
        System.out.println("queue       " + r.getQueue());
        System.out.println("tracking    " + r.getTrackingUrl());
        System.out.println("coordinator " + r.getHost() + ":" + r.getRpcPort());
        System.out.println("diagnostics " + r.getDiagnostics().strip().replace("\n", "\n            "));
        return 0;
    }

    private static int submit(YarnClient yarn, YarnConfiguration conf, List<String> args)
            throws IOException, YarnException, InterruptedException {
        String tfos = null;
        String name = "tfos";
        String queue = "default";
        int amMemory = 512;
        int amAttempts = 1;
        double acceptTimeout = 120;
        List<String> archives = new ArrayList<>();
        List<String> files = new ArrayList<>();
        Map<String, String> env = new HashMap<>();
        // who besides the owner (and YARN's admins) may see the application (its report, tracking URL and
        // logs) and kill it: nobody unless given (Hadoop's ACL form: "user1,user2 group1", "*" for all)
        Map<ApplicationAccessType, String> acls = new HashMap<>(Map.of(ApplicationAccessType.VIEW_APP, " ",
                ApplicationAccessType.MODIFY_APP, " "));
        int i = 0;
        for (; i < args.size() && !args.get(i).equals("--"); i += 2) {
            if (i + 1 >= args.size()) {
                usage("a value after " + args.get(i));
            }
            String v = args.get(i + 1);
            switch (args.get(i)) {
                case "--tfos": tfos = v; break;
                case "--name": name = v; break;
                case "--queue": queue = v; break;
                case "--am-memory": amMemory = Integer.parseInt(v); break;
                case "--am-attempts": amAttempts = Integer.parseInt(v); break;
                case "--accept-timeout": acceptTimeout = Double.parseDouble(v); break;
                case "--view-acl": acls.put(ApplicationAccessType.VIEW_APP, v); break;
                case "--modify-acl": acls.put(ApplicationAccessType.MODIFY_APP, v); break;
                case "--archive": archives.add(v); break;
                case "--file": files.add(v); break;
                case "--env": env.put(v.substring(0, v.indexOf('=')), v.substring(v.indexOf('=') + 1)); break;
                default: usage("a submit option, not '" + args.get(i) + "'");
            }
        }
        if (tfos == null || i >= args.size()) {
            usage("--tfos BIN and -- AM_ARGS");
        }
        List<String> amArgs = new ArrayList<>(args.subList(i + 1, args.size()));

        YarnClientApplication app = yarn.createApplication();
        ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
        ApplicationId id = ctx.getApplicationId();
        FileSystem fs = FileSystem.get(conf);
        Path staging = new Path(fs.getHomeDirectory(), ".tfos/" + id);
        try (Watch w = new Watch("the default FileSystem at " + fs.getUri() + " (fs.defaultFS)", CONNECT_TIMEOUT_MS,
                "Is it running, and is this the cluster's configuration? " + configSources())) {
            fs.mkdirs(staging, new FsPermission((short) 0700));
        }

        for (int k = 0; k < amArgs.size(); k++) {
            if (amArgs.get(k).equals(DEFAULT_CHECKPOINT_DIR)) {
                // kept after the application, as tfos run keeps <log-dir>/checkpoints
                Path ckpt = fs.makeQualified(new Path(fs.getHomeDirectory(), "tfos-checkpoints/" + id));
                fs.mkdirs(ckpt);
                amArgs.set(k, ckpt.toString());
                System.err.println("tfos: checkpoints in " + ckpt);
            }
        }

        Map<String, LocalResource> shipped = new LinkedHashMap<>();
        shipped.put("tfos", upload(fs, staging, tfos, "tfos", LocalResourceType.FILE));
        for (String a : archives) {
            String[] pa = split(a);
            shipped.put(pa[1], upload(fs, staging, pa[0], pa[1], LocalResourceType.ARCHIVE));
        }
        for (String f : files) {
            String[] pf = split(f);
            shipped.put(pf[1], upload(fs, staging, pf[0], pf[1], LocalResourceType.FILE));
        }
        Map<String, LocalResource> amResources = new LinkedHashMap<>(shipped);
        String jar = new File(Client.class.getProtectionDomain().getCodeSource().getLocation().getPath()).getPath();
        amResources.put("tfos-yarn.jar", upload(fs, staging, jar, "tfos-yarn.jar", LocalResourceType.FILE));
        File confZip = confArchive();
        if (confZip != null) {
            try {
                amResources.put(CONF_ALIAS, upload(fs, staging, confZip.getPath(), CONF_ALIAS,
                        LocalResourceType.ARCHIVE));
            } finally {
                confZip.delete();
            }
        }

        String principal = System.getProperty("tfos.principal");
        if (principal != null && UserGroupInformation.isSecurityEnabled()) {
            // for the ApplicationMaster alone, to keep the nodes' delegation tokens fresh (Kerberos.Renewal)
            amResources.put(Kerberos.KEYTAB_ALIAS, upload(fs, staging, System.getProperty("tfos.keytab"),
                    Kerberos.KEYTAB_ALIAS, LocalResourceType.FILE));
        }

        Map<String, String> amEnv = new HashMap<>(env);
        if (amResources.containsKey(Kerberos.KEYTAB_ALIAS)) {
            amEnv.put(Kerberos.PRINCIPAL_ENV, principal);
        }
        amEnv.put(Shipped.ENV, Shipped.encode(shipped));
        amEnv.put(ApplicationMaster.QUEUE_ENV, queue);
        amEnv.put("TFOS_YARN_STAGING", fs.makeQualified(staging).toString());
        String webhdfs = webhdfsAddress(conf, fs);
        if (webhdfs != null && !amEnv.containsKey("TFOS_WEBHDFS")) {
            amEnv.put("TFOS_WEBHDFS", webhdfs); // tfos.fs in the programs: hdfs:// over WebHDFS
        }
        Apps.addToEnvironment(amEnv, ApplicationConstants.Environment.CLASSPATH.name(),
                amClasspath(conf, confZip != null), ApplicationConstants.CLASS_PATH_SEPARATOR);

        // exec: the JVM is the container's process, not a child of YARN's `bash -c`, which a graceful
        // kill's SIGTERM would end (and the NodeManager would take the container for gone)
        StringBuilder cmd = new StringBuilder("exec " + ApplicationConstants.Environment.JAVA_HOME.$$() + "/bin/java");
        cmd.append(" -Xmx").append(Math.max(128, amMemory * 3 / 5)).append('m');
        // C1 only: the ApplicationMaster mostly waits on RPCs and its nodes, and C2's compiler threads would
        // take more of its container's CPU than they save
        cmd.append(" -XX:TieredStopAtLevel=1");
        String krb5 = System.getProperty("java.security.krb5.conf");
        if (krb5 != null) {
            cmd.append(" -Djava.security.krb5.conf=").append(Shipped.quote(krb5)); // as the client has it
        }
        cmd.append(" ").append(ApplicationMaster.class.getName()).append(" --");
        for (String a : amArgs) {
            cmd.append(' ').append(Shipped.quote(a));
        }
        cmd.append(" 1>").append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stdout 2>")
                .append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stderr");

        Credentials creds = new Credentials();
        String secret = System.getenv("TFOS_SECRET");
        if (secret != null) {
            creds.addSecretKey(SECRET_KEY, secret.getBytes(StandardCharsets.US_ASCII));
        }
        if (UserGroupInformation.isSecurityEnabled()) {
            // HDFS delegation tokens for the containers, renewed by the ResourceManager
            String renewer = conf.get(YarnConfiguration.RM_PRINCIPAL);
            fs.addDelegationTokens(renewer, creds);
        }
        DataOutputBuffer dob = new DataOutputBuffer();
        creds.writeTokenStorageToStream(dob);
        ByteBuffer tokens = ByteBuffer.wrap(dob.getData(), 0, dob.getLength());

        ctx.setApplicationName(name);
        ctx.setQueue(queue);
        ctx.setApplicationType("TFOS");
        // a node's failure is the launcher's to heal (--max-restarts); another ApplicationMaster attempt is
        // for the loss of the ApplicationMaster itself (its container killed, its host lost)
        int cap = conf.getInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, YarnConfiguration.DEFAULT_RM_AM_MAX_ATTEMPTS);
        if (amAttempts > cap) {
            System.err.println("tfos: --am-attempts " + amAttempts + ": this cluster allows at most " + cap
                    + " (yarn.resourcemanager.am.max-attempts); YARN will make " + cap);
        }
        ctx.setMaxAppAttempts(amAttempts);
        ctx.setResource(Resource.newInstance(amMemory, 1));
        ContainerLaunchContext am = ContainerLaunchContext.newInstance(amResources, amEnv,
                List.of(cmd.toString()), null, tokens, null);
        am.setApplicationACLs(acls);
        ctx.setAMContainerSpec(am);
        Thread killer = new Thread(() -> {
            // bounded: whatever else the JVM's shutdown waits on, it ends 10 s after the kill was asked
            Thread halt = new Thread(() -> {
                try {
                    Thread.sleep(10000);
                } catch (InterruptedException e) {
                    return;
                }
                Runtime.getRuntime().halt(143);
            }, "tfos-halt");
            halt.setDaemon(true);
            halt.start();
            try {
                ApplicationReport r = yarn.getApplicationReport(id);
                if (!finished(r.getYarnApplicationState())) {
                    yarn.killApplication(id);
                    System.err.println("tfos: killed " + id);
                }
            } catch (IOException | YarnException e) {
                System.err.println("tfos: could not kill " + id + ": " + e);
            }
        });
        Runtime.getRuntime().addShutdownHook(killer);
        yarn.submitApplication(ctx);
        System.err.println("tfos: submitted " + id + " to queue " + queue);
        try {
            return follow(yarn, conf, id, acceptTimeout);
        } finally {
            try {
                Runtime.getRuntime().removeShutdownHook(killer);
            } catch (IllegalStateException e) {
                // shutting down (SIGINT/SIGTERM): the hook kills the application
            }
            try {
                fs.delete(staging, true);
            } catch (IOException e) {
                // shutting down: Hadoop's own hook may have closed the FileSystem first; the
                // staging dir is then left (it holds the binary and the shipped files only)
                System.err.println("tfos: could not remove the staging dir " + staging + ": " + e.getMessage());
            }
        }
    }

    /** The link name of the client's Hadoop configuration in the ApplicationMaster's container. */
    static final String CONF_ALIAS = "tfos-hadoop-conf";

    /** The Hadoop jars tfos yarn runs this client with (-Dtfos.hadoop.classpath, set by src/cli/yarn.c). */
    static final String HADOOP_CP_PROPERTY = "tfos.hadoop.classpath";

    /**
     * The ApplicationMaster's classpath, which must not depend on the cluster's yarn.application.classpath
     * alone: a cluster set up from Hadoop's documentation has none, and Hadoop's default
     * ($HADOOP_COMMON_HOME/share/hadoop/..., $HADOOP_CONF_DIR) needs variables its NodeManagers may not
     * pass to containers. So, in order: tfos-yarn.jar; this client's configuration (shipped, so the
     * ApplicationMaster reaches the ResourceManager this client reached); the cluster's
     * yarn.application.classpath, or Hadoop's default; then the Hadoop jars this client runs with, at
     * the paths it has them (the same paths on every node of a cluster installed alike; later entries,
     * so the cluster's own jars come first where it names them).
     */
    static String amClasspath(YarnConfiguration conf, boolean shippedConf) {
        String sep = ApplicationConstants.CLASS_PATH_SEPARATOR;
        StringBuilder cp = new StringBuilder("./tfos-yarn.jar");
        if (shippedConf) {
            cp.append(sep).append(ApplicationConstants.Environment.PWD.$$()).append('/').append(CONF_ALIAS);
        }
        for (String c : conf.getStrings(YarnConfiguration.YARN_APPLICATION_CLASSPATH,
                YarnConfiguration.DEFAULT_YARN_CROSS_PLATFORM_APPLICATION_CLASSPATH)) {
            cp.append(sep).append(c.trim());
        }
        for (String c : System.getProperty(HADOOP_CP_PROPERTY, "").split(File.pathSeparator)) {
            if (!c.isBlank()) {
                cp.append(sep).append(c.trim());
            }
        }
        return cp.toString();
    }

    /**
     * This client's Hadoop configuration, for the ApplicationMaster: the *.xml files of the directories on
     * this JVM's classpath (tfos yarn puts $HADOOP_CONF_DIR and $YARN_CONF_DIR first), the first of each
     * name, as Configuration finds them, zipped into a temporary file; null when there are none.
     */
    static File confArchive() throws IOException {
        Set<String> names = new LinkedHashSet<>();
        File zip = null;
        ZipOutputStream out = null;
        try {
            for (String e : System.getProperty("java.class.path", "").split(File.pathSeparator)) {
                File[] xml = new File(e).listFiles((d, n) -> n.endsWith(".xml"));
                if (xml == null) {
                    continue;
                }
                Arrays.sort(xml);
                for (File f : xml) {
                    if (!f.isFile() || !names.add(f.getName())) {
                        continue;
                    }
                    if (out == null) {
                        zip = File.createTempFile("tfos-hadoop-conf", ".zip");
                        out = new ZipOutputStream(new FileOutputStream(zip));
                    }
                    out.putNextEntry(new ZipEntry(f.getName()));
                    try (InputStream in = new FileInputStream(f)) {
                        in.transferTo(out);
                    }
                    out.closeEntry();
                }
            }
        } catch (IOException e) {
            if (zip != null) {
                zip.delete();
            }
            throw e;
        } finally {
            if (out != null) {
                out.close();
            }
        }
        return zip;
    }

    /**
     * The NameNode's WebHDFS base (http://host:port) when the default
     * FileSystem is HDFS, else null. Single NameNode; an HA nameservice's
     * users set TFOS_WEBHDFS themselves (--env).
     */
    static String webhdfsAddress(org.apache.hadoop.conf.Configuration conf, FileSystem fs) {
        if (!"hdfs".equals(fs.getUri().getScheme()) || fs.getUri().getHost() == null) {
            return null;
        }
        boolean https = "HTTPS_ONLY".equalsIgnoreCase(conf.get("dfs.http.policy", ""));
        String addr = https ? conf.get("dfs.namenode.https-address", "0.0.0.0:9871")
                : conf.get("dfs.namenode.http-address", "0.0.0.0:9870");
        int colon = addr.lastIndexOf(':');
        String host = colon > 0 ? addr.substring(0, colon) : "";
        if (host.isEmpty() || host.equals("0.0.0.0")) {
            host = fs.getUri().getHost();
        }
        return (https ? "https://" : "http://") + host + ":" + addr.substring(colon + 1);
    }

    private static String[] split(String spec) {
        int hash = spec.lastIndexOf('#');
        String path = hash < 0 ? spec : spec.substring(0, hash);
        String alias = hash < 0 ? new Path(path).getName() : spec.substring(hash + 1);
        return new String[] {path, alias};
    }

    private static LocalResource upload(FileSystem fs, Path staging, String local, String alias,
            LocalResourceType type) throws IOException {
        Path src = new Path(local);
        // under its own name (YARN unpacks archives by their extension), in a directory of its alias
        Path dst = new Path(new Path(staging, alias), src.getName());
        if (src.toUri().getScheme() == null) {
            src = new Path(new File(local).getAbsoluteFile().toURI());
        }
        FileSystem srcFs = src.getFileSystem(fs.getConf());
        if (!srcFs.exists(src)) {
            throw new IOException("tfos yarn: " + local + " does not exist");
        }
        if (srcFs.getUri().equals(fs.getUri())) {
            return Shipped.resource(fs, src, type); // already there: localized from where it is
        }
        fs.copyFromLocalFile(false, true, src, dst);
        return Shipped.resource(fs, dst, type);
    }

    private static boolean finished(YarnApplicationState s) {
        return EnumSet.of(YarnApplicationState.FINISHED, YarnApplicationState.FAILED, YarnApplicationState.KILLED)
                .contains(s);
    }

    /** How often the client says what it waits for while YARN has not started the ApplicationMaster. */
    private static final long WAIT_NOTE_NS = 5_000_000_000L;

    /**
     * Follow the application to its end; the exit code as tfos run's. While YARN has not started the
     * ApplicationMaster, says every 5 s what it waits for (YARN's own words: the queue's limits, the AM
     * container launched, ...).
     */
    private static int follow(YarnClient yarn, YarnConfiguration conf, ApplicationId id, double acceptTimeout)
            throws IOException, YarnException, InterruptedException {
        YarnApplicationState last = null;
        String url = null;
        ApplicationAttemptId attempt = null; // the ApplicationMaster attempt whose page was announced
        long submitted = System.nanoTime();
        long noted = submitted;
        while (true) {
            ApplicationReport r = yarn.getApplicationReport(id);
            YarnApplicationState s = r.getYarnApplicationState();
            ApplicationAttemptId current = r.getCurrentApplicationAttemptId();
            if (attempt != null && current != null && !current.equals(attempt)) {
                // the ApplicationMaster was lost and YARN started another (--am-attempts): its page anew
                String why = "";
                try {
                    String d = yarn.getApplicationAttemptReport(attempt).getDiagnostics();
                    why = d == null || d.isBlank() ? "" : ": " + STAMP.matcher(d).replaceAll("").strip().split("\n")[0];
                } catch (IOException | YarnException e) {
                    // the report of the attempt before may be gone: the new one is what matters
                }
                System.err.println("tfos: the ApplicationMaster's attempt " + attempt.getAttemptId() + " of " + id
                        + " ended" + why + "; YARN started attempt " + current.getAttemptId()
                        + ", whose nodes start again from their checkpoints");
                attempt = null;
                url = null;
                submitted = noted = System.nanoTime(); // the accept timeout counts for this attempt
            }
            if (s != last) {
                System.err.println("tfos: " + id + " " + s.name().toLowerCase());
                last = s;
            }
            String original = r.getOriginalTrackingUrl();
            if (s == YarnApplicationState.RUNNING && url == null && original != null && !original.isEmpty()
                    && !original.equals("N/A")) {
                url = original;
                attempt = current;
                announceStatusPage(r);
            }
            if (finished(s)) {
                return ended(r, conf, url != null);
            }
            boolean waiting = s == YarnApplicationState.ACCEPTED || s == YarnApplicationState.SUBMITTED
                    || s == YarnApplicationState.NEW || s == YarnApplicationState.NEW_SAVING;
            long now = System.nanoTime();
            if (waiting && now - submitted > (long) (acceptTimeout * 1e9)) {
                yarn.killApplication(id);
                System.err.println("tfos: " + id + " was not started within " + acceptTimeout
                        + " s (YARN could not give the ApplicationMaster its container: "
                        + r.getDiagnostics().strip() + "); killed it");
                return 124;
            }
            if (waiting && now - noted >= WAIT_NOTE_NS) {
                noted = now;
                String diag = STAMP.matcher(r.getDiagnostics() == null ? "" : r.getDiagnostics()).replaceAll("")
                        .strip().replace('\n', ' ');
                System.err.println("tfos: waiting for YARN to start the ApplicationMaster (queue " + r.getQueue()
                        + ", " + (now - submitted) / 1_000_000_000L + " s"
                        + (Double.isInfinite(acceptTimeout) ? "" : " of --accept-timeout " + (long) acceptTimeout)
                        + ")" + (diag.isEmpty() ? "" : ": " + diag));
            }
            Thread.sleep(500);
        }
    }

    /** YARN's timestamps in diagnostics: "[2026-11-26 16:36:53.764]" and "[Thu Nov 26 16:36:53 +0000 2026] ". */
    private static final Pattern STAMP = Pattern.compile("\\[(\\d{4}-\\d\\d-\\d\\d [0-9:.]+|\\w{3} \\w{3} [^\\]]+)\\] ?");

    /**
     * The exit code of an ended application, and what to say about it. Its ApplicationMaster's
     * diagnostics (ApplicationMaster.run) hold the launcher's exit code, the ApplicationMaster's own
     * notes (YARN's refusals, containers never allocated) and, after TAIL_MARK, the launcher's last lines:
     * those reached this terminal as they were written when tfos yarn followed the status page
     * (followed), so they are printed only when it did not.
     */
    private static int ended(ApplicationReport r, YarnConfiguration conf, boolean followed) {
        ApplicationId id = r.getApplicationId();
        YarnApplicationState s = r.getYarnApplicationState();
        String diag = r.getDiagnostics() == null ? "" : r.getDiagnostics().strip();
        int mark = diag.indexOf(ApplicationMaster.EXIT_MARK);
        if (mark >= 0) {
            String rest = diag.substring(mark + ApplicationMaster.EXIT_MARK.length());
            int end = 0;
            while (end < rest.length() && Character.isDigit(rest.charAt(end))) {
                end++;
            }
            int code = Integer.parseInt(rest.substring(0, end));
            rest = rest.substring(end);
            if (code == ApplicationMaster.DRAINED_EXIT) {
                System.err.println("tfos: " + id + " drained (exit code " + code + "): every node wrote its checkpoint "
                        + "at one step; submit the same command again to continue");
            } else if (code != 0) {
                int tail = rest.indexOf(ApplicationMaster.TAIL_MARK);
                String notes = tail < 0 ? rest : rest.substring(0, tail);
                String launcher = tail < 0 ? "" : rest.substring(tail + ApplicationMaster.TAIL_MARK.length());
                String text = (notes.strip() + (followed ? "" : "\n" + launcher.strip())).strip();
                System.err.println("tfos: " + id + " failed (exit code " + code + ")" + (text.isEmpty() ? "" : ":\n"
                        + text));
            }
            return code;
        }
        if (s == YarnApplicationState.KILLED) {
            System.err.println("tfos: " + id + " was killed" + (diag.isEmpty() ? "" : " (" + diag + ")")
                    + "; exit code 143, as tfos run's when it is stopped with SIGTERM");
            return 143;
        }
        if (r.getFinalApplicationStatus() == FinalApplicationStatus.SUCCEEDED) {
            return 0;
        }
        amFailed(id, diag, conf);
        return 1;
    }

    /**
     * The ApplicationMaster's container failed before tfos ran in it (no exit code of the launcher): YARN's
     * diagnostics, each of their paragraphs once (YARN repeats the container's stderr) and without
     * timestamps, and, when it could not find Hadoop's classes, what its classpath was and how to fix it.
     */
    private static void amFailed(ApplicationId id, String diag, YarnConfiguration conf) {
        Set<String> paragraphs = new LinkedHashSet<>();
        for (String p : STAMP.matcher(diag).replaceAll("\n").split("\n\\s*\n")) {
            if (!p.isBlank()) {
                paragraphs.add(p.strip());
            }
        }
        System.err.println("tfos: " + id + " failed before tfos started in its ApplicationMaster's container. "
                + "YARN says:\n  " + String.join("\n", paragraphs).replace("\n", "\n  "));
        if (MISSING_HADOOP.matcher(diag).find()) {
            String[] set = conf.getPropertySources(YarnConfiguration.YARN_APPLICATION_CLASSPATH);
            boolean clusterCp = set != null && !set[set.length - 1].endsWith("-default.xml");
            String mine = System.getProperty(HADOOP_CP_PROPERTY, "");
            System.err.println("tfos: the ApplicationMaster's JVM did not find Hadoop's classes. Its classpath "
                    + "holds the cluster's yarn.application.classpath ("
                    + (clusterCp ? conf.get(YarnConfiguration.YARN_APPLICATION_CLASSPATH)
                            : "not set in this configuration: Hadoop's default, $HADOOP_COMMON_HOME/share/hadoop/"
                            + "common/* and the like, which the NodeManagers did not define")
                    + ") and the Hadoop jars this client runs with ("
                    + (mine.length() > 200 ? mine.substring(0, 200) + "..." : mine)
                    + "), which the nodes do not have at those paths. Fix: set yarn.application.classpath in the "
                    + "cluster's yarn-site.xml to the nodes' Hadoop jars (`yarn classpath` on a node prints "
                    + "them), or give tfos yarn --hadoop-classpath (or TFOS_HADOOP_CLASSPATH) with jars at paths "
                    + "every node has (docs/YARN.md, \"Finding Hadoop\").");
        }
    }

    private static final Pattern MISSING_HADOOP = Pattern.compile(
            "(NoClassDefFoundError|ClassNotFoundException):? org[./]apache[./]hadoop");
}
