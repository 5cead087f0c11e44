/* cli.h: the options of every tfos command, parsed once (main.c), and the
 * commands that live outside main.c. */
#ifndef TFOS_CLI_CLI_H
#define TFOS_CLI_CLI_H

#include "tfos/tfos.h"

enum { YARN_ROLE_WORKER = 0, YARN_ROLE_PS, YARN_ROLE_CHIEF, YARN_ROLE_EVALUATOR, YARN_ROLES };

typedef struct cli {
    tfos_layout layout;
    int have_workers, have_max_restarts;
    double reservation_timeout, grace, failure_grace, heartbeat_timeout;
    const char *log_dir, *python, *listen, *coord, *host, *ps_python, *cluster_id, *keras;
    int feed_mb;
    char *inputs[256];
    int ninputs, input_format, csv_header, epochs, batch_rows, max_restarts, status_port;
    int csv_delimiter;
    const char *checkpoint_dir, *status_host;
    long long partition_rows;
    int ps_runs_program, executor_id, quiet, watch_pid, tensorboard_port;
    double hang_timeout, lease, linger;
    int attempt;
    const char *address_file;
    int hand_port, forward_logs, respawn;
    int tensorboard; /* --tensorboard */
    const char *tensorboard_logdir;
    /* tfos yarn (src/cli/yarn.c) */
    const char *queue, *app_name, *hadoop_classpath;
    int am_memory_mb, res_mb[4], res_vcores[4], res_gpus[4]; /* by YARN_ROLE_* */
    const char *archives[64], *files[64], *envs[64];
    int narchives, nfiles, nenvs;
    double accept_timeout;
    /* tfos yarn-am (internal) */
    const char *am_socket, *bind, *resources;
    char **argv; /* the program: after --, or from the first argument that is not an option */
} cli;

/* This tfos binary's path (/proc/self/exe): 0, or -1 with errno. */
int tfos__self_path(char *buf, size_t len);

/* SIGINT, SIGTERM and SIGHUP go to handler (SIGPIPE is ignored). */
void tfos__on_stop_signals(void (*handler)(int));

/* One line naming what is wrong, then where the usage is; returns 2. */
int tfos__usage_error(const char *fmt, const char *arg);

/* tfos yarn [options] [--] PROGRAM ARGS... (argv: everything after "yarn"), and
 * tfos yarn status|kill APPLICATION_ID. */
int tfos__cmd_yarn(const cli *c, int argc, char **argv);
/* tfos yarn-container (internal): a node's stand-in in the ApplicationMaster's
 * container: asks the ApplicationMaster for a container, has the agent command
 * started in it and exits with its exit status. */
int tfos__cmd_yarn_container(int argc, char **argv);
/* tfos yarn logs APPLICATION_ID [--follow] (yarn.c) */
int tfos__cmd_yarn_logs(int argc, char **argv);
/* tfos yarn pack [-o FILE] [ENV_DIR]: a virtual environment as a .tar.gz
 * for --archive FILE#env (yarn.c) */
int tfos__cmd_yarn_pack(int argc, char **argv);
/* tfos serve [options] (serve.c; argv: everything after "serve"). With am:
 * on YARN, either only checking the options for tfos yarn serve on the
 * submitting host (check_only), or in the ApplicationMaster's container
 * (tfos yarn-am ... serve ...), where every model server starts in a
 * container of its own through a stand-in. */
typedef struct tfos__serve_am {
    int check_only;
    const char *am_socket, *address_file, *bind, *resources;
} tfos__serve_am;
int tfos__cmd_serve(int argc, char **argv, const tfos__serve_am *am);
/* tfos yarn serve [yarn options] [serve options]: c holds the yarn options
 * (parsed by main.c), argv the serve options, already checked. */
int tfos__cmd_yarn_serve(const cli *c, int argc, char **argv);
/* The launcher in the ApplicationMaster's container (tfos yarn-am, for
 * tfos run's nodes and tfos serve's model servers alike): each node's
 * agent starts in a container of its own through a stand-in (tfos
 * yarn-container, asking the ApplicationMaster on am_socket for the role's
 * resources); the coordinator listens on bind, and so does the status page
 * unless o->status_host is set; the addresses go to address_file; the
 * secret is the application's ($TFOS_SECRET). prefix: 7 slots the caller
 * keeps while o is used. */
void tfos__yarn_am_launcher(tfos_run_opts *o, char *prefix[7], const char *exe, const char *am_socket,
                            const char *resources, const char *bind, const char *address_file);
/* Is arg (--opt or --opt=value) an option of tfos yarn's client only (one
 * that takes a value; *has_value: given after '=')? */
int tfos__yarn_client_only(const char *arg, int *has_value);
const char *tfos__serve_help(void);

#endif
