/* run.c: `tfos run [options] [--] PROGRAM [ARGS...]`: a whole cluster on this
 * machine (the launcher, src/launch). Its options are also tfos yarn's and
 * tfos yarn-am's (run.h), which add their own through the parser's hook. */
#include "cli/run.h"

#include "cli/commands.h"
#include "cli/yarn_opts.h"
#include "core/spec.h"
#include "feed/input.h"
#include "launch/launch.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char tfos__run_help[] =
    "usage: tfos run [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Forms a cluster of local nodes and runs PROGRAM on each with TF_CONFIG, torchrun's and\n"
    "JAX's variables, and TFOS_* context variables set. As with torchrun, the first argument\n"
    "that is not an option (or everything after --) is the program: what follows it, dashes\n"
    "included, is its own (tfos run --workers 2 python train.py --epochs 3).\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    TFOS__CLUSTER_OPTIONS
    "run options:\n"
    "  --max-restarts N         re-form the cluster up to N times after a node fails (default "
    TFOS__STR(TFOS_DEFAULT_MAX_RESTARTS) ";\n"
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
    "  --framework F            tf (default), torch or jax: what each node is sent of the cluster.\n"
    "                           tf: every node's address (TF_CONFIG, TFOS_CLUSTER_SPEC, the host\n"
    "                           lists); torch, jax: its rank, the counts and rank 0's address only\n"
    "                           (RANK, WORLD_SIZE, MASTER_ADDR/PORT, JAX_*): O(1) per node\n"
    "  --keras MODE             which Keras tf.keras is: env (default: as the environment\n"
    "                           says, TensorFlow's Keras 3), legacy (tf-keras, Keras 2:\n"
    "                           TF_USE_LEGACY_KERAS=1; model.fit under MultiWorkerMirroredStrategy),\n"
    "                           auto (legacy where tf_keras is installed), 3 (Keras 3)\n"
    "  --hang-timeout S         a program that neither reads its feed nor calls ctx.heartbeat()\n"
    "                           for S seconds is hung: its stacks are dumped, it is ended and the\n"
    "                           restart policy applies (default: off)\n"
    "  --drain-grace S          SIGTERM drains the cluster: every program checkpoints at one step\n"
    "                           (ctx.should_checkpoint, TFOS_DRAIN_FILE) and exits 0 within S seconds\n"
    "                           (default " TFOS__STR(TFOS_DEFAULT_DRAIN_GRACE) "); tfos run then exits " TFOS__STR(TFOS_EXIT_DRAINED) " and the same command\n"
    "                           resumes; programs still running then are stopped (exit 143). By default\n"
    "                           only programs that report steps (ctx.report(step=)) are drained, else\n"
    "                           SIGTERM stops at once; given, every program is; 0: never drain\n"
    "  --min-nodes M            elastic size (docs/RELIABILITY.md): run on as few as M nodes when the\n"
    "                           cluster manager has no capacity for the others (their agents do not\n"
    "                           register within --elastic-wait), re-form after YARN preempts a\n"
    "                           container instead of ending, and grow back at a drain step when\n"
    "                           capacity returns; only workers come and go; resizes spend no restart\n"
    "  --elastic-wait S         an elastic attempt's wait for all its nodes before it forms with fewer\n"
    "                           (default " TFOS__STR(TFOS_DEFAULT_ELASTIC_WAIT) ")\n"
    "  --resize-in-place        (with --min-nodes, --framework torch, workers only) a worker lost while\n"
    "                           the cluster runs leaves the others running: they get their new rank and\n"
    "                           world size and re-form their process group (tfos.torch.ElasticGroup)\n"
    "                           instead of a restart of every node\n"
    "  --grow-in-place          (with --resize-in-place) start a worker in a lost one's place where its\n"
    "                           capacity is, which joins the running cluster: the others re-form their\n"
    "                           group with it at their next step (ElasticGroup.resized()), not restarted\n"
    "  --feed-mb N              size of each node's input feed ring in MiB (power of two; default "
    TFOS__STR(TFOS_DEFAULT_FEED_MB) ",\n"
    "                           or, for .npy inputs, 8 records' worth from 4 MiB up: see docs/FEED.md)\n"
    "  --input FILE             feed FILE (.csv, .jsonl, .npy) to the chief and workers; repeatable\n"
    "  --input-format F         csv, jsonl, npy (default: by extension)\n"
    "  --epochs K               feed every file K times (default 1)\n"
    "  --batch-rows N           rows per feed record (default " TFOS__STR(TFOS_DEFAULT_BATCH_ROWS) ", and for .npy no more\n"
    "                           than fit in 2 MiB)\n"
    "  --partition-rows N       rows per partition; partitions go to the nodes in turn (default "
    TFOS__STR(TFOS_DEFAULT_PARTITION_ROWS) ")\n"
    "  --csv-header, --no-csv-header   whether CSV files start with a header (default: detect)\n"
    "  --csv-delimiter C        CSV field separator: one ASCII character, or 'tab' (default ',')\n"
    "  --quiet                  no feed progress lines on stderr\n"
    "  --mlflow URI             track the job as one MLflow run on the tracking server at URI\n"
    "                           (http:// or https://; credentials from MLFLOW_TRACKING_TOKEN or\n"
    "                           _USERNAME/_PASSWORD): parameters, every rank's ctx.report metrics\n"
    "                           (rank<N>/<name> and their mean <name>), restarts, the run's\n"
    "                           figures; nodes get MLFLOW_TRACKING_URI and MLFLOW_RUN_ID.\n"
    "                           A server that cannot be reached does not stop the job (docs/MODELS.md)\n"
    "  --mlflow-experiment NAME its experiment (default $MLFLOW_EXPERIMENT_NAME, else Default)\n"
    "  --mlflow-run-name NAME   the run's name (default tfos-<program>-<time>)\n"
    "\n"
    "Slurm (inside sbatch or salloc; docs/SLURM.md):\n"
    "  --backend B              local (default): nodes are children here; slurm: each node is a job\n"
    "                           step (srun --nodes=1 --ntasks=1 --exact) of the allocation\n"
    "                           ($SLURM_JOB_ID), one per task unless --workers/--ps/--chief say\n"
    "  --bind HOST              (slurm) the address the allocation's nodes reach this host at;\n"
    "                           the coordinator and status page listen there (default: this\n"
    "                           host's name, resolved)\n"
    "\n"
    "Options take their value as the next argument or after '=' (--workers=2).\n";

/* One of run's own options: 1 taken, 0 not one, 2 a usage error. */
static int run_option(tfos__run_cli *r, tfos__args *it, const char *a)
{
    const char *v;
    if (!strcmp(a, "--log-dir"))
        return tfos__opt_need(a, r->log_dir = tfos__args_value(it), "a directory") ? 2 : 1;
    if (!strcmp(a, "--python"))
        return tfos__opt_need(a, r->python = tfos__args_value(it), "an interpreter") ? 2 : 1;
    if (!strcmp(a, "--checkpoint-dir"))
        return tfos__opt_need(a, r->checkpoint_dir = tfos__args_value(it), "a directory") ? 2 : 1;
    if (!strcmp(a, "--tensorboard-logdir"))
        return tfos__opt_need(a, r->tensorboard_logdir = tfos__args_value(it), "a directory") ? 2 : 1;
    if (!strcmp(a, "--status-host")) {
        r->status_given = 1;
        return tfos__opt_need(a, r->status_host = tfos__args_value(it), "an address") ? 2 : 1;
    }
    if (!strcmp(a, "--status-port")) {
        r->status_given = 1;
        return tfos__opt_int(a, tfos__args_value(it), -1, 65535, &r->status_port) ? 2 : 1;
    }
    if (!strcmp(a, "--mlflow"))
        return tfos__opt_need(a, r->mlflow = tfos__args_value(it), "a tracking server's URI") ? 2 : 1;
    if (!strcmp(a, "--mlflow-experiment"))
        return tfos__opt_need(a, r->mlflow_experiment = tfos__args_value(it), "an experiment name") ? 2 : 1;
    if (!strcmp(a, "--mlflow-run-name"))
        return tfos__opt_need(a, r->mlflow_run_name = tfos__args_value(it), "a run name") ? 2 : 1;
    if (!strcmp(a, "--max-restarts"))
        return tfos__opt_int(a, tfos__args_value(it), 0, 1000, &r->max_restarts) ? 2 : 1;
    if (!strcmp(a, "--hang-timeout"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &r->hang_timeout) ? 2 : 1;
    if (!strcmp(a, "--drain-grace")) {
        if (tfos__opt_secs(a, tfos__args_value(it), 1, &r->drain_grace))
            return 2;
        if (r->drain_grace == 0)
            r->drain_grace = -1; /* off */
        else
            r->drain_force = 1; /* asked for: also programs that report no step */
        return 1;
    }
    if (!strcmp(a, "--min-nodes"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 1024, &r->min_nodes) ? 2 : 1;
    if (!strcmp(a, "--elastic-wait"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &r->elastic_wait) ? 2 : 1;
    if (!strcmp(a, "--epochs"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 1000000, &r->epochs) ? 2 : 1;
    if (!strcmp(a, "--batch-rows"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 1 << 24, &r->batch_rows) ? 2 : 1;
    if (!strcmp(a, "--partition-rows")) {
        int pr;
        if (tfos__opt_int(a, tfos__args_value(it), 1, 1 << 30, &pr))
            return 2;
        r->partition_rows = pr;
        return 1;
    }
    if (!strcmp(a, "--feed-mb")) {
        if (tfos__opt_int(a, tfos__args_value(it), 1, 1024, &r->feed_mb))
            return 2;
        if (r->feed_mb & (r->feed_mb - 1))
            return tfos__usage_error("%s must be a power of two", "--feed-mb");
        return 1;
    }
    if (!strcmp(a, "--input")) {
        char *f = tfos__args_value(it);
        if (!f)
            return tfos__usage_error("%s needs a file", a);
        if (r->ninputs >= 256)
            return tfos__usage_error("%s: at most 256 files", a);
        r->inputs[r->ninputs++] = f;
        return 1;
    }
    if (!strcmp(a, "--input-format")) {
        v = tfos__args_value(it);
        if (!v || (r->input_format = tfos__input_format(v)) < 0)
            return tfos__usage_error("--input-format takes csv, jsonl, npy or auto, got '%s'", v ? v : "");
        return 1;
    }
    if (!strcmp(a, "--csv-delimiter")) {
        v = tfos__args_value(it);
        if (v && (!strcmp(v, "tab") || !strcmp(v, "\\t")))
            v = "\t";
        if (!v || strlen(v) != 1 || (unsigned char)v[0] > 127 || strchr("\"\r\n", v[0]))
            return tfos__usage_error("--csv-delimiter takes one ASCII character other than a quote or a line end, "
                                     "or 'tab'; got '%s'", v ? v : "");
        r->csv_delimiter = v[0];
        return 1;
    }
    if (!strcmp(a, "--framework")) {
        if (!(r->framework = tfos__args_value(it)) || tfos_framework_spec_form(r->framework) < 0)
            return tfos__usage_error("--framework takes tf, torch or jax; got '%s'",
                                     r->framework ? r->framework : "");
        return 1;
    }
    if (!strcmp(a, "--keras")) {
        if (!(r->keras = tfos__args_value(it)) || tfos__keras_mode_valid(r->keras))
            return tfos__usage_error("--keras takes env, auto, legacy or 3; got '%s'", r->keras ? r->keras : "");
        return 1;
    }
    /* flags */
    int *flag = !strcmp(a, "--ps-runs-program") ? &r->ps_runs_program
                : !strcmp(a, "--resize-in-place") ? &r->resize_in_place
                : !strcmp(a, "--grow-in-place") ? &r->grow_in_place
                : !strcmp(a, "--tensorboard")   ? &r->tensorboard
                : !strcmp(a, "--quiet")         ? &r->quiet
                : !strcmp(a, "--csv-header") || !strcmp(a, "--no-csv-header") ? &r->csv_header
                                                                                : NULL;
    if (!flag)
        return 0;
    if (tfos__args_flag(it))
        return 2;
    *flag = strcmp(a, "--no-csv-header") ? 1 : 0;
    return 1;
}

/* tfos__opt_fn over tfos run's options and the caller's extra ones (first). */
struct run_any {
    tfos__run_cli *r;
    tfos__run_extra_fn extra;
    void *user;
};

static int run_any(void *user, tfos__args *it, const char *a)
{
    struct run_any *ra = user;
    int taken = ra->extra ? ra->extra(ra->user, it, a) : 0;
    if (!taken)
        taken = tfos__cluster_option(&ra->r->cluster, it, a);
    if (!taken)
        taken = run_option(ra->r, it, a);
    return taken;
}

int tfos__run_parse(tfos__run_cli *r, int argc, char **argv, tfos__run_extra_fn extra, void *user)
{
    memset(r, 0, sizeof *r);
    tfos__cluster_init(&r->cluster);
    r->csv_header = -1;
    r->max_restarts = TFOS_DEFAULT_MAX_RESTARTS;
    struct run_any ra = {r, extra, user};
    return tfos__args_parse(argc, argv, run_any, &ra, &r->argv);
}

int tfos__run_check(const tfos__run_cli *r)
{
    if (!r->argv || !r->argv[0])
        return tfos__usage_error("%s", "run needs a program (tfos run [options] [--] PROGRAM [ARGS...])");
    int rc = tfos__cluster_check(&r->cluster, "run");
    if (rc)
        return rc;
    const tfos_layout *lay = &r->cluster.layout;
    int total = tfos_layout_total(lay);
    if (total > 1024)
        return tfos__usage_error("%s", "--workers/--ps: a cluster has at most 1024 nodes");
    int least = lay->num_ps + (lay->evaluator ? 1 : 0) + 1; /* only workers come and go */
    if (r->min_nodes && (r->min_nodes > total || r->min_nodes < least)) {
        char why[300];
        snprintf(why, sizeof why, "--min-nodes %d: this cluster has %d nodes, and only workers come and go: give "
                 "--min-nodes from %d (its ps and evaluator nodes and %s) to %d", r->min_nodes, total, least,
                 lay->chief ? "the chief" : "one worker", total);
        return tfos__usage_error("%s", why);
    }
    if (r->grow_in_place && !r->resize_in_place)
        return tfos__usage_error("%s", "--grow-in-place replaces a worker lost in place: give --resize-in-place "
                                       "too");
    if (r->resize_in_place && (!r->min_nodes || r->min_nodes >= total || !r->framework ||
                               strcmp(r->framework, "torch") || lay->num_ps || lay->chief || lay->evaluator))
        return tfos__usage_error("%s", "--resize-in-place keeps the survivors of an elastic torch cluster of "
                                       "workers running: give --min-nodes below the node count and --framework "
                                       "torch, and no --ps, --chief or --evaluator");
    if (r->resize_in_place && r->ninputs)
        return tfos__usage_error("%s", "--resize-in-place and --input: the feed deals partitions to every node's "
                                       "ring, and a lost node's would not be read again: read the data by rank in "
                                       "the program (docs/RELIABILITY.md, \"Torch survivors in place\")");
    if (r->elastic_wait && !r->min_nodes)
        return tfos__usage_error("%s", "--elastic-wait is the wait of an elastic cluster: give --min-nodes too");
    return 0;
}

void tfos__run_opts(const tfos__run_cli *r, const char *exe, tfos_run_opts *o)
{
    const tfos__cluster_cli *c = &r->cluster;
    *o = (tfos_run_opts){.layout = c->layout, .argv = r->argv, .agent_path = exe, .log_dir = r->log_dir,
                         .reservation_timeout = c->reservation_timeout, .stop_grace = c->grace,
                         .failure_grace = c->failure_grace, .heartbeat_timeout = c->heartbeat_timeout,
                         .ps_runs_program = r->ps_runs_program, .python = r->python, .feed_mb = r->feed_mb,
                         .inputs = (char *const *)r->inputs, .ninputs = r->ninputs,
                         .input_format = r->input_format, .csv_header = r->csv_header,
                         .csv_delimiter = r->csv_delimiter, .epochs = r->epochs, .batch_rows = r->batch_rows,
                         .partition_rows = r->partition_rows, .max_restarts = r->max_restarts,
                         .checkpoint_dir = r->checkpoint_dir, .status_port = r->status_port,
                         .status_host = r->status_host, .quiet = r->quiet, .hang_timeout = r->hang_timeout,
                         .keras = r->keras, .tensorboard = r->tensorboard, .drain_grace = r->drain_grace,
                         .drain_force = r->drain_force, .min_nodes = r->min_nodes,
                         .elastic_wait = r->elastic_wait, .resize_in_place = r->resize_in_place,
                         .grow_in_place = r->grow_in_place,
                         .spec_form = tfos_framework_spec_form(r->framework),
                         .tensorboard_logdir = r->tensorboard_logdir, .mlflow = r->mlflow,
                         .mlflow_experiment = r->mlflow_experiment, .mlflow_run_name = r->mlflow_run_name};
}

/* tfos run's own options beyond the shared ones (tfos__run_extra_fn). */
typedef struct run_only {
    const char *backend, *bind;
} run_only;

/* tfos run takes neither tfos yarn's client options nor tfos yarn-am's. */
static int run_refuses(void *user, tfos__args *it, const char *a)
{
    run_only *ro = user;
    if (!strcmp(a, "--backend")) {
        if (!(ro->backend = tfos__args_value(it)) || (strcmp(ro->backend, "local") && strcmp(ro->backend, "slurm")))
            return tfos__usage_error("--backend takes local or slurm; got '%s'", ro->backend ? ro->backend : "");
        return 1;
    }
    if (!strcmp(a, "--bind"))
        return tfos__opt_need(a, ro->bind = tfos__args_value(it), "an address") ? 2 : 1;
    if (!strcmp(a, "--am-socket") || !strcmp(a, "--resources"))
        return tfos__usage_error("%s", "--am-socket and --resources are for tfos yarn-am");
    return tfos__yarn_option_elsewhere(a);
}

/* This host's address as its name resolves (IPv4 first), for the
 * allocation's other nodes to reach the coordinator at: 0, or -1. */
static int host_address(char *buf, size_t len)
{
    char name[256];
    if (gethostname(name, sizeof name))
        return -1;
    name[sizeof name - 1] = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(name, NULL, &hints, &res) || !res)
        return -1;
    const struct sockaddr_in *sin = (const void *)res->ai_addr;
    int bad = !inet_ntop(AF_INET, &sin->sin_addr, buf, (socklen_t)len);
    freeaddrinfo(res);
    return bad ? -1 : 0;
}

/* --backend slurm: the allocation is there, the cluster fits its tasks
 * (one node per task by default), the coordinator has an address. 0 or 2. */
static int slurm_check(tfos__run_cli *r, run_only *ro, char *bind, size_t len)
{
    const char *job = getenv("SLURM_JOB_ID"), *nt = getenv("SLURM_NTASKS");
    if (!job || !*job)
        return tfos__usage_error("%s", "--backend slurm runs inside a Slurm allocation (an sbatch script or "
                                       "salloc's shell), and $SLURM_JOB_ID is not set here; to submit a job "
                                       "from here, use tfos slurm (docs/SLURM.md)");
    int ntasks = 0;
    if (!nt || tfos__parse_int(nt, 1, 1 << 20, &ntasks))
        return tfos__usage_error("--backend slurm: $SLURM_NTASKS is '%s': ask sbatch for tasks "
                                 "(--ntasks, or --nodes with --ntasks-per-node), one per node of the cluster",
                                 nt ? nt : "");
    /* --input's feeder hands each node its rings through this host's shared
     * memory (feed/feedrun.h): the nodes must run here */
    const char *nn = getenv("SLURM_JOB_NUM_NODES");
    int nnodes = 1;
    if (r->ninputs && nn && !tfos__parse_int(nn, 1, 1 << 20, &nnodes) && nnodes > 1)
        return tfos__usage_error("--backend slurm: --input feeds the nodes through shared memory on this host, "
                                 "and the allocation spans %s hosts: ask for one (sbatch --nodes 1), or read "
                                 "the files from a shared file system in the program (docs/SLURM.md)",
                                 nn);
    tfos_layout *lay = &r->cluster.layout;
    if (!r->cluster.have_workers && !lay->chief && !lay->num_ps && !lay->evaluator)
        lay->num_workers = ntasks, r->cluster.have_workers = 1; /* one agent per task, as srun's would be */
    int total = tfos_layout_total(lay);
    if (total > ntasks) {
        fprintf(stderr,
                "tfos: --backend slurm: the cluster has %d nodes, and the allocation (job %s) %d tasks: each "
                "node is a one-task job step; ask sbatch for --ntasks %d (or fewer nodes)\n",
                total, job, ntasks, total);
        return 2;
    }
    if (ro->bind)
        snprintf(bind, len, "%s", ro->bind);
    else if (host_address(bind, len)) {
        fprintf(stderr, "tfos: --backend slurm: this host's name does not resolve to an address; pass --bind "
                        "with the address the allocation's nodes reach this host at\n");
        return 2;
    }
    return 0;
}

int tfos__cmd_run(int argc, char **argv)
{
    tfos__run_cli r;
    run_only ro = {0};
    int rc = tfos__run_parse(&r, argc, argv, run_refuses, &ro);
    if (rc == TFOS__HELP) {
        fputs(tfos__run_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    int on_slurm = ro.backend && !strcmp(ro.backend, "slurm");
    if (ro.bind && !on_slurm)
        return tfos__usage_error("%s", "--bind is for --backend slurm (tfos run's nodes are on this machine)");
    char bind[INET6_ADDRSTRLEN + 256];
    if (on_slurm && r.argv && r.argv[0] && (rc = slurm_check(&r, &ro, bind, sizeof bind)))
        return rc;
    if ((rc = tfos__run_check(&r)))
        return rc;
    char exe[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe)) {
        fprintf(stderr, "tfos: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    tfos_run_opts o;
    tfos__run_opts(&r, exe, &o);
    for (int i = 0; i < r.ninputs; i++)
        if (access(r.inputs[i], R_OK)) {
            fprintf(stderr, "tfos: --input %s: %s\n", r.inputs[i], strerror(errno));
            return 2;
        }
    /* a program that cannot start fails here, once, before any node runs:
     * not once per node and attempt (the restart policy would not retry it
     * either; exit 1 as for a failed run). Under Slurm this host is the
     * batch host, whose software is the nodes' on a cluster's shared
     * install: checked here too. */
    char why[1024];
    if (tfos__launch_check(&o, why, sizeof why)) {
        fprintf(stderr, "tfos: %s\ntfos: no node was started: a program that cannot start is not retried\n", why);
        return 1;
    }
    tfos__catch_stop_signals();
    int code = 1;
    if (!on_slurm) {
        rc = tfos_run_local(&o, tfos__stop_flag(), &code);
    } else {
        tfos__launch_opts lo = {0};
        tfos__slurm_cfg cfg;
        tfos__launch_on_slurm(&o, &lo, &cfg, bind);
        tfos_local *l;
        if (!(rc = tfos__launch_open(&l, &o, &lo))) {
            if (!(rc = tfos__launch_start(l)))
                tfos__launch_run(l, tfos__stop_flag(), &code);
            tfos_local_close(l);
        }
    }
    if (rc) {
        fprintf(stderr, "tfos: could not start the cluster: %s\n", tfos_strerror(rc));
        return 1;
    }
    return code;
}
