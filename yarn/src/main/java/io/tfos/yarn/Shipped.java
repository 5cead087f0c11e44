package io.tfos.yarn;

import java.io.IOException;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.URL;

/**
 * What the client ships to every container (the tfos binary, the user's
 * archives and files): uploaded once to the application's staging directory,
 * localized by YARN into the ApplicationMaster's container and, from the same
 * HDFS copies, into every node's. The list travels to the ApplicationMaster
 * in one environment variable, {@link #ENV}.
 */
final class Shipped {
    static final String ENV = "TFOS_YARN_SHIPPED";

    private Shipped() {
    }

    /** A file on a FileSystem as a LocalResource of the given type. */
    static LocalResource resource(FileSystem fs, Path path, LocalResourceType type) throws IOException {
        FileStatus st = fs.getFileStatus(path);
        return LocalResource.newInstance(URL.fromPath(fs.makeQualified(path)), type,
                LocalResourceVisibility.APPLICATION, st.getLen(), st.getModificationTime());
    }

    /** alias|type|url|size|timestamp entries joined by ';' (every field URL-encoded). */
    static String encode(Map<String, LocalResource> shipped) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, LocalResource> e : shipped.entrySet()) {
            LocalResource r = e.getValue();
            URL u = r.getResource();
            String url = u.getScheme() + "://" + (u.getHost() == null ? "" : u.getHost())
                    + (u.getPort() > 0 ? ":" + u.getPort() : "") + u.getFile();
            if (sb.length() > 0) {
                sb.append(';');
            }
            sb.append(enc(e.getKey())).append('|').append(r.getType().name()).append('|').append(enc(url))
                    .append('|').append(r.getSize()).append('|').append(r.getTimestamp());
        }
        return sb.toString();
    }

    static Map<String, LocalResource> decode(String text) {
        Map<String, LocalResource> out = new LinkedHashMap<>();
        if (text == null || text.isEmpty()) {
            return out;
        }
        for (String entry : text.split(";")) {
            String[] f = entry.split("\\|");
            if (f.length != 5) {
                throw new IllegalArgumentException(ENV + ": bad entry '" + entry + "'");
            }
            URL url = URL.fromPath(new Path(dec(f[2])));
            out.put(dec(f[0]), LocalResource.newInstance(url, LocalResourceType.valueOf(f[1]),
                    LocalResourceVisibility.APPLICATION, Long.parseLong(f[3]), Long.parseLong(f[4])));
        }
        return out;
    }

    /**
     * One argument quoted for the container's launch script. YARN writes the command into it as
     * {@code bash -c "COMMAND"}, unescaped: a double quote, $, backtick, backslash or line break in
     * COMMAND would act in that outer string. An argument with any of them is spelled with bash's
     * $'...', each of them as \\xHH, which the outer string leaves alone; others go in single quotes.
     */
    static String quote(String arg) {
        if (arg.chars().noneMatch(c -> "\"$`\\\n\r".indexOf(c) >= 0)) {
            return "'" + arg.replace("'", "'\\''") + "'";
        }
        StringBuilder b = new StringBuilder("$'");
        for (char c : arg.toCharArray()) {
            if ("\"$`\\\n\r'".indexOf(c) >= 0) {
                b.append(String.format("\\x%02x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('\'').toString();
    }

    private static String enc(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8);
    }

    private static String dec(String s) {
        return URLDecoder.decode(s, StandardCharsets.UTF_8);
    }
}
