/* common.h: what the tfos commands share (common.c): this binary's path,
 * the stop signals, usage errors, one small option parser, and the cluster
 * options that run, yarn and coordinator take alike. Each command's file
 * owns its options, its parser and its help; main.c only dispatches. */
#ifndef TFOS_CLI_COMMON_H
#define TFOS_CLI_COMMON_H

#include "tfos/tfos.h"

#define TFOS__STR_(x) #x
#define TFOS__STR(x) TFOS__STR_(x)

/* A command's parser found -h/--help (it prints nothing: the command does). */
#define TFOS__HELP (-1)

/* The command running ("run", "yarn", ...) and its help text, for the hint
 * after a usage error and the nearest option to a mistyped one; main.c sets
 * them before dispatching. */
void tfos__set_command(const char *name, const char *help);

/* This tfos binary's path (/proc/self/exe): 0, or -1 with errno. */
int tfos__self_path(char *buf, size_t len);

/* SIGINT, SIGTERM and SIGHUP go to handler (SIGPIPE is ignored). */
void tfos__on_stop_signals(void (*handler)(int));
/* SIGINT, SIGTERM and SIGHUP are recorded (the first one) in the flag
 * tfos__stop_flag points at, for tfos_run_local and the like. */
void tfos__catch_stop_signals(void);
volatile int *tfos__stop_flag(void);

/* One line naming what is wrong ("tfos: " fmt with arg), then where the
 * usage is ("(tfos CMD --help for usage)"), on stderr; returns 2, the exit
 * status of a usage error. */
int tfos__usage_error(const char *fmt, const char *arg);

/* "unknown option 'GIVEN'", with "; did you mean '--workers'?" when the
 * command's help names one option near it, then the usage hint; returns 2. */
int tfos__unknown_option(const char *given);
/* The option of ``help`` (tokens "--name" in a help text) nearest to
 * ``given`` ("--worker=2" is read as "--worker"): the one at the smallest
 * edit distance, 2 at most and not tied, else the one option it is a
 * prefix of (5 characters or more). Copied into out; returns its length,
 * 0 when there is none. */
size_t tfos__nearest_option(const char *given, const char *help, char *out, size_t len);

/* ---- the option parser ---------------------------------------------------
 * Options take their value after '=' (--workers=2) or as the next argument
 * (--workers 2). The iterator hands out one argument at a time; an option
 * given as "--name=value" is seen as "--name" until the next call, which
 * puts the '=' back (argv stays as given: tfos yarn passes it on). */
typedef struct tfos__args {
    int argc;
    char **argv;
    int i;       /* the current argument's index */
    char *eq;    /* the current argument's '=' (cut to '\0'), or NULL */
    int took;    /* its value was taken */
} tfos__args;

void tfos__args_init(tfos__args *it, int argc, char **argv);
/* The next argument, or NULL at the end. */
char *tfos__args_next(tfos__args *it);
/* The current option's value: after its '=', else the next argument
 * (taken); NULL when there is none. */
char *tfos__args_value(tfos__args *it);
/* The arguments from the current one on (argv's tail, NULL-terminated). */
char **tfos__args_rest(tfos__args *it);
/* The current argument as given (its '=' put back: for messages). */
const char *tfos__args_whole(tfos__args *it);
/* The current flag was given a value (--chief=yes): 2, reported
 * ("%s takes no value"); else 0. */
int tfos__args_flag(tfos__args *it);

/* An option handler: 1 took the current option (and its value), 0 it is
 * not this handler's, 2 a usage error (reported). */
typedef int (*tfos__opt_fn)(void *user, tfos__args *it, const char *opt);
/* The parse loop of every command that runs a program: options until "--"
 * or the first argument that is not one, which starts the program (*program
 * then points into argv; NULL when there is none); -h/--help gives
 * TFOS__HELP; every option is offered to fn, and one it does not take is a
 * usage error ("unknown option"). 0, 2 (reported) or TFOS__HELP. */
int tfos__args_parse(int argc, char **argv, tfos__opt_fn fn, void *user, char ***program);

/* Numbers: 0 with *out set, or 2 with the error reported ("--workers needs
 * an integer between 0 and 1000, got 'two'"). s: the value, NULL when the
 * option had none. */
int tfos__opt_int(const char *opt, const char *s, int lo, int hi, int *out);
/* Seconds: positive, or with zero_ok also 0 (at most 1e7). */
int tfos__opt_secs(const char *opt, const char *s, int zero_ok, double *out);
/* A value that must be there: 0, or 2 with "OPT needs WHAT" reported. */
int tfos__opt_need(const char *opt, const char *s, const char *what);
/* The same number check, silent: 0, or -1. */
int tfos__parse_int(const char *s, int lo, int hi, int *out);

/* ---- the cluster options -------------------------------------------------- */

#define TFOS__CLUSTER_OPTIONS                                                                                          \
    "cluster options:\n"                                                                                               \
    "  --workers N              worker nodes (besides the chief)\n"                                                    \
    "  --ps M                   parameter-server nodes (default 0)\n"                                                  \
    "  --chief                  add one chief node\n"                                                                  \
    "  --evaluator              add one evaluator node\n"                                                              \
    "  --reservation-timeout S  seconds for every node to register (run: " TFOS__STR(                                  \
        TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL) ", coordinator: " TFOS__STR(TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK) ")\n" \
    "  --grace S                seconds between SIGTERM and SIGKILL when stopping (default " TFOS__STR(                \
        TFOS_DEFAULT_STOP_GRACE) ")\n"                                                                                 \
    "  --failure-grace S        the same for the survivors of a failed node (default " TFOS__STR(                      \
        TFOS_DEFAULT_FAILURE_GRACE) ")\n"                                                                              \
    "  --heartbeat-timeout S    a node silent this long has failed (default " TFOS__STR(                               \
        TFOS_DEFAULT_HEARTBEAT_TIMEOUT) ")\n"

/* The cluster's shape and timings, as the options say. */
typedef struct tfos__cluster_cli {
    tfos_layout layout;
    int have_workers;          /* --workers was given */
    double reservation_timeout, grace, failure_grace, heartbeat_timeout; /* 0: the default (but failure_grace) */
} tfos__cluster_cli;

/* Defaults: failure_grace TFOS_DEFAULT_FAILURE_GRACE, the rest 0. */
void tfos__cluster_init(tfos__cluster_cli *c);
/* Option opt (the iterator's current argument) if it is a cluster option:
 * 1 taken, 0 not one, 2 a usage error (reported). */
int tfos__cluster_option(tfos__cluster_cli *c, tfos__args *it, const char *opt);
/* A cluster needs a worker or a chief: 0, or 2 with "CMD needs --workers N
 * (or --chief)" or the --workers 0 error reported. */
int tfos__cluster_check(const tfos__cluster_cli *c, const char *cmd);

#endif
