package io.tfos.yarn;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.Resource;
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
 * Client submit --tfos BIN --name N --queue Q --am-memory MB --accept-timeout S
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
        YarnClient yarn = YarnClient.createYarnClient();
        yarn.init(conf);
        yarn.start();
        int code;
        try {
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
                    yarn.killApplication(appId(args));
                    System.err.println("tfos: killed " + args[1]);
                    code = 0;
                    break;
                default:
                    usage("submit, status, logs or kill, not '" + args[0] + "'");
                    code = 2;
            }
        } finally {
            yarn.stop();
        }
        System.exit(code);
    }

    private static void usage(String what) {
        System.err.println("tfos yarn: expected " + what);
        System.exit(2);
    }

    private static ApplicationId appId(String[] args) {
        if (args.length != 2) {
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
        if (s == YarnApplicationState.RUNNING && original != null && original.startsWith("http")) {
            announceStatusPage(r);
            // following never kills the application: no accept timeout
            return followIt ? follow(yarn, id, Double.POSITIVE_INFINITY) : 0;
        }
        if (!finished(s)) {
            System.err.println("tfos: " + id + " is " + s.name().toLowerCase() + ": no output yet");
            return 1;
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
        double acceptTimeout = 120;
        List<String> archives = new ArrayList<>();
        List<String> files = new ArrayList<>();
        Map<String, String> env = new HashMap<>();
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
                case "--accept-timeout": acceptTimeout = Double.parseDouble(v); break;
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
        fs.mkdirs(staging, new FsPermission((short) 0700));

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

        Map<String, String> amEnv = new HashMap<>(env);
        amEnv.put(Shipped.ENV, Shipped.encode(shipped));
        amEnv.put("TFOS_YARN_STAGING", fs.makeQualified(staging).toString());
        String webhdfs = webhdfsAddress(conf, fs);
        if (webhdfs != null && !amEnv.containsKey("TFOS_WEBHDFS")) {
            amEnv.put("TFOS_WEBHDFS", webhdfs); // tfos.fs in the programs: hdfs:// over WebHDFS
        }
        StringBuilder cp = new StringBuilder("./tfos-yarn.jar");
        for (String c : conf.getStrings(YarnConfiguration.YARN_APPLICATION_CLASSPATH,
                YarnConfiguration.DEFAULT_YARN_CROSS_PLATFORM_APPLICATION_CLASSPATH)) {
            cp.append(ApplicationConstants.CLASS_PATH_SEPARATOR).append(c.trim());
        }
        Apps.addToEnvironment(amEnv, ApplicationConstants.Environment.CLASSPATH.name(), cp.toString(),
                ApplicationConstants.CLASS_PATH_SEPARATOR);

        StringBuilder cmd = new StringBuilder(ApplicationConstants.Environment.JAVA_HOME.$$() + "/bin/java");
        cmd.append(" -Xmx").append(Math.max(128, amMemory * 3 / 5)).append('m');
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
        ctx.setMaxAppAttempts(1); // tfos re-forms the cluster itself (--max-restarts)
        ctx.setResource(Resource.newInstance(amMemory, 1));
        ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(amResources, amEnv, List.of(cmd.toString()),
                null, tokens, null));
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
            return follow(yarn, id, acceptTimeout);
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

    /** Follow the application to its end; the exit code as tfos run's. */
    private static int follow(YarnClient yarn, ApplicationId id, double acceptTimeout)
            throws IOException, YarnException, InterruptedException {
        YarnApplicationState last = null;
        String url = null;
        long submitted = System.nanoTime();
        while (true) {
            ApplicationReport r = yarn.getApplicationReport(id);
            YarnApplicationState s = r.getYarnApplicationState();
            if (s != last) {
                System.err.println("tfos: " + id + " " + s.name().toLowerCase());
                last = s;
            }
            String original = r.getOriginalTrackingUrl();
            if (s == YarnApplicationState.RUNNING && url == null && original != null && !original.isEmpty()
                    && !original.equals("N/A")) {
                url = original;
                announceStatusPage(r);
            }
            if (finished(s)) {
                String diag = r.getDiagnostics() == null ? "" : r.getDiagnostics().strip();
                int mark = diag.indexOf(ApplicationMaster.EXIT_MARK);
                if (mark >= 0) {
                    String rest = diag.substring(mark + ApplicationMaster.EXIT_MARK.length());
                    int end = 0;
                    while (end < rest.length() && Character.isDigit(rest.charAt(end))) {
                        end++;
                    }
                    int code = Integer.parseInt(rest.substring(0, end));
                    if (code != 0) {
                        System.err.println("tfos: " + id + " failed:\n" + rest.substring(end).strip());
                    }
                    return code;
                }
                System.err.println("tfos: " + id + " ended " + s.name().toLowerCase() + " ("
                        + r.getFinalApplicationStatus() + ")" + (diag.isEmpty() ? "" : ": " + diag));
                if (s == YarnApplicationState.KILLED) {
                    return 143;
                }
                return r.getFinalApplicationStatus() == FinalApplicationStatus.SUCCEEDED ? 0 : 1;
            }
            if ((s == YarnApplicationState.ACCEPTED || s == YarnApplicationState.SUBMITTED
                    || s == YarnApplicationState.NEW || s == YarnApplicationState.NEW_SAVING)
                    && System.nanoTime() - submitted > (long) (acceptTimeout * 1e9)) {
                yarn.killApplication(id);
                System.err.println("tfos: " + id + " was not started within " + acceptTimeout
                        + " s (YARN could not give the ApplicationMaster its container: "
                        + r.getDiagnostics().strip() + "); killed it");
                return 124;
            }
            Thread.sleep(500);
        }
    }
}
