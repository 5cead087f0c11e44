/* yarn.c: `tfos yarn` and its stand-in `tfos yarn-container` (docs/YARN.md).
 *
 * tfos yarn checks its options (parsed with every other command's, main.c),
 * then runs the Java client (io.tfos.yarn.Client, the only code that speaks
 * Hadoop's RPC besides the ApplicationMaster) with the cluster's Hadoop
 * classpath. The client ships this very binary and the user's archives and
 * files, and starts the ApplicationMaster, which runs `tfos yarn-am`: tfos run
 * itself, whose agents start through stand-ins instead of locally.
 *
 * While the application runs, tfos yarn follows the nodes' output: their
 * agents forward it to the launcher (--forward-logs), whose status page (the
 * tracking URL, which the Java client prints) serves it at /logs/stream/N;
 * the lines go to our stdout as the nodes print them.
 *
 * A stand-in (`tfos yarn-container`) is what the launcher sees as a node's
 * agent process: it asks the ApplicationMaster, over the Unix socket the
 * ApplicationMaster gave the launcher, for one container with the role's
 * resources, has the agent command run in it, and exits with the container's
 * exit status. When the launcher ends it (an attempt over, the run stopped),
 * its socket closes and the ApplicationMaster stops the container. */
#include "cli/cli.h"
#include "cli/inspect.h"
#include "core/auth.h"
#include "platform/clock.h"
#include "platform/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_MEMORY_MB 1024
#define DEFAULT_AM_MEMORY_MB 512
#define DEFAULT_ACCEPT_TIMEOUT 120.0

static const char *const role_names[YARN_ROLES] = {"worker", "ps", "chief", "evaluator"};

/* Options of tfos yarn that the ApplicationMaster's tfos yarn-am does not take
 * (each takes a value). */
static const char *const client_only[] = {
    "--queue",         "--name",           "--hadoop-classpath", "--am-memory",       "--worker-memory",
    "--worker-vcores", "--worker-gpus",    "--ps-memory",        "--ps-vcores",       "--ps-gpus",
    "--chief-memory",  "--chief-vcores",   "--chief-gpus",       "--evaluator-memory", "--evaluator-vcores",
    "--evaluator-gpus", "--archive",       "--file",             "--env",             "--accept-timeout",
};

int tfos__yarn_client_only(const char *arg, int *has_value)
{
    size_t n = strcspn(arg, "=");
    for (size_t i = 0; i < sizeof client_only / sizeof *client_only; i++)
        if (strlen(client_only[i]) == n && !strncmp(arg, client_only[i], n)) {
            *has_value = arg[n] == '=';
            return 1;
        }
    return 0;
}

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
        fputs(lines, stdout);
        fflush(stdout);
        f->next = next;
    }
    free(body);
    return 1;
}

/* tfos yarn serve's models (where each is served is printed once known) */
static char g_serve[64][104];
static int g_nserve;

/* A line of the Java client's stderr: passed on; the status page's URL kept. */
static void client_line(follower *f, const char *line)
{
    fprintf(stderr, "%s\n", line);
    const char *mark = strstr(line, "tfos: status page http://");
    if (!mark || f->url[0])
        return;
    snprintf(f->url, sizeof f->url, "%.*s", (int)strcspn(mark + 18, " \n"), mark + 18);
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
static int run_client(strv *args, const char *hadoop_cp_opt, const char *secret)
{
    char jar[PATH_MAX];
    if (find_jar(jar, sizeof jar))
        return 1;
    char *hcp = hadoop_classpath(hadoop_cp_opt);
    if (!hcp)
        return 1;
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
    free(hcp);
    char java[PATH_MAX] = "java";
    const char *jh = getenv("JAVA_HOME");
    if (jh && *jh)
        snprintf(java, sizeof java, "%s/bin/java", jh);

    strv argv = {0};
    int bad = strv_add(&argv, java) || strv_add(&argv, "-Xmx256m") || strv_add(&argv, "-cp") ||
              strv_add(&argv, cp) || strv_add(&argv, "io.tfos.yarn.Client");
    free(cp);
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

/* The Java client's `COMMAND APP [EXTRA]` (status, kill, logs). */
static int client_command(const char *command, const char *app, const char *extra)
{
    strv args = {0};
    if (strv_add(&args, command) || strv_add(&args, app) || (extra && strv_add(&args, extra))) {
        strv_free(&args);
        return 1;
    }
    int code = run_client(&args, NULL, NULL);
    strv_free(&args);
    return code;
}

/* The Java client's `submit ...` options from c, up to the "--" before the
 * ApplicationMaster's launcher arguments; a fresh secret; and each role's
 * container as "worker=MB:VCORES:GPUS,ps=...". 0; 1 out of memory (args
 * partly made: free them); -1 with the error printed. */
static int submit_head(const cli *c, const char *default_name, strv *args, char *secret, char *resources,
                       size_t rlen)
{
    /* each role's container: MB:VCORES:GPUS; chief and evaluator default to the worker's */
    size_t off = 0;
    for (int r = 0; r < YARN_ROLES; r++) {
        int base = r == YARN_ROLE_PS ? YARN_ROLE_PS : YARN_ROLE_WORKER;
        int mb = c->res_mb[r] ? c->res_mb[r] : c->res_mb[base] ? c->res_mb[base] : DEFAULT_MEMORY_MB;
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
    snprintf(num, sizeof num, "%d", c->am_memory_mb ? c->am_memory_mb : DEFAULT_AM_MEMORY_MB);
    bad = bad || strv_add(args, "--am-memory") || strv_add(args, num);
    double accept = c->accept_timeout > 0 ? c->accept_timeout
                    : c->reservation_timeout > 0 ? c->reservation_timeout
                                                 : DEFAULT_ACCEPT_TIMEOUT;
    snprintf(num, sizeof num, "%g", accept);
    bad = bad || strv_add(args, "--accept-timeout") || strv_add(args, num);
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
static int submit(strv *args, int bad, const cli *c, const char *secret)
{
    int code = 1;
    if (bad)
        fprintf(stderr, "tfos yarn: out of memory\n");
    else
        code = run_client(args, c->hadoop_classpath, secret);
    strv_free(args);
    return code;
}

int tfos__cmd_yarn(const cli *c, int argc, char **argv)
{
    (void)argc; /* argv ends with NULL; c->argv points into it */
    if (!c) /* tfos yarn status|kill APPLICATION_ID */
        return client_command(argv[0], argv[1], NULL);
    if (!c->argv || !c->argv[0])
        return tfos__usage_error("%s", "yarn needs a program (tfos yarn [options] [--] PROGRAM [ARGS...])");
    if (!c->have_workers && !c->layout.chief)
        return tfos__usage_error("%s", "yarn needs --workers N (or --chief)");
    if (!c->layout.num_workers && !c->layout.chief)
        return tfos__usage_error("%s",
                                 "--workers 0 needs --chief: a cluster needs at least one worker or a chief");
    if (c->ninputs)
        return tfos__usage_error("%s", "--input feeds files on this machine; on YARN, read them from HDFS in "
                                       "the program (docs/YARN.md)");
    if (c->am_socket || c->bind || c->resources || c->address_file)
        return tfos__usage_error("%s", "--am-socket, --bind, --resources and --address-file are internal");
    if (c->status_port || c->status_host)
        return tfos__usage_error("%s", "--status-port and --status-host are chosen in the ApplicationMaster's "
                                       "container on YARN (the application's tracking URL)");

    char secret[TFOS_HEX_SECRET_LEN + 1], resources[256];
    strv args = {0};
    int bad = submit_head(c, "tfos", &args, secret, resources, sizeof resources);
    if (bad < 0)
        return 1;

    /* the ApplicationMaster's launcher: our options less the client's, then the program */
    int prog = (int)(c->argv - argv);
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
    if (!c->log_dir) /* the node logs stay in YARN's container logs */
        bad = bad || strv_add(&args, "--log-dir") || strv_add(&args, "<LOG_DIR>/tfos");
    if (!c->checkpoint_dir) /* tfos-checkpoints/<application id> in the user's home on the default FS */
        bad = bad || strv_add(&args, "--checkpoint-dir") || strv_add(&args, "<DEFAULT_CHECKPOINT_DIR>");
    bad = bad || strv_add(&args, "--resources") || strv_add(&args, resources) || strv_add(&args, "--");
    for (char **p = c->argv; *p && !bad; p++)
        bad = strv_add(&args, *p);
    return submit(&args, bad, c, secret);
}

int tfos__cmd_yarn_serve(const cli *c, int argc, char **argv)
{
    /* the model names, to print where each is served once the front end is up */
    for (int i = 0; i + 1 < argc && g_nserve < 64; i++)
        if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8)) {
            const char *m = argv[i][7] == '=' ? argv[i] + 8 : argv[++i];
            snprintf(g_serve[g_nserve++], sizeof g_serve[0], "%.*s", (int)strcspn(m, "@="), m);
        }
    char secret[TFOS_HEX_SECRET_LEN + 1], resources[256];
    strv args = {0};
    int bad = submit_head(c, "tfos-serve", &args, secret, resources, sizeof resources);
    if (bad < 0)
        return 1;
    /* the ApplicationMaster runs `tfos yarn-am ... --resources R serve OPTIONS` */
    bad = bad || strv_add(&args, "--resources") || strv_add(&args, resources) || strv_add(&args, "serve");
    int has_log_dir = 0;
    for (int i = 0; i < argc && !bad; i++) {
        has_log_dir |= !strncmp(argv[i], "--log-dir", 9);
        bad = strv_add(&args, argv[i]);
    }
    if (!has_log_dir) /* the model servers' logs stay in YARN's container logs */
        bad = bad || strv_add(&args, "--log-dir") || strv_add(&args, "<LOG_DIR>/tfos");
    return submit(&args, bad, c, secret);
}

void tfos__yarn_am_launcher(tfos_run_opts *o, char *prefix[7], const char *exe, const char *am_socket,
                            const char *resources, const char *bind, const char *address_file)
{
    char *p[7] = {(char *)exe, "yarn-container", "--am-socket", (char *)am_socket, "--resources",
                  (char *)resources, NULL};
    memcpy(prefix, p, sizeof p);
    o->agent_prefix = prefix;
    o->bind_host = bind;
    if (!o->status_host)
        o->status_host = bind;
    o->address_file = address_file;
    o->secret = getenv("TFOS_SECRET");
}

/* ---- tfos yarn-container ----------------------------------------------- */

/* Does the stand-in pass this environment entry on to the node's container? */
static int forwarded(const char *entry, const char *keys)
{
    size_t klen = strcspn(entry, "=");
    if (!strncmp(entry, "TFOS_YARN_", 10))
        return 0;
    if (!strncmp(entry, "TFOS_", 5))
        return 1;
    for (const char *k = keys; k && *k;) {
        size_t n = strcspn(k, ",");
        if (n == klen && !strncmp(k, entry, n))
            return 1;
        k += n + (k[n] == ',');
    }
    return 0;
}

static int send_line(FILE *f, const char *kind, const char *text)
{
    if (strchr(text, '\n')) {
        fprintf(stderr, "tfos yarn-container: a line break in '%s' cannot be passed to a container\n", text);
        return -1;
    }
    return fprintf(f, "%s %s\n", kind, text) < 0 ? -1 : 0;
}

int tfos__cmd_yarn_container(int argc, char **argv)
{
    const char *sock = NULL, *resources = NULL, *role = NULL;
    int i = 0;
    for (; i + 1 < argc && strcmp(argv[i], "--"); i += 2) {
        if (!strcmp(argv[i], "--am-socket"))
            sock = argv[i + 1];
        else if (!strcmp(argv[i], "--resources"))
            resources = argv[i + 1];
        else if (!strcmp(argv[i], "--role"))
            role = argv[i + 1];
        else
            return tfos__usage_error("unknown option '%s'", argv[i]);
    }
    if (i >= argc || strcmp(argv[i], "--") || i + 1 >= argc || !sock || !resources || !role)
        return tfos__usage_error("%s", "yarn-container needs --am-socket, --resources, --role and -- AGENT-ARGV");
    char **agent = argv + i + 1;
    /* this role's MB:VCORES:GPUS */
    int mb = 0, vcores = 0, gpus = 0;
    size_t rl = strlen(role);
    for (const char *p = resources; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, role, rl) && p[rl] == '=' && sscanf(p + rl + 1, "%d:%d:%d", &mb, &vcores, &gpus) == 3)
            break;
    if (mb <= 0 || vcores <= 0)
        return tfos__usage_error("--resources names no container for role '%s'", role);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(sock) >= sizeof sa.sun_path)
        return tfos__usage_error("--am-socket path too long: %s", sock);
    strcpy(sa.sun_path, sock);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        fprintf(stderr, "tfos: %s: cannot reach the ApplicationMaster at %s: %s\n", role, sock, strerror(errno));
        return 1;
    }
    FILE *out = fdopen(dup(fd), "w");
    FILE *in = fdopen(fd, "r");
    if (!out || !in) {
        fprintf(stderr, "tfos: %s: %s\n", role, strerror(errno));
        return 1;
    }
    int bad = fprintf(out, "LAUNCH %s %d %d %d\n", role, mb, vcores, gpus) < 0;
    const char *keys = getenv("TFOS_YARN_ENV_KEYS");
    for (char **e = environ; *e && !bad; e++)
        if (forwarded(*e, keys))
            bad = send_line(out, "ENV", *e);
    /* the agent's command as it runs in the node's container: the tfos
     * binary YARN localized there, its logs in the container's log dir */
    for (char **a = agent; *a && !bad; a++) {
        const char *arg = *a;
        if (a == agent)
            arg = "./tfos";
        else if (a[-1] && !strcmp(a[-1], "--log-dir") && a - agent < 16)
            arg = "<LOG_DIR>";
        bad = send_line(out, "ARG", arg);
    }
    bad = bad || fprintf(out, "GO\n") < 0 || fflush(out);
    if (bad) {
        fprintf(stderr, "tfos: %s: cannot send the container request: %s\n", role, strerror(errno));
        return 1;
    }
    char line[8192];
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "ALLOCATED ", 10)) {
            fprintf(stderr, "tfos: %s: container %s\n", role, line + 10);
        } else if (!strncmp(line, "EXITED ", 7)) {
            int status = atoi(line + 7);
            const char *diag = strchr(line + 7, ' ');
            if (status != 0)
                fprintf(stderr, "tfos: %s: container exited with status %d%s%s\n", role, status,
                        diag && diag[1] ? ": " : "", diag && diag[1] ? diag + 1 : "");
            /* YARN's own codes are negative (lost node, preempted, killed) */
            return status >= 0 && status < 256 ? status : 1;
        } else if (!strncmp(line, "FAILED ", 7)) {
            fprintf(stderr, "tfos: %s: %s\n", role, line + 7);
            return 1;
        }
    }
    fprintf(stderr, "tfos: %s: the ApplicationMaster went away\n", role);
    return 1;
}

/* ---- tfos yarn logs ---------------------------------------------------- */

int tfos__cmd_yarn_logs(int argc, char **argv)
{
    int follow = argc == 2 && (!strcmp(argv[1], "--follow") || !strcmp(argv[1], "-f"));
    if (argc < 1 || argc > 2 || (argc == 2 && !follow) || argv[0][0] == '-')
        return tfos__usage_error("%s", "yarn logs takes an application id and --follow "
                                       "(tfos yarn logs APPLICATION_ID [--follow])");
    return client_command("logs", argv[0], follow ? "--follow" : NULL);
}

/* ---- tfos yarn pack ---------------------------------------------------- */

/* The `home = DIR` line of a venv's pyvenv.cfg: where its python links to. */
static void venv_home(FILE *f, char *home, size_t len)
{
    char line[PATH_MAX + 32];
    home[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *v = line + strspn(line, " \t");
        if (strncmp(v, "home", 4) || !strchr(" \t=", v[4]))
            continue;
        v += 4 + strspn(v + 4, " \t");
        if (*v != '=')
            continue;
        v++;
        v += strspn(v, " \t");
        v[strcspn(v, "\r\n")] = '\0';
        snprintf(home, len, "%s", v);
        return;
    }
}

int tfos__cmd_yarn_pack(int argc, char **argv)
{
    const char *out = "env.tar.gz", *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (++i >= argc || !argv[i][0])
                return tfos__usage_error("%s", "yarn pack: -o needs a file name");
            out = argv[i];
        } else if (argv[i][0] == '-') {
            return tfos__usage_error("yarn pack: unknown option %s (tfos yarn pack [-o FILE] [ENV_DIR])", argv[i]);
        } else if (dir) {
            return tfos__usage_error("yarn pack takes one environment directory; '%s' is one too many", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        dir = getenv("VIRTUAL_ENV");
    if (!dir || !dir[0])
        return tfos__usage_error("%s", "yarn pack needs a virtual environment: activate one, or name its "
                                       "directory (tfos yarn pack [-o FILE] ENV_DIR)");
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/conda-meta", dir);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tfos yarn pack: %s is a conda environment: pack it with conda-pack "
                        "(conda pack -p %s -o %s), which rewrites the paths conda wrote into it\n", dir, dir, out);
        return 2;
    }
    snprintf(path, sizeof path, "%s/pyvenv.cfg", dir);
    FILE *cfg = fopen(path, "r");
    if (!cfg) {
        fprintf(stderr, "tfos yarn pack: %s is not a virtual environment: cannot read %s: %s\n", dir, path,
                strerror(errno));
        return 2;
    }
    char home[PATH_MAX];
    venv_home(cfg, home, sizeof home);
    fclose(cfg);

    /* tar writes a temporary file beside OUT, renamed into place when whole */
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid());
    char *tar_argv[] = {"tar", "-czf", tmp, "-C", (char *)dir, ".", NULL};
    tfos__spawn_opts so = {.argv = tar_argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .pdeathsig = SIGTERM};
    pid_t pid;
    if (tfos__spawn(&so, &pid)) {
        fprintf(stderr, "tfos yarn pack: cannot run tar: %s\n", strerror(errno));
        return 1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char why[64];
        tfos__describe_status(status, why, sizeof why);
        fprintf(stderr, "tfos yarn pack: tar -czf %s -C %s . failed (%s)\n", tmp, dir, why);
        unlink(tmp);
        return 1;
    }
    if (rename(tmp, out) < 0 || stat(out, &st) < 0) {
        fprintf(stderr, "tfos yarn pack: cannot move %s to %s: %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        return 1;
    }
    printf("packed %s into %s (%.1f MB)\n"
           "ship it with:   tfos yarn --archive %s#env ... -- env/bin/python PROGRAM\n",
           dir, out, (double)st.st_size / 1e6, out);
    if (home[0])
        printf("its python links to the interpreter in %s: every node needs that interpreter at that path\n",
               home);
    return 0;
}
