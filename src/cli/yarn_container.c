/* yarn_container.c: `tfos yarn-container --am-socket S --resources R --role
 * JOB -- AGENT-ARGV...` (internal): one node's stand-in in the YARN
 * ApplicationMaster's container, which the launcher starts as that node's
 * agent process (src/launch/backend_yarn.c). It asks the ApplicationMaster,
 * over its Unix socket, for a container with the role's resources, has the
 * agent command started in it, and exits with the container's exit status.
 * When the launcher ends it, its socket closes and the ApplicationMaster
 * stops the container.
 *
 * The socket's protocol, one line each way: LAUNCH ROLE MB VCORES GPUS, ENV
 * NAME=VALUE..., ARG A..., GO; answered ALLOCATED ID, then EXITED STATUS
 * [DIAGNOSTICS] or FAILED WHY. */
#include "cli/commands.h"
#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

const char tfos__yarn_container_help[] =
    "usage: tfos yarn-container --am-socket S --resources R --role JOB -- AGENT-ARGV...\n"
    "\n"
    "Internal: one node's stand-in in the ApplicationMaster's container: asks the ApplicationMaster\n"
    "for a container, has AGENT-ARGV started in it and exits with its exit status.\n";

/* Does the stand-in pass this environment entry on to the node's container? */
static int forwarded(const char *entry, const char *keys)
{
    size_t klen = strcspn(entry, "=");
    if (!strncmp(entry, "TFOS_YARN_", 10))
        return 0;
    if (!strncmp(entry, "TFOS_", 5))
        return 1;
    /* the job's MLflow run (tfos yarn --mlflow), for the programs' own
     * mlflow.log_*: the URI carries no credentials (tfos yarn refuses
     * user:password@), and MLFLOW_TRACKING_TOKEN and the like stay here */
    if (!strncmp(entry, "MLFLOW_TRACKING_URI=", 20) || !strncmp(entry, "MLFLOW_RUN_ID=", 14))
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
    for (int i = 0; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tfos__yarn_container_help, stdout);
            return 0;
        }
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
            /* a non-zero status was told to the user by the ApplicationMaster
             * already, with YARN's diagnostics, where the launcher's lines go */
            int status = atoi(line + 7);
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
