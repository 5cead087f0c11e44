package io.tfos.yarn;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.RegisterApplicationMasterResponse;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.PreemptionContainer;
import org.apache.hadoop.yarn.api.records.PreemptionMessage;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.util.Apps;

/**
 * The ApplicationMaster: the part of tfos on YARN that must speak Hadoop's RPC,
 * and nothing more. It registers with the ResourceManager, runs the C launcher
 * ({@code ./tfos yarn-am}, the same code as {@code tfos run}: coordinator,
 * roles, restarts, status page) as its child, and serves that launcher's
 * container requests on a Unix socket: each {@code tfos yarn-container} stand-in
 * the launcher starts for a node asks here for one container, gets it launched
 * with the node's agent command, and learns its exit. A stand-in that goes
 * away takes its container with it (the launcher ending an attempt).
 *
 * Protocol on the socket, one line each, UTF-8. Stand-in to AM: "LAUNCH role
 * memoryMB vcores gpus", then "ENV K=V" and "ARG a" lines, then "GO". AM to
 * stand-in: "ALLOCATED containerId host resource", "STARTED", then "EXITED status
 * diagnostics" or "FAILED message".
 *
 * YARN's notice that it preempts one of the application's containers (the
 * CapacityScheduler's preemption monitor, for a queue below its guaranteed
 * capacity) drains the cluster as a graceful kill does: a notice naming a
 * container not named before is told to the user and asks the launcher to
 * drain ("DRAIN K reason" on its stdin, "DRAIN-END reason" for the
 * ApplicationMaster's own container; see drain()); repeats are ignored.
 *
 * When the launcher exits, every container left is stopped and the
 * application unregisters: SUCCEEDED for exit code 0, else FAILED, with
 * "tfos exit code N" and the launcher's last lines as diagnostics (the client
 * takes its exit code from them).
 */
public final class ApplicationMaster {
    static final String EXIT_MARK = "tfos exit code ";
    /** The launcher's exit code for a drained cluster (tfos run's: TFOS_EXIT_DRAINED). */
    static final int DRAINED_EXIT = 75;
    /** Between the ApplicationMaster's own notes and the launcher's last lines in the diagnostics. */
    static final String TAIL_MARK = "\n-- the launcher's last lines:\n";
    /** The queue the client submitted to, for the notes. */
    static final String QUEUE_ENV = "TFOS_YARN_QUEUE";
    private static final int TAIL = 40;
    /** How often a note says that YARN has not allocated every container asked for. */
    private static final long WAIT_NOTE_NS = 5_000_000_000L;

    private final Configuration conf = new YarnConfiguration();
    private final Map<String, LocalResource> shipped = Shipped.decode(System.getenv(Shipped.ENV));
    private final Map<Long, Node> byRequest = new ConcurrentHashMap<>();
    private final Map<ContainerId, Node> byContainer = new ConcurrentHashMap<>();
    private final AtomicLong nextRequest = new AtomicLong(1);
    private final Deque<String> tail = new ArrayDeque<>();
    /** Requests YARN never satisfied before their stand-in went away, for the diagnostics. */
    private final List<String> unsatisfied = new ArrayList<>();
    private AMRMClientAsync<ContainerRequest> amrm;
    private NMClientAsync nm;
    /** The credentials each node container is launched with (renewed: Kerberos.Renewal). */
    private volatile ByteBuffer tokens;
    /** How long the nodes' launch waits for the first fresh HDFS delegation tokens (a keytab given). */
    private static final long FIRST_TOKENS_MS = 60_000;
    /** Where running nodes find fresh tokens on HDFS, or null (no keytab). */
    private String credentialsFile;
    private double reservationTimeout = 60;
    private volatile Process launcher;
    private volatile String fatal;
    /** Lines to the launcher's stdin, "NOTE text" (see note()) and "DRAIN reason" (see drain()). */
    private final BlockingQueue<String> notes = new ArrayBlockingQueue<>(256);
    /** The containers YARN has said it preempts: each is told to the launcher once. */
    private final Set<ContainerId> preemptionNoticed = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private volatile boolean notesRead = true;
    private long waitNoted;
    private boolean waitSaid;

    /** One node's container, from request to exit. */
    private final class Node {
        final long id = nextRequest.getAndIncrement();
        final SocketChannel ch;
        final Writer out;
        ContainerRequest request;
        Container container;
        final Map<String, String> env = new HashMap<>();
        final List<String> args = new ArrayList<>();
        String role;
        String asked;
        long askedAt;
        boolean over;

        Node(SocketChannel ch) {
            this.ch = ch;
            this.out = Channels.newWriter(ch, StandardCharsets.UTF_8);
        }

        synchronized void say(String line) {
            try {
                out.write(line.replace('\n', ' ') + "\n");
                out.flush();
            } catch (IOException e) {
                // the stand-in is gone; its reader notices and cleans up
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int sep = List.of(args).indexOf("--");
        if (sep < 0) {
            System.err.println("usage: ApplicationMaster -- TFOS_YARN_AM_ARGS...");
            System.exit(2);
        }
        List<String> launcherArgs = List.of(args).subList(sep + 1, args.length);
        ApplicationMaster am = new ApplicationMaster();
        // the launcher's reservation timeout (tfos run's default): a container
        // YARN gives later than this came too late for the cluster
        for (int i = 0; i < launcherArgs.size(); i++) {
            String a = launcherArgs.get(i);
            if (a.equals("--")) {
                break;
            } else if (a.equals("--reservation-timeout") && i + 1 < launcherArgs.size()) {
                am.reservationTimeout = Double.parseDouble(launcherArgs.get(i + 1));
            } else if (a.startsWith("--reservation-timeout=")) {
                am.reservationTimeout = Double.parseDouble(a.substring(a.indexOf('=') + 1));
            }
        }
        System.exit(am.run(launcherArgs));
    }

    private int run(List<String> launcherArgs) throws Exception {
        Credentials creds = UserGroupInformation.getCurrentUser().getCredentials();
        byte[] secret = creds.getSecretKey(Client.SECRET_KEY);
        // containers get the application's tokens (HDFS delegation tokens) but never the AMRM token
        tokens = Kerberos.forNodes(creds, null);
        String containerId = System.getenv(ApplicationConstants.Environment.CONTAINER_ID.name());
        int attempt = containerId == null ? 1
                : ContainerId.fromString(containerId).getApplicationAttemptId().getAttemptId();
        if (attempt > 1) {
            System.err.println("tfos-am: ApplicationMaster attempt " + attempt + " (the one before was lost): "
                    + "every node starts again, from its checkpoint");
        }
        // the socket's dir is short (a Unix socket's path is); the token file is in the container's own dir,
        // private to the application and removed with the container however this ends
        Path dir = Files.createTempDirectory(Paths.get("/tmp"), "tfos-am-");
        Path tokenFile = Paths.get("hdfs-token").toAbsolutePath(); // the launcher's, when security is on
        Kerberos.writeTokenFile(creds, tokenFile);
        String principal = System.getenv(Kerberos.PRINCIPAL_ENV);
        String staging = System.getenv("TFOS_YARN_STAGING");
        if (principal != null && staging != null && Files.isReadable(Paths.get(Kerberos.KEYTAB_ALIAS))) {
            credentialsFile = new org.apache.hadoop.fs.Path(staging, Kerberos.CREDENTIALS_FILE).toString();
            Kerberos.Renewal renewal = new Kerberos.Renewal(conf, principal, Kerberos.KEYTAB_ALIAS,
                    new org.apache.hadoop.fs.Path(credentialsFile), fresh -> {
                        try {
                            tokens = Kerberos.forNodes(creds, fresh);
                            Kerberos.writeTokenFile(fresh, tokenFile);
                        } catch (IOException e) {
                            System.err.println("tfos-am: cannot write the nodes' credentials: " + e);
                        }
                    });
            renewal.start();
            // no node starts before the first fresh set: on a later attempt the submitted tokens are dead, and
            // a node launched with them fails at its first HDFS call (one restart of the whole cluster)
            if (!renewal.awaitFirst(FIRST_TOKENS_MS)) {
                System.err.println("tfos-am: no fresh HDFS delegation tokens after " + FIRST_TOKENS_MS / 1000
                        + " s (see the lines above); the nodes start with the application's, which live only "
                        + "until the cluster's dfs.namenode.delegation.token.max-lifetime from submission");
            }
        }

        String host = System.getenv(ApplicationConstants.Environment.NM_HOST.name());
        Path sock = dir.resolve("s");
        Path addressFile = dir.resolve("address");
        ServerSocketChannel server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(sock));

        List<String> cmd = new ArrayList<>();
        cmd.add("./tfos");
        cmd.add("yarn-am");
        cmd.add("--am-socket");
        cmd.add(sock.toString());
        cmd.add("--address-file");
        cmd.add(addressFile.toString());
        cmd.add("--bind");
        cmd.add(host);
        cmd.addAll(launcherArgs);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.INHERIT);
        if (secret != null) {
            pb.environment().put("TFOS_SECRET", new String(secret, StandardCharsets.US_ASCII));
        }
        if (Files.exists(tokenFile)) {
            pb.environment().put(Kerberos.TOKEN_FILE_ENV, tokenFile.toString());
        }
        launcher = pb.start();
        Runtime.getRuntime().addShutdownHook(new Thread(this::stopLauncher));
        // SIGTERM without a kill behind it (YARN's GRACEFUL_SHUTDOWN, tfos yarn kill --graceful) goes to
        // the container's process group: the launcher has it too and drains the cluster. The JVM's own
        // handler would run the shutdown hook (a second SIGTERM, which stops the launcher at once, and a
        // SIGKILL 20 s later); this one keeps the JVM up to unregister with the launcher's exit code.
        // A kill is SIGTERM then SIGKILL to the group, as before.
        try {
            sun.misc.Signal.handle(new sun.misc.Signal("TERM"), sig -> System.err.println(
                    "tfos-am: SIGTERM: the launcher drains the cluster (every node checkpoints at one step)"));
        } catch (IllegalArgumentException e) {
            System.err.println("tfos-am: cannot handle SIGTERM (" + e.getMessage() + "): a graceful kill stops "
                    + "the cluster without draining it");
        }
        Thread stderr = new Thread(this::relayStderr, "tfos-launcher-stderr");
        stderr.setDaemon(true);
        stderr.start();
        Thread noter = new Thread(this::writeNotes, "tfos-am-notes");
        noter.setDaemon(true);
        noter.start();

        // the launcher writes "coordinator\nstatus-url\n" once both listen
        String[] address = waitAddress(addressFile, 60);
        amrm = AMRMClientAsync.createAMRMClientAsync(1000, new RmHandler());
        amrm.init(conf);
        amrm.start();
        nm = NMClientAsync.createNMClientAsync(new NmHandler());
        nm.init(conf);
        nm.start();
        int coordPort = -1;
        String trackingUrl = "";
        if (address != null) {
            coordPort = Integer.parseInt(address[0].substring(address[0].lastIndexOf(':') + 1));
            trackingUrl = address.length > 1 ? address[1] : "";
        }
        RegisterApplicationMasterResponse reg = amrm.registerApplicationMaster(host, coordPort, trackingUrl);
        System.err.println("tfos-am: registered; coordinator " + (address == null ? "-" : address[0])
                + ", status " + trackingUrl + ", largest container " + reg.getMaximumResourceCapability());

        Thread acceptor = new Thread(() -> accept(server), "tfos-am-accept");
        acceptor.setDaemon(true);
        acceptor.start();
        Thread waits = new Thread(this::noteWaits, "tfos-am-waits");
        waits.setDaemon(true);
        waits.start();

        int code = launcher.waitFor();
        if (fatal != null && code > 128) {
            code = 1; // the launcher was stopped because YARN failed us: a failure, not a signal from the user
        }
        stderr.join(5000);
        stopContainers(15);
        server.close();
        Files.deleteIfExists(sock);
        Files.deleteIfExists(addressFile);
        Files.deleteIfExists(tokenFile);
        Files.deleteIfExists(dir);
        StringBuilder diag = new StringBuilder(EXIT_MARK + code);
        if (fatal != null) {
            diag.append("\n").append(fatal);
        }
        synchronized (unsatisfied) {
            if (!unsatisfied.isEmpty()) {
                diag.append("\nYARN did not allocate ").append(unsatisfied.size())
                        .append(" of the containers asked for within the reservation timeout (")
                        .append(reservationTimeout).append(" s): ")
                        .append(String.join("; ", unsatisfied.subList(0, Math.min(8, unsatisfied.size()))));
            }
        }
        synchronized (tail) {
            diag.append(TAIL_MARK);
            for (String line : tail) {
                diag.append(line).append("\n");
            }
        }
        // drained (a graceful kill, a preemption notice): stopped on request, not failed
        FinalApplicationStatus fin = code == 0 ? FinalApplicationStatus.SUCCEEDED
                : code == DRAINED_EXIT ? FinalApplicationStatus.KILLED : FinalApplicationStatus.FAILED;
        amrm.unregisterApplicationMaster(fin, diag.toString(), trackingUrl);
        amrm.stop();
        nm.stop();
        return code == 0 ? 0 : 1;
    }

    /**
     * A line for the user's terminal: written to the launcher's stdin ("NOTE text"), which tfos yarn-am
     * logs as its own line, so that it goes where the launcher's lines go: this container's stderr, and
     * the status page's stream that tfos yarn prints (src/cli/yarn_am.c). A launcher that does not read
     * notes (tfos yarn serve's) has its stdin on /dev/null; the notes then go to this stderr alone. Never
     * blocks the caller: a full queue drops the note.
     */
    private void note(String text) {
        if (!notesRead || !notes.offer("NOTE " + text.replace('\n', ' '))) {
            System.err.println("tfos-am: " + text);
        }
    }

    /**
     * Asks the launcher to drain the cluster ("DRAIN reason" on its stdin): tfos yarn-am drains it as
     * SIGTERM does (every program that reports steps checkpoints at one step and ends; exit 75), with the
     * reason in the coordinator's lines. Not SIGTERM itself: the reason would read "signal 15", and tfos
     * yarn serve's launcher, which reads no notes, would stop every replica for the loss of one.
     */
    /** line: "DRAIN K REASON" (the launcher drains, and with --min-nodes goes on without the K worker
     * containers named; 0: it asks for all again), or "DRAIN-END REASON" (it drains and ends). */
    private void drain(String line) {
        String reason = line.replaceFirst("^DRAIN(-END)? (\\d+ )?", "");
        if (!notesRead || !notes.offer(line.replace('\n', ' '))) {
            System.err.println(notDrained(reason));
        }
    }

    /** The line for a drain the launcher was not asked for. */
    private static String notDrained(String reason) {
        return "tfos-am: not drained (" + reason + "): the launcher reads no notes (tfos yarn serve's) or too "
                + "many wait; the container's loss will be a node failure";
    }

    private void writeNotes() {
        Writer w = new java.io.OutputStreamWriter(launcher.getOutputStream(), StandardCharsets.UTF_8);
        try {
            while (true) {
                String line = notes.take();
                try {
                    w.write(line + "\n");
                    w.flush();
                } catch (IOException e) {
                    notesRead = false; // nobody reads them: this stderr from now on
                    System.err.println(line.startsWith("NOTE ") ? "tfos-am: " + line.substring(5)
                            : notDrained(line.substring(line.indexOf(' ') + 1)));
                }
            }
        } catch (InterruptedException e) {
            // the end
        }
    }

    /**
     * Every 5 s while YARN has not allocated every container asked for (for 5 s or more): how many, which,
     * in which queue, for how long, and what YARN says this application may still have. Once it has
     * allocated them all after such a note, says so.
     */
    private void noteWaits() {
        String queue = System.getenv(QUEUE_ENV);
        while (true) {
            try {
                Thread.sleep(1000);
            } catch (InterruptedException e) {
                return;
            }
            long now = System.nanoTime();
            Map<String, Integer> pending = new java.util.TreeMap<>();
            long oldest = now;
            int waiting = 0;
            for (Node n : byRequest.values()) {
                synchronized (n) {
                    if (n.over || n.container != null || n.request == null) {
                        continue;
                    }
                }
                waiting++;
                pending.merge(n.asked, 1, Integer::sum);
                oldest = Math.min(oldest, n.askedAt);
            }
            int live = waiting + byContainer.size();
            if (waiting == 0) {
                if (waitSaid) {
                    note("YARN has allocated every container asked for (" + live + ")");
                    waitSaid = false;
                }
                continue;
            }
            if (now - oldest < WAIT_NOTE_NS || now - waitNoted < WAIT_NOTE_NS) {
                continue;
            }
            waitNoted = now;
            waitSaid = true;
            List<String> what = new ArrayList<>();
            pending.forEach((k, v) -> what.add(v > 1 ? v + " x " + k : k));
            Resource room = amrm == null ? null : amrm.getAvailableResources();
            note("waiting for YARN to allocate " + waiting + " of " + live + " containers (queue "
                    + (queue == null ? "?" : queue) + ", " + (now - oldest) / 1_000_000_000L + " s): "
                    + String.join("; ", what) + (room == null ? "" : "; YARN says this application may have "
                    + room + " more now"));
        }
    }

    private String[] waitAddress(Path file, int seconds) throws InterruptedException, IOException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < deadline && launcher.isAlive()) {
            if (Files.exists(file)) {
                return Files.readAllLines(file, StandardCharsets.UTF_8).toArray(new String[0]);
            }
            Thread.sleep(50);
        }
        return null;
    }

    /** The launcher's stderr goes on to this container's stderr; its last lines are kept for the diagnostics. */
    private void relayStderr() {
        try (BufferedReader r = new BufferedReader(
                new InputStreamReader(launcher.getErrorStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                System.err.println(line);
                synchronized (tail) {
                    tail.addLast(line);
                    if (tail.size() > TAIL) {
                        tail.removeFirst();
                    }
                }
            }
        } catch (IOException e) {
            // the launcher is gone
        }
    }

    private void stopLauncher() {
        Process p = launcher;
        if (p != null && p.isAlive()) {
            p.destroy(); // SIGTERM: the launcher stops its cluster
            try {
                if (!p.waitFor(20, TimeUnit.SECONDS)) {
                    p.destroyForcibly();
                }
            } catch (InterruptedException e) {
                p.destroyForcibly();
            }
        }
    }

    private void accept(ServerSocketChannel server) {
        while (true) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (IOException e) {
                return; // closed at the end
            }
            Thread t = new Thread(() -> serve(ch), "tfos-am-node");
            t.setDaemon(true);
            t.start();
        }
    }

    /** One stand-in's connection: read its request, then wait for it to go away. */
    private void serve(SocketChannel ch) {
        Node node = new Node(ch);
        try (BufferedReader in = new BufferedReader(Channels.newReader(ch, StandardCharsets.UTF_8))) {
            String[] launch = null;
            String line;
            while ((line = in.readLine()) != null && !line.equals("GO")) {
                if (line.startsWith("LAUNCH ")) {
                    launch = line.split(" ");
                } else if (line.startsWith("ENV ")) {
                    int eq = line.indexOf('=');
                    node.env.put(line.substring(4, eq), line.substring(eq + 1));
                } else if (line.startsWith("ARG ")) {
                    node.args.add(line.substring(4));
                }
            }
            if (line == null || launch == null || launch.length != 5 || node.args.isEmpty()) {
                node.say("FAILED incomplete request");
                return;
            }
            Resource res = Resource.newInstance(Long.parseLong(launch[2]), Integer.parseInt(launch[3]));
            int gpus = Integer.parseInt(launch[4]);
            if (gpus > 0) {
                try {
                    res.setResourceValue("yarn.io/gpu", gpus);
                } catch (org.apache.hadoop.yarn.exceptions.ResourceNotFoundException e) {
                    node.say("FAILED this YARN cluster has no yarn.io/gpu resource type (yarn.resource-types), "
                            + "so it cannot give a " + launch[1] + " container " + gpus + " GPUs");
                    return;
                }
            }
            node.request = ContainerRequest.newBuilder().capability(res).priority(Priority.newInstance(1))
                    .allocationRequestId(node.id).relaxLocality(true).build();
            node.role = launch[1];
            node.asked = "a " + launch[1] + " container of " + launch[2] + " MB, " + launch[3] + " vcores"
                    + (gpus > 0 ? ", " + gpus + " GPUs" : "");
            node.askedAt = System.nanoTime();
            byRequest.put(node.id, node);
            amrm.addContainerRequest(node.request);
            System.err.println("tfos-am: asked YARN for " + node.asked + " (request " + node.id + ")");
            while (in.readLine() != null) {
                // nothing more is said; EOF means the stand-in is gone
            }
        } catch (IOException | RuntimeException e) {
            node.say("FAILED " + e);
        } finally {
            release(node);
        }
    }

    /** The stand-in is gone: withdraw its request or stop its container. */
    private void release(Node node) {
        Container c;
        synchronized (node) {
            if (node.over) {
                return;
            }
            node.over = true;
            c = node.container;
        }
        byRequest.remove(node.id);
        if (c == null) {
            if (node.request != null) {
                amrm.removeContainerRequest(node.request);
                String what = node.asked + ", never allocated (asked " + (System.nanoTime() - node.askedAt)
                        / 1000000000L + " s before)";
                System.err.println("tfos-am: YARN never allocated " + what);
                synchronized (unsatisfied) {
                    unsatisfied.add(what);
                }
            }
        } else {
            nm.stopContainerAsync(c.getId(), c.getNodeId());
        }
        try {
            node.ch.close();
        } catch (IOException e) {
            // already closed
        }
    }

    private void stopContainers(int seconds) throws InterruptedException {
        for (Node node : byContainer.values()) {
            release(node);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!byContainer.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
    }

    private ContainerLaunchContext context(Node node) {
        StringBuilder cmd = new StringBuilder("exec");
        for (String a : node.args) {
            // <LOG_DIR> is expanded by the NodeManager, so it stays outside the quotes
            cmd.append(' ').append(a.equals("<LOG_DIR>") ? a : Shipped.quote(a));
        }
        cmd.append(" 1>").append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stdout 2>")
                .append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stderr");
        // The working directory, where --file and --archive land, on PYTHONPATH: YARN localizes each
        // file as a symlink into its own cache directory, and Python puts the script's real directory,
        // not the link's, on sys.path, so a shipped program could not import a module shipped beside it.
        Map<String, String> env = new HashMap<>(node.env);
        if (credentialsFile != null) {
            env.put(Kerberos.CREDENTIALS_ENV, credentialsFile);
        }
        Apps.addToEnvironment(env, "PYTHONPATH", ApplicationConstants.Environment.PWD.$$(),
                ApplicationConstants.CLASS_PATH_SEPARATOR);
        return ContainerLaunchContext.newInstance(shipped, env, List.of(cmd.toString()), null,
                tokens.duplicate(), null);
    }

    private final class RmHandler extends AMRMClientAsync.AbstractCallbackHandler {
        @Override
        public void onContainersAllocated(List<Container> containers) {
            for (Container c : containers) {
                Node node = byRequest.remove(c.getAllocationRequestId());
                boolean take = false;
                if (node != null) {
                    synchronized (node) {
                        if (!node.over && node.container == null) {
                            node.container = c;
                            take = true;
                        }
                    }
                }
                if (!take) {
                    amrm.releaseAssignedContainer(c.getId());
                    continue;
                }
                amrm.removeContainerRequest(node.request);
                double waited = (System.nanoTime() - node.askedAt) / 1e9;
                if (waited > reservationTimeout) {
                    String what = node.asked + ", allocated only after " + (long) waited + " s";
                    System.err.println("tfos-am: YARN was late: " + what);
                    synchronized (unsatisfied) {
                        unsatisfied.add(what);
                    }
                }
                byContainer.put(c.getId(), node);
                // what YARN gave, as it says it: "<memory:1024, vCores:1, yarn.io/gpu: 1>"
                node.say("ALLOCATED " + c.getId() + " " + c.getNodeId().getHost() + " " + c.getResource());
                nm.startContainerAsync(c, context(node));
            }
        }

        @Override
        public void onContainersCompleted(List<ContainerStatus> statuses) {
            for (ContainerStatus s : statuses) {
                Node node = byContainer.remove(s.getContainerId());
                if (node != null) {
                    boolean stopped;
                    synchronized (node) {
                        stopped = node.over;
                    }
                    if (!stopped && s.getExitStatus() != 0) {
                        // YARN's account of a container that ended on its own (the node's program failed,
                        // the node was lost or preempted): the cause of the restart that follows, for the
                        // user, before the stand-in is told and the launcher sees the node's exit
                        String d = s.getDiagnostics().strip().replaceAll("\\s+", " ");
                        note(node.role + ": container exited with status " + s.getExitStatus() + " ("
                                + s.getContainerId() + " on " + node.container.getNodeId().getHost() + ")"
                                + (d.isEmpty() ? "" : ": " + (d.length() > 400 ? d.substring(0, 400) + "..." : d)));
                    }
                    node.say("EXITED " + s.getExitStatus() + " " + s.getDiagnostics().strip());
                    release(node);
                }
            }
        }

        @Override
        public void onContainersUpdated(List<UpdatedContainer> containers) {
        }

        /**
         * YARN's preemption notice (the CapacityScheduler's monitor marks containers for another queue and
         * kills them after yarn.resourcemanager.monitor.capacity.preemption.max_wait_before_kill): strict
         * or negotiable, one that names a container of ours not named before drains the whole cluster.
         * The launcher then ends the run, or with --min-nodes forms it again on the containers YARN
         * leaves it (docs/YARN.md); the ApplicationMaster's own container always ends it ("DRAIN-END").
         * YARN repeats a notice every monitoring interval until it has the capacity: a container is told
         * once.
         */
        @Override
        public void onPreemptionMessageReceived(PreemptionMessage message) {
            if (message == null) {
                return;
            }
            Set<ContainerId> named = new LinkedHashSet<>();
            Set<PreemptionContainer> strict = message.getStrictContract() == null ? null
                    : message.getStrictContract().getContainers();
            Set<PreemptionContainer> negotiable = message.getContract() == null ? null
                    : message.getContract().getContainers();
            for (Set<PreemptionContainer> contract : Arrays.asList(strict, negotiable)) {
                if (contract != null) {
                    for (PreemptionContainer c : contract) {
                        named.add(c.getId());
                    }
                }
            }
            String self = System.getenv(ApplicationConstants.Environment.CONTAINER_ID.name());
            List<String> ours = new ArrayList<>();
            boolean self_named = false;
            int workers = 0;       // worker containers named: an elastic cluster goes on without them
            boolean fixed = false; // a ps, chief or evaluator named: it needs that one back
            for (ContainerId id : named) {
                if (!preemptionNoticed.add(id)) {
                    continue;
                }
                Node n = byContainer.get(id);
                if (n != null) {
                    if (n.role.equals("worker")) {
                        workers++;
                    } else {
                        fixed = true;
                    }
                    ours.add((n.role.matches("[aeiou].*") ? "an " : "a ") + n.role + " container, " + id + " on " + n.container.getNodeId().getHost());
                } else if (id.toString().equals(self)) {
                    ours.add("the ApplicationMaster's container, " + id);
                    self_named = true;
                }
            }
            if (ours.isEmpty()) {
                return;
            }
            String what = String.join("; ", ours);
            note("YARN is preempting " + what + " (its scheduler takes the capacity back for another queue, "
                    + "and kills the container once yarn.resourcemanager.monitor.capacity.preemption."
                    + "max_wait_before_kill has passed): draining the cluster");
            drain((self_named ? "DRAIN-END " : "DRAIN " + (fixed ? 0 : workers) + " ") + "YARN preempts "
                    + (ours.size() == 1 ? what : ours.size() + " containers: " + what));
        }

        @Override
        public void onShutdownRequest() {
            fatal = "the ResourceManager asked the ApplicationMaster to shut down";
            stopLauncher();
        }

        @Override
        public void onNodesUpdated(List<NodeReport> updated) {
        }

        @Override
        public float getProgress() {
            return 0.5f;
        }

        @Override
        public void onError(Throwable e) {
            // the first line of what the ResourceManager said, without its server-side stack
            String what = e.getMessage() == null ? e.toString() : e.getMessage();
            int at = what.indexOf("\n");
            fatal = "YARN refused the ApplicationMaster's request: " + e.getClass().getSimpleName() + ": "
                    + (at < 0 ? what : what.substring(0, at)).strip();
            System.err.println("tfos-am: " + fatal);
            stopLauncher();
        }
    }

    private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
        private Node node(ContainerId id) {
            return byContainer.get(id);
        }

        @Override
        public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> allServiceResponse) {
            Node n = node(id);
            if (n != null) {
                n.say("STARTED");
            }
        }

        @Override
        public void onStartContainerError(ContainerId id, Throwable t) {
            Node n = byContainer.remove(id);
            if (n != null) {
                n.say("FAILED cannot start container " + id + ": " + t);
                release(n);
            }
            amrm.releaseAssignedContainer(id);
        }

        @Override
        public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {
        }

        @Override
        public void onContainerStopped(ContainerId id) {
        }

        @Override
        public void onGetContainerStatusError(ContainerId id, Throwable t) {
        }

        @Override
        public void onUpdateContainerResourceError(ContainerId id, Throwable t) {
        }

        @Override
        public void onContainerResourceUpdated(ContainerId id, Resource resource) {
        }

        @Override
        public void onStopContainerError(ContainerId id, Throwable t) {
        }

        @Override
        public void onContainerResourceIncreased(ContainerId id, Resource resource) {
        }

        @Override
        public void onIncreaseContainerResourceError(ContainerId id, Throwable t) {
        }
    }
}
