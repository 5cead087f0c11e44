/* run.h: `tfos run`'s options (run.c), which tfos yarn and tfos yarn-am take
 * too: tfos yarn passes them on to the ApplicationMaster, whose tfos yarn-am
 * is tfos run with its nodes in containers. */
#ifndef TFOS_CLI_RUN_H
#define TFOS_CLI_RUN_H

#include "cli/common.h"

typedef struct tfos__run_cli {
    tfos__cluster_cli cluster;
    const char *log_dir, *python, *checkpoint_dir, *status_host, *keras, *tensorboard_logdir, *framework;
    int ps_runs_program, feed_mb, input_format, csv_header, csv_delimiter, epochs, batch_rows;
    char *inputs[256];
    int ninputs;
    long long partition_rows;
    int status_port, max_restarts, quiet, tensorboard;
    int status_given;        /* --status-port or --status-host was given (tfos yarn refuses them) */
    double hang_timeout;
    double drain_grace;         /* --drain-grace: 0 the default; < 0 off (--drain-grace 0) */
    int drain_force;            /* --drain-grace S given: drain also programs that report no step */
    int min_nodes;              /* --min-nodes: 0 not elastic */
    double elastic_wait;        /* --elastic-wait: 0 the default */
    int resize_in_place;        /* --resize-in-place */
    int grow_in_place;          /* --grow-in-place */
    const char *mlflow, *mlflow_experiment, *mlflow_run_name; /* --mlflow* */
    char **argv;             /* the program: after --, or from the first argument that is not an option */
} tfos__run_cli;

/* An option of a command built on run's, tried before run's own: 1 taken,
 * 0 not its, 2 a usage error (reported). */
typedef int (*tfos__run_extra_fn)(void *user, tfos__args *it, const char *opt);

/* Parse run's options (and extra's) from argv; as torchrun does, the first
 * argument that is not an option starts the program: it and everything
 * after it are the program's. 0, 2 (a usage error, reported) or TFOS__HELP. */
int tfos__run_parse(tfos__run_cli *r, int argc, char **argv, tfos__run_extra_fn extra, void *user);
/* A program and a cluster of at most 1024 nodes: 0, or 2 (reported). */
int tfos__run_check(const tfos__run_cli *r);
/* The launcher's options from r; exe: this binary (the agents'). */
void tfos__run_opts(const tfos__run_cli *r, const char *exe, tfos_run_opts *o);

#endif
