/* node.c: `tfos node [options] [--] PROGRAM [ARGS...]` (internal): one node
 * agent (roles/agent.c), as the launchers start it: tfos run's, tfos yarn's
 * containers, Spark's tasks. The secret comes from $TFOS_SECRET. */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/yarn_opts.h"
#include "core/link.h"
#include "core/spec.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "roles/client.h"
#include "tfos/tfos.h"

#include <limits.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char tfos__node_help[] =
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
    "  --feed-mb N              input feed ring size in MiB (default " TFOS__STR(TFOS_DEFAULT_FEED_MB) ")\n"
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
    "                           running 5 s or more (tfos serve's model servers; default 0)\n"
    "  --standby                run no program: tell the coordinator that capacity for one more node\n"
    "                           is here (an elastic run grows onto it), then wait until it hangs up\n"
    "  --join                   join a running cluster in the slot of the worker of --executor-id that\n"
    "                           it went on without (tfos run --grow-in-place starts it)\n";

typedef struct node_cli {
    const char *coord, *host, *log_dir, *ps_python, *cluster_id, *checkpoint_dir, *keras, *tensorboard_logdir;
    int executor_id, feed_mb, max_restarts, watch_pid, tensorboard_port, respawn;
    int tensorboard, hand_port, quiet, forward_logs, standby, join;
    double hang_timeout;
    char **argv;
} node_cli;

/* 1 taken, 0 not one, 2 a usage error. */
static int node_option(node_cli *n, tfos__args *it, const char *a)
{
    static const struct {
        const char *opt, *what;
        size_t off;
    } strs[] = {
        {"--coord", "HOST:PORT", offsetof(node_cli, coord)},
        {"--host", "an address", offsetof(node_cli, host)},
        {"--log-dir", "a directory", offsetof(node_cli, log_dir)},
        {"--ps-python", "an interpreter", offsetof(node_cli, ps_python)},
        {"--cluster-id", "an id", offsetof(node_cli, cluster_id)},
        {"--checkpoint-dir", "a directory", offsetof(node_cli, checkpoint_dir)},
        {"--tensorboard-logdir", "a directory", offsetof(node_cli, tensorboard_logdir)},
    };
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (!strcmp(a, strs[i].opt)) {
            const char **dst = (const char **)((char *)n + strs[i].off);
            return tfos__opt_need(a, *dst = tfos__args_value(it), strs[i].what) ? 2 : 1;
        }
    if (!strcmp(a, "--executor-id"))
        return tfos__opt_int(a, tfos__args_value(it), 0, 1 << 20, &n->executor_id) ? 2 : 1;
    if (!strcmp(a, "--feed-mb")) {
        if (tfos__opt_int(a, tfos__args_value(it), 1, 1024, &n->feed_mb))
            return 2;
        if (n->feed_mb & (n->feed_mb - 1))
            return tfos__usage_error("%s must be a power of two", "--feed-mb");
        return 1;
    }
    if (!strcmp(a, "--max-restarts"))
        return tfos__opt_int(a, tfos__args_value(it), 0, 1000, &n->max_restarts) ? 2 : 1;
    if (!strcmp(a, "--watch-pid"))
        return tfos__opt_int(a, tfos__args_value(it), 1, INT_MAX, &n->watch_pid) ? 2 : 1;
    if (!strcmp(a, "--tensorboard-port"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 65535, &n->tensorboard_port) ? 2 : 1;
    if (!strcmp(a, "--respawn"))
        return tfos__opt_int(a, tfos__args_value(it), 0, 1000000, &n->respawn) ? 2 : 1;
    if (!strcmp(a, "--hang-timeout"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &n->hang_timeout) ? 2 : 1;
    if (!strcmp(a, "--keras")) {
        if (!(n->keras = tfos__args_value(it)) || tfos__keras_mode_valid(n->keras))
            return tfos__usage_error("--keras takes env, auto, legacy or 3; got '%s'", n->keras ? n->keras : "");
        return 1;
    }
    int *flag = !strcmp(a, "--tensorboard")    ? &n->tensorboard
                : !strcmp(a, "--hand-port")    ? &n->hand_port
                : !strcmp(a, "--quiet")        ? &n->quiet
                : !strcmp(a, "--forward-logs") ? &n->forward_logs
                : !strcmp(a, "--standby")      ? &n->standby
                : !strcmp(a, "--join")         ? &n->join
                                               : NULL;
    if (!flag)
        return 0;
    if (tfos__args_flag(it))
        return 2;
    *flag = 1;
    return 1;
}

/* tfos__opt_fn over everything the agent takes. */
static int node_any(void *user, tfos__args *it, const char *a)
{
    if (!strcmp(a, "--am-socket") || !strcmp(a, "--bind") || !strcmp(a, "--resources"))
        return tfos__usage_error("%s is an option of tfos yarn", "--am-socket/--bind/--resources");
    int taken = tfos__yarn_option_elsewhere(a);
    return taken ? taken : node_option(user, it, a);
}

/* 0, 2 (a usage error, reported) or TFOS__HELP. */
static int node_parse(node_cli *n, int argc, char **argv)
{
    memset(n, 0, sizeof *n);
    n->executor_id = -1;
    return tfos__args_parse(argc, argv, node_any, n, &n->argv);
}

/* --standby (docs/RELIABILITY.md, "Elastic size"): this process runs where
 * a node of the larger cluster would, so its cluster manager has the
 * capacity again. Say so to the coordinator, then wait until it hangs up
 * (the attempt ended: the launcher then stops this process too) or refuses.
 * The wait's bound is the attempt's: the launcher ends every standby with
 * its attempt, and a launcher that dies takes them with it (the backends'
 * parent-death signal, YARN's containers). Exit 0, or 1 saying why. */
static int standby(const node_cli *n, const char *secret)
{
    char err[512];
    tfos__link *k = NULL;
    int rc = tfos__coord_dial(&k, n->coord, tfos__now_ms() + (int64_t)(TFOS_DEFAULT_CONNECT_TIMEOUT * 1000), 1,
                              1000, err, sizeof err);
    if (rc) {
        fprintf(stderr, "tfos: standby node %d: %s\n", n->executor_id, err);
        return 1;
    }
    tfos__msg m;
    tfos__link_hello(k, &m, TFOS_MSG_REGISTER, secret);
    tfos__msg_add(&m, "executor_id", "%d", n->executor_id);
    tfos__msg_add(&m, "standby", "1");
    rc = tfos__msg_end(&m);
    if (!rc)
        rc = tfos__link_send(k, &m, NULL, 0);
    tfos__msg_fini(&m);
    if (!rc)
        rc = tfos__link_flush_wait(k, 10000);
    int code = rc ? 1 : 0;
    if (rc)
        fprintf(stderr, "tfos: standby node %d: cannot register with the coordinator at %s: %s\n", n->executor_id,
                n->coord, tfos_strerror(rc));
    while (!rc) {
        tfos__frame f;
        const char *why = NULL;
        rc = tfos__link_wait_frame(k, -1, &f, &why);
        if (rc)
            break; /* the coordinator hung up: the attempt is over */
        if (f.type == TFOS_MSG_ERROR) {
            char text[512] = "";
            tfos__kv_str(f.payload, f.len, "message", text, sizeof text);
            fprintf(stderr, "tfos: standby node %d: the coordinator refused it: %s\n", n->executor_id, text);
            code = 1;
            break;
        }
        tfos__link_consume(k);
    }
    tfos__link_close(k);
    return code;
}

int tfos__cmd_node(int argc, char **argv)
{
    node_cli n;
    int rc = node_parse(&n, argc, argv);
    if (rc == TFOS__HELP) {
        fputs(tfos__node_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (!n.standby && (!n.argv || !n.argv[0]))
        return tfos__usage_error("%s", "node needs a program (tfos node [options] [--] PROGRAM [ARGS...])");
    if (!n.coord || n.executor_id < 0)
        return tfos__usage_error("%s", "node needs --coord HOST:PORT and --executor-id N");
    const char *secret = getenv("TFOS_SECRET");
    if (!secret || !*secret) {
        fprintf(stderr, "tfos: node: $TFOS_SECRET is not set (the cluster's secret, from its launcher)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (n.standby)
        return standby(&n, secret);
    char *ps_argv[2] = {(char *)n.ps_python, NULL};
    tfos_agent_opts o = {.coord_addr = n.coord, .secret = secret, .executor_id = n.executor_id,
                         .host = n.host, .log_dir = n.log_dir, .argv = n.argv,
                         .ps_argv = n.ps_python ? ps_argv : NULL, .quiet = n.quiet,
                         .forward_logs = n.forward_logs, .respawn = n.respawn,
                         .cluster_id = n.cluster_id, .feed_capacity = (size_t)n.feed_mb << 20,
                         .checkpoint_dir = n.checkpoint_dir, .watch_pid = n.watch_pid,
                         .tensorboard_port = n.tensorboard_port, .tensorboard = n.tensorboard,
                         .tensorboard_logdir = n.tensorboard_logdir, .hang_timeout = n.hang_timeout,
                         .hand_port = n.hand_port, .keras = n.keras, .max_restarts = n.max_restarts,
                         .join = n.join};
    signal(SIGPIPE, SIG_IGN);
    int code = 1;
    rc = tfos_agent_run(&o, &code);
    return rc ? 1 : code;
}
