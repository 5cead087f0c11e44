/* yarn_opts.h: tfos yarn's client options (yarn_opts.c): the ones only the
 * submitting side takes (queue, containers, what to ship), which the
 * ApplicationMaster's launcher never sees. Their one table: tfos yarn and
 * tfos yarn serve parse them, the other commands name them as tfos yarn's. */
#ifndef TFOS_CLI_YARN_OPTS_H
#define TFOS_CLI_YARN_OPTS_H

#include "cli/common.h"

enum { YARN_ROLE_WORKER = 0, YARN_ROLE_PS, YARN_ROLE_CHIEF, YARN_ROLE_EVALUATOR, YARN_ROLES };

typedef struct tfos__yarn_cli {
    const char *queue, *app_name, *hadoop_classpath;
    const char *principal, *keytab; /* Kerberos: the keytab's absolute path (kept until exit) */
    const char *view_acl, *modify_acl; /* YARN application ACLs (NULL: the owner and admins only) */
    int am_attempts; /* ApplicationMaster attempts YARN may make (0: the default, 1) */
    int am_memory_mb, res_mb[YARN_ROLES], res_vcores[YARN_ROLES], res_gpus[YARN_ROLES]; /* 0: the default */
    const char *archives[64], *files[64], *envs[64];
    int narchives, nfiles, nenvs;
    double accept_timeout; /* 0: the default */
} tfos__yarn_cli;

/* Option opt (the iterator's current argument) if it is a client option:
 * 1 taken (with its value), 0 not one, 2 a usage error (reported). */
int tfos__yarn_option(tfos__yarn_cli *y, tfos__args *it, const char *opt);
/* --keytab's value as an absolute path (static storage), or NULL after
 * saying why it cannot be read. */
const char *tfos__yarn_keytab(const char *value);
/* What --principal without --keytab (or the reverse) is told. */
#define TFOS_YARN_LOGIN_PAIR "--principal and --keytab go together (or neither: the ticket cache kinit filled)"
/* Is arg (--opt or --opt=value) a client option (each takes a value;
 * *has_value: given after '=')? */
int tfos__yarn_client_only(const char *arg, int *has_value);
/* For commands that take none: when opt is a client option, report "OPT is
 * an option of tfos yarn" and return 2; else 0. */
int tfos__yarn_option_elsewhere(const char *opt);

#endif
