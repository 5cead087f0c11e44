/* main.c: the tfos command.
 *
 *   tfos run [options] -- CMD ARGS...     a whole cluster on this machine
 *   tfos node [options] -- CMD ARGS...    one node agent (used by launchers)
 *   tfos coordinator [options]            a coordinator alone, for agents
 *                                         started by hand or by other tools
 *   tfos version
 */
#include "cli/inspect.h"
#include "core/auth.h"
#include "core/spec.h"
#include "platform/clock.h"
#include "roles/guard.h"
#include "run/input.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static const char usage_text[] =
    "usage: tfos run [options] -- CMD [ARGS...]\n"
    "       tfos node --coord HOST:PORT --executor-id N [options] -- CMD [ARGS...]\n"
    "       tfos coordinator --workers N [options]\n"
    "       tfos status [URL | LOG_DIR] [--json]\n"
    "       tfos logs [-f] [NODE] [--log-dir D]\n"
    "       tfos version              (also --version, -V)\n"
    "\n"
    "tfos run forms a cluster of local nodes and runs CMD on each with TF_CONFIG,\n"
    "torchrun's and JAX's variables, and TFOS_* context variables set.\n"
    "\n"
    "cluster options (run, coordinator):\n"
    "  --workers N              worker nodes (besides the chief)\n"
    "  --ps M                   parameter-server nodes (default 0)\n"
    "  --chief                  add one chief node\n"
    "  --evaluator              add one evaluator node\n"
    "  --reservation-timeout S  seconds for every node to register (run: " STR(TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL)
    ", coordinator: " STR(TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK) ")\n"
    "  --grace S                seconds between SIGTERM and SIGKILL when stopping (default "
    STR(TFOS_DEFAULT_STOP_GRACE) ")\n"
    "  --failure-grace S        the same for the survivors of a failed node (default "
    STR(TFOS_DEFAULT_FAILURE_GRACE) ")\n"
    "  --heartbeat-timeout S    a node silent this long has failed (default " STR(TFOS_DEFAULT_HEARTBEAT_TIMEOUT) ")\n"
    "run options:\n"
    "  --max-restarts N         re-form the cluster up to N times after a node fails (default "
    STR(TFOS_DEFAULT_MAX_RESTARTS) ";\n"
    "                           the same exception at the same place twice without a new checkpoint\n"
    "                           stops at once: the failure is deterministic)\n"
    "  --checkpoint-dir D       checkpoints kept across restarts (default <log-dir>/checkpoints)\n"
    "  --status-port P          serve /status, /metrics and a live page on 127.0.0.1:P (0: any port, -1: off)\n"
    "  --status-host H          listen on H instead of 127.0.0.1; beyond loopback the page needs the\n"
    "                           token printed in its URL (?token=..., or Authorization: Bearer ...)\n"
    "  --log-dir D              per-node logs (default tfos-logs/run-<time>-<pid>)\n"
    "  --ps-runs-program        run CMD on ps nodes too (default: a built-in TF server)\n"
    "  --python PY              interpreter for the built-in ps server\n"
    "  --keras MODE             (node too) which Keras tf.keras is: env (default: as the environment\n"
    "                           says, TensorFlow's Keras 3), legacy (tf-keras, Keras 2:\n"
    "                           TF_USE_LEGACY_KERAS=1; model.fit under MultiWorkerMirroredStrategy),\n"
    "                           auto (legacy where tf_keras is installed), 3 (Keras 3)\n"
    "  --feed-mb N              size of each node's input feed ring in MiB (power of two, default "
    STR(TFOS_DEFAULT_FEED_MB) ")\n"
    "  --input FILE             feed FILE (.csv, .jsonl, .npy) to the chief and workers; repeatable\n"
    "  --input-format F         csv, jsonl, npy (default: by extension)\n"
    "  --epochs K               feed every file K times (default 1)\n"
    "  --batch-rows N           rows per feed record (default " STR(TFOS_DEFAULT_BATCH_ROWS) ")\n"
    "  --partition-rows N       rows per partition; partitions go to the nodes in turn (default "
    STR(TFOS_DEFAULT_PARTITION_ROWS) ")\n"
    "  --csv-header, --no-csv-header   whether CSV files start with a header (default: detect)\n"
    "  --csv-delimiter C        CSV field separator: one ASCII character, or 'tab' (default ',')\n"
    "  --quiet                  no feed progress lines on stderr\n"
    "coordinator options:\n"
    "  --listen HOST:PORT       address to listen on (default 127.0.0.1:0)\n"
    "node options:\n"
    "  --coord HOST:PORT        the coordinator; the secret comes from $TFOS_SECRET\n"
    "  --executor-id N          this node's id (decides its role)\n"
    "  --host H                 address other nodes reach this one at (default 127.0.0.1)\n"
    "  --log-dir D              write the program's output to D/<job>-<index>.log\n"
    "  --ps-python PY           on a ps node, run the built-in TF server with PY\n"
    "  --cluster-id ID          enable the node's feed socket under this cluster id\n"
    "  --checkpoint-dir D       handed to the program as TFOS_CHECKPOINT_DIR\n"
    "  --feed-mb N              input feed ring size in MiB (default " STR(TFOS_DEFAULT_FEED_MB) ")\n"
    "  --watch-pid PID          the node's owner (e.g. the Spark executor): when PID is gone,\n"
    "                           stop the program, report it to the coordinator and exit\n"
    "  --tensorboard-port P     announce TensorBoard on port P (coordinator status: tensorboard_port)\n"
    "  --hand-port              give the reserved port's socket to the program (TFOS_PORT_FD) instead\n"
    "                           of releasing it at exec (TensorFlowOnSpark's release_port=False)\n"
    "  --hang-timeout S         (run too) a program that neither reads its feed nor calls\n"
    "                           ctx.heartbeat() for S seconds is hung: its stacks are dumped, it is\n"
    "                           ended and the restart policy applies (default: off)\n"
    "  --quiet                  do not echo the program's output\n";

static volatile int got_signal;

static void on_signal(int sig)
{
    if (!got_signal)
        got_signal = sig;
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tfos: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(tfos --help for usage)\n");
    return 2;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tfos: %s needs an integer between %d and %d, got '%s'\n", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Seconds: positive, or with zero_ok also 0. */
static int parse_secs_from(const char *opt, const char *s, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || v < 0 || (v == 0 && !zero_ok) || v > 1e7) {
        fprintf(stderr, "tfos: %s needs a %s number of seconds, got '%s'\n", opt,
                zero_ok ? "non-negative" : "positive", s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_secs(const char *opt, const char *s, double *out)
{
    return parse_secs_from(opt, s, 0, out);
}

typedef struct cli {
    tfos_layout layout;
    int have_workers;
    double reservation_timeout, grace, failure_grace, heartbeat_timeout;
    const char *log_dir, *python, *listen, *coord, *host, *ps_python, *cluster_id, *keras;
    int feed_mb;
    char *inputs[256];
    int ninputs, input_format, csv_header, epochs, batch_rows, max_restarts, status_port;
    int csv_delimiter;
    const char *checkpoint_dir, *status_host;
    long long partition_rows;
    int ps_runs_program, executor_id, quiet, watch_pid, tensorboard_port;
    double hang_timeout;
    int hand_port;
    char **argv; /* after -- */
} cli;

/* Parse options of every subcommand; each subcommand checks which it needs. */
static int parse(int argc, char **argv, cli *c)
{
    memset(c, 0, sizeof *c);
    c->executor_id = -1;
    c->csv_header = -1;
    c->max_restarts = TFOS_DEFAULT_MAX_RESTARTS;
    c->failure_grace = TFOS_DEFAULT_FAILURE_GRACE;
    c->status_port = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--")) {
            c->argv = argv + i + 1;
            return 0;
        }
        char *val = NULL;
        char *eq = NULL;
        if (!strncmp(a, "--", 2) && (eq = strchr(a, '=')))
            *eq = '\0', val = eq + 1;
#define NEXT() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
        if (!strcmp(a, "--workers")) {
            if (parse_int(a, NEXT(), 0, 1000, &c->layout.num_workers))
                return 2;
            c->have_workers = 1;
        } else if (!strcmp(a, "--ps")) {
            if (parse_int(a, NEXT(), 0, 1000, &c->layout.num_ps))
                return 2;
        } else if (!strcmp(a, "--chief")) {
            c->layout.chief = true;
        } else if (!strcmp(a, "--evaluator")) {
            c->layout.evaluator = true;
        } else if (!strcmp(a, "--reservation-timeout")) {
            if (parse_secs(a, NEXT(), &c->reservation_timeout))
                return 2;
        } else if (!strcmp(a, "--grace")) {
            if (parse_secs(a, NEXT(), &c->grace))
                return 2;
        } else if (!strcmp(a, "--failure-grace")) {
            if (parse_secs_from(a, NEXT(), 1, &c->failure_grace))
                return 2;
        } else if (!strcmp(a, "--heartbeat-timeout")) {
            if (parse_secs(a, NEXT(), &c->heartbeat_timeout))
                return 2;
        } else if (!strcmp(a, "--log-dir")) {
            if (!(c->log_dir = NEXT()))
                return usage_error("%s needs a directory", a);
        } else if (!strcmp(a, "--python")) {
            if (!(c->python = NEXT()))
                return usage_error("%s needs an interpreter", a);
        } else if (!strcmp(a, "--ps-runs-program")) {
            c->ps_runs_program = 1;
        } else if (!strcmp(a, "--listen")) {
            if (!(c->listen = NEXT()))
                return usage_error("%s needs HOST:PORT", a);
        } else if (!strcmp(a, "--coord")) {
            if (!(c->coord = NEXT()))
                return usage_error("%s needs HOST:PORT", a);
        } else if (!strcmp(a, "--host")) {
            if (!(c->host = NEXT()))
                return usage_error("%s needs an address", a);
        } else if (!strcmp(a, "--ps-python")) {
            if (!(c->ps_python = NEXT()))
                return usage_error("%s needs an interpreter", a);
        } else if (!strcmp(a, "--executor-id")) {
            if (parse_int(a, NEXT(), 0, 1 << 20, &c->executor_id))
                return 2;
        } else if (!strcmp(a, "--cluster-id")) {
            if (!(c->cluster_id = NEXT()))
                return usage_error("%s needs an id", a);
        } else if (!strcmp(a, "--feed-mb")) {
            if (parse_int(a, NEXT(), 1, 1024, &c->feed_mb))
                return 2;
            if (c->feed_mb & (c->feed_mb - 1))
                return usage_error("%s must be a power of two", "--feed-mb");
        } else if (!strcmp(a, "--input")) {
            char *v = NEXT();
            if (!v)
                return usage_error("%s needs a file", a);
            if (c->ninputs >= 256)
                return usage_error("%s: at most 256 files", a);
            c->inputs[c->ninputs++] = v;
        } else if (!strcmp(a, "--input-format")) {
            const char *v = NEXT();
            if (!v || (c->input_format = tfos__input_format(v)) < 0)
                return usage_error("--input-format takes csv, jsonl, npy or auto, got '%s'", v ? v : "");
        } else if (!strcmp(a, "--epochs")) {
            if (parse_int(a, NEXT(), 1, 1000000, &c->epochs))
                return 2;
        } else if (!strcmp(a, "--batch-rows")) {
            if (parse_int(a, NEXT(), 1, 1 << 24, &c->batch_rows))
                return 2;
        } else if (!strcmp(a, "--partition-rows")) {
            int pr;
            if (parse_int(a, NEXT(), 1, 1 << 30, &pr))
                return 2;
            c->partition_rows = pr;
        } else if (!strcmp(a, "--status-host")) {
            if (!(c->status_host = NEXT()))
                return usage_error("%s needs an address", a);
        } else if (!strcmp(a, "--status-port")) {
            if (parse_int(a, NEXT(), -1, 65535, &c->status_port))
                return 2;
        } else if (!strcmp(a, "--max-restarts")) {
            if (parse_int(a, NEXT(), 0, 1000, &c->max_restarts))
                return 2;
        } else if (!strcmp(a, "--checkpoint-dir")) {
            if (!(c->checkpoint_dir = NEXT()))
                return usage_error("%s needs a directory", a);
        } else if (!strcmp(a, "--csv-header")) {
            c->csv_header = 1;
        } else if (!strcmp(a, "--no-csv-header")) {
            c->csv_header = 0;
        } else if (!strcmp(a, "--csv-delimiter")) {
            const char *v = NEXT();
            if (v && (!strcmp(v, "tab") || !strcmp(v, "\\t")))
                v = "\t";
            if (!v || strlen(v) != 1 || (unsigned char)v[0] > 127 || strchr("\"\r\n", v[0]))
                return usage_error("--csv-delimiter takes one ASCII character other than a quote or a line end, "
                                   "or 'tab'; got '%s'", v ? v : "");
            c->csv_delimiter = v[0];
        } else if (!strcmp(a, "--watch-pid")) {
            if (parse_int(a, NEXT(), 1, INT_MAX, &c->watch_pid))
                return 2;
        } else if (!strcmp(a, "--keras")) {
            if (!(c->keras = NEXT()) || tfos__keras_mode_valid(c->keras))
                return usage_error("--keras takes env, auto, legacy or 3; got '%s'", c->keras ? c->keras : "");
        } else if (!strcmp(a, "--hand-port")) {
            c->hand_port = 1;
        } else if (!strcmp(a, "--hang-timeout")) {
            if (parse_secs(a, NEXT(), &c->hang_timeout))
                return 2;
        } else if (!strcmp(a, "--tensorboard-port")) {
            if (parse_int(a, NEXT(), 1, 65535, &c->tensorboard_port))
                return 2;
        } else if (!strcmp(a, "--quiet")) {
            c->quiet = 1;
        } else {
            return usage_error("unknown option '%s'", a);
        }
#undef NEXT
    }
    return 0;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static int self_path(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int cmd_run(cli *c)
{
    if (!c->argv || !c->argv[0])
        return usage_error("%s", "run needs a program after --");
    if (!c->have_workers && !c->layout.chief)
        return usage_error("%s", "run needs --workers N (or --chief)");
    char exe[PATH_MAX];
    if (self_path(exe, sizeof exe)) {
        fprintf(stderr, "tfos: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    tfos_run_opts o = {.layout = c->layout, .argv = c->argv, .agent_path = exe, .log_dir = c->log_dir,
                       .reservation_timeout = c->reservation_timeout, .stop_grace = c->grace,
                       .failure_grace = c->failure_grace,
                       .heartbeat_timeout = c->heartbeat_timeout, .ps_runs_program = c->ps_runs_program,
                       .python = c->python, .feed_mb = c->feed_mb, .inputs = c->inputs, .ninputs = c->ninputs,
                       .input_format = c->input_format, .csv_header = c->csv_header,
                       .csv_delimiter = c->csv_delimiter, .epochs = c->epochs,
                       .batch_rows = c->batch_rows, .partition_rows = c->partition_rows,
                       .max_restarts = c->max_restarts, .checkpoint_dir = c->checkpoint_dir,
                       .status_port = c->status_port, .status_host = c->status_host, .quiet = c->quiet,
                       .hang_timeout = c->hang_timeout, .keras = c->keras};
    for (int i = 0; i < c->ninputs; i++)
        if (access(c->inputs[i], R_OK)) {
            fprintf(stderr, "tfos: --input %s: %s\n", c->inputs[i], strerror(errno));
            return 2;
        }
    install_signals();
    int code = 1;
    int rc = tfos_run_local(&o, &got_signal, &code);
    if (rc) {
        fprintf(stderr, "tfos: could not start the cluster: %s\n", tfos_strerror(rc));
        return 1;
    }
    return code;
}

static int cmd_node(cli *c)
{
    if (!c->argv || !c->argv[0])
        return usage_error("%s", "node needs a program after --");
    if (!c->coord || c->executor_id < 0)
        return usage_error("%s", "node needs --coord HOST:PORT and --executor-id N");
    const char *secret = getenv("TFOS_SECRET");
    if (!secret || !*secret) {
        fprintf(stderr, "tfos: node: $TFOS_SECRET is not set (the cluster's secret, from its launcher)\n");
        return 2;
    }
    char *ps_argv[2] = {(char *)c->ps_python, NULL};
    tfos_agent_opts o = {.coord_addr = c->coord, .secret = secret, .executor_id = c->executor_id,
                         .host = c->host, .log_dir = c->log_dir, .argv = c->argv,
                         .ps_argv = c->ps_python ? ps_argv : NULL, .quiet = c->quiet,
                         .cluster_id = c->cluster_id, .feed_capacity = (size_t)c->feed_mb << 20,
                         .checkpoint_dir = c->checkpoint_dir, .watch_pid = c->watch_pid,
                         .tensorboard_port = c->tensorboard_port, .hang_timeout = c->hang_timeout,
                         .hand_port = c->hand_port, .keras = c->keras};
    signal(SIGPIPE, SIG_IGN);
    int code = 1;
    int rc = tfos_agent_run(&o, &code);
    return rc ? 1 : code;
}

static int cmd_coordinator(cli *c)
{
    if (!c->have_workers && !c->layout.chief)
        return usage_error("%s", "coordinator needs --workers N (or --chief)");
    char host[256] = "127.0.0.1";
    int port = 0;
    if (c->listen) {
        const char *colon = strrchr(c->listen, ':');
        if (!colon || (size_t)(colon - c->listen) >= sizeof host ||
            parse_int("--listen port", colon + 1, 0, 65535, &port))
            return usage_error("--listen needs HOST:PORT, got '%s'", c->listen);
        memcpy(host, c->listen, (size_t)(colon - c->listen));
        host[colon - c->listen] = '\0';
    }
    char fresh[TFOS_HEX_SECRET_LEN + 1];
    const char *secret = getenv("TFOS_SECRET");
    if (!secret || !*secret) {
        if (tfos__random_hex(fresh, 32))
            return 1;
        secret = fresh;
        printf("TFOS_SECRET=%s\n", secret);
    }
    tfos_coord_opts o = {.layout = c->layout, .bind_host = host, .port = port, .secret = secret,
                         .reservation_timeout = c->reservation_timeout, .stop_grace = c->grace,
                         .heartbeat_timeout = c->heartbeat_timeout};
    tfos_coord *co;
    int rc = tfos_coord_open(&co, &o);
    if (rc) {
        fprintf(stderr, "tfos: cannot start the coordinator on %s:%d: %s\n", host, port,
                rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
        return 1;
    }
    printf("TFOS_COORD_ADDR=%s\n", tfos_coord_address(co));
    fflush(stdout);
    install_signals();
    int stopped = 0;
    while (tfos_coord_step(co, 100) < TFOS_COORD_DONE) {
        if (got_signal && !stopped) {
            char reason[96];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", got_signal, strsignal(got_signal));
            tfos_coord_stop(co, reason);
            stopped = 1;
        }
    }
    int code = 0;
    if (tfos_coord_state(co) == TFOS_COORD_FAILED) {
        fprintf(stderr, "tfos: the cluster failed:\n%s\n", tfos_coord_failure(co));
        code = stopped ? 128 + got_signal : tfos_coord_failure_code(co) == TFOS_ETIMEDOUT ? 124 : 1;
    }
    tfos_coord_close(co);
    return code;
}

/* `tfos guard --agent-pid P --pgid G [--cgroup DIR]`: internal, started
 * by an agent beside its program (roles/guard.h). */
static int cmd_guard(int argc, char **argv)
{
    int agent = 0, pgid = 0;
    const char *cgroup = "";
    for (int i = 0; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--agent-pid") && parse_int(argv[i], argv[i + 1], 1, INT_MAX, &agent))
            return 2;
        if (!strcmp(argv[i], "--pgid") && parse_int(argv[i], argv[i + 1], 0, INT_MAX, &pgid))
            return 2;
        if (!strcmp(argv[i], "--cgroup"))
            cgroup = argv[i + 1];
    }
    if (!agent)
        return usage_error("%s", "guard needs --agent-pid");
    return tfos__guard_run((pid_t)agent, (pid_t)pgid, cgroup, TFOS_DEFAULT_HEARTBEAT_TIMEOUT);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("tfos %s (protocol %d)\n", TFOS_VERSION, TFOS_PROTOCOL_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "status") || !strcmp(argv[1], "logs")) {
        const char *target = NULL, *dir = NULL;
        int json = 0, follow = 0;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--json"))
                json = 1;
            else if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--follow"))
                follow = 1;
            else if (!strcmp(argv[i], "--log-dir") && i + 1 < argc)
                dir = argv[++i];
            else if (argv[i][0] == '-')
                return usage_error("unknown option '%s'", argv[i]);
            else
                target = argv[i];
        }
        return !strcmp(argv[1], "status") ? tfos__cmd_status(target ? target : dir, json)
                                          : tfos__cmd_logs(target, dir, follow);
    }
    if (!strcmp(argv[1], "guard"))
        return cmd_guard(argc - 2, argv + 2);
    cli c;
    int rc = parse(argc - 2, argv + 2, &c);
    if (rc)
        return rc;
    if (!strcmp(argv[1], "run"))
        return cmd_run(&c);
    if (!strcmp(argv[1], "node"))
        return cmd_node(&c);
    if (!strcmp(argv[1], "coordinator"))
        return cmd_coordinator(&c);
    return usage_error("unknown command '%s'", argv[1]);
}
