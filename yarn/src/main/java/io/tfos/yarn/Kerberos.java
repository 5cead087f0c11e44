package io.tfos.yarn;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.security.token.TokenIdentifier;
import org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;

/**
 * Kerberos for tfos on YARN: the client's login (a keytab, or the ticket cache
 * kinit filled) and the ApplicationMaster's delegation tokens for a run longer
 * than their lifetime.
 *
 * The ApplicationMaster, given the keytab ({@code tfos yarn --principal P
 * --keytab K}; it is a local resource of its container only, never of a
 * node's), logs in from it and keeps HDFS delegation tokens alive for the
 * nodes: it obtains tokens whose renewer is the user, renews them at 3/4 of
 * their renewal interval and obtains new ones at half their maximum lifetime.
 * Each set goes (a) into the credentials of every container launched after it
 * and (b) into {@code <staging dir>/credentials} on HDFS (mode 0600 in the
 * 0700 staging dir), which running nodes read with the token they hold while it
 * is still valid ({@code tfos.fs}; {@code TFOS_HDFS_CREDENTIALS} names it).
 */
final class Kerberos {
    /** The ApplicationMaster's copy of the keytab, in its container's working dir. */
    static final String KEYTAB_ALIAS = "tfos.keytab";
    /** The ApplicationMaster's environment: the principal to log in as with it. */
    static final String PRINCIPAL_ENV = "TFOS_YARN_PRINCIPAL";
    /** A node's environment: where the fresh tokens are on HDFS. */
    static final String CREDENTIALS_ENV = "TFOS_HDFS_CREDENTIALS";
    static final String CREDENTIALS_FILE = "credentials";

    private Kerberos() {
    }

    /**
     * The client's login, before it talks to YARN or HDFS. Exits with a message naming the fix when
     * security is on and there is neither a keytab nor a ticket, or the login fails.
     */
    static void login(Configuration conf, String principal, String keytab) {
        UserGroupInformation.setConfiguration(conf);
        if (!UserGroupInformation.isSecurityEnabled()) {
            if (principal != null) {
                System.err.println("tfos yarn: --principal and --keytab are not used: this cluster's Hadoop "
                        + "configuration has simple authentication (hadoop.security.authentication; "
                        + Client.configSources() + ")");
            }
            return;
        }
        try {
            if (principal != null) {
                if (keytab == null || !new File(keytab).canRead()) {
                    fail("--keytab " + keytab + " cannot be read (the keytab of " + principal + ")");
                }
                UserGroupInformation.loginUserFromKeytab(principal, keytab);
                return;
            }
            UserGroupInformation u = UserGroupInformation.getCurrentUser();
            if (!u.hasKerberosCredentials()) {
                fail("Hadoop security is on (hadoop.security.authentication=kerberos) and " + u.getUserName()
                        + " has no Kerberos ticket: run `kinit YOU@REALM`, or pass --principal YOU@REALM "
                        + "--keytab FILE (a long job needs the keytab: its ApplicationMaster renews the "
                        + "delegation tokens with it)");
            }
        } catch (IOException e) {
            fail(explain(e, principal, keytab));
        }
    }

    /** What went wrong in a Kerberos login or token call, and the fix. */
    static String explain(Throwable e, String principal, String keytab) {
        StringBuilder all = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            all.append(' ').append(t.getMessage());
        }
        String s = all.toString();
        String why;
        if (s.contains("Clock skew too great")) {
            why = "this host's clock and the KDC's differ by more than the KDC allows (krb5.conf clockskew, "
                    + "5 minutes by default): set the time right (chrony or ntpd)";
        } else if (s.contains("Unable to obtain password") || s.contains("No key to store")
                || s.contains("Pre-authentication information was invalid") || s.contains("Checksum failed")) {
            // some KDCs (Apache Kerby's, the test cluster's) answer a client clock off by more than they allow
            // as a failed pre-authentication too
            why = "the keytab " + keytab + " has no valid key for " + principal + " (`klist -kt " + keytab
                    + "` lists its principals; a key changed since the keytab was made needs a new one)"
                    + (s.contains("Pre-authentication information was invalid") ? ", or this host's clock and "
                            + "the KDC's differ by more than the KDC allows (set the time right)" : "");
        } else if (s.contains("not found in Kerberos database") || s.contains("CLIENT_NOT_FOUND")) {
            why = "the KDC does not know the principal " + principal + " (check its spelling and realm)";
        } else if (s.contains("Cannot locate default realm") || s.contains("Cannot contact any KDC")
                || s.contains("Receive timed out") || s.contains("Connection refused")) {
            why = "the KDC cannot be reached with this host's Kerberos configuration (/etc/krb5.conf, or the file "
                    + "$KRB5_CONFIG names): is its realm and kdc right?";
        } else {
            why = "see the cause";
        }
        return "the Kerberos login" + (principal != null ? " of " + principal : "") + " failed: " + why
                + " (" + String.valueOf(e.getMessage()).split("\n")[0].strip() + ")";
    }

    private static void fail(String msg) {
        System.err.println("tfos yarn: " + msg);
        System.exit(1);
    }

    /** The launcher's environment: a file holding the HDFS delegation token it writes with (URL form). */
    static final String TOKEN_FILE_ENV = "TFOS_HDFS_TOKEN_FILE";

    /**
     * The longest-lived HDFS delegation token of creds, in Hadoop's URL form, written to file (0600, in the
     * ApplicationMaster's container, renamed into place) for the launcher's C WebHDFS client (tfos yarn
     * serve's front end writes registry versions to HDFS with it). Nothing when creds has none.
     */
    static void writeTokenFile(Credentials creds, java.nio.file.Path file) throws IOException {
        Token<?> best = null;
        long bestMax = Long.MIN_VALUE;
        for (Token<?> t : creds.getAllTokens()) {
            if (!"HDFS_DELEGATION_TOKEN".equals(t.getKind().toString())) {
                continue;
            }
            long max = t.decodeIdentifier() instanceof AbstractDelegationTokenIdentifier id ? id.getMaxDate() : 0;
            if (best == null || max > bestMax) {
                best = t;
                bestMax = max;
            }
        }
        if (best == null) {
            return;
        }
        java.nio.file.Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        java.nio.file.Files.deleteIfExists(tmp);
        java.nio.file.Files.createFile(tmp, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
        java.nio.file.Files.writeString(tmp, best.encodeToUrlString());
        java.nio.file.Files.move(tmp, file, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }

    /** The credentials a node container gets: the application's, less its AMRM token. */
    static ByteBuffer forNodes(Credentials appCreds, Credentials fresh) throws IOException {
        Credentials c = new Credentials(appCreds);
        List<Text> drop = new ArrayList<>();
        for (java.util.Map.Entry<Text, Token<? extends TokenIdentifier>> e : c.getTokenMap().entrySet()) {
            if (AMRMTokenIdentifier.KIND_NAME.equals(e.getValue().getKind())) {
                drop.add(e.getKey()); // by its alias, which need not be its service
            }
        }
        drop.forEach(c::removeToken);
        if (fresh != null) {
            c.addAll(fresh); // the same alias (the NameNode's service) replaces the token it had
        }
        DataOutputBuffer dob = new DataOutputBuffer();
        c.writeTokenStorageToStream(dob);
        return ByteBuffer.wrap(dob.getData(), 0, dob.getLength());
    }

    /** The ApplicationMaster's keeper of fresh HDFS delegation tokens (see the class). */
    static final class Renewal implements Runnable {
        private static final long RETRY_MS = 10_000;
        private final Configuration conf;
        private final String principal;
        private final String keytab;
        private final Path file;
        private final Consumer<Credentials> fresh;
        private Credentials held;
        private Credentials previous;
        private long expires;
        private long issued;
        private long maxDate;
        /** Counted down once the first set is written for the nodes (or never will be: no login). */
        private final java.util.concurrent.CountDownLatch firstSet = new java.util.concurrent.CountDownLatch(1);

        Renewal(Configuration conf, String principal, String keytab, Path file, Consumer<Credentials> fresh) {
            this.conf = conf;
            this.principal = principal;
            this.keytab = keytab;
            this.file = file;
            this.fresh = fresh;
        }

        void start() {
            Thread t = new Thread(this, "tfos-am-tokens");
            t.setDaemon(true);
            t.start();
        }

        /**
         * Waits up to {@code ms} for the first set: a new ApplicationMaster attempt must not launch nodes with
         * the application's submitted tokens, which are past their lifetime by then. True once it is written.
         */
        boolean awaitFirst(long ms) throws InterruptedException {
            return firstSet.await(ms, java.util.concurrent.TimeUnit.MILLISECONDS) && held != null;
        }

        @Override
        public void run() {
            UserGroupInformation ugi;
            try {
                ugi = UserGroupInformation.loginUserFromKeytabAndReturnUGI(principal, keytab);
            } catch (IOException e) {
                System.err.println("tfos-am: " + explain(e, principal, keytab) + "; the HDFS delegation tokens "
                        + "will not be renewed past their lifetime");
                firstSet.countDown();
                return;
            }
            long at = 0; // when to act next: at once, then as each renewal or new set says
            while (true) {
                long now = System.currentTimeMillis();
                boolean renewOnly = held != null && now < halfLife();
                try {
                    if (at > now) {
                        Thread.sleep(Math.max(100, at - now));
                        continue;
                    }
                    ugi.checkTGTAndReloginFromKeytab();
                    ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
                        if (renewOnly) {
                            renew();
                        } else {
                            obtain(ugi.getShortUserName());
                        }
                        return null;
                    });
                    now = System.currentTimeMillis();
                    at = Math.min(now + (expires - now) * 3 / 4, halfLife());
                } catch (InterruptedException e) {
                    return;
                } catch (Exception e) {
                    // the sets held stay: the nodes use them, and only a renewal keeps them alive (dropping
                    // them after a passing failure let them expire at their renewal time, nodes and all)
                    // again soon enough that the sets held are renewed before they expire
                    now = System.currentTimeMillis();
                    long retry = held == null ? RETRY_MS : Math.max(1000, Math.min(RETRY_MS, (expires - now) / 3));
                    System.err.println("tfos-am: could not " + (renewOnly ? "renew" : "obtain")
                            + " HDFS delegation tokens (" + String.valueOf(e.getMessage()).split("\n")[0].strip()
                            + "); trying again in " + String.format("%.1f", retry / 1000.0) + " s");
                    at = now + retry;
                }
            }
        }

        /** When the set held is half way through its maximum lifetime: a new set is obtained then. */
        private long halfLife() {
            return issued + (maxDate - issued) / 2;
        }

        private void obtain(String renewer) throws IOException, InterruptedException {
            Credentials c = new Credentials();
            FileSystem fs = FileSystem.get(conf);
            Token<?>[] got = fs.addDelegationTokens(renewer, c);
            if (got == null || got.length == 0) {
                throw new IOException("the NameNode gave no delegation token");
            }
            long first = Long.MAX_VALUE;
            long max = Long.MAX_VALUE;
            for (Token<?> t : c.getAllTokens()) {
                if (t.decodeIdentifier() instanceof AbstractDelegationTokenIdentifier id) {
                    first = Math.min(first, id.getIssueDate());
                    max = Math.min(max, id.getMaxDate());
                }
            }
            Path tmp = new Path(file.getParent(), "." + file.getName() + ".tmp");
            try (FSDataOutputStream out = fs.create(tmp, new FsPermission((short) 0600), true, 4096,
                    fs.getDefaultReplication(tmp), fs.getDefaultBlockSize(tmp), null)) {
                c.writeTokenStorageToStream(out);
            }
            // one atomic replacement (HDFS's rename with OVERWRITE): a node reading it never finds it missing
            org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), conf).rename(tmp, file,
                    org.apache.hadoop.fs.Options.Rename.OVERWRITE);
            // the new set is held once the nodes can read it, not before: a failure up to here leaves the
            // sets they use held, and renewed on the next try
            previous = held;
            held = c;
            issued = first;
            maxDate = max;
            fresh.accept(c);
            renew();
            firstSet.countDown();
            System.err.println("tfos-am: new HDFS delegation tokens for the nodes in " + file + ", valid until "
                    + new java.util.Date(maxDate));
        }

        /**
         * Renews the set held and the one before it, which running nodes use until they read the new one
         * (past 60 % of its lifetime; a new set comes at half of it). The next renewal is due at the
         * soonest expiry that a renewal can still push back.
         */
        private void renew() throws IOException, InterruptedException {
            long soonest = Long.MAX_VALUE;
            if (previous != null) {
                try {
                    soonest = renew(previous);
                } catch (IOException e) {
                    previous = null; // past its maximum lifetime: nobody uses it any more
                }
            }
            soonest = Math.min(soonest, renew(held));
            expires = soonest == Long.MAX_VALUE ? maxDate : soonest;
        }

        private long renew(Credentials c) throws IOException, InterruptedException {
            long soonest = Long.MAX_VALUE;
            for (Token<?> t : c.getAllTokens()) {
                if (!t.isManaged()) {
                    continue;
                }
                long until = t.renew(conf);
                if (!(t.decodeIdentifier() instanceof AbstractDelegationTokenIdentifier id)
                        || until < id.getMaxDate()) {
                    soonest = Math.min(soonest, until);
                }
            }
            return soonest;
        }
    }
}
