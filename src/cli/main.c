/* main.c: the tfos command.
 *
 *   tfos run [options] [--] CMD ARGS...   a whole cluster on this machine
 *   tfos status, tfos logs                a run's state and its node logs
 *   tfos node [options] [--] CMD ARGS...  one node agent (used by launchers)
 *   tfos coordinator [options]            a coordinator alone, for agents
 *                                         started by hand or by other tools
 *   tfos yarn [options] [--] CMD ARGS...  the cluster in YARN containers (yarn.c)
 *   tfos serve --model NAME=DIR ...       models over HTTP (serve.c)
 *   tfos version
 *   tfos guard ...                        internal, beside each program
 *   tfos yarn-am, tfos yarn-container     internal, in the YARN ApplicationMaster's
 *                                         container (docs/YARN.md)
 * Every command has its own --help; tfos --help lists the user commands
 * (node, coordinator and guard are internal). Usage errors exit 2. */
#include "cli/cli.h"
#include "cli/inspect.h"
#include "core/auth.h"
#include "core/loop.h"
#include "core/spec.h"
#include "feed/input.h"
#include "platform/clock.h"
#include "platform/fs.h"
#include "roles/coord.h"
#include "roles/guard.h"
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

static const char top_help[] =
    "usage: tfos [-h] [-V] COMMAND [ARGS...]\n"
    "\n"
    "tfos forms clusters of nodes and runs a training program on each with TF_CONFIG,\n"
    "torchrun's and JAX's variables, and TFOS_* context variables set.\n"
    "\n"
    "commands:\n"
    "  run       tfos run [options] [--] PROGRAM [ARGS...]: a whole cluster on this machine\n"
    "  status    tfos status [URL | LOG_DIR] [--json]: a running or finished run's state\n"
    "  logs      tfos logs [-f] [NODE] [--log-dir D]: a run's node logs\n"
    "  yarn      tfos yarn [options] [--] PROGRAM [ARGS...]: the cluster in YARN containers\n"
    "  serve     tfos serve --model NAME=DIR [options]: models over HTTP (Open Inference Protocol)\n"
    "  version   tfos version (also -V, --version): the installed tfos\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  -V, --version  show the version and exit\n"
    "\n"
    "tfos COMMAND --help shows a command's options.\n";

#define CLUSTER_OPTIONS                                                                                                \
    "cluster options:\n"                                                                                               \
    "  --workers N              worker nodes (besides the chief)\n"                                                    \
    "  --ps M                   parameter-server nodes (default 0)\n"                                                  \
    "  --chief                  add one chief node\n"                                                                  \
    "  --evaluator              add one evaluator node\n"                                                              \
    "  --reservation-timeout S  seconds for every node to register (run: " STR(                                        \
        TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL) ", coordinator: " STR(TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK) ")\n"    \
    "  --grace S                seconds between SIGTERM and SIGKILL when stopping (default " STR(                      \
        TFOS_DEFAULT_STOP_GRACE) ")\n"                                                                                 \
    "  --failure-grace S        the same for the survivors of a failed node (default " STR(                            \
        TFOS_DEFAULT_FAILURE_GRACE) ")\n"                                                                              \
    "  --heartbeat-timeout S    a node silent this long has failed (default " STR(TFOS_DEFAULT_HEARTBEAT_TIMEOUT) ")\n"

static const char run_help[] =
    "usage: tfos run [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Forms a cluster of local nodes and runs PROGRAM on each with TF_CONFIG, torchrun's and\n"
    "JAX's variables, and TFOS_* context variables set. As with torchrun, the first argument\n"
    "that is not an option (or everything after --) is the program: what follows it, dashes\n"
    "included, is its own (tfos run --workers 2 python train.py --epochs 3).\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    CLUSTER_OPTIONS
    "run options:\n"
    "  --max-restarts N         re-form the cluster up to N times after a node fails (default "
    STR(TFOS_DEFAULT_MAX_RESTARTS) ";\n"
    "                           the same exception at the same place twice without a new checkpoint\n"
    "                           stops at once: the failure is deterministic)\n"
    "  --checkpoint-dir D       checkpoints kept across restarts (default <log-dir>/checkpoints)\n"
    "  --tensorboard            run TensorBoard beside the chief's program (else worker 0's), on a\n"
    "                           free port; its URL is the node's first line and on the status page\n"
    "  --tensorboard-logdir D   its log dir, TFOS_TENSORBOARD_LOGDIR (default <log-dir>/tensorboard)\n"
    "  --status-port P          serve /status, /metrics and a live page on 127.0.0.1:P (0: any port, -1: off)\n"
    "  --status-host H          listen on H instead of 127.0.0.1; beyond loopback the page needs the\n"
    "                           token printed in its URL (?token=..., or Authorization: Bearer ...)\n"
    "  --log-dir D              per-node logs (default tfos-logs/run-<time>-<pid>)\n"
    "  --ps-runs-program        run PROGRAM on ps nodes too (default: a built-in TF server)\n"
    "  --python PY              interpreter for the built-in ps server\n"
    "  --keras MODE             which Keras tf.keras is: env (default: as the environment\n"
    "                           says, TensorFlow's Keras 3), legacy (tf-keras, Keras 2:\n"
    "                           TF_USE_LEGACY_KERAS=1; model.fit under MultiWorkerMirroredStrategy),\n"
    "                           auto (legacy where tf_keras is installed), 3 (Keras 3)\n"
    "  --hang-timeout S         a program that neither reads its feed nor calls ctx.heartbeat()\n"
    "                           for S seconds is hung: its stacks are dumped, it is ended and the\n"
    "                           restart policy applies (default: off)\n"
    "  --feed-mb N              size of each node's input feed ring in MiB (power of two; default "
    STR(TFOS_DEFAULT_FEED_MB) ",\n"
    "                           or, for .npy inputs, 8 records' worth from 4 MiB up: see docs/FEED.md)\n"
    "  --input FILE             feed FILE (.csv, .jsonl, .npy) to the chief and workers; repeatable\n"
    "  --input-format F         csv, jsonl, npy (default: by extension)\n"
    "  --epochs K               feed every file K times (default 1)\n"
    "  --batch-rows N           rows per feed record (default " STR(TFOS_DEFAULT_BATCH_ROWS) ", and for .npy no more\n"
    "                           than fit in 2 MiB)\n"
    "  --partition-rows N       rows per partition; partitions go to the nodes in turn (default "
    STR(TFOS_DEFAULT_PARTITION_ROWS) ")\n"
    "  --csv-header, --no-csv-header   whether CSV files start with a header (default: detect)\n"
    "  --csv-delimiter C        CSV field separator: one ASCII character, or 'tab' (default ',')\n"
    "  --quiet                  no feed progress lines on stderr\n"
    "\n"
    "Options take their value as the next argument or after '=' (--workers=2).\n";

static const char status_help[] =
    "usage: tfos status [URL | LOG_DIR] [--json] [--log-dir D]\n"
    "\n"
    "Shows a run's state: from its status URL, or from its log directory (default: the newest\n"
    "run under tfos-logs).\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  --json         print the status JSON as served\n"
    "  --log-dir D    the run's log directory (as LOG_DIR)\n";

static const char logs_help[] =
    "usage: tfos logs [-f] [NODE] [--log-dir D]\n"
    "\n"
    "Prints a run's node logs (NODE: e.g. worker-0; default: all of them).\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  -f, --follow   keep printing as the logs grow\n"
    "  --log-dir D    the run's log directory (default: the newest run under tfos-logs)\n";

static const char coordinator_help[] =
    "usage: tfos coordinator --workers N [options]\n"
    "\n"
    "Internal: a coordinator alone, for agents started by hand or by other tools. Prints\n"
    "TFOS_SECRET (unless set in the environment) and TFOS_COORD_ADDR.\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    CLUSTER_OPTIONS
    "  --listen HOST:PORT       address to listen on (default 127.0.0.1:0)\n"
    "  --address-file F         also write HOST:PORT to F (atomically, once listening)\n"
    "  --attempt N              the attempt the nodes are told (TFOS_ATTEMPT; default 1)\n"
    "  --lease S                stop the cluster when no status query came for S seconds (the\n"
    "                           client that queries is gone; default: no lease)\n"
    "  --linger S               once the cluster is over, keep answering status queries for up to\n"
    "                           S seconds, or until a client releases it (default 0)\n";

static const char node_help[] =
    "usage: tfos node --coord HOST:PORT --executor-id N [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Internal: one node agent (used by launchers). The secret comes from $TFOS_SECRET.\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    "  --coord HOST:PORT        the coordinator\n"
    "  --executor-id N          this node's id (decides its role)\n"
    "  --host H                 address other nodes reach this one at (default 127.0.0.1; auto: the\n"
    "                           address this host reaches the coordinator from)\n"
    "  --log-dir D              write the program's output to D/<job>-<index>.log\n"
    "  --ps-python PY           on a ps node, run the built-in TF server with PY\n"
    "  --cluster-id ID          enable the node's feed socket under this cluster id (also\n"
    "                           TORCHELASTIC_RUN_ID)\n"
    "  --checkpoint-dir D       handed to the program as TFOS_CHECKPOINT_DIR\n"
    "  --max-restarts N         the run's restart budget, handed to the program as\n"
    "                           TORCHELASTIC_MAX_RESTARTS (default 0)\n"
    "  --feed-mb N              input feed ring size in MiB (default " STR(TFOS_DEFAULT_FEED_MB) ")\n"
    "  --keras MODE             env, auto, legacy or 3 (see tfos run --help)\n"
    "  --watch-pid PID          the node's owner (e.g. the Spark executor): when PID is gone,\n"
    "                           stop the program, report it to the coordinator and exit\n"
    "  --tensorboard-port P     announce TensorBoard on port P (coordinator status: tensorboard_port)\n"
    "  --tensorboard            start TensorBoard beside the program, in its process group, on\n"
    "                           --tensorboard-port or a free port (TFOS_TENSORBOARD_PORT)\n"
    "  --tensorboard-logdir D   its log dir, TFOS_TENSORBOARD_LOGDIR (default <log-dir>/tensorboard)\n"
    "  --hand-port              give the reserved port's socket to the program (TFOS_PORT_FD) instead\n"
    "                           of releasing it at exec (TensorFlowOnSpark's release_port=False)\n"
    "  --hang-timeout S         a program that neither reads its feed nor calls ctx.heartbeat()\n"
    "                           for S seconds is hung (default: off)\n"
    "  --quiet                  do not echo the program's output\n"
    "  --forward-logs           also send the program's output to the coordinator (the launcher\n"
    "                           shows it where the console is not the user's: tfos yarn)\n"
    "  --respawn N              start the program again here, alone, up to N times when it fails after\n"
    "                           running 5 s or more (tfos serve's model servers; default 0)\n";

static const char yarn_help[] =
    "usage: tfos yarn [options] [--] PROGRAM [ARGS...]\n"
    "       tfos yarn status|kill APPLICATION_ID\n"
    "       tfos yarn logs APPLICATION_ID [--follow]   (the nodes' output: live while it runs, else\n"
    "                                                   YARN's aggregated logs)\n"
    "       tfos yarn pack [-o FILE] [ENV_DIR]   (a venv as a .tar.gz for --archive FILE#env)\n"
    "       tfos yarn serve [options] --model NAME=DIR ...   (tfos serve on YARN: tfos yarn serve --help)\n"
    "\n"
    "Runs the cluster in YARN containers: an ApplicationMaster (the tfos launcher, as in tfos run)\n"
    "and one container per node, each running the node's agent and PROGRAM. PROGRAM's paths are\n"
    "relative to the container's working directory, where --archive and --file are unpacked.\n"
    "Follows the application to its end and exits as tfos run does; Ctrl-C kills it.\n"
    "Needs java, and Hadoop's client jars and configuration: --hadoop-classpath, else\n"
    "$TFOS_HADOOP_CLASSPATH, else `hadoop classpath`; $HADOOP_CONF_DIR (docs/YARN.md).\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    CLUSTER_OPTIONS
    "  --max-restarts N, --checkpoint-dir D, --keras MODE, --hang-timeout S, --feed-mb N,\n"
    "  --ps-runs-program, --python PY, --quiet: as for tfos run\n"
    "yarn options:\n"
    "  --queue Q                the YARN queue (default: default)\n"
    "  --name N                 the application's name (default tfos)\n"
    "  --worker-memory M        memory of each worker container (MB, or 512m, 2g; default 1g)\n"
    "  --worker-vcores N        vcores of each worker container (default 1)\n"
    "  --worker-gpus N          GPUs (yarn.io/gpu) of each worker container (default 0)\n"
    "  --ps-memory, --ps-vcores, --ps-gpus, --chief-memory, --chief-vcores, --chief-gpus,\n"
    "  --evaluator-memory, --evaluator-vcores, --evaluator-gpus: the same for the other roles\n"
    "                           (chief and evaluator default to the worker's)\n"
    "  --am-memory M            the ApplicationMaster's container (default 512m)\n"
    "  --archive A[#NAME]       an archive (tar.gz, zip: a venv-pack/conda-pack environment) unpacked\n"
    "                           as NAME in every container; repeatable\n"
    "  --file F[#NAME]          a file shipped to every container; repeatable\n"
    "  --env NAME=VALUE         set in every node's environment; repeatable\n"
    "  --accept-timeout S       kill the application if YARN has not started it within S\n"
    "                           seconds (default: the reservation timeout)\n"
    "  --hadoop-classpath CP    Hadoop's client jars\n";

static const char yarn_serve_help[] =
    "\n"
    "tfos yarn serve: the same, on YARN. Each model server runs in a YARN container of its own (sized\n"
    "with --worker-memory/--worker-vcores/--worker-gpus); the front end runs in the ApplicationMaster's\n"
    "container, on its host and a free port (--port P to fix it): the application's tracking URL,\n"
    "printed at start. DIR is an hdfs:// URL (each version is copied into the containers), or a path\n"
    "in the containers (shipped with --archive/--file). Takes tfos yarn's --queue, --name, --am-memory,\n"
    "--archive, --file, --env, --accept-timeout and --hadoop-classpath (tfos yarn --help); runs until\n"
    "Ctrl-C or SIGTERM, which kill the application.\n";

static const char yarn_am_help[] =
    "usage: tfos yarn-am --am-socket S --bind HOST --resources R --address-file F [run options] -- PROGRAM...\n"
    "\n"
    "Internal: tfos run inside the YARN ApplicationMaster's container; every agent starts in a\n"
    "container of its own through tfos yarn-container.\n";

static const char yarn_container_help[] =
    "usage: tfos yarn-container --am-socket S --resources R --role JOB -- AGENT-ARGV...\n"
    "\n"
    "Internal: one node's stand-in in the ApplicationMaster's container: asks the ApplicationMaster\n"
    "for a container, has AGENT-ARGV started in it and exits with its exit status.\n";

static const char guard_help[] =
    "usage: tfos guard --agent-pid P --pgid G [--cgroup DIR]\n"
    "\n"
    "Internal: started by a node agent beside its program; ends the program's process group\n"
    "(and cgroup) when the agent is gone.\n";

/* The command being parsed, for the hint after a usage error. */
static const char *g_cmd;

static volatile int got_signal;

static void on_signal(int sig)
{
    if (!got_signal)
        got_signal = sig;
}

static void usage_hint(void)
{
    if (g_cmd)
        fprintf(stderr, "(tfos %s --help for usage)\n", g_cmd);
    else
        fprintf(stderr, "(tfos --help for usage)\n");
}

/* One line naming what is wrong, then where the usage is; exit status 2. */
static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tfos: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage_hint();
    return 2;
}

int tfos__usage_error(const char *fmt, const char *arg)
{
    return usage_error(fmt, arg);
}

/* A YARN memory size: MB, or with a unit (512m, 2g). */
static int parse_memory(const char *opt, const char *s, int *mb)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (s && !errno && end != s && v > 0) {
        double scale = !*end || !strcmp(end, "m") || !strcmp(end, "M") ? 1
                       : !strcmp(end, "g") || !strcmp(end, "G")    ? 1024
                                                                    : 0;
        if (scale > 0 && v * scale >= 1 && v * scale <= (1 << 24)) {
            *mb = (int)(v * scale);
            return 0;
        }
    }
    fprintf(stderr, "tfos: %s takes a size in MB, or with a unit (512m, 2g), got '%s'\n", opt, s ? s : "");
    usage_hint();
    return -1;
}

static int parse_int_quiet(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    if (parse_int_quiet(s, lo, hi, out)) {
        if (s)
            fprintf(stderr, "tfos: %s needs an integer between %d and %d, got '%s'\n", opt, lo, hi, s);
        else
            fprintf(stderr, "tfos: %s needs an integer between %d and %d\n", opt, lo, hi);
        usage_hint();
        return -1;
    }
    return 0;
}

/* Seconds: positive, or with zero_ok also 0. */
static int parse_secs_from(const char *opt, const char *s, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || v < 0 || (v == 0 && !zero_ok) || v > 1e7) {
        if (s)
            fprintf(stderr, "tfos: %s needs a %s number of seconds, got '%s'\n", opt,
                    zero_ok ? "non-negative" : "positive", s);
        else
            fprintf(stderr, "tfos: %s needs a %s number of seconds\n", opt, zero_ok ? "non-negative" : "positive");
        usage_hint();
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_secs(const char *opt, const char *s, double *out)
{
    return parse_secs_from(opt, s, 0, out);
}



#define PARSE_HELP (-1)

/* Parse options of every subcommand; each subcommand checks which it needs.
 * Returns 0, 2 (a usage error, reported) or PARSE_HELP (-h/--help). As
 * torchrun does, the first argument that is not an option starts the
 * program: it and everything after it are the program's. */
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
        if (a[0] != '-' || !a[1]) {
            c->argv = argv + i;
            return 0;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return PARSE_HELP;
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
            c->have_max_restarts = 1;
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
        } else if (!strcmp(a, "--attempt")) {
            if (parse_int(a, NEXT(), 1, INT_MAX, &c->attempt))
                return 2;
        } else if (!strcmp(a, "--lease")) {
            if (parse_secs(a, NEXT(), &c->lease))
                return 2;
        } else if (!strcmp(a, "--linger")) {
            if (parse_secs_from(a, NEXT(), 1, &c->linger))
                return 2;
        } else if (!strcmp(a, "--address-file")) {
            if (!(c->address_file = NEXT()))
                return usage_error("%s needs a file name", a);
        } else if (!strcmp(a, "--hand-port")) {
            c->hand_port = 1;
        } else if (!strcmp(a, "--hang-timeout")) {
            if (parse_secs(a, NEXT(), &c->hang_timeout))
                return 2;
        } else if (!strcmp(a, "--tensorboard")) {
            c->tensorboard = 1;
        } else if (!strcmp(a, "--tensorboard-logdir")) {
            if (!(c->tensorboard_logdir = NEXT()))
                return usage_error("%s needs a directory", a);
        } else if (!strcmp(a, "--tensorboard-port")) {
            if (parse_int(a, NEXT(), 1, 65535, &c->tensorboard_port))
                return 2;
        } else if (!strcmp(a, "--quiet")) {
            c->quiet = 1;
        } else if (!strcmp(a, "--forward-logs")) {
            c->forward_logs = 1;
        } else if (!strcmp(a, "--respawn")) {
            if (parse_int(a, NEXT(), 0, 1000000, &c->respawn))
                return 2;
        } else if (!strcmp(a, "--queue")) {
            if (!(c->queue = NEXT()))
                return usage_error("%s needs a queue name", a);
        } else if (!strcmp(a, "--name")) {
            if (!(c->app_name = NEXT()))
                return usage_error("%s needs an application name", a);
        } else if (!strcmp(a, "--hadoop-classpath")) {
            if (!(c->hadoop_classpath = NEXT()))
                return usage_error("%s needs a classpath", a);
        } else if (!strcmp(a, "--am-memory")) {
            if (parse_memory(a, NEXT(), &c->am_memory_mb))
                return 2;
        } else if (!strncmp(a, "--worker-", 9) || !strncmp(a, "--ps-", 5) || !strncmp(a, "--chief-", 8) ||
                   !strncmp(a, "--evaluator-", 12)) {
            int role = a[2] == 'w' ? YARN_ROLE_WORKER : a[2] == 'p' ? YARN_ROLE_PS : a[2] == 'c' ? YARN_ROLE_CHIEF
                                                                                  : YARN_ROLE_EVALUATOR;
            const char *what = strchr(a + 2, '-') + 1;
            if (!strcmp(what, "memory")) {
                if (parse_memory(a, NEXT(), &c->res_mb[role]))
                    return 2;
            } else if (!strcmp(what, "vcores")) {
                if (parse_int(a, NEXT(), 1, 1024, &c->res_vcores[role]))
                    return 2;
            } else if (!strcmp(what, "gpus")) {
                if (parse_int(a, NEXT(), 0, 64, &c->res_gpus[role]))
                    return 2;
            } else {
                if (eq)
                    *eq = '=';
                return usage_error("unknown option '%s'", a);
            }
        } else if (!strcmp(a, "--archive") || !strcmp(a, "--file") || !strcmp(a, "--env")) {
            const char **list = a[2] == 'a' ? c->archives : a[2] == 'f' ? c->files : c->envs;
            int *n = a[2] == 'a' ? &c->narchives : a[2] == 'f' ? &c->nfiles : &c->nenvs;
            const char *v = NEXT();
            if (!v || !*v)
                return usage_error("%s needs a value", a);
            if (a[2] == 'e' && (!strchr(v, '=') || v[0] == '='))
                return usage_error("--env takes NAME=VALUE, got '%s'", v);
            if (*n >= 64)
                return usage_error("%s: at most 64", a);
            list[(*n)++] = v;
        } else if (!strcmp(a, "--accept-timeout")) {
            if (parse_secs(a, NEXT(), &c->accept_timeout))
                return 2;
        } else if (!strcmp(a, "--am-socket")) {
            if (!(c->am_socket = NEXT()))
                return usage_error("%s needs a path", a);
        } else if (!strcmp(a, "--bind")) {
            if (!(c->bind = NEXT()))
                return usage_error("%s needs an address", a);
        } else if (!strcmp(a, "--resources")) {
            if (!(c->resources = NEXT()))
                return usage_error("%s needs a list", a);
        } else {
            if (eq)
                *eq = '=';
            return usage_error("unknown option '%s'", a);
        }
        if (eq && val) {
            /* a flag without a value given one (--chief=1): NEXT() did not take it */
            int takes = strcmp(a, "--chief") && strcmp(a, "--evaluator") && strcmp(a, "--ps-runs-program") &&
                        strcmp(a, "--csv-header") && strcmp(a, "--no-csv-header") && strcmp(a, "--hand-port") &&
                        strcmp(a, "--quiet") && strcmp(a, "--forward-logs");
            if (!takes)
                return usage_error("%s takes no value", a);
        }
        if (eq)
            *eq = '='; /* argv stays as given (tfos yarn passes it on) */
#undef NEXT
    }
    return 0;
}

void tfos__on_stop_signals(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void install_signals(void)
{
    tfos__on_stop_signals(on_signal);
}

int tfos__self_path(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* The first tfos yarn option given (for commands that take none), or NULL. */
static const char *yarn_option_given(const cli *c)
{
    if (c->queue)
        return "--queue";
    if (c->app_name)
        return "--name";
    if (c->hadoop_classpath)
        return "--hadoop-classpath";
    if (c->am_memory_mb)
        return "--am-memory";
    for (int r = 0; r < YARN_ROLES; r++)
        if (c->res_mb[r] || c->res_vcores[r] || c->res_gpus[r])
            return "--ROLE-memory/--ROLE-vcores/--ROLE-gpus";
    if (c->narchives)
        return "--archive";
    if (c->nfiles)
        return "--file";
    if (c->nenvs)
        return "--env";
    if (c->accept_timeout > 0)
        return "--accept-timeout";
    return NULL;
}

static int cmd_run(cli *c)
{
    int am = !strcmp(g_cmd, "yarn-am");
    const char *yarn_opt = yarn_option_given(c);
    if (yarn_opt)
        return usage_error("%s is an option of tfos yarn", yarn_opt);
    if (!am && (c->am_socket || c->bind || c->resources))
        return usage_error("%s", "--am-socket, --bind and --resources are for tfos yarn-am");
    if (am && (!c->am_socket || !c->bind || !c->resources || !c->address_file))
        return usage_error("%s", "yarn-am needs --am-socket, --bind, --resources and --address-file");
    if (am && c->argv && c->argv[0] && !strcmp(c->argv[0], "serve")) { /* tfos yarn serve's */
        int n = 0;
        while (c->argv[n])
            n++;
        tfos__serve_am sa = {.am_socket = c->am_socket, .address_file = c->address_file, .bind = c->bind,
                             .resources = c->resources};
        return tfos__cmd_serve(n - 1, c->argv + 1, &sa);
    }
    if (!c->argv || !c->argv[0])
        return usage_error("%s", "run needs a program (tfos run [options] [--] PROGRAM [ARGS...])");
    if (!c->have_workers && !c->layout.chief)
        return usage_error("%s", "run needs --workers N (or --chief)");
    if (!c->layout.num_workers && !c->layout.chief)
        return usage_error("%s", "--workers 0 needs --chief: a cluster needs at least one worker or a chief");
    if (tfos_layout_total(&c->layout) > 1024)
        return usage_error("%s", "--workers/--ps: a cluster has at most 1024 nodes");
    char exe[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe)) {
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
                       .hang_timeout = c->hang_timeout, .keras = c->keras, .tensorboard = c->tensorboard,
                       .tensorboard_logdir = c->tensorboard_logdir};
    /* in the ApplicationMaster's container: every agent starts in a container
     * of its own through a stand-in (tfos yarn-container) */
    char *prefix[7];
    if (am)
        tfos__yarn_am_launcher(&o, prefix, exe, c->am_socket, c->resources, c->bind, c->address_file);
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

/* tfos yarn serve: tfos yarn's client options (main.c's parser) and tfos
 * serve's options (serve.c's), apart. */
static int cmd_yarn_serve(int argc, char **argv)
{
    char **yv = calloc((size_t)argc + 1, sizeof *yv), **sv = calloc((size_t)argc + 1, sizeof *sv);
    int ny = 0, ns = 0, rc = 1;
    if (!yv || !sv)
        goto out;
    for (int i = 0; i < argc; i++) {
        int has_value;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tfos__serve_help(), stdout);
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
    tfos__serve_am check = {.check_only = 1};
    if ((rc = tfos__cmd_serve(ns, sv, &check)))
        goto out;
    cli c;
    if ((rc = parse(ny, yv, &c)))
        goto out;
    rc = tfos__cmd_yarn_serve(&c, ns, sv);
out:
    free(yv);
    free(sv);
    return rc;
}

static int cmd_node(cli *c)
{
    if (!c->argv || !c->argv[0])
        return usage_error("%s", "node needs a program (tfos node [options] [--] PROGRAM [ARGS...])");
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
                         .forward_logs = c->forward_logs, .respawn = c->respawn,
                         .cluster_id = c->cluster_id, .feed_capacity = (size_t)c->feed_mb << 20,
                         .checkpoint_dir = c->checkpoint_dir, .watch_pid = c->watch_pid,
                         .tensorboard_port = c->tensorboard_port, .tensorboard = c->tensorboard,
                         .tensorboard_logdir = c->tensorboard_logdir, .hang_timeout = c->hang_timeout,
                         .hand_port = c->hand_port, .keras = c->keras,
                         .max_restarts = c->have_max_restarts ? c->max_restarts : 0};
    signal(SIGPIPE, SIG_IGN);
    int code = 1;
    int rc = tfos_agent_run(&o, &code);
    return rc ? 1 : code;
}

/* Write "HOST:PORT\n" to path, whole. */
static int write_address_file(const char *path, const char *addr)
{
    char text[300];
    snprintf(text, sizeof text, "%s\n", addr);
    return tfos__write_file_whole(path, text);
}

static int cmd_coordinator(cli *c)
{
    if (!c->have_workers && !c->layout.chief)
        return usage_error("%s", "coordinator needs --workers N (or --chief)");
    if (!c->layout.num_workers && !c->layout.chief)
        return usage_error("%s", "--workers 0 needs --chief: a cluster needs at least one worker or a chief");
    if (c->argv && c->argv[0])
        return usage_error("coordinator runs no program, got '%s'", c->argv[0]);
    char host[256] = "127.0.0.1";
    int port = 0;
    if (c->listen) {
        const char *colon = strrchr(c->listen, ':');
        if (!colon || (size_t)(colon - c->listen) >= sizeof host ||
            parse_int_quiet(colon + 1, 0, 65535, &port))
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
                         .failure_grace = c->failure_grace, .heartbeat_timeout = c->heartbeat_timeout,
                         .lease_timeout = c->lease, .attempt = c->attempt};
    tfos_coord *co;
    int rc = tfos_coord_open(&co, &o);
    if (rc) {
        fprintf(stderr, "tfos: cannot start the coordinator on %s:%d: %s\n", host, port,
                rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
        return 1;
    }
    printf("TFOS_COORD_ADDR=%s\n", tfos_coord_address(co));
    fflush(stdout);
    if (c->address_file && write_address_file(c->address_file, tfos_coord_address(co))) {
        fprintf(stderr, "tfos: cannot write %s: %s\n", c->address_file, strerror(errno));
        tfos_coord_close(co);
        return 1;
    }
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
    /* the outcome stays readable for a while: its client asks for it */
    int64_t linger_until = tfos__now_ms() + (int64_t)(c->linger * 1000);
    while (c->linger > 0 && !got_signal && !tfos_coord_released(co) && tfos__now_ms() < linger_until)
        tfos__loop_run(tfos__coord_loop(co), 100);
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
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(guard_help, stdout);
            return 0;
        }
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

static const char *command_help(const char *cmd)
{
    static const struct {
        const char *name, *text;
    } helps[] = {{"run", run_help},   {"status", status_help}, {"logs", logs_help},
                 {"node", node_help}, {"coordinator", coordinator_help}, {"guard", guard_help},
                 {"yarn", yarn_help}, {"yarn-am", yarn_am_help}, {"yarn-container", yarn_container_help}};
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
        if (!strcmp(cmd, helps[i].name))
            return helps[i].text;
    if (!strcmp(cmd, "serve"))
        return tfos__serve_help();
    return NULL;
}

/* `tfos status [URL | LOG_DIR] [--json]`, `tfos logs [-f] [NODE] [--log-dir D]` */
static int cmd_status_logs(int argc, char **argv, int status)
{
    const char *target = NULL, *dir = NULL;
    int json = 0, follow = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(status ? status_help : logs_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "-f") || !strcmp(a, "--follow"))
            follow = 1;
        else if (!strcmp(a, "--log-dir")) {
            if (i + 1 >= argc)
                return usage_error("%s needs a directory", a);
            dir = argv[++i];
        } else if (!strncmp(a, "--log-dir=", 10)) {
            if (!a[10])
                return usage_error("%s needs a directory", "--log-dir");
            dir = a + 10;
        } else if (a[0] == '-' && a[1])
            return usage_error("unknown option '%s'", a);
        else if (target)
            return usage_error("unexpected argument '%s'", a);
        else
            target = a;
    }
    return status ? tfos__cmd_status(target ? target : dir, json) : tfos__cmd_logs(target, dir, follow);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(top_help, stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        const char *text = !strcmp(argv[1], "help") && argc > 2 ? command_help(argv[2]) : NULL;
        if (!strcmp(argv[1], "help") && argc > 2 && !text)
            return usage_error("no help for '%s': no such command", argv[2]);
        fputs(text ? text : top_help, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("tfos %s (protocol %d)\n", TFOS_VERSION, TFOS_PROTOCOL_VERSION);
        return 0;
    }
    if (argv[1][0] == '-')
        return usage_error("unknown option '%s'", argv[1]);
    if (!command_help(argv[1]))
        return usage_error("unknown command '%s'", argv[1]);
    g_cmd = argv[1];
    if (!strcmp(argv[1], "status") || !strcmp(argv[1], "logs"))
        return cmd_status_logs(argc - 2, argv + 2, !strcmp(argv[1], "status"));
    if (!strcmp(argv[1], "guard"))
        return cmd_guard(argc - 2, argv + 2);
    if (!strcmp(argv[1], "serve"))
        return tfos__cmd_serve(argc - 2, argv + 2, NULL);
    if (!strcmp(argv[1], "yarn") && argc >= 3 && !strcmp(argv[2], "serve"))
        return cmd_yarn_serve(argc - 3, argv + 3);
    if (!strcmp(argv[1], "yarn-container")) {
        for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                fputs(yarn_container_help, stdout);
                return 0;
            }
        return tfos__cmd_yarn_container(argc - 2, argv + 2);
    }
    if (!strcmp(argv[1], "yarn") && argc >= 3 && !strcmp(argv[2], "pack"))
        return tfos__cmd_yarn_pack(argc - 3, argv + 3);
    if (!strcmp(argv[1], "yarn") && argc >= 3 && !strcmp(argv[2], "logs"))
        return tfos__cmd_yarn_logs(argc - 3, argv + 3);
    if (!strcmp(argv[1], "yarn") && argc == 4 && (!strcmp(argv[2], "status") || !strcmp(argv[2], "kill")))
        return tfos__cmd_yarn(NULL, argc - 2, argv + 2);
    cli c;
    int rc = parse(argc - 2, argv + 2, &c);
    if (rc == PARSE_HELP) {
        fputs(command_help(argv[1]), stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (!strcmp(argv[1], "run") || !strcmp(argv[1], "yarn-am"))
        return cmd_run(&c);
    if (!strcmp(argv[1], "yarn"))
        return tfos__cmd_yarn(&c, argc - 2, argv + 2);
    const char *yarn_opt = yarn_option_given(&c);
    if (yarn_opt || c.am_socket || c.bind || c.resources)
        return usage_error("%s is an option of tfos yarn", yarn_opt ? yarn_opt : "--am-socket/--bind/--resources");
    if (!strcmp(argv[1], "node"))
        return cmd_node(&c);
    return cmd_coordinator(&c);
}
