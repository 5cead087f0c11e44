/* yarn.c: `tfos yarn`, the submitting side (docs/YARN.md): tfos yarn
 * [options] [--] PROGRAM, tfos yarn serve, tfos yarn status|kill|logs (and
 * tfos yarn pack, yarn_pack.c).
 *
 * tfos yarn checks its options (tfos run's, run.h, and its own client
 * options, yarn_opts.h), then runs the Java client (io.tfos.yarn.Client, the only code that speaks
 * Hadoop's RPC besides the ApplicationMaster) with the cluster's Hadoop
 * classpath. The client ships this very binary and the user's archives and
 * files, and starts the ApplicationMaster, which runs `tfos yarn-am`: tfos run
 * itself, whose agents start through stand-ins instead of locally.
 *
 * While the application runs, tfos yarn follows the nodes' output: their
 * agents forward it to the launcher (--forward-logs), whose status page (the
 * tracking URL, which the Java client prints) serves it at /logs/stream/N;
 * the lines go to our stdout as the nodes print them. What the Java client
 * tells us (the status page's URL) comes as machine-readable lines on its
 * stderr ("@tfos-yarn KIND VALUE", Client.java's event()); everything else
 * there is the user's, passed on. Nothing is decided on message text.
 *
 * In the ApplicationMaster's container, tfos yarn-am (yarn_am.c) is the
 * launcher and tfos yarn-container (yarn_container.c) each node's stand-in. */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/inspect.h"
#include "cli/run.h"
#include "cli/serve.h"
#include "cli/yarn_opts.h"
#include "core/auth.h"
#include "platform/clock.h"
#include "platform/proc.h"
#include "track/mlrest.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;


/* The Java client's machine-readable lines on its stderr start so
 * (yarn/.../Client.java, EVENT). */
#define CLIENT_EVENT "@tfos-yarn "

static const char *const role_names[YARN_ROLES] = {"worker", "ps", "chief", "evaluator"};

const char tfos__yarn_help[] =
    "usage: tfos yarn [options] [--] PROGRAM [ARGS...]\n"
    "       tfos yarn status|kill APPLICATION_ID\n"
    "       tfos yarn kill --graceful APPLICATION_ID   (drain: every node checkpoints at one step,\n"
    "                                                   exit 75; killed if not ended within 120 s)\n"
    "       tfos yarn logs APPLICATION_ID [--follow]   (the nodes' output: live while it runs, else\n"
    "                                                   YARN's aggregated logs)\n"
    "       tfos yarn pack [-o FILE] [ENV_DIR]   (a venv as a .tar.gz for --archive FILE#env)\n"
    "       tfos yarn serve [options] --model NAME=DIR ...   (tfos serve on YARN: tfos yarn serve --help)\n"
    "status, kill and logs take --principal P --keytab K on a Kerberized cluster (else the ticket cache)\n"
    "\n"
    "Runs the cluster in YARN containers: an ApplicationMaster (the tfos launcher, as in tfos run)\n"
    "and one container per node, each running the node's agent and PROGRAM. PROGRAM's paths are\n"
    "relative to the container's working directory, where --archive and --file are unpacked.\n"
    "Follows the application to its end and exits as tfos run does: 0; 1 a node failed; 124 a\n"
    "reservation or accept timeout; 128+N stopped by signal N (Ctrl-C kills the application: 130);\n"
    "143 the application was killed (tfos yarn kill, or by YARN), as tfos run stopped by SIGTERM;\n"
    "75 drained (tfos yarn kill --graceful, or YARN preempting a container): submit the same\n"
    "command again to continue.\n"
    "Needs java, and Hadoop's client jars and configuration: --hadoop-classpath, else\n"
    "$TFOS_HADOOP_CLASSPATH, else `hadoop classpath`; $HADOOP_CONF_DIR (or $YARN_CONF_DIR) with the\n"
    "cluster's yarn-site.xml (docs/YARN.md).\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    TFOS__CLUSTER_OPTIONS
    "  --max-restarts N, --checkpoint-dir D, --keras MODE, --hang-timeout S, --feed-mb N,\n"
    "  --ps-runs-program, --python PY, --quiet: as for tfos run\n"
    "  --mlflow URI, --mlflow-experiment NAME, --mlflow-run-name NAME: as for tfos run; the\n"
    "                           ApplicationMaster reaches the tracking server (no credentials\n"
    "                           in URI or environment go to YARN)\n"
    "yarn options:\n"
    "  --queue Q                the YARN queue (default: default)\n"
    "  --name N                 the application's name (default tfos)\n"
    "  --worker-memory M        memory of each worker container (MB, or 512m, 2g; default "
    TFOS__STR(TFOS_YARN_DEFAULT_CONTAINER_MB) "m)\n"
    "  --worker-vcores N        vcores of each worker container (default 1)\n"
    "  --worker-gpus N          GPUs (yarn.io/gpu) of each worker container (default 0)\n"
    "  --ps-memory, --ps-vcores, --ps-gpus, --chief-memory, --chief-vcores, --chief-gpus,\n"
    "  --evaluator-memory, --evaluator-vcores, --evaluator-gpus: the same for the other roles\n"
    "                           (chief and evaluator default to the worker's)\n"
    "  --am-memory M            the ApplicationMaster's container (default " TFOS__STR(TFOS_YARN_DEFAULT_AM_MB) "m)\n"
    "  --am-attempts N          how many times YARN may start the ApplicationMaster (default 1): when\n"
    "                           its container is lost, the next attempt starts every node again from\n"
    "                           its checkpoint (at most yarn.resourcemanager.am.max-attempts)\n"
    "  --archive A[#NAME]       an archive (tar.gz, zip: a venv-pack/conda-pack environment) unpacked\n"
    "                           as NAME in every container; repeatable\n"
    "  --file F[#NAME]          a file shipped to every container; repeatable\n"
    "  --env NAME=VALUE         set in every node's environment; repeatable\n"
    "  --accept-timeout S       kill the application if YARN has not started it within S\n"
    "                           seconds (default: the reservation timeout, else "
    TFOS__STR(TFOS_YARN_DEFAULT_ACCEPT_TIMEOUT) ")\n"
    "  --hadoop-classpath CP    Hadoop's client jars\n"
    "  --view-acl ACL           who else may see the application (its report, tracking URL, logs):\n"
    "                           YARN's form, \"user1,user2 group1\", \"*\" for all; default: only you\n"
    "                           and YARN's admins (when the cluster has yarn.acl.enable)\n"
    "  --modify-acl ACL         who else may kill it (the same form; default: only you and admins)\n"
    "  --principal P --keytab K a Kerberos cluster: log in as P with keytab K (else the ticket\n"
    "                           cache kinit filled); the ApplicationMaster keeps the nodes' HDFS\n"
    "                           delegation tokens fresh with it for as long as the job runs\n";

static const char yarn_serve_help[] =
    "\n"
    "tfos yarn serve: the same, on YARN. Each model server runs in a YARN container of its own (sized\n"
    "with --worker-memory/--worker-vcores/--worker-gpus); the front end runs in the ApplicationMaster's\n"
    "container, on its host and a free port (--port P to fix it): the application's tracking URL,\n"
    "printed at start. DIR is an hdfs:// URL (each version is copied into the containers), or a path\n"
    "in the containers (shipped with --archive/--file); a models:/ model is fetched by the front end\n"
    "($MLFLOW_TRACKING_URI goes to it, credentials do not) and handed to the model servers through\n"
    "the application's staging dir on HDFS, its alias followed as by tfos serve (docs/MODELS.md).\n"
    "Takes tfos yarn's --queue, --name, --am-memory, --am-attempts, --archive, --file, --env,\n"
    "--accept-timeout, --view-acl/--modify-acl, --principal/--keytab and --hadoop-classpath\n"
    "(tfos yarn --help); runs\n"
    "until Ctrl-C or SIGTERM, which kill the application.\n";

/* ---- finding java, the jar and Hadoop ---------------------------------- */

static int self_dir(char *buf, size_t len)
{
    if (tfos__self_path(buf, len))
        return -1;
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return 0;
}

/* The client jar: $TFOS_YARN_JAR, else the first readable of, relative to
 * this binary's directory: tfos-yarn.jar beside it (`make yarn` in build/;
 * the package's tfos/bin/), ../share/tfos/ (the wheel's data copy, for the
 * <venv>/bin/tfos that `pip install .` writes), ../tfos/bin/ (for the
 * site-packages/tfos.scripts/tfos that auditwheel's launcher runs). */
static int find_jar(char *out, size_t len)
{
    static const char *const where[] = {"", "/../share/tfos", "/../tfos/bin"};
    const char *env = getenv("TFOS_YARN_JAR");
    if (env && *env) {
        snprintf(out, len, "%s", env);
    } else {
        char dir[PATH_MAX];
        if (self_dir(dir, sizeof dir))
            return -1;
        for (size_t i = 0; i < sizeof where / sizeof *where; i++) {
            snprintf(out, len, "%.*s%s/tfos-yarn.jar", (int)(len - 40), dir, where[i]);
            if (!access(out, R_OK))
                return 0;
        }
        snprintf(out, len, "%.*s/tfos-yarn.jar", (int)(len - 16), dir);
    }
    if (access(out, R_OK)) {
        fprintf(stderr,
                "tfos yarn: cannot read the YARN client jar %s (%s): build it with `make yarn` (needs a JDK and "
                "Maven), or set TFOS_YARN_JAR\n",
                out, strerror(errno));
        return -1;
    }
    return 0;
}

/* Hadoop's client jars: the option, $TFOS_HADOOP_CLASSPATH, or `hadoop
 * classpath`. Returns a malloc'd string or NULL (reported). */
static char *hadoop_classpath(const char *given)
{
    if (!given || !*given)
        given = getenv("TFOS_HADOOP_CLASSPATH");
    if (given && *given)
        return strdup(given);
    FILE *p = popen("hadoop classpath 2>/dev/null", "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = p ? getline(&line, &cap, p) : -1;
    int status = p ? pclose(p) : -1;
    if (n > 1 && status == 0) {
        line[strcspn(line, "\n")] = '\0';
        return line;
    }
    free(line);
    fprintf(stderr, "tfos yarn: no Hadoop client jars: pass --hadoop-classpath CP, set TFOS_HADOOP_CLASSPATH, or "
                    "put `hadoop` on PATH (its `hadoop classpath` is used)\n");
    return NULL;
}

/* Does dir hold a yarn-site.xml? */
static int has_yarn_site(const char *dir, size_t len)
{
    char path[PATH_MAX];
    if (len == 0 || len > sizeof path - 16)
        return 0;
    snprintf(path, sizeof path, "%.*s/yarn-site.xml", (int)len, dir);
    return !access(path, R_OK);
}

/* The cluster's client configuration: $HADOOP_CONF_DIR or $YARN_CONF_DIR,
 * else a directory on Hadoop's classpath (`hadoop classpath` starts with its
 * etc/hadoop), holding yarn-site.xml. Without one, Hadoop's client tries the
 * default ResourceManager address, 0.0.0.0:8032, for 15 minutes, silently:
 * say so at once instead. 0, or -1 reported. */
static int check_conf(const char *hcp)
{
    static const char *const vars[] = {"HADOOP_CONF_DIR", "YARN_CONF_DIR"};
    const char *given = NULL;
    for (size_t i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v && has_yarn_site(v, strlen(v)))
            return 0;
        if (v && *v && !given)
            given = vars[i];
    }
    for (const char *p = hcp; *p;) {
        size_t n = strcspn(p, ":");
        if (n && p[n - 1] != '*' && !(n > 4 && !strncmp(p + n - 4, ".jar", 4)) && has_yarn_site(p, n))
            return 0;
        p += n + (p[n] == ':');
    }
    if (given)
        fprintf(stderr,
                "tfos yarn: %s=%s holds no yarn-site.xml: point HADOOP_CONF_DIR at the directory of the cluster's "
                "client configuration (yarn-site.xml, core-site.xml; often /etc/hadoop/conf)\n",
                given, getenv(given));
    else
        fprintf(stderr, "tfos yarn: HADOOP_CONF_DIR is not set (nor YARN_CONF_DIR), and no directory on Hadoop's "
                        "classpath holds a yarn-site.xml: set HADOOP_CONF_DIR to the directory of the cluster's "
                        "client configuration (yarn-site.xml, core-site.xml; often /etc/hadoop/conf), as for "
                        "`yarn` and `spark-submit --master yarn`\n");
    return -1;
}

typedef struct strv {
    char **v;
    size_t n, cap;
} strv;

static int strv_add(strv *s, const char *a)
{
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(a)))
        return -1;
    s->v[++s->n] = NULL;
    return 0;
}

static void strv_free(strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

/* The nodes' output, from the launcher's status page (see the top). */
typedef struct follower {
    char url[1024]; /* "" until the Java client printed it */
    unsigned long long next;
    int64_t last_ms;
} follower;

/* One line of the page's stream: a node's ("[job:index] ...") to stdout; the
 * launcher's ("[tfos] ...", yarn_am.c) to stderr, as tfos run prints its own. */
static void stream_line(const char *line, size_t len)
{
    if (len >= 7 && !strncmp(line, "[tfos] ", 7))
        fprintf(stderr, "tfos: %.*s\n", (int)(len - 7), line + 7);
    else
        fprintf(stdout, "%.*s\n", (int)len, line);
}

/* Print the lines the page has from f->next on; 1 when it answered. */
static int follow_once(follower *f)
{
    char path[64];
    snprintf(path, sizeof path, "/logs/stream/%llu", f->next);
    char *body = tfos__http_get(f->url, path);
    if (!body)
        return 0;
    char *lines = strchr(body, '\n');
    unsigned long long next;
    if (sscanf(body, "next %llu", &next) == 1 && lines) {
        lines++;
        if (!strncmp(lines, "skipped ", 8)) {
            char *nl = strchr(lines, '\n');
            fprintf(stdout, "tfos: (%.*s lines of the nodes' output are gone; the containers' logs have them)\n",
                    (int)strcspn(lines + 8, "\n"), lines + 8);
            lines = nl ? nl + 1 : lines + strlen(lines);
        }
        for (char *p = lines; *p;) {
            size_t n = strcspn(p, "\n");
            stream_line(p, n);
            p += n + (p[n] == '\n');
        }
        fflush(stdout);
        f->next = next;
    }
    free(body);
    return 1;
}

/* tfos yarn serve's models (where each is served is printed once known) */
static char g_serve[64][104];
static int g_nserve;

/* A line of the Java client's stderr: its reports to us (CLIENT_EVENT) are
 * taken, everything else is the user's and passed on. */
static void client_line(follower *f, const char *line)
{
    if (strncmp(line, CLIENT_EVENT, strlen(CLIENT_EVENT))) {
        fprintf(stderr, "%s\n", line);
        return;
    }
    const char *event = line + strlen(CLIENT_EVENT);
    if (strncmp(event, "status-page ", 12))
        return; /* a kind this tfos does not know: a newer client's */
    int n = (int)strcspn(event + 12, " \n");
    if (f->url[0] && (size_t)n == strlen(f->url) && !strncmp(f->url, event + 12, (size_t)n))
        return;
    /* the first, or a new ApplicationMaster attempt's page (--am-attempts): its stream starts again */
    snprintf(f->url, sizeof f->url, "%.*s", n, event + 12);
    f->next = 0;
    /* tfos yarn serve: the models are served on the status page's host and port */
    int base = (int)(strchr(f->url + 7, '/') ? strchr(f->url + 7, '/') - f->url : (ptrdiff_t)strlen(f->url));
    for (int i = 0; i < g_nserve; i++)
        fprintf(stderr, "tfos yarn serve: model %s: POST %.*s/v2/models/%s/infer (Open Inference Protocol)%s\n",
                g_serve[i], base, f->url, g_serve[i], strstr(f->url, "token=") ? ", with the token in the URL above" : "");
}

static volatile sig_atomic_t forward_to, forwarded_sig;

static void forward_signal(int sig)
{
    if (forward_to > 0) {
        if (!forwarded_sig)
            forwarded_sig = sig;
        kill((pid_t)forward_to, sig);
    }
}

/* Run the Java client with `args` and return its exit status. It dies with
 * us (PR_SET_PDEATHSIG), and our SIGINT/SIGTERM/SIGHUP go on to it, so the
 * application is killed however we end. */
/* Kerberos for the Java client: tfos yarn --principal/--keytab as system
 * properties (Kerberos.java logs in with them), and $KRB5_CONFIG, MIT's way to
 * name krb5.conf, which Java reads only from java.security.krb5.conf. */
static int krb_props(strv *argv, const char *principal, const char *keytab)
{
    char *p = NULL;
    int bad = 0;
    const char *krb5 = getenv("KRB5_CONFIG");
    if (krb5 && *krb5)
        bad = asprintf(&p, "-Djava.security.krb5.conf=%s", krb5) < 0 || strv_add(argv, p);
    free(p);
    p = NULL;
    if (principal && !bad)
        bad = asprintf(&p, "-Dtfos.principal=%s", principal) < 0 || strv_add(argv, p);
    free(p);
    p = NULL;
    if (keytab && !bad)
        bad = asprintf(&p, "-Dtfos.keytab=%s", keytab) < 0 || strv_add(argv, p);
    free(p);
    return bad;
}

static int run_client(strv *args, const char *hadoop_cp_opt, const char *secret, const char *principal,
                      const char *keytab)
{
    char jar[PATH_MAX];
    if (find_jar(jar, sizeof jar))
        return 1;
    char *hcp = hadoop_classpath(hadoop_cp_opt);
    if (!hcp)
        return 1;
    if (check_conf(hcp)) {
        free(hcp);
        return 1;
    }
    const char *conf = getenv("HADOOP_CONF_DIR");
    const char *yconf = getenv("YARN_CONF_DIR");
    size_t len = strlen(jar) + strlen(hcp) + (conf ? strlen(conf) : 0) + (yconf ? strlen(yconf) : 0) + 8;
    char *cp = malloc(len);
    if (!cp) {
        free(hcp);
        return 1;
    }
    snprintf(cp, len, "%s%s%s%s%s:%s", conf ? conf : "", conf ? ":" : "", yconf ? yconf : "", yconf ? ":" : "",
             jar, hcp);
    /* the Hadoop jars, as given (wildcards unexpanded), for the
     * ApplicationMaster's classpath (Client.java, amClasspath) */
    char *hcp_prop = NULL;
    if (asprintf(&hcp_prop, "-Dtfos.hadoop.classpath=%s", hcp) < 0)
        hcp_prop = NULL;
    free(hcp);
    if (!hcp_prop) {
        free(cp);
        return 1;
    }
    char java[PATH_MAX] = "java";
    const char *jh = getenv("JAVA_HOME");
    if (jh && *jh)
        snprintf(java, sizeof java, "%s/bin/java", jh);

    /* C1 only: the client lives for one submission and its monitoring, and
     * C2's compiler threads would cost it more CPU than they save */
    strv argv = {0};
    int bad = strv_add(&argv, java) || strv_add(&argv, "-Xmx256m") || strv_add(&argv, "-XX:TieredStopAtLevel=1") ||
              strv_add(&argv, hcp_prop) ||
              krb_props(&argv, principal, keytab) || strv_add(&argv, "-cp") || strv_add(&argv, cp) ||
              strv_add(&argv, "io.tfos.yarn.Client");
    free(cp);
    free(hcp_prop);
    for (size_t i = 0; i < args->n && !bad; i++)
        bad = strv_add(&argv, args->v[i]);
    /* the environment: ours, with the cluster's secret (never on a command line) */
    strv env = {0};
    for (char **e = environ; *e && !bad; e++)
        if (strncmp(*e, "TFOS_SECRET=", 12))
            bad = strv_add(&env, *e);
    char secret_env[TFOS_HEX_SECRET_LEN + 16];
    if (secret) {
        snprintf(secret_env, sizeof secret_env, "TFOS_SECRET=%s", secret);
        bad = bad || strv_add(&env, secret_env);
    }
    if (bad) {
        strv_free(&argv);
        strv_free(&env);
        fprintf(stderr, "tfos yarn: out of memory\n");
        return 1;
    }
    tfos__on_stop_signals(forward_signal);
    int errp[2];
    if (pipe2(errp, O_CLOEXEC)) {
        strv_free(&argv);
        strv_free(&env);
        return 1;
    }
    tfos__spawn_opts so = {.argv = argv.v, .envp = env.v, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = errp[1],
                           .pdeathsig = SIGTERM};
    pid_t pid;
    int rc = tfos__spawn(&so, &pid);
    strv_free(&argv);
    strv_free(&env);
    close(errp[1]);
    if (rc) {
        close(errp[0]);
        fprintf(stderr, "tfos yarn: cannot run %s: %s (install a JDK 17, or set JAVA_HOME)\n", java, strerror(errno));
        return 1;
    }
    forward_to = pid;
    /* the client's stderr line by line; the nodes' output every 500 ms */
    follower fl = {0};
    char buf[16384];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = errp[0], .events = POLLIN};
        int n = poll(&p, 1, 500);
        if (n > 0) {
            ssize_t r = read(errp[0], buf + have, sizeof buf - 1 - have);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            have += (size_t)r;
            buf[have] = 0;
            char *start = buf, *nl;
            while ((nl = strchr(start, '\n'))) {
                *nl = 0;
                client_line(&fl, start);
                start = nl + 1;
            }
            have = strlen(start);
            memmove(buf, start, have);
            if (have == sizeof buf - 1) { /* a line longer than the buffer */
                buf[have] = 0;
                client_line(&fl, buf);
                have = 0;
            }
        }
        if (fl.url[0] && tfos__now_ms() - fl.last_ms >= 500) {
            follow_once(&fl);
            fl.last_ms = tfos__now_ms();
        }
    }
    close(errp[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    forward_to = 0;
    /* what the nodes printed last (the page lingers for its follower) */
    if (fl.url[0]) {
        int64_t until = tfos__now_ms() + 3000;
        unsigned long long before;
        do
            before = fl.next;
        while (follow_once(&fl) && fl.next != before && tfos__now_ms() < until);
    }
    /* stopped by us (Ctrl-C, SIGTERM): 128 + that signal, as tfos run, whatever
     * status the client's JVM ended with on its way out (its shutdown may be
     * cut short, exit 143, 10 s after it killed the application) */
    if (forwarded_sig)
        return 128 + forwarded_sig;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* ---- tfos yarn --------------------------------------------------------- */

/* Kerberos login of status, kill and logs: --principal P --keytab K (or
 * --principal=P ...) anywhere in argv, taken out of it (argc shrinks). 0, or
 * 2 after a usage error was reported. */
static int take_login(int *argc, char **argv, const char **principal, const char **keytab)
{
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        int is_p = !strncmp(a, "--principal", 11) && (a[11] == 0 || a[11] == '=');
        int is_k = !strncmp(a, "--keytab", 8) && (a[8] == 0 || a[8] == '=');
        if (!is_p && !is_k) {
            argv[n++] = argv[i];
            continue;
        }
        const char *v = strchr(a, '=') ? strchr(a, '=') + 1 : i + 1 < *argc ? argv[++i] : NULL;
        if (!v || !*v)
            return tfos__usage_error("%s needs a value", is_p ? "--principal" : "--keytab");
        if (is_p)
            *principal = v;
        else if (!(*keytab = tfos__yarn_keytab(v)))
            return 2;
    }
    *argc = n;
    if (!*principal != !*keytab)
        return tfos__usage_error("%s", TFOS_YARN_LOGIN_PAIR);
    return 0;
}

/* The Java client's `COMMAND APP [EXTRA]` (status, kill, logs), logged in
 * as principal with keytab when given (else the ticket cache). */
static int client_command(const char *command, const char *app, const char *extra, const char *principal,
                          const char *keytab)
{
    strv args = {0};
    if (strv_add(&args, command) || strv_add(&args, app) || (extra && strv_add(&args, extra))) {
        strv_free(&args);
        return 1;
    }
    int code = run_client(&args, NULL, NULL, principal, keytab);
    strv_free(&args);
    return code;
}

/* The Java client's `submit ...` options from c, up to the "--" before the
 * ApplicationMaster's launcher arguments; a fresh secret; and each role's
 * container as "worker=MB:VCORES:GPUS,ps=...". 0; 1 out of memory (args
 * partly made: free them); -1 with the error printed. */
static int submit_head(const tfos__yarn_cli *c, double reservation_timeout, const char *default_name, strv *args,
                       char *secret, char *resources, size_t rlen)
{
    /* each role's container: MB:VCORES:GPUS; chief and evaluator default to the worker's */
    size_t off = 0;
    for (int r = 0; r < YARN_ROLES; r++) {
        int base = r == YARN_ROLE_PS ? YARN_ROLE_PS : YARN_ROLE_WORKER;
        int mb = c->res_mb[r] ? c->res_mb[r] : c->res_mb[base] ? c->res_mb[base] : TFOS_YARN_DEFAULT_CONTAINER_MB;
        int vc = c->res_vcores[r] ? c->res_vcores[r] : c->res_vcores[base] ? c->res_vcores[base] : 1;
        int gpus = c->res_gpus[r] ? c->res_gpus[r] : r == YARN_ROLE_PS ? 0 : c->res_gpus[base];
        off += (size_t)snprintf(resources + off, rlen - off, "%s%s=%d:%d:%d", r ? "," : "",
                                role_names[r], mb, vc, gpus);
    }

    char self[PATH_MAX];
    if (tfos__self_path(self, sizeof self)) {
        fprintf(stderr, "tfos yarn: cannot find my own executable: %s\n", strerror(errno));
        return -1;
    }
    if (tfos__random_hex(secret, 32))
        return -1;

    char num[64];
    int bad = strv_add(args, "submit") || strv_add(args, "--tfos") || strv_add(args, self) ||
              strv_add(args, "--name") || strv_add(args, c->app_name ? c->app_name : default_name) ||
              strv_add(args, "--queue") || strv_add(args, c->queue ? c->queue : "default");
    snprintf(num, sizeof num, "%d", c->am_memory_mb ? c->am_memory_mb : TFOS_YARN_DEFAULT_AM_MB);
    bad = bad || strv_add(args, "--am-memory") || strv_add(args, num);
    snprintf(num, sizeof num, "%d", c->am_attempts ? c->am_attempts : 1);
    bad = bad || strv_add(args, "--am-attempts") || strv_add(args, num);
    double accept = c->accept_timeout > 0 ? c->accept_timeout
                    : reservation_timeout > 0 ? reservation_timeout
                                                 : TFOS_YARN_DEFAULT_ACCEPT_TIMEOUT;
    snprintf(num, sizeof num, "%g", accept);
    bad = bad || strv_add(args, "--accept-timeout") || strv_add(args, num);
    if (c->view_acl)
        bad = bad || strv_add(args, "--view-acl") || strv_add(args, c->view_acl);
    if (c->modify_acl)
        bad = bad || strv_add(args, "--modify-acl") || strv_add(args, c->modify_acl);
    for (int i = 0; i < c->narchives && !bad; i++)
        bad = strv_add(args, "--archive") || strv_add(args, c->archives[i]);
    for (int i = 0; i < c->nfiles && !bad; i++)
        bad = strv_add(args, "--file") || strv_add(args, c->files[i]);
    /* --env: set in the ApplicationMaster's environment, and named in
     * TFOS_YARN_ENV_KEYS so the stand-ins pass them on to every node */
    char keys[4096] = "TFOS_YARN_ENV_KEYS=";
    for (int i = 0; i < c->nenvs && !bad; i++) {
        bad = strv_add(args, "--env") || strv_add(args, c->envs[i]);
        size_t klen = strcspn(c->envs[i], "=");
        if (strlen(keys) + klen + 2 < sizeof keys)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%.*s", i ? "," : "", (int)klen,
                     c->envs[i]);
    }
    if (c->nenvs)
        bad = bad || strv_add(args, "--env") || strv_add(args, keys);
    return bad || strv_add(args, "--");
}

/* Run the Java client with args (made by submit_head and the caller; bad:
 * they could not all be made) and free them; its exit status. */
static int submit(strv *args, int bad, const tfos__yarn_cli *c, const char *secret)
{
    int code = 1;
    if (bad)
        fprintf(stderr, "tfos yarn: out of memory\n");
    else if (!c->principal != !c->keytab)
        code = tfos__usage_error("%s", TFOS_YARN_LOGIN_PAIR);
    else
        code = run_client(args, c->hadoop_classpath, secret, c->principal, c->keytab);
    strv_free(args);
    return code;
}

/* tfos yarn's options: run's, its client's, and the ApplicationMaster's
 * (refused: they are internal). */
typedef struct yarn_cli {
    tfos__run_cli run;
    tfos__yarn_cli y;
    int internal; /* --am-socket, --bind, --resources or --address-file given */
} yarn_cli;

static int yarn_option(void *user, tfos__args *it, const char *a)
{
    yarn_cli *c = user;
    static const struct {
        const char *opt, *what;
    } internal[] = {{"--am-socket", "a path"}, {"--bind", "an address"}, {"--resources", "a list"},
                    {"--address-file", "a file name"}};
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++)
        if (!strcmp(a, internal[i].opt)) {
            c->internal = 1;
            return tfos__opt_need(a, tfos__args_value(it), internal[i].what) ? 2 : 1;
        }
    return tfos__yarn_option(&c->y, it, a);
}

/* tfos yarn [options] [--] PROGRAM [ARGS...]: the run's options go on to
 * the ApplicationMaster's tfos yarn-am, less the client's. */
static int yarn_submit(int argc, char **argv)
{
    yarn_cli c = {0};
    int rc = tfos__run_parse(&c.run, argc, argv, yarn_option, &c);
    if (rc == TFOS__HELP) {
        fputs(tfos__yarn_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    const tfos__run_cli *r = &c.run;
    if (!r->argv || !r->argv[0])
        return tfos__usage_error("%s", "yarn needs a program (tfos yarn [options] [--] PROGRAM [ARGS...])");
    if ((rc = tfos__cluster_check(&r->cluster, "yarn")))
        return rc;
    if (r->ninputs)
        return tfos__usage_error("%s", "--input feeds files on this machine; on YARN, read them from HDFS in "
                                       "the program (docs/YARN.md)");
    if (c.internal)
        return tfos__usage_error("%s", "--am-socket, --bind, --resources and --address-file are internal");
    for (char *const *a = r->argv; *a; a++)
        if (strpbrk(*a, "\n\r")) /* the stand-ins pass a node's command to the AM line by line */
            return tfos__usage_error("%s", "an argument of the program has a line break, which YARN containers "
                                           "cannot be given: put the code in a file shipped with --file");
    if (r->status_given)
        return tfos__usage_error("%s", "--status-port and --status-host are chosen in the ApplicationMaster's "
                                       "container on YARN (the application's tracking URL)");
    if (r->mlflow) {
        /* checked here, before anything is submitted; the ApplicationMaster's
         * launcher makes the run. Its argv is on YARN's records: no
         * credentials in the URI (nor are MLFLOW_TRACKING_* sent along) */
        tfos__mlflow *m;
        char err[600];
        if (tfos__mlflow_open(&m, r->mlflow, 0, err, sizeof err))
            return tfos__usage_error("--mlflow: %s", err);
        int creds = strcmp(tfos__mlflow_shown(m), r->mlflow) != 0 && strchr(r->mlflow, '@') != NULL;
        tfos__mlflow_close(m);
        if (creds)
            return tfos__usage_error("%s", "--mlflow: on YARN the URI goes on the ApplicationMaster's command "
                                           "line: give it without user:password@ and let the tracking server "
                                           "accept the cluster's hosts");
    }

    char secret[TFOS_HEX_SECRET_LEN + 1], resources[256];
    strv args = {0};
    int bad = submit_head(&c.y, r->cluster.reservation_timeout, "tfos", &args, secret, resources, sizeof resources);
    if (bad < 0)
        return 1;

    /* the ApplicationMaster's launcher: our options less the client's, then the program */
    int prog = (int)(r->argv - argv);
    for (int i = 0; i < prog && !bad; i++) {
        int has_value;
        if (!strcmp(argv[i], "--"))
            break;
        if (tfos__yarn_client_only(argv[i], &has_value)) {
            if (!has_value)
                i++;
            continue;
        }
        bad = strv_add(&args, argv[i]);
    }
    if (!r->log_dir) /* the node logs stay in YARN's container logs */
        bad = bad || strv_add(&args, "--log-dir") || strv_add(&args, "<LOG_DIR>/tfos");
    if (!r->checkpoint_dir) /* tfos-checkpoints/<application id> in the user's home on the default FS */
        bad = bad || strv_add(&args, "--checkpoint-dir") || strv_add(&args, "<DEFAULT_CHECKPOINT_DIR>");
    bad = bad || strv_add(&args, "--resources") || strv_add(&args, resources) || strv_add(&args, "--");
    for (char **p = r->argv; *p && !bad; p++)
        bad = strv_add(&args, *p);
    return submit(&args, bad, &c.y, secret);
}

/* The client options of tfos yarn serve: nothing but them. */
static int yarn_parse_client(tfos__yarn_cli *y, int argc, char **argv)
{
    memset(y, 0, sizeof *y);
    tfos__args it;
    tfos__args_init(&it, argc, argv);
    for (char *a; (a = tfos__args_next(&it));) {
        int taken = tfos__yarn_option(y, &it, a);
        if (!taken)
            return tfos__usage_error("unknown option '%s'", tfos__args_whole(&it));
        if (taken == 2)
            return 2;
    }
    return 0;
}

/* tfos yarn serve [yarn options] [serve options]: tfos yarn's client options
 * and tfos serve's (serve.c's, checked here as on YARN), apart; tfos serve's
 * go on to the ApplicationMaster's tfos yarn-am. */
static int yarn_serve(int argc, char **argv)
{
    char **yv = calloc((size_t)argc + 1, sizeof *yv), **sv = calloc((size_t)argc + 1, sizeof *sv);
    int ny = 0, ns = 0, rc = 1;
    if (!yv || !sv)
        goto out;
    for (int i = 0; i < argc; i++) {
        int has_value;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tfos__serve_help, stdout);
            fputs(yarn_serve_help, stdout);
            rc = 0;
            goto out;
        }
        if (tfos__yarn_client_only(argv[i], &has_value)) {
            yv[ny++] = argv[i];
            if (!has_value && i + 1 < argc)
                yv[ny++] = argv[++i];
        } else {
            sv[ns++] = argv[i];
        }
    }
    tfos__yarn_cli y;
    if ((rc = yarn_parse_client(&y, ny, yv)))
        goto out;
    /* models from MLflow's registry: the front end in the ApplicationMaster's
     * container asks it at $MLFLOW_TRACKING_URI (--env's, else ours), which
     * goes there in its environment; credentials do not (docs/MODELS.md) */
    const char *tracking = getenv("MLFLOW_TRACKING_URI");
    int given = 0, from_registry = 0;
    for (int i = 0; i < y.nenvs; i++)
        if (!strncmp(y.envs[i], "MLFLOW_TRACKING_URI=", 20)) {
            tracking = y.envs[i] + 20;
            given = 1;
        }
    if ((rc = tfos__serve_check(ns, sv, tracking, &from_registry)))
        goto out;
    char tracking_env[1100];
    if (from_registry && !given) {
        if (y.nenvs == 64 || strlen(tracking) + 21 > sizeof tracking_env) {
            rc = tfos__usage_error("%s", "--env: at most 63 with a model from the registry (MLFLOW_TRACKING_URI "
                                         "goes too), and the URI up to 1,000 characters");
            goto out;
        }
        snprintf(tracking_env, sizeof tracking_env, "MLFLOW_TRACKING_URI=%s", tracking);
        y.envs[y.nenvs++] = tracking_env;
    }
    /* the model names, to print where each is served once the front end is up */
    for (int i = 0; i + 1 < ns && g_nserve < 64; i++)
        if (!strcmp(sv[i], "--model") || !strncmp(sv[i], "--model=", 8)) {
            const char *m = sv[i][7] == '=' ? sv[i] + 8 : sv[++i];
            snprintf(g_serve[g_nserve++], sizeof g_serve[0], "%.*s", (int)strcspn(m, "@="), m);
        }
    char secret[TFOS_HEX_SECRET_LEN + 1], resources[256];
    strv args = {0};
    int bad = submit_head(&y, 0, "tfos-serve", &args, secret, resources, sizeof resources);
    if (bad < 0)
        goto out;
    /* the ApplicationMaster runs `tfos yarn-am ... --resources R serve OPTIONS` */
    bad = bad || strv_add(&args, "--resources") || strv_add(&args, resources) || strv_add(&args, "serve");
    int has_log_dir = 0;
    for (int i = 0; i < ns && !bad; i++) {
        has_log_dir |= !strncmp(sv[i], "--log-dir", 9);
        bad = strv_add(&args, sv[i]);
    }
    if (!has_log_dir) /* the model servers' logs stay in YARN's container logs */
        bad = bad || strv_add(&args, "--log-dir") || strv_add(&args, "<LOG_DIR>/tfos");
    rc = submit(&args, bad, &y, secret);
out:
    free(yv);
    free(sv);
    return rc;
}

int tfos__cmd_yarn(int argc, char **argv)
{
    if (argc >= 1 && !strcmp(argv[0], "serve"))
        return yarn_serve(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "pack"))
        return tfos__cmd_yarn_pack(argc - 1, argv + 1);
    const char *principal = NULL, *keytab = NULL;
    if (argc >= 1 && (!strcmp(argv[0], "logs") || !strcmp(argv[0], "status") || !strcmp(argv[0], "kill")) &&
        take_login(&argc, argv, &principal, &keytab))
        return 2;
    if (argc >= 1 && !strcmp(argv[0], "logs")) {
        int follow = argc == 3 && (!strcmp(argv[2], "--follow") || !strcmp(argv[2], "-f"));
        if (argc < 2 || argc > 3 || (argc == 3 && !follow) || argv[1][0] == '-')
            return tfos__usage_error("%s", "yarn logs takes an application id and --follow "
                                           "(tfos yarn logs APPLICATION_ID [--follow])");
        return client_command("logs", argv[1], follow ? "--follow" : NULL, principal, keytab);
    }
    if (argc == 2 && argv[1][0] != '-' && !strcmp(argv[0], "status"))
        return client_command(argv[0], argv[1], NULL, principal, keytab);
    if (argc >= 1 && !strcmp(argv[0], "kill")) {
        /* kill APP; kill --graceful APP, or kill APP --graceful */
        const char *app = NULL;
        int graceful = 0;
        for (int i = 1; i < argc; i++) {
            if (!strcmp(argv[i], "--graceful"))
                graceful = 1;
            else if (argv[i][0] != '-' && !app)
                app = argv[i];
            else
                return tfos__usage_error("yarn kill: unexpected '%s' (tfos yarn kill [--graceful] APPLICATION_ID)",
                                         argv[i]);
        }
        if (!app)
            return tfos__usage_error("%s", "yarn kill takes an application id (tfos yarn kill [--graceful] "
                                           "APPLICATION_ID)");
        return client_command("kill", app, graceful ? "--graceful" : NULL, principal, keytab);
    }
    return yarn_submit(argc, argv);
}
